/**
 * Changing a model's instance count while it serves (models-and-scheduling.md §1.10), on the FP32
 * MLP example (examples/model_repository/mlp) in an embedded server, both measured in one run:
 *   (a) in place: a load request whose `config` differs from the serving one only in the
 *       instance count (1 → 2): the extra instance is created and added;
 *   (b) full reload (the baseline): the same change together with a changed `parameters` entry,
 *       so that a new copy of the version (backend model and both instances) loads beside the
 *       serving one.
 * Between measurements the model goes back to 1 instance (not timed).
 * Each figure is the median time of `--rounds` load calls (default 8), measured in alternation
 * (a, b, a, b, …) while `--concurrency` (default 4) in-process clients keep batch-1 requests in
 * flight; a request that fails makes the benchmark fail. Also reported: the requests answered
 * per second during each kind of change.
 *
 * Usage: node dist/bench/instance-update.js [--rounds N] [--concurrency N] [--json out.json]
 */
import { cp, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Server, createLogger } from '@nereid/server';
import { compared, median, report } from './lib.js';

const argv = process.argv.slice(2);
const option = (name: string, fallback: string) => {
  const i = argv.indexOf(`--${name}`);
  return i === -1 ? fallback : argv[i + 1]!;
};
const rounds = Number(option('rounds', '8'));
const concurrency = Number(option('concurrency', '4'));
const jsonPath = argv.includes('--json') ? option('json', '') : undefined;

const MODEL = 'mlp';
const root = fileURLToPath(new URL('../..', import.meta.url));
const work = await mkdtemp(join(tmpdir(), 'nereid-bench-'));
await cp(join(root, 'examples', 'model_repository', MODEL), join(work, MODEL), { recursive: true });

const server = new Server({
  modelRepositories: [work],
  modelControlMode: 'explicit',
  loadModels: [MODEL],
  logger: createLogger({ info: false, warning: true, error: true }),
  metrics: { cpu: false },
});
await server.load();

/** The served configuration with `count` instances and, for a full reload, a marker parameter. */
const base = server.modelConfigJson(MODEL) as Record<string, unknown> & { instance_group: Record<string, unknown>[] };
const configWith = (count: number, marker?: string) => ({
  ...base,
  instance_group: [{ ...base.instance_group[0]!, count }],
  ...(marker === undefined ? {} : { parameters: { marker: { string_value: marker } } }),
});

const input = new Uint8Array(new Float32Array(256).map((_, i) => ((i % 17) - 8) / 8).buffer);
let answered = 0;
let failed = 0;
let running = true;
const clients = Array.from({ length: concurrency }, async () => {
  while (running) {
    try {
      await server.infer({ model: MODEL, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 256], data: input }] });
      answered++;
    } catch (err) {
      failed++;
      console.error((err as Error).message);
    }
  }
});

/** Times one load call; returns [milliseconds, requests answered per second meanwhile]. */
async function timed(config: Record<string, unknown>): Promise<[number, number]> {
  const before = answered;
  const t0 = process.hrtime.bigint();
  await server.loadModel(MODEL, { config });
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  return [ms, ((answered - before) * 1000) / ms];
}

// Settle on a configuration given by override, so that every later load compares overrides.
await server.loadModel(MODEL, { config: configWith(1) });
const inPlace: [number, number][] = [];
const full: [number, number][] = [];
for (let r = 0; r < rounds; r++) {
  // From 1 instance (and no marker) each time: grow to 2 in place, go back, grow to 2 by reload, go back.
  inPlace.push(await timed(configWith(2)));
  await server.loadModel(MODEL, { config: configWith(1) });
  full.push(await timed(configWith(2, `round-${r}`)));
  await server.loadModel(MODEL, { config: configWith(1) });
}
running = false;
await Promise.all(clients);
await server.stop();
await rm(work, { recursive: true, force: true });
if (failed > 0) {
  console.error(`${failed} requests failed during the changes`);
  process.exit(1);
}
const a = median(inPlace.map((x) => x[0]));
const b = median(full.map((x) => x[0]));
report(
  [
    compared('instance count change in place (mlp, 1 → 2 instances)', 'ms', a, b, 'full reload'),
    compared('requests answered during an in-place change', 'req/s', median(inPlace.map((x) => x[1])), median(full.map((x) => x[1])), 'during a full reload'),
  ],
  jsonPath,
);
