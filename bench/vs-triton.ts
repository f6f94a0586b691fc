/**
 * Nereid against real Triton 2.51 (the nvidia-pytriton wheel that `node scripts/setup.mjs
 * conformance` unpacks into .cache/triton), both serving one model repository of Python models
 * made here, so both run the same model.py files:
 *   add_sub         FP32[16] sum and difference, dynamic batching;
 *   identity_bytes  BYTES[1] echoed, dynamic batching;
 *   batched_sleep   FP32[16] echoed after a fixed 2 ms per batch (not per request), dynamic batching;
 *   decoupled       FP32[16] answered with 4 responses per request over gRPC streams;
 *   ensemble_py     two Python steps (x·2, then x+1) in an ensemble.
 * Each point (model, protocol, concurrency) is measured by each load generator — perf_analyzer
 * from the conformance environment, and `nereid perf` — on both servers in pairs (Nereid then
 * Triton, Triton then Nereid, alternating), and every ratio is Nereid / Triton, the median over
 * the pairs of each pair's ratio: throughput, p50, p99, the average batch size (inference count
 * / execution count over the run, from each server's statistics extension) and the server's CPU
 * time per inference (its process and the model processes below it, from /proc). The server-side
 * breakdown both report (queue, compute input / infer / output) is printed side by side, and for
 * Nereid the main thread's event-loop delay and the GC pauses during each run (bench/loop-probe.ts
 * preloaded into the server), so that a tail can be put down to a stall or a collection.
 *
 * Before a point's pairs, each server runs the point once unmeasured (a warm-up run): a fresh
 * Node.js process runs a code path interpreted until V8 has compiled it, and on two cores those
 * compilations (some 200–400 functions in a path's first seconds of load) take CPU from the load;
 * the ratios are of servers that have run the path before, as in production. What the warm-up runs
 * measured, each server's p99 on its first run of the point, is printed beside the probe's table.
 *
 * Without the unpacked wheel or perf_analyzer it prints one `vs-triton: skipped …` line and exits 0.
 *
 * Usage: node dist/bench/vs-triton.js [--quick] [--rounds N] [--seconds N | --window-ms N]
 *          [--points a,b] [--generators perf_analyzer,nereid-perf] [--no-warmup] [--json out.json]
 *   --quick: one pair, 500 ms windows (a smoke run); default 3 pairs, 1500 ms windows.
 *   --no-warmup: no warm-up runs; the first pair of a point measures a path the servers have not run.
 *   --seconds N: each measurement window (both generators' --measurement-interval), in seconds
 *     (fractions allowed), as in the other benchmarks; --window-ms N gives it in milliseconds.
 *   --points: only the points whose names contain one of these substrings.
 */
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { LevelSummary } from '@nereid/perf';
import { requireTriton, startTriton, type TritonServer } from '../test/conformance/helpers/triton.js';
import { ADD_SUB_EXECUTE, DECOUPLED_EXECUTE, FP32_16, pythonModelFiles } from '../test/conformance/helpers/python-models.js';
import { toolEnvironment, VENV_BIN } from '../test/conformance/helpers/tier.js';
import { LOOP_PROBE_PREFIX, type LoopProbeReport } from './loop-probe.js';
import { benchArgs, compared, median, nereidServeCommand, processTreeCpuUs, report, spawnServer, type ChildServer, type Figure } from './lib.js';

const args = benchArgs();
const quick = process.argv.includes('--quick');
const warmup = !process.argv.includes('--no-warmup');
const rounds = Math.floor(args.number('rounds', quick ? 1 : 3));
const windowMs = measurementWindowMs();
const pointFilter = args.value('points')?.split(',');
const generators = (args.value('generators') ?? 'perf_analyzer,nereid-perf').split(',') as Generator[];
const root = fileURLToPath(new URL('../..', import.meta.url));
const PERF_ANALYZER = join(VENV_BIN, 'perf_analyzer');
const NEREID_PERF = join(root, 'packages/perf/bin/nereid-perf.js');

/** The measurement window from `--seconds` or `--window-ms` (not both), else the mode's default. */
function measurementWindowMs(): number {
  const seconds = args.value('seconds');
  const ms = args.value('window-ms');
  const fail = (message: string): never => {
    console.error(`vs-triton: ${message}`);
    process.exit(1);
  };
  if (seconds !== undefined && ms !== undefined) fail('give the measurement window once: --seconds N or --window-ms N, not both');
  const given = seconds ?? ms;
  if (given === undefined) return quick ? 500 : 1500;
  const n = Number(given) * (seconds !== undefined ? 1000 : 1);
  // perf_analyzer takes whole milliseconds, and windows under 50 ms measure little but noise.
  if (!Number.isFinite(n) || n < 50) fail(`${seconds !== undefined ? '--seconds' : '--window-ms'} ${given}: expected a measurement window of at least 50 ms`);
  return Math.floor(n);
}

try {
  requireTriton();
  if (!existsSync(PERF_ANALYZER)) throw new Error(`no ${PERF_ANALYZER}; run \`node scripts/setup.mjs conformance\``);
} catch (e) {
  console.log(`vs-triton: skipped: ${(e as Error).message.split('\n')[0]}`);
  process.exit(0);
}

// ---------------------------------------------------------------- the model repository

const BATCHING = 'dynamic_batching { }\ninstance_group [ { count: 1, kind: KIND_CPU } ]';

function pythonModel(name: string, maxBatch: number, inputs: string[], outputs: string[], extra: string, body: string): Record<string, string> {
  const files = pythonModelFiles(name, `max_batch_size: ${maxBatch}\ninput [ ${inputs.join(', ')} ]\noutput [ ${outputs.join(', ')} ]\n${extra}`, body);
  return Object.fromEntries(Object.entries(files).map(([path, text]) => [`${name}/${path}`, text]));
}

const MODELS: Record<string, string> = {
  ...pythonModel('add_sub', 64, [`{ name: "INPUT0", ${FP32_16} }`, `{ name: "INPUT1", ${FP32_16} }`], [`{ name: "OUTPUT0", ${FP32_16} }`, `{ name: "OUTPUT1", ${FP32_16} }`], BATCHING, ADD_SUB_EXECUTE),
  ...pythonModel('identity_bytes', 64, ['{ name: "INPUT0", data_type: TYPE_STRING, dims: [ 1 ] }'], ['{ name: "OUTPUT0", data_type: TYPE_STRING, dims: [ 1 ] }'], BATCHING, `    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
`),
  ...pythonModel('batched_sleep', 64, [`{ name: "INPUT0", ${FP32_16} }`], [`{ name: "OUTPUT0", ${FP32_16} }`], BATCHING, `    def execute(self, requests):
        time.sleep(0.002)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
`),
  ...pythonModel('decoupled', 0, [`{ name: "INPUT0", ${FP32_16} }`], [`{ name: "OUTPUT0", ${FP32_16} }`], 'model_transaction_policy { decoupled: true }\ninstance_group [ { count: 1, kind: KIND_CPU } ]', DECOUPLED_EXECUTE),
  ...pythonModel('step_scale', 64, [`{ name: "INPUT0", ${FP32_16} }`], [`{ name: "OUTPUT0", ${FP32_16} }`], 'instance_group [ { count: 1, kind: KIND_CPU } ]', `    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() * np.float32(2))]) for r in requests]
`),
  ...pythonModel('step_shift', 64, [`{ name: "INPUT0", ${FP32_16} }`], [`{ name: "OUTPUT0", ${FP32_16} }`], 'instance_group [ { count: 1, kind: KIND_CPU } ]', `    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() + np.float32(1))]) for r in requests]
`),
  'ensemble_py/config.pbtxt': `name: "ensemble_py"
platform: "ensemble"
max_batch_size: 64
input [ { name: "INPUT0", ${FP32_16} } ]
output [ { name: "OUTPUT0", ${FP32_16} } ]
ensemble_scheduling {
  step [
    { model_name: "step_scale", model_version: -1, input_map { key: "INPUT0", value: "INPUT0" }, output_map { key: "OUTPUT0", value: "scaled" } },
    { model_name: "step_shift", model_version: -1, input_map { key: "INPUT0", value: "scaled" }, output_map { key: "OUTPUT0", value: "OUTPUT0" } }
  ]
}
`,
  'ensemble_py/1/.keep': '',
};

// ---------------------------------------------------------------- the points

type Protocol = 'http' | 'grpc';
type Generator = 'perf_analyzer' | 'nereid-perf';
interface Point {
  name: string;
  model: string;
  protocol: Protocol;
  concurrency: number;
  streaming?: boolean;
  /** Generators that cannot measure this point, and why (printed, never silently left out). */
  not?: Partial<Record<Generator, string>>;
}

const POINTS = ([
  ...(['http', 'grpc'] as const).flatMap((protocol) => [1, 4, 16].map((c): Point => ({ name: `add_sub_${protocol}_c${c}`, model: 'add_sub', protocol, concurrency: c }))),
  { name: 'add_sub_grpc_stream_c16', model: 'add_sub', protocol: 'grpc', concurrency: 16, streaming: true },
  { name: 'batched_sleep_http_c16', model: 'batched_sleep', protocol: 'http', concurrency: 16 },
  { name: 'batched_sleep_grpc_c16', model: 'batched_sleep', protocol: 'grpc', concurrency: 16 },
  { name: 'identity_bytes_grpc_c4', model: 'identity_bytes', protocol: 'grpc', concurrency: 4 },
  { name: 'ensemble_py_http_c4', model: 'ensemble_py', protocol: 'http', concurrency: 4 },
  { name: 'decoupled_grpc_stream_c4', model: 'decoupled', protocol: 'grpc', concurrency: 4, streaming: true },
] satisfies Point[] as Point[]).filter((p) => pointFilter === undefined || pointFilter.some((f) => p.name.includes(f)));

// ---------------------------------------------------------------- one measurement

interface Breakdown {
  queue: number;
  computeInput: number;
  computeInfer: number;
  computeOutput: number;
  request: number;
}
interface Measurement {
  throughput: number;
  p50: number;
  p99: number;
  avgLatency: number;
  batch: number;
  /** The server's CPU time (its process and its model processes) per inference, µs. */
  cpu: number;
  breakdown: Breakdown;
  probe?: LoopProbeReport;
}

interface Target {
  name: 'nereid' | 'triton';
  http: string;
  grpc: string;
  /** The server process (its Python stubs run below it). */
  pid: number;
  /** Nereid only: the probe's report of the time since the last call. */
  probe?: () => Promise<LoopProbeReport>;
}

/** Inference and execution counts of `model` (all versions), from the statistics extension. */
async function counts(target: Target, model: string): Promise<{ inferences: number; executions: number }> {
  const r = await fetch(`http://${target.http}/v2/models/${model}/stats`);
  if (r.status !== 200) throw new Error(`${target.name} statistics of ${model}: HTTP ${r.status}`);
  const body = (await r.json()) as { model_stats: { inference_count: number | string; execution_count: number | string }[] };
  let inferences = 0;
  let executions = 0;
  for (const s of body.model_stats) {
    inferences += Number(s.inference_count);
    executions += Number(s.execution_count);
  }
  return { inferences, executions };
}

function run(file: string, argv: string[], env: NodeJS.ProcessEnv, limitMs: number): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(file, argv, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (s: string) => (stdout += s));
    child.stderr.setEncoding('utf8').on('data', (s: string) => (stderr += s));
    const timer = setTimeout(() => child.kill('SIGKILL'), limitMs);
    child.once('close', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

const grab = (text: string, pattern: RegExp, what: string): number => {
  const m = pattern.exec(text);
  if (m === null) throw new Error(`perf_analyzer printed no ${what}\n${text}`);
  return Number(m[1]);
};

/** The common options of both generators: the point, windows of `windowMs`, a wide stability band. */
function loadArgs(point: Point, target: Target): string[] {
  return [
    '-m', point.model,
    '-i', point.protocol,
    '-u', point.protocol === 'http' ? target.http : target.grpc,
    '--concurrency-range', String(point.concurrency),
    '--measurement-interval', String(windowMs),
    '--stability-percentage', '100',
    '--max-trials', '20',
    ...(point.streaming ? ['--streaming'] : []),
  ];
}

/**
 * Both generators' exit status when the last windows did not agree within the band: on a shared
 * 2-core machine that happens, and the windows measured are still reported (and said so).
 */
const UNSTABLE = 2;
function unstable(generator: Generator, point: Point, target: Target): void {
  console.log(`vs-triton: ${generator} ${point.name} against ${target.name}: did not stabilise within 20 windows; the last ones are used`);
}

async function measure(generator: Generator, point: Point, target: Target): Promise<Measurement> {
  const before = await counts(target, point.model);
  await target.probe?.();
  const cpuBefore = processTreeCpuUs(target.pid) ?? NaN;
  const limit = windowMs * 24 + 15_000;
  let m: Omit<Measurement, 'batch' | 'cpu'>;
  if (generator === 'perf_analyzer') {
    const r = await run(PERF_ANALYZER, loadArgs(point, target), toolEnvironment(), limit);
    if (r.code !== 0 && !(r.code === UNSTABLE && r.stdout.includes('Avg request latency'))) throw new Error(`perf_analyzer ${point.name} against ${target.name} exited ${r.code}:\n${r.stdout}\n${r.stderr}`);
    if (r.code === UNSTABLE) unstable(generator, point, target);
    const levels = r.stdout.split(/\n(?=Request concurrency: \d+\n)/);
    const last = levels[levels.length - 1]!;
    const b = /Avg request latency: (\d+) usec \(overhead \d+ usec \+ queue (\d+) usec \+ compute input (\d+) usec \+ compute infer (\d+) usec \+ compute output (\d+) usec\)/.exec(last);
    if (b === null) throw new Error(`no server breakdown from perf_analyzer against ${target.name}:\n${last}`);
    const [, request, queue, computeInput, computeInfer, computeOutput] = b.map(Number);
    m = {
      throughput: grab(last, /Throughput: ([\d.]+) infer\/sec/, 'throughput'),
      p50: grab(last, /p50 latency: (\d+) usec/, 'p50'),
      p99: grab(last, /p99 latency: (\d+) usec/, 'p99'),
      avgLatency: /Avg latency: (\d+) usec/.test(last) ? grab(last, /Avg latency: (\d+) usec/, 'average latency') : NaN,
      breakdown: { queue: queue!, computeInput: computeInput!, computeInfer: computeInfer!, computeOutput: computeOutput!, request: request! },
    };
  } else {
    const r = await run(process.execPath, [NEREID_PERF, ...loadArgs(point, target), '--json'], process.env, limit);
    if (r.code !== 0 && !(r.code === UNSTABLE && r.stdout.startsWith('{'))) throw new Error(`nereid perf ${point.name} against ${target.name} exited ${r.code}:\n${r.stdout}\n${r.stderr}`);
    if (r.code === UNSTABLE) unstable(generator, point, target);
    const level = (JSON.parse(r.stdout) as { levels: LevelSummary[] }).levels.at(-1)!;
    const s = level.server;
    m = {
      throughput: level.throughput,
      p50: level.percentiles['50'] ?? NaN,
      p99: level.percentiles['99'] ?? NaN,
      avgLatency: level.avgLatencyUs,
      breakdown: { queue: s?.queueUs ?? NaN, computeInput: s?.computeInputUs ?? NaN, computeInfer: s?.computeInferUs ?? NaN, computeOutput: s?.computeOutputUs ?? NaN, request: s?.avgRequestUs ?? NaN },
    };
  }
  const cpuAfter = processTreeCpuUs(target.pid) ?? NaN;
  const probe = await target.probe?.();
  const after = await counts(target, point.model);
  const inferences = Math.max(1, after.inferences - before.inferences);
  return { ...m, batch: inferences / Math.max(1, after.executions - before.executions), cpu: (cpuAfter - cpuBefore) / inferences, probe };
}

// ---------------------------------------------------------------- the servers

/** Starts `nereid serve` with the probe preloaded; `probe()` asks it for its report (SIGUSR2). */
async function startNereid(repository: string): Promise<{ server: ChildServer; target: Target }> {
  const server = await spawnServer(
    [...nereidServeCommand(['--import', new URL('./loop-probe.js', import.meta.url).href]), `--model-repository=${repository}`, '--http-port=0', '--http-address=127.0.0.1', '--grpc-port=0', '--grpc-address=127.0.0.1', '--allow-metrics=false'],
    /Started HTTPService at [^:]+:(\d+)/,
    { grpc: /Started GRPCInferenceService at [^\s]+:(\d+)/ },
  );
  let pending = '';
  let waiting: ((r: LoopProbeReport) => void) | undefined;
  server.process.stderr!.setEncoding('utf8').on('data', (s: string) => {
    pending += s;
    const lines = pending.split('\n');
    pending = lines.pop()!;
    for (const line of lines) {
      if (line.startsWith(LOOP_PROBE_PREFIX)) {
        waiting?.(JSON.parse(line.slice(LOOP_PROBE_PREFIX.length)) as LoopProbeReport);
        waiting = undefined;
      }
    }
  });
  const probe = () =>
    new Promise<LoopProbeReport>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the server did not answer the loop probe')), 5000);
      waiting = (r) => {
        clearTimeout(timer);
        resolve(r);
      };
      server.process.kill('SIGUSR2');
    });
  return { server, target: { name: 'nereid', http: `127.0.0.1:${server.port}`, grpc: `127.0.0.1:${server.ports.grpc}`, pid: server.process.pid!, probe } };
}

/** Waits until every model of the repository answers ready on `target`. */
async function waitReady(target: Target, models: readonly string[]): Promise<void> {
  const deadline = Date.now() + 60_000;
  for (const model of models) {
    for (;;) {
      const r = await fetch(`http://${target.http}/v2/models/${model}/ready`).catch(() => undefined);
      if (r?.status === 200) break;
      if (Date.now() > deadline) throw new Error(`${target.name}: ${model} not ready after 60 s`);
      await new Promise((done) => setTimeout(done, 200));
    }
  }
}

// ---------------------------------------------------------------- the run

const f = (n: number, digits = 0) => (Number.isFinite(n) ? n.toFixed(digits) : '–');
const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-vs-triton-'));
for (const [path, text] of Object.entries(MODELS)) {
  await mkdir(join(repo, path, '..'), { recursive: true });
  await writeFile(join(repo, path), text);
}
const modelNames = [...new Set(Object.keys(MODELS).map((p) => p.split('/')[0]!))];

let triton: TritonServer | undefined;
let nereid: Awaited<ReturnType<typeof startNereid>> | undefined;
try {
  triton = await startTriton(repo);
  nereid = await startNereid(repo);
  const tritonTarget: Target = { name: 'triton', http: triton.endpoints.http, grpc: triton.endpoints.grpc, pid: triton.pid };
  await waitReady(tritonTarget, modelNames);
  await waitReady(nereid.target, modelNames);
  console.log(`vs-triton: ${rounds} pair(s) per point, ${windowMs} ms windows, generators ${generators.join(', ')}; ratios are Nereid / Triton, medians over the pairs`);

  const figures: Figure[] = [];
  let failures = 0;
  const breakdownRows: string[] = [];
  const probeRows: string[] = [];
  const json: unknown[] = [];
  for (const generator of generators) {
    for (const point of POINTS) {
      const why = point.not?.[generator];
      if (why !== undefined) {
        console.log(`vs-triton: ${generator} ${point.name}: not measured: ${why}`);
        continue;
      }
      const pairs: { nereid: Measurement; triton: Measurement }[] = [];
      let first: { nereid: Measurement; triton: Measurement } | undefined;
      try {
        if (warmup) first = { nereid: await measure(generator, point, nereid.target), triton: await measure(generator, point, tritonTarget) };
        for (let i = 0; i < rounds; i++) {
          const order = i % 2 === 0 ? [nereid.target, tritonTarget] : [tritonTarget, nereid.target];
          const got: Partial<Record<'nereid' | 'triton', Measurement>> = {};
          for (const t of order) got[t.name] = await measure(generator, point, t);
          pairs.push(got as { nereid: Measurement; triton: Measurement });
        }
      } catch (e) {
        // One point that fails is reported and the others still run; the exit status says so.
        console.log(`vs-triton: ${generator} ${point.name}: FAILED: ${(e as Error).message.split('\n')[0]}`);
        console.error((e as Error).message);
        failures++;
        continue;
      }
      json.push({ generator, point, pairs, warmup: first });
      const id = `vs_triton_${generator === 'perf_analyzer' ? 'pa' : 'np'}_${point.name}`;
      const med = (who: 'nereid' | 'triton', pick: (m: Measurement) => number) => median(pairs.map((p) => pick(p[who])));
      const ratio = (pick: (m: Measurement) => number) => median(pairs.map((p) => pick(p.nereid) / pick(p.triton)));
      for (const [what, unit, pick] of [
        ['throughput', 'infer/s', (m: Measurement) => m.throughput],
        ['p50', 'us', (m: Measurement) => m.p50],
        ['p99', 'us', (m: Measurement) => m.p99],
        ['batch', 'inferences/execution', (m: Measurement) => m.batch],
        ['cpu', 'us/inference', (m: Measurement) => m.cpu],
      ] as const) {
        figures.push({ ...compared(`${id}_${what}`, unit, med('nereid', pick), med('triton', pick), 'triton'), ratio: ratio(pick) });
      }
      const b = (who: 'nereid' | 'triton') => {
        const x = (k: keyof Breakdown) => f(med(who, (m) => m.breakdown[k]));
        return `${x('queue')} / ${x('computeInput')} / ${x('computeInfer')} / ${x('computeOutput')} / ${x('request')} of ${f(med(who, (m) => m.avgLatency))}`;
      };
      breakdownRows.push(`| ${generator} | ${point.name} | ${b('nereid')} | ${b('triton')} |`);
      const p = (k: (r: LoopProbeReport) => number, digits = 2) => f(median(pairs.map((x) => (x.nereid.probe ? k(x.nereid.probe) : NaN))), digits);
      probeRows.push(
        `| ${generator} | ${point.name} | ${p((r) => r.delay.p50)} / ${p((r) => r.delay.p99)} / ${p((r) => r.delay.max)} | ${p((r) => r.gc.count, 0)} (${p((r) => r.gc.major, 0)} major) / ${p((r) => r.gc.totalMs, 1)} / ${p((r) => r.gc.maxMs)} | ${p((r) => r.gc.survivedKB ?? NaN, 0)} | ${f(med('nereid', (m) => m.p99) / 1000, 2)} / ${f(med('triton', (m) => m.p99) / 1000, 2)} | ${first ? `${f(first.nereid.p99 / 1000, 2)} / ${f(first.triton.p99 / 1000, 2)}` : '–'} |`,
      );
    }
  }
  console.log('\nServer-side breakdown, µs (medians over the pairs): queue / compute input / compute infer / compute output / server request of client average latency');
  console.log('| generator | point | Nereid | Triton |\n|---|---|---|---|');
  for (const r of breakdownRows) console.log(r);
  console.log('\nNereid main thread during each run (medians over the pairs): event-loop delay p50 / p99 / max (ms); GC pauses count / total ms / longest ms; KB a scavenge kept (mean); client p99 Nereid / Triton (ms), over the pairs and in the warm-up run');
  console.log('| generator | point | loop delay | GC | scavenge kept (KB) | p99 N / T | warm-up run p99 N / T |\n|---|---|---|---|---|---|---|');
  for (const r of probeRows) console.log(r);
  console.log('');
  report(figures);
  if (args.jsonPath) await writeFile(args.jsonPath, JSON.stringify({ rounds, windowMs, figures, runs: json }, null, 2));
  if (failures > 0) process.exitCode = 1;
} finally {
  await nereid?.server.stop();
  await triton?.stop();
  await rm(repo, { recursive: true, force: true });
}
