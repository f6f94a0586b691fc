/**
 * gRPC `ModelInferRequest` ⇄ facade requests and responses (protocol.md §4.6, §7.4).
 *
 * Raw input contents are views over the received message; typed contents are converted into
 * fresh bytes. Responses always carry one `raw_output_contents` entry per output, in order.
 */
import {
  NereidError,
  checkShapeElementCount,
  encodeBytesElements,
  isDataType,
  type DataType,
  type ParameterValue,
  type pb,
} from '@nereid/protocol';
import type { InferInput, InferRequest, InferResponse, RequestedOutput, SharedMemoryInput, SharedMemoryRef } from '../../core/types.js';

type InferParameter = pb.InferParameter;

/** Largest gRPC message in either direction (protocol.md §4.9). */
export const MAX_MESSAGE_SIZE = 2_147_483_647;

const MAX_SAFE = BigInt(Number.MAX_SAFE_INTEGER);
const MIN_SAFE = BigInt(Number.MIN_SAFE_INTEGER);

/** Integers become numbers when exact, bigints otherwise. */
function integer(value: bigint): number | bigint {
  return value <= MAX_SAFE && value >= MIN_SAFE ? Number(value) : value;
}

function choiceName(p: InferParameter): string {
  if (p.bool_param !== undefined) return 'bool_param';
  if (p.int64_param !== undefined) return 'int64_param';
  if (p.string_param !== undefined) return 'string_param';
  if (p.double_param !== undefined) return 'double_param';
  if (p.uint64_param !== undefined) return 'uint64_param';
  return 'no value';
}

function wrongChoice(key: string, expected: string, p: InferParameter, model: string): NereidError {
  return new NereidError(
    'REQUEST_PARAMETER_TYPE',
    `invalid value type for '${key}' parameter of a request for model '${model}', expected ${expected}, got ${choiceName(p)}.`,
  );
}

/** Keys starting with `triton_` that gRPC requests may carry (protocol.md §2.7). */
const ALLOWED_TRITON_KEYS = new Set(['triton_enable_empty_final_response']);

/**
 * Request parameters with the gRPC typing rules of protocol.md §3.12: each protocol key takes
 * given oneof choices; custom parameters take int64, bool, string or double (never uint64).
 */
export function decodeRequestParameters(
  params: Readonly<Record<string, InferParameter>>,
  model: string,
): Record<string, ParameterValue> | undefined {
  let out: Record<string, ParameterValue> | undefined;
  for (const key in params) {
    const p = params[key]!;
    let value: ParameterValue;
    switch (key) {
      case 'sequence_id':
        if (p.int64_param !== undefined) value = integer(p.int64_param);
        else if (p.string_param !== undefined) value = p.string_param;
        else if (p.uint64_param !== undefined) value = integer(p.uint64_param);
        else throw wrongChoice(key, 'int64_param or string_param', p, model);
        break;
      case 'sequence_start':
      case 'sequence_end':
      case 'triton_enable_empty_final_response':
        if (p.bool_param === undefined) throw wrongChoice(key, 'bool_param', p, model);
        value = p.bool_param;
        break;
      case 'priority':
        if (p.int64_param !== undefined && p.int64_param >= 0n) value = integer(p.int64_param);
        else if (p.uint64_param !== undefined) value = integer(p.uint64_param);
        else throw wrongChoice(key, 'int64_param or uint64_param', p, model);
        break;
      case 'timeout':
        if (p.int64_param === undefined || p.int64_param < 0n) throw wrongChoice(key, 'a non-negative int64_param', p, model);
        value = integer(p.int64_param);
        break;
      default:
        if (key.startsWith('triton_') && !ALLOWED_TRITON_KEYS.has(key)) {
          throw new NereidError(
            'REQUEST_PARAMETER',
            `parameter keys starting with 'triton_' are reserved for Triton usage; only ${[...ALLOWED_TRITON_KEYS].join(', ')} ` +
              `may be specified, got '${key}' in a request for model '${model}'`,
          );
        }
        if (p.int64_param !== undefined) value = integer(p.int64_param);
        else if (p.bool_param !== undefined) value = p.bool_param;
        else if (p.string_param !== undefined) value = p.string_param;
        else if (p.double_param !== undefined) value = p.double_param;
        else throw wrongChoice(key, 'int64_param, bool_param, string_param or double_param', p, model);
    }
    (out ??= {})[key] = value;
  }
  return out;
}

/**
 * Typed `contents` → the tensor's raw bytes (protocol.md §4.6 item 2). The list must be the one
 * for the datatype; narrower integer types are narrowed.
 */
function typedContents(input: pb.ModelInferRequest_InferInputTensor, datatype: DataType, model: string): Uint8Array {
  const c = input.contents!;
  const lists: [string, number][] = [
    ['bool_contents', c.bool_contents.length],
    ['int_contents', c.int_contents.length],
    ['int64_contents', c.int64_contents.length],
    ['uint_contents', c.uint_contents.length],
    ['uint64_contents', c.uint64_contents.length],
    ['fp32_contents', c.fp32_contents.length],
    ['fp64_contents', c.fp64_contents.length],
    ['bytes_contents', c.bytes_contents.length],
  ];
  const expected: Record<DataType, string | undefined> = {
    BOOL: 'bool_contents',
    INT8: 'int_contents',
    INT16: 'int_contents',
    INT32: 'int_contents',
    INT64: 'int64_contents',
    UINT8: 'uint_contents',
    UINT16: 'uint_contents',
    UINT32: 'uint_contents',
    UINT64: 'uint64_contents',
    FP32: 'fp32_contents',
    FP64: 'fp64_contents',
    BYTES: 'bytes_contents',
    FP16: undefined,
    BF16: undefined,
  };
  const want = expected[datatype];
  if (want === undefined) {
    throw new NereidError(
      'INPUT_DATA_SOURCE',
      `unexpected explicit tensor data for input tensor '${input.name}' for model '${model}': ${datatype} has no typed contents; send it in raw_input_contents`,
    );
  }
  const other = lists.find(([name, n]) => n > 0 && name !== want);
  if (other !== undefined) {
    throw new NereidError(
      'INPUT_DATA_SOURCE',
      `unexpected explicit tensor data for input tensor '${input.name}' for model '${model}': data type ${datatype} takes ${want}, got ${other[0]}`,
    );
  }
  switch (datatype) {
    case 'BYTES':
      return encodeBytesElements(c.bytes_contents);
    case 'BOOL':
      return Uint8Array.from(c.bool_contents, (b) => (b ? 1 : 0));
    case 'INT8':
      return new Uint8Array(Int8Array.from(c.int_contents).buffer);
    case 'INT16':
      return new Uint8Array(Int16Array.from(c.int_contents).buffer);
    case 'INT32':
      return new Uint8Array(Int32Array.from(c.int_contents).buffer);
    case 'INT64':
      return new Uint8Array(BigInt64Array.from(c.int64_contents).buffer);
    case 'UINT8':
      return Uint8Array.from(c.uint_contents);
    case 'UINT16':
      return new Uint8Array(Uint16Array.from(c.uint_contents).buffer);
    case 'UINT32':
      return new Uint8Array(Uint32Array.from(c.uint_contents).buffer);
    case 'UINT64':
      return new Uint8Array(BigUint64Array.from(c.uint64_contents).buffer);
    case 'FP32':
      return new Uint8Array(Float32Array.from(c.fp32_contents).buffer);
    case 'FP64':
      return new Uint8Array(Float64Array.from(c.fp64_contents).buffer);
    default:
      throw new NereidError('INTERNAL', `no typed contents for ${datatype}`);
  }
}

function shapeOf(shape: readonly bigint[], input: string, model: string): number[] {
  const out = new Array<number>(shape.length);
  for (let i = 0; i < shape.length; i++) {
    const d = shape[i]!;
    if (d < 0n || d > MAX_SAFE) {
      throw new NereidError('INPUT_SHAPE', `input '${input}' for model '${model}' has invalid dimension ${d} in its shape`);
    }
    out[i] = Number(d);
  }
  checkShapeElementCount(out, `input '${input}' for model '${model}'`);
  return out;
}

/** The `shared_memory_*` parameters of a tensor (protocol.md §3.17.3, §7.4). */
function sharedMemoryRef(parameters: { [key: string]: InferParameter }, what: string, model: string): SharedMemoryRef {
  const region = parameters.shared_memory_region?.string_param;
  if (region === undefined) {
    throw new NereidError('REQUEST_MALFORMED', `'shared_memory_region' of ${what} for model '${model}' must be a string_param`);
  }
  const size = parameters.shared_memory_byte_size?.int64_param ?? parameters.shared_memory_byte_size?.uint64_param;
  if (size === undefined || size < 0n || size > MAX_SAFE) {
    throw new NereidError(
      'REQUEST_MALFORMED',
      `${what} for model '${model}' uses shared memory region '${region}' and needs 'shared_memory_byte_size' as a non-negative int64_param`,
    );
  }
  const offsetParam = parameters.shared_memory_offset;
  const offset = offsetParam === undefined ? 0n : (offsetParam.int64_param ?? offsetParam.uint64_param);
  if (offset === undefined || offset < 0n || offset > MAX_SAFE) {
    throw new NereidError('REQUEST_MALFORMED', `'shared_memory_offset' of ${what} for model '${model}' must be a non-negative int64_param`);
  }
  return { region, byteSize: Number(size), offset: Number(offset) };
}

/**
 * A request's `model_version` for the facade: empty means the highest ready version (undefined);
 * anything else must be a version number (protocol.md §2.1). The facade also takes '-1' for the
 * latest version, which is not a wire form.
 */
export function requestedVersion(model: string, version: string): string | undefined {
  if (version === '') return undefined;
  if (version.startsWith('-')) {
    throw new NereidError(
      'MODEL_VERSION_INVALID',
      `invalid model version specified '${version}' for model '${model}': the version should be an integral value > 0`,
    );
  }
  return version;
}

/** Decodes a ModelInferRequest into a facade request (protocol.md §4.6). */
export function decodeInferRequest(message: pb.ModelInferRequest): InferRequest {
  const model = message.model_name;
  const version = requestedVersion(model, message.model_version);
  const raw = message.raw_input_contents;
  if (raw.length > 0) {
    for (const input of message.inputs) {
      if (input.contents !== undefined) {
        throw new NereidError(
          'INPUT_DATA_SOURCE',
          `contents field must not be specified when using raw_input_contents for '${input.name}' for model '${model}'`,
        );
      }
    }
  }
  let nextRaw = 0;
  const inputs: (InferInput | SharedMemoryInput)[] = new Array(message.inputs.length);
  for (let i = 0; i < message.inputs.length; i++) {
    const input = message.inputs[i]!;
    const datatype = input.datatype;
    if (!isDataType(datatype)) {
      throw new NereidError('INPUT_DATATYPE', `input '${input.name}' of the request for model '${model}' has unknown datatype '${datatype}'`);
    }
    const region = input.parameters.shared_memory_region;
    let data: Uint8Array;
    if (region !== undefined) {
      if (input.contents !== undefined) {
        throw new NereidError(
          'INPUT_DATA_SOURCE',
          `unexpected 'content' provided when using shared memory for input '${input.name}' for model '${model}'`,
        );
      }
      inputs[i] = { name: input.name, datatype, shape: shapeOf(input.shape, input.name, model), sharedMemory: sharedMemoryRef(input.parameters, `input '${input.name}'`, model) };
      continue;
    } else if (input.contents !== undefined) {
      data = typedContents(input, datatype, model);
    } else if (nextRaw < raw.length) {
      data = raw[nextRaw++]!;
    } else {
      throw new NereidError(
        'INPUT_DATA_SOURCE',
        `unable to find data for input tensor '${input.name}' for model '${model}' in request.`,
      );
    }
    inputs[i] = { name: input.name, datatype, shape: shapeOf(input.shape, input.name, model), data };
  }
  if (nextRaw < raw.length) {
    throw new NereidError(
      'INPUT_DATA_SOURCE',
      `the request for model '${model}' carries ${raw.length} raw_input_contents but only ${nextRaw} input(s) take raw data`,
    );
  }

  let outputs: RequestedOutput[] | undefined;
  if (message.outputs.length > 0) {
    outputs = message.outputs.map((o) => {
      const out: RequestedOutput = { name: o.name };
      const cls = o.parameters.classification;
      if (cls !== undefined) {
        const k = cls.int64_param;
        if (k === undefined || k <= 0n || k > MAX_SAFE) {
          throw new NereidError(
            'OUTPUT_PARAMETER',
            `'classification' of output '${o.name}' for model '${model}' must be an int64_param > 0`,
          );
        }
        out.classification = Number(k);
      }
      const region = o.parameters.shared_memory_region;
      if (region !== undefined) {
        if (out.classification) {
          throw new NereidError('OUTPUT_PARAMETER', `Output '${o.name}' for model '${model}' can't set both 'shared_memory_region' and 'classification'`);
        }
        out.sharedMemory = sharedMemoryRef(o.parameters, `output '${o.name}'`, model);
      }
      return out;
    });
  }

  const request: InferRequest = { model, inputs };
  if (version !== undefined) request.version = version;
  if (message.id !== '') request.id = message.id;
  const parameters = decodeRequestParameters(message.parameters, model);
  if (parameters !== undefined) request.parameters = parameters;
  if (outputs !== undefined) request.outputs = outputs;
  return request;
}

/** A response parameter as its natural InferParameter choice. */
export function encodeParameter(value: ParameterValue): InferParameter {
  switch (typeof value) {
    case 'boolean':
      return { bool_param: value };
    case 'string':
      return { string_param: value };
    case 'bigint':
      return { int64_param: value };
    default:
      return Number.isInteger(value) ? { int64_param: BigInt(value) } : { double_param: value };
  }
}

/** Builds a ModelInferResponse: output metadata plus one raw entry per output (§4.6). */
export function encodeInferResponse(
  response: InferResponse,
  extraParameters?: Readonly<Record<string, InferParameter>>,
): pb.ModelInferResponse {
  let size = 0;
  for (const o of response.outputs) size += o.data.byteLength;
  if (size > MAX_MESSAGE_SIZE) {
    throw new NereidError(
      'REQUEST_TOO_LARGE',
      `the response of model '${response.model}' holds ${size} bytes of output data, more than a gRPC message can carry (${MAX_MESSAGE_SIZE}); request fewer outputs or a smaller batch`,
    );
  }
  const parameters: Record<string, InferParameter> = {};
  for (const key in response.parameters) parameters[key] = encodeParameter(response.parameters[key]!);
  if (extraParameters) Object.assign(parameters, extraParameters);
  return {
    model_name: response.model,
    model_version: response.version,
    id: response.id,
    parameters,
    outputs: response.outputs.map((o) => ({
      name: o.name,
      datatype: o.datatype,
      shape: o.shape.map((d) => BigInt(d)),
      parameters: {},
      contents: undefined,
    })),
    raw_output_contents: response.outputs.map((o) => o.data),
  };
}
