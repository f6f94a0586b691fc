/**
 * `nereid perf` against a decoupled model (a JavaScript backend that answers each element of its
 * input with one response): measured over gRPC streams with every response counted until the
 * final one, and refused with a clear message over HTTP.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtemp, readFile, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { LevelSummary } from '@nereid/perf';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { perf } from '../../helpers/perf.js';
import { DecoupledBackend, repeatConfig } from '../streaming/decoupled-backend.js';


describe('nereid perf with a decoupled model', () => {
  let repo: string;
  let tmp: string;
  let running: RunningGrpcServer;

  before(async () => {
    repo = await makeRepository({ repeat: { 'config.pbtxt': repeatConfig('repeat'), '1/.keep': '' } });
    running = await startServer({ modelRepositories: [repo], grpc: true, backends: [new DecoupledBackend().backend] });
    tmp = await mkdtemp(join(tmpdir(), 'nereid-perf-'));
  });

  after(async () => {
    await running?.stop();
    await removeDir(repo);
    await removeDir(tmp);
  });

  it('counts every response of a request over gRPC streaming', async () => {
    const data = join(tmp, 'repeat.json');
    await writeFile(data, JSON.stringify({ data: [{ IN: { content: [4, 5, 6], shape: [3] } }] }));
    const csv = join(tmp, 'repeat.csv');
    const args = ['-m', 'repeat', '-i', 'grpc', '--streaming', '-u', running.grpcTarget, '--input-data', data, '--concurrency-range', '2'];
    const json = await perf([...args, '--request-count', '30', '--json']);
    assert.equal(json.code, 0, json.stderr);
    const [level] = (JSON.parse(json.stdout) as { levels: LevelSummary[] }).levels;
    assert.equal(level.requestCount, 30);
    const seconds = level.requestCount / level.throughput;
    assert.ok(Math.abs(level.responseThroughput * seconds - 90) < 1e-6, 'three responses per request');

    const text = await perf([...args, '-p', '150', '-s', '10000', '-f', csv]);
    assert.equal(text.code, 0, text.stderr);
    assert.match(text.stdout, /Detected decoupled model/);
    assert.match(text.stdout, /Response Throughput: [\d.]+ infer\/sec/);
    const header = (await readFile(csv, 'utf8')).split('\n')[0];
    assert.ok(header.startsWith('Concurrency,Inferences/Second,Response Throughput,Client Send,'), header);
  });

  it('is refused over HTTP with the fix, exit code 3', async () => {
    const out = await perf(['-m', 'repeat', '-u', `127.0.0.1:${running.port}`, '--shape', 'IN:3']);
    assert.equal(out.code, 3);
    assert.match(out.stderr, /model 'repeat' is decoupled .*-i grpc --streaming/);
  });
});
