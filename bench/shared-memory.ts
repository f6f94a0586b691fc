/**
 * A 16 MiB FP32 identity inference (input [1, 4194304], the same 16 MiB back) against one
 * `nereid serve --allow-client-shm=true` child process, measured in one run through:
 *   - HTTP binary data (pre-built request body, keep-alive connection, response drained; the
 *     benchmarks' lean HTTP client, bench/lean-http.ts);
 *   - gRPC `ModelInfer` (GrpcClient, raw input contents);
 *   - system shared memory over HTTP (the same HTTP client, a pre-built JSON request) and over
 *     gRPC: the input is read from a registered region, the output written into another (regions
 *     created and filled once, as perf_analyzer does; the request and response carry no tensor
 *     bytes).
 * Each transport runs in alternating windows (`--rounds`, default 3), medians kept; closed loop at
 * concurrency `--concurrency` (default 1). Throughput is tensor bytes in plus out per second.
 * Figures: shared memory against HTTP binary (target ≥ 3×), against gRPC, and HTTP binary against
 * gRPC; `shm_http_binary_gbps` is HTTP binary's own figure (target ≥ 1 GB/s), and
 * `shm_http_binary_vs_bare_http_16mib` sets it against a bare `node:http` server that reads the
 * same 16 MiB body and answers Nereid's 16 MiB response bytes (bench/bare-http-server.ts), same
 * client, same windows: what HTTP itself moves on this machine, no model, no Nereid.
 * `shm_region_read_16mib` is what a copy of 16 MiB out of a region costs: through a mapping (the
 * native addon's guarded copy; the server itself no longer copies inputs out of mapped regions,
 * its models read them in place, docs/protocol.md) against the positioned read the server falls
 * back to without the addon.
 *
 * Usage: node dist/bench/shared-memory.js [--seconds N] [--rounds N] [--concurrency N] [--json out.json]
 */
import { randomUUID } from 'node:crypto';
import { closeSync, openSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GrpcClient, HttpClient, SystemSharedMemoryRegion, type ClientInferOptions } from '@nereid/client';
import { fileBytes } from '@nereid/server';
import { identityModel, writeModelToRepository } from '@nereid/testkit';
import { alternate, benchArgs, compared, httpPoster, median, medianOf, nereidServeCommand, report, runLoad, spawnServer, type ChildServer, type Figure, type LoadResult } from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));
const concurrency = Math.floor(args.number('concurrency', 1));

const ELEMENTS = 4 * 1024 * 1024;
const BYTES = ELEMENTS * 4;
const MODEL = 'identity_fp32';

const root = fileURLToPath(new URL('../..', import.meta.url));
const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-'));
await writeModelToRepository(repo, identityModel('FP32', [-1, -1]));

const server = await spawnServer(
  [
    ...nereidServeCommand(),
    `--model-repository=${repo}`,
    '--http-port=0',
    '--http-address=127.0.0.1',
    '--grpc-port=0',
    '--grpc-address=127.0.0.1',
    '--allow-metrics=false',
    '--allow-client-shm=true',
  ],
  /Started HTTPService at [^\s]+:(\d+)/,
  { grpc: /Started GRPCInferenceService at [^\s]+:(\d+)/ },
);

const input = new Float32Array(ELEMENTS).map((_, i) => i % 1000);
const http = new HttpClient(`http://127.0.0.1:${server.port}`);
const grpc = new GrpcClient(`127.0.0.1:${server.ports.grpc}`);
const regions: SystemSharedMemoryRegion[] = [];

let bare: ChildServer | undefined;
try {
  // HTTP binary: the body as Triton's clients send it, built once.
  const header = Buffer.from(
    JSON.stringify({
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, ELEMENTS], parameters: { binary_data_size: BYTES } }],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
    }),
  );
  const body = Buffer.concat([header, Buffer.from(input.buffer)]);
  const poster = httpPoster(server.port, `/v2/models/${MODEL}/infer`, body, { 'Inference-Header-Content-Length': header.byteLength }, concurrency);
  const length = await poster.post();
  if (length < BYTES) throw new Error(`HTTP binary response of ${length} bytes, expected at least ${BYTES}`);

  // The bare node:http server answers Nereid's own response bytes to the same request.
  const answer = await fetch(`http://127.0.0.1:${server.port}/v2/models/${MODEL}/infer`, {
    method: 'POST',
    headers: { 'Inference-Header-Content-Length': String(header.byteLength) },
    body,
  });
  const answerFile = join(repo, 'http-response.bin');
  await writeFile(answerFile, Buffer.from(await answer.arrayBuffer()));
  bare = await spawnServer([join(root, 'dist/bench/bare-http-server.js'), answerFile, answer.headers.get('inference-header-content-length')!], /port (\d+)/);
  const barePoster = httpPoster(bare.port, `/v2/models/${MODEL}/infer`, body, { 'Inference-Header-Content-Length': header.byteLength }, concurrency);

  const plain: ClientInferOptions = { model: MODEL, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, ELEMENTS], data: input }] };

  // One input and one output region per concurrent caller. Over HTTP the request's JSON goes
  // through the same client as HTTP binary (a prebuilt body per region pair).
  const shmRequests: ClientInferOptions[] = [];
  const shmPosters: ReturnType<typeof httpPoster>[] = [];
  for (let c = 0; c < concurrency; c++) {
    const id = randomUUID();
    const inRegion = SystemSharedMemoryRegion.create(`/nereid_bench_in_${id}`, BYTES);
    const outRegion = SystemSharedMemoryRegion.create(`/nereid_bench_out_${id}`, BYTES);
    regions.push(inRegion, outRegion);
    inRegion.write(input);
    await http.registerSystemSharedMemory(`in_${id}`, inRegion.key, BYTES);
    await http.registerSystemSharedMemory(`out_${id}`, outRegion.key, BYTES);
    const shmBody = Buffer.from(
      JSON.stringify({
        inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, ELEMENTS], parameters: { shared_memory_region: `in_${id}`, shared_memory_byte_size: BYTES } }],
        outputs: [{ name: 'OUTPUT0', parameters: { shared_memory_region: `out_${id}`, shared_memory_byte_size: BYTES } }],
      }),
    );
    shmPosters.push(httpPoster(server.port, `/v2/models/${MODEL}/infer`, shmBody, { 'Content-Type': 'application/json' }, concurrency));
    shmRequests.push({
      model: MODEL,
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, ELEMENTS], sharedMemory: { region: `in_${id}`, byteSize: BYTES } }],
      outputs: [{ name: 'OUTPUT0', sharedMemory: { region: `out_${id}`, byteSize: BYTES } }],
    });
  }

  // Each transport must give the identity back before it is timed.
  const check = (got: Float32Array, what: string) => {
    if (got.length !== ELEMENTS || got[999] !== input[999] || got[ELEMENTS - 1] !== input[ELEMENTS - 1]) throw new Error(`${what}: wrong output`);
  };
  check((await grpc.infer(plain)).typed('OUTPUT0') as Float32Array, 'gRPC');
  await shmPosters[0]!.post();
  check(regions[1]!.read('FP32', [ELEMENTS]) as Float32Array, 'shared memory (HTTP)');
  regions[1]!.write(new Float32Array(ELEMENTS));
  await grpc.infer(shmRequests[0]!);
  check(regions[1]!.read('FP32', [ELEMENTS]) as Float32Array, 'shared memory (gRPC)');

  let next = 0;
  const slot = () => next++ % shmRequests.length;
  const transports: [string, () => Promise<unknown>][] = [
    ['http_binary', () => poster.post()],
    ['grpc', () => grpc.infer(plain)],
    ['shm_http', () => shmPosters[slot()]!.post()],
    ['shm_grpc', () => grpc.infer(shmRequests[slot()]!)],
    ['bare_http', () => barePoster.post()],
  ];
  const results = await alternate(transports, rounds, ([, op]) => runLoad(op, concurrency, seconds, 0.5));
  poster.close();
  barePoster.close();
  for (const p of shmPosters) p.close();
  const med = results.map((r) => medianOf<LoadResult>(r));
  const gbps = (i: number) => (med[i]!.throughput * 2 * BYTES) / 1e9;
  const [httpBinary, viaGrpc, shmHttp, shmGrpc, bareHttp] = [0, 1, 2, 3, 4].map(gbps) as [number, number, number, number, number];
  // A copy out of a region: through a mapping into a reused buffer, against the positioned read
  // the server uses without the native addon (with it, models read mapped regions in place).
  const readFd = openSync(`/dev/shm/${regions[0]!.key.slice(1)}`, 'r+');
  const mapped = fileBytes(readFd, BYTES, { writable: true });
  const positioned = fileBytes(readFd, BYTES, { writable: true, map: false });
  if (!mapped.mapped) throw new Error('the native addon is not built: run `npm run build` with a C compiler installed');
  const timeMs = (op: () => void, n = 20): number => {
    const times: number[] = [];
    for (let i = 0; i < n; i++) {
      const t0 = performance.now();
      op();
      times.push(performance.now() - t0);
    }
    return median(times);
  };
  const target = Buffer.alloc(BYTES);
  const mappedMs = timeMs(() => mapped.read(0, target));
  const positionedMs = timeMs(() => positioned.read(0, target));
  mapped.close();
  positioned.close();
  closeSync(readFd);
  const figures: Figure[] = [
    compared('shm_region_read_16mib', 'ms', mappedMs, positionedMs, 'positioned_read'),
    compared('shm_http_vs_http_binary_16mib', 'GB/s', shmHttp, httpBinary, 'http_binary'),
    compared('shm_grpc_vs_grpc_16mib', 'GB/s', shmGrpc, viaGrpc, 'grpc'),
    compared('shm_http_binary_gbps', 'GB/s', httpBinary, viaGrpc, 'grpc'),
    compared('shm_http_binary_vs_bare_http_16mib', 'GB/s', httpBinary, bareHttp, 'bare_node_http'),
    ...transports.map(([name], i) => ({ name: `shm_bench_${name}_p50_latency`, value: med[i]!.p50Us / 1000, unit: 'ms' })),
  ];
  report(figures, jsonPath);
} finally {
  grpc.close();
  for (const r of regions) r.destroy();
  await server.stop();
  await bare?.stop();
  await rm(repo, { recursive: true, force: true });
}
