import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { StreamRequests } from './stream-requests.js';
import type { Sent } from './transport.js';

/** Whether `p` has settled by the next macrotask, and how. */
async function state(p: Promise<Sent>): Promise<Sent | Error | 'pending'> {
  return Promise.race([p.catch((e: Error) => e), new Promise<'pending'>((r) => setTimeout(() => r('pending'), 0))]);
}

describe('StreamRequests', () => {
  it('completes a non-decoupled request at its only response, final flag present or absent', async () => {
    const s = new StreamRequests();
    const a = s.open();
    const b = s.open();
    assert.notEqual(a.id, b.id);
    assert.equal(s.settle({ id: b.id, final: true, result: {} }), true);
    assert.equal(s.settle({ id: a.id, final: true, result: {} }), true);
    assert.deepEqual(await a.done, { responses: 1, sendMs: 0, recvMs: 0 });
    assert.deepEqual(await b.done, { responses: 1, sendMs: 0, recvMs: 0 });
    assert.equal(s.size, 0);
  });

  it('keeps a decoupled request open over its non-final responses and completes it at the empty final one', async () => {
    const s = new StreamRequests();
    const a = s.open();
    const b = s.open();
    for (let i = 0; i < 4; i++) {
      s.settle({ id: a.id, final: false, result: {} });
      s.settle({ id: b.id, final: false, result: {} });
    }
    assert.equal(await state(a.done), 'pending', 'non-final responses do not complete a request');
    s.settle({ id: b.id, final: true });
    assert.deepEqual(await b.done, { responses: 4, sendMs: 0, recvMs: 0 }, 'the empty final response is not counted as a response');
    assert.equal(await state(a.done), 'pending', 'another request\'s final leaves this one open');
    s.settle({ id: a.id, final: true, result: {} });
    assert.deepEqual(await a.done, { responses: 5, sendMs: 0, recvMs: 0 }, 'a final response with outputs counts');
  });

  it('fails a request at an error response and leaves the others', async () => {
    const s = new StreamRequests();
    const a = s.open();
    const b = s.open();
    s.settle({ id: a.id, final: false, result: {} });
    s.settle({ id: a.id, final: true, error: new Error('model failed') });
    assert.match(((await state(a.done)) as Error).message, /model failed/);
    assert.equal(await state(b.done), 'pending');
    assert.equal(s.size, 1);
  });

  it('ignores responses to no request in flight, and gives id-less responses to the oldest request', async () => {
    const s = new StreamRequests();
    assert.equal(s.settle({ id: '', final: true, result: {} }), false);
    const a = s.open();
    const b = s.open();
    assert.equal(s.settle({ id: '999', final: true, result: {} }), false);
    assert.equal(s.settle({ id: a.id, final: true, result: {} }), true);
    assert.equal(s.settle({ id: a.id, final: true, result: {} }), false, 'a completed request takes no more responses');
    assert.equal(s.settle({ id: '', final: true, result: {} }), true);
    assert.deepEqual(await b.done, { responses: 1, sendMs: 0, recvMs: 0 });
  });

  it('fails every request in flight when the stream fails, and a request whose send failed', async () => {
    const s = new StreamRequests();
    const a = s.open();
    const b = s.open();
    const c = s.open();
    s.abandon(c.id, new Error('cannot encode'));
    assert.match(((await state(c.done)) as Error).message, /cannot encode/);
    s.failAll(new Error('stream ended'));
    assert.equal(s.size, 0);
    assert.match(((await state(a.done)) as Error).message, /stream ended/);
    assert.match(((await state(b.done)) as Error).message, /stream ended/);
    const d = s.open();
    s.settle({ id: d.id, final: true, result: {} });
    assert.equal((await d.done).responses, 1, 'usable after failAll');
  });
});
