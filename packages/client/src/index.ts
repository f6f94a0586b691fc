/**
 * @nereid/client — TypeScript client for Nereid and Triton inference servers.
 */
export {
  HttpClient,
  InferResult,
  InferenceServerError,
  type ClientInferOptions,
  type ClientInput,
  type ClientRequestedOutput,
  type TypedTensorData,
} from './http-client.js';
