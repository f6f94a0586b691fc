/**
 * The fuzz properties (decoders and config parser) under a fixed seed and a fixed number of cases
 * each, so that `npm test` is repeatable and takes seconds. Longer runs with any seed:
 * `npm run fuzz -- --runs N --seed S` (docs/testing.md).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { FUZZ_PROPERTIES } from './properties.js';

const SEED = 20_251_206;
const RUNS = 300;

for (const p of FUZZ_PROPERTIES) {
  test(`fuzz ${p.name}: ${p.claim}`, () => {
    const outcome = p.run({ seed: SEED, numRuns: RUNS });
    assert.ok(
      !outcome.failed,
      `failed after ${outcome.numRuns} cases; replay with: npm run fuzz -- --only ${p.name} --seed ${outcome.seed} --path ${outcome.path}\n` +
        `counterexample: ${outcome.counterexample}\n${outcome.error}`,
    );
  });
}
