/**
 * Nereid's gRPC frontend on the `simple` model (INT32 [1,16] add/sub), all measured in one run:
 *   (a) `ModelInfer` with raw input contents against `nereid serve --allow-http=false` in a child
 *       process, closed loop at concurrency 1 and 16;
 *   (b) `ModelStreamInfer`: 16 requests in flight on one bidirectional stream;
 *   (c) a bare grpc-js server in a child process (same method paths and channel options, raw
 *       bytes in, Nereid's own pre-encoded response bytes out), same loads;
 *   (d) a bare gRPC server framed by hand on node:http2 answering the same bytes;
 *   (e) `nereid serve --grpc-server=grpc-js`: Nereid on grpc-js's server, the fallback, against
 *       which `grpc_nereid_http2_vs_grpcjs_*` compare the default (its own gRPC server on its own
 *       HTTP/2 transport);
 *   (f) `nereid serve --grpc-server=node-http2`: the same gRPC server on node:http2, against which
 *       `grpc_nereid_transport_vs_node_http2_*` compare the default: what Nereid's HTTP/2
 *       transport gains over Node's.
 * All servers are measured in alternating windows, several rounds, medians kept.
 *
 * The load comes from `--clients N` child processes (bench/grpc-load-client.ts, default 2), each a
 * closed loop on its own connection sending pre-encoded request bytes. Concurrency 1 and the
 * stream necessarily run in one process; concurrency 16 is spread over the N (16 / N calls each).
 * `--transport http2` (default) frames gRPC by hand over `node:http2`, `--transport grpc-js` uses
 * grpc-js's `Client`, which costs two to four times the CPU per call. Each run checks that the
 * client side is not the bottleneck: the bare server at concurrency 16 with 2N processes
 * (`grpc_client_check_c16`) and with the stream's 16 messages split over two streams in two
 * processes (`grpc_client_check_stream_16`); a ratio ≤ 1 means more client processes do not get
 * more out of the bare server. Server CPU time per request (all threads, and the main thread,
 * from /proc) is reported beside the throughputs: when clients and server share few cores,
 * throughput ratios understate the server's own difference, CPU time per request does not.
 * `grpc_foreign_cpu_share` is the part of the machine other processes took during the windows.
 *
 * Usage: node dist/bench/grpc-overhead.js [--seconds N] [--json out.json] [--clients N]
 *          [--transport http2|grpc-js] [--rounds N] [--cpu-prof DIR]
 *   --cpu-prof DIR: run the Nereid child with `node --cpu-prof` (profile written to DIR on exit).
 * Nereid's own statistics are read around each of its windows: `*_compute_infer_per_request_*` is
 * the part of its server CPU per request that ONNX Runtime's run takes (compute_infer).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client, credentials } from '@grpc/grpc-js';
import { GRPC_INFERENCE_SERVICE, pb } from '@nereid/protocol';
import { simpleModel, writeModelToRepository } from '@nereid/testkit';
import { alternate, benchArgs, compared, LoadClientPool, medianOf, nereidServeCommand, rawGrpcAnswers, report, spawnServer, type DistributedLoadResult, type Figure } from './lib.js';
import type { GrpcLoadOptions } from './grpc-load-client.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const clients = Math.floor(args.number('clients', 2));
const rounds = Math.floor(args.number('rounds', 3));
const cpuProfDir = args.value('cpu-prof');
const transport = (args.value('transport') ?? 'http2') as GrpcLoadOptions['transport'];
if (transport !== 'grpc-js' && transport !== 'http2') throw new Error(`--transport must be grpc-js or http2, got ${String(transport)}`);

const root = fileURLToPath(new URL('../..', import.meta.url));
const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-'));
await writeModelToRepository(repo, simpleModel());

// The request as Triton's Python client sends it: raw input contents, both outputs requested.
const in0 = new Int32Array(16).map((_, i) => i);
const in1 = new Int32Array(16).fill(1);
const tensor = (name: string) => ({ name, datatype: 'INT32', shape: [1n, 16n], parameters: {} });
const request = Buffer.from(
  pb.ModelInferRequest.encode({
    model_name: 'simple',
    model_version: '',
    id: '',
    parameters: {},
    inputs: [tensor('INPUT0'), tensor('INPUT1')],
    outputs: [
      { name: 'OUTPUT0', parameters: {} },
      { name: 'OUTPUT1', parameters: {} },
    ],
    raw_input_contents: [new Uint8Array(in0.buffer), new Uint8Array(in1.buffer)],
  }).finish(),
);
const requestFile = join(repo, 'request.bin');
await writeFile(requestFile, request);

// (a), (b): nereid serve, gRPC only; (e) the same on grpc-js's server.
const serveNereid = (extra: string[], profile: boolean) =>
  spawnServer(
    [
      ...nereidServeCommand(profile && cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${resolve(cpuProfDir)}`] : []),
      `--model-repository=${repo}`,
      '--allow-http=false',
      '--grpc-port=0',
      '--grpc-address=127.0.0.1',
      '--allow-metrics=false',
      ...extra,
    ],
    /Started GRPCInferenceService at [^\s]+:(\d+)/,
  );
const nereid = await serveNereid([], true);
const nereidGrpcJs = await serveNereid(['--grpc-server=grpc-js'], false);
const nereidNodeHttp2 = await serveNereid(['--grpc-server=node-http2'], false);

// Capture Nereid's real response bytes (unary and streamed) for the bare server to send back.
const { unary: unaryResponse, streamed: streamResponse } = await rawGrpcAnswers(`127.0.0.1:${nereid.port}`, request);
const statsClient = new Client(`127.0.0.1:${nereid.port}`, credentials.createInsecure());
{
  const check = (r: pb.ModelInferResponse | undefined, what: string) => {
    const out0 = r && new Int32Array(new Uint8Array(r.raw_output_contents[0] ?? []).buffer);
    if (!r || r.outputs.length !== 2 || out0?.length !== 16 || out0[3] !== 4) throw new Error(`unexpected ${what} response from Nereid: ${JSON.stringify(r)}`);
  };
  check(pb.ModelInferResponse.decode(unaryResponse), 'ModelInfer');
  const streamed = pb.ModelStreamInferResponse.decode(streamResponse);
  if (streamed.error_message) throw new Error(`ModelStreamInfer failed: ${streamed.error_message}`);
  check(streamed.infer_response, 'ModelStreamInfer');
}
const unaryFile = join(repo, 'unary-response.bin');
const streamFile = join(repo, 'stream-response.bin');
await writeFile(unaryFile, unaryResponse);
await writeFile(streamFile, streamResponse);

// (c) the bare grpc-js server answering the same bytes.
const bare = await spawnServer([join(root, 'dist/bench/bare-grpc-server.js'), unaryFile, streamFile], /port (\d+)/);
// (d) gRPC framed by hand on node:http2, answering the same bytes: what grpc-js costs over Node's HTTP/2.
const bareHttp2 = await spawnServer([join(root, 'dist/bench/bare-http2-grpc-server.js'), unaryFile, streamFile], /port (\d+)/);

// 2N load processes: the first N carry the load, all 2N the client check.
const pool = LoadClientPool.fork(join(root, 'dist/bench/grpc-load-client.js'), [requestFile], 2 * clients);
const servers = [nereid, bare, bareHttp2, nereidGrpcJs, nereidNodeHttp2] as const;
type ChildServer = (typeof servers)[number];

type Load = Omit<GrpcLoadOptions, 'port' | 'expectedLength' | 'transport'>;
/** `total` unary calls in flight over the first `processes` load processes (as evenly as may be). */
const unary = (total: number, processes: number): (Load | undefined)[] =>
  Array.from({ length: pool.size }, (_, i) => {
    const share = i < processes ? Math.floor(total / processes) + (i < total % processes ? 1 : 0) : 0;
    return share > 0 ? { mode: 'unary', inflight: share, streams: 0 } : undefined;
  });
/** `streams` streams, one per load process, `inflight` messages in flight on each. */
const stream = (inflight: number, streams = 1): (Load | undefined)[] =>
  Array.from({ length: pool.size }, (_, i) => (i < streams ? { mode: 'stream', inflight, streams: 1 } : undefined));

/** Nereid's `simple` statistics: successful requests and the summed compute_infer time (ns). */
function computeInfer(): Promise<{ count: number; ns: number }> {
  const method = GRPC_INFERENCE_SERVICE.ModelStatistics;
  return new Promise((done, fail) =>
    statsClient.makeUnaryRequest(method.path, method.requestSerialize, method.responseDeserialize, { name: 'simple', version: '' }, (err, r) => {
      const s = r?.model_stats[0]?.inference_stats;
      if (err || !s) return fail(err ?? new Error('no statistics for simple'));
      done({ count: Number(s.success?.count ?? 0n), ns: Number(s.compute_infer?.ns ?? 0n) });
    }),
  );
}

type Measured = DistributedLoadResult & { computeInferUsPerRequest: number };

async function measure(server: ChildServer, load: (Load | undefined)[], windowSeconds = seconds): Promise<Measured> {
  const options = load.map((l): GrpcLoadOptions | undefined =>
    l && { port: server.port, transport, ...l, expectedLength: l.mode === 'unary' ? unaryResponse.byteLength : streamResponse.byteLength },
  );
  const before = server === nereid ? await computeInfer() : undefined;
  const result = await pool.run(options, windowSeconds, 0.5, server.process.pid);
  const after = before && (await computeInfer());
  const computeInferUsPerRequest = before && after ? (after.ns - before.ns) / 1000 / Math.max(1, after.count - before.count) : 0;
  return { ...result, computeInferUsPerRequest };
}

/** Nereid and the bare server under `load`, alternating windows; medians. */
async function both(load: (Load | undefined)[]) {
  const [n, b, h, g, nh] = await alternate(servers, rounds, (server) => measure(server, load));
  return {
    nereid: medianOf(n!),
    bare: medianOf(b!),
    http2: medianOf(h!),
    grpcJs: medianOf(g!),
    nodeHttp2: medianOf(nh!),
    foreign: [...n!, ...b!, ...h!, ...g!, ...nh!].map((r) => r.foreignCpuShare),
  };
}

const measured = await (async () => {
  try {
    // Warm-up (JIT of the servers and of every load process), not recorded.
    for (const server of servers) {
      await measure(server, unary(16, 2 * clients), 1);
      await measure(server, stream(16), 1);
    }
    const c1 = await both(unary(1, 1));
    const c16 = await both(unary(16, clients));
    const s16 = await both(stream(16));
    // Client checks: the bare server with twice the load processes (same total in flight), and
    // with the 16 streamed requests over two streams in two processes.
    const [checkN, check2N] = await alternate([clients, 2 * clients], rounds, (processes) => measure(bare, unary(16, processes)));
    const [stream1, stream2] = await alternate([1, 2], rounds, (streams) => measure(bare, stream(16 / streams, streams)));
    return { c1, c16, s16, checkN: medianOf(checkN!), check2N: medianOf(check2N!), stream1: medianOf(stream1!), stream2: medianOf(stream2!) };
  } finally {
    statsClient.close();
    await pool.close();
    await nereid.stop();
    await bare.stop();
    await bareHttp2.stop();
    await nereidGrpcJs.stop();
    await nereidNodeHttp2.stop();
    await rm(repo, { recursive: true, force: true });
  }
})();
const { c1, c16, s16 } = measured;

const vsBare = (name: string, unit: string, value: number, baseline: number): Figure => compared(name, unit, value, baseline, 'bare_grpc_js');

const figures: Figure[] = [
  vsBare('grpc_infer_latency_c1', 'us', c1.nereid.meanLatencyUs, c1.bare.meanLatencyUs),
  vsBare('grpc_infer_throughput_c1', 'req/s', c1.nereid.throughput, c1.bare.throughput),
  vsBare('grpc_infer_throughput_c16', 'req/s', c16.nereid.throughput, c16.bare.throughput),
  vsBare('grpc_infer_p99_latency_c16', 'us', c16.nereid.p99Us, c16.bare.p99Us),
  vsBare('grpc_infer_server_cpu_per_request_c16', 'us', c16.nereid.serverCpuUsPerRequest, c16.bare.serverCpuUsPerRequest),
  vsBare('grpc_infer_server_main_thread_per_request_c16', 'us', c16.nereid.serverMainThreadCpuUsPerRequest, c16.bare.serverMainThreadCpuUsPerRequest),
  vsBare('grpc_stream_throughput_16', 'req/s', s16.nereid.throughput, s16.bare.throughput),
  vsBare('grpc_stream_latency_16', 'us', s16.nereid.meanLatencyUs, s16.bare.meanLatencyUs),
  vsBare('grpc_stream_p99_latency_16', 'us', s16.nereid.p99Us, s16.bare.p99Us),
  vsBare('grpc_stream_server_cpu_per_request_16', 'us', s16.nereid.serverCpuUsPerRequest, s16.bare.serverCpuUsPerRequest),
  vsBare('grpc_stream_server_main_thread_per_request_16', 'us', s16.nereid.serverMainThreadCpuUsPerRequest, s16.bare.serverMainThreadCpuUsPerRequest),
  // The part of Nereid's CPU per request that is ONNX Runtime's run itself (compute_infer).
  { name: 'grpc_infer_compute_infer_per_request_c16', value: c16.nereid.computeInferUsPerRequest, unit: 'us' },
  { name: 'grpc_stream_compute_infer_per_request_16', value: s16.nereid.computeInferUsPerRequest, unit: 'us' },
  { name: `grpc_client_processes_${transport.replace('-', '_')}`, value: clients, unit: 'processes' },
  { name: 'grpc_client_cpu_per_request_c16', value: c16.bare.clientCpuUsPerRequest, unit: 'us' },
  { name: 'grpc_client_loop_utilization_c16', value: c16.bare.maxClientLoopUtilization, unit: '' },
  compared('grpc_client_check_c16', 'req/s', measured.check2N.throughput, measured.checkN.throughput, `bare_grpc_js_${clients}_processes`),
  compared('grpc_client_check_stream_16', 'req/s', measured.stream2.throughput, measured.stream1.throughput, 'bare_grpc_js_1_stream'),
  { name: 'grpc_machine_cpu_busy_c16', value: c16.bare.machineCpuBusy, unit: '' },
  // The gRPC library itself: the same bytes served over node:http2 framed by hand, against grpc-js.
  compared('grpc_bare_http2_throughput_c16', 'req/s', c16.http2.throughput, c16.bare.throughput, 'bare_grpc_js'),
  compared('grpc_bare_http2_server_cpu_per_request_c16', 'us', c16.http2.serverCpuUsPerRequest, c16.bare.serverCpuUsPerRequest, 'bare_grpc_js'),
  compared('grpc_bare_http2_latency_c1', 'us', c1.http2.meanLatencyUs, c1.bare.meanLatencyUs, 'bare_grpc_js'),
  compared('grpc_bare_http2_stream_throughput_16', 'req/s', s16.http2.throughput, s16.bare.throughput, 'bare_grpc_js'),
  compared('grpc_bare_http2_stream_server_cpu_per_request_16', 'us', s16.http2.serverCpuUsPerRequest, s16.bare.serverCpuUsPerRequest, 'bare_grpc_js'),
  // The default (Nereid's gRPC server on its own HTTP/2) against the same server on node:http2.
  compared('grpc_nereid_transport_vs_node_http2_latency_c1', 'us', c1.nereid.meanLatencyUs, c1.nodeHttp2.meanLatencyUs, 'nereid_node_http2'),
  compared('grpc_nereid_transport_vs_node_http2_p99_latency_c1', 'us', c1.nereid.p99Us, c1.nodeHttp2.p99Us, 'nereid_node_http2'),
  compared('grpc_nereid_transport_vs_node_http2_throughput_c16', 'req/s', c16.nereid.throughput, c16.nodeHttp2.throughput, 'nereid_node_http2'),
  compared('grpc_nereid_transport_vs_node_http2_p99_latency_c16', 'us', c16.nereid.p99Us, c16.nodeHttp2.p99Us, 'nereid_node_http2'),
  compared('grpc_nereid_transport_vs_node_http2_server_cpu_per_request_c16', 'us', c16.nereid.serverCpuUsPerRequest, c16.nodeHttp2.serverCpuUsPerRequest, 'nereid_node_http2'),
  compared('grpc_nereid_transport_vs_node_http2_stream_throughput_16', 'req/s', s16.nereid.throughput, s16.nodeHttp2.throughput, 'nereid_node_http2'),
  compared('grpc_nereid_transport_vs_node_http2_stream_server_cpu_per_request_16', 'us', s16.nereid.serverCpuUsPerRequest, s16.nodeHttp2.serverCpuUsPerRequest, 'nereid_node_http2'),
  // The default server against grpc-js's, both Nereid, same run.
  compared('grpc_nereid_http2_vs_grpcjs_throughput_c1', 'req/s', c1.nereid.throughput, c1.grpcJs.throughput, 'nereid_grpc_js'),
  compared('grpc_nereid_http2_vs_grpcjs_throughput_c16', 'req/s', c16.nereid.throughput, c16.grpcJs.throughput, 'nereid_grpc_js'),
  compared('grpc_nereid_http2_vs_grpcjs_p99_latency_c16', 'us', c16.nereid.p99Us, c16.grpcJs.p99Us, 'nereid_grpc_js'),
  compared('grpc_nereid_http2_vs_grpcjs_server_cpu_per_request_c16', 'us', c16.nereid.serverCpuUsPerRequest, c16.grpcJs.serverCpuUsPerRequest, 'nereid_grpc_js'),
  compared('grpc_nereid_http2_vs_grpcjs_stream_throughput_16', 'req/s', s16.nereid.throughput, s16.grpcJs.throughput, 'nereid_grpc_js'),
  compared('grpc_nereid_http2_vs_grpcjs_stream_server_cpu_per_request_16', 'us', s16.nereid.serverCpuUsPerRequest, s16.grpcJs.serverCpuUsPerRequest, 'nereid_grpc_js'),
  { name: 'grpc_foreign_cpu_share', value: Math.max(...c1.foreign, ...c16.foreign, ...s16.foreign), unit: '' },
];
report(figures, jsonPath);
