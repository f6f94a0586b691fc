/**
 * Nereid's own overhead on the `simple` model (INT32 [1,16] add/sub), all measured in one run:
 *   (a) ONNX Runtime in-process: `InferenceSession.run` on this thread, nothing else;
 *   (b) the `Server` facade (validation, scheduling, worker-thread hop, response assembly);
 *   (c) HTTP infer with binary tensors against `nereid serve` in a child process, at
 *       concurrency 1 and 16;
 *   (d) a bare `node:http` server in a child process answering the same bytes, same load;
 *   (e) `nereid serve --http-server=node`: the same server on `node:http` instead of Nereid's own
 *       HTTP/1.1 transport, same load.
 * The HTTP load of (c) and (d) is the benchmarks' lean HTTP/1.1 client (bench/lean-http.ts);
 * `http_throughput_c16_node_client` repeats the c16 comparison with `node:http`'s own client.
 * Figures: HTTP overhead per request (c − a at concurrency 1), HTTP throughput against the bare
 * server at concurrency 16 (target ≥ 0.5), facade overhead per request (b − a; target < 20 µs),
 * and the floor under (b): an empty message to a worker thread and back.
 *
 * Figures of the transport itself: Nereid's latency at concurrency 1 and throughput at 16 against
 * (e). The HTTP servers are measured in alternating windows, three rounds, and the medians kept.
 *
 * Usage: node dist/bench/http-overhead.js [--seconds N] [--json out.json]
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Worker } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import { Server, silentLogger } from '@nereid/server';
import { simpleModel, writeModelToRepository } from '@nereid/testkit';
import { alternate, benchArgs, httpPoster, medianOf, nereidServeCommand, nodeHttpPoster, report, runLoad, simpleBinaryRequest, spawnServer, type Figure } from './lib.js';

const { seconds, jsonPath } = benchArgs();

const root = fileURLToPath(new URL('../..', import.meta.url));
const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-'));
const model = simpleModel();
await writeModelToRepository(repo, model);

const in0 = new Int32Array(16).map((_, i) => i);
const in1 = new Int32Array(16).fill(1);

// (a) ONNX Runtime in-process, one intra-op thread (as each Nereid instance gets on 2 cores).
const session = await ort.InferenceSession.create(join(repo, 'simple', '1', 'model.onnx'), { intraOpNumThreads: 1 });
const feeds = { INPUT0: new ort.Tensor('int32', in0, [1, 16]), INPUT1: new ort.Tensor('int32', in1, [1, 16]) };
const ortRun = await runLoad(() => session.run(feeds), 1, seconds);
await session.release();

// The floor of any off-thread execution: an empty message to a worker thread and back.
const echo = new Worker(`require('node:worker_threads').parentPort.on('message', (m) => require('node:worker_threads').parentPort.postMessage(m));`, { eval: true });
const echoOnce = () => new Promise<void>((resolve) => {
  echo.once('message', () => resolve());
  echo.postMessage(0);
});
const threadHop = await runLoad(echoOnce, 1, seconds);
await echo.terminate();

// (b) the facade, in-process.
const server = new Server({ modelRepositories: [repo], logger: silentLogger() });
await server.load();
const request = {
  model: 'simple',
  inputs: [
    { name: 'INPUT0', datatype: 'INT32' as const, shape: [1, 16], data: in0 },
    { name: 'INPUT1', datatype: 'INT32' as const, shape: [1, 16], data: in1 },
  ],
};
const facade1 = await runLoad(() => server.infer(request), 1, seconds);
const facade16 = await runLoad(() => server.infer(request), 16, seconds);
await server.stop();

// The HTTP request: binary inputs and outputs, as the Python client sends it (protocol.md §7.1).
const { body, headers } = simpleBinaryRequest(in0, in1);

/** One window per server at concurrency `c`, alternating, `rounds` times (noise hits all alike). */
async function measureAll(ports: readonly number[], c: number, rounds: number, poster = httpPoster) {
  const results = await alternate(ports, rounds, async (port) => {
    const client = poster(port, '/v2/models/simple/infer', body, headers, c);
    const result = await runLoad(client.post, c, seconds);
    client.close();
    return result;
  });
  return results.map((r) => medianOf(r));
}

// (c) nereid serve in a child process.
const nereid = await spawnServer(
  [...nereidServeCommand(), `--model-repository=${repo}`, '--http-port=0', '--http-address=127.0.0.1', '--allow-grpc=false', '--allow-metrics=false'],
  /Started HTTPService at [^:]+:(\d+)/,
);
// Capture Nereid's real response bytes for the bare server to send back.
const sample = await fetch(`http://127.0.0.1:${nereid.port}/v2/models/simple/infer`, {
  method: 'POST',
  headers: { 'inference-header-content-length': String(headers['Inference-Header-Content-Length']) },
  body,
});
const sampleBody = Buffer.from(await sample.arrayBuffer());
const sampleHeaderLength = sample.headers.get('inference-header-content-length')!;

// (d) bare node:http server answering the same bytes.
const responseFile = join(repo, 'response.bin');
await writeFile(responseFile, sampleBody);
const bare = await spawnServer([join(root, 'dist/bench/bare-http-server.js'), responseFile, sampleHeaderLength], /port (\d+)/);

// (e) the same server on node:http.
const nereidNode = await spawnServer(
  [...nereidServeCommand(), `--model-repository=${repo}`, '--http-port=0', '--http-address=127.0.0.1', '--allow-grpc=false', '--allow-metrics=false', '--http-server=node'],
  /Started HTTPService at [^:]+:(\d+)/,
);

const rounds = 3;
const [n1, b1, nn1] = await measureAll([nereid.port, bare.port, nereidNode.port], 1, rounds);
const [n16, b16, nn16] = await measureAll([nereid.port, bare.port, nereidNode.port], 16, rounds);
const [n16NodeClient, b16NodeClient] = await measureAll([nereid.port, bare.port], 16, rounds, nodeHttpPoster);
await nereid.stop();
await bare.stop();
await nereidNode.stop();
await rm(repo, { recursive: true, force: true });
const httpNereid = { r1: n1!, r16: n16! };
const httpBare = { r1: b1!, r16: b16! };
const onNodeHttp = { r1: nn1!, r16: nn16! };
const c16NodeClient = { nereid: n16NodeClient!, bare: b16NodeClient! };

const ortUs = ortRun.meanLatencyUs;
const figures: Figure[] = [
  { name: 'ort_inprocess_latency', value: ortUs, unit: 'us' },
  { name: 'thread_roundtrip_latency', value: threadHop.meanLatencyUs, unit: 'us' },
  {
    name: 'facade_overhead_c1',
    value: facade1.meanLatencyUs - ortUs,
    unit: 'us',
    baseline: ortUs,
    baselineName: 'ort_run',
    ratio: facade1.meanLatencyUs / ortUs,
  },
  {
    name: 'facade_time_per_request_c16',
    value: 1e6 / facade16.throughput,
    unit: 'us',
    baseline: ortUs,
    baselineName: 'ort_run',
    ratio: 1e6 / facade16.throughput / ortUs,
  },
  {
    name: 'facade_main_thread_per_request_c16',
    value: facade16.loopBusyUsPerRequest,
    unit: 'us',
  },
  {
    name: 'http_overhead_c1',
    value: httpNereid.r1.meanLatencyUs - ortUs,
    unit: 'us',
    baseline: ortUs,
    baselineName: 'ort_run',
    ratio: httpNereid.r1.meanLatencyUs / ortUs,
  },
  {
    name: 'http_latency_c1',
    value: httpNereid.r1.meanLatencyUs,
    unit: 'us',
    baseline: httpBare.r1.meanLatencyUs,
    baselineName: 'bare_node_http',
    ratio: httpNereid.r1.meanLatencyUs / httpBare.r1.meanLatencyUs,
  },
  {
    name: 'http_throughput_c1',
    value: httpNereid.r1.throughput,
    unit: 'req/s',
    baseline: httpBare.r1.throughput,
    baselineName: 'bare_node_http',
    ratio: httpNereid.r1.throughput / httpBare.r1.throughput,
  },
  {
    name: 'http_throughput_c16',
    value: httpNereid.r16.throughput,
    unit: 'req/s',
    baseline: httpBare.r16.throughput,
    baselineName: 'bare_node_http',
    ratio: httpNereid.r16.throughput / httpBare.r16.throughput,
  },
  {
    name: 'http_throughput_c16_node_client',
    value: c16NodeClient.nereid.throughput,
    unit: 'req/s',
    baseline: c16NodeClient.bare.throughput,
    baselineName: 'bare_node_http',
    ratio: c16NodeClient.nereid.throughput / c16NodeClient.bare.throughput,
  },
  {
    name: 'http_transport_latency_c1',
    value: httpNereid.r1.meanLatencyUs,
    unit: 'us',
    baseline: onNodeHttp.r1.meanLatencyUs,
    baselineName: 'nereid_on_node_http',
    ratio: httpNereid.r1.meanLatencyUs / onNodeHttp.r1.meanLatencyUs,
  },
  {
    name: 'http_transport_throughput_c16',
    value: httpNereid.r16.throughput,
    unit: 'req/s',
    baseline: onNodeHttp.r16.throughput,
    baselineName: 'nereid_on_node_http',
    ratio: httpNereid.r16.throughput / onNodeHttp.r16.throughput,
  },
  {
    name: 'http_p99_latency_c16',
    value: httpNereid.r16.p99Us,
    unit: 'us',
    baseline: httpBare.r16.p99Us,
    baselineName: 'bare_node_http',
    ratio: httpNereid.r16.p99Us / httpBare.r16.p99Us,
  },
];
report(figures, jsonPath);
