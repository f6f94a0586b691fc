#!/usr/bin/env node
// Runs the fuzz properties of the request decoders and the config parser (packages/server/src/fuzz)
// for longer than `npm test` does, with any seed. Build first (`npm run build`, or `npx tsc -b`).
//
// Usage: node scripts/fuzz.mjs [--runs N] [--seed S] [--only NAME ...] [--path P] [--list]
//   --runs N   cases per property (default 10000)
//   --seed S   fast-check seed (default: a fresh one, printed)
//   --only     run only the named properties (repeatable; names from --list)
//   --path P   with one --only and the failing --seed: replay exactly the reported case
// Every failure prints the property, the seed and path that replay it, the shrunk counterexample
// and the error; the exit status is 1 when any property failed.
import { existsSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const compiled = `${root}packages/server/dist/fuzz/properties.js`;
if (!existsSync(compiled)) {
  console.error(`fuzz: ${compiled} is missing; build first with \`npm run build\` (or \`npx tsc -b\`)`);
  process.exit(2);
}
const { FUZZ_PROPERTIES } = await import(compiled);

const args = process.argv.slice(2);
let runs = 10_000;
let seed = Math.floor(Math.random() * 2 ** 31);
let path;
const only = [];
for (let i = 0; i < args.length; i++) {
  const a = args[i];
  const value = () => {
    const v = args[++i];
    if (v === undefined) {
      console.error(`fuzz: ${a} needs a value`);
      process.exit(2);
    }
    return v;
  };
  if (a === '--runs') runs = Number(value());
  else if (a === '--seed') seed = Number(value());
  else if (a === '--path') path = value();
  else if (a === '--only') only.push(value());
  else if (a === '--list') {
    for (const p of FUZZ_PROPERTIES) console.log(`${p.name}: ${p.claim}`);
    process.exit(0);
  } else {
    console.error(`fuzz: unknown argument '${a}' (see the usage at the top of scripts/fuzz.mjs)`);
    process.exit(2);
  }
}
if (!Number.isSafeInteger(runs) || runs < 1) {
  console.error('fuzz: --runs takes a positive integer');
  process.exit(2);
}
if (!Number.isSafeInteger(seed)) {
  console.error('fuzz: --seed takes an integer');
  process.exit(2);
}
const unknown = only.filter((n) => !FUZZ_PROPERTIES.some((p) => p.name === n));
if (unknown.length > 0) {
  console.error(`fuzz: no property named ${unknown.join(', ')}; --list shows them`);
  process.exit(2);
}
if (path !== undefined && only.length !== 1) {
  console.error('fuzz: --path replays one case of one property: give exactly one --only');
  process.exit(2);
}

const selected = FUZZ_PROPERTIES.filter((p) => only.length === 0 || only.includes(p.name));
console.log(`fuzz: ${selected.length} properties, ${runs} cases each, seed ${seed}`);
let failed = 0;
for (const p of selected) {
  const started = process.hrtime.bigint();
  const outcome = p.run({ seed, numRuns: runs, path });
  const ms = Number((process.hrtime.bigint() - started) / 1_000_000n);
  if (!outcome.failed) {
    console.log(`  ok    ${p.name}: ${outcome.numRuns} cases (${ms} ms)`);
    continue;
  }
  failed++;
  console.log(`  FAIL  ${p.name} after ${outcome.numRuns} cases (${ms} ms)`);
  console.log(`        replay: node scripts/fuzz.mjs --only ${p.name} --seed ${outcome.seed} --path ${outcome.path}`);
  console.log(`        counterexample: ${outcome.counterexample}`);
  console.log(`        ${String(outcome.error).split('\n').join('\n        ')}`);
}
console.log(failed === 0 ? `fuzz: all ${selected.length} properties held (seed ${seed})` : `fuzz: ${failed} of ${selected.length} properties failed (seed ${seed})`);
process.exit(failed === 0 ? 0 : 1);
