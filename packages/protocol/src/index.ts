export * from './datatypes.js';
export * from './errors.js';
export * from './bytes-tensor.js';
export { parseJson, parseJsonExact, MAX_JSON_DEPTH } from './json.js';
export * from './json-tensor.js';
export * from './binary-data.js';
export * from './parameters.js';
