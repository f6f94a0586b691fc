/**
 * Reading request bodies: size limit (`--http-max-input-size`, protocol.md §3.1) and request
 * decompression (§3.10).
 */
import { unzip } from 'node:zlib';
import { NereidError } from '@nereid/protocol';
import type { BufferPool } from '../../core/buffer-pool.js';
import type { HttpRequest } from './transport.js';

function tooLarge(limit: number, what: string): NereidError {
  return new NereidError(
    'REQUEST_TOO_LARGE',
    `${what} exceeds the maximum input size of ${limit} bytes; start the server with a larger --http-max-input-size to allow it`,
  );
}

/** Reads the whole body; rejects once it exceeds `limit` bytes. */
export function readBody(req: HttpRequest, limit: number): Promise<Buffer> {
  const declared = Number(req.headers['content-length']);
  if (Number.isFinite(declared) && declared > limit) return Promise.reject(tooLarge(limit, `request body of ${declared} bytes`));
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let failed = false;
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      size += chunk.byteLength;
      if (size > limit) {
        failed = true;
        reject(tooLarge(limit, 'request body'));
        return;
      }
      chunks.push(chunk);
    });
    req.on('end', () => {
      if (failed) return;
      resolve(chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size));
    });
    req.on('error', (err) => {
      if (failed) return;
      failed = true;
      reject(new NereidError('REQUEST_MALFORMED', `failed to read the request body: ${err.message}`));
    });
    req.on('aborted', () => {
      if (failed) return;
      failed = true;
      reject(new NereidError('REQUEST_CANCELLED', 'the client closed the connection before sending the whole body'));
    });
  });
}

/** Alignment of a pooled body's binary part (`readBodyInto`): enough for every tensor element type. */
export const BODY_ALIGNMENT = 64;

/** A request body read into a buffer the caller must `release` once nothing views it any more. */
export interface PooledBody {
  readonly bytes: Buffer;
  /** Gives the buffer back for reuse (at most once; later calls do nothing). */
  release(): void;
}

/**
 * Reads the whole body like `readBody`. When the request declares its `Content-Length`, the body
 * is copied as it arrives into one buffer of that size taken from `pool` (no list of chunks, no
 * concatenation at the end); `release` gives it back. Ownership: the bytes, and every view of
 * them, are the caller's until `release`; after it they may hold another request's body.
 * Without a declared length (chunked encoding), or below the pool's smallest size (a small body
 * usually arrives as one chunk, which `readBody` hands on as it is), the body is read as
 * `readBody` reads it and `release` does nothing.
 *
 * `alignedOffset`: the body's byte at this offset (where an inference request's binary tensors
 * start) is placed at a multiple of BODY_ALIGNMENT in the buffer, so that tensors can be viewed
 * as typed arrays where they lie.
 */
export function readBodyInto(req: HttpRequest, limit: number, pool: BufferPool, alignedOffset = 0): Promise<PooledBody> {
  const declared = Number(req.headers['content-length']);
  if (!Number.isSafeInteger(declared) || declared < pool.minBytes || req.headers['transfer-encoding'] !== undefined) {
    return readBody(req, limit).then((bytes) => ({ bytes, release: () => {} }));
  }
  if (declared > limit) return Promise.reject(tooLarge(limit, `request body of ${declared} bytes`));
  const pad = alignedOffset > 0 && alignedOffset < declared ? (BODY_ALIGNMENT - (alignedOffset % BODY_ALIGNMENT)) % BODY_ALIGNMENT : 0;
  const buffer = pool.take(declared + pad);
  const bytes = Buffer.from(buffer, pad, declared);
  let released = false;
  const release = (): void => {
    if (released) return;
    released = true;
    pool.give(buffer);
  };
  return new Promise<PooledBody>((resolve, reject) => {
    let size = 0;
    let failed = false;
    const fail = (error: NereidError): void => {
      if (failed) return;
      failed = true;
      release();
      reject(error);
    };
    req.on('data', (chunk: Buffer) => {
      if (failed) return;
      // node:http stops at the declared length; this guards the copy, not the protocol.
      if (size + chunk.byteLength > declared) {
        fail(new NereidError('REQUEST_MALFORMED', `the request body is longer than its Content-Length of ${declared} bytes`));
        return;
      }
      chunk.copy(bytes, size);
      size += chunk.byteLength;
    });
    req.on('end', () => {
      if (failed) return;
      if (size !== declared) {
        fail(new NereidError('REQUEST_MALFORMED', `the request body holds ${size} bytes, not its Content-Length of ${declared}`));
        return;
      }
      resolve({ bytes, release });
    });
    req.on('error', (err) => fail(new NereidError('REQUEST_MALFORMED', `failed to read the request body: ${err.message}`)));
    req.on('aborted', () => fail(new NereidError('REQUEST_CANCELLED', 'the client closed the connection before sending the whole body')));
  });
}

/**
 * Undoes `Content-Encoding`. `deflate` is zlib-wrapped (RFC 1950) as the Triton clients send it;
 * the inflater accepts zlib and gzip framing for both names, as Triton's does.
 */
export async function decodeContent(body: Buffer, encoding: string | undefined, limit: number): Promise<Buffer> {
  const coding = (encoding ?? '').trim().toLowerCase();
  if (coding === '' || coding === 'identity') return body;
  if (coding !== 'gzip' && coding !== 'deflate') {
    throw new NereidError('REQUEST_COMPRESSION_UNSUPPORTED', 'Unsupported compression type');
  }
  return new Promise<Buffer>((resolve, reject) => {
    unzip(body, { maxOutputLength: limit }, (err, out) => {
      if (!err) resolve(out);
      else if ((err as NodeJS.ErrnoException).code === 'ERR_BUFFER_TOO_LARGE') reject(tooLarge(limit, 'decompressed request body'));
      else reject(new NereidError('REQUEST_COMPRESSION_INVALID', `failed to decompress the '${coding}' request body: ${err.message}`));
    });
  });
}

/**
 * A request body that must be a JSON object (settings, repository and shared-memory requests);
 * `what` names the request in the error when it is not one. With `emptyIsObject`, an empty body
 * is `{}` (the repository requests' bodies are optional).
 */
export function jsonObjectBody(body: Uint8Array, what: string, emptyIsObject = false): Record<string, unknown> {
  const text = Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8');
  if (emptyIsObject && text.trim() === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new NereidError('REQUEST_MALFORMED', `failed to parse the request JSON buffer: ${(err as Error).message}`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new NereidError('REQUEST_MALFORMED', `the ${what} request body must be a JSON object`);
  }
  return parsed as Record<string, unknown>;
}
