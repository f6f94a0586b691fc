/**
 * Reading request bodies: size limit (`--http-max-input-size`, protocol.md §3.1) and request
 * decompression (§3.10).
 */
import type { IncomingMessage } from 'node:http';
import { unzip } from 'node:zlib';
import { NereidError } from '@nereid/protocol';

function tooLarge(limit: number, what: string): NereidError {
  return new NereidError(
    'REQUEST_TOO_LARGE',
    `${what} exceeds the maximum input size of ${limit} bytes; start the server with a larger --http-max-input-size to allow it`,
  );
}

/** Reads the whole body; rejects once it exceeds `limit` bytes. */
export function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
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
