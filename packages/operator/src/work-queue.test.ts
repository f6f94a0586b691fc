/**
 * The work queue: deduplication while waiting, one run per key at a time (a key added during its
 * run runs once more afterwards), exponential retries after failures, requeue delays, pausing
 * until caches sync, and shutdown.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Backoff, WorkQueue, sleep } from './work-queue.js';

const until = async (cond: () => boolean, ms = 2000): Promise<void> => {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(5);
  }
};

describe('WorkQueue', () => {
  it('runs a key added many times while waiting once', async () => {
    const runs: string[] = [];
    const q = new WorkQueue(async (key) => void runs.push(key), { paused: true });
    for (let i = 0; i < 5; i++) q.add('ns/a');
    q.add('ns/b');
    assert.equal(q.depth, 2);
    q.resume();
    await until(() => runs.length === 2);
    await sleep(20);
    assert.deepEqual(runs.sort(), ['ns/a', 'ns/b']);
    await q.shutdown();
  });

  it('never runs one key twice at once, and reruns a key added during its run', async () => {
    let active = 0;
    let maxActive = 0;
    let runs = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const q = new WorkQueue(
      async () => {
        active++;
        runs++;
        maxActive = Math.max(maxActive, active);
        if (runs === 1) await gate;
        active--;
      },
      { concurrency: 4 },
    );
    q.add('k');
    await until(() => runs === 1);
    q.add('k');
    q.add('k');
    await sleep(20);
    assert.equal(runs, 1, 'the second add waits for the first run');
    release();
    await until(() => runs === 2);
    await sleep(20);
    assert.equal(runs, 2);
    assert.equal(maxActive, 1);
    await q.shutdown();
  });

  it('retries a failing key with growing delays and forgets failures after a success', async () => {
    const times: number[] = [];
    const results: string[] = [];
    const q = new WorkQueue(
      async () => {
        times.push(performance.now());
        if (times.length < 4) throw new Error('not yet');
      },
      { retryBaseMs: 20, onResult: (_k, result) => results.push(result) },
    );
    q.add('k');
    await until(() => times.length === 4);
    assert.deepEqual(results, ['error', 'error', 'error', 'success']);
    const gaps = times.slice(1).map((t, i) => t - times[i]);
    assert.ok(gaps[0] >= 18 && gaps[1] >= 38 && gaps[2] >= 78, `gaps ${gaps.map((g) => g.toFixed(0)).join(', ')}`);
    assert.equal(q.retryDelay('k'), 20, 'the success reset the backoff');
    await q.shutdown();
  });

  it('runs a key again after the delay a handler asks for', async () => {
    let runs = 0;
    const q = new WorkQueue(async () => (++runs < 3 ? { requeueAfterMs: 10 } : undefined));
    q.add('k');
    await until(() => runs === 3);
    await sleep(40);
    assert.equal(runs, 3);
    await q.shutdown();
  });

  it('runs different keys concurrently up to the limit', async () => {
    let active = 0;
    let maxActive = 0;
    const q = new WorkQueue(
      async () => {
        active++;
        maxActive = Math.max(maxActive, active);
        await sleep(30);
        active--;
      },
      { concurrency: 3 },
    );
    for (const k of ['a', 'b', 'c', 'd', 'e']) q.add(k);
    await until(() => active === 0 && q.depth === 0, 3000);
    assert.equal(maxActive, 3);
    await q.shutdown();
  });

  it('waits for running handlers on shutdown and accepts nothing after', async () => {
    let finished = false;
    const q = new WorkQueue(async () => {
      await sleep(30);
      finished = true;
    });
    q.add('k');
    await sleep(5);
    await q.shutdown();
    assert.ok(finished);
    q.add('j');
    assert.equal(q.depth, 0);
  });
});

describe('Backoff', () => {
  it('doubles up to the cap and resets', () => {
    const b = new Backoff(100, 500);
    assert.deepEqual([b.next(), b.next(), b.next(), b.next(), b.next()], [100, 200, 400, 500, 500]);
    b.reset();
    assert.equal(b.next(), 100);
  });
});
