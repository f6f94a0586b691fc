import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { NereidError } from '@nereid/protocol';
import { RateLimiter, parseResourceLimit, type RateLimitedInstance, type ResourceRequirement } from './rate-limiter.js';

function instance(name: string, resources: ResourceRequirement[], priority = 1, device = 0): RateLimitedInstance {
  return { name, device, resources, priority, executions: 0 };
}

const R = (count: number, global = false): ResourceRequirement => ({ name: 'R', global, count });

/** Lets granted promises settle. */
const tick = () => new Promise((r) => setImmediate(r));

describe('RateLimiter', () => {
  it('makes each pool as large as the largest single requirement, so every instance can run alone', async () => {
    const limiter = new RateLimiter();
    const a = instance('a', [R(2)]);
    const b = instance('b', [R(1)]);
    limiter.register(a, 'm');
    limiter.register(b, 'm');
    assert.deepEqual(limiter.pools(), [{ pool: 'device0:R', capacity: 2, inUse: 0 }]);
    const log: string[] = [];
    await limiter.acquire(a);
    log.push('a');
    const waitB = limiter.acquire(b).then(() => log.push('b'));
    await tick();
    assert.deepEqual(log, ['a'], 'b must wait while a holds both units');
    limiter.release(a);
    await waitB;
    assert.deepEqual(log, ['a', 'b']);
    limiter.release(b);
    assert.equal(limiter.pools()[0]!.inUse, 0);
  });

  it('never blocks instances that require nothing', async () => {
    const limiter = new RateLimiter();
    const free = instance('free', []);
    limiter.register(free, 'm');
    await limiter.acquire(free);
    await limiter.acquire(free);
  });

  it('serves the lowest executions × priority first, and a priority-2 instance about half as often', async () => {
    const limiter = new RateLimiter();
    const one = instance('one', [R(1, true)], 1);
    const two = instance('two', [R(1, true)], 2);
    limiter.register(one, 'm1');
    limiter.register(two, 'm2');
    const runs: string[] = [];
    // Both instances ask again as soon as they finish: full contention for one unit.
    const loop = async (i: RateLimitedInstance, n: number) => {
      for (let k = 0; k < n; k++) {
        await limiter.acquire(i);
        runs.push(i.name);
        await tick();
        limiter.release(i);
      }
    };
    await Promise.race([loop(one, 40), loop(two, 40)]);
    const ones = runs.filter((r) => r === 'one').length;
    const twos = runs.filter((r) => r === 'two').length;
    assert.ok(ones >= 2 * twos - 2 && ones <= 2 * twos + 2, `one ran ${ones} times, two ${twos}`);
  });

  it('allocates strictly head-of-line: a later instance that would fit waits behind a head that does not', async () => {
    const limiter = new RateLimiter([{ name: 'R', count: 3 }]);
    const big = instance('big', [R(3)]);
    const small = instance('small', [R(1)]);
    const holder = instance('holder', [R(1)]);
    holder.executions = 0;
    big.executions = 1;
    small.executions = 2;
    for (const i of [big, small, holder]) limiter.register(i, 'm');
    await limiter.acquire(holder);
    const order: string[] = [];
    const pBig = limiter.acquire(big).then(() => order.push('big'));
    const pSmall = limiter.acquire(small).then(() => order.push('small'));
    await tick();
    assert.deepEqual(order, [], 'small (key 2) waits behind big (key 1) even though one unit is free');
    limiter.release(holder);
    await pBig;
    limiter.release(big);
    await pSmall;
    assert.deepEqual(order, ['big', 'small']);
  });

  it('keeps separate pools per device and one global pool', async () => {
    const limiter = new RateLimiter();
    const d0 = instance('d0', [R(1)], 1, 0);
    const d1 = instance('d1', [R(1)], 1, 1);
    limiter.register(d0, 'm');
    limiter.register(d1, 'm');
    await limiter.acquire(d0);
    await limiter.acquire(d1);
    assert.deepEqual(limiter.pools().map((p) => `${p.pool}=${p.inUse}/${p.capacity}`).sort(), ['device0:R=1/1', 'device1:R=1/1']);
  });

  it('refuses an explicit pool smaller than a requirement, and a name both global and per-device', () => {
    const small = new RateLimiter([{ name: 'R', count: 1 }]);
    assert.throws(
      () => small.register(instance('i', [R(2)]), 'm'),
      (e: unknown) => e instanceof NereidError && /requires 2 units of resource 'R' but --rate-limit-resource makes only 1 available/.test(e.message),
    );
    const mixed = new RateLimiter();
    mixed.register(instance('g', [R(1, true)]), 'm1');
    assert.throws(
      () => mixed.register(instance('p', [R(1, false)]), 'm2'),
      (e: unknown) => e instanceof NereidError && /resource 'R' is per-device here but global for another loaded model/.test(e.message),
    );
  });

  it('parses --rate-limit-resource values', () => {
    assert.deepEqual(parseResourceLimit('R:4'), { name: 'R', count: 4 });
    assert.deepEqual(parseResourceLimit('R:4:1'), { name: 'R', count: 4, device: 1 });
    for (const bad of ['R', 'R:x', ':3', 'R:1:2:3', 'R:-1']) assert.throws(() => parseResourceLimit(bad), NereidError, bad);
  });
});
