import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { StatDuration } from './model-statistics.js';

describe('StatDuration', () => {
  it('sums nanoseconds and counts every observation, negative ones as 0', () => {
    const d = new StatDuration();
    d.add(1_500n);
    d.add(-20n);
    d.add(0n);
    d.add(2_500n);
    assert.equal(d.count, 4);
    assert.equal(d.ns, 4_000n);
    assert.deepEqual(d.toJSON(), { count: 4, ns: 4_000n });
  });

  it('stays exact past 2^53 ns (a busy server reaches it within months)', () => {
    const d = new StatDuration();
    const near = 2n ** 53n - 1n;
    d.add(near);
    d.add(10n);
    assert.equal(d.ns, near + 10n);
    d.add(3n);
    d.add(2n ** 60n + 7n);
    assert.equal(d.ns, near + 10n + 3n + 2n ** 60n + 7n);
    assert.equal(d.count, 4);
  });
});
