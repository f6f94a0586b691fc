/**
 * `nereid perf --streaming` (gRPC ModelStreamInfer) against real Triton 2.51 and against Nereid,
 * both serving the same Python models: `add_sub` (non-decoupled, dynamic batching: one response
 * per request, `triton_final_response` set by Triton) at concurrency 16, and `decoupled` (four
 * responses per request, then a flags-only final that reaches the client only as an empty final
 * response) at concurrency 4. Every run must finish within its time limit (a request that never
 * completes stalls its slot and the run), with completed requests, no errors, every response of
 * the decoupled model counted, and latencies that agree with the throughput at that concurrency.
 *
 * No figure is compared with a fixed time: the machines are shared and noisy.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { LevelSummary } from '@nereid/perf';
import { REPO_ROOT } from '../../helpers/cli.js';
import { makeRepository, removeDir, type ModelFiles } from '../../helpers/harness.js';
import { startConformanceServer, runTool, type ConformanceServer } from '../helpers/tier.js';
import { ADD_SUB_EXECUTE, ADD_SUB_IO, DECOUPLED_EXECUTE, FP32_16, pythonModelFiles } from '../helpers/python-models.js';
import { requireTriton, startTriton, type TritonServer } from '../helpers/triton.js';

const NEREID_PERF = join(REPO_ROOT, 'packages', 'perf', 'bin', 'nereid-perf.js');
/** Far above a run's few seconds; a stalled run is killed here and fails. */
const RUN_LIMIT_MS = 60_000;

const MODELS: Record<string, ModelFiles> = {
  add_sub: pythonModelFiles('add_sub', `max_batch_size: 64\n${ADD_SUB_IO}\ndynamic_batching { }\ninstance_group [ { count: 1, kind: KIND_CPU } ]`, ADD_SUB_EXECUTE),
  decoupled: pythonModelFiles(
    'decoupled',
    `max_batch_size: 0\ninput [ { name: "INPUT0", ${FP32_16} } ]\noutput [ { name: "OUTPUT0", ${FP32_16} } ]\nmodel_transaction_policy { decoupled: true }\ninstance_group [ { count: 1, kind: KIND_CPU } ]`,
    DECOUPLED_EXECUTE,
  ),
};

async function waitReady(http: string, models: readonly string[]): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (const model of models) {
    for (;;) {
      const r = await fetch(`http://${http}/v2/models/${model}/ready`).catch(() => undefined);
      if (r?.status === 200) break;
      if (Date.now() > deadline) throw new Error(`${model} not ready on ${http} after 60 s`);
      await new Promise((done) => setTimeout(done, 200));
    }
  }
}

/** Runs `nereid perf --streaming` as its own process and checks the level it measured. */
async function streamRun(grpc: string, model: string, concurrency: number, responsesPerRequest: number): Promise<LevelSummary> {
  const args = [NEREID_PERF, '-m', model, '-i', 'grpc', '--streaming', '-u', grpc, '--concurrency-range', String(concurrency)];
  const run = await runTool(process.execPath, [...args, '--measurement-interval', '500', '--stability-percentage', '100', '--max-trials', '20', '--json'], { timeoutMs: RUN_LIMIT_MS });
  const context = `\nexit ${run.code}\n${run.stdout.slice(0, 2000)}\n${run.stderr}`;
  assert.notEqual(run.code, 124, `nereid perf did not finish within ${RUN_LIMIT_MS} ms (stalled)${context}`);
  // 2: the last windows did not agree within the band (a loaded machine); they are still reported.
  assert.ok(run.code === 0 || run.code === 2, `exit code${context}`);
  const level = (JSON.parse(run.stdout) as { levels: LevelSummary[] }).levels.at(-1)!;
  assert.ok(level.requestCount > 0 && level.throughput > 0, `no completed requests${context}`);
  assert.equal(level.errorCount, 0, `errors${context}`);
  const seconds = level.requestCount / level.throughput;
  assert.ok(Math.abs(level.responseThroughput * seconds - responsesPerRequest * level.requestCount) < 1e-6 * level.requestCount + 1e-6, `${responsesPerRequest} responses per request${context}`);
  // Little's law: with every slot busy, requests in flight = throughput × latency ≈ concurrency.
  // A slot stuck on a request that never completes would leave it well below.
  const inFlight = (level.throughput * level.avgLatencyUs) / 1e6;
  assert.ok(inFlight > concurrency * 0.5 && inFlight < concurrency * 1.5, `throughput × latency = ${inFlight.toFixed(2)}, concurrency ${concurrency}${context}`);
  const p50 = level.percentiles['50']!;
  const p99 = level.percentiles['99']!;
  assert.ok(p50 > 0 && p50 <= p99, `p50 ${p50}, p99 ${p99}${context}`);
  return level;
}

describe('conformance: nereid perf --streaming against Triton and Nereid on Python models', () => {
  let repository: string;
  let triton: TritonServer | undefined;
  let nereid: ConformanceServer | undefined;

  before(async () => {
    requireTriton();
    repository = await makeRepository(MODELS);
    triton = await startTriton(repository);
    nereid = await startConformanceServer(Object.entries(MODELS));
    await waitReady(triton.endpoints.http, Object.keys(MODELS));
    await waitReady(nereid.endpoints.http, Object.keys(MODELS));
  });

  after(async () => {
    await nereid?.stop();
    await triton?.stop();
    if (repository !== undefined) await removeDir(repository);
  });

  it('measures a non-decoupled, dynamically batching model on Triton (concurrency 16)', async () => {
    await streamRun(triton!.endpoints.grpc, 'add_sub', 16, 1);
  });

  it('measures a decoupled model whose requests end with a flags-only final response, on Nereid (concurrency 4)', async () => {
    await streamRun(nereid!.endpoints.grpc, 'decoupled', 4, 4);
  });

  it('measures the decoupled model on Triton and the batching model on Nereid', async () => {
    await streamRun(triton!.endpoints.grpc, 'decoupled', 4, 4);
    await streamRun(nereid!.endpoints.grpc, 'add_sub', 16, 1);
  });
});
