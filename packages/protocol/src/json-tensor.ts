/**
 * Conversion between HTTP JSON tensor `data` (protocol.md §3.7.1, §3.7.2) and raw little-endian
 * tensor bytes (§2.3), plus typed-array views over raw tensor bytes.
 */
import { encodeBytesElements, decodeBytesElements } from './bytes-tensor.js';
import type { DataType } from './datatypes.js';
import { elementSize } from './datatypes.js';
import { NereidError } from './errors.js';

/** Deepest nesting of JSON `data` accepted, the outermost array being level 1 (§3.7.1). */
export const MAX_JSON_DATA_DEPTH = 100;

/** The typed array that views each datatype's raw bytes (`typedArrayOf`). BYTES has none. */
export interface TypedArrayByDataType {
  BOOL: Uint8Array;
  UINT8: Uint8Array;
  UINT16: Uint16Array;
  UINT32: Uint32Array;
  UINT64: BigUint64Array;
  INT8: Int8Array;
  INT16: Int16Array;
  INT32: Int32Array;
  INT64: BigInt64Array;
  FP16: Uint16Array;
  FP32: Float32Array;
  FP64: Float64Array;
  BF16: Uint16Array;
  BYTES: never;
}

export type TensorTypedArray = TypedArrayByDataType[Exclude<DataType, 'BYTES'>];

// Typed arrays use the platform's byte order and the wire is little-endian (§0); every platform
// Node supports in practice is little-endian, and the views below rely on it.
if (new Uint8Array(new Uint16Array([1]).buffer)[0] !== 1) {
  throw new NereidError('UNSUPPORTED', '@nereid/protocol requires a little-endian platform');
}

/**
 * A typed array over `data`'s bytes: a view sharing its memory when `data.byteOffset` is a
 * multiple of the element size, otherwise a view over an aligned copy. Writes through the result
 * reach `data` only in the first case. FP16/BF16 come back as their raw 16-bit patterns.
 * Throws NereidError('INTERNAL') for BYTES (no fixed-size view exists; see bytes-tensor.ts) or a
 * byte length that is not a whole number of elements — callers validate sizes first.
 */
export function typedArrayOf<D extends DataType>(datatype: D, data: Uint8Array): TypedArrayByDataType[D];
export function typedArrayOf(datatype: DataType, data: Uint8Array): TensorTypedArray {
  const size = elementSize(datatype);
  if (size === 0) {
    throw new NereidError('INTERNAL', 'BYTES tensors have no typed-array view; use decodeBytesElements');
  }
  if (data.byteLength % size !== 0) {
    throw new NereidError(
      'INTERNAL',
      `${data.byteLength} bytes is not a whole number of ${datatype} elements of ${size} bytes`,
    );
  }
  let bytes = data;
  if (data.byteOffset % size !== 0) {
    bytes = new Uint8Array(data.byteLength);
    bytes.set(data);
  }
  const { buffer, byteOffset } = bytes;
  const n = bytes.byteLength / size;
  switch (datatype) {
    case 'BOOL':
    case 'UINT8':
      return new Uint8Array(buffer, byteOffset, n);
    case 'INT8':
      return new Int8Array(buffer, byteOffset, n);
    case 'UINT16':
    case 'FP16':
    case 'BF16':
      return new Uint16Array(buffer, byteOffset, n);
    case 'INT16':
      return new Int16Array(buffer, byteOffset, n);
    case 'UINT32':
      return new Uint32Array(buffer, byteOffset, n);
    case 'INT32':
      return new Int32Array(buffer, byteOffset, n);
    case 'UINT64':
      return new BigUint64Array(buffer, byteOffset, n);
    case 'INT64':
      return new BigInt64Array(buffer, byteOffset, n);
    case 'FP32':
      return new Float32Array(buffer, byteOffset, n);
    case 'FP64':
      return new Float64Array(buffer, byteOffset, n);
    default:
      throw new NereidError('INTERNAL', `no typed array for datatype ${String(datatype)}`);
  }
}

/**
 * Converts JSON `data` (§3.7.1) of an input into its raw tensor bytes (§2.3); returns a new
 * Buffer the caller owns.
 *
 * `data` is a flat or nested array (nesting ≤ MAX_JSON_DATA_DEPTH) whose leaves are consumed in
 * order and must number exactly `elementCount`; when `elementCount` is 0, `data` is not read.
 * Leaves: BOOL takes true/false; integer types take integers given as number or bigint (as
 * `parseJson` yields), unsigned ones non-negative, each truncated to the element width (two's
 * complement wrap, no range check, as Triton does); FP32/FP64 take any number or bigint; BYTES
 * takes strings, stored length-prefixed as UTF-8.
 *
 * Errors (`what` names the tensor, e.g. "input 'INPUT0' of model 'simple'"):
 * - FP16/BF16 → INPUT_JSON_UNSUPPORTED (INVALID_ARG), telling the client to send binary data;
 * - leaf count ≠ `elementCount` → REQUEST_JSON_DATA (INTERNAL, as Triton reports it), "Unable to
 *   parse 'data': Shape does not match true shape of 'data' field: …" with both counts;
 * - `data` not an array, a leaf of the wrong type, or nesting too deep → REQUEST_JSON_DATA
 *   (INTERNAL, as Triton reports it), "Unable to parse 'data': …" with the element index.
 */
export function jsonToTensorData(datatype: DataType, data: unknown, elementCount: number, what: string): Buffer {
  if (datatype === 'FP16' || datatype === 'BF16') {
    throw new NereidError(
      'INPUT_JSON_UNSUPPORTED',
      `${what} has datatype ${datatype}, which cannot be sent as JSON 'data'; ` +
        `use the binary data format (parameters.binary_data_size) or shared memory`,
    );
  }
  if (elementCount === 0) return Buffer.alloc(0);
  if (!Array.isArray(data)) {
    throw new NereidError(
      'REQUEST_JSON_DATA',
      `Unable to parse 'data': expected an array for ${what}, got ${describe(data)}`,
    );
  }
  // Nested or short data is counted before the output is allocated, so a huge shape with little
  // data fails without allocating for the shape; a flat array of the right length needs no count.
  if (data.length !== elementCount) {
    const count = countLeaves(data, 1, what);
    if (count !== elementCount) throw countMismatch(what, elementCount, count);
  }
  const sink = makeSink(datatype, elementCount, what);
  if (!fill(data, 1, sink) || sink.pos !== elementCount) {
    throw countMismatch(what, elementCount, countLeaves(data, 1, what));
  }
  return sink.finish();
}

function countMismatch(what: string, expected: number, got: number): NereidError {
  return new NereidError(
    'REQUEST_JSON_DATA',
    `Unable to parse 'data': Shape does not match true shape of 'data' field: the shape of ${what} has ${expected} ` +
      `elements but 'data' holds ${got}`,
  );
}

/**
 * Writes raw tensor bytes (§2.3) as the JSON text of a flat array (§3.7.2): BOOL as true/false
 * (any non-zero byte is true); integer types as exact decimal integers (INT64/UINT64 included);
 * FP32 as the double it widens to and FP64 as itself, each in JavaScript's shortest round-trip
 * form, with NaN, Infinity and -Infinity as those bare tokens (Python's json reads them) and
 * negative zero as -0.0; BYTES elements as JSON strings of their UTF-8 decoding (invalid
 * sequences become U+FFFD, §7.5 item 4).
 * `data` may sit at any byte offset; it is copied only when misaligned for its element type.
 * Errors: FP16/BF16 → OUTPUT_JSON_UNSUPPORTED (INVALID_ARG) telling the client to request binary
 * output; malformed BYTES framing → INPUT_BYTES_ENCODING; a length that is not a whole number of
 * elements → INTERNAL.
 */
export function tensorDataToJson(datatype: DataType, data: Uint8Array, what: string): string {
  switch (datatype) {
    case 'FP16':
    case 'BF16':
      throw new NereidError(
        'OUTPUT_JSON_UNSUPPORTED',
        `${what} has datatype ${datatype}, which cannot be returned as JSON 'data'; ` +
          `request it with binary data ("binary_data": true) or shared memory`,
      );
    case 'BYTES':
      return JSON.stringify(decodeBytesElements(data, what).map((e) => e.toString('utf8')));
    case 'BOOL':
      return JSON.stringify(Array.from(data, (b) => b !== 0));
    case 'INT64':
    case 'UINT64':
      return `[${typedArrayOf(datatype, data).join(',')}]`;
    case 'FP32': {
      const values = typedArrayOf(datatype, data);
      return floatsToJson(values, new Uint32Array(values.buffer, values.byteOffset, values.length).indexOf(F32_NEGATIVE_ZERO));
    }
    case 'FP64': {
      const values = typedArrayOf(datatype, data);
      return floatsToJson(values, new BigUint64Array(values.buffer, values.byteOffset, values.length).indexOf(F64_NEGATIVE_ZERO));
    }
    default:
      // JSON.stringify over a plain array is faster than TypedArray#join (measured ~1.5×).
      return JSON.stringify(Array.from(typedArrayOf(datatype, data)));
  }
}

const F32_NEGATIVE_ZERO = 0x80000000;
const F64_NEGATIVE_ZERO = 0x8000000000000000n;

/** `negativeZero`: index of a -0 element (found natively by its bit pattern), or -1. */
function floatsToJson(values: Float32Array | Float64Array, negativeZero: number): string {
  const special = negativeZero >= 0 || values.includes(NaN) || values.includes(Infinity) || values.includes(-Infinity);
  // JSON.stringify writes null for NaN/±Infinity and 0 for -0, so those arrays take the slow path.
  if (!special) return JSON.stringify(Array.from(values));
  const parts = new Array<string>(values.length);
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    parts[i] = v === 0 && 1 / v < 0 ? '-0.0' : String(v);
  }
  return `[${parts.join(',')}]`;
}

/** Where `fill` writes leaves: a preallocated output plus the position of the next element. */
abstract class Sink {
  pos = 0;
  readonly n: number;
  readonly what: string;
  readonly #datatype: DataType;

  constructor(datatype: DataType, n: number, what: string) {
    this.#datatype = datatype;
    this.n = n;
    this.what = what;
  }

  /**
   * Consumes consecutive leaves of `src` from index `i` until a nested array, the end of `src`
   * or a full output; returns the index of the first element not consumed.
   */
  abstract run(src: readonly unknown[], i: number): number;

  abstract finish(): Buffer;

  protected wrongType(value: unknown, expected: string): NereidError {
    return new NereidError(
      'REQUEST_JSON_DATA',
      `Unable to parse 'data': element ${this.pos} of ${this.what} should be ${expected} ` +
        `for datatype ${this.#datatype}, got ${describe(value)}`,
    );
  }
}

/** Walks nested `data`; returns false when it holds more leaves than the sink takes. */
function fill(src: readonly unknown[], depth: number, sink: Sink): boolean {
  const len = src.length;
  let i = 0;
  while (i < len) {
    const v = src[i];
    if (Array.isArray(v)) {
      if (depth >= MAX_JSON_DATA_DEPTH) throw depthError(sink.what);
      if (!fill(v, depth + 1, sink)) return false;
      i++;
    } else {
      if (sink.pos === sink.n) return false;
      i = sink.run(src, i);
    }
  }
  return true;
}

/** Leaf count of `data`, for the count-mismatch message; enforces the depth limit too. */
function countLeaves(src: readonly unknown[], depth: number, what: string): number {
  let count = 0;
  for (const v of src) {
    if (!Array.isArray(v)) {
      count++;
    } else if (depth >= MAX_JSON_DATA_DEPTH) {
      throw depthError(what);
    } else {
      count += countLeaves(v, depth + 1, what);
    }
  }
  return count;
}

function depthError(what: string): NereidError {
  return new NereidError(
    'REQUEST_JSON_DATA',
    `Unable to parse 'data': the arrays of ${what} nest deeper than ${MAX_JSON_DATA_DEPTH} levels`,
  );
}

function makeSink(datatype: Exclude<DataType, 'FP16' | 'BF16'>, n: number, what: string): Sink {
  switch (datatype) {
    case 'FP32':
      return new Float32Sink(n, what);
    case 'FP64':
      return new Float64Sink(n, what);
    case 'BOOL':
      return new BoolSink(n, what);
    case 'INT64':
    case 'UINT64':
      return new Int64Sink(datatype, n, what);
    case 'BYTES':
      return new BytesSink(n, what);
    default:
      return new SmallIntSink(datatype, n, what);
  }
}

function allocate(bytes: number): Buffer {
  // allocUnsafeSlow: never pooled, so offset 0 (aligned for every view) and no zero-fill; every
  // byte is written before the Buffer is returned.
  return Buffer.allocUnsafeSlow(bytes);
}

const EXPECT_NUMBER = 'a JSON number';
const EXPECT_INTEGER = 'a JSON integer';
const EXPECT_UNSIGNED = 'a non-negative JSON integer';
const EXPECT_BOOL = 'a JSON bool (true or false)';
const EXPECT_STRING = 'a JSON string';

class Float32Sink extends Sink {
  readonly #buf: Buffer;
  readonly #out: Float32Array;

  constructor(n: number, what: string) {
    super('FP32', n, what);
    this.#buf = allocate(n * 4);
    this.#out = new Float32Array(this.#buf.buffer, this.#buf.byteOffset, n);
  }

  run(src: readonly unknown[], i: number): number {
    const out = this.#out;
    let pos = this.pos;
    const stop = Math.min(src.length, i + this.n - pos);
    for (; i < stop; i++) {
      const v = src[i];
      if (typeof v === 'number') out[pos++] = v;
      else if (typeof v === 'bigint') out[pos++] = Number(v);
      else if (Array.isArray(v)) break;
      else {
        this.pos = pos;
        throw this.wrongType(v, EXPECT_NUMBER);
      }
    }
    this.pos = pos;
    return i;
  }

  finish(): Buffer {
    return this.#buf;
  }
}

class Float64Sink extends Sink {
  readonly #buf: Buffer;
  readonly #out: Float64Array;

  constructor(n: number, what: string) {
    super('FP64', n, what);
    this.#buf = allocate(n * 8);
    this.#out = new Float64Array(this.#buf.buffer, this.#buf.byteOffset, n);
  }

  run(src: readonly unknown[], i: number): number {
    const out = this.#out;
    let pos = this.pos;
    const stop = Math.min(src.length, i + this.n - pos);
    for (; i < stop; i++) {
      const v = src[i];
      if (typeof v === 'number') out[pos++] = v;
      else if (typeof v === 'bigint') out[pos++] = Number(v);
      else if (Array.isArray(v)) break;
      else {
        this.pos = pos;
        throw this.wrongType(v, EXPECT_NUMBER);
      }
    }
    this.pos = pos;
    return i;
  }

  finish(): Buffer {
    return this.#buf;
  }
}

type SmallIntType = 'UINT8' | 'UINT16' | 'UINT32' | 'INT8' | 'INT16' | 'INT32';

/** 8-, 16- and 32-bit integers: typed-array stores wrap modulo 2^width (ToInt32 and friends). */
class SmallIntSink extends Sink {
  readonly #buf: Buffer;
  readonly #out: Uint8Array | Uint16Array | Uint32Array | Int8Array | Int16Array | Int32Array;
  readonly #unsigned: boolean;

  constructor(datatype: SmallIntType, n: number, what: string) {
    super(datatype, n, what);
    this.#buf = allocate(n * elementSize(datatype));
    this.#out = typedArrayOf(datatype, this.#buf);
    this.#unsigned = datatype.startsWith('U');
  }

  run(src: readonly unknown[], i: number): number {
    const out = this.#out;
    const unsigned = this.#unsigned;
    let pos = this.pos;
    const stop = Math.min(src.length, i + this.n - pos);
    for (; i < stop; i++) {
      const v = src[i];
      if (typeof v === 'number' && Number.isInteger(v) && (v >= 0 || !unsigned)) {
        out[pos++] = v;
      } else if (typeof v === 'bigint' && (v >= 0n || !unsigned)) {
        out[pos++] = Number(BigInt.asIntN(32, v));
      } else if (Array.isArray(v)) {
        break;
      } else {
        this.pos = pos;
        throw this.wrongType(v, unsigned ? EXPECT_UNSIGNED : EXPECT_INTEGER);
      }
    }
    this.pos = pos;
    return i;
  }

  finish(): Buffer {
    return this.#buf;
  }
}

const TWO_32 = 4294967296;

/**
 * 64-bit integers. Safe-integer numbers are split into 32-bit words (no BigInt per element);
 * bigints and larger integral numbers go through a BigInt64Array store, which wraps mod 2^64.
 */
class Int64Sink extends Sink {
  readonly #buf: Buffer;
  readonly #words: Uint32Array;
  readonly #big: BigInt64Array;
  readonly #unsigned: boolean;

  constructor(datatype: 'INT64' | 'UINT64', n: number, what: string) {
    super(datatype, n, what);
    this.#buf = allocate(n * 8);
    this.#words = new Uint32Array(this.#buf.buffer, this.#buf.byteOffset, n * 2);
    this.#big = new BigInt64Array(this.#buf.buffer, this.#buf.byteOffset, n);
    this.#unsigned = datatype === 'UINT64';
  }

  run(src: readonly unknown[], i: number): number {
    const words = this.#words;
    const unsigned = this.#unsigned;
    let pos = this.pos;
    const stop = Math.min(src.length, i + this.n - pos);
    for (; i < stop; i++) {
      const v = src[i];
      if (typeof v === 'number' && Number.isInteger(v) && (v >= 0 || !unsigned)) {
        if (v <= Number.MAX_SAFE_INTEGER && v >= -Number.MAX_SAFE_INTEGER) {
          words[2 * pos] = v >>> 0;
          words[2 * pos + 1] = Math.floor(v / TWO_32);
        } else {
          this.#big[pos] = BigInt(v);
        }
        pos++;
      } else if (typeof v === 'bigint' && (v >= 0n || !unsigned)) {
        this.#big[pos++] = v;
      } else if (Array.isArray(v)) {
        break;
      } else {
        this.pos = pos;
        throw this.wrongType(v, unsigned ? EXPECT_UNSIGNED : EXPECT_INTEGER);
      }
    }
    this.pos = pos;
    return i;
  }

  finish(): Buffer {
    return this.#buf;
  }
}

class BoolSink extends Sink {
  readonly #buf: Buffer;

  constructor(n: number, what: string) {
    super('BOOL', n, what);
    this.#buf = allocate(n);
  }

  run(src: readonly unknown[], i: number): number {
    const out = this.#buf;
    let pos = this.pos;
    const stop = Math.min(src.length, i + this.n - pos);
    for (; i < stop; i++) {
      const v = src[i];
      if (v === true) out[pos++] = 1;
      else if (v === false) out[pos++] = 0;
      else if (Array.isArray(v)) break;
      else {
        this.pos = pos;
        throw this.wrongType(v, EXPECT_BOOL);
      }
    }
    this.pos = pos;
    return i;
  }

  finish(): Buffer {
    return this.#buf;
  }
}

class BytesSink extends Sink {
  readonly #elements: string[];

  constructor(n: number, what: string) {
    super('BYTES', n, what);
    this.#elements = new Array<string>(n);
  }

  run(src: readonly unknown[], i: number): number {
    const out = this.#elements;
    let pos = this.pos;
    const stop = Math.min(src.length, i + this.n - pos);
    for (; i < stop; i++) {
      const v = src[i];
      if (typeof v === 'string') out[pos++] = v;
      else if (Array.isArray(v)) break;
      else {
        this.pos = pos;
        throw this.wrongType(v, EXPECT_STRING);
      }
    }
    this.pos = pos;
    return i;
  }

  finish(): Buffer {
    return encodeBytesElements(this.#elements);
  }
}

/** A short description of a JSON value for error messages. */
function describe(v: unknown): string {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  switch (typeof v) {
    case 'string':
      return `the string ${JSON.stringify(v.length > 32 ? `${v.slice(0, 32)}…` : v)}`;
    case 'number':
    case 'bigint':
      return `the number ${String(v)}`;
    case 'boolean':
      return `the bool ${String(v)}`;
    case 'undefined':
      return 'nothing';
    default:
      return 'an object';
  }
}
