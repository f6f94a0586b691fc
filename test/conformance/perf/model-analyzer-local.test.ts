/**
 * Triton Model Analyzer in its default local launch mode profiles one Nereid model to the end,
 * starting Nereid itself through the `tritonserver` launcher (packages/server/bin/tritonserver):
 * one server per phase (server-only metrics, each variant), each started with Model Analyzer's
 * tritonserver command line and stopped with SIGTERM. A quick brute sweep (default config plus
 * max_batch_size 1 with dynamic batching, concurrency 1 and 2, CPU only) on a machine without
 * GPUs, with the server process's own memory measured (collect_cpu_metrics: local mode only).
 * Afterwards no server is left running or listening.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { createConnection, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import { TRITONSERVER_BIN } from '../../helpers/cli.js';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { requireEnvironment, runTool, smallSweep, type ToolRun, VENV_BIN } from '../helpers/tier.js';

/** A port nothing listens on now (the OS's pick, released at once). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '0.0.0.0', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const c = createConnection({ host: '127.0.0.1', port });
    c.once('connect', () => {
      c.destroy();
      resolve(true);
    });
    c.once('error', () => resolve(false));
  });
}

/** The processes whose command line contains `text` (Linux /proc), as "pid: command line". */
function processesWith(text: string): string[] {
  const found: string[] = [];
  for (const pid of readdirSync('/proc').filter((d) => /^\d+$/.test(d))) {
    let cmdline: string;
    try {
      cmdline = readFileSync(join('/proc', pid, 'cmdline'), 'utf8').split('\0').join(' ');
    } catch {
      continue; // ended meanwhile
    }
    if (cmdline.includes(text)) found.push(`${pid}: ${cmdline}`);
  }
  return found;
}

describe('conformance: Model Analyzer (local mode, the tritonserver launcher)', () => {
  let repository = '';
  let work = '';
  let ports: number[] = [];
  let run: ToolRun | undefined;
  const output = () => (run === undefined ? '(not run)' : `--- stdout ---\n${run.stdout}\n--- stderr ---\n${run.stderr}`);
  const serverLog = () => readFileSync(join(work, 'tritonserver.log'), 'utf8');

  before(async () => {
    requireEnvironment();
    const simple = simpleModel();
    repository = await makeRepository({ [simple.name]: modelFiles(simple) });
    work = await mkdtemp(join(tmpdir(), 'nereid-ma-local-'));
    ports = [];
    while (ports.length < 3) {
      const p = await freePort();
      if (!ports.includes(p)) ports.push(p);
    }
    const [http, grpc, metrics] = ports;
    const config = [
      `model_repository: ${repository}`,
      'profile_models:',
      '  simple:',
      '    cpu_only: true',
      'triton_launch_mode: local',
      `triton_server_path: ${TRITONSERVER_BIN}`,
      `triton_output_path: ${join(work, 'tritonserver.log')}`,
      `triton_http_endpoint: localhost:${http}`,
      `triton_grpc_endpoint: localhost:${grpc}`,
      `triton_metrics_url: http://localhost:${metrics}/metrics`,
      'client_protocol: grpc',
      'collect_cpu_metrics: true',
      'inference_output_fields:',
      ...['model_name', 'batch_size', 'concurrency', 'model_config_path', 'instance_group', 'max_batch_size', 'satisfies_constraints', 'perf_throughput', 'perf_latency_p99', 'cpu_used_ram'].map(
        (f) => `  - ${f}`,
      ),
      ...smallSweep(work),
      '',
    ].join('\n');
    await writeFile(join(work, 'config.yaml'), config);
    run = await runTool(join(VENV_BIN, 'model-analyzer'), ['profile', '-f', join(work, 'config.yaml')], { timeoutMs: 240_000, cwd: work });
  });

  after(async () => {
    if (work !== '') await removeDir(work);
    if (repository !== '') await removeDir(repository);
  });

  it('starts a local server, profiles to the end and exits 0', () => {
    assert.equal(run?.code, 0, output());
    assert.match(run!.stdout + run!.stderr, /Starting a local Triton Server/, output());
    assert.match(run!.stdout + run!.stderr, /Profile complete\. Profiled 2 configurations for models: \['simple'\]/, output());
  });

  it("measured every config at both concurrencies, with throughput, latency and the server process's memory", async () => {
    const csv = (await readFile(join(work, 'export', 'results', 'metrics-model-inference.csv'), 'utf8')).trim().split('\n');
    assert.equal(
      csv[0],
      'Model,Batch,Concurrency,Model Config Path,Instance Group,Max Batch Size,Satisfies Constraints,Throughput (infer/sec),p99 Latency (ms),RAM Usage (MB)',
    );
    const rows = csv.slice(1).map((line) => line.split(','));
    const seen = rows.map((r) => `${r[3]}@${r[2]}`).sort();
    assert.deepEqual(seen, ['simple_config_0@1', 'simple_config_0@2', 'simple_config_default@1', 'simple_config_default@2'], csv.join('\n'));
    for (const r of rows) {
      assert.equal(r[4], '1:CPU', r.join(','));
      assert.ok(Number(r[7]) > 0 && Number(r[8]) > 0, r.join(','));
      // The process Model Analyzer started is the server (a bare Node.js process has ~40 MB of its
      // own): the launcher serves in its own process instead of starting another.
      assert.ok(Number(r[9]) > 64, `RAM usage of the started process: ${r.join(',')}`);
    }
    assert.deepEqual([...new Set(rows.map((r) => r[5]))].sort(), ['1', '8']);
  });

  it('wrote the variant config it loaded', async () => {
    const variant = await readFile(join(work, 'output_repository', 'simple_config_0', 'config.pbtxt'), 'utf8');
    assert.match(variant, /max_batch_size: 1/);
    assert.match(variant, /dynamic_batching/);
    assert.match(variant, /KIND_CPU/);
    assert.ok(existsSync(join(work, 'export', 'reports', 'summaries', 'simple', 'result_summary.html')), output());
  });

  it('ran each server it started in explicit mode, and each stopped cleanly on SIGTERM', () => {
    const log = serverLog();
    const started = log.match(/Started HTTPService at 0\.0\.0\.0:\d+/g) ?? [];
    const stopped = log.match(/received SIGTERM: no longer ready/g) ?? [];
    const exited = log.match(/all models unloaded; exiting/g) ?? [];
    assert.ok(started.length >= 2, `${started.length} servers started\n${log}`);
    assert.equal(stopped.length, started.length, log);
    assert.equal(exited.length, started.length, log);
    assert.match(log, /model_control_mode +\| MODE_EXPLICIT/);
    assert.doesNotMatch(log, /^tritonserver: /m);
  });

  it('left no server running or listening', async () => {
    assert.deepEqual(processesWith(repository), []);
    for (const port of ports) assert.equal(await listening(port), false, `something still listens on port ${port}`);
  });
});
