/**
 * `nereid perf` against a stateful model (the sequence accumulator under the direct sequence
 * batcher, one slot): every request carries a correlation id and start/end flags, the server
 * counts exactly what was sent with no failure, and no sequence is left open — with one slot, a
 * sequence left open would hold it until the (long) idle timeout and the closing probe would hang.
 * Also JSON data streams (one per sequence) and the refusals of options that do not fit the model.
 */
import { after, before, describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { HttpClient } from '@nereid/client';
import type { LevelSummary } from '@nereid/perf';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { identityModel, sequenceAccumulatorModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { perf } from '../../helpers/perf.js';
import { modelFiles } from '../../helpers/models.js';


interface Counts {
  success: number;
  fail: number;
}

async function counts(client: HttpClient, model: string): Promise<Counts> {
  const res = await fetch(`${client.url}/v2/models/${model}/stats`);
  const body = (await res.json()) as { model_stats: { inference_stats: { success: { count: number }; fail: { count: number } } }[] };
  const s = body.model_stats[0]!.inference_stats;
  return { success: Number(s.success.count), fail: Number(s.fail.count) };
}

describe('nereid perf with a sequence model', () => {
  let repo: string;
  let running: RunningGrpcServer;
  let client: HttpClient;
  let probeId = 900_000;

  before(async () => {
    const model = sequenceAccumulatorModel({ name: 'seq', maxBatchSize: 1, instances: 1, idleMicroseconds: 600_000_000 });
    repo = await makeRepository({ seq: modelFiles(model), plain: modelFiles(identityModel('INT32', [-1, 1], { name: 'plain' })) });
    running = await startServer({ modelRepositories: [repo], grpc: true });
    client = new HttpClient(`http://127.0.0.1:${running.port}`);
  });

  after(async () => {
    await running?.stop();
    if (repo) await removeDir(repo);
  });

  /** A one-request sequence through the only slot: it completes only if no sequence holds the slot. */
  async function probe(): Promise<void> {
    const id = ++probeId;
    const r = await client.infer({
      model: 'seq',
      inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: new Int32Array([7]) }],
      parameters: { sequence_id: id, sequence_start: true, sequence_end: true },
    });
    assert.deepEqual([...r.typed('OUTPUT')], [7], 'a fresh sequence starts from the zero state');
  }

  for (const protocol of ['http', 'grpc'] as const) {
    it(`sends whole sequences with start/end flags and closes them all (${protocol})`, async () => {
      const url = protocol === 'grpc' ? running.grpcTarget : `127.0.0.1:${running.port}`;
      const before = await counts(client, 'seq');
      const out = await perf([
        '-m', 'seq', '-i', protocol, '-u', url, '--concurrency-range', '3', '--request-count', '40',
        '--sequence-length', '4', '--sequence-length-variation', '0', '--input-data', 'zero', '--json',
      ]);
      assert.equal(out.code, 0, out.stderr);
      const [level] = (JSON.parse(out.stdout) as { levels: LevelSummary[] }).levels;
      assert.equal(level.requestCount, 40);
      const now = await counts(client, 'seq');
      assert.equal(now.fail - before.fail, 0, 'no request was refused for a missing or unknown correlation id');
      const sent = now.success - before.success;
      assert.ok(sent >= 40 && sent <= 43, `40 counted requests plus at most one closing request per slot, got ${sent}`);
      await probe();
    });
  }

  for (const serial of [false, true]) {
    it(`closes the open sequences of a request-rate run${serial ? ' (--serial-sequences)' : ''}`, async () => {
      const before = await counts(client, 'seq');
      const out = await perf([
        '-m', 'seq', '-u', `127.0.0.1:${running.port}`, '--request-rate-range', '200', '--num-of-sequences', '2',
        '--sequence-length', '5', '-p', '200', '-s', '10000', '-r', '3', '--input-data', 'zero', '--json',
        ...(serial ? ['--serial-sequences'] : []),
      ]);
      assert.equal(out.code, 0, out.stderr);
      const [level] = (JSON.parse(out.stdout) as { levels: LevelSummary[] }).levels;
      assert.equal(level.errorCount, 0, out.stderr);
      assert.ok(level.sequenceCount! > 0, 'sequences completed in the measured windows');
      const now = await counts(client, 'seq');
      assert.equal(now.fail - before.fail, 0);
      assert.ok(now.success > before.success);
      await probe();
    });
  }

  it('runs sequences in process too, through the Server facade', async () => {
    const out = await perf([
      '-m', 'seq', '--service-kind', 'in_process', '--model-repository', repo, '--concurrency-range', '1', '--request-count', '20',
      '--sequence-length', '5', '--sequence-length-variation', '0', '--json',
    ]);
    assert.equal(out.code, 0, out.stderr);
    const [level] = (JSON.parse(out.stdout) as { levels: LevelSummary[] }).levels;
    assert.deepEqual([level.requestCount, level.errorCount, level.sequenceCount], [20, 0, 4]);
  });

  it('prints the sequence count and rate', async () => {
    const out = await perf([
      '-m', 'seq', '-u', `127.0.0.1:${running.port}`, '--concurrency-range', '1', '--request-count', '12',
      '--sequence-length', '3', '--sequence-length-variation', '0', '--input-data', 'zero',
    ]);
    assert.equal(out.code, 0, out.stderr);
    assert.match(out.stdout, /^ {4}Sequence count: 4 \([\d.]+ seq\/sec\)$/m);
    await probe();
  });

  it('replays JSON data streams, one per sequence, and takes each stream\'s length', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'nereid-perf-seq-'));
    try {
      const file = join(dir, 'streams.json');
      await writeFile(file, JSON.stringify({ data: [[{ INPUT: [1] }, { INPUT: [2] }, { INPUT: [3] }], [{ INPUT: { content: [5], shape: [1] } }, { INPUT: { b64: Buffer.from(new Int32Array([6]).buffer).toString('base64') } }]] }));
      const before = await counts(client, 'seq');
      const out = await perf(['-m', 'seq', '-u', `127.0.0.1:${running.port}`, '--concurrency-range', '1', '--request-count', '10', '--sequence-length-variation', '0', '--input-data', file, '--json']);
      assert.equal(out.code, 0, out.stderr);
      const [level] = (JSON.parse(out.stdout) as { levels: LevelSummary[] }).levels;
      // Streams of 3 and 2 alternate: 3 + 2 + 3 + 2 = 10 requests, four whole sequences.
      assert.equal(level.sequenceCount, 4);
      const now = await counts(client, 'seq');
      assert.equal(now.success - before.success, 10, 'no closing request was needed');
      await probe();
    } finally {
      await removeDir(dir);
    }
  });

  it('refuses streams for a model without sequence batching, and a batch size above 1 for a sequence model', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'nereid-perf-seq-'));
    try {
      const file = join(dir, 'streams.json');
      await writeFile(file, JSON.stringify({ data: [[{ INPUT0: [1] }]] }));
      const plain = await perf(['-m', 'plain', '-u', `127.0.0.1:${running.port}`, '--input-data', file]);
      assert.equal(plain.code, 99);
      assert.match(plain.stderr, /holds streams .* model 'plain' has no sequence_batching/);
      const batch = await perf(['-m', 'seq', '-u', `127.0.0.1:${running.port}`, '-b', '2']);
      assert.equal(batch.code, 99);
      assert.match(batch.stderr, /model 'seq' is a sequence model, whose requests carry one sample each \(batch size 1\); drop -b 2/);
    } finally {
      await removeDir(dir);
    }
  });

  it('refuses sequence options that do not fit: an id range smaller than the open sequences, sequence flags for another model', async () => {
    const small = await perf(['-m', 'seq', '-u', `127.0.0.1:${running.port}`, '--concurrency-range', '4', '--sequence-id-range', '10:12']);
    assert.equal(small.code, 3);
    assert.match(small.stderr, /--sequence-id-range 10:12 holds 3 correlation ids, fewer than the 4 sequences open at once; widen the range/);
    const other = await perf(['-m', 'plain', '-u', `127.0.0.1:${running.port}`, '--sequence-length', '4']);
    assert.equal(other.code, 3);
    assert.match(other.stderr, /model 'plain' has no sequence_batching, so the sequence options .* do not apply/);
  });

  it('refuses a sequence id range whose end is below its start, exit code 3', async () => {
    const out = await perf(['-m', 'seq', '-u', `127.0.0.1:${running.port}`, '--sequence-id-range', '9:3']);
    assert.equal(out.code, 3);
    assert.match(out.stderr, /--sequence-id-range: the end 3 is below the start 9/);
  });
});

describe('nereid perf --shared-memory cuda', () => {
  it('is refused with the fix, exit code 3', async () => {
    const out = await perf(['-m', 'm', '--shared-memory', 'cuda']);
    assert.equal(out.code, 3);
    assert.match(out.stderr, /--shared-memory cuda needs CUDA devices, and Nereid serves on CPU only; use --shared-memory system or none/);
  });
});
