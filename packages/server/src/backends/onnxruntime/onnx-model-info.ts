/**
 * Reads what the ONNX Runtime backend needs to know about a model before (or instead of) creating
 * a session: IR version, opset imports, the graph's declared inputs and outputs, and initializer
 * names. Used by config auto-complete and validation (models-and-scheduling.md §3.4).
 *
 * Contract: the file is read with positional reads through one file handle; length-delimited
 * fields that are not needed (the node list, tensor `raw_data`, doc strings) are skipped by
 * seeking past them, never decoded, so a multi-gigabyte model costs a few small reads. The handle
 * is always closed. Every failure (missing file, truncation, bytes that are not a ModelProto) is a
 * `NereidError('MODEL_LOAD_FAILED')` whose message names the file and what is wrong.
 *
 * Field numbers are those of onnx/onnx.proto (ModelProto, GraphProto, TensorProto,
 * SparseTensorProto, ValueInfoProto, TypeProto, TensorShapeProto).
 */
import type { FileHandle } from 'node:fs/promises';
import { open, stat } from 'node:fs/promises';
import { join } from 'node:path';
import type { DataType } from '@nereid/protocol';
import { NereidError } from '@nereid/protocol';

/** What a graph input or output is, from its `TypeProto` oneof. */
export type OnnxValueKind = 'tensor' | 'sparse_tensor' | 'sequence' | 'map' | 'optional' | 'opaque' | 'unknown';

/** A graph input or output as declared in the model. */
export interface OnnxValueInfo {
  readonly name: string;
  readonly kind: OnnxValueKind;
  /** `TensorProto.DataType` number; 0 when not a (sparse) tensor or not given. */
  readonly elemType: number;
  /** The Nereid datatype of `elemType` for dense tensors; undefined when unmappable (BFLOAT16, complex, float8, ...). */
  readonly datatype: DataType | undefined;
  /** Dimensions, -1 where symbolic or unknown; `[]` for a scalar; null when no shape is declared. */
  readonly shape: readonly number[] | null;
  /** Per dimension, its symbolic name (`dim_param`) or null; null when no shape is declared. */
  readonly dimParams: readonly (string | null)[] | null;
  /** Whether an initializer has this name (an input that ONNX Runtime may treat as overridable). */
  readonly hasInitializer: boolean;
}

export interface OnnxOpsetImport {
  /** '' for the default ONNX domain (`ai.onnx`). */
  readonly domain: string;
  readonly version: number;
}

export interface OnnxModelInfo {
  /** The file actually read (for a `model.onnx` directory, the `model.onnx` inside it). */
  readonly path: string;
  readonly irVersion: number;
  readonly opsetImports: readonly OnnxOpsetImport[];
  readonly producerName: string;
  readonly producerVersion: string;
  readonly graphName: string;
  readonly inputs: readonly OnnxValueInfo[];
  readonly outputs: readonly OnnxValueInfo[];
  /** Names of dense and sparse initializers, in file order. */
  readonly initializerNames: readonly string[];
  /** Distinct `location`s of external tensor data, relative to the model file's directory. */
  readonly externalDataLocations: readonly string[];
  /** `metadata_props`. */
  readonly metadata: Readonly<Record<string, string>>;
  /** Bytes read from the file (a diagnostic: small even for huge models). */
  readonly bytesRead: number;
}

const ELEM_TYPE_NAMES: readonly string[] = [
  'UNDEFINED', 'FLOAT', 'UINT8', 'INT8', 'UINT16', 'INT16', 'INT32', 'INT64', 'STRING', 'BOOL', 'FLOAT16',
  'DOUBLE', 'UINT32', 'UINT64', 'COMPLEX64', 'COMPLEX128', 'BFLOAT16', 'FLOAT8E4M3FN', 'FLOAT8E4M3FNUZ',
  'FLOAT8E5M2', 'FLOAT8E5M2FNUZ', 'UINT4', 'INT4', 'FLOAT4E2M1', 'FLOAT8E8M0', 'UINT2', 'INT2',
];

/** ONNX element types with a Nereid datatype (models-and-scheduling.md §2.3; BFLOAT16 has none). */
const DATATYPE_BY_ELEM_TYPE: ReadonlyMap<number, DataType> = new Map<number, DataType>([
  [1, 'FP32'],
  [2, 'UINT8'],
  [3, 'INT8'],
  [4, 'UINT16'],
  [5, 'INT16'],
  [6, 'INT32'],
  [7, 'INT64'],
  [8, 'BYTES'],
  [9, 'BOOL'],
  [10, 'FP16'],
  [11, 'FP64'],
  [12, 'UINT32'],
  [13, 'UINT64'],
]);

/** The Nereid datatype of an ONNX `TensorProto.DataType` number, or undefined if it has none. */
export function onnxElemTypeToDataType(elemType: number): DataType | undefined {
  return DATATYPE_BY_ELEM_TYPE.get(elemType);
}

/** The ONNX name of an element type number (`1` → `FLOAT`), for messages. */
export function onnxElemTypeName(elemType: number): string {
  return ELEM_TYPE_NAMES[elemType] ?? `type ${elemType}`;
}

/**
 * Reads the model at `path`: an ONNX file, or a directory holding `model.onnx` (the directory
 * form of models-and-scheduling.md §1.3). Throws NereidError('MODEL_LOAD_FAILED').
 */
export async function readOnnxModelInfo(path: string): Promise<OnnxModelInfo> {
  let file = path;
  try {
    if ((await stat(path)).isDirectory()) file = join(path, 'model.onnx');
  } catch (err) {
    throw fsError(path, err);
  }
  let handle: FileHandle;
  try {
    handle = await open(file, 'r');
  } catch (err) {
    throw fsError(file, err);
  }
  try {
    const size = (await handle.stat()).size;
    if (size === 0) throw new NereidError('MODEL_LOAD_FAILED', `ONNX model '${file}' is empty (0 bytes)`);
    const cursor = new FileCursor(handle, size, file);
    return await parseModel(cursor);
  } catch (err) {
    if (err instanceof NereidError) throw err;
    throw fsError(file, err);
  } finally {
    await handle.close().catch(() => undefined);
  }
}

function fsError(file: string, err: unknown): NereidError {
  const code = (err as { code?: unknown } | null)?.code;
  const reason =
    code === 'ENOENT' ? 'no such file or directory'
    : code === 'EACCES' ? 'permission denied'
    : code === 'EISDIR' ? 'is a directory'
    : err instanceof Error ? err.message
    : String(err);
  return new NereidError('MODEL_LOAD_FAILED', `cannot read ONNX model '${file}': ${reason}`, { cause: err });
}

// ---- the ModelProto walk --------------------------------------------------------------------

interface GraphAcc {
  name: string;
  inputs: Omit<OnnxValueInfo, 'hasInitializer'>[];
  outputs: Omit<OnnxValueInfo, 'hasInitializer'>[];
  initializers: string[];
  external: Set<string>;
}

async function parseModel(c: FileCursor): Promise<OnnxModelInfo> {
  const head = await c.peek(32);
  let irVersion: number | undefined;
  let producerName = '';
  let producerVersion = '';
  const opsetImports: OnnxOpsetImport[] = [];
  const metadata: Record<string, string> = {};
  let graph: GraphAcc | undefined;
  const end = c.size;
  try {
    while (c.pos < end) {
      const [field, wire] = await c.tag(end);
      switch (field) {
        case 1:
          expectWire(wire, WIRE_VARINT, 'ModelProto.ir_version');
          irVersion = await c.varint(end, true);
          break;
        case 2:
          expectWire(wire, WIRE_LEN, 'ModelProto.producer_name');
          producerName = await c.string(end, 'ModelProto.producer_name');
          break;
        case 3:
          expectWire(wire, WIRE_LEN, 'ModelProto.producer_version');
          producerVersion = await c.string(end, 'ModelProto.producer_version');
          break;
        case 7: {
          expectWire(wire, WIRE_LEN, 'ModelProto.graph');
          const n = await c.length(end, 'the graph (ModelProto.graph)');
          graph ??= { name: '', inputs: [], outputs: [], initializers: [], external: new Set() };
          await parseGraph(c, c.pos + n, graph);
          break;
        }
        case 8: {
          expectWire(wire, WIRE_LEN, 'ModelProto.opset_import');
          opsetImports.push(parseOpset(await c.decoder(end, 'ModelProto.opset_import')));
          break;
        }
        case 14: {
          expectWire(wire, WIRE_LEN, 'ModelProto.metadata_props');
          const [key, value] = parseEntry(await c.decoder(end, 'ModelProto.metadata_props'));
          // defineProperty: a key such as '__proto__' must stay a plain entry.
          Object.defineProperty(metadata, key, { value, enumerable: true, writable: true, configurable: true });
          break;
        }
        default:
          await c.skip(wire, end, `ModelProto field ${field}`);
      }
    }
  } catch (err) {
    if (!(err instanceof DecodeError)) throw err;
    const hint = isLfsPointer(head)
      ? ' The file is a Git LFS pointer, not the model: fetch the real file (git lfs pull).'
      : ' Is it a complete ONNX file?';
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `ONNX model '${c.path}' is ${err.truncated ? 'truncated' : 'malformed'}: ${err.message}.${hint}`,
      { cause: err },
    );
  }
  if (graph === undefined) {
    throw new NereidError(
      'MODEL_LOAD_FAILED',
      `ONNX model '${c.path}' has no graph (ModelProto field 7)${isLfsPointer(head) ? '; it is a Git LFS pointer, not the model (git lfs pull)' : '; is it an ONNX model?'}`,
    );
  }
  if (irVersion === undefined || irVersion <= 0) {
    throw new NereidError('MODEL_LOAD_FAILED', `ONNX model '${c.path}' has no ir_version (ModelProto field 1); is it an ONNX model?`);
  }
  const initializers = new Set(graph.initializers);
  const withInit = (v: Omit<OnnxValueInfo, 'hasInitializer'>): OnnxValueInfo => ({ ...v, hasInitializer: initializers.has(v.name) });
  return {
    path: c.path,
    irVersion,
    opsetImports,
    producerName,
    producerVersion,
    graphName: graph.name,
    inputs: graph.inputs.map(withInit),
    outputs: graph.outputs.map(withInit),
    initializerNames: graph.initializers,
    externalDataLocations: [...graph.external],
    metadata,
    bytesRead: c.bytesRead,
  };
}

/** GraphProto: the node list (1) and value_info (13) are skipped unread. */
async function parseGraph(c: FileCursor, end: number, acc: GraphAcc): Promise<void> {
  while (c.pos < end) {
    const [field, wire] = await c.tag(end);
    switch (field) {
      case 2:
        expectWire(wire, WIRE_LEN, 'GraphProto.name');
        acc.name = await c.string(end, 'GraphProto.name');
        break;
      case 5: {
        expectWire(wire, WIRE_LEN, 'GraphProto.initializer');
        const n = await c.length(end, 'an initializer (GraphProto.initializer)');
        const tensor = await parseTensorHeader(c, c.pos + n);
        acc.initializers.push(tensor.name);
        if (tensor.location !== undefined) acc.external.add(tensor.location);
        break;
      }
      case 15: {
        expectWire(wire, WIRE_LEN, 'GraphProto.sparse_initializer');
        const n = await c.length(end, 'a sparse initializer (GraphProto.sparse_initializer)');
        const sparseEnd = c.pos + n;
        while (c.pos < sparseEnd) {
          const [f, w] = await c.tag(sparseEnd);
          if (f === 1 && w === WIRE_LEN) {
            const m = await c.length(sparseEnd, 'SparseTensorProto.values');
            const values = await parseTensorHeader(c, c.pos + m);
            acc.initializers.push(values.name);
            if (values.location !== undefined) acc.external.add(values.location);
          } else {
            await c.skip(w, sparseEnd, `SparseTensorProto field ${f}`);
          }
        }
        break;
      }
      case 11:
        expectWire(wire, WIRE_LEN, 'GraphProto.input');
        acc.inputs.push(parseValueInfo(await c.decoder(end, 'a graph input (GraphProto.input)')));
        break;
      case 12:
        expectWire(wire, WIRE_LEN, 'GraphProto.output');
        acc.outputs.push(parseValueInfo(await c.decoder(end, 'a graph output (GraphProto.output)')));
        break;
      default:
        await c.skip(wire, end, field === 1 ? 'a node (GraphProto.node)' : `GraphProto field ${field}`);
    }
  }
}

/** TensorProto: only name (8), external_data (13) and data_location (14); data is skipped. */
async function parseTensorHeader(c: FileCursor, end: number): Promise<{ name: string; location: string | undefined }> {
  let name = '';
  let location: string | undefined;
  let external = false;
  while (c.pos < end) {
    const [field, wire] = await c.tag(end);
    if (field === 8 && wire === WIRE_LEN) {
      name = await c.string(end, 'TensorProto.name');
    } else if (field === 13 && wire === WIRE_LEN) {
      const [key, value] = parseEntry(await c.decoder(end, 'TensorProto.external_data'));
      if (key === 'location') location = value;
    } else if (field === 14 && wire === WIRE_VARINT) {
      external = (await c.varint(end)) === 1;
    } else {
      await c.skip(wire, end, field === 9 ? 'TensorProto.raw_data' : `TensorProto field ${field}`);
    }
  }
  return { name, location: external ? location : undefined };
}

function parseOpset(d: Decoder): OnnxOpsetImport {
  let domain = '';
  let version = 0;
  while (!d.done) {
    const [field, wire] = d.tag();
    if (field === 1 && wire === WIRE_LEN) domain = d.string();
    else if (field === 2 && wire === WIRE_VARINT) version = d.varint(true);
    else d.skip(wire);
  }
  return { domain, version };
}

function parseEntry(d: Decoder): [string, string] {
  let key = '';
  let value = '';
  while (!d.done) {
    const [field, wire] = d.tag();
    if (field === 1 && wire === WIRE_LEN) key = d.string();
    else if (field === 2 && wire === WIRE_LEN) value = d.string();
    else d.skip(wire);
  }
  return [key, value];
}

function parseValueInfo(d: Decoder): Omit<OnnxValueInfo, 'hasInitializer'> {
  let name = '';
  let type: TypeInfo = { kind: 'unknown', elemType: 0, shape: null, dimParams: null };
  while (!d.done) {
    const [field, wire] = d.tag();
    if (field === 1 && wire === WIRE_LEN) name = d.string();
    else if (field === 2 && wire === WIRE_LEN) type = parseType(d.message());
    else d.skip(wire);
  }
  const datatype = type.kind === 'tensor' ? onnxElemTypeToDataType(type.elemType) : undefined;
  return { name, kind: type.kind, elemType: type.elemType, datatype, shape: type.shape, dimParams: type.dimParams };
}

interface TypeInfo {
  kind: OnnxValueKind;
  elemType: number;
  shape: number[] | null;
  dimParams: (string | null)[] | null;
}

/** TypeProto: tensor_type (1), sequence_type (4), map_type (5), opaque_type (7), sparse_tensor_type (8), optional_type (9). */
function parseType(d: Decoder): TypeInfo {
  let info: TypeInfo = { kind: 'unknown', elemType: 0, shape: null, dimParams: null };
  while (!d.done) {
    const [field, wire] = d.tag();
    if (wire !== WIRE_LEN) {
      d.skip(wire);
      continue;
    }
    switch (field) {
      case 1:
        info = { kind: 'tensor', ...parseTensorType(d.message()) };
        break;
      case 8:
        info = { kind: 'sparse_tensor', ...parseTensorType(d.message()) };
        break;
      case 4:
      case 5:
      case 7:
      case 9:
        d.skip(wire);
        info = { kind: NON_TENSOR_KINDS[field]!, elemType: 0, shape: null, dimParams: null };
        break;
      default:
        d.skip(wire);
    }
  }
  return info;
}

const NON_TENSOR_KINDS: Readonly<Record<number, OnnxValueKind>> = { 4: 'sequence', 5: 'map', 7: 'opaque', 9: 'optional' };

/** TypeProto.Tensor / TypeProto.SparseTensor: elem_type (1), shape (2). */
function parseTensorType(d: Decoder): Omit<TypeInfo, 'kind'> {
  let elemType = 0;
  let shape: number[] | null = null;
  let dimParams: (string | null)[] | null = null;
  while (!d.done) {
    const [field, wire] = d.tag();
    if (field === 1 && wire === WIRE_VARINT) {
      elemType = d.varint(true);
    } else if (field === 2 && wire === WIRE_LEN) {
      shape ??= [];
      dimParams ??= [];
      const s = d.message();
      while (!s.done) {
        const [f, w] = s.tag();
        if (f === 1 && w === WIRE_LEN) {
          const [value, param] = parseDimension(s.message());
          shape.push(value);
          dimParams.push(param);
        } else {
          s.skip(w);
        }
      }
    } else {
      d.skip(wire);
    }
  }
  return { elemType, shape, dimParams };
}

/** TensorShapeProto.Dimension: oneof dim_value (1) / dim_param (2); neither means unknown. */
function parseDimension(d: Decoder): [number, string | null] {
  let value = -1;
  let param: string | null = null;
  while (!d.done) {
    const [field, wire] = d.tag();
    if (field === 1 && wire === WIRE_VARINT) {
      const v = d.varint(true);
      value = v >= 0 ? v : -1;
      param = null;
    } else if (field === 2 && wire === WIRE_LEN) {
      param = d.string();
      value = -1;
    } else {
      d.skip(wire);
    }
  }
  return [value, param];
}

function isLfsPointer(head: Uint8Array): boolean {
  return Buffer.from(head).toString('latin1').startsWith('version https://git-lfs');
}

// ---- protobuf decoding ------------------------------------------------------------------------

const WIRE_VARINT = 0;
const WIRE_I64 = 1;
const WIRE_LEN = 2;
const WIRE_I32 = 5;

/** Bytes read ahead per positional read. */
const CHUNK = 64 * 1024;
/** Largest message decoded in memory (a ValueInfoProto, an opset entry, a name). */
const MAX_IN_MEMORY = 64 * 1024 * 1024;
const TWO_POW_32 = 0x1_0000_0000;

/** A decoding failure; `parseModel` turns it into a NereidError naming the file. */
class DecodeError extends Error {
  readonly truncated: boolean;
  constructor(message: string, truncated = false) {
    super(message);
    this.truncated = truncated;
  }
}

/**
 * Decodes the varint at `buf[pos]`, reading no further than `limit`, and stores the position
 * after it in `out.next`. `signed` reads it as a two's-complement int64. Values beyond 2^53
 * lose precision, which no field read here reaches legitimately.
 */
function decodeVarint(buf: Uint8Array, pos: number, limit: number, signed: boolean, out: { next: number }): number {
  let lo = 0;
  let hi = 0;
  let i = 0;
  for (; ; i++) {
    if (i === 10) throw new DecodeError('a varint is longer than 10 bytes');
    if (pos + i >= limit) throw new DecodeError('a varint runs past the end of its message', true);
    const b = buf[pos + i]!;
    if (i < 4) lo |= (b & 0x7f) << (7 * i);
    else if (i === 4) {
      lo |= (b & 0x0f) << 28;
      hi |= (b & 0x7f) >>> 4;
    } else hi |= (b & 0x7f) << (7 * i - 32);
    if ((b & 0x80) === 0) break;
  }
  out.next = pos + i + 1;
  lo >>>= 0;
  hi >>>= 0;
  if (signed && hi >= 0x8000_0000) {
    // -(two's complement) = ~value + 1, carried from the low word into the high word.
    const nlo = (~lo >>> 0) + 1;
    return -((~hi >>> 0) * TWO_POW_32 + nlo);
  }
  return hi * TWO_POW_32 + lo;
}

function splitTag(tag: number): [field: number, wire: number] {
  const field = Math.floor(tag / 8);
  if (field === 0) throw new DecodeError('a field tag has field number 0');
  return [field, tag % 8];
}

function badWire(wire: number): DecodeError {
  return new DecodeError(
    wire === 3 || wire === 4 ? `a protobuf group (wire type ${wire}), which ONNX never uses` : `an invalid wire type ${wire}`,
  );
}

function expectWire(wire: number, expected: number, what: string): void {
  if (wire !== expected) throw new DecodeError(`${what} has wire type ${wire}, expected ${expected}`);
}

/** A synchronous decoder over one small message held in memory. */
class Decoder {
  readonly #buf: Uint8Array;
  /** File offset of `#buf[0]`, for messages. */
  readonly #base: number;
  #pos = 0;
  readonly #out = { next: 0 };

  constructor(buf: Uint8Array, base: number) {
    this.#buf = buf;
    this.#base = base;
  }

  get done(): boolean {
    return this.#pos >= this.#buf.length;
  }

  varint(signed = false): number {
    try {
      const v = decodeVarint(this.#buf, this.#pos, this.#buf.length, signed, this.#out);
      this.#pos = this.#out.next;
      return v;
    } catch (err) {
      if (!(err instanceof DecodeError)) throw err;
      const at = this.#base + this.#pos;
      throw new DecodeError(
        err.truncated ? `a varint at byte ${at} runs past the end of its message` : `a varint at byte ${at} is longer than 10 bytes`,
      );
    }
  }

  tag(): [field: number, wire: number] {
    return splitTag(this.varint());
  }

  #length(): number {
    const at = this.#base + this.#pos;
    const n = this.varint();
    if (n > this.#buf.length - this.#pos) {
      throw new DecodeError(`a field at byte ${at} declares ${n} bytes, past the end of its enclosing message`);
    }
    return n;
  }

  string(): string {
    const n = this.#length();
    const s = Buffer.from(this.#buf.buffer, this.#buf.byteOffset + this.#pos, n).toString('utf8');
    this.#pos += n;
    return s;
  }

  message(): Decoder {
    const n = this.#length();
    const start = this.#pos;
    this.#pos += n;
    return new Decoder(this.#buf.subarray(start, start + n), this.#base + start);
  }

  skip(wire: number): void {
    switch (wire) {
      case WIRE_VARINT:
        this.varint();
        return;
      case WIRE_LEN: {
        const n = this.#length(); // read first: `pos += length()` would add to the old pos
        this.#pos += n;
        return;
      }
      case WIRE_I64:
      case WIRE_I32: {
        const n = wire === WIRE_I64 ? 8 : 4;
        if (this.#pos + n > this.#buf.length) {
          throw new DecodeError(`a fixed-width field at byte ${this.#base + this.#pos} runs past the end of its message`);
        }
        this.#pos += n;
        return;
      }
      default:
        throw badWire(wire);
    }
  }
}

/**
 * Positional reads over the model file through a read-ahead window. `pos` only moves forward
 * in practice; a skip just advances it, so skipped bytes are never read.
 */
class FileCursor {
  readonly #handle: FileHandle;
  readonly size: number;
  readonly path: string;
  pos = 0;
  bytesRead = 0;
  #buf: Buffer = Buffer.allocUnsafe(CHUNK);
  #bufStart = 0;
  #bufLen = 0;
  readonly #out = { next: 0 };

  constructor(handle: FileHandle, size: number, path: string) {
    this.#handle = handle;
    this.size = size;
    this.path = path;
  }

  /** Makes bytes [pos, pos + n) resident; n must not exceed size - pos. */
  async #fill(n: number): Promise<void> {
    if (this.pos >= this.#bufStart && this.pos + n <= this.#bufStart + this.#bufLen) return;
    const want = Math.min(Math.max(n, CHUNK), this.size - this.pos);
    if (this.#buf.length < want) this.#buf = Buffer.allocUnsafe(want);
    let got = 0;
    while (got < want) {
      const { bytesRead } = await this.#handle.read(this.#buf, got, want - got, this.pos + got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    this.bytesRead += got;
    this.#bufStart = this.pos;
    this.#bufLen = got;
    if (got < n) throw new DecodeError(`the file ended at byte ${this.pos + got} while reading (it shrank while being read?)`, true);
  }

  /** A copy of the first `n` bytes of the file (fewer if it is shorter); does not move `pos`. */
  async peek(n: number): Promise<Uint8Array> {
    const keep = this.pos;
    this.pos = 0;
    const len = Math.min(n, this.size);
    await this.#fill(len);
    const out = Uint8Array.prototype.slice.call(this.#buf, 0, len);
    this.pos = keep;
    return out;
  }

  async varint(end: number, signed = false): Promise<number> {
    const at = this.pos;
    await this.#fill(Math.min(10, end - this.pos));
    const offset = this.pos - this.#bufStart;
    const limit = Math.min(this.#bufLen, end - this.#bufStart);
    try {
      const v = decodeVarint(this.#buf, offset, limit, signed, this.#out);
      this.pos = this.#bufStart + this.#out.next;
      return v;
    } catch (err) {
      if (!(err instanceof DecodeError)) throw err;
      if (err.truncated) {
        const eof = end === this.size;
        throw new DecodeError(
          eof ? `a varint at byte ${at} is cut off by the end of the file` : `a varint at byte ${at} runs past the end of its message`,
          eof,
        );
      }
      throw new DecodeError(`a varint at byte ${at} is longer than 10 bytes`);
    }
  }

  async tag(end: number): Promise<[field: number, wire: number]> {
    return splitTag(await this.varint(end));
  }

  /** A length prefix, checked against `end` (the enclosing message's end) and the file size. */
  async length(end: number, what: string): Promise<number> {
    const at = this.pos;
    const n = await this.varint(end);
    if (n > end - this.pos) {
      if (this.pos + n > this.size) {
        throw new DecodeError(
          `${what} at byte ${at} declares ${n} bytes but the file ends ${this.size - this.pos} bytes later (file size ${this.size})`,
          true,
        );
      }
      throw new DecodeError(`${what} at byte ${at} declares ${n} bytes, past the end of its enclosing message`);
    }
    return n;
  }

  /** Reads a length-delimited field (at most MAX_IN_MEMORY bytes) into an in-memory Decoder. */
  async decoder(end: number, what: string): Promise<Decoder> {
    const n = await this.length(end, what);
    if (n > MAX_IN_MEMORY) throw new DecodeError(`${what} at byte ${this.pos} is ${n} bytes, more than any model header needs`);
    const base = this.pos;
    await this.#fill(n);
    const offset = this.pos - this.#bufStart;
    const copy = Uint8Array.prototype.slice.call(this.#buf, offset, offset + n);
    this.pos += n;
    return new Decoder(copy, base);
  }

  async string(end: number, what: string): Promise<string> {
    const n = await this.length(end, what);
    if (n > MAX_IN_MEMORY) throw new DecodeError(`${what} at byte ${this.pos} is ${n} bytes long`);
    await this.#fill(n);
    const offset = this.pos - this.#bufStart;
    this.pos += n;
    return this.#buf.toString('utf8', offset, offset + n);
  }

  async skip(wire: number, end: number, what: string): Promise<void> {
    switch (wire) {
      case WIRE_VARINT:
        await this.varint(end);
        return;
      case WIRE_LEN: {
        const n = await this.length(end, what); // read first: `pos += await length()` would add to the old pos
        this.pos += n;
        return;
      }
      case WIRE_I64:
      case WIRE_I32: {
        const n = wire === WIRE_I64 ? 8 : 4;
        if (this.pos + n > end) {
          const eof = this.pos + n > this.size;
          throw new DecodeError(`${what} at byte ${this.pos} runs past the end of ${eof ? 'the file' : 'its message'}`, eof);
        }
        this.pos += n;
        return;
      }
      default:
        throw new DecodeError(`${what} at byte ${this.pos} has ${badWire(wire).message}`);
    }
  }
}
