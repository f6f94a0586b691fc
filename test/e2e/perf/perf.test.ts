/**
 * `nereid perf` (perf-and-analyzer.md §1) against a real Nereid server on ephemeral ports: the
 * measurement loop, the counts, the server-side breakdown, the CSV columns, request-rate mode,
 * the transports, and perf_analyzer's exit codes for bad input.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createServer, type AddressInfo } from 'node:net';
import { createServer as createHttpServer, request as httpRequest } from 'node:http';
import { join } from 'node:path';
import { identityModel, simpleModel } from '@nereid/testkit';
import type { LevelSummary } from '@nereid/perf';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { levels, perf } from '../../helpers/perf.js';
import { modelFiles } from '../../helpers/models.js';
import { NereidProcess, stopAllNereid } from '../../helpers/cli.js';

/** A port nothing listens on: one the OS just handed out and took back. */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as AddressInfo).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}




/** Windows short, band wide: these tests check mechanics, not this shared machine's steadiness. */
const QUICK = ['-p', '150', '-s', '10000', '-r', '6'];

describe('nereid perf', () => {
  let repo: string;
  let running: RunningGrpcServer;
  let http: string;
  let grpc: string;
  let tmp: string;

  before(async () => {
    repo = await makeRepository({
      simple: modelFiles(simpleModel()),
      simple_stats: modelFiles(simpleModel({ name: 'simple_stats' })),
      simple_counts: modelFiles(simpleModel({ name: 'simple_counts' })),
      identity_fp32: modelFiles(identityModel('FP32', [-1, -1])),
    });
    running = await startServer({ modelRepositories: [repo], grpc: true });
    http = `127.0.0.1:${running.port}`;
    grpc = running.grpcTarget;
    tmp = await mkdtemp(join(tmpdir(), 'nereid-perf-'));
  });

  after(async () => {
    await stopAllNereid();
    await running?.stop();
    await removeDir(repo);
    await removeDir(tmp);
  });

  it('ends its stability loop with a stable result and prints perf_analyzer’s blocks', async () => {
    const out = await perf(['-m', 'simple', '-u', http, '--concurrency-range', '1:2', ...QUICK]);
    assert.equal(out.code, 0, out.stderr);
    for (const line of [
      '*** Measurement Settings ***',
      'Request concurrency: 1',
      'Request concurrency: 2',
      '    Throughput: ',
      '    p99 latency: ',
      '    Avg HTTP time: ',
      '  Server: ',
      '    Avg request latency: ',
      'Inferences/Second vs. Client Average Batch Latency',
      'Concurrency: 2, throughput: ',
    ]) {
      assert.ok(out.stdout.includes(line), `missing '${line}' in\n${out.stdout}`);
    }
  });

  it('gives up after --max-trials windows when the band cannot be met, exit code 2', async () => {
    // A 0 % band needs three windows of identical throughput and latency, which never happens.
    const out = await perf(['-m', 'simple', '-u', http, '-p', '100', '-s', '0', '-r', '3']);
    assert.equal(out.code, 2, out.stdout + out.stderr);
    assert.match(out.stderr, /Failed to obtain stable measurement within 3 measurement windows for concurrency 1/);
  });

  it('counts add up: sent = received + errors, and the server saw every request', async () => {
    const out = await perf(['-m', 'simple_counts', '-u', http, '--concurrency-range', '3', '--request-count', '60', '--json']);
    const [level] = levels(out);
    assert.equal(level.sentCount, 60);
    assert.equal(level.requestCount + level.errorCount, level.sentCount);
    assert.equal(level.errorCount, 0);
    assert.equal(level.server?.successCount, 60);
    assert.equal(level.server?.inferenceCount, 60);
    // The client's own time and the wait make up the latency.
    assert.ok(level.clientSendUs > 0 && level.clientRecvUs > 0);
    assert.ok(Math.abs(level.clientSendUs + level.clientRecvUs + level.responseWaitUs - level.avgLatencyUs) < 1e-6);
  });

  it('reports the server-side breakdown the statistics extension gives', async () => {
    const out = await perf(['-m', 'simple_stats', '-u', http, '-b', '2', '--request-count', '30', '--json']);
    const [level] = levels(out);
    // simple_stats served nothing else, so the window's differences are the cumulative figures.
    const res = await fetch(`http://${http}/v2/models/simple_stats/stats`);
    const stats = ((await res.json()) as { model_stats: { inference_count: number; execution_count: number; inference_stats: Record<string, { count: number; ns: number }> }[] }).model_stats[0];
    const avg = (k: string) => stats.inference_stats[k].ns / stats.inference_stats[k].count / 1000;
    const server = level.server!;
    assert.equal(server.successCount, stats.inference_stats.success.count);
    assert.equal(server.inferenceCount, stats.inference_count);
    assert.equal(server.inferenceCount, 60, 'batch 2 × 30 requests');
    assert.equal(server.executionCount, stats.execution_count);
    assert.ok(Math.abs(server.avgRequestUs - avg('success')) < 1e-6);
    assert.ok(Math.abs(server.queueUs - avg('queue')) < 1e-6);
    assert.ok(Math.abs(server.computeInputUs - avg('compute_input')) < 1e-6);
    assert.ok(Math.abs(server.computeInferUs - avg('compute_infer')) < 1e-6);
    assert.ok(Math.abs(server.computeOutputUs - avg('compute_output')) < 1e-6);
    const overhead = avg('success') - avg('queue') - avg('compute_input') - avg('compute_infer') - avg('compute_output');
    assert.ok(Math.abs(server.overheadUs - Math.max(0, overhead)) < 1e-6);
    assert.equal(level.throughput > 0, true);
  });

  it('writes the CSV with perf_analyzer’s columns, --percentile inserted in order, rows by throughput', async () => {
    const csv = join(tmp, 'out.csv');
    const out = await perf(['-m', 'simple', '-u', http, '--concurrency-range', '1:2', '--percentile', '97', '-f', csv, ...QUICK]);
    assert.equal(out.code, 0, out.stderr);
    const [header, ...rows] = (await readFile(csv, 'utf8')).trimEnd().split('\n');
    assert.equal(
      header,
      'Concurrency,Inferences/Second,Client Send,Network+Server Send/Recv,Server Queue,Server Compute Input,Server Compute Infer,' +
        'Server Compute Output,Client Recv,p50 latency,p90 latency,p95 latency,p97 latency,p99 latency',
    );
    assert.equal(rows.length, 2);
    const throughputs = rows.map((r) => Number(r.split(',')[1]));
    assert.ok(throughputs[0] <= throughputs[1], `rows sorted by throughput: ${throughputs.join(', ')}`);
    for (const r of rows) assert.equal(r.split(',').length, 14);
    assert.match(out.stdout, /Inferences\/Second vs\. Client p97 Batch Latency/);
    assert.doesNotMatch(out.stdout, /Avg latency:/, 'with --percentile perf_analyzer prints no average');
  });

  it('holds a constant request rate within tolerance (separate process)', async () => {
    const p = new NereidProcess(['perf', '-m', 'simple', '-u', http, '--request-rate-range', '40', '-p', '1000', '-s', '10000', '--json']);
    const exit = await p.waitForExit();
    assert.equal(exit.code, 0, p.output);
    const [level] = (JSON.parse(p.stdout) as { levels: LevelSummary[] }).levels;
    assert.equal(level.mode, 'request_rate');
    assert.ok(Math.abs(level.sendRate - 40) / 40 < 0.15, `send rate ${level.sendRate} for 40/s`);
    assert.ok(Math.abs(level.throughput - 40) / 40 < 0.25, `throughput ${level.throughput} for 40/s`);
  });

  it('replays --request-intervals and draws Poisson gaps with the requested mean', async () => {
    const file = join(tmp, 'intervals.txt');
    await writeFile(file, '10000\n30000\n');
    const custom = levels(await perf(['-m', 'simple', '-u', http, '--request-intervals', file, '-p', '600', '-s', '10000', '--json']))[0];
    // Gaps of 10 ms and 30 ms in turn: 50 requests per second.
    assert.ok(Math.abs(custom.sendRate - 50) / 50 < 0.2, `send rate ${custom.sendRate} for 50/s`);
    const poisson = levels(
      await perf(['-m', 'simple', '-u', http, '--request-rate-range', '60', '--request-distribution', 'poisson', '-p', '1000', '-s', '10000', '--json']),
    )[0];
    assert.ok(Math.abs(poisson.sendRate - 60) / 60 < 0.35, `send rate ${poisson.sendRate} for 60/s`);
  });

  it('stops the sweep at the latency threshold; --binary-search measures the ends first', async () => {
    // A 1 µs threshold: the first level already exceeds it.
    const open = levels(await perf(['-m', 'simple', '-u', http, '--concurrency-range', '1:0:1', '-l', '0.001', ...QUICK, '--json']));
    assert.deepEqual(open.map((l) => l.value), [1]);
    const low = levels(await perf(['-m', 'simple', '-u', http, '--concurrency-range', '1:4', '--binary-search', '-l', '0.001', ...QUICK, '--json']));
    assert.deepEqual(low.map((l) => l.value), [1], 'start breaks the threshold: done');
    const high = levels(await perf(['-m', 'simple', '-u', http, '--concurrency-range', '1:4', '--binary-search', '-l', '100000', ...QUICK, '--json']));
    assert.deepEqual(high.map((l) => l.value), [1, 4], 'end meets the threshold: done');
  });

  it('measures over gRPC, unary and streaming, compressed or not, with JSON input data', async () => {
    const file = join(tmp, 'data.json');
    const row = Array.from({ length: 16 }, (_, i) => i);
    await writeFile(file, JSON.stringify({ data: [{ INPUT0: row, INPUT1: { content: row, shape: [16] } }, { INPUT0: row, INPUT1: row }] }));
    for (const extra of [[], ['--streaming'], ['--grpc-compression-algorithm', 'gzip'], ['--streaming', '--grpc-compression-algorithm', 'deflate']]) {
      const [level] = levels(await perf(['-m', 'simple', '-i', 'grpc', '-u', grpc, ...extra, '--input-data', file, '--concurrency-range', '2', '--request-count', '20', '--json']));
      assert.equal(level.requestCount, 20, `gRPC ${extra.join(' ')}`);
      assert.equal(level.errorCount, 0);
    }
  });

  it('sends -H headers with every HTTP call, inference included, and asks for uncompressed answers', async () => {
    // A forwarder in front of the server records what each call carried.
    const seen: { method: string; url: string; tag: unknown; encoding: unknown }[] = [];
    const target = Number(http.split(':')[1]);
    const forwarder = createHttpServer((req, res) => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', tag: req.headers['x-perf-tag'], encoding: req.headers['accept-encoding'] });
      const upstream = httpRequest({ host: '127.0.0.1', port: target, path: req.url, method: req.method, headers: req.headers }, (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers);
        answer.pipe(res);
      });
      req.pipe(upstream);
    });
    await new Promise<void>((resolve) => forwarder.listen(0, '127.0.0.1', resolve));
    try {
      const via = `127.0.0.1:${(forwarder.address() as AddressInfo).port}`;
      const [level] = levels(await perf(['-m', 'simple', '-u', via, '-H', 'x-perf-tag: run-7', '--request-count', '12', '--json']));
      assert.equal(level.requestCount, 12);
      assert.equal(level.errorCount, 0);
      const infers = seen.filter((r) => r.url === '/v2/models/simple/infer');
      assert.ok(infers.length >= 12, `${infers.length} inference requests seen`);
      assert.ok(seen.some((r) => r.method === 'GET' && r.url.endsWith('/stats')), 'statistics read');
      for (const r of seen) {
        assert.equal(r.tag, 'run-7', `${r.method} ${r.url} carried -H`);
        assert.equal(r.encoding, 'identity', `${r.method} ${r.url}`);
      }
    } finally {
      forwarder.closeAllConnections();
      await new Promise((resolve) => forwarder.close(resolve));
    }
  });

  it('sends --shape for variable dimensions, and -b batches', async () => {
    const [level] = levels(await perf(['-m', 'identity_fp32', '-u', http, '--shape', 'INPUT0:3', '-b', '4', '--request-count', '10', '--json']));
    assert.equal(level.requestCount, 10);
    assert.equal(level.server?.inferenceCount, 40);
  });

  it('spreads the load over --workers processes and still counts every request', async () => {
    const counted = levels(await perf(['-m', 'simple_counts', '-u', http, '--workers', '2', '--concurrency-range', '3', '--request-count', '41', '--json']))[0];
    assert.equal(counted.sentCount, 41);
    assert.equal(counted.requestCount + counted.errorCount, 41);
    assert.equal(counted.server?.successCount, 41);
    const windows = levels(await perf(['-m', 'simple', '-u', http, '--workers', '2', '--concurrency-range', '2', ...QUICK, '--json']))[0];
    assert.ok(windows.requestCount > 0 && windows.throughput > 0);
    const rate = levels(await perf(['-m', 'simple', '-u', http, '--workers', '2', '--request-rate-range', '40', '-p', '1000', '-s', '10000', '--json']))[0];
    assert.ok(Math.abs(rate.sendRate - 40) / 40 < 0.2, `send rate ${rate.sendRate} for 40/s over two workers`);
  });

  it('measures the Server facade in process, with no network', async () => {
    const [level] = levels(await perf(['-m', 'simple', '--service-kind', 'in_process', '--model-repository', repo, '--request-count', '20', '--json']));
    assert.equal(level.requestCount, 20);
    assert.equal(level.server?.successCount, 20);
  });

  describe('bad input: a clear message and perf_analyzer’s exit code', () => {
    it('unknown model → 99, naming it', async () => {
      const out = await perf(['-m', 'nosuch', '-u', http]);
      assert.equal(out.code, 99);
      assert.match(out.stderr, /^error: model 'nosuch' is not available on the server/);
    });

    it('unreachable server → 99', async () => {
      const port = await freePort();
      const out = await perf(['-m', 'simple', '-u', `127.0.0.1:${port}`]);
      assert.equal(out.code, 99);
      assert.match(out.stderr, new RegExp(`^error: cannot reach the server at http://127\\.0\\.0\\.1:${port} \\(ECONNREFUSED\\)`));
      const viaGrpc = await perf(['-m', 'simple', '-i', 'grpc', '-u', `127.0.0.1:${port}`]);
      assert.equal(viaGrpc.code, 99);
      assert.match(viaGrpc.stderr, /^error: cannot reach the server at 127\.0\.0\.1:\d+ .*ECONNREFUSED/);
    });

    it('a variable dimension without --shape → 99, naming the input and the fix', async () => {
      const out = await perf(['-m', 'identity_fp32', '-u', http]);
      assert.equal(out.code, 99);
      assert.match(out.stderr, /input 'INPUT0' of model 'identity_fp32' has a variable dimension.*--shape INPUT0:1/);
    });

    it('an input file that does not match the model → 99, naming entry and input', async () => {
      const file = join(tmp, 'bad.json');
      await writeFile(file, JSON.stringify({ data: [{ INPUT0: [1, 2, 3], INPUT1: [1, 2, 3] }] }));
      const out = await perf(['-m', 'simple', '-u', http, '--input-data', file]);
      assert.equal(out.code, 99);
      assert.match(out.stderr, /input 'INPUT0' in entry 0 of .*bad\.json has 3 elements; shape \[16\] needs 16/);
      await writeFile(file, JSON.stringify({ data: [{ INPUT0: [1], WRONG: [1] }] }));
      const wrong = await perf(['-m', 'simple', '-u', http, '--input-data', file]);
      assert.match(wrong.stderr, /names 'WRONG', which is not an input of model 'simple'/);
    });

    it('option errors → 3, through the nereid command', async () => {
      for (const args of [['-m', 'simple', '--bogus'], ['--concurrency-range', '1:2'], ['-m', 'simple', '--concurrency-range', '4:2'], ['-m', 'simple', '--shared-memory', 'cuda']]) {
        const p = new NereidProcess(['perf', ...args]);
        const exit = await p.waitForExit();
        assert.equal(exit.code, 3, `${args.join(' ')}\n${p.output}`);
        assert.match(p.stderr, /^error: /);
        assert.doesNotMatch(p.stderr, /\n\s+at /, 'no stack trace');
      }
    });
  });
});
