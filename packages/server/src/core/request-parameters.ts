/**
 * Interprets request parameters (protocol.md §3.12): the keys with protocol meaning are typed and
 * checked; everything else is a custom parameter passed to the model.
 */
import { NereidError, type ParameterValue } from '@nereid/protocol';

export interface RequestParameters {
  /** Correlation id; 0n / '' when the request is not part of a sequence. */
  sequenceId: bigint | string;
  sequenceStart: boolean;
  sequenceEnd: boolean;
  /** 0 = the model's default priority level. */
  priority: number;
  /** Queue timeout in microseconds; 0 = none. */
  timeoutUs: number;
  /** Stream only: send an empty final response for decoupled models (§4.7). */
  enableEmptyFinalResponse: boolean;
  custom: Record<string, ParameterValue>;
}

const UINT64_MAX = (1n << 64n) - 1n;

const EMPTY: Readonly<Record<string, ParameterValue>> = Object.freeze({});

function unsigned(model: string, key: string, value: ParameterValue): bigint {
  // The protocol's unsigned parameters are uint64: a larger integer is refused, not wrapped.
  if ((typeof value === 'number' && Number.isInteger(value) && value >= 0 && value < 2 ** 64) || (typeof value === 'bigint' && value >= 0n && value <= UINT64_MAX)) {
    return BigInt(value);
  }
  throw new NereidError(
    'REQUEST_PARAMETER_TYPE',
    `invalid value for parameter '${key}' of a request for model '${model}': expected an unsigned integer, got ${JSON.stringify(typeof value === 'bigint' ? String(value) : value)}`,
  );
}

function bool(model: string, key: string, value: ParameterValue): boolean {
  if (typeof value === 'boolean') return value;
  throw new NereidError(
    'REQUEST_PARAMETER_TYPE',
    `invalid value for parameter '${key}' of a request for model '${model}': expected a bool, got ${JSON.stringify(typeof value === 'bigint' ? String(value) : value)}`,
  );
}

/** Splits and checks the parameters of a request for `model`. */
export function interpretParameters(
  parameters: Readonly<Record<string, ParameterValue>> | undefined,
  model: string,
): RequestParameters {
  const result: RequestParameters = {
    sequenceId: 0n,
    sequenceStart: false,
    sequenceEnd: false,
    priority: 0,
    timeoutUs: 0,
    enableEmptyFinalResponse: false,
    custom: EMPTY as Record<string, ParameterValue>,
  };
  if (parameters === undefined) return result;
  let custom: Record<string, ParameterValue> | undefined;
  for (const key in parameters) {
    const value = parameters[key]!;
    switch (key) {
      case 'sequence_id':
        result.sequenceId = typeof value === 'string' ? value : unsigned(model, key, value);
        break;
      case 'sequence_start':
        result.sequenceStart = bool(model, key, value);
        break;
      case 'sequence_end':
        result.sequenceEnd = bool(model, key, value);
        break;
      case 'priority': {
        const p = unsigned(model, key, value);
        result.priority = p > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(p);
        break;
      }
      case 'timeout': {
        const t = unsigned(model, key, value);
        result.timeoutUs = t > BigInt(Number.MAX_SAFE_INTEGER) ? Number.MAX_SAFE_INTEGER : Number(t);
        break;
      }
      case 'triton_enable_empty_final_response':
        result.enableEmptyFinalResponse = bool(model, key, value);
        break;
      case 'binary_data_output':
      case 'headers':
        // Transport-level keys: the frontend consumed them; never passed to the model.
        break;
      default:
        if (key.startsWith('triton_')) {
          throw new NereidError(
            'REQUEST_PARAMETER',
            `parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified (got '${key}' for model '${model}')`,
          );
        }
        custom ??= {};
        custom[key] = value;
    }
  }
  if (custom) result.custom = custom;
  return result;
}
