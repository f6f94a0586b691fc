/**
 * Triton's perf_analyzer (the binary of the pinned tritonclient wheel) against Nereid:
 * concurrency and request-rate modes over HTTP and gRPC, sync and async, gRPC streaming, JSON
 * input-data files with validation data (binary and JSON tensor formats, INT32 and BYTES), a
 * dynamically batching model, and the CSV report. Every run must reach a stable measurement and exit 0, and the server-side block
 * it prints (from our statistics extension) must be consistent with its client-side figures and
 * with the statistics read around the run.
 *
 * The machines are shared and noisy: windows are short, the stability band wide (-s 100: the
 * last three windows within a factor of two) and up to 20 windows allowed. No figure is compared
 * with a fixed time.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { mlpModel, simpleModel, simpleStringModel } from '@nereid/testkit';
import { removeDir } from '../../helpers/harness.js';
import { VENV_BIN, requireEnvironment, runTool, startConformanceServer, type ConformanceServer, type ToolRun } from '../helpers/tier.js';

/** Flags every run gets: short windows, a wide stability band, enough windows to settle. */
const STABILITY = ['--measurement-interval=1000', '--stability-percentage=100', '--max-trials=20'];

interface Figures {
  client: { requests: number; throughput: number; avgLatencyUs: number };
  server: {
    inferences: number;
    executions: number;
    successes: number;
    avgLatencyUs: number;
    parts: { overhead: number; queue: number; computeInput: number; computeInfer: number; computeOutput: number };
  };
}

function number(text: string, pattern: RegExp, what: string): number {
  const m = pattern.exec(text);
  if (m === null) throw new Error(`perf_analyzer printed no ${what} (${pattern})\n${text}`);
  return Number(m[1]);
}

/** The figures of the last load level perf_analyzer printed (spec: perf-and-analyzer.md §1.5). */
function figures(stdout: string): Figures {
  const levels = stdout.split(/\n(?=Request concurrency: \d+\n|Request Rate: [\d.]+ inference requests per seconds)/);
  const last = levels[levels.length - 1]!;
  const breakdown = /Avg request latency: (\d+) usec \(overhead (\d+) usec \+ queue (\d+) usec \+ compute input (\d+) usec \+ compute infer (\d+) usec \+ compute output (\d+) usec\)/.exec(last);
  if (breakdown === null) throw new Error(`no server latency breakdown in\n${last}`);
  const [, total, overhead, queue, computeInput, computeInfer, computeOutput] = breakdown.map(Number);
  return {
    client: {
      requests: number(last, /Client:\s*\n\s*Request count: (\d+)/, 'client request count'),
      throughput: number(last, /Throughput: ([\d.]+) infer\/sec/, 'throughput'),
      avgLatencyUs: number(last, /Avg latency: (\d+) usec/, 'average latency'),
    },
    server: {
      inferences: number(last, /Server:\s*\n\s*Inference count: (\d+)/, 'server inference count'),
      executions: number(last, /Execution count: (\d+)/, 'server execution count'),
      successes: number(last, /Successful request count: (\d+)/, 'server success count'),
      avgLatencyUs: total!,
      parts: { overhead: overhead!, queue: queue!, computeInput: computeInput!, computeInfer: computeInfer!, computeOutput: computeOutput! },
    },
  };
}

/**
 * Checks that the server block agrees with itself and with the client block (requests of
 * `batchSize` rows: that many inferences each; one execution each unless the model batches
 * dynamically).
 */
function assertConsistent(f: Figures, output: string, batching: boolean, batchSize: number): void {
  const { client, server } = f;
  const context = `\n${output}`;
  assert.ok(client.requests > 0 && client.throughput > 0, `no completed requests${context}`);
  assert.equal(server.inferences, server.successes * batchSize, `inference count ≠ ${batchSize} × successful requests${context}`);
  if (batching) assert.ok(server.executions > 0 && server.executions <= server.inferences, `execution count ${server.executions}${context}`);
  else assert.equal(server.executions, server.successes, `execution count ≠ successful requests${context}`);
  // Both count the same windows, the client by completion time, the server by its counters
  // diffed at the window edges: they differ by at most the requests in flight at the edges.
  const slack = Math.max(8, Math.ceil(client.requests * 0.05));
  assert.ok(Math.abs(server.successes - client.requests) <= slack, `server counted ${server.successes}, client ${client.requests}${context}`);
  const p = server.parts;
  const sum = p.overhead + p.queue + p.computeInput + p.computeInfer + p.computeOutput;
  // Each part is rounded to whole microseconds separately.
  assert.ok(Math.abs(sum - server.avgLatencyUs) <= 5, `breakdown sums to ${sum}, total ${server.avgLatencyUs}${context}`);
  assert.ok(p.computeInfer > 0, `compute infer is 0${context}`);
  // Server time is part of the client's time.
  assert.ok(server.avgLatencyUs <= client.avgLatencyUs + 1, `server latency ${server.avgLatencyUs} µs above client latency ${client.avgLatencyUs} µs${context}`);
}

describe('conformance: perf_analyzer', () => {
  let srv: ConformanceServer | undefined;
  let work: string | undefined;
  before(async () => {
    requireEnvironment();
    srv = await startConformanceServer([simpleModel(), simpleStringModel(), mlpModel()], ['--allow-client-shm=true']);
    work = await mkdtemp(join(tmpdir(), 'nereid-pa-'));
  });
  after(async () => {
    await srv?.stop();
    if (work) await removeDir(work);
  });

  /** Successful requests of `model` so far, from the statistics extension. */
  async function successes(model: string): Promise<number> {
    const res = await fetch(`http://${srv!.endpoints.http}/v2/models/${model}/stats`);
    const body = (await res.json()) as { model_stats: { inference_stats: { success: { count: number } } }[] };
    return body.model_stats[0]!.inference_stats.success.count;
  }

  /** Runs perf_analyzer on `model` with `args`; asserts exit 0 and consistency; returns the run. */
  async function perf(model: string, protocol: 'http' | 'grpc', args: readonly string[], batching = false, batchSize = 1): Promise<{ run: ToolRun; figures: Figures }> {
    const before = await successes(model);
    const run = await runTool(join(VENV_BIN, 'perf_analyzer'), ['-m', model, '-i', protocol, '-u', srv!.endpoints[protocol], ...STABILITY, ...args], {
      timeoutMs: 120_000,
      cwd: work,
    });
    const output = `--- stdout ---\n${run.stdout}\n--- stderr ---\n${run.stderr}`;
    assert.equal(run.code, 0, `perf_analyzer exited ${run.code}\n${output}`);
    assert.doesNotMatch(run.stdout, /Failed to obtain stable measurement/, output);
    const f = figures(run.stdout);
    assertConsistent(f, output, batching, batchSize);
    // Everything the run's windows counted happened between these two readings.
    const delta = (await successes(model)) - before;
    assert.ok(delta >= f.server.successes, `statistics grew by ${delta} over the run, perf_analyzer counted ${f.server.successes} in its windows\n${output}`);
    return { run, figures: f };
  }

  it('HTTP, concurrency 1 to 2, sync', async () => {
    const { run } = await perf('simple', 'http', ['--concurrency-range=1:2']);
    assert.match(run.stdout, /Request concurrency: 1\n/);
    assert.match(run.stdout, /Request concurrency: 2\n/);
    assert.match(run.stdout, /Avg HTTP time: \d+ usec \(send\/recv \d+ usec \+ response wait \d+ usec\)/);
  });

  it('gRPC, concurrency 2, async, gzip-compressed, with a custom request parameter', async () => {
    const { run } = await perf('simple', 'grpc', ['--concurrency-range=2', '--async', '--grpc-compression-algorithm=gzip', '--request-parameter=custom:7:int']);
    assert.match(run.stdout, /Using asynchronous calls for inference/);
    assert.match(run.stdout, /Avg gRPC time: \d+ usec \(\(un\)marshal request\/response \d+ usec \+ response wait \d+ usec\)/);
  });

  it('HTTP, batch size 4 (-b 4): four inferences per request', async () => {
    const { run } = await perf('simple', 'http', ['--concurrency-range=1', '-b', '4'], false, 4);
    assert.match(run.stdout, /Batch size: 4\n/);
  });

  it('HTTP, request rate 100/s', async () => {
    const { run, figures: f } = await perf('simple', 'http', ['--request-rate-range=100']);
    assert.match(run.stdout, /Request Rate: 100 inference requests per seconds/);
    // An open-loop schedule: throughput follows the rate (wide band: shared machines).
    assert.ok(f.client.throughput > 50 && f.client.throughput < 150, `throughput ${f.client.throughput} at 100/s`);
  });

  it('gRPC, request rate 100/s, poisson', async () => {
    const { run } = await perf('simple', 'grpc', ['--request-rate-range=100', '--request-distribution=poisson']);
    assert.match(run.stdout, /Request Rate: 100 inference requests per seconds/);
  });

  it('gRPC streaming, concurrency 2', async () => {
    const { run } = await perf('simple', 'grpc', ['--concurrency-range=2', '--streaming']);
    assert.match(run.stdout, /Request concurrency: 2\n/);
  });

  it('HTTP, system shared memory (--shared-memory=system): regions registered, used and unregistered', async () => {
    await perf('simple', 'http', ['--concurrency-range=1', '--shared-memory=system']);
    const res = await fetch(`http://${srv!.endpoints.http}/v2/systemsharedmemory/status`);
    assert.deepEqual(await res.json(), [], 'perf_analyzer unregisters its regions when it ends');
  });

  it('gRPC, system shared memory with output regions, concurrency 2, async', async () => {
    await perf('simple', 'grpc', ['--concurrency-range=2', '--async', '--shared-memory=system', '--output-shared-memory-size=64']);
  });

  it('a dynamically batching model (mlp), concurrency 4, async gRPC: executions no more than inferences', async () => {
    await perf('mlp', 'grpc', ['--concurrency-range=4', '--async'], true);
  });

  it('a JSON input-data file with validation data, sent as JSON tensors over HTTP', async () => {
    const entries = [0, 1, 2].map((seed) => {
      const a = Array.from({ length: 16 }, (_, i) => i * (seed + 1));
      const b = Array.from({ length: 16 }, (_, i) => 100 - i + seed);
      return { data: { INPUT0: a, INPUT1: { content: b, shape: [16] } }, validation: { OUTPUT0: a.map((x, i) => x + b[i]!), OUTPUT1: a.map((x, i) => x - b[i]!) } };
    });
    const file = join(work!, 'simple-data.json');
    await writeFile(file, JSON.stringify({ data: entries.map((e) => e.data), validation_data: entries.map((e) => e.validation) }));
    await perf('simple', 'http', ['--concurrency-range=1', `--input-data=${file}`, '--input-tensor-format=json', '--output-tensor-format=json']);
  });

  it('a JSON input-data file of strings (BYTES) with validation data, over gRPC', async () => {
    const entries = [3, 7].map((seed) => {
      const a = Array.from({ length: 16 }, (_, i) => i + seed);
      const b = Array.from({ length: 16 }, (_, i) => 2 * i - seed);
      return {
        data: { INPUT0: a.map(String), INPUT1: b.map(String) },
        validation: { OUTPUT0: a.map((x, i) => String(x + b[i]!)), OUTPUT1: a.map((x, i) => String(x - b[i]!)) },
      };
    });
    const file = join(work!, 'strings.json');
    await writeFile(file, JSON.stringify({ data: entries.map((e) => e.data), validation_data: entries.map((e) => e.validation) }));
    await perf('simple_string', 'grpc', ['--concurrency-range=1', `--input-data=${file}`]);
  });

  it('validation data that the outputs do not match makes perf_analyzer fail (the check is real)', async () => {
    const a = Array.from({ length: 16 }, (_, i) => i);
    const file = join(work!, 'wrong.json');
    await writeFile(file, JSON.stringify({ data: [{ INPUT0: a, INPUT1: a }], validation_data: [{ OUTPUT0: a, OUTPUT1: a }] }));
    const run = await runTool(join(VENV_BIN, 'perf_analyzer'), ['-m', 'simple', '-u', srv!.endpoints.http, ...STABILITY, `--input-data=${file}`], { timeoutMs: 120_000, cwd: work });
    assert.notEqual(run.code, 0, run.stdout);
    assert.match(run.stdout + run.stderr, /Output doesn't match expected output/);
  });

  it('the CSV report (-f) carries the server-side columns', async () => {
    const csv = join(work!, 'report.csv');
    await perf('simple', 'grpc', ['--concurrency-range=1', '-f', csv]);
    const [header, row] = (await readFile(csv, 'utf8')).trim().split('\n');
    assert.equal(
      header,
      'Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p99 latency',
    );
    const cells = row!.split(',').map(Number);
    assert.equal(cells[0], 1);
    assert.ok(cells[1]! > 0 && cells[6]! > 0, row);
  });
});
