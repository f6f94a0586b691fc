import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BackendResponse } from '../backends/spi.js';
import { LocalCache } from './local-cache.js';
import { decodeEntry, encodeEntry } from './response-cache.js';

const response = (fill: number, bytes = 100): BackendResponse => ({
  outputs: [{ name: 'OUT', datatype: 'UINT8', shape: [1, bytes], data: new Uint8Array(bytes).fill(fill) }],
});
/** What one entry of `response(…, bytes)` under a one-character key occupies. */
const entrySize = (bytes: number): number => encodeEntry(response(0, bytes)).length + 1;

describe('stored responses', () => {
  it('round-trip outputs in order with datatype, shape, bytes and parameters (64-bit integers included)', () => {
    const r: BackendResponse = {
      outputs: [
        { name: 'B', datatype: 'FP32', shape: [2, 2], data: new Uint8Array(new Float32Array([1, 2, 3, 4]).buffer) },
        { name: 'A', datatype: 'BYTES', shape: [1], data: new Uint8Array([3, 0, 0, 0, 97, 98, 99]) },
        { name: 'E', datatype: 'INT32', shape: [0], data: new Uint8Array(0) },
      ],
      parameters: { p: 'x', n: 3, b: true, big: 2n ** 63n - 1n },
    };
    const back = decodeEntry(encodeEntry(r));
    assert.deepEqual(
      back.outputs.map((t) => ({ ...t, data: [...t.data] })),
      r.outputs.map((t) => ({ ...t, data: [...t.data] })),
    );
    assert.deepEqual(back.parameters, r.parameters);
  });
});

describe('LocalCache', () => {
  it('hands back what was inserted, a copy the caller may reuse its buffers after', () => {
    const cache = new LocalCache(10_000);
    const r = response(7);
    cache.insert('k', r);
    (r.outputs[0]!.data as Uint8Array).fill(0);
    const hit = cache.lookup('k');
    assert.ok(hit);
    assert.deepEqual([...hit.outputs[0]!.data], new Array(100).fill(7));
    assert.equal(cache.lookup('other'), undefined);
    assert.deepEqual(
      { hits: cache.counters.hits, misses: cache.counters.misses, lookups: cache.counters.lookups, entries: cache.counters.entries },
      { hits: 1, misses: 1, lookups: 2, entries: 1 },
    );
  });

  it('keeps the first response for a key (an insert of a present key is skipped)', () => {
    const cache = new LocalCache(10_000);
    cache.insert('k', response(1));
    cache.insert('k', response(2));
    assert.equal(cache.lookup('k')!.outputs[0]!.data[0], 1);
    assert.equal(cache.counters.inserts, 1);
  });

  it('evicts the least recently used entries to stay within its bytes', () => {
    const one = entrySize(100);
    const cache = new LocalCache(3 * one);
    cache.insert('a', response(1));
    cache.insert('b', response(2));
    cache.insert('c', response(3));
    assert.equal(cache.counters.bytes, 3 * one);
    cache.lookup('a'); // a is now the most recent: b goes first
    cache.insert('d', response(4));
    assert.deepEqual(cache.keys(), ['c', 'a', 'd']);
    assert.equal(cache.counters.evictions, 1);
    assert.equal(cache.lookup('b'), undefined);
    // An entry twice the size pushes out the two oldest.
    cache.insert('e', response(5, 100 + one));
    assert.deepEqual(cache.keys(), ['d', 'e']);
    assert.equal(cache.counters.evictions, 3);
    assert.ok(cache.counters.bytes <= cache.capacityBytes);
    assert.equal(cache.counters.entries, 2);
  });

  it('does not store a response larger than the whole cache, and evicts nothing for it', () => {
    const cache = new LocalCache(entrySize(100));
    cache.insert('a', response(1));
    cache.insert('big', response(2, 101));
    assert.deepEqual(cache.keys(), ['a']);
    assert.equal(cache.counters.evictions, 0);
  });
});
