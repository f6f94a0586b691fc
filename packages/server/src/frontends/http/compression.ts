/**
 * Response compression for the infer endpoint (protocol.md §3.10).
 */
import { deflate, gzip } from 'node:zlib';

export type ResponseCoding = 'identity' | 'gzip' | 'deflate';

/**
 * Parses `Accept-Encoding` as `coding[;q=weight]` tokens; among identity, deflate and gzip the one
 * with the strictly greatest weight wins, ties going to the earlier token. No header: identity.
 */
export function negotiateEncoding(header: string | undefined): ResponseCoding {
  if (!header) return 'identity';
  let best: ResponseCoding = 'identity';
  let bestWeight = -1;
  for (const token of header.split(',')) {
    const [rawCoding, ...params] = token.split(';');
    const coding = rawCoding!.trim().toLowerCase();
    if (coding !== 'identity' && coding !== 'gzip' && coding !== 'deflate') continue;
    let weight = 1;
    for (const p of params) {
      const m = /^\s*q\s*=\s*([0-9.]+)\s*$/i.exec(p);
      if (m) weight = Number(m[1]);
    }
    if (Number.isFinite(weight) && weight > bestWeight) {
      best = coding;
      bestWeight = weight;
    }
  }
  return bestWeight > 0 ? best : 'identity';
}

/** Compresses the whole body; undefined if compression failed (then it is sent uncompressed). */
export function compressBody(coding: 'gzip' | 'deflate', body: Buffer): Promise<Buffer | undefined> {
  return new Promise((resolve) => {
    const done = (err: Error | null, out: Buffer) => resolve(err ? undefined : out);
    if (coding === 'gzip') gzip(body, done);
    else deflate(body, done);
  });
}
