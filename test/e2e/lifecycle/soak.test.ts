/**
 * Soak: 200 cycles of load → infer → unload of an ONNX model over HTTP (control mode explicit).
 * Unloading must give back what loading took — sessions, worker threads, buffers, timers — so
 * the heap and the resident set stay flat: the test samples both after a garbage collection every
 * 20 cycles and fails when they keep growing. The figures are printed as test diagnostics.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { HttpClient } from '@nereid/client';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { TAGGED_WIDTH, taggedFiles, waitFor } from '../../helpers/lifecycle.js';

const CYCLES = 200;
const SAMPLE_EVERY = 20;
/**
 * Samples before these cycles are warm-up: JIT and first-use caches for the heap; for the
 * resident set also the native allocator's pools, which grow over the first hundred or so worker
 * threads before they level off.
 */
const HEAP_WARM_UP = 40;
const RSS_WARM_UP = 100;
/**
 * Steady growth past the warm-up beyond these fails the test. A leaked worker thread or ONNX
 * Runtime session per cycle would add several MB per cycle, hundreds over the measured cycles.
 */
const HEAP_LIMIT_MB = 8;
const RSS_LIMIT_MB = 24;

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

let repo: string;
let srv: RunningServer;
let client: HttpClient;

before(async () => {
  repo = await makeRepository({ soak: taggedFiles('soak', { 1: 42 }, 'instance_group [ { kind: KIND_CPU, count: 1 } ]\n') });
  srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit' });
  client = new HttpClient(srv.url);
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

interface Sample {
  cycle: number;
  heapMB: number;
  rssMB: number;
}

async function sample(cycle: number): Promise<Sample> {
  // Unloads finish in the background: wait until the last one has, then collect twice.
  await waitFor('the unload to finish', async () => (await client.repositoryIndex()).every((e) => e.state !== 'UNLOADING'));
  for (let i = 0; i < 2; i++) {
    gc();
    await new Promise((resolve) => setImmediate(resolve));
  }
  const m = process.memoryUsage();
  return { cycle, heapMB: m.heapUsed / 2 ** 20, rssMB: m.rss / 2 ** 20 };
}

/** Least-squares slope of `y` over `x`. */
function slope(points: readonly [number, number][]): number {
  const n = points.length;
  const mx = points.reduce((s, [x]) => s + x, 0) / n;
  const my = points.reduce((s, [, y]) => s + y, 0) / n;
  let num = 0;
  let den = 0;
  for (const [x, y] of points) {
    num += (x - mx) * (y - my);
    den += (x - mx) ** 2;
  }
  return den === 0 ? 0 : num / den;
}

describe('soak', () => {
  it(`${CYCLES} load → infer → unload cycles leave heap and RSS flat`, async (t) => {
    const samples: Sample[] = [await sample(0)];
    const row = Int32Array.from({ length: TAGGED_WIDTH }, (_, k) => k);
    const started = Date.now();
    for (let cycle = 1; cycle <= CYCLES; cycle++) {
      await client.loadModel('soak');
      const r = await client.infer({ model: 'soak', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: row }] });
      assert.deepEqual([...(r.typed('OUTPUT0') as Int32Array)], [42, 43, 44, 45]);
      await client.unloadModel('soak');
      if (cycle % SAMPLE_EVERY === 0) samples.push(await sample(cycle));
    }
    const seconds = (Date.now() - started) / 1000;

    const growth = (warmUp: number, of: (s: Sample) => number) =>
      slope(samples.filter((s) => s.cycle >= warmUp).map((s) => [s.cycle, of(s)])) * (CYCLES - warmUp);
    const heapGrowth = growth(HEAP_WARM_UP, (s) => s.heapMB);
    const rssGrowth = growth(RSS_WARM_UP, (s) => s.rssMB);
    const fmt = (x: number) => x.toFixed(1);
    t.diagnostic(`${CYCLES} cycles in ${seconds.toFixed(1)} s (${fmt((seconds * 1000) / CYCLES)} ms per cycle)`);
    t.diagnostic(`heap MB by cycle: ${samples.map((s) => `${s.cycle}:${fmt(s.heapMB)}`).join(' ')}`);
    t.diagnostic(`rss MB by cycle: ${samples.map((s) => `${s.cycle}:${fmt(s.rssMB)}`).join(' ')}`);
    t.diagnostic(
      `steady growth: heap ${fmt(heapGrowth)} MB over cycles ${HEAP_WARM_UP}-${CYCLES}, rss ${fmt(rssGrowth)} MB over cycles ${RSS_WARM_UP}-${CYCLES}`,
    );
    assert.ok(heapGrowth < HEAP_LIMIT_MB, `the heap grows steadily: ${fmt(heapGrowth)} MB over cycles ${HEAP_WARM_UP}-${CYCLES}`);
    assert.ok(rssGrowth < RSS_LIMIT_MB, `the resident set grows steadily: ${fmt(rssGrowth)} MB over cycles ${RSS_WARM_UP}-${CYCLES}`);
    assert.deepEqual(
      (await client.repositoryIndex()).map((e) => `${e.name}/${e.version}:${e.state}:${e.reason}`),
      ['soak/1:UNAVAILABLE:unloaded'],
    );
  });
});
