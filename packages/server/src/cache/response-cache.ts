/**
 * The response cache's contract (models-and-scheduling.md §8.2) and the stored form of a
 * response. One cache serves every model; keys (request-key.ts) name the model and version.
 */
import type { ParameterValue } from '@nereid/protocol';
import type { BackendResponse, BackendTensor } from '../backends/spi.js';

/** Counters of one cache, for the server-wide `nv_cache_*` families. */
export interface CacheCounters {
  /** Entries held now (the local cache; a Redis cache does not count what the server holds). */
  entries: number;
  /** Bytes held now (the local cache). */
  bytes: number;
  hits: number;
  misses: number;
  lookups: number;
  inserts: number;
  evictions: number;
  /** Lookups and inserts that failed (a Redis error or timeout), each counted as a miss or a skipped insert. */
  errors: number;
  /** Cumulative lookup nanoseconds (hits and misses). */
  lookupNs: number;
  /** Cumulative insert nanoseconds. */
  insertNs: number;
}

export const newCounters = (): CacheCounters => ({
  entries: 0,
  bytes: 0,
  hits: 0,
  misses: 0,
  lookups: 0,
  inserts: 0,
  evictions: 0,
  errors: 0,
  lookupNs: 0,
  insertNs: 0,
});

/**
 * A response cache. `lookup` and `insert` never throw or reject: a cache that fails (a Redis
 * server down or slow past its timeout) logs, counts an error and answers a miss, or skips the
 * insert, so a request never fails or waits unbounded because of its cache.
 *
 * Ownership: `insert` copies the response's bytes (the caller's buffers may be pooled and
 * reused); `lookup` hands out a response whose tensors the caller must not write into (its
 * bytes may be shared by later hits).
 */
export interface ResponseCache {
  readonly name: 'local' | 'redis';
  /** Capacity in bytes where the cache has one (local), else 0. */
  readonly capacityBytes: number;
  readonly counters: CacheCounters;
  lookup(key: string): BackendResponse | undefined | Promise<BackendResponse | undefined>;
  insert(key: string, response: BackendResponse): void | Promise<void>;
  close(): Promise<void>;
}

interface EntryHeader {
  o: { n: string; d: string; s: number[]; b: number }[];
  p?: Record<string, ParameterValue | { bigint: string }>;
}

/**
 * One response as bytes: a 4-byte little-endian header length, the JSON header (each output's
 * name, datatype, shape and byte length; the response parameters), then every output's bytes.
 * One allocation and one copy of each output.
 */
export function encodeEntry(response: BackendResponse): Buffer {
  const header: EntryHeader = { o: response.outputs.map((t) => ({ n: t.name, d: t.datatype, s: [...t.shape], b: t.data.byteLength })) };
  if (response.parameters !== undefined && Object.keys(response.parameters).length > 0) {
    header.p = {};
    for (const [k, v] of Object.entries(response.parameters)) header.p[k] = typeof v === 'bigint' ? { bigint: v.toString() } : v;
  }
  const json = Buffer.from(JSON.stringify(header));
  let total = 4 + json.length;
  for (const t of response.outputs) total += t.data.byteLength;
  const out = Buffer.allocUnsafe(total);
  out.writeUInt32LE(json.length, 0);
  json.copy(out, 4);
  let at = 4 + json.length;
  for (const t of response.outputs) {
    out.set(t.data, at);
    at += t.data.byteLength;
  }
  return out;
}

/** The response `encodeEntry` wrote; its tensors are views of `bytes`. Throws on a malformed entry. */
export function decodeEntry(bytes: Uint8Array): BackendResponse {
  const view = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const length = view.readUInt32LE(0);
  const header = JSON.parse(view.toString('utf8', 4, 4 + length)) as EntryHeader;
  let at = 4 + length;
  const outputs: BackendTensor[] = [];
  for (const o of header.o) {
    if (at + o.b > view.length) throw new Error('cache entry shorter than its header says');
    outputs.push({ name: o.n, datatype: o.d as BackendTensor['datatype'], shape: o.s, data: new Uint8Array(view.buffer, view.byteOffset + at, o.b) });
    at += o.b;
  }
  if (header.p === undefined) return { outputs };
  const parameters: Record<string, ParameterValue> = {};
  for (const [k, v] of Object.entries(header.p)) parameters[k] = typeof v === 'object' ? BigInt(v.bigint) : v;
  return { outputs, parameters };
}
