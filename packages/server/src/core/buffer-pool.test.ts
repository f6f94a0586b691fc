import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { BufferPool, lendViews, returnView } from './buffer-pool.js';
import { requireNativeAddon } from './test-support.js';
import { slabId, takeSlab } from './slabs.js';

describe('BufferPool', () => {
  it('hands a given-back buffer to the next caller of a fitting size, and never to two callers at once', () => {
    const pool = new BufferPool({ minBytes: 1024, maxBytes: 1 << 20 });
    const a = pool.take(4096);
    const b = pool.take(4096);
    assert.notEqual(a, b);
    assert.ok(a.byteLength >= 4096);
    pool.give(a);
    assert.equal(pool.idleBytes, a.byteLength);
    assert.equal(pool.take(3000), a, 'an idle buffer up to twice the size asked is reused');
    assert.equal(pool.idleBytes, 0);
    const c = pool.take(4096);
    assert.notEqual(c, a);
    assert.notEqual(c, b);
  });

  it('does not reuse a buffer more than twice as large as asked, nor one too small', () => {
    const pool = new BufferPool({ minBytes: 1024, maxBytes: 1 << 20 });
    const big = pool.take(64 * 1024);
    pool.give(big);
    assert.notEqual(pool.take(8 * 1024), big);
    assert.notEqual(pool.take(128 * 1024), big);
    assert.equal(pool.take(40 * 1024), big);
  });

  it('allocates small buffers fresh and keeps no more idle bytes than its bound', () => {
    const pool = new BufferPool({ minBytes: 1024, maxBytes: 10 * 1024 });
    const small = pool.take(100);
    assert.equal(small.byteLength, 100);
    pool.give(small);
    assert.equal(pool.idleBytes, 0, 'buffers under minBytes are not kept');
    const four = [pool.take(4096), pool.take(4096), pool.take(4096)];
    for (const b of four) pool.give(b);
    assert.ok(pool.idleBytes <= 10 * 1024, `idle ${pool.idleBytes}`);
    pool.give(new ArrayBuffer(64 * 1024));
    assert.ok(pool.idleBytes <= 10 * 1024, 'a buffer over the bound is dropped');
  });

  it('ignores a detached (transferred) buffer given back', () => {
    const pool = new BufferPool({ minBytes: 1024 });
    const b = pool.take(4096);
    structuredClone(b, { transfer: [b] });
    pool.give(b);
    assert.equal(pool.idleBytes, 0);
  });
});

describe('lendViews / returnView', () => {
  it('gives the buffer back only once every lent view was returned, each view counting once', () => {
    const pool = new BufferPool({ minBytes: 1024 });
    const buffer = pool.take(8192);
    const a = new Uint8Array(buffer, 0, 4096);
    const b = new Uint8Array(buffer, 4096, 4096);
    lendViews(pool, buffer, [a, b]);
    returnView(a);
    returnView(a);
    assert.equal(pool.idleBytes, 0, 'one view is still out');
    returnView(new Uint8Array(buffer, 4096, 4096));
    assert.equal(pool.idleBytes, 0, 'a view that was not lent does not count');
    returnView(b);
    assert.equal(pool.idleBytes, buffer.byteLength);
    assert.equal(pool.take(8192), buffer);
  });

  it('keeps a buffer out of the pool while a view is never returned', () => {
    const pool = new BufferPool({ minBytes: 1024 });
    const buffer = pool.take(4096);
    const kept = new Uint8Array(buffer);
    const sent = new Uint8Array(buffer, 0, 100);
    lendViews(pool, buffer, [kept, sent]);
    returnView(sent);
    assert.equal(pool.idleBytes, 0);
    assert.notEqual(pool.take(4096), buffer);
  });

  it('gives a buffer lent to no view straight back', () => {
    const pool = new BufferPool({ minBytes: 1024 });
    const buffer = pool.take(4096);
    lendViews(pool, buffer, [new Uint8Array(8)]);
    assert.equal(pool.idleBytes, buffer.byteLength);
  });
});

describe('BufferPool (shared)', () => {
  before(requireNativeAddon);
  it('hands out slabs, reuses them, and gives those it drops back to the slabs', () => {
    const pool = new BufferPool({ shared: true, minBytes: 64 * 1024, maxBytes: 4 << 20 });
    const a = pool.take(3 << 20);
    const b = pool.take(3 << 20);
    assert.notEqual(slabId(a), undefined, 'a fresh buffer is a slab');
    assert.notEqual(slabId(b), undefined);
    assert.equal(pool.take(100).byteLength, 100, 'small buffers are fresh, not slabs');
    pool.give(a);
    assert.equal(pool.take(3 << 20), a, 'an idle slab is reused');
    pool.give(a);
    // Over the bound: the largest idle buffers are dropped, and a dropped slab is free again.
    pool.give(b);
    assert.equal(pool.idleBytes, b.byteLength, 'one 4 MiB slab fits the bound: a was dropped');
    assert.equal(takeSlab(3 << 20), a, 'the dropped slab is free again');
    assert.equal(pool.take(3 << 20), b);
  });

  it('a pool that is not shared never hands out slabs', () => {
    const pool = new BufferPool({ minBytes: 64 * 1024 });
    assert.equal(slabId(pool.take(1 << 20)), undefined);
  });
});
