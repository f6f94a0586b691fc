/**
 * The conformance tier's plumbing: the Python environment of Triton's own clients and tools
 * (`.venv-conformance`, made by `node scripts/setup.mjs conformance`), a real `nereid serve`
 * process on ephemeral 127.0.0.1 ports, and runs of the tier's Python scripts and of
 * perf_analyzer / Model Analyzer against it.
 *
 * Nothing here skips: without the environment every case fails with the command that makes it.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { TestModel } from '@nereid/testkit';
import { NereidProcess, REPO_ROOT } from '../../helpers/cli.js';
import { makeRepository, removeDir, type ModelFiles } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

export const VENV = join(REPO_ROOT, '.venv-conformance');
export const VENV_BIN = join(VENV, 'bin');
/** The tier's Python scripts stay in the source tree (they are not compiled). */
export const SCRIPTS = join(REPO_ROOT, 'test', 'conformance');

const MISSING =
  `The conformance environment ${VENV} is missing or incomplete. Create it with ` +
  '`node scripts/setup.mjs conformance` (npm run test:conformance does), which pip-installs the pinned ' +
  'tritonclient, perf_analyzer and Model Analyzer of test/conformance/requirements.txt.';

/** Throws the setup instruction unless the environment's interpreter and tools exist. */
export function requireEnvironment(): void {
  for (const tool of ['python', 'perf_analyzer', 'model-analyzer']) {
    if (!existsSync(join(VENV_BIN, tool))) throw new Error(`${MISSING} (no ${join(VENV_BIN, tool)})`);
  }
}

/** Where the CUDA runtime wheel puts libcudart.so.12, which the perf_analyzer binary links. */
function cudartDirectory(): string {
  const lib = join(VENV, 'lib');
  const python = existsSync(lib) ? readdirSync(lib).find((d) => d.startsWith('python3')) : undefined;
  return python === undefined ? '' : join(lib, python, 'site-packages', 'nvidia', 'cuda_runtime', 'lib');
}

/** The environment a user of the tools would have: the venv's bin first, libcudart findable. */
export function toolEnvironment(): NodeJS.ProcessEnv {
  const ld = [cudartDirectory(), process.env.LD_LIBRARY_PATH].filter((p) => p !== undefined && p !== '').join(':');
  return { ...process.env, PATH: `${VENV_BIN}:${process.env.PATH ?? ''}`, LD_LIBRARY_PATH: ld, PYTHONUNBUFFERED: '1', PYTHONDONTWRITEBYTECODE: '1' };
}

export interface ToolRun {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `file args` to completion (killed after `timeoutMs`); never rejects. */
export function runTool(file: string, args: readonly string[], options: { timeoutMs: number; cwd?: string }): Promise<ToolRun> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      { cwd: options.cwd ?? REPO_ROOT, env: toolEnvironment(), timeout: options.timeoutMs, maxBuffer: 64 * 1024 * 1024, killSignal: 'SIGKILL' },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 124;
        resolve({ code, stdout, stderr: err !== null && stderr === '' ? err.message : stderr });
      },
    );
  });
}

/** What one Python case reported: `pass`, or `fail` with the traceback. */
export interface CaseResult {
  status: 'pass' | 'fail';
  error?: string;
}

/**
 * Runs `test/conformance/<script>` with the environment's interpreter, passing the server's
 * endpoints as JSON, and returns the per-case results it printed (see lib/conformance.py).
 */
export async function runCases(script: string, endpoints: Endpoints, options: { timeoutMs?: number; extra?: Record<string, unknown> } = {}): Promise<Map<string, CaseResult>> {
  requireEnvironment();
  const context = JSON.stringify({ ...endpoints, ...options.extra });
  const run = await runTool(join(VENV_BIN, 'python'), [join(SCRIPTS, script), context], { timeoutMs: options.timeoutMs ?? 120_000 });
  const line = run.stdout.split('\n').find((l) => l.startsWith('CONFORMANCE-RESULTS '));
  if (line === undefined) throw new Error(`${script} printed no results (exit ${run.code})\n--- stdout ---\n${run.stdout}\n--- stderr ---\n${run.stderr}`);
  const results = JSON.parse(line.slice('CONFORMANCE-RESULTS '.length)) as Record<string, CaseResult>;
  return new Map(Object.entries(results));
}

/** Fails with the case's traceback unless it passed. */
export function assertCasePassed(results: Map<string, CaseResult> | undefined, name: string): void {
  if (results === undefined) throw new Error('the script did not run (see the before hook)');
  const r = results.get(name);
  if (r === undefined) throw new Error(`case '${name}' did not run; ran: ${[...results.keys()].join(', ')}`);
  if (r.status !== 'pass') throw new Error(`case '${name}' failed:\n${r.error ?? '(no detail)'}`);
}

/** The endpoints of a running server, as the scripts receive them. */
export interface Endpoints {
  /** host:port, as tritonclient.http and perf_analyzer -u take it */
  http: string;
  /** host:port of the gRPC endpoint */
  grpc: string;
  /** http://host:port/metrics */
  metrics: string;
}

export interface ConformanceServer {
  process: NereidProcess;
  repository: string;
  endpoints: Endpoints;
  /** SIGTERM, wait for the exit, remove the repository. */
  stop(): Promise<void>;
}

/**
 * Writes `models` (testkit models with their own configs, or explicit files) into a fresh
 * repository and starts `nereid serve` on it with HTTP, gRPC and metrics on OS-chosen 127.0.0.1
 * ports, plus `args`. Resolves once all three endpoints are listening.
 */
export async function startConformanceServer(models: readonly (TestModel | [string, ModelFiles])[], args: readonly string[] = []): Promise<ConformanceServer> {
  const files: Record<string, ModelFiles> = {};
  for (const m of models) {
    if (Array.isArray(m)) files[m[0]] = m[1];
    else files[(m as TestModel).name] = modelFiles(m as TestModel);
  }
  const repository = await makeRepository(files);
  const p = new NereidProcess([
    'serve',
    `--model-repository=${repository}`,
    '--http-address=127.0.0.1',
    '--http-port=0',
    '--grpc-address=127.0.0.1',
    '--grpc-port=0',
    '--metrics-address=127.0.0.1',
    '--metrics-port=0',
    ...args,
  ]);
  try {
    const http = await p.waitFor(/Started HTTPService at (127\.0\.0\.1:\d+)/);
    const grpc = await p.waitFor(/Started GRPCInferenceService at (127\.0\.0\.1:\d+)/);
    const metrics = await p.waitFor(/Started Metrics Service at (127\.0\.0\.1:\d+)/);
    return {
      process: p,
      repository,
      endpoints: { http: http[1]!, grpc: grpc[1]!, metrics: `http://${metrics[1]!}/metrics` },
      async stop() {
        await p.stop();
        await removeDir(repository);
      },
    };
  } catch (err) {
    await p.stop('SIGKILL');
    await removeDir(repository);
    throw err;
  }
}

/** Fails unless the script ran exactly `names` (a case added or dropped on one side only). */
export function assertCasesAre(results: Map<string, CaseResult> | undefined, names: readonly string[]): void {
  if (results === undefined) throw new Error('the script did not run (see the before hook)');
  const ran = [...results.keys()].sort();
  const listed = [...names].sort();
  if (JSON.stringify(ran) !== JSON.stringify(listed)) throw new Error(`the script ran [${ran.join(', ')}] but the test lists [${listed.join(', ')}]`);
}

export interface SuiteOptions {
  /** Extra `nereid serve` options. */
  args?: readonly string[];
  /** Pass the repository path to the script as `repository`. */
  passRepository?: boolean;
  timeoutMs?: number;
}

/**
 * One describe block per script: a server with `models` (built in the before hook), the script
 * run once against it, and one test per case name in `cases` (plus one that the script ran
 * exactly those).
 */
export function conformanceSuite(
  title: string,
  script: string,
  models: () => readonly (TestModel | [string, ModelFiles])[],
  cases: readonly string[],
  options: SuiteOptions = {},
): void {
  describe(title, () => {
    let srv: ConformanceServer | undefined;
    let results: Map<string, CaseResult> | undefined;
    before(async () => {
      srv = await startConformanceServer(models(), options.args);
      const extra = options.passRepository ? { repository: srv.repository } : undefined;
      results = await runCases(script, srv.endpoints, { extra, timeoutMs: options.timeoutMs });
    });
    after(async () => {
      await srv?.stop();
    });
    for (const name of cases) it(name, () => assertCasePassed(results, name));
    it('runs exactly the listed cases', () => assertCasesAre(results, cases));
  });
}

/**
 * The small CPU sweep the Model Analyzer tests run (default config and max batch size 1 with
 * dynamic batching, concurrency 1 and 2), with its outputs under `work`: YAML lines.
 */
export function smallSweep(work: string): string[] {
  return [
    `output_model_repository_path: ${join(work, 'output_repository')}`,
    'override_output_model_repository: true',
    `export_path: ${join(work, 'export')}`,
    `checkpoint_directory: ${join(work, 'checkpoints')}`,
    'run_config_search_max_concurrency: 2',
    'run_config_search_max_instance_count: 1',
    'run_config_search_max_model_batch_size: 1',
    'perf_analyzer_flags:',
    '  stability-percentage: 100',
    '  max-trials: 20',
  ];
}
