/**
 * Request and response parameters (protocol.md §2.7, §3.12): value types, reserved names and the
 * validation of an HTTP JSON `parameters` object. The typed meaning of the keys the server
 * interprets (`sequence_id`, `priority`, `timeout`, …) belongs to the server.
 */
import { NereidError } from './errors.js';

/**
 * A parameter value: string, bool, or number. Integers beyond ±(2^53−1) are bigints, as
 * `parseJson` yields them; gRPC's int64/uint64/double choices map onto bigint or number.
 */
export type ParameterValue = string | number | bigint | boolean;

/** Request parameter keys with protocol meaning, rejected by clients as custom keys (§2.7). */
export const RESERVED_PARAMETERS = [
  'sequence_id',
  'sequence_start',
  'sequence_end',
  'priority',
  'timeout',
  'headers',
  'binary_data_output',
] as const;

export type ReservedParameter = (typeof RESERVED_PARAMETERS)[number];

/** Prefix reserved for Triton's own parameters (§2.7). */
export const TRITON_PARAMETER_PREFIX = 'triton_';

/** Request-level keys the server interprets (§3.12); every other key is a custom parameter. */
export const SERVER_PARAMETERS = [
  'sequence_id',
  'sequence_start',
  'sequence_end',
  'priority',
  'timeout',
  'binary_data_output',
  'triton_enable_empty_final_response',
] as const;

export type ServerParameter = (typeof SERVER_PARAMETERS)[number];

/** Response parameter set by the server on streamed responses (§4.7). */
export const TRITON_FINAL_RESPONSE = 'triton_final_response';

const RESERVED = new Set<string>(RESERVED_PARAMETERS);

/** Whether `name` is reserved (§2.7): one of RESERVED_PARAMETERS or starts with `triton_`. */
export function isReservedParameter(name: string): boolean {
  return RESERVED.has(name) || name.startsWith(TRITON_PARAMETER_PREFIX);
}

export interface HttpParameterOptions {
  /** What holds the parameters, for messages: "request", "response". Default "request". */
  readonly where?: string;
  /**
   * Reject keys starting with `triton_`, as the HTTP endpoint does for request parameters
   * (§2.7, §3.12). Default true.
   */
  readonly rejectTritonKeys?: boolean;
}

/**
 * Validates an HTTP JSON `parameters` object (§3.12) and returns its entries in key order.
 * Values must be strings, bools or numbers (int or double; a bigint from `parseJson` is an int).
 * Errors (all INVALID_ARG): not a plain object → REQUEST_MALFORMED; another value type →
 * REQUEST_PARAMETER_TYPE; a `triton_` key while `rejectTritonKeys` → REQUEST_PARAMETER.
 * `undefined` (the key was absent) gives an empty map.
 */
export function parseHttpParameters(value: unknown, options: HttpParameterOptions = {}): Map<string, ParameterValue> {
  const where = options.where ?? 'request';
  const rejectTriton = options.rejectTritonKeys ?? true;
  const out = new Map<string, ParameterValue>();
  if (value === undefined) return out;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new NereidError('REQUEST_MALFORMED', `'parameters' of the ${where} should be a JSON object`);
  }
  for (const [key, v] of Object.entries(value as Record<string, unknown>)) {
    if (rejectTriton && key.startsWith(TRITON_PARAMETER_PREFIX)) {
      throw new NereidError(
        'REQUEST_PARAMETER',
        `parameter keys starting with '${TRITON_PARAMETER_PREFIX}' are reserved for Triton usage and ` +
          `should not be specified, got '${key}' in the ${where} parameters`,
      );
    }
    if (typeof v === 'string' || typeof v === 'number' || typeof v === 'bigint' || typeof v === 'boolean') {
      out.set(key, v);
    } else {
      throw new NereidError(
        'REQUEST_PARAMETER_TYPE',
        `parameter '${key}' of the ${where} has an invalid type; it should be either 'int', ` +
          `'double', 'bool', or 'string'`,
      );
    }
  }
  return out;
}
