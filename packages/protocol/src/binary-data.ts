/**
 * Framing of the HTTP binary tensor data extension (protocol.md §3.8) and the raw binary request
 * (§3.9): a JSON inference header followed by back-to-back tensor blobs.
 */
import { NereidError } from './errors.js';

/** The HTTP header that carries the JSON header's byte length (§3.8), lower-cased as Node has it. */
export const INFERENCE_HEADER_CONTENT_LENGTH = 'inference-header-content-length';

/** A request body split into its JSON header and the binary data after it. */
export interface InferenceBodyParts {
  /** The JSON inference header (empty in raw binary mode). A view over the body. */
  readonly header: Uint8Array;
  /** The bytes after the header: the blobs, or the single input's data in raw mode. A view. */
  readonly binary: Uint8Array;
  /** True when `Inference-Header-Content-Length: 0` selected the raw binary request (§3.9). */
  readonly rawBinary: boolean;
}

const DECIMAL = /^[0-9]+$/;

/**
 * Splits a (decompressed) request body by the `Inference-Header-Content-Length` value (§3.8):
 * absent → the whole body is the header; `H` → header is bytes [0, H) and binary data starts at
 * H; `0` → raw binary mode (§3.9). Both parts are views over `body` (no copy).
 * Throws NereidError('REQUEST_MALFORMED') (INVALID_ARG) when the value is not a decimal integer
 * in [0, body length].
 */
export function splitInferenceBody(body: Uint8Array, headerLength: string | undefined): InferenceBodyParts {
  if (headerLength === undefined) {
    return { header: body, binary: body.subarray(body.byteLength), rawBinary: false };
  }
  const text = headerLength.trim();
  const h = DECIMAL.test(text) ? Number(text) : NaN;
  if (Number.isSafeInteger(h) && h > body.byteLength) {
    // Triton's text for a size past the body, then Nereid's detail.
    throw new NereidError(
      'REQUEST_MALFORMED',
      `inference header size should be in range (0, ${body.byteLength}), got: ${text}; ` +
        `the body holds ${body.byteLength} bytes (0 sends the whole body as one raw binary input)`,
    );
  }
  if (!(h <= body.byteLength)) {
    throw new NereidError(
      'REQUEST_MALFORMED',
      `inference header size should be an integer in range [0, ${body.byteLength}] ` +
        `(the body length), got: '${headerLength}'`,
    );
  }
  if (h === 0) return { header: body.subarray(0, 0), binary: body, rawBinary: true };
  return { header: body.subarray(0, h), binary: body.subarray(h), rawBinary: false };
}

/**
 * Hands out the request's binary blobs in input order (§3.8). Use one reader per request: call
 * `next` for each input with `binary_data_size`, in the order of `inputs`, then `finish`.
 * Returned blobs are views over the data given to the constructor (no copy).
 */
export class BinaryDataReader {
  readonly #data: Uint8Array;
  readonly #model: string;
  #offset = 0;

  /** `binary` is the data after the header; `modelName` is used in error messages. */
  constructor(binary: Uint8Array, modelName: string) {
    this.#data = binary;
    this.#model = modelName;
  }

  /** Bytes not yet handed out. */
  get remaining(): number {
    return this.#data.byteLength - this.#offset;
  }

  /**
   * The next `byteSize` bytes, for input `inputName`; `byteSize` 0 consumes nothing.
   * Throws NereidError('INPUT_BYTE_SIZE') (INVALID_ARG) when fewer bytes remain, or when
   * `byteSize` is not a non-negative integer.
   */
  next(inputName: string, byteSize: number | bigint): Uint8Array {
    const size = typeof byteSize === 'bigint' ? Number(byteSize) : byteSize;
    if (!Number.isSafeInteger(size) || size < 0) {
      throw new NereidError(
        'INPUT_BYTE_SIZE',
        `'binary_data_size' of input '${inputName}' for model '${this.#model}' should be a ` +
          `non-negative integer, got ${String(byteSize)}`,
      );
    }
    const remaining = this.remaining;
    if (size > remaining) {
      throw new NereidError(
        'INPUT_BYTE_SIZE',
        `unexpected size for input '${inputName}', expecting ${size} additional bytes for model ` +
          `'${this.#model}', but only ${remaining} remain in the request body`,
      );
    }
    const start = this.#offset;
    this.#offset = start + size;
    return this.#data.subarray(start, start + size);
  }

  /** Throws NereidError('REQUEST_MALFORMED') (INVALID_ARG) if any bytes were not consumed. */
  finish(): void {
    const remaining = this.remaining;
    if (remaining !== 0) {
      throw new NereidError(
        'REQUEST_MALFORMED',
        `unexpected additional input data for model '${this.#model}': ${remaining} bytes after ` +
          `the last binary input`,
      );
    }
  }
}

/** A response body as chunks for the caller to write in order (§3.8, response side). */
export interface InferenceBodyChunks {
  /** The UTF-8 JSON header, then every non-empty blob, in order. Blobs are the caller's views. */
  readonly chunks: Uint8Array[];
  /** Byte length of the JSON header: the `Inference-Header-Content-Length` value. */
  readonly headerLength: number;
  /** Sum of all chunk lengths: the `Content-Length` value. */
  readonly totalLength: number;
}

/**
 * Lays out a response body: the JSON header followed by the blobs of the binary outputs in
 * `outputs` order, with no concatenation copy. Zero-length blobs contribute nothing. Whether to
 * send `Inference-Header-Content-Length` is the caller's decision: when no blob is non-empty the
 * body is pure JSON and Triton omits the header (§3.7.2).
 */
export function joinInferenceBody(headerJson: string, blobs: readonly Uint8Array[]): InferenceBodyChunks {
  const header = Buffer.from(headerJson, 'utf8');
  const chunks: Uint8Array[] = [header];
  let totalLength = header.byteLength;
  for (const blob of blobs) {
    if (blob.byteLength === 0) continue;
    chunks.push(blob);
    totalLength += blob.byteLength;
  }
  return { chunks, headerLength: header.byteLength, totalLength };
}
