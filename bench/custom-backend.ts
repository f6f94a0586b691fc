/**
 * Custom JavaScript backends (docs/backends.md), in-process through the `Server` facade (no
 * network, so the figures are the backend path's own cost), all measured in one run:
 *   (a) an identity custom backend on the main thread, FP32 [1, 16], batch-1 requests;
 *   (b) the same module with `execution_thread: "worker"` (one worker thread per instance);
 *   (c) baseline: ONNX Runtime serving an Identity model of the same shape (its own worker thread);
 * at concurrency 1 (latency) and 16 (throughput), one instance each, no dynamic batching. Then the
 * reason to use workers: event-loop delay (p99, perf_hooks.monitorEventLoopDelay) while 4 clients
 * keep a backend that spins the CPU for 2 ms per execution busy, on a worker thread against the
 * main thread. Each client yields one event-loop turn after each response (for every target alike).
 * Windows alternate between the targets (`--rounds` rounds of `--seconds`) and medians are kept.
 *
 * Usage: node dist/bench/custom-backend.js [--seconds N] [--rounds N] [--json out.json]
 */
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { Server, silentLogger } from '@nereid/server';
import { identityModel } from '@nereid/testkit';
import { alternate, benchArgs, compared, median, medianOf, report, runLoad, type Figure } from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));
const SPIN_MS = 2;

const IO =
  'max_batch_size: 8\n' +
  'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n' +
  'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 16 ] } ]\n' +
  'instance_group [ { kind: KIND_CPU, count: 1 } ]\n';
const WORKER = 'parameters { key: "execution_thread" value { string_value: "worker" } }\n';

/** Identity, after spinning the CPU for `spinMs` per execution. */
function identityModule(spinMs: number): string {
  return `export default {
  spiVersion: 1,
  async createModel() {
    return {
      async createInstance() {
        return {
          async execute(requests) {
            const until = performance.now() + ${spinMs};
            while (performance.now() < until);
            for (const r of requests) {
              const x = r.inputs.get('INPUT0');
              r.respond({ outputs: [{ name: 'OUTPUT0', datatype: 'FP32', shape: x.shape, data: x.data }] });
            }
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
};
`;
}

const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-custom-'));
const models: Record<string, Record<string, string | Uint8Array>> = {
  identity_onnx: { 'config.pbtxt': `name: "identity_onnx"\nplatform: "onnxruntime_onnx"\n${IO}`, '1/model.onnx': identityModel('FP32').onnx.bytes },
  identity_js: { 'config.pbtxt': `name: "identity_js"\nbackend: "identity"\n${IO}`, '1/model.mjs': identityModule(0) },
  identity_js_worker: { 'config.pbtxt': `name: "identity_js_worker"\nbackend: "identity"\n${IO}${WORKER}`, '1/model.mjs': identityModule(0) },
  spin_js: { 'config.pbtxt': `name: "spin_js"\nbackend: "spin"\n${IO}`, '1/model.mjs': identityModule(SPIN_MS) },
  spin_js_worker: { 'config.pbtxt': `name: "spin_js_worker"\nbackend: "spin"\n${IO}${WORKER}`, '1/model.mjs': identityModule(SPIN_MS) },
};
for (const [model, files] of Object.entries(models)) {
  for (const [path, content] of Object.entries(files)) {
    await mkdir(dirname(join(repo, model, path)), { recursive: true });
    await writeFile(join(repo, model, path), content);
  }
}
const server = await Server.start({ modelRepositories: [repo], logger: silentLogger() });
if (server.startReport.failures.length > 0) throw new Error(`models failed to load: ${JSON.stringify(server.startReport.failures)}`);

const input = new Float32Array(16).map((_, i) => i);
/**
 * One request, then a turn of the event loop: a main-thread backend answers through promise
 * jobs alone, so a closed loop of in-process calls would otherwise never let timers run.
 */
const infer = (model: string) => async () => {
  await server.infer({ model, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 16], data: input }] });
  await new Promise<void>((resolve) => setImmediate(resolve));
};

const figures: Figure[] = [];
try {
  const targets = ['identity_onnx', 'identity_js', 'identity_js_worker'];
  for (const concurrency of [1, 16]) {
    const results = await alternate(targets, rounds, (model) => runLoad(infer(model), concurrency, seconds));
    const [onnx, main, worker] = results.map((r) => medianOf(r));
    if (concurrency === 1) {
      figures.push(compared('custom JS backend, main thread, FP32[1,16] latency at concurrency 1', 'µs', main!.meanLatencyUs, onnx!.meanLatencyUs, 'onnxruntime identity'));
      figures.push(compared('custom JS backend, worker thread, FP32[1,16] latency at concurrency 1', 'µs', worker!.meanLatencyUs, onnx!.meanLatencyUs, 'onnxruntime identity'));
    } else {
      figures.push(compared('custom JS backend, main thread, FP32[1,16] throughput at concurrency 16', 'req/s', main!.throughput, onnx!.throughput, 'onnxruntime identity'));
      figures.push(compared('custom JS backend, worker thread, FP32[1,16] throughput at concurrency 16', 'req/s', worker!.throughput, onnx!.throughput, 'onnxruntime identity'));
    }
  }

  const delays = await alternate(['spin_js', 'spin_js_worker'], rounds, async (model) => {
    const histogram = monitorEventLoopDelay({ resolution: 1 });
    histogram.enable();
    await runLoad(infer(model), 4, seconds, 0);
    histogram.disable();
    return histogram.percentile(99) / 1e6;
  });
  const [mainDelay, workerDelay] = delays.map((d) => median(d));
  figures.push(compared(`event-loop delay p99 with a ${SPIN_MS} ms CPU-bound execute, worker thread`, 'ms', workerDelay!, mainDelay!, 'main thread'));
} finally {
  await server.stop();
  await rm(repo, { recursive: true, force: true });
}
report(figures, jsonPath);
