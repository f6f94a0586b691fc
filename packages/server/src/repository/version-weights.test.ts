/**
 * Smooth weighted round-robin between versions: exact splits over every window of sum(weights)
 * picks, interleaving, versions that drop out and come back, and the `version_weights` checks.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { versionWeightsOf } from '../core/repository-parameters.js';
import { VersionWeights } from './version-weights.js';

const all = () => true;

function picks(weights: VersionWeights, n: number, available: (v: number) => boolean = all): number[] {
  return Array.from({ length: n }, () => weights.pick(available)!);
}

function count(list: readonly number[]): Record<number, number> {
  const out: Record<number, number> = {};
  for (const v of list) out[v] = (out[v] ?? 0) + 1;
  return out;
}

describe('VersionWeights', () => {
  it('splits every window of sum(weights) consecutive picks exactly by weight', () => {
    const cases: [Record<number, number>, number][] = [
      [{ 1: 90, 2: 10 }, 100],
      [{ 1: 30, 2: 70 }, 10], // reduced by their gcd: period 10
      [{ 1: 1, 2: 2, 3: 3 }, 6],
      [{ 4: 7, 9: 0, 12: 5 }, 12],
      [{ 1: 900_000, 2: 100_000 }, 10],
    ];
    for (const [weights, period] of cases) {
      const router = new VersionWeights(new Map(Object.entries(weights).map(([v, w]) => [Number(v), w])));
      const gcd = Object.values(weights).reduce((s, w) => s + w, 0) / period;
      const sequence = picks(router, period * 5);
      for (let start = 0; start + period <= sequence.length; start++) {
        const window = count(sequence.slice(start, start + period));
        for (const [v, w] of Object.entries(weights)) {
          assert.equal(window[Number(v)] ?? 0, w / gcd, `weights ${JSON.stringify(weights)}, window at ${start}, version ${v}`);
        }
      }
    }
  });

  it('interleaves instead of sending blocks: 90/10 never sends version 2 twice in a row', () => {
    const router = new VersionWeights(new Map([[1, 90], [2, 10]]));
    const sequence = picks(router, 1000);
    for (let i = 1; i < sequence.length; i++) assert.ok(!(sequence[i] === 2 && sequence[i - 1] === 2), `picks ${i - 1} and ${i}`);
    // 50/50 alternates.
    const even = new VersionWeights(new Map([[1, 1], [2, 1]]));
    assert.deepEqual(picks(even, 6), [1, 2, 1, 2, 1, 2]);
  });

  it('skips versions that are not available and starts again, exact, once the set changes', () => {
    const router = new VersionWeights(new Map([[1, 3], [2, 1]]));
    picks(router, 3);
    const ready = new Set([1, 2]);
    ready.delete(2);
    assert.deepEqual(picks(router, 4, (v) => ready.has(v)), [1, 1, 1, 1]);
    ready.add(2);
    const again = picks(router, 8, (v) => ready.has(v));
    assert.deepEqual(count(again), { 1: 6, 2: 2 });
    assert.equal(router.pick(() => false), undefined);
  });

  it('keeps weights of versions still served; none above 0 left → undefined', () => {
    const router = new VersionWeights(new Map([[1, 0], [2, 10], [3, 5]]));
    assert.equal(router.restrictedTo(new Set([1, 2, 3])), router);
    assert.deepEqual([...router.restrictedTo(new Set([1, 3]))!.weights], [[1, 0], [3, 5]]);
    assert.equal(router.restrictedTo(new Set([1])), undefined);
    assert.equal(router.toString(), '{"1":0,"2":10,"3":5}');
  });
});

describe('version_weights checks', () => {
  it('takes version numbers to integer weights; {} clears', () => {
    assert.deepEqual([...versionWeightsOf('m', { 1: 90, '2': 10, 3: 0 })], [[1, 90], [2, 10], [3, 0]]);
    assert.equal(versionWeightsOf('m', {}).size, 0);
    assert.equal(versionWeightsOf('m', { 7: 1_000_000 }).get(7), 1_000_000);
  });

  it('refuses what is not an object, bad keys, bad weights and all zeros, naming the model and the rule', () => {
    const form = /it must be a JSON object of version numbers to integer weights from 0 to 1000000/;
    const cases: [unknown, RegExp][] = [
      [[90, 10], /of model 'm': got an array, not an object/],
      [null, /got null, not an object/],
      ['{"1":1}', /got the string "\{\\"1\\":1\}", not an object/],
      [{ one: 1 }, /key 'one' is not a version number/],
      [{ '-1': 1 }, /key '-1' is not a version number/],
      [{ '01': 1 }, /key '01' is not a version number/],
      [{ 1: -5 }, /the weight of version 1 is -5, not an integer from 0 to 1000000/],
      [{ 1: 1.5 }, /the weight of version 1 is 1.5/],
      [{ 1: '90' }, /the weight of version 1 is "90"/],
      [{ 1: 1_000_001 }, /the weight of version 1 is 1000001/],
      [{ 1: 0, 2: 0 }, /every weight is 0, so no version would take requests/],
    ];
    for (const [value, message] of cases) {
      assert.throws(
        () => versionWeightsOf('m', value),
        (err: Error & { code?: string }) => {
          assert.equal(err.code, 'LOAD_PARAMETER');
          assert.match(err.message, /^load parameter 'version_weights' of model 'm': /);
          assert.match(err.message, message);
          assert.match(err.message, form);
          return true;
        },
        JSON.stringify(value),
      );
    }
  });
});
