/**
 * Triton Model Analyzer in remote mode profiles one Nereid model to the end: a server in explicit
 * mode (as remote mode requires) with a second, unloaded model in the repository, a quick brute
 * sweep (default config plus max_batch_size 1 with dynamic batching, concurrency 1 and 2, CPU
 * only), variants pushed through the load API, perf_analyzer run by Model Analyzer, and the
 * results table, summary and detailed reports written. Proof that our repository extension,
 * statistics and metrics are what it expects.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import { removeDir } from '../../helpers/harness.js';
import { type ConformanceServer, requireEnvironment, runTool, smallSweep, startConformanceServer, type ToolRun, VENV_BIN } from '../helpers/tier.js';

describe('conformance: Model Analyzer (remote mode)', () => {
  let srv: ConformanceServer | undefined;
  let work = '';
  let run: ToolRun | undefined;
  const output = () => (run === undefined ? '(not run)' : `--- stdout ---\n${run.stdout}\n--- stderr ---\n${run.stderr}`);

  before(async () => {
    requireEnvironment();
    srv = await startConformanceServer([simpleModel(), simpleStringModel()], ['--model-control-mode=explicit', '--load-model=simple']);
    work = await mkdtemp(join(tmpdir(), 'nereid-ma-'));
    const e = srv.endpoints;
    const config = [
      `model_repository: ${srv.repository}`,
      'profile_models:',
      '  simple:',
      '    cpu_only: true',
      'triton_launch_mode: remote',
      `triton_http_endpoint: ${e.http}`,
      `triton_grpc_endpoint: ${e.grpc}`,
      `triton_metrics_url: ${e.metrics}`,
      'client_protocol: grpc',
      ...smallSweep(work),
      '',
    ].join('\n');
    await writeFile(join(work, 'config.yaml'), config);
    run = await runTool(join(VENV_BIN, 'model-analyzer'), ['profile', '-f', join(work, 'config.yaml')], { timeoutMs: 480_000, cwd: work });
  });

  after(async () => {
    await srv?.stop();
    if (work !== '') await removeDir(work);
  });

  it('profiles to the end and exits 0', () => {
    assert.equal(run?.code, 0, output());
    assert.match(run!.stdout + run!.stderr, /Profile complete\. Profiled 2 configurations for models: \['simple'\]/, output());
  });

  it('measured every config at both concurrencies, with throughput', async () => {
    const csv = (await readFile(join(work, 'export', 'results', 'metrics-model-inference.csv'), 'utf8')).trim().split('\n');
    assert.equal(csv[0], 'Model,Batch,Concurrency,Model Config Path,Instance Group,Max Batch Size,Satisfies Constraints,Throughput (infer/sec),p99 Latency (ms)');
    const rows = csv.slice(1).map((line) => line.split(','));
    const seen = rows.map((r) => `${r[3]}@${r[2]}`).sort();
    assert.deepEqual(seen, ['simple_config_0@1', 'simple_config_0@2', 'simple_config_default@1', 'simple_config_default@2'], csv.join('\n'));
    for (const r of rows) {
      assert.equal(r[4], '1:CPU', r.join(','));
      assert.ok(Number(r[7]) > 0 && Number(r[8]) > 0, r.join(','));
    }
    assert.deepEqual([...new Set(rows.map((r) => r[5]))].sort(), ['1', '8']);
  });

  it('wrote the variant configs it loaded, and the summary and detailed reports', async () => {
    const variant = await readFile(join(work, 'output_repository', 'simple_config_0', 'config.pbtxt'), 'utf8');
    assert.match(variant, /max_batch_size: 1/);
    assert.match(variant, /dynamic_batching/);
    for (const report of [
      join('reports', 'summaries', 'simple', 'result_summary.html'),
      join('reports', 'detailed', 'simple_config_default', 'detailed_report.html'),
      join('reports', 'detailed', 'simple_config_0', 'detailed_report.html'),
    ]) {
      assert.ok(existsSync(join(work, 'export', report)), `${report} is missing\n${output()}`);
    }
  });
});
