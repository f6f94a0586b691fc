/**
 * What request tracing costs (docs/observability.md), on HTTP `simple` (INT32 [1,16] add/sub,
 * binary tensors, the request of bench/http-overhead.ts) against `nereid serve` in child
 * processes, all started in one run:
 *   off          tracing off (the default, level OFF): the baseline (and off_control, below);
 *   otel_rate1000  --trace-config mode=opentelemetry, level=TIMESTAMPS, rate=1000;
 *   otel_rate1   the same, every request traced (three spans each, exported);
 *   triton_rate1 mode triton, every request written to a trace file (Triton's JSON).
 * The OpenTelemetry servers export over OTLP/HTTP to a bare receiver in another process
 * (bench/bare-otlp-receiver.ts), with a batch span processor large enough that no span is
 * dropped (queue 65536, batches of 4096, every 500 ms): at rate 1 every span is really exported.
 *
 * The servers are measured in alternating windows (five rounds unless --rounds, each starting one server further
 * on; medians; after one uncounted window on each), at concurrency 16 (throughput) and 1
 * (latency), so that the machine's noise hits them alike. A second server with tracing off,
 * `off_control`, is measured like the others: its ratio to `off` is the noise of the run, the
 * resolution of the other ratios.
 *
 * Figures: each mode's server CPU time per request (from the window's start until the server is
 * quiet again, so exports and file writes after the window count; /proc), throughput and latency
 * against off. The overhead target is on CPU per request, which other work on a shared machine
 * disturbs far less than throughput: at rate 1000 under 5 % (ratio < 1.05).
 *
 * Usage: node dist/bench/tracing.js [--seconds N] [--rounds N] [--json out.json]
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { simpleModel, writeModelToRepository } from '@nereid/testkit';
import { benchArgs, compared, cpuTimeUs, httpPoster, medianOf, nereidServeCommand, report, runLoad, simpleBinaryRequest, spawnServer, type ChildServer, type Figure } from './lib.js';

const { seconds, jsonPath, number } = benchArgs();
const ROUNDS = number('rounds', 5);
const root = fileURLToPath(new URL('../..', import.meta.url));
const dir = await mkdtemp(join(tmpdir(), 'nereid-bench-tracing-'));
const repo = join(dir, 'models');
await writeModelToRepository(repo, simpleModel());

const in0 = new Int32Array(16).map((_, i) => i);
const in1 = new Int32Array(16).fill(1);
const { body, headers } = simpleBinaryRequest(in0, in1);

const receiver = await spawnServer([join(root, 'dist/bench/bare-otlp-receiver.js')], /port (\d+)/);
const otel = (rate: number) => [
  '--trace-config=mode=opentelemetry',
  '--trace-config=level=TIMESTAMPS',
  `--trace-config=rate=${rate}`,
  `--trace-config=opentelemetry,url=http://127.0.0.1:${receiver.port}/v1/traces`,
  '--trace-config=opentelemetry,bsp_max_queue_size=65536',
  '--trace-config=opentelemetry,bsp_max_export_batch_size=4096',
  '--trace-config=opentelemetry,bsp_schedule_delay=500',
];
const traceFile = join(dir, 'trace.json');
const modes: [string, string[]][] = [
  ['off', []],
  // A second server with tracing off: its ratio to the first is the noise of this run.
  ['off_control', []],
  ['otel_rate1000', otel(1000)],
  ['otel_rate1', otel(1)],
  ['triton_rate1', ['--trace-config=level=TIMESTAMPS', '--trace-config=rate=1', `--trace-config=triton,file=${traceFile}`]],
];
const servers: ChildServer[] = [];
for (const [, flags] of modes) {
  servers.push(
    await spawnServer(
      [...nereidServeCommand(), `--model-repository=${repo}`, '--http-port=0', '--http-address=127.0.0.1', '--allow-grpc=false', '--allow-metrics=false', ...flags],
      /Started HTTPService at [^:]+:(\d+)/,
    ),
  );
}
// Every server answers before the clock starts (and each traced mode has traced a request).
for (const s of servers) {
  const r = await fetch(`http://127.0.0.1:${s.port}/v2/models/simple/infer`, { method: 'POST', headers: { 'inference-header-content-length': String(headers['Inference-Header-Content-Length']) }, body });
  if (r.status !== 200) throw new Error(`server on port ${s.port} answered HTTP ${r.status}: ${await r.text()}`);
  await r.arrayBuffer();
}

/**
 * Waits until every server and the receiver are quiet (under 5 ms of CPU in 250 ms; 20 s at
 * most): a traced server goes on exporting spans or writing its trace file after its window, and
 * that work must not fall into the next server's window.
 */
async function quiet() {
  const pids = [...servers, receiver].map((s) => s.process.pid!);
  const cpu = () => pids.reduce((sum, pid) => sum + (cpuTimeUs(pid)?.total ?? 0), 0);
  const until = Date.now() + 20_000;
  for (let before = cpu(); Date.now() < until; ) {
    await new Promise((resolve) => setTimeout(resolve, 250));
    const now = cpu();
    if (now - before < 5000) return;
    before = now;
  }
}

/**
 * One load window on `server` at concurrency `c`, started once everything is quiet; with the
 * server's CPU time per request: from the window's start until the server is quiet again, so the
 * exports and file writes that follow the window are counted, over every request it answered.
 */
async function window(server: ChildServer, c: number) {
  await quiet();
  const pid = server.process.pid!;
  const cpu0 = cpuTimeUs(pid)?.total ?? 0;
  const client = httpPoster(server.port, '/v2/models/simple/infer', body, headers, c);
  let answered = 0;
  const result = await runLoad(() => client.post().then(() => void answered++), c, seconds);
  client.close();
  await quiet();
  const cpuUsPerRequest = ((cpuTimeUs(pid)?.total ?? 0) - cpu0) / Math.max(1, answered);
  return { ...result, cpuUsPerRequest };
}
// A first window on each server, not counted: every server's code is compiled and its pools are
// grown before the measured windows, so the order of the servers does not favour the later ones.
for (const s of servers) await window(s, 16);

/** ROUNDS rounds over every server, each round starting one server further on; the medians. */
async function measure(c: number) {
  const results: Awaited<ReturnType<typeof window>>[][] = servers.map(() => []);
  for (let round = 0; round < ROUNDS; round++) {
    for (let k = 0; k < servers.length; k++) {
      const i = (round + k) % servers.length;
      results[i]!.push(await window(servers[i]!, c));
    }
  }
  return results.map((r) => medianOf(r));
}
const c16 = await measure(16);
const c1 = await measure(1);
for (const s of servers) await s.stop();
const received = new Promise<string>((resolve) => {
  let out = '';
  receiver.process.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  receiver.process.once('exit', () => resolve(out));
});
await receiver.stop();
const receiverLine = /exports (\d+) bytes (\d+)/.exec(await received);
const traceFileBytes = (await readFile(traceFile).catch(() => Buffer.alloc(0))).byteLength;
await rm(dir, { recursive: true, force: true });

const figures: Figure[] = [];
const [off16, off1] = [c16[0]!, c1[0]!];
for (let i = 1; i < modes.length; i++) {
  const name = modes[i]![0];
  figures.push(compared(`tracing_${name}_cpu_per_request_c16`, 'us', c16[i]!.cpuUsPerRequest, off16.cpuUsPerRequest, 'tracing_off'));
  figures.push(compared(`tracing_${name}_throughput_c16`, 'req/s', c16[i]!.throughput, off16.throughput, 'tracing_off'));
  figures.push(compared(`tracing_${name}_latency_c1`, 'us', c1[i]!.meanLatencyUs, off1.meanLatencyUs, 'tracing_off'));
}
figures.push({ name: 'tracing_off_throughput_c16', value: off16.throughput, unit: 'req/s' }, { name: 'tracing_off_cpu_per_request_c16', value: off16.cpuUsPerRequest, unit: 'us' });
if (receiverLine) figures.push({ name: 'tracing_otlp_exports_received', value: Number(receiverLine[1]), unit: 'exports' }, { name: 'tracing_otlp_bytes_received', value: Number(receiverLine[2]), unit: 'B' });
figures.push({ name: 'tracing_triton_trace_file_bytes', value: traceFileBytes, unit: 'B' });
report(figures, jsonPath);
