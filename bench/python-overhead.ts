/**
 * What the Python backend adds over ONNX Runtime, through the same `Server` facade, in one run:
 *   (a) per-request latency of an empty Python model (identity on 16 FP32, `model.py`) against an
 *       ONNX Runtime identity model of the same shape, concurrency 1; the difference of the mean
 *       latencies is the Python backend's added cost per request (target: under 0.2 ms; the
 *       difference of the medians is reported too), and the CPU time both
 *       spend per request (this process's threads plus the Python stubs; latency on a shared
 *       machine is mostly waiting for a core, CPU time is what the backend costs);
 *   (b) 4 MiB FP32 round trips per second through the Python identity model against ONNX
 *       Runtime's, and the bytes moved per second (4 MiB in + 4 MiB out per round trip;
 *       target: at least 2 GB/s). The caller gives each response's outputs back
 *       (`Server.recycleOutputs`) as the HTTP frontend does once it has written them out; the
 *       same loads with the outputs dropped instead (each response then costs a fresh buffer)
 *       are reported as well;
 *   (c) one sample of the memory accounting (docs/resources.md: a read of /proc per stub, here
 *       two), against the default sample interval: the share of one core the samples take.
 * Targets alternate in windows, three rounds, medians kept (the machine is shared and noisy).
 * Skips, saying why, when /usr/bin/python3 cannot import numpy.
 *
 * Usage: node dist/bench/python-overhead.js [--seconds N] [--json out.json]
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server, silentLogger, type InferRequest } from '@nereid/server';
import { identityModel, writeModelToRepository } from '@nereid/testkit';
import { alternate, benchArgs, compared, cpuTimeUs, medianOf, report, runLoad, type Figure } from './lib.js';

const { seconds, jsonPath } = benchArgs();

try {
  execFileSync('/usr/bin/python3', ['-c', 'import numpy'], { stdio: 'ignore' });
} catch {
  console.log('python-overhead: skipped, /usr/bin/python3 cannot import numpy (install python3-numpy)');
  process.exit(0);
}

const BIG = 1 << 20; // FP32 elements: 4 MiB

const EMPTY_PY = `
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
`;

function pythonConfig(name: string, dims: number): string {
  return `name: "${name}"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ ${dims} ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ ${dims} ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
}

const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-python-'));
for (const [name, dims] of [
  ['py_small', 16],
  ['py_big', BIG],
] as const) {
  await mkdir(join(repo, name, '1'), { recursive: true });
  await writeFile(join(repo, name, 'config.pbtxt'), pythonConfig(name, dims));
  await writeFile(join(repo, name, '1', 'model.py'), EMPTY_PY);
}
// ONNX Runtime baselines with one instance, as the Python models have.
const onnxInstances = 'instance_group [ { kind: KIND_CPU count: 1 } ]\n';
const ortSmall = identityModel('FP32', [-1, 16], { name: 'ort_small' });
const ortBig = identityModel('FP32', [-1, BIG], { name: 'ort_big' });
await writeModelToRepository(repo, ortSmall, { config: ortSmall.config + onnxInstances });
await writeModelToRepository(repo, ortBig, { config: ortBig.config + onnxInstances });

const server = new Server({ modelRepositories: [repo], logger: silentLogger() });
await server.load();
if (server.startReport.failures.length > 0) throw new Error(`models failed to load: ${JSON.stringify(server.startReport.failures)}`);

const small = new Float32Array(16).map((_, i) => i);
const big = new Float32Array(BIG).map((_, i) => i % 251);
const request = (model: string, data: Float32Array): InferRequest => ({
  model,
  inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, data.length], data }],
});

/** Pids of this process's Python stubs (children running nereid_stub). */
function stubPids(): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const ppid = readFileSync(`/proc/${entry}/stat`, 'utf8').split(') ')[1]!.split(' ')[1];
      if (ppid === String(process.pid) && readFileSync(`/proc/${entry}/cmdline`, 'utf8').includes('nereid_stub')) pids.push(Number(entry));
    } catch {
      // gone
    }
  }
  return pids;
}

/** CPU time (µs) of this process (all threads) and of every stub, so far. */
function cpuNow(): number {
  let total = cpuTimeUs(process.pid)?.total ?? 0;
  for (const pid of stubPids()) total += cpuTimeUs(pid)?.total ?? 0;
  return total;
}

const [pySmall, ortSmallRuns] = await alternate(['py_small', 'ort_small'], 3, async (model) => {
  const cpu0 = cpuNow();
  const result = await runLoad(() => server.infer(request(model, small)), 1, seconds, 0);
  return { ...result, cpuUsPerRequest: (cpuNow() - cpu0) / Math.max(1, result.completed) };
});
// Outputs go back to the server once read (`recycleOutputs`), as the HTTP frontend gives them
// back once written out; the same loads that drop them instead are measured too.
const recycling = async (model: string) => server.recycleOutputs(await server.infer(request(model, big)));
const [pyBig, ortBigRuns] = await alternate(['py_big', 'ort_big'], 3, (model) => runLoad(() => recycling(model), 1, seconds));
const [pyBigDropped, ortBigDropped] = await alternate(['py_big', 'ort_big'], 3, (model) => runLoad(() => server.infer(request(model, big)), 1, seconds));
// (c): the accounting's timer does this once per interval; timed over many calls.
const SAMPLES = 2000;
const sampleStart = process.hrtime.bigint();
for (let i = 0; i < SAMPLES; i++) server.memory.sample();
const sampleUs = Number(process.hrtime.bigint() - sampleStart) / 1e3 / SAMPLES;
await server.stop();
await rm(repo, { recursive: true, force: true });

const ps = medianOf(pySmall!);
const os = medianOf(ortSmallRuns!);
const pb = medianOf(pyBig!);
const ob = medianOf(ortBigRuns!);
const pd = medianOf(pyBigDropped!);
const od = medianOf(ortBigDropped!);
const bytesPerTrip = 2 * BIG * 4;
const figures: Figure[] = [
  compared('python empty model latency (16 FP32)', 'us', ps.meanLatencyUs, os.meanLatencyUs, 'onnxruntime identity'),
  { name: 'python added latency per request (16 FP32)', value: ps.meanLatencyUs - os.meanLatencyUs, unit: 'us' },
  // The target is on the means above; the medians show the typical request without the stalls a
  // shared machine adds to a few of them.
  { name: 'python added latency per request, p50 (16 FP32)', value: ps.p50Us - os.p50Us, unit: 'us' },
  compared('python CPU per request, server and stub (16 FP32)', 'us', ps.cpuUsPerRequest, os.cpuUsPerRequest, 'onnxruntime identity'),
  compared('python 4 MiB round trips', '/s', pb.throughput, ob.throughput, 'onnxruntime identity'),
  compared('python 4 MiB tensor bandwidth (in + out)', 'GB/s', (pb.throughput * bytesPerTrip) / 1e9, (ob.throughput * bytesPerTrip) / 1e9, 'onnxruntime identity'),
  compared('memory accounting sample (2 Python stubs)', 'us', sampleUs, server.memory.sampleIntervalMs * 1e3, 'sample interval'),
  compared('python 4 MiB tensor bandwidth, outputs not recycled', 'GB/s', (pd.throughput * bytesPerTrip) / 1e9, (od.throughput * bytesPerTrip) / 1e9, 'onnxruntime identity'),
];
report(figures, jsonPath);
