import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SYSTEM_CLOCK } from './dynamic-batcher.js';
import { readdirSync } from 'node:fs';
import { PreciseTimer, clearPreciseTimer, holdPreciseTimers, setPreciseTimer } from './precise-timer.js';

const threads = (): number => readdirSync('/proc/self/task').length;

/** Waits (up to 10 s) until `count()` is `expected`, then asserts it. */
async function settles(count: () => number, expected: number, what: string): Promise<void> {
  for (let waited = 0; count() !== expected && waited < 10_000; waited += 10) await new Promise((r) => setTimeout(r, 10));
  assert.equal(count(), expected, what);
}

describe('precise timers', () => {
  it('the batcher clock serves a sub-millisecond wait with a precise timer, a long one with setTimeout', async () => {
    const fired: string[] = [];
    const short = SYSTEM_CLOCK.setTimer(() => fired.push('200us'), 200_000n);
    assert.ok(short instanceof PreciseTimer, 'not rounded up to a whole-millisecond setTimeout');
    const long = SYSTEM_CLOCK.setTimer(() => fired.push('5ms'), 5_000_000n);
    assert.ok(!(long instanceof PreciseTimer));
    const cancelled = SYSTEM_CLOCK.setTimer(() => fired.push('cancelled'), 100_000n);
    SYSTEM_CLOCK.clearTimer(cancelled);
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(fired, ['200us', '5ms']);
  });

  it('callbacks run once each, not before their deadline (less the slack), in deadline order', async () => {
    const order: number[] = [];
    const start = process.hrtime.bigint();
    const late: bigint[] = [];
    const done = new Promise<void>((resolve) => {
      for (const us of [600, 100, 300]) {
        setPreciseTimer(() => {
          order.push(us);
          late.push(process.hrtime.bigint() - start - BigInt(us) * 1000n);
          if (order.length === 3) resolve();
        }, BigInt(us) * 1000n);
      }
    });
    const t = setPreciseTimer(() => order.push(-1), 50_000n);
    clearPreciseTimer(t);
    await done;
    await new Promise((resolve) => setTimeout(resolve, 5));
    assert.deepEqual(order, [100, 300, 600]);
    for (const l of late) assert.ok(l >= -20_000n, `fired ${-l} ns early`);
  });

  it('its thread ends once nothing holds it and no timer is pending, and starts again when needed', async () => {
    await new Promise((resolve) => setTimeout(resolve, 20));
    const before = threads();
    const release = holdPreciseTimers();
    await settles(threads, before + 1, 'a hold starts the thread');
    const fired = new Promise<void>((resolve) => setPreciseTimer(resolve, 100_000n));
    release();
    release();
    await fired;
    await settles(threads, before, 'released, with its last timer fired, the thread ends');
    await new Promise<void>((resolve) => setPreciseTimer(resolve, 100_000n));
    await settles(threads, before, 'a timer of no holder ends the thread it started once it fired');
  });
});
