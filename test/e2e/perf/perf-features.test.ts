/**
 * `nereid perf` against a real server: system shared memory (regions registered, used and
 * removed; refused by a server that does not allow them), an ensemble's composing-model
 * breakdown (console, JSON, per-member CSV), input data from a directory and perf_analyzer's JSON
 * forms, and `--collect-metrics` against the server's metrics endpoint.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, readFile, readdir, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HttpClient } from '@nereid/client';
import { MetricsFrontend } from '@nereid/server';
import { identityModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { levels, perf } from '../../helpers/perf.js';
import { modelFiles } from '../../helpers/models.js';




const step = (model: string, from: string, to: string) =>
  `{ model_name: "${model}" model_version: -1 input_map { key: "INPUT0" value: "${from}" } output_map { key: "OUTPUT0" value: "${to}" } }`;

function ensemble(name: string, steps: string[]): Record<string, string> {
  return {
    'config.pbtxt': `name: "${name}"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]
ensemble_scheduling { step [ ${steps.join(', ')} ] }
`,
    '1/.keep': '',
  };
}

const COUNTED = ['--concurrency-range', '2', '--request-count', '30'];

describe('nereid perf: shared memory, ensembles, input data, metrics', () => {
  let repo: string;
  let running: RunningGrpcServer;
  let metrics: MetricsFrontend;
  let metricsPort: number;
  let http: string;
  let tmp: string;

  before(async () => {
    repo = await makeRepository({
      ident: modelFiles(identityModel('FP32', [-1, 4], { name: 'ident' })),
      ident_a: modelFiles(identityModel('FP32', [-1, 4], { name: 'ident_a' })),
      ident_b: modelFiles(identityModel('FP32', [-1, 4], { name: 'ident_b' })),
      words: modelFiles(identityModel('BYTES', [-1, 2], { name: 'words' })),
      pipe: ensemble('pipe', [step('ident_a', 'X', 'T'), step('ident_b', 'T', 'Y')]),
      outer: ensemble('outer', [step('pipe', 'X', 'U').replace(/INPUT0/, 'X').replace(/OUTPUT0/, 'Y'), step('ident', 'U', 'Y')]),
    });
    running = await startServer({ modelRepositories: [repo], grpc: true, allowClientShm: true });
    http = `127.0.0.1:${running.port}`;
    metrics = new MetricsFrontend(running.server, { address: '127.0.0.1', port: 0 });
    metricsPort = await metrics.listen();
    tmp = await mkdtemp(join(tmpdir(), 'nereid-perf-features-'));
  });

  after(async () => {
    const closing = metrics?.close();
    metrics?.closeAllConnections();
    await closing;
    await running?.stop();
    await removeDir(repo);
    await removeDir(tmp);
  });

  async function perfShmObjects(): Promise<string[]> {
    return (await readdir('/dev/shm')).filter((f) => f.startsWith(`nereid_perf_${process.pid}_`));
  }

  for (const protocol of ['http', 'grpc', 'grpc-streaming'] as const) {
    it(`--shared-memory system passes every tensor through registered regions, then removes them (${protocol})`, async () => {
      const url = protocol === 'http' ? http : running.grpcTarget;
      const extra = protocol === 'http' ? [] : protocol === 'grpc' ? ['-i', 'grpc'] : ['-i', 'grpc', '--streaming'];
      const client = new HttpClient(running.url);
      const statsBefore = (await client.modelStatistics('ident')).model_stats[0]!;
      const running_ = perf(['-m', 'ident', '-u', url, ...extra, '-b', '2', '--concurrency-range', '2', '--request-count', '300', '--shared-memory', 'system', '--json']);
      let settled = false;
      void running_.finally(() => (settled = true));
      let seen: { name: string; key: string; byte_size: number }[] = [];
      while (!settled && seen.length < 2) {
        seen = (await client.systemSharedMemoryStatus()) as typeof seen;
        await new Promise((r) => setTimeout(r, 2));
      }
      const out = await running_;
      const [level] = levels(out);
      // Inputs: one object with each distinct input (one request of 2 × 4 FP32); outputs: 2 × 4 FP32.
      assert.deepEqual(
        seen.map((r) => [r.name.replace(/^nereid_perf_\d+_[0-9a-f]+_/, ''), r.byte_size]).sort(),
        [['input', 32], ['output', 32]],
        'both regions were registered while the requests ran',
      );
      assert.equal(level.requestCount, 300);
      assert.equal(level.errorCount, 0);
      const statsAfter = (await client.modelStatistics('ident')).model_stats[0]!;
      assert.equal(Number(statsAfter.inference_count) - Number(statsBefore.inference_count), 600, 'batch 2 × 300 requests were executed');
      assert.deepEqual(await client.systemSharedMemoryStatus(), [], 'both regions were unregistered');
      assert.deepEqual(await perfShmObjects(), [], 'both /dev/shm objects were removed');
    });
  }

  it('--shared-memory system against a server that does not allow client regions: exit 99, the fix named, nothing left behind', async () => {
    const strict = await startServer({ modelRepositories: [repo] });
    try {
      const out = await perf(['-m', 'ident', '-u', `127.0.0.1:${strict.port}`, ...COUNTED, '--shared-memory', 'system']);
      assert.equal(out.code, 99);
      assert.match(out.stderr, /^error: --shared-memory system: cannot set up the regions for model 'ident' \(.+\); .*--allow-client-shm=true/m);
      assert.deepEqual(await perfShmObjects(), []);
    } finally {
      await strict.stop();
    }
  });

  it('breaks an ensemble down by composing model, nested ensembles included (console, JSON, CSV per member)', async () => {
    const console = await perf(['-m', 'outer', '-u', http, ...COUNTED]);
    assert.equal(console.code, 0, console.stderr);
    const text = console.stdout;
    assert.match(text, /^ {4}Avg request latency: \d+ usec \(overhead \d+ usec \+ queue \d+ usec \+ compute \d+ usec\)$/m);
    assert.match(text, /^ {2}Composing models: \n {2}pipe, version: 1\n {6}Inference count: 30\n/m);
    assert.match(text, /^ {4}Composing models: \n {4}ident_a, version: 1\n {8}Inference count: 30\n {8}Execution count: \d+\n {8}Successful request count: 30\n {8}Avg request latency: \d+ usec \(overhead \d+ usec \+ queue \d+ usec \+ compute input \d+ usec \+ compute infer \d+ usec \+ compute output \d+ usec\)/m);
    assert.match(text, /^ {4}ident_b, version: 1\n/m);
    assert.match(text, /^ {2}ident, version: 1\n {6}Inference count: 30\n/m);

    const csv = join(tmp, 'outer.csv');
    const [level] = levels(await perf(['-m', 'outer', '-u', http, ...COUNTED, '--json', '-f', csv]));
    const server = level.server!;
    assert.deepEqual(server.composing?.map((c) => c.model), ['pipe', 'ident']);
    const pipe = server.composing![0]!;
    assert.deepEqual(pipe.composing?.map((c) => [c.model, c.version, c.successCount]), [['ident_a', '1', 30], ['ident_b', '1', 30]]);
    const sumCompute = (b: typeof server) => b.computeInputUs + b.computeInferUs + b.computeOutputUs;
    assert.ok(Math.abs(sumCompute(server) - (sumCompute(pipe) + sumCompute(server.composing![1]!))) < 1, 'the ensemble compute is the sum of its members');
    const files = (await readdir(tmp)).filter((f) => f.endsWith('outer.csv')).sort();
    assert.deepEqual(files, ['ident_a_v1.outer.csv', 'ident_b_v1.outer.csv', 'ident_v1.outer.csv', 'outer.csv', 'pipe_v1.outer.csv']);
    const member = (await readFile(join(tmp, 'ident_a_v1.outer.csv'), 'utf8')).trim().split('\n');
    assert.equal(member[0], 'Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,Server Compute Output,Client Recv');
    assert.match(member[1]!, /^2,[\d.]+,0,\d+,\d+,\d+,\d+,\d+,0$/);
  });

  it('reads a data directory (raw binary per input; BYTES one element per line) and refuses a file of the wrong size', async () => {
    const dir = join(tmp, 'data-ident');
    await mkdir(dir);
    await writeFile(join(dir, 'INPUT0'), Buffer.from(new Float32Array([1, 2, 3, 4]).buffer));
    const [level] = levels(await perf(['-m', 'ident', '-u', http, ...COUNTED, '--input-data', dir, '--json']));
    assert.equal(level.errorCount, 0);

    const words = join(tmp, 'data-words');
    await mkdir(words);
    await writeFile(join(words, 'INPUT0'), 'first\nsecond\n');
    assert.equal(levels(await perf(['-m', 'words', '-u', http, ...COUNTED, '--input-data', words, '--json']))[0]!.errorCount, 0);

    await writeFile(join(dir, 'INPUT0'), Buffer.alloc(12));
    const short = await perf(['-m', 'ident', '-u', http, ...COUNTED, '--input-data', dir]);
    assert.equal(short.code, 99);
    assert.match(short.stderr, /input 'INPUT0' \(file .*INPUT0\) holds 12 bytes; FP32 shape \[4\] needs 16/);

    const empty = join(tmp, 'data-empty');
    await mkdir(empty);
    const missing = await perf(['-m', 'ident', '-u', http, ...COUNTED, '--input-data', empty]);
    assert.equal(missing.code, 99);
    assert.match(missing.stderr, /--input-data .*data-empty: no readable file 'INPUT0' for input 'INPUT0' of model 'ident' \(ENOENT\)/);
  });

  it('reads perf_analyzer\'s JSON forms: plain arrays, {content, shape} and {b64}', async () => {
    const file = join(tmp, 'forms.json');
    const b64 = Buffer.from(new Float32Array([5, 6, 7, 8]).buffer).toString('base64');
    await writeFile(file, JSON.stringify({ data: [{ INPUT0: [1, 2, 3, 4] }, { INPUT0: { content: [[1, 2], [3, 4]], shape: [4] } }, { INPUT0: { b64 } }] }));
    assert.equal(levels(await perf(['-m', 'ident', '-u', http, ...COUNTED, '--input-data', file, '--json']))[0]!.errorCount, 0);
    await writeFile(file, JSON.stringify({ data: [{ INPUT0: { b64: Buffer.alloc(8).toString('base64') } }] }));
    const bad = await perf(['-m', 'ident', '-u', http, ...COUNTED, '--input-data', file]);
    assert.equal(bad.code, 99);
    assert.match(bad.stderr, /"b64" of input 'INPUT0' in entry 0 of .* holds 8 bytes; FP32 shape \[4\] needs 16/);
  });

  it('--collect-metrics scrapes the metrics endpoint in each window: perf_analyzer\'s block and warnings, CPU figures, CSV columns, JSON', async () => {
    const url = `127.0.0.1:${metricsPort}/metrics`;
    const console = await perf(['-m', 'ident', '-u', http, '--concurrency-range', '2', '-p', '300', '-s', '10000', '-r', '4', '--collect-metrics', '--metrics-url', url, '--metrics-interval', '50']);
    assert.equal(console.code, 0, console.stderr);
    for (const family of ['nv_gpu_utilization', 'nv_gpu_power_usage', 'nv_gpu_memory_used_bytes', 'nv_gpu_memory_total_bytes']) {
      assert.equal(console.stderr.split(`WARNING: Unable to parse '${family}' metric.\n`).length, 2, `one warning for ${family}`);
    }
    assert.match(console.stdout, /^ {2}Server Prometheus Metrics: \n {4}Avg GPU Utilization:\n {4}Avg GPU Power Usage:\n {4}Max GPU Memory Usage:\n {4}Total GPU Memory:\n/m);
    assert.match(console.stdout, /^ {4}Avg CPU Utilization: [\d.]+%$/m);
    assert.match(console.stdout, /^ {4}Avg pending requests: [\d.]+ \(max \d+\)$/m);

    const csv = join(tmp, 'metrics.csv');
    const [level] = levels(await perf(['-m', 'ident', '-u', http, ...COUNTED, '--collect-metrics', '--metrics-url', url, '--metrics-interval', '20', '--json', '-f', csv, '--verbose-csv']));
    assert.ok(level.metrics!.samples > 0, 'the counted run was scraped');
    assert.ok(level.metrics!.cpuUtilization !== undefined && level.metrics!.cpuUtilization >= 0 && level.metrics!.cpuUtilization <= 1);
    assert.deepEqual(level.metrics!.gpuUtilization, {});
    const [header, row] = (await readFile(csv, 'utf8')).trim().split('\n');
    assert.ok(header!.endsWith(',Avg GPU Utilization,Avg GPU Power Usage,Max GPU Memory Usage,Total GPU Memory'), header);
    assert.ok(row!.endsWith(',,,,'), 'no GPU: empty cells');
  });

  it('--collect-metrics with an endpoint that does not answer: exit 99 naming the URL and the fix', async () => {
    const out = await perf(['-m', 'ident', '-u', http, ...COUNTED, '--collect-metrics', '--metrics-url', `127.0.0.1:${running.port}/nothing-here`]);
    assert.equal(out.code, 99);
    assert.match(out.stderr, /--collect-metrics: http:\/\/127\.0\.0\.1:\d+\/nothing-here answered HTTP 40\d; give the server's metrics address with --metrics-url HOST:PORT\/metrics/);
  });
});
