/**
 * Dynamic batching on the FP32 MLP example (examples/model_repository/mlp: INPUT0 FP32 [-1, 256]
 * → Gemm+Relu 1024 → Gemm+Relu 1024 → Gemm → OUTPUT0 [-1, 16], max_batch_size 32, one CPU
 * instance), all measured in one run:
 *   (a) `nereid serve` on a copy of the example repository (dynamic batching, 200 µs delay);
 *   (b) `nereid serve` on a copy whose config lacks the `dynamic_batching` block (every request
 *       executes alone), instance group and thread settings unchanged;
 *   (c) ONNX Runtime in-process: `InferenceSession.run` at batch 64 in this process, with the
 *       served instance's intra-op thread count: the ceiling for this model on this machine;
 *   (d) a bare server answering Nereid's response bytes without any model (bench/bare-http-server.ts,
 *       or bench/bare-grpc-server.ts for the gRPC transports), same load: the ceiling of the
 *       transport and the load generator on this machine;
 *   (e) (a) with memory accounting off (`--memory-sample-interval-ms=0`), (a) keeping the
 *       default: the cost of the accounting (docs/resources.md), target < 2 %.
 * The load: `--concurrency` (default 64) closed-loop clients, each sending batch-1 requests, from
 * `--clients` load processes (bench/grpc-load-client.ts, default 1, as perf_analyzer is one
 * process: on a machine whose cores the server shares, a second load process only adds a
 * competitor for them; one stays below a quarter of its event loop here). `--transport http`
 * (default) sends KServe v2 HTTP/REST requests with binary tensor data over keep-alive
 * connections (the benchmarks' lean HTTP/1.1 client, bench/lean-http.ts); `http2` and `grpc-js`
 * send gRPC `ModelInfer` calls (see grpc-load-client.ts), or, with `--mode stream`,
 * `ModelStreamInfer` messages: each client is then one stream with one request in flight
 * (perf_analyzer's `--streaming`). On the 2-core development machine unary HTTP
 * costs less CPU per request than unary gRPC on both sides (server and load processes), and a
 * stream less than either; CPU per request is what bounds every served figure here.
 * Targets: (a) ≥ 3 × (b), and (a) ≥ 0.6 × (c).
 *
 * The five are measured in alternating windows (c, a, b, d, e; `--rounds` rounds of `--seconds`,
 * after a warm-up window each) and the medians kept. Batch sizes come from each server's
 * statistics (`GET /v2/models/mlp/stats`, `batch_stats`), differenced over the windows.
 *
 * Usage: node dist/bench/dynamic-batching.js [--seconds N] [--json out.json] [--rounds N]
 *          [--clients N] [--concurrency N] [--transport http|http2|grpc-js] [--mode unary|stream]
 *          [--cpu-prof DIR]
 *   --cpu-prof DIR: run both Nereid children with `node --cpu-prof` (profiles written to DIR).
 */
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as ort from 'onnxruntime-node';
import { pb } from '@nereid/protocol';
import { defaultIntraOpThreads } from '@nereid/server';
import type { GrpcLoadOptions } from './grpc-load-client.js';
import {
  alternate,
  benchArgs,
  compared,
  LoadClientPool,
  nereidServeCommand,
  median,
  medianOf,
  report,
  rawGrpcAnswers,
  runLoad,
  spawnServer,
  type ChildServer,
  type DistributedLoadResult,
  type Figure,
} from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));
const clients = Math.floor(args.number('clients', 1));
const concurrency = Math.floor(args.number('concurrency', 64));
const cpuProfDir = args.value('cpu-prof');
const transport = (args.value('transport') ?? 'http') as GrpcLoadOptions['transport'];
if (!['http', 'http2', 'grpc-js'].includes(transport)) throw new Error(`--transport must be http, http2 or grpc-js, got ${String(transport)}`);
const grpc = transport !== 'http';
// `stream`: every client is a ModelStreamInfer stream with one request in flight (perf_analyzer's
// --streaming); gRPC transports only.
const mode = (args.value('mode') ?? 'unary') as GrpcLoadOptions['mode'];
if (!['unary', 'stream'].includes(mode)) throw new Error(`--mode must be unary or stream, got ${String(mode)}`);
if (mode === 'stream' && !grpc) throw new Error('--mode stream needs a gRPC transport: --transport http2 or grpc-js');

const MODEL = 'mlp';
const CEILING_BATCH = 64;
const root = fileURLToPath(new URL('../..', import.meta.url));
const example = join(root, 'examples', 'model_repository', MODEL);
const work = await mkdtemp(join(tmpdir(), 'nereid-bench-'));

/** `text` without its `name { … }` block (braces matched), or undefined if it has none. */
function withoutBlock(text: string, name: string): string | undefined {
  const m = new RegExp(`(^|\\n)[ \\t]*${name}\\s*\\{`).exec(text);
  if (!m) return undefined;
  let depth = 0;
  for (let i = m.index + m[0].length - 1; i < text.length; i++) {
    if (text[i] === '{') depth++;
    else if (text[i] === '}' && --depth === 0) return text.slice(0, m.index) + text.slice(i + 1);
  }
  throw new Error(`unbalanced braces after '${name}' in ${MODEL}/config.pbtxt`);
}

// Two copies of the example repository: as it is, and without dynamic batching.
const batchingRepo = join(work, 'batching');
const directRepo = join(work, 'no-batching');
for (const repo of [batchingRepo, directRepo]) await cp(example, join(repo, MODEL), { recursive: true });
const directConfig = withoutBlock(await readFile(join(example, 'config.pbtxt'), 'utf8'), 'dynamic_batching');
if (directConfig === undefined) throw new Error(`${example}/config.pbtxt has no dynamic_batching block`);
await writeFile(join(directRepo, MODEL, 'config.pbtxt'), directConfig);

// The request: one row of FP32 [1, 256], as binary tensor data (HTTP) or raw input contents (gRPC).
const input = new Float32Array(256).map((_, i) => ((i % 17) - 8) / 8);
const httpHeader = JSON.stringify({
  inputs: [{ name: 'INPUT0', shape: [1, 256], datatype: 'FP32', parameters: { binary_data_size: input.byteLength } }],
  outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
});
const httpHeaders = { 'Inference-Header-Content-Length': Buffer.byteLength(httpHeader) };
const request = grpc
  ? Buffer.from(
      pb.ModelInferRequest.encode({
        model_name: MODEL,
        model_version: '',
        id: '',
        parameters: {},
        inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1n, 256n], parameters: {} }],
        outputs: [{ name: 'OUTPUT0', parameters: {} }],
        raw_input_contents: [new Uint8Array(input.buffer)],
      }).finish(),
    )
  : Buffer.concat([Buffer.from(httpHeader), Buffer.from(input.buffer)]);
const requestFile = join(work, 'request.bin');
await writeFile(requestFile, request);

const serve = (repo: string, extra: readonly string[] = []) =>
  spawnServer(
    [
      ...nereidServeCommand(cpuProfDir ? ['--cpu-prof', `--cpu-prof-dir=${resolve(cpuProfDir)}`] : []),
      `--model-repository=${repo}`,
      '--http-port=0', // statistics and configuration, and the load with --transport http
      '--http-address=127.0.0.1',
      ...(grpc ? ['--grpc-port=0', '--grpc-address=127.0.0.1'] : ['--allow-grpc=false']),
      '--allow-metrics=false',
      ...extra,
    ],
    /Started HTTPService at [^\s]+:(\d+)/,
    grpc ? { grpc: /Started GRPCInferenceService at [^\s]+:(\d+)/ } : {},
  );

async function getJson(server: ChildServer, path: string): Promise<unknown> {
  const res = await fetch(`http://127.0.0.1:${server.port}${path}`);
  if (!res.ok) throw new Error(`GET ${path}: HTTP ${res.status} ${await res.text()}`);
  return res.json();
}

interface ServedConfig {
  max_batch_size: number;
  dynamic_batching?: object;
  instance_group: { count: number }[];
  parameters?: Record<string, { string_value: string }>;
}

/** Executions per batch size so far, from the statistics extension. */
async function batchCounts(server: ChildServer): Promise<Map<number, number>> {
  const stats = (await getJson(server, `/v2/models/${MODEL}/stats`)) as {
    model_stats: { batch_stats: { batch_size: number; compute_infer: { count: number } }[] }[];
  };
  return new Map(stats.model_stats[0]!.batch_stats.map((b) => [Number(b.batch_size), Number(b.compute_infer.count)]));
}

interface BatchFigures {
  /** Mean rows per execution. */
  mean: number;
  /** The batch size the median request ran in. */
  requestMedian: number;
  /** Share of the requests that ran in a batch of max_batch_size. */
  fullShare: number;
}

function batchFigures(before: Map<number, number>, after: Map<number, number>, maxBatchSize: number): BatchFigures {
  const perSize: [number, number][] = [];
  let executions = 0;
  let rows = 0;
  for (const size of [...after.keys()].sort((x, y) => x - y)) {
    const n = after.get(size)! - (before.get(size) ?? 0);
    if (n <= 0) continue;
    perSize.push([size, n]);
    executions += n;
    rows += n * size;
  }
  let seen = 0;
  let requestMedian = 0;
  for (const [size, n] of perSize) {
    seen += n * size;
    if (requestMedian === 0 && seen * 2 >= rows) requestMedian = size;
  }
  const full = perSize.find(([size]) => size === maxBatchSize);
  return { mean: rows / Math.max(1, executions), requestMedian, fullShare: full ? (full[0] * full[1]) / Math.max(1, rows) : 0 };
}

/** Nereid's response to the request (HTTP body or encoded ModelInferResponse) and its OUTPUT0. */
async function probe(server: ChildServer): Promise<{ bytes: Buffer; streamed?: Buffer; headerLength: string; output: Float32Array }> {
  if (!grpc) {
    const res = await fetch(`http://127.0.0.1:${server.port}/v2/models/${MODEL}/infer`, {
      method: 'POST',
      headers: { 'inference-header-content-length': String(httpHeaders['Inference-Header-Content-Length']) },
      body: request,
    });
    const bytes = Buffer.from(await res.arrayBuffer());
    const headerLength = res.headers.get('inference-header-content-length');
    if (!res.ok || headerLength === null) throw new Error(`inference over HTTP failed: HTTP ${res.status} ${bytes.toString()}`);
    const data = bytes.subarray(Number(headerLength));
    return { bytes, headerLength, output: new Float32Array(data.buffer.slice(data.byteOffset, data.byteOffset + data.byteLength)) };
  }
  // The answer to the request, unary and on a stream (a ModelStreamInferResponse).
  const { unary: bytes, streamed } = await rawGrpcAnswers(`127.0.0.1:${server.ports.grpc}`, request);
  const fromStream = pb.ModelStreamInferResponse.decode(streamed);
  if (fromStream.error_message || !fromStream.infer_response) throw new Error(`ModelStreamInfer failed: ${fromStream.error_message}`);
  const raw = pb.ModelInferResponse.decode(bytes).raw_output_contents[0] ?? new Uint8Array();
  const rawStreamed = fromStream.infer_response.raw_output_contents[0] ?? new Uint8Array();
  if (!Buffer.from(raw).equals(Buffer.from(rawStreamed))) throw new Error('ModelInfer and ModelStreamInfer answer differently');
  return { bytes, streamed, headerLength: '0', output: new Float32Array(Uint8Array.from(raw).buffer) };
}

const batching = await serve(batchingRepo);
const direct = await serve(directRepo);
const unaccounted = await serve(batchingRepo, ['--memory-sample-interval-ms=0']);
const pool = LoadClientPool.fork(join(root, 'dist/bench/grpc-load-client.js'), [requestFile], clients);
let session: ort.InferenceSession | undefined;
let bare: ChildServer | undefined;

const measured = await (async () => {
  try {
    // The served model as the server normalised it; the ceiling gets its instance's thread count
    // (intra_op_thread_count, else `defaultIntraOpThreads` of backends/threads.ts: the cores but
    // one divided among the instances).
    const served = (await getJson(batching, `/v2/models/${MODEL}/config`)) as ServedConfig;
    const unbatched = (await getJson(direct, `/v2/models/${MODEL}/config`)) as ServedConfig;
    if (!served.dynamic_batching || unbatched.dynamic_batching) throw new Error('the two servers do not differ in dynamic_batching as intended');
    const instances = served.instance_group.reduce((n, g) => n + g.count, 0);
    const intraOpThreads = Number(served.parameters?.intra_op_thread_count?.string_value) || defaultIntraOpThreads(availableParallelism(), instances);

    // Both servers answer as ONNX Runtime does on the same row.
    session = await ort.InferenceSession.create(join(example, '1', 'model.onnx'), { intraOpNumThreads: intraOpThreads, interOpNumThreads: 1 });
    const reference = (await session.run({ INPUT0: new ort.Tensor('float32', input, [1, 256]) })).OUTPUT0!.data as Float32Array;
    const responses = [await probe(batching), await probe(direct), await probe(unaccounted)];
    for (const r of responses) {
      if (r.output.length !== 16 || r.output.some((v, i) => Math.abs(v - reference[i]!) > 1e-4)) {
        const show = (a: Float32Array) => `${a.length} values [${[...a.subarray(0, 16)].join(', ')}${a.length > 16 ? ', …' : ''}]`;
        throw new Error(`Nereid's OUTPUT0, ${show(r.output)}, differs from ONNX Runtime's, ${show(reference)}`);
      }
    }
    const response = responses[0]!;
    const responseFile = join(work, 'response.bin');
    await writeFile(responseFile, response.bytes);
    const streamFile = join(work, 'stream-response.bin');
    if (response.streamed) await writeFile(streamFile, response.streamed);
    bare = grpc
      ? await spawnServer([join(root, 'dist/bench/bare-grpc-server.js'), responseFile, streamFile], /port (\d+)/)
      : await spawnServer([join(root, 'dist/bench/bare-http-server.js'), responseFile, response.headerLength], /port (\d+)/);

    // (c): batch 64 in this process.
    const ceilingSession = session;
    const batchFeeds = {
      INPUT0: new ort.Tensor('float32', new Float32Array(CEILING_BATCH * 256).map((_, i) => input[i % 256]!), [CEILING_BATCH, 256]),
    };

    /** `concurrency` calls in flight, spread over the load processes. */
    const load = (server: ChildServer): GrpcLoadOptions[] =>
      Array.from({ length: clients }, (_, i) => {
        const share = Math.floor(concurrency / clients) + (i < concurrency % clients ? 1 : 0);
        return {
          port: server === bare || !grpc ? server.port : server.ports.grpc!,
          transport,
          ...(grpc ? {} : { http: { path: `/v2/models/${MODEL}/infer`, headers: httpHeaders } }),
          mode,
          // unary: `share` calls in flight; stream: `share` streams of one request in flight each.
          inflight: mode === 'stream' ? 1 : share,
          streams: mode === 'stream' ? share : 0,
          expectedLength: mode === 'stream' ? response.streamed!.byteLength : response.bytes.byteLength,
        };
      });
    const window = async (server: ChildServer, windowSeconds: number): Promise<{ result: DistributedLoadResult; batches?: BatchFigures }> => {
      if (server === bare) return { result: await pool.run(load(server), windowSeconds, 0.5, server.process.pid) };
      const before = await batchCounts(server);
      const result = await pool.run(load(server), windowSeconds, 0.5, server.process.pid);
      return { result, batches: batchFigures(before, await batchCounts(server), served.max_batch_size) };
    };

    // Warm-up (JIT of the servers and load processes, ONNX Runtime's arenas), not recorded.
    await runLoad(() => ceilingSession.run(batchFeeds), 1, 1);
    for (const server of [batching, direct, bare, unaccounted]) await window(server, 1);

    // (a) and (e) in adjacent windows: their ratio is taken round by round (the median of the
    // rounds' ratios), so that a machine whose load drifts between rounds moves both alike.
    const targets = ['ceiling', batching, unaccounted, direct, bare] as const;
    const [ceilingRuns, batchingRuns, unaccountedRuns, directRuns, bareRuns] = await alternate(targets, rounds, async (target) =>
      target === 'ceiling'
        ? { ceiling: (await runLoad(() => ceilingSession.run(batchFeeds), 1, seconds)).throughput * CEILING_BATCH }
        : window(target, seconds),
    );
    type Run = { result?: DistributedLoadResult; batches?: BatchFigures; ceiling?: number };
    const loadOf = (runs: Run[]) => medianOf(runs.map((r) => r.result!));
    const batchesOf = (runs: Run[]) => medianOf(runs.map((r) => r.batches!));
    return {
      intraOpThreads,
      ceiling: medianOf((ceilingRuns as Run[]).map((r) => ({ throughput: r.ceiling! }))).throughput,
      batching: loadOf(batchingRuns!),
      direct: loadOf(directRuns!),
      bare: loadOf(bareRuns!),
      unaccounted: loadOf(unaccountedRuns!),
      accountingRatio: median(batchingRuns!.map((r: Run, i) => r.result!.throughput / (unaccountedRuns![i] as Run).result!.throughput)),
      accountingCpuRatio: median(
        batchingRuns!.map((r: Run, i) => r.result!.serverCpuUsPerRequest / (unaccountedRuns![i] as Run).result!.serverCpuUsPerRequest),
      ),
      batchingBatches: batchesOf(batchingRuns!),
      directBatches: batchesOf(directRuns!),
      foreign: [...batchingRuns!, ...directRuns!, ...bareRuns!].map((r: Run) => r.result!.foreignCpuShare),
    };
  } finally {
    await pool.close();
    await session?.release();
    await Promise.all([batching.stop(), direct.stop(), unaccounted.stop(), bare?.stop()]);
    await rm(work, { recursive: true, force: true });
  }
})();
const { batching: b, direct: d, ceiling } = measured;


const figures: Figure[] = [
  compared('batching_throughput', 'infer/s', b.throughput, d.throughput, 'no_batching'),
  compared('batching_vs_ceiling', 'infer/s', b.throughput, ceiling, `ort_inprocess_batch${CEILING_BATCH}_${measured.intraOpThreads}_threads`),
  compared('batching_p50_latency', 'us', b.p50Us, d.p50Us, 'no_batching'),
  compared('batching_p99_latency', 'us', b.p99Us, d.p99Us, 'no_batching'),
  { name: 'no_batching_p50_latency', value: d.p50Us, unit: 'us' },
  { name: 'no_batching_p99_latency', value: d.p99Us, unit: 'us' },
  { name: 'batching_mean_batch_size', value: measured.batchingBatches.mean, unit: 'rows' },
  { name: 'batching_request_median_batch_size', value: measured.batchingBatches.requestMedian, unit: 'rows' },
  { name: 'batching_full_batch_share', value: measured.batchingBatches.fullShare, unit: '' },
  { name: 'no_batching_mean_batch_size', value: measured.directBatches.mean, unit: 'rows' },
  // The ratio is the median of the rounds' ratios (adjacent windows), not the ratio of the medians.
  { ...compared('accounting_on_vs_off', 'infer/s', b.throughput, measured.unaccounted.throughput, 'memory_accounting_off'), ratio: measured.accountingRatio },
  // CPU time per request varies less than throughput on a machine other processes share.
  {
    ...compared('accounting_server_cpu_per_request', 'us', b.serverCpuUsPerRequest, measured.unaccounted.serverCpuUsPerRequest, 'memory_accounting_off'),
    ratio: measured.accountingCpuRatio,
  },
  compared('batching_vs_transport', 'infer/s', b.throughput, measured.bare.throughput, grpc ? 'bare_grpc_js' : 'bare_node_http'),
  compared('batching_server_cpu_per_request', 'us', b.serverCpuUsPerRequest, d.serverCpuUsPerRequest, 'no_batching'),
  { name: 'batching_server_main_thread_per_request', value: b.serverMainThreadCpuUsPerRequest, unit: 'us' },
  { name: 'batching_client_cpu_per_request', value: b.clientCpuUsPerRequest, unit: 'us' },
  { name: 'batching_client_loop_utilization', value: b.maxClientLoopUtilization, unit: '' },
  { name: 'batching_machine_cpu_busy', value: b.machineCpuBusy, unit: '' },
  { name: 'batching_foreign_cpu_share', value: Math.max(...measured.foreign), unit: '' },
];
console.log(
  `# ${grpc ? `gRPC ${mode === 'stream' ? 'ModelStreamInfer, one stream per client' : 'ModelInfer'} (${transport} load client)` : 'HTTP/REST with binary tensor data'}: ${concurrency} closed-loop clients ` +
    `of batch 1 from ${clients} load process${clients === 1 ? '' : 'es'}, ${availableParallelism()} cores`,
);
report(figures, jsonPath);
