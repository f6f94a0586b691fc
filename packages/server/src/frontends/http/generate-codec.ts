/**
 * The generate extension's JSON ⇄ facade requests and responses (protocol.md §3.18), and the
 * Server-Sent-Event framing that `generate_stream` and streamed `infer` share.
 */
import {
  NereidError,
  elementCount,
  jsonToTensorData,
  parseJson,
  tensorDataToJson,
  type ParameterValue,
} from '@nereid/protocol';
import type { InferInput, InferRequest, InferResponse, ModelMetadata, TensorMetadata } from '../../core/types.js';

type JsonObject = Record<string, unknown>;

function isObject(value: unknown): value is JsonObject {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The shape of a generate input holding `count` elements (§3.18): fixed dimensions are kept, the
 * innermost -1 takes what remains, any other -1 becomes 1.
 */
function generateShape(input: TensorMetadata, count: number, model: string): number[] {
  const shape = [...input.shape];
  let innermost = -1;
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] === -1) {
      innermost = i;
      break;
    }
  }
  let fixed = 1;
  for (let i = 0; i < shape.length; i++) {
    if (shape[i] === -1 && i !== innermost) shape[i] = 1;
    if (i !== innermost) fixed *= shape[i]!;
  }
  const fits = innermost === -1 ? fixed === count : fixed > 0 ? count % fixed === 0 : count === 0;
  if (!fits) {
    throw new NereidError(
      'INPUT_SHAPE',
      `The schema can not convert input '${input.name}' to tensor with proper shape: model '${model}' expects shape ` +
        `[${input.shape.join(',')}] but the request gives ${count} element(s)`,
    );
  }
  if (innermost !== -1) shape[innermost] = fixed > 0 ? count / fixed : 0;
  return shape;
}

function generateInput(input: TensorMetadata, value: unknown, model: string): InferInput {
  const values = Array.isArray(value) ? value : [value];
  const what = `input '${input.name}' of model '${model}'`;
  for (const v of values) {
    if (Array.isArray(v) || isObject(v) || v === null) {
      throw new NereidError(
        'REQUEST_MALFORMED',
        `${what}: a generate request gives an input as a scalar or a flat JSON array of ${input.datatype} values`,
      );
    }
  }
  const shape = generateShape(input, values.length, model);
  if (input.datatype === 'BYTES') {
    for (const v of values) {
      if (typeof v !== 'string') {
        throw new NereidError('REQUEST_JSON_DATA', `Unable to parse 'data': ${what} takes strings, got ${typeof v}`);
      }
    }
    return { name: input.name, datatype: 'BYTES', shape, data: values as string[] };
  }
  return { name: input.name, datatype: input.datatype, shape, data: jsonToTensorData(input.datatype, values, elementCount(shape), what) };
}

function parameterValue(key: string, value: unknown, model: string): ParameterValue {
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'bigint' || typeof value === 'boolean') return value;
  throw new NereidError(
    'REQUEST_PARAMETER_TYPE',
    `parameter '${key}' of the generate request for model '${model}' has an invalid type; it should be either 'int', ` +
      `'double', 'bool', or 'string' (or be named after a model input)`,
  );
}

/**
 * A generate body as a facade request (§3.18): keys named after model inputs (top level, or in
 * the top-level `parameters` object) become those inputs; `id` is the request id; every other
 * key is a request parameter. Errors: INVALID_ARG naming the key or input.
 */
export function decodeGenerateRequest(body: Uint8Array, metadata: ModelMetadata, version: string | undefined): InferRequest {
  const model = metadata.name;
  const doc = parseJson(body, 'the generate request');
  if (!isObject(doc)) {
    throw new NereidError('REQUEST_MALFORMED', `the generate request for model '${model}' must be a JSON object`);
  }
  const inputsByName = new Map<string, TensorMetadata>();
  for (const i of metadata.inputs) inputsByName.set(i.name, i);
  if (inputsByName.has('parameters')) {
    throw new NereidError(
      'REQUEST_MALFORMED',
      `model '${model}' has an input named 'parameters', which conflicts with the generate request's reserved 'parameters' object; use the infer endpoint`,
    );
  }
  const inputs: InferInput[] = [];
  const parameters: Record<string, ParameterValue> = {};
  let id: string | undefined;
  const take = (key: string, value: unknown) => {
    const input = inputsByName.get(key);
    if (input !== undefined) {
      inputs.push(generateInput(input, value, model));
      return;
    }
    if (key.startsWith('triton_')) {
      throw new NereidError(
        'REQUEST_PARAMETER',
        `parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified, got '${key}' in the generate request for model '${model}'`,
      );
    }
    parameters[key] = parameterValue(key, value, model);
  };
  for (const [key, value] of Object.entries(doc)) {
    if (key === 'parameters') {
      if (!isObject(value)) {
        throw new NereidError('REQUEST_MALFORMED', `'parameters' of the generate request for model '${model}' must be a JSON object`);
      }
      for (const [k, v] of Object.entries(value)) take(k, v);
    } else if (key === 'id') {
      if (typeof value !== 'string') {
        throw new NereidError('REQUEST_MALFORMED', `'id' of the generate request for model '${model}' must be a string`);
      }
      id = value;
    } else {
      take(key, value);
    }
  }
  const request: InferRequest = { model, inputs };
  if (version !== undefined) request.version = version;
  if (id !== undefined) request.id = id;
  if (Object.keys(parameters).length > 0) request.parameters = parameters;
  return request;
}

function parameterJson(v: ParameterValue): string {
  return typeof v === 'bigint' ? v.toString() : JSON.stringify(v);
}

/**
 * One generate response object (§3.18): `id` (when the request had one), `model_name`,
 * `model_version`, every output as a top-level key (one element: the bare value; more: a flat
 * array), every response parameter as a top-level key.
 */
export function encodeGenerateResponse(response: InferResponse): string {
  let json = '{';
  if (response.id) json += `"id":${JSON.stringify(response.id)},`;
  json += `"model_name":${JSON.stringify(response.model)},"model_version":${JSON.stringify(response.version)}`;
  for (const out of response.outputs) {
    let data = tensorDataToJson(out.datatype, out.data, `output '${out.name}' of model '${response.model}'`);
    if (elementCount(out.shape) === 1) data = data.slice(1, -1);
    json += `,${JSON.stringify(out.name)}:${data}`;
  }
  for (const key in response.parameters) json += `,${JSON.stringify(key)}:${parameterJson(response.parameters[key]!)}`;
  return json + '}';
}

/** One Server-Sent-Event frame carrying `json` (§3.18). */
export function sseFrame(json: string): string {
  return `data: ${json}\n\n`;
}

/** The frame of an error after the stream started (§3.18). */
export function sseErrorFrame(message: string): string {
  return sseFrame(JSON.stringify({ error: message }));
}
