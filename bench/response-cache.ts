/**
 * What the response cache saves and costs (models-and-scheduling.md §8.2, docs/cache.md),
 * measured in one run on the MLP example model (FP32 [1, 256] → 2×1024 hidden → [1, 16]), one
 * request at a time, over HTTP (binary input and outputs) and through the `Server` facade:
 *   hit:      the same request again and again to a model with the local cache (all hits);
 *   miss:     a request with new input bytes each time to the same model (lookup, run, insert);
 *   no cache: the same request to the same model without the cache (the baseline).
 * Also the key's hashing rate (SHA-256 over the inputs where they lie) at the MLP's 1 KiB and at
 * 4 MiB. The facade targets each take one event-loop turn per call (see `turn`). Targets alternate over `--rounds` rounds of `--seconds`; medians are kept.
 *
 * Usage: node dist/bench/response-cache.js [--seconds N] [--rounds N] [--json out.json]
 */
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HttpFrontend, Server, requestKey, silentLogger, type InferRequest } from '@nereid/server';
import { mlpModel } from '@nereid/testkit';
import { alternate, benchArgs, compared, httpPoster, median, report, runLoad } from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));

const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-cache-'));
for (const [name, extra] of [
  ['mlp', ''],
  ['mlp_cached', 'response_cache { enable: true }\n'],
] as const) {
  const model = mlpModel({ name });
  await mkdir(join(repo, name, '1'), { recursive: true });
  await writeFile(join(repo, name, '1', 'model.onnx'), model.onnx.bytes);
  await writeFile(join(repo, name, 'config.pbtxt'), model.config! + extra);
}
const server = await Server.start({ modelRepositories: [repo], logger: silentLogger(), cache: { name: 'local', settings: { size: String(64 << 20) } } });
const http = new HttpFrontend(server, { address: '127.0.0.1', port: 0 });
const port = await http.listen();

const input = new Float32Array(256).map((_, i) => Math.sin(i));
const request = (model: string, data: Float32Array): InferRequest => ({ model, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 256], data }] });
let counter = 0;
/** Input bytes never sent before: a miss every time. */
const fresh = (): Float32Array => {
  const d = input.slice();
  d[0] = ++counter;
  return d;
};

// HTTP bodies: binary input, binary outputs; a miss rewrites the first float of its own copy.
const header = Buffer.from(
  JSON.stringify({
    inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 256], parameters: { binary_data_size: 1024 } }],
    parameters: { binary_data_output: true },
  }),
);
const body = Buffer.concat([header, Buffer.from(input.buffer)]);
const headers = { 'Inference-Header-Content-Length': header.length, 'Content-Type': 'application/octet-stream' };
const hitPoster = httpPoster(port, '/v2/models/mlp_cached/infer', body, headers, 1);
const plainPoster = httpPoster(port, '/v2/models/mlp/infer', body, headers, 1);
const missBody = Buffer.from(body);
const missPoster = httpPoster(port, '/v2/models/mlp_cached/infer', missBody, headers, 1);
const missOp = () => {
  missBody.writeFloatLE(++counter, header.length);
  return missPoster.post();
};

/**
 * A facade hit settles within microtasks: without a turn of the event loop between calls the load
 * loop would never let its timer fire. Every facade target takes the same turn.
 */
const turn = <T>(value: T): Promise<T> => new Promise((resolve) => setImmediate(() => resolve(value)));

const targets = [
  ['http hit', () => hitPoster.post()],
  ['http miss', missOp],
  ['http no cache', () => plainPoster.post()],
  ['facade hit', () => server.infer(request('mlp_cached', input)).then(turn)],
  ['facade miss', () => server.infer(request('mlp_cached', fresh())).then(turn)],
  ['facade no cache', () => server.infer(request('mlp', input)).then(turn)],
] as const;
const results = await alternate(targets, rounds, ([, op]) => runLoad(op, 1, seconds));
const us = (i: number) => median(results[i]!.map((r) => r.meanLatencyUs));
const p99 = (i: number) => median(results[i]!.map((r) => r.p99Us));

// The key alone, at the MLP's input and at 4 MiB (a view, hashed in place).
const hashRate = (bytes: number): { us: number; gbps: number } => {
  const data = new Uint8Array(bytes).fill(7);
  const inputs = new Map([['INPUT0', { name: 'INPUT0', datatype: 'FP32' as const, shape: [1, bytes / 4], data }]]);
  const n = bytes > 1 << 20 ? 50 : 20_000;
  for (let i = 0; i < Math.min(n, 1000); i++) requestKey('mlp', 1, inputs, ['OUTPUT0']);
  const t0 = process.hrtime.bigint();
  for (let i = 0; i < n; i++) requestKey('mlp', 1, inputs, ['OUTPUT0']);
  const perUs = Number(process.hrtime.bigint() - t0) / 1000 / n;
  return { us: perUs, gbps: bytes / (perUs * 1000) };
};
const small = hashRate(1024);
const large = hashRate(4 << 20);
const counters = server.responseCache!.counters;

report(
  [
    compared('cache_hit_http_latency', 'us', us(0), us(2), 'no cache'),
    compared('cache_miss_http_latency', 'us', us(1), us(2), 'no cache'),
    compared('cache_hit_http_p99', 'us', p99(0), p99(2), 'no cache'),
    compared('cache_hit_facade_latency', 'us', us(3), us(5), 'no cache'),
    compared('cache_miss_facade_latency', 'us', us(4), us(5), 'no cache'),
    compared('cache_hit_vs_miss_http', 'us', us(0), us(1), 'miss'),
    { name: 'cache_key_1kib', value: small.us, unit: 'us' },
    { name: 'cache_key_4mib_rate', value: large.gbps, unit: 'GB/s' },
    { name: 'cache_evictions_during_run', value: counters.evictions, unit: '' },
  ],
  jsonPath,
);

hitPoster.close();
missPoster.close();
plainPoster.close();
const closing = http.close();
http.closeAllConnections();
await closing;
await server.stop();
await rm(repo, { recursive: true, force: true });
