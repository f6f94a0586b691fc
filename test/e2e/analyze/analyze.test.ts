/**
 * `nereid analyze` end to end on the example MLP (ONNX Runtime): each run starts its own Nereid
 * server in local mode and applies every variant through the repository API. Brute force and the
 * quick search on the same space; every config written loads and serves; the report draws its
 * frontier plot in headless Chromium; a run cut short (time budget, Ctrl-C) resumes from its
 * checkpoint; two models profiled together; a latency budget nothing meets; configuration errors
 * before anything is measured.
 *
 * Measurement noise: levels are measured over three 200 ms windows on a machine shared by the
 * server and the load, where repeated measurements of one configuration vary by up to about 15 %;
 * "at least as good" is therefore asserted within 20 %.
 */
import assert from 'node:assert/strict';
import { cp, mkdtemp, readFile, readdir, writeFile } from 'node:fs/promises';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { FRONTIER_COLOR, runAnalyze, type AnalysisResult } from '@nereid/perf';
import { colorRegion, screenshot } from '@nereid/testkit';
import { HttpClient } from '@nereid/client';
import { NEREID_BIN } from '../../helpers/cli.js';
import { removeDir, startServer } from '../../helpers/harness.js';

const EXAMPLE_MLP = fileURLToPath(new URL('../../../../examples/model_repository/mlp', import.meta.url));

/** Fast, fixed-length measurements: three 200 ms windows, no stability gate. */
const FAST = ['perf_analyzer_flags:', '  measurement-interval: 200', '  stability-percentage: 100', '  max-trials: 3'];

interface Outcome {
  code: number;
  stdout: string;
  stderr: string;
}

async function analyze(cwd: string, yaml: string[], extra: string[] = []): Promise<Outcome> {
  await writeFile(join(cwd, 'config.yaml'), yaml.join('\n') + '\n');
  let stdout = '';
  let stderr = '';
  const code = await runAnalyze(['-f', join(cwd, 'config.yaml'), '--progress', 'none', ...extra], {
    stdout: (t) => void (stdout += t),
    stderr: (t) => void (stderr += t),
    stderrIsTty: false,
    cwd,
  });
  return { code, stdout, stderr };
}

const shown = (o: Outcome) => `exit ${o.code}\n--- stdout ---\n${o.stdout}\n--- stderr ---\n${o.stderr}`;

async function result(dir: string): Promise<AnalysisResult> {
  return JSON.parse(await readFile(join(dir, 'results', 'analysis.json'), 'utf8')) as AnalysisResult;
}

/** A work directory with a repository holding a copy of the example MLP. */
async function workspace(): Promise<{ work: string; repo: string }> {
  const work = await mkdtemp(join(tmpdir(), 'nereid-analyze-'));
  const repo = join(work, 'models');
  await cp(EXAMPLE_MLP, join(repo, 'mlp'), { recursive: true });
  return { work, repo };
}

function space(repo: string, mode: 'brute' | 'quick', maxInstances = 2): string[] {
  return [
    `model_repository: ${repo}`,
    'profile_models: mlp',
    `run_config_search_mode: ${mode}`,
    `run_config_search_max_instance_count: ${maxInstances}`,
    'run_config_search_max_model_batch_size: 8',
    'run_config_search_max_concurrency: 16',
    ...FAST,
  ];
}

/** A workspace for the tests of the enclosing `describe`: made (then `setUp`) before them, removed after. */
function useWorkspace(setUp?: (ws: { work: string; repo: string }) => Promise<void>): { work: string; repo: string } {
  const ws = { work: '', repo: '' };
  before(async () => {
    Object.assign(ws, await workspace());
    await setUp?.(ws);
  });
  after(async () => {
    if (ws.work !== '') await removeDir(ws.work);
  });
  return ws;
}

describe('nereid analyze: brute force and quick search on the example MLP', () => {
  let brute: Outcome;
  let quick: Outcome;

  const ws = useWorkspace(async ({ work, repo }) => {
    brute = await analyze(work, [...space(repo, 'brute'), 'export_path: brute', 'output_model_repository_path: brute/output', 'checkpoint_directory: brute/ckpt']);
    quick = await analyze(work, [...space(repo, 'quick'), 'export_path: quick', 'output_model_repository_path: quick/output', 'checkpoint_directory: quick/ckpt']);
  });

  it('both finish, print the ranking and the two recommendations, and write Model Analyzer\'s CSV', async () => {
    for (const o of [brute, quick]) {
      assert.equal(o.code, 0, shown(o));
      assert.match(o.stdout, /In \d+ measurements across \d+ configurations, mlp_config_\w+ /);
      assert.match(o.stdout, /Throughput-optimized: mlp_config_\w+ \(/);
      assert.match(o.stdout, /Latency-optimized: mlp_config_\w+ \(/);
    }
    const csv = (await readFile(join(ws.work, 'brute', 'results', 'metrics-model-inference.csv'), 'utf8')).trim().split('\n');
    assert.equal(csv[0], 'Model,Batch,Concurrency,Model Config Path,Instance Group,Max Batch Size,Satisfies Constraints,Throughput (infer/sec),p99 Latency (ms)');
    assert.ok(csv.length > 20, csv.join('\n'));
  });

  it('brute force covers the default and every instance count × max batch size; quick measures far fewer levels', async () => {
    const b = await result(join(ws.work, 'brute'));
    const q = await result(join(ws.work, 'quick'));
    const configs = new Set(b.measurements.map((m) => m.variant));
    assert.ok(configs.has('mlp_config_default'));
    const shapes = new Set(b.variants.filter((v) => !v.isDefault).map((v) => `${v.summary.instanceCount}x${v.summary.maxBatchSize}`));
    assert.deepEqual([...shapes].sort(), ['1x1', '1x2', '1x4', '1x8', '2x1', '2x2', '2x4', '2x8']);
    assert.ok(q.measurements.length < b.measurements.length, `quick ${q.measurements.length} vs brute ${b.measurements.length} measurements`);
  });

  // How good quick search's pick is against brute force's is a matter of measured speed: the
  // benchmark (bench/analyze.ts) re-measures both side by side. Here, what decides its pick.
  it('quick search screens with short windows but recommends only configurations it measured in full', async () => {
    const q = await result(join(ws.work, 'quick'));
    const screened = q.measurements.filter((m) => m.screening === true);
    const full = new Set(q.measurements.filter((m) => m.screening !== true).map((m) => m.variant));
    assert.ok(screened.length > 0, 'quick search took no screening measurement');
    const { throughputOptimized, latencyOptimized } = q.models[0];
    for (const pick of [throughputOptimized, latencyOptimized]) {
      assert.ok(pick !== undefined && pick.screening !== true && full.has(pick.variant), `recommended ${pick?.variant} without a full measurement`);
    }
  });

  it('every generated config loads and serves', { timeout: 120_000 }, async () => {
    const output = join(ws.work, 'brute', 'output');
    const names = (await readdir(output)).sort();
    assert.ok(names.length >= 9, names.join(' '));
    const srv = await startServer({ modelRepositories: [output], modelControlMode: 'explicit' });
    try {
      const client = new HttpClient(srv.url);
      for (const name of names) {
        await client.loadModel(name);
        const r = await client.infer({ model: name, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 256], data: new Float32Array(256).fill(0.5) }] });
        assert.deepEqual(r.shape('OUTPUT0'), [1, 16], name);
        await client.unloadModel(name);
      }
    } finally {
      await srv.stop();
    }
  });

  it('writes one self-contained report whose frontier plot Chromium draws', { timeout: 120_000 }, async () => {
    const html = await readFile(join(ws.work, 'brute', 'reports', 'analysis.html'), 'utf8');
    assert.doesNotMatch(html, /<script|https?:\/\/(?!www\.w3\.org)/);
    const { png, file } = await screenshot(html);
    const frontier = colorRegion(png, FRONTIER_COLOR);
    assert.ok(frontier.count > 100, `only ${frontier.count} pixels of the frontier's color (${file})`);
    assert.ok(frontier.maxY - frontier.minY > 20, `the frontier spans ${frontier.maxX - frontier.minX}×${frontier.maxY - frontier.minY} px`);
    await removeDir(join(file, '..'));
  });
});

describe('nereid analyze: checkpoints', () => {

  const ws = useWorkspace();


  it('a run cut short by its time budget, then by Ctrl-C, resumes from its checkpoints without measuring finished levels again', { timeout: 300_000 }, async () => {
    const yaml = space(ws.repo, 'brute', 1);
    const first = await analyze(ws.work, yaml, ['--time-budget', '3']);
    assert.equal(first.code, 0, shown(first));
    assert.match(first.stdout, /Partial results: the time budget \(3 s\) ran out/);
    const cut = await result(ws.work);
    assert.ok(cut.measurements.length >= 1, shown(first));

    // The command itself, interrupted once it has checkpointed a new measurement.
    const child = spawn(process.execPath, [NEREID_BIN, 'analyze', '-f', join(ws.work, 'config.yaml'), '--override-output-model-repository', '--progress', 'lines'], { cwd: ws.work, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => void (out += d));
    child.stderr.on('data', (d: Buffer) => void (out += d));
    const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
    const checkpoint = join(ws.work, 'checkpoints', '1.ckpt');
    for (let waited = 0; ; waited += 100) {
      const saved = existsSync(checkpoint) ? (JSON.parse(await readFile(checkpoint, 'utf8')) as { measurements: unknown[] }).measurements.length : 0;
      if (saved > cut.measurements.length) break;
      assert.ok(waited < 120_000, `no new measurement checkpointed:\n${out}`);
      await new Promise((r) => setTimeout(r, 100));
    }
    child.kill('SIGINT');
    assert.equal(await exited, 0, out);
    assert.match(out, /Partial results: interrupted/);
    const interrupted = await result(ws.work);
    assert.ok(interrupted.measurements.length > cut.measurements.length);
    assert.match(await readFile(join(ws.work, 'nereid-server.log'), 'utf8'), /./, 'the server it started wrote its log');

    const last = await analyze(ws.work, yaml, ['--override-output-model-repository']);
    assert.equal(last.code, 0, shown(last));
    const full = await result(ws.work);
    const reused = /Measured (\d+) levels in this run, (\d+) reused from the checkpoint/.exec(last.stdout);
    assert.ok(reused, shown(last));
    assert.equal(Number(reused[2]), interrupted.measurements.length);
    assert.equal(Number(reused[1]) + Number(reused[2]), full.measurements.length);
    // Earlier measurements are in the result as they were taken, not measured again.
    for (const m of interrupted.measurements) {
      assert.ok(full.measurements.some((n) => n.variant === m.variant && n.concurrency === m.concurrency && n.at === m.at), `${m.variant}@${m.concurrency} was measured again`);
    }
    assert.ok(full.measurements.length > interrupted.measurements.length);
    assert.equal(full.partial, undefined);
    assert.deepEqual((await readdir(join(ws.work, 'checkpoints'))).sort(), ['0.ckpt', '1.ckpt', '2.ckpt']);
  });
});

describe('nereid analyze: several models on one server', () => {

  const ws = useWorkspace(async ({ work, repo }) => {
    await cp(join(repo, 'mlp'), join(repo, 'mlp_b'), { recursive: true });
    const config = join(repo, 'mlp_b', 'config.pbtxt');
    await writeFile(config, (await readFile(config, 'utf8')).replace('name: "mlp"', 'name: "mlp_b"'));
  });

  it('profiles each model, then their best configurations together, and reports the interference', { timeout: 180_000 }, async () => {
    const o = await analyze(ws.work, [
      `model_repository: ${ws.repo}`,
      'profile_models: mlp, mlp_b',
      'run_config_profile_models_concurrently_enable: true',
      'concurrency: 4',
      'run_config_search_max_instance_count: 1',
      'run_config_search_max_model_batch_size: 2',
      ...FAST,
    ]);
    assert.equal(o.code, 0, shown(o));
    const r = await result(ws.work);
    assert.deepEqual(r.models.map((m) => m.model), ['mlp', 'mlp_b']);
    assert.equal(r.interference?.length, 2, shown(o));
    for (const i of r.interference!) {
      assert.ok(i.alone! > 0 && i.together! > 0, JSON.stringify(i));
      assert.match(i.note, /infer\/sec alone, [\d.]+ beside mlp(_b)?_config_\w+ \([+-][\d.]+%\)/);
    }
    assert.match(o.stdout, /Models profiled together:\n  mlp: /);
  });
});

describe('nereid analyze: remote mode', () => {

  const ws = useWorkspace();


  it("profiles on a running server through load overrides while the model's own configuration keeps serving", { timeout: 180_000 }, async () => {
    // The server's repository is elsewhere: variants reach it only as config and file overrides.
    const served = await mkdtemp(join(ws.work, 'served-'));
    await cp(join(ws.repo, 'mlp'), join(served, 'mlp'), { recursive: true });
    const srv = await startServer({ modelRepositories: [served], modelControlMode: 'explicit', loadModels: ['mlp'] }, {});
    try {
      const o = await analyze(ws.work, [
        `model_repository: ${ws.repo}`,
        'profile_models: mlp',
        'triton_launch_mode: remote',
        `triton_http_endpoint: ${srv.url.replace('http://', '')}`,
        'client_protocol: http',
        'concurrency: [1, 4]',
        'run_config_search_max_instance_count: 1',
        'run_config_search_max_model_batch_size: 2',
        ...FAST,
      ]);
      assert.equal(o.code, 0, shown(o));
      const r = await result(ws.work);
      assert.equal(r.server.launchMode, 'remote');
      assert.deepEqual([...new Set(r.measurements.map((m) => m.variant))].sort(), ['mlp_config_0', 'mlp_config_1', 'mlp_config_default']);
      assert.ok(r.measurements.every((m) => m.cpu_used_ram === undefined), "a remote server's memory is not visible");
      const client = new HttpClient(srv.url);
      assert.equal(await client.isModelReady('mlp'), true, 'the original kept serving');
      const index = await client.repositoryIndex();
      const loaded = index.filter((e) => e.state === 'READY').map((e) => e.name);
      assert.deepEqual(loaded, ['mlp'], 'every variant was unloaded afterwards');
      assert.deepEqual(await readdir(served), ['mlp'], "nothing was written to the server's repository");
    } finally {
      await srv.stop();
    }
  });
});

describe('nereid analyze: constraints and configuration errors', () => {

  const ws = useWorkspace();


  it('a latency budget nothing meets: a clear message, and still the best-effort frontier and recommendations', { timeout: 120_000 }, async () => {
    const o = await analyze(ws.work, [
      `model_repository: ${ws.repo}`,
      'profile_models:',
      '  mlp:',
      '    parameters:',
      '      concurrency: [1, 2]',
      'latency_budget: 0.001',
      'run_config_search_max_instance_count: 1',
      'run_config_search_max_model_batch_size: 1',
      ...FAST,
    ]);
    assert.equal(o.code, 0, shown(o));
    assert.match(o.stdout, /No measurement of 'mlp' meets the constraints \(p99 latency ≤ 0\.001 ms\)\. The closest is mlp_config_\w+ at concurrency \d: p99 latency [\d.]+ ms/);
    const r = await result(ws.work);
    assert.ok(r.models[0].frontier.length >= 1);
    assert.ok(r.models[0].throughputOptimized && r.models[0].latencyOptimized);
    assert.ok(r.models[0].ranking.every((x) => !x.passes));
    const html = await readFile(join(ws.work, 'reports', 'analysis.html'), 'utf8');
    assert.match(html, /No measurement of &#39;mlp&#39; meets the constraints|No measurement of 'mlp' meets the constraints/);
  });

  it('a bad key or value is an error before anything is measured', async () => {
    const dir = await mkdtemp(join(ws.work, 'bad-'));
    const unknown = await analyze(dir, [`model_repository: ${ws.repo}`, 'profile_models: mlp', 'run_config_search_max_concurency: 8']);
    assert.equal(unknown.code, 3, shown(unknown));
    assert.match(unknown.stderr, /run_config_search_max_concurency/);
    assert.match(unknown.stderr, /run_config_search_max_concurrency/, 'names the key it probably meant');
    const value = await analyze(dir, [`model_repository: ${ws.repo}`, 'profile_models: mlp', 'run_config_search_max_concurrency: many']);
    assert.equal(value.code, 3, shown(value));
    assert.match(value.stderr, /run_config_search_max_concurrency/);
    const model = await analyze(dir, [`model_repository: ${ws.repo}`, 'profile_models: nosuchmodel']);
    assert.equal(model.code, 3, shown(model));
    assert.match(model.stderr, /nosuchmodel/);
    for (const o of [unknown, value, model]) assert.equal(o.stdout, '');
    assert.ok(!existsSync(join(dir, 'checkpoints')) && !existsSync(join(dir, 'nereid-server.log')), 'nothing ran');
  });
});
