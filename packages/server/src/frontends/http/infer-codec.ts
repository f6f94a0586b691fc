/**
 * HTTP/REST inference bodies ⇄ facade requests and responses (protocol.md §3.7–§3.9, §7).
 *
 * Request tensors are views over the (decompressed) body: JSON `data` is converted into fresh
 * bytes, binary blobs are used in place.
 */
import {
  BinaryDataReader,
  NereidError,
  checkShapeElementCount,
  elementCount,
  elementSize,
  fromConfigDataType,
  isDataType,
  jsonToTensorData,
  parseHttpParameters,
  parseJson,
  tensorDataToJson,
  type DataType,
  type ParameterValue,
} from '@nereid/protocol';
import type { ModelConfig } from '../../config/model-config.js';
import type { InferInput, InferRequest, InferResponse, RequestedOutput, SharedMemoryInput, SharedMemoryRef } from '../../core/types.js';

export interface DecodedInferRequest {
  request: InferRequest;
  /** Output name → send as binary. Outputs not listed use `defaultBinary`. */
  binaryOutputs: Map<string, boolean>;
  defaultBinary: boolean;
}

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (Array.isArray(value)) return 'an array';
  if (value === null) return 'null';
  return typeof value === 'bigint' ? 'a number' : `a ${typeof value}`;
}

function isUint(value: unknown): value is number | bigint {
  return (typeof value === 'number' && Number.isInteger(value) && value >= 0) || (typeof value === 'bigint' && value >= 0n);
}

function shapeOf(value: unknown, input: string, model: string): number[] {
  if (!Array.isArray(value)) {
    throw new NereidError('REQUEST_MALFORMED', `input '${input}' of the request for model '${model}': 'shape' must be an array of non-negative integers, got ${describe(value)}`);
  }
  const shape = value.map((d) => {
    // A dimension written as a float literal (1e21) is an integer but not an exact one.
    if (!isUint(d) || (typeof d === 'bigint' ? d > BigInt(Number.MAX_SAFE_INTEGER) : !Number.isSafeInteger(d))) {
      throw new NereidError('REQUEST_MALFORMED', `input '${input}' of the request for model '${model}': shape dimension ${String(d)} is not a non-negative integer`);
    }
    return Number(d);
  });
  checkShapeElementCount(shape, `input '${input}' for model '${model}'`);
  return shape;
}

/** The `shared_memory_*` parameters of a tensor (protocol.md §3.17.3). */
function sharedMemoryRef(params: JsonObject, what: string, model: string): SharedMemoryRef {
  const region = params.shared_memory_region;
  if (typeof region !== 'string') {
    throw new NereidError('REQUEST_MALFORMED', `'shared_memory_region' of ${what} for model '${model}' must be a string`);
  }
  const size = params.shared_memory_byte_size;
  if (!isUint(size)) {
    throw new NereidError(
      'REQUEST_MALFORMED',
      `${what} for model '${model}' uses shared memory region '${region}' and needs 'shared_memory_byte_size' (a non-negative integer)`,
    );
  }
  const offset = params.shared_memory_offset ?? 0;
  if (!isUint(offset)) {
    throw new NereidError('REQUEST_MALFORMED', `'shared_memory_offset' of ${what} for model '${model}' must be a non-negative integer`);
  }
  return { region, byteSize: Number(size), offset: Number(offset) };
}

/** Decodes a JSON inference header plus the binary blobs that follow it (§3.7, §3.8). */
export function decodeJsonInferRequest(
  header: Uint8Array,
  binary: Uint8Array,
  model: string,
  version: string | undefined,
): DecodedInferRequest {
  const doc = parseJson(header);
  if (!isObject(doc)) {
    throw new NereidError('REQUEST_MALFORMED', `the inference request for model '${model}' must be a JSON object, got ${describe(doc)}`);
  }

  let parameters: Record<string, ParameterValue> | undefined;
  let defaultBinary = false;
  if (doc.parameters !== undefined) {
    parameters = Object.fromEntries(parseHttpParameters(doc.parameters, { where: `request for model '${model}'` }));
    const bdo = parameters.binary_data_output;
    if (bdo !== undefined) {
      if (typeof bdo !== 'boolean') {
        throw new NereidError('REQUEST_PARAMETER_TYPE', `parameter 'binary_data_output' of the request for model '${model}' must be a bool`);
      }
      defaultBinary = bdo;
    }
  }

  if (doc.id !== undefined && typeof doc.id !== 'string') {
    throw new NereidError('REQUEST_MALFORMED', `'id' of the request for model '${model}' must be a string, got ${describe(doc.id)}`);
  }
  if (!Array.isArray(doc.inputs)) {
    throw new NereidError(
      'REQUEST_MALFORMED',
      doc.inputs === undefined
        ? `the request for model '${model}' has no 'inputs' array`
        : `'inputs' of the request for model '${model}' must be an array, got ${describe(doc.inputs)}`,
    );
  }

  const reader = new BinaryDataReader(binary, model);
  const inputs: (InferInput | SharedMemoryInput)[] = [];
  for (const raw of doc.inputs) {
    if (!isObject(raw)) throw new NereidError('REQUEST_MALFORMED', `every entry of 'inputs' for model '${model}' must be an object`);
    const name = raw.name;
    if (typeof name !== 'string') {
      throw new NereidError('REQUEST_MALFORMED', `an input of the request for model '${model}' has no string 'name'`);
    }
    const datatype = raw.datatype;
    if (typeof datatype !== 'string') {
      throw new NereidError('REQUEST_MALFORMED', `input '${name}' of the request for model '${model}' has no string 'datatype'`);
    }
    if (!isDataType(datatype)) {
      throw new NereidError('INPUT_DATATYPE', `input '${name}' of the request for model '${model}' has unknown datatype '${datatype}'`);
    }
    const shape = shapeOf(raw.shape, name, model);
    const params = raw.parameters === undefined ? {} : raw.parameters;
    if (!isObject(params)) {
      throw new NereidError('REQUEST_MALFORMED', `'parameters' of input '${name}' for model '${model}' must be an object`);
    }
    const sources =
      Number(raw.data !== undefined) +
      Number(params.binary_data_size !== undefined) +
      Number(params.shared_memory_region !== undefined);
    if (sources !== 1) {
      throw new NereidError(
        'INPUT_DATA_SOURCE',
        `Input '${name}' for model '${model}' must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', ` +
          `'shared_memory_region' in 'parameters'. But ${sources === 0 ? 'set none of them' : 'set more than one'}`,
      );
    }
    let data: Uint8Array;
    if (params.shared_memory_region !== undefined) {
      inputs.push({ name, datatype, shape, sharedMemory: sharedMemoryRef(params, `input '${name}'`, model) });
      continue;
    } else if (params.binary_data_size !== undefined) {
      const size = params.binary_data_size;
      if (!isUint(size)) {
        throw new NereidError('REQUEST_MALFORMED', `'binary_data_size' of input '${name}' for model '${model}' must be a non-negative integer`);
      }
      data = reader.next(name, Number(size));
    } else {
      const count = elementCount(shape);
      data = count === 0 ? new Uint8Array(0) : jsonToTensorData(datatype, raw.data, count, `input '${name}' of model '${model}'`);
    }
    inputs.push({ name, datatype, shape, data });
  }
  reader.finish();

  const binaryOutputs = new Map<string, boolean>();
  let outputs: RequestedOutput[] | undefined;
  if (doc.outputs !== undefined) {
    if (!Array.isArray(doc.outputs)) {
      throw new NereidError('REQUEST_MALFORMED', `'outputs' of the request for model '${model}' must be an array`);
    }
    outputs = [];
    for (const raw of doc.outputs) {
      if (!isObject(raw) || typeof raw.name !== 'string') {
        throw new NereidError('REQUEST_MALFORMED', `every entry of 'outputs' for model '${model}' must be an object with a string 'name'`);
      }
      const name = raw.name;
      const params = raw.parameters === undefined ? {} : raw.parameters;
      if (!isObject(params)) {
        throw new NereidError('REQUEST_MALFORMED', `'parameters' of output '${name}' for model '${model}' must be an object`);
      }
      const out: RequestedOutput = { name };
      let binaryFlag = false;
      if (params.binary_data !== undefined) {
        if (typeof params.binary_data !== 'boolean') {
          throw new NereidError('OUTPUT_PARAMETER', `'binary_data' of output '${name}' for model '${model}' must be a bool`);
        }
        binaryFlag = params.binary_data;
      }
      if (params.classification !== undefined) {
        if (!isUint(params.classification)) {
          throw new NereidError('OUTPUT_PARAMETER', `'classification' of output '${name}' for model '${model}' must be a non-negative integer`);
        }
        out.classification = Number(params.classification);
      }
      if (params.shared_memory_region !== undefined) {
        if (out.classification) {
          throw new NereidError('OUTPUT_PARAMETER', `Output '${name}' for model '${model}' can't set both 'shared_memory_region' and 'classification'`);
        }
        if (binaryFlag) {
          throw new NereidError('OUTPUT_PARAMETER', `Output '${name}' for model '${model}' can't set both 'shared_memory_region' and 'binary_data'`);
        }
        out.sharedMemory = sharedMemoryRef(params, `output '${name}'`, model);
      }
      binaryOutputs.set(name, binaryFlag);
      outputs.push(out);
    }
  }

  const request: InferRequest = { model, inputs };
  if (version !== undefined) request.version = version;
  if (typeof doc.id === 'string') request.id = doc.id;
  if (parameters !== undefined) request.parameters = parameters;
  if (outputs !== undefined) request.outputs = outputs;
  return { request, binaryOutputs, defaultBinary };
}

/**
 * A raw binary request (`Inference-Header-Content-Length: 0`, §3.9): the whole body is the data
 * of the model's single input; every output comes back binary.
 */
export function decodeRawBinaryRequest(
  body: Uint8Array,
  config: ModelConfig,
  model: string,
  version: string | undefined,
): DecodedInferRequest {
  if (config.input.length !== 1) {
    throw new NereidError(
      'INPUT_DATA_SOURCE',
      `a raw binary request (Inference-Header-Content-Length: 0) needs a model with exactly one input; model '${model}' has ${config.input.length}`,
    );
  }
  const input = config.input[0]!;
  const datatype = fromConfigDataType(input.data_type) as DataType;
  let item: number[];
  if (datatype === 'BYTES') {
    item = [1];
  } else {
    const variable = input.dims.filter((d) => d === -1).length;
    if (variable > 1) {
      throw new NereidError(
        'INPUT_SHAPE',
        `a raw binary request cannot infer the shape of input '${input.name}' of model '${model}': it has ${variable} variable dimensions (at most one is allowed)`,
      );
    }
    const fixed = input.dims.reduce((n, d) => (d === -1 ? n : n * d), 1) * elementSize(datatype);
    if (body.byteLength % fixed !== 0 || (variable === 0 && body.byteLength !== fixed)) {
      throw new NereidError(
        'INPUT_BYTE_SIZE',
        `raw binary request of ${body.byteLength} bytes does not fit input '${input.name}' of model '${model}' (dims [${input.dims.join(',')}], ${datatype})`,
      );
    }
    item = input.dims.map((d) => (d === -1 ? body.byteLength / fixed : d));
  }
  const shape = config.max_batch_size > 0 ? [1, ...item] : item;
  const request: InferRequest = { model, inputs: [{ name: input.name, datatype, shape, data: body }] };
  if (version !== undefined) request.version = version;
  return { request, binaryOutputs: new Map(), defaultBinary: true };
}

export interface EncodedInferResponse {
  /** The JSON header followed by the binary blobs. */
  chunks: Uint8Array[];
  /** Byte length of the JSON header; `binary` tells whether blobs follow. */
  headerLength: number;
  totalLength: number;
  binary: boolean;
}

function parametersJson(parameters: Record<string, ParameterValue>): string {
  const parts: string[] = [];
  for (const key in parameters) {
    const v = parameters[key]!;
    parts.push(`${JSON.stringify(key)}:${typeof v === 'bigint' ? v.toString() : JSON.stringify(v)}`);
  }
  return `{${parts.join(',')}}`;
}

/** Builds the response body (§3.7.2): JSON header, then blobs in output order. */
export function encodeInferResponse(response: InferResponse, decoded: DecodedInferRequest): EncodedInferResponse {
  let json = '{';
  if (response.id) json += `"id":${JSON.stringify(response.id)},`;
  json += `"model_name":${JSON.stringify(response.model)},"model_version":${JSON.stringify(response.version)}`;
  if (Object.keys(response.parameters).length > 0) json += `,"parameters":${parametersJson(response.parameters)}`;
  json += ',"outputs":[';
  const blobs: Uint8Array[] = [];
  let blobBytes = 0;
  response.outputs.forEach((out, i) => {
    if (i > 0) json += ',';
    json += `{"name":${JSON.stringify(out.name)},"datatype":"${out.datatype}","shape":[${out.shape.join(',')}]`;
    if (out.sharedMemory !== undefined) {
      json += '}';
      return;
    }
    const binary = decoded.binaryOutputs.get(out.name) ?? decoded.defaultBinary;
    if (binary) {
      json += `,"parameters":{"binary_data_size":${out.data.byteLength}}}`;
      if (out.data.byteLength > 0) {
        blobs.push(out.data);
        blobBytes += out.data.byteLength;
      }
    } else {
      json += `,"data":${tensorDataToJson(out.datatype, out.data, `output '${out.name}' of model '${response.model}'`)}}`;
    }
  });
  json += ']}';
  const header = Buffer.from(json, 'utf8');
  return {
    chunks: [header, ...blobs],
    headerLength: header.byteLength,
    totalLength: header.byteLength + blobBytes,
    binary: blobBytes > 0,
  };
}
