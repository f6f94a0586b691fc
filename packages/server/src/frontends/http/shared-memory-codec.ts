/**
 * Bodies of the shared-memory register requests (protocol.md §3.17.1, §3.17.2).
 */
import { NereidError } from '@nereid/protocol';
import { jsonObjectBody } from './body.js';

type JsonObject = Record<string, unknown>;

function uint(doc: JsonObject, key: string, region: string, required: boolean): number {
  const value = doc[key];
  if (value === undefined && !required) return 0;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0) {
    throw new NereidError(
      'SHM_REGISTER_INVALID',
      value === undefined
        ? `Shared memory register request for region '${region}' is missing '${key}'`
        : `'${key}' of the shared memory register request for region '${region}' must be a non-negative integer`,
    );
  }
  return value;
}

export interface SystemRegisterRequest {
  key: string;
  offset: number;
  byteSize: number;
}

/** `{"key": string, "offset"?: uint, "byte_size": uint}`. */
export function decodeSystemRegister(body: Uint8Array, region: string): SystemRegisterRequest {
  const doc = jsonObjectBody(body, 'system shared memory register');
  if (typeof doc.key !== 'string') {
    throw new NereidError(
      'SHM_REGISTER_INVALID',
      doc.key === undefined
        ? `Shared memory register request for region '${region}' is missing 'key'`
        : `'key' of the shared memory register request for region '${region}' must be a string`,
    );
  }
  return { key: doc.key, offset: uint(doc, 'offset', region, false), byteSize: uint(doc, 'byte_size', region, true) };
}

export interface CudaRegisterRequest {
  rawHandle: Uint8Array;
  deviceId: number;
  byteSize: number;
}

/** `{"raw_handle": {"b64": string}, "device_id": uint, "byte_size": uint}`, all required. */
export function decodeCudaRegister(body: Uint8Array, region: string): CudaRegisterRequest {
  const doc = jsonObjectBody(body, 'CUDA shared memory register');
  const handle = doc.raw_handle;
  const b64 = typeof handle === 'object' && handle !== null ? (handle as JsonObject).b64 : undefined;
  if (typeof b64 !== 'string') {
    throw new NereidError('SHM_REGISTER_INVALID', `CUDA shared memory register request for region '${region}' needs 'raw_handle' as {"b64": <base64 string>}`);
  }
  return {
    rawHandle: Buffer.from(b64, 'base64'),
    deviceId: uint(doc, 'device_id', region, true),
    byteSize: uint(doc, 'byte_size', region, true),
  };
}
