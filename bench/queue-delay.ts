/**
 * Queue time of a lone request under `max_queue_delay_microseconds`: with one request in flight
 * at a time (concurrency 1) no batch ever fills, so every request waits out the whole delay, and
 * its queue time (the model's statistics, `inference_stats.queue`) is the delay as the server
 * honours it. Measured in process (the `Server` facade, no transport) on the testkit's `simple`
 * model (max_batch_size 8, one instance) for 100, 200, 500 and 1000 µs; the baseline is the
 * configured delay, so a ratio near 1 means the delay is kept. Also prints the CPU time the
 * process used per request, to show the wait does not spin.
 *
 * Usage: node dist/bench/queue-delay.js [--requests N] [--json out.json]
 */
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server, silentLogger, type InferRequest } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { compared, report, type Figure } from './lib.js';

const argv = process.argv.slice(2);
const arg = (name: string) => {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
};
const requests = Number(arg('--requests') ?? 1000);
const delaysUs = [0, 100, 200, 500, 1000];

const model = simpleModel();
const root = await mkdtemp(join(tmpdir(), 'nereid-queue-delay-'));
try {
  for (const d of delaysUs) {
    const dir = join(root, `simple_${d}`);
    await mkdir(join(dir, '1'), { recursive: true });
    const config = model.config!.replace(/name: "simple"/, `name: "simple_${d}"`) + `\ndynamic_batching { max_queue_delay_microseconds: ${d} }\ninstance_group [{ kind: KIND_CPU, count: 1 }]\n`;
    await writeFile(join(dir, 'config.pbtxt'), config);
    await writeFile(join(dir, '1', 'model.onnx'), model.onnx.bytes);
  }
  const server = new Server({ modelRepositories: [root], logger: silentLogger() });
  await server.load();
  const a = new Int32Array(16).fill(1);
  const figures: Figure[] = [];
  for (const d of delaysUs) {
    const name = `simple_${d}`;
    const request: InferRequest = { model: name, inputs: [{ name: 'INPUT0', datatype: 'INT32' as const, shape: [1, 16], data: a }, { name: 'INPUT1', datatype: 'INT32' as const, shape: [1, 16], data: a }] };
    for (let i = 0; i < 50; i++) await server.infer(request);
    const before = server.modelStatistics(name)[0]!.inference_stats.queue;
    const cpu = process.cpuUsage();
    const start = process.hrtime.bigint();
    for (let i = 0; i < requests; i++) await server.infer(request);
    const wall = Number(process.hrtime.bigint() - start) / 1e3 / requests;
    const used = process.cpuUsage(cpu);
    const after = server.modelStatistics(name)[0]!.inference_stats.queue;
    const queueUs = (Number(after.ns) - Number(before.ns)) / (Number(after.count) - Number(before.count)) / 1e3;
    figures.push(d === 0 ? { name: 'queue-time-0us', value: queueUs, unit: 'µs' } : compared(`queue-time-${d}us`, 'µs', queueUs, d, 'configured delay'));
    figures.push({ name: `cpu-per-request-${d}us`, value: (used.user + used.system) / requests, unit: 'µs' });
    figures.push({ name: `latency-${d}us`, value: wall, unit: 'µs' });
  }
  await server.stop();
  report(figures, arg('--json'));
} finally {
  await rm(root, { recursive: true, force: true });
}
