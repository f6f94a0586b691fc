import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { SYSTEM_CLOCK } from './dynamic-batcher.js';
import { PreciseTimer, clearPreciseTimer, setPreciseTimer } from './precise-timer.js';

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
});
