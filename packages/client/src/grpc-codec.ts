/**
 * Client options ⇄ gRPC messages (protocol.md §4.3, §4.6, §7.4): `ModelInferRequest` with every
 * input in `raw_input_contents`, request parameters mapped to `InferParameter` choices as Triton's
 * Python client maps Python values, and `ModelInferResponse` into the shared `InferResult`.
 */
import {
  NereidError,
  TRITON_FINAL_RESPONSE,
  encodeBytesElements,
  isDataType,
  type DataType,
  type ParameterValue,
  type pb,
} from '@nereid/protocol';
import { inputBytes, isSharedMemoryInput, type BaseInferOptions } from './infer-options.js';
import type { SharedMemoryTensor } from './shared-memory.js';
import { InferResult, type ResultOutput } from './infer-result.js';

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;
const UINT64_MAX = 2n ** 64n - 1n;
const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);

function parameterTypeError(key: string, value: ParameterValue, expected: string): NereidError {
  return new NereidError('REQUEST_PARAMETER_TYPE', `request parameter '${key}' = ${String(value)} cannot be sent: ${expected}`);
}

/**
 * One request parameter as its `InferParameter` choice (protocol.md §7.4 item 2): boolean →
 * `bool_param`, string → `string_param`, `priority` → `uint64_param`, a bigint or an integral
 * number within int64 → `int64_param`, any other number → `double_param`.
 * Throws NereidError (REQUEST_PARAMETER_TYPE) for a `priority` that is not a non-negative integer
 * within uint64 and for a bigint outside int64.
 */
export function encodeInferParameter(key: string, value: ParameterValue): pb.InferParameter {
  switch (typeof value) {
    case 'boolean':
      return { bool_param: value };
    case 'string':
      return { string_param: value };
    case 'bigint':
    case 'number': {
      if (key === 'priority') {
        if (typeof value === 'number' && !Number.isSafeInteger(value)) {
          throw parameterTypeError(key, value, 'a priority is a non-negative integer');
        }
        const n = BigInt(value);
        if (n < 0n || n > UINT64_MAX) throw parameterTypeError(key, value, 'a priority is a non-negative integer within uint64');
        return { uint64_param: n };
      }
      if (typeof value === 'bigint') {
        if (value < INT64_MIN || value > INT64_MAX) throw parameterTypeError(key, value, 'integers must be within int64');
        return { int64_param: value };
      }
      if (Number.isInteger(value)) {
        // An integral double beyond ±2^63 has no int64 form; it stays a double.
        const n = BigInt(value);
        if (n >= INT64_MIN && n <= INT64_MAX) return { int64_param: n };
      }
      return { double_param: value };
    }
    default:
      throw parameterTypeError(key, value, `a ${typeof value} is not a parameter value`);
  }
}

/** Encodes a parameters record; `extra` entries (already encoded) are added after it. */
export function encodeInferParameters(
  parameters: Readonly<Record<string, ParameterValue>> | undefined,
  extra?: Readonly<Record<string, pb.InferParameter>>,
): Record<string, pb.InferParameter> {
  const out: Record<string, pb.InferParameter> = {};
  if (parameters !== undefined) {
    for (const key of Object.keys(parameters)) out[key] = encodeInferParameter(key, parameters[key]!);
  }
  if (extra !== undefined) Object.assign(out, extra);
  return out;
}

/** A parameter's value: integers as numbers when exact, bigints otherwise (as `parseJson`). */
export function decodeInferParameter(p: pb.InferParameter): ParameterValue | undefined {
  if (p.bool_param !== undefined) return p.bool_param;
  if (p.int64_param !== undefined) return integer(p.int64_param);
  if (p.string_param !== undefined) return p.string_param;
  if (p.double_param !== undefined) return p.double_param;
  if (p.uint64_param !== undefined) return integer(p.uint64_param);
  return undefined;
}

function integer(value: bigint): number | bigint {
  return value <= MAX_SAFE && value >= MIN_SAFE ? Number(value) : value;
}

function shapeToWire(shape: readonly number[], input: string): bigint[] {
  return shape.map((d) => {
    if (!Number.isSafeInteger(d)) throw new NereidError('INPUT_SHAPE', `input '${input}' has a dimension that is not an integer: ${d}`);
    return BigInt(d);
  });
}

/**
 * A `ModelInferRequest` for `options`: every input's bytes in `raw_input_contents` (typed arrays
 * as views, no copy), `classCount` as the output's `classification` (`int64_param`), parameters
 * per `encodeInferParameter` plus `extraParameters`. Throws NereidError for data or parameters
 * that cannot be encoded; nothing has been sent then.
 */
export function encodeInferRequest(
  options: Omit<BaseInferOptions, 'signal'>,
  extraParameters?: Readonly<Record<string, pb.InferParameter>>,
): pb.ModelInferRequest {
  const inputs: pb.ModelInferRequest_InferInputTensor[] = new Array(options.inputs.length);
  const raw: Uint8Array[] = [];
  for (let i = 0; i < options.inputs.length; i++) {
    const input = options.inputs[i]!;
    if (isSharedMemoryInput(input)) {
      // No raw entry: the raw list holds only the other inputs, in order (protocol.md §7.4 item 3).
      inputs[i] = { name: input.name, datatype: input.datatype, shape: shapeToWire(input.shape, input.name), parameters: sharedMemoryParameters(input.sharedMemory) };
      continue;
    }
    inputs[i] = { name: input.name, datatype: input.datatype, shape: shapeToWire(input.shape, input.name), parameters: {} };
    raw.push(inputBytes(input));
  }
  const outputs: pb.ModelInferRequest_InferRequestedOutputTensor[] = (options.outputs ?? []).map((o) => {
    if (o.sharedMemory) return { name: o.name, parameters: sharedMemoryParameters(o.sharedMemory) };
    const parameters: Record<string, pb.InferParameter> = {};
    if (o.classCount) {
      if (!Number.isSafeInteger(o.classCount) || o.classCount < 0) {
        throw new NereidError('OUTPUT_PARAMETER', `classCount of output '${o.name}' must be a positive integer, got ${o.classCount}`);
      }
      parameters.classification = { int64_param: BigInt(o.classCount) };
    }
    return { name: o.name, parameters };
  });
  return {
    model_name: options.model,
    model_version: options.version ?? '',
    id: options.id ?? '',
    parameters: encodeInferParameters(options.parameters, extraParameters),
    inputs,
    outputs,
    raw_input_contents: raw,
  };
}

/** The `shared_memory_*` parameters as the Python client sends them (protocol.md §7.4 item 2). */
function sharedMemoryParameters(t: SharedMemoryTensor): Record<string, pb.InferParameter> {
  const p: Record<string, pb.InferParameter> = {
    shared_memory_region: { string_param: t.region },
    shared_memory_byte_size: { int64_param: BigInt(t.byteSize) },
  };
  if (t.offset) p.shared_memory_offset = { int64_param: BigInt(t.offset) };
  return p;
}

/** Typed `contents` as tensor bytes, for servers that answer with them instead of raw entries. */
function typedContents(c: pb.InferTensorContents, datatype: DataType): Uint8Array {
  const bytes = (view: ArrayBufferView) => new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
  switch (datatype) {
    case 'BYTES':
      return encodeBytesElements(c.bytes_contents);
    case 'BOOL':
      return Uint8Array.from(c.bool_contents, (b) => (b ? 1 : 0));
    case 'INT8':
      return bytes(Int8Array.from(c.int_contents));
    case 'INT16':
      return bytes(Int16Array.from(c.int_contents));
    case 'INT32':
      return bytes(Int32Array.from(c.int_contents));
    case 'INT64':
      return bytes(BigInt64Array.from(c.int64_contents));
    case 'UINT8':
      return Uint8Array.from(c.uint_contents);
    case 'UINT16':
      return bytes(Uint16Array.from(c.uint_contents));
    case 'UINT32':
      return bytes(Uint32Array.from(c.uint_contents));
    case 'UINT64':
      return bytes(BigUint64Array.from(c.uint64_contents));
    case 'FP32':
      return bytes(Float32Array.from(c.fp32_contents));
    case 'FP64':
      return bytes(Float64Array.from(c.fp64_contents));
    default:
      return new Uint8Array(0);
  }
}

/**
 * A `ModelInferResponse` as an `InferResult`. Output `i` takes `raw_output_contents[i]` (a view
 * over the message), or its typed `contents` where the server sent no raw entries (protocol.md
 * §7.4 item 1). An empty id becomes undefined, as an HTTP response without `id`.
 */
export function decodeInferResponse(response: pb.ModelInferResponse): InferResult {
  const raw = response.raw_output_contents;
  const outputs: ResultOutput[] = response.outputs.map((o, i) => {
    if (!isDataType(o.datatype)) {
      throw new NereidError('INTERNAL', `the response of model '${response.model_name}' has output '${o.name}' of unknown datatype '${o.datatype}'`);
    }
    let data = raw[i];
    if (data === undefined) {
      if (o.contents === undefined) {
        throw new NereidError('INTERNAL', `the response of model '${response.model_name}' has no data for output '${o.name}'`);
      }
      data = typedContents(o.contents, o.datatype);
    }
    return { name: o.name, datatype: o.datatype, shape: o.shape.map(Number), data };
  });
  return new InferResult({
    model: response.model_name,
    version: response.model_version,
    id: response.id === '' ? undefined : response.id,
    parameters: decodeParameters(response.parameters),
    outputs,
  });
}

export function decodeParameters(parameters: Readonly<Record<string, pb.InferParameter>>): Record<string, ParameterValue> {
  const out: Record<string, ParameterValue> = {};
  for (const key of Object.keys(parameters)) {
    const value = decodeInferParameter(parameters[key]!);
    if (value !== undefined) out[key] = value;
  }
  return out;
}

/** Whether a streamed response is the last of its request (`triton_final_response`, default true). */
export function isFinalResponse(response: pb.ModelInferResponse): boolean {
  return response.parameters[TRITON_FINAL_RESPONSE]?.bool_param ?? true;
}
