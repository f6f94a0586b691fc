/**
 * A direct protobuf encoder for `ModelInferResponse` and `ModelStreamInferResponse`, the messages
 * on the gRPC hot path. It sizes the message first and writes it into one buffer, so output
 * tensor bytes are copied exactly once (the generic writer copies them into a growing buffer and
 * again when finishing). The bytes are those the generated encoder produces (tested).
 */
import type * as pb from './generated/grpc_service.js';

const TAG_STRING_1 = 0x0a; // field 1, length-delimited
const TAG_STRING_2 = 0x12;
const TAG_STRING_3 = 0x1a;
const TAG_LEN_4 = 0x22;
const TAG_LEN_5 = 0x2a;
const TAG_LEN_6 = 0x32;

function varintSize(n: number): number {
  if (n < 0x80) return 1;
  if (n < 0x4000) return 2;
  if (n < 0x200000) return 3;
  if (n < 0x10000000) return 4;
  let size = 5;
  n = Math.floor(n / 0x800000000);
  while (n > 0) {
    size++;
    n = Math.floor(n / 0x80);
  }
  return size;
}

const U64 = (1n << 64n) - 1n;

/** Size of a 64-bit varint (negative int64 values take 10 bytes, two's complement). */
function bigVarintSize(v: bigint): number {
  // Dimensions and most parameters: plain numbers, no BigInt arithmetic.
  if (v >= 0n && v <= 0x7fffffffn) return varintSize(Number(v));
  let u = v & U64;
  let size = 1;
  while (u >= 0x80n) {
    u >>= 7n;
    size++;
  }
  return size;
}

/**
 * UTF-8 bytes of the short strings every response repeats (model, version, output names,
 * datatypes, parameter keys), so that each is measured and encoded once. Bounded: once full,
 * other strings are encoded each time.
 */
const encodedStrings = new Map<string, Buffer>();
const MAX_CACHED_STRINGS = 4096;
const MAX_CACHED_LENGTH = 64;

function utf8(s: string): Buffer | undefined {
  let bytes = encodedStrings.get(s);
  if (bytes === undefined && s.length <= MAX_CACHED_LENGTH && encodedStrings.size < MAX_CACHED_STRINGS) {
    bytes = Buffer.from(s, 'utf8');
    encodedStrings.set(s, bytes);
  }
  return bytes;
}

function stringSize(s: string): number {
  return Buffer.byteLength(s, 'utf8');
}

/** `stringSize` of a repeated string (see `encodedStrings`). */
function nameSize(s: string): number {
  return utf8(s)?.byteLength ?? Buffer.byteLength(s, 'utf8');
}

/** Length-delimited field: tag + length varint + payload. */
function fieldSize(payload: number): number {
  return 1 + varintSize(payload) + payload;
}

function parameterSize(p: pb.InferParameter): number {
  let size = 0;
  if (p.bool_param !== undefined) size += 2;
  if (p.int64_param !== undefined) size += 1 + bigVarintSize(p.int64_param);
  if (p.string_param !== undefined) size += fieldSize(stringSize(p.string_param));
  if (p.double_param !== undefined) size += 9;
  if (p.uint64_param !== undefined) size += 1 + bigVarintSize(p.uint64_param);
  return size;
}

function parametersSize(params: Readonly<Record<string, pb.InferParameter>>, sizes: number[]): number {
  let size = 0;
  for (const key in params) {
    const value = parameterSize(params[key]!);
    const entry = (key === '' ? 0 : fieldSize(nameSize(key))) + fieldSize(value);
    sizes.push(value, entry);
    size += fieldSize(entry);
  }
  return size;
}

class Out {
  readonly buf: Buffer;
  pos = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  byte(b: number): void {
    this.buf[this.pos++] = b;
  }
  varint(n: number): void {
    while (n >= 0x80) {
      this.buf[this.pos++] = (n % 0x80) | 0x80;
      n = Math.floor(n / 0x80);
    }
    this.buf[this.pos++] = n;
  }
  bigVarint(v: bigint): void {
    if (v >= 0n && v <= 0x7fffffffn) return this.varint(Number(v));
    let u = v & U64;
    while (u >= 0x80n) {
      this.buf[this.pos++] = Number(u & 0x7fn) | 0x80;
      u >>= 7n;
    }
    this.buf[this.pos++] = Number(u);
  }
  string(tag: number, s: string): void {
    this.byte(tag);
    this.varint(Buffer.byteLength(s, 'utf8'));
    this.pos += this.buf.write(s, this.pos, 'utf8');
  }
  /** `string` for a repeated string (see `encodedStrings`). */
  name(tag: number, s: string): void {
    const bytes = utf8(s);
    if (bytes === undefined) return this.string(tag, s);
    this.byte(tag);
    this.varint(bytes.byteLength);
    this.buf.set(bytes, this.pos);
    this.pos += bytes.byteLength;
  }
  bytes(tag: number, b: Uint8Array): void {
    this.byte(tag);
    this.varint(b.byteLength);
    this.buf.set(b, this.pos);
    this.pos += b.byteLength;
  }
}

function writeParameters(out: Out, tag: number, params: Readonly<Record<string, pb.InferParameter>>, sizes: number[], at: { i: number }): void {
  for (const key in params) {
    const p = params[key]!;
    const value = sizes[at.i++]!;
    const entry = sizes[at.i++]!;
    out.byte(tag);
    out.varint(entry);
    if (key !== '') out.name(TAG_STRING_1, key);
    out.byte(TAG_STRING_2);
    out.varint(value);
    if (p.bool_param !== undefined) {
      out.byte(0x08);
      out.byte(p.bool_param ? 1 : 0);
    }
    if (p.int64_param !== undefined) {
      out.byte(0x10);
      out.bigVarint(p.int64_param);
    }
    if (p.string_param !== undefined) out.string(TAG_STRING_3, p.string_param);
    if (p.double_param !== undefined) {
      out.byte(0x21);
      out.buf.writeDoubleLE(p.double_param, out.pos);
      out.pos += 8;
    }
    if (p.uint64_param !== undefined) {
      out.byte(0x28);
      out.bigVarint(p.uint64_param);
    }
  }
}

/** Sizes of one response: the message, and the nested lengths in write order. */
function responseSizes(m: pb.ModelInferResponse, sizes: number[]): number {
  let size = 0;
  if (m.model_name !== '') size += fieldSize(nameSize(m.model_name));
  if (m.model_version !== '') size += fieldSize(nameSize(m.model_version));
  if (m.id !== '') size += fieldSize(stringSize(m.id));
  size += parametersSize(m.parameters, sizes);
  for (const o of m.outputs) {
    let shape = 0;
    for (const d of o.shape) shape += bigVarintSize(d);
    const at = sizes.length;
    sizes.push(shape, 0);
    let tensor = 0;
    if (o.name !== '') tensor += fieldSize(nameSize(o.name));
    if (o.datatype !== '') tensor += fieldSize(nameSize(o.datatype));
    if (o.shape.length > 0) tensor += fieldSize(shape);
    tensor += parametersSize(o.parameters, sizes);
    if (o.contents !== undefined) {
      throw new Error('encodeModelInferResponse: typed output contents are never sent (protocol.md §4.6)');
    }
    sizes[at + 1] = tensor;
    size += fieldSize(tensor);
  }
  for (const raw of m.raw_output_contents) size += fieldSize(raw.byteLength);
  return size;
}

function writeResponse(out: Out, m: pb.ModelInferResponse, sizes: number[], at: { i: number }): void {
  if (m.model_name !== '') out.name(TAG_STRING_1, m.model_name);
  if (m.model_version !== '') out.name(TAG_STRING_2, m.model_version);
  if (m.id !== '') out.string(TAG_STRING_3, m.id);
  writeParameters(out, TAG_LEN_4, m.parameters, sizes, at);
  for (const o of m.outputs) {
    const shape = sizes[at.i++]!;
    const tensor = sizes[at.i++]!;
    out.byte(TAG_LEN_5);
    out.varint(tensor);
    if (o.name !== '') out.name(TAG_STRING_1, o.name);
    if (o.datatype !== '') out.name(TAG_STRING_2, o.datatype);
    if (o.shape.length > 0) {
      out.byte(TAG_STRING_3);
      out.varint(shape);
      for (const d of o.shape) out.bigVarint(d);
    }
    writeParameters(out, TAG_LEN_4, o.parameters, sizes, at);
  }
  for (const raw of m.raw_output_contents) out.bytes(TAG_LEN_6, raw);
}

/** Callbacks of `whenEncoded`, by message. */
const afterEncoding = new WeakMap<object, () => void>();

/**
 * Runs `done` right after `message` is next encoded by `encodeModelInferResponse` or
 * `encodeModelStreamInferResponse`, that is once its output bytes have been copied into the
 * encoded message, whenever grpc-js serializes it (at once, or later for a stream write that
 * waits behind others). A server hands pooled output buffers back then. A message that is never
 * encoded (its call ended first) never runs `done`.
 */
export function whenEncoded(message: pb.ModelInferResponse | pb.ModelStreamInferResponse, done: () => void): void {
  afterEncoding.set(message, done);
}

function encoded(message: object): void {
  const done = afterEncoding.get(message);
  if (done === undefined) return;
  afterEncoding.delete(message);
  done();
}

/** Encodes a ModelInferResponse into a Buffer of exactly its size. */
export function encodeModelInferResponse(m: pb.ModelInferResponse): Buffer {
  const sizes: number[] = [];
  const out = new Out(responseSizes(m, sizes));
  writeResponse(out, m, sizes, { i: 0 });
  encoded(m);
  return out.buf;
}

/** Encodes a ModelStreamInferResponse (error message and/or response) into one Buffer. */
export function encodeModelStreamInferResponse(m: pb.ModelStreamInferResponse): Buffer {
  const sizes: number[] = [];
  let size = 0;
  if (m.error_message !== '') size += fieldSize(stringSize(m.error_message));
  let inner = 0;
  if (m.infer_response !== undefined) {
    inner = responseSizes(m.infer_response, sizes);
    size += fieldSize(inner);
  }
  const out = new Out(size);
  if (m.error_message !== '') out.string(TAG_STRING_1, m.error_message);
  if (m.infer_response !== undefined) {
    out.byte(TAG_STRING_2);
    out.varint(inner);
    writeResponse(out, m.infer_response, sizes, { i: 0 });
  }
  encoded(m);
  return out.buf;
}
