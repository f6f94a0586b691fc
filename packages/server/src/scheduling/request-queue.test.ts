import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { NEVER_ABORTED } from '../backends/spi.js';
import { RequestQueue } from './request-queue.js';
import type { ScheduledRequest } from './scheduler.js';

/** A full garbage collection (`gc` exposed for this call; the test runner is not started with it). */
function collect(): void {
  setFlagsFromString('--expose-gc');
  (runInNewContext('gc') as () => void)();
}

function request(id: string, signal: AbortSignal = NEVER_ABORTED): ScheduledRequest {
  return { id, signal, payload: new Uint8Array(1 << 16) } as unknown as ScheduledRequest;
}

describe('RequestQueue', () => {
  it('hands requests out in order and skips those cancelled while queued', () => {
    const q = new RequestQueue();
    const abort = new AbortController();
    const cancelled: string[] = [];
    q.push(request('a'), () => cancelled.push('a'));
    q.push(request('b', abort.signal), () => cancelled.push('b'));
    q.push(request('c'), () => cancelled.push('c'));
    assert.equal(q.size, 3);
    abort.abort();
    assert.deepEqual(cancelled, ['b']);
    assert.equal(q.size, 2);
    assert.equal(q.shift()?.id, 'a');
    assert.equal(q.shift()?.id, 'c');
    assert.equal(q.shift(), undefined);
    assert.equal(q.size, 0);
  });

  it('keeps no request it handed out reachable while others stay queued', async () => {
    const q = new RequestQueue();
    // One request always queued, so the queue never empties and never compacts here.
    q.push(request('first'), () => undefined);
    let taken: WeakRef<ScheduledRequest> | undefined;
    for (let i = 0; i < 10; i++) {
      q.push(request(`r${i}`), () => undefined);
      const r = q.shift()!;
      if (i === 5) taken = new WeakRef(r);
    }
    // WeakRef targets stay alive until the current job ends.
    await new Promise((resolve) => setImmediate(resolve));
    collect();
    assert.equal(taken!.deref(), undefined, 'a request taken from the queue is still reachable through it');
    assert.equal(q.size, 1);
  });
});
