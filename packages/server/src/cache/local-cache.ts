/**
 * The `local` cache (`--cache-config local,size=<bytes>`): an in-memory store of at most `size`
 * bytes, evicting least-recently-used entries. An entry's size is its stored form
 * (response-cache.ts `encodeEntry`: outputs plus their description) plus its key. A response
 * larger than the whole cache is not stored. Synchronous: lookups and inserts cost no turn of
 * the event loop.
 */
import type { BackendResponse } from '../backends/spi.js';
import { decodeEntry, encodeEntry, newCounters, type CacheCounters, type ResponseCache } from './response-cache.js';

interface Entry {
  readonly response: BackendResponse;
  readonly bytes: number;
}

export class LocalCache implements ResponseCache {
  readonly name = 'local' as const;
  readonly capacityBytes: number;
  readonly counters: CacheCounters = newCounters();
  /** In recency order: the first entry is the least recently used (a Map keeps insertion order). */
  readonly #entries = new Map<string, Entry>();

  constructor(capacityBytes: number) {
    this.capacityBytes = capacityBytes;
  }

  lookup(key: string): BackendResponse | undefined {
    const start = process.hrtime.bigint();
    const c = this.counters;
    c.lookups++;
    const entry = this.#entries.get(key);
    if (entry === undefined) {
      c.misses++;
    } else {
      c.hits++;
      this.#entries.delete(key);
      this.#entries.set(key, entry);
    }
    c.lookupNs += Number(process.hrtime.bigint() - start);
    return entry?.response;
  }

  insert(key: string, response: BackendResponse): void {
    if (this.#entries.has(key)) return;
    const start = process.hrtime.bigint();
    const stored = encodeEntry(response);
    const bytes = stored.length + key.length;
    if (bytes <= this.capacityBytes) {
      const c = this.counters;
      while (c.bytes + bytes > this.capacityBytes) this.#evictOldest();
      this.#entries.set(key, { response: decodeEntry(stored), bytes });
      c.entries++;
      c.bytes += bytes;
      c.inserts++;
    }
    this.counters.insertNs += Number(process.hrtime.bigint() - start);
  }

  #evictOldest(): void {
    const [key, entry] = this.#entries.entries().next().value as [string, Entry];
    this.#entries.delete(key);
    this.counters.entries--;
    this.counters.bytes -= entry.bytes;
    this.counters.evictions++;
  }

  /** Keys from least to most recently used (tests). */
  keys(): string[] {
    return [...this.#entries.keys()];
  }

  async close(): Promise<void> {
    this.#entries.clear();
    this.counters.entries = 0;
    this.counters.bytes = 0;
  }
}
