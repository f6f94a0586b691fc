/**
 * Decoupled models over gRPC ModelStreamInfer (protocol.md §4.7, models-and-scheduling.md §8.1):
 * many responses per request with `triton_final_response`, the empty final response only on
 * opt-in, interleaving of many requests on one stream, in-band errors mid-stream, cancellation
 * reaching the backend, the response timeout of a model that never finishes a request,
 * preserve_ordering, unary ModelInfer refused, and response_stats.
 */
import assert from 'node:assert/strict';
import { status, type Client } from '@grpc/grpc-js';
import { after, before, describe, it } from 'node:test';
import type { pb } from '@nereid/protocol';
import { simpleModel } from '@nereid/testkit';
import {
  collectStream,
  inferenceClient,
  inferRequest,
  inputTensor,
  int32s,
  nextResponses,
  openStream,
  rawBytes,
  simpleRequest,
  unaryError,
  assertSimpleResponse,
} from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { DecoupledBackend, repeatConfig } from './decoupled-backend.js';

const RESPONSE_TIMEOUT_MS = 300;

let repo: string;
let srv: RunningGrpcServer;
let client: Client;
let backend: DecoupledBackend;

before(async () => {
  backend = new DecoupledBackend();
  const dir = (config: string) => ({ 'config.pbtxt': config, '1/.keep': '' });
  repo = await makeRepository({
    repeat: dir(repeatConfig('repeat')),
    repeat_stats: dir(repeatConfig('repeat_stats')),
    repeat_ordered: dir(repeatConfig('repeat_ordered', { maxBatchSize: 4, extra: 'dynamic_batching { preserve_ordering: true }' })),
    repeat_unordered: dir(repeatConfig('repeat_unordered', { maxBatchSize: 4, extra: 'dynamic_batching { }' })),
    simple: modelFiles(simpleModel()),
  });
  srv = await startServer({
    modelRepositories: [repo],
    grpc: true,
    backends: [backend.backend],
  });
  assert.deepEqual(srv.server.startReport.failures, []);
  client = inferenceClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

function repeatRequest(
  id: string,
  values: readonly number[],
  params: Record<string, pb.InferParameter> = {},
  model = 'repeat',
  batched = false,
): pb.ModelInferRequest {
  return inferRequest({
    model_name: model,
    id,
    inputs: [inputTensor('IN', 'INT32', batched ? [1, values.length] : [values.length])],
    raw_input_contents: [rawBytes(Int32Array.from(values))],
    parameters: params,
  });
}

const str = (v: string): pb.InferParameter => ({ string_param: v });
const int = (v: number): pb.InferParameter => ({ int64_param: BigInt(v) });
const EMPTY_FINAL: Record<string, pb.InferParameter> = { triton_enable_empty_final_response: { bool_param: true } };

/** What a stream message says: id, final flag, OUT and IDX values, or its error. */
interface Seen {
  id: string;
  final: boolean | undefined;
  out: number[];
  idx: number[];
  error: string;
}

function seen(m: pb.ModelStreamInferResponse): Seen {
  const r = m.infer_response!;
  const named = (name: string) => {
    const i = r.outputs.findIndex((o) => o.name === name);
    return i === -1 ? [] : int32s(r.raw_output_contents[i]!);
  };
  return { id: r.id, final: r.parameters['triton_final_response']?.bool_param, out: named('OUT'), idx: named('IDX'), error: m.error_message };
}

describe('decoupled models over ModelStreamInfer', () => {
  it('sends one response per element, final flag on the last, in order; model and concrete version', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.write(repeatRequest('r1', [10, 20, 30], { delay_ms: int(5) }));
    stream.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    assert.deepEqual(result.responses.map(seen), [
      { id: 'r1', final: false, out: [10], idx: [0], error: '' },
      { id: 'r1', final: false, out: [20], idx: [1], error: '' },
      { id: 'r1', final: true, out: [30], idx: [2], error: '' },
    ]);
    for (const m of result.responses) {
      assert.equal(m.infer_response!.model_name, 'repeat');
      assert.equal(m.infer_response!.model_version, '1');
      assert.deepEqual(m.infer_response!.outputs.map((o) => [o.name, o.datatype, o.shape]), [
        ['OUT', 'INT32', [1n]],
        ['IDX', 'INT32', [1n]],
      ]);
    }
  });

  it('a flags-only final response is sent only to a request that opted in, with the request fields copied', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.write(repeatRequest('quiet', [1, 2], { mode: str('empty_final') }));
    await backend.whenFinished('quiet');
    stream.write({ ...repeatRequest('opted', [3], { mode: str('empty_final'), ...EMPTY_FINAL }), model_version: '' });
    stream.write(repeatRequest('zero', [], EMPTY_FINAL));
    stream.write(repeatRequest('zero-quiet', []));
    stream.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    const byId = (id: string) => result.responses.filter((m) => m.infer_response!.id === id);
    assert.deepEqual(byId('quiet').map(seen), [
      { id: 'quiet', final: false, out: [1], idx: [0], error: '' },
      { id: 'quiet', final: false, out: [2], idx: [1], error: '' },
    ]);
    assert.deepEqual(byId('opted').map(seen), [
      { id: 'opted', final: false, out: [3], idx: [0], error: '' },
      { id: 'opted', final: true, out: [], idx: [], error: '' },
    ]);
    const empty = byId('opted')[1]!.infer_response!;
    assert.equal(empty.model_name, 'repeat');
    assert.equal(empty.model_version, '', 'the empty final response copies the request version, empty here');
    assert.deepEqual(empty.raw_output_contents, []);
    assert.deepEqual(byId('zero').map(seen), [{ id: 'zero', final: true, out: [], idx: [], error: '' }]);
    assert.deepEqual(byId('zero-quiet'), []);
  });

  it('many requests on one stream interleave; each gets its responses in order and exactly one final', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    const n = 40;
    for (let i = 0; i < n; i++) {
      stream.write(repeatRequest(`m${i}`, [i, i + 1000, i + 2000], { delay_ms: int(1 + (i % 4)) }));
    }
    stream.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    const all = result.responses.map(seen);
    assert.equal(all.length, 3 * n);
    for (let i = 0; i < n; i++) {
      const mine = all.filter((s) => s.id === `m${i}`);
      assert.deepEqual(mine.map((s) => [s.out[0], s.idx[0], s.final]), [
        [i, 0, false],
        [i + 1000, 1, false],
        [i + 2000, 2, true],
      ]);
    }
    // Written as produced: the first responses of the requests come before the last ones.
    const firstFinal = all.findIndex((s) => s.final);
    const lastFirst = all.map((s) => s.idx[0]).lastIndexOf(0);
    assert.ok(lastFirst > firstFinal, 'responses of different requests interleave');
  });

  it('a decoupled request among non-decoupled ones: its responses are not held behind them', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.write(repeatRequest('held', [5], { mode: str('hold') }));
    const simple = simpleRequest(1, 3, { id: 'simple-1' });
    stream.write(simple.request);
    const first = await nextResponses(stream, 1);
    assert.equal(first[0]!.infer_response!.id, 'simple-1');
    assertSimpleResponse(first[0]!.infer_response, simple);
    assert.equal(first[0]!.infer_response!.parameters['triton_final_response']?.bool_param, true);
    await backend.release('held');
    stream.end();
    const result = await done;
    assert.deepEqual(result.responses.map(seen).filter((s) => s.id === 'held'), [{ id: 'held', final: true, out: [5], idx: [0], error: '' }]);
  });

  it('an error mid-stream is in-band after the responses before it; the stream goes on', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.write(repeatRequest('bad', [7, 8], { mode: str('error') }));
    await backend.whenFinished('bad');
    stream.write(repeatRequest('good', [9]));
    stream.end();
    const result = await done;
    assert.equal(result.status.code, status.OK);
    const all = result.responses.map(seen);
    assert.deepEqual(all.slice(0, 2), [
      { id: 'bad', final: false, out: [7], idx: [0], error: '' },
      { id: 'bad', final: false, out: [8], idx: [1], error: '' },
    ]);
    assert.equal(all[2]!.id, 'bad');
    assert.match(all[2]!.error, /decoupled_test failed request 'bad' on purpose after 2 responses/);
    assert.equal(result.responses[2]!.infer_response!.model_name, 'repeat', 'an error after the request was issued names the model');
    assert.deepEqual(all.slice(3), [{ id: 'good', final: true, out: [9], idx: [0], error: '' }]);
  });

  it('a model that never sends the final flag: the request fails with the response timeout, the stream goes on', async () => {
    // A server of its own: elsewhere requests wait on the test (mode "hold") for as long as it takes.
    const quick = await startServer({
      modelRepositories: [repo],
      grpc: true,
      backends: [new DecoupledBackend().backend],
      decoupledResponseTimeoutMs: RESPONSE_TIMEOUT_MS,
    });
    const quickClient = inferenceClient(quick.grpcTarget);
    try {
      const stream = openStream(quickClient);
      const done = collectStream(stream);
      stream.write(repeatRequest('forever', [1], { mode: str('no_final') }));
      const [data, timeout] = (await nextResponses(stream, 2)).map(seen);
      assert.deepEqual(data, { id: 'forever', final: false, out: [1], idx: [0], error: '' });
      assert.equal(timeout!.id, 'forever');
      assert.match(timeout!.error, /model 'repeat' sent no response for request 'forever' in 300 ms and has not sent its final response/);
      assert.match(timeout!.error, /--decoupled-response-timeout-secs/);
      stream.write(repeatRequest('after', [2]));
      stream.end();
      const result = await done;
      assert.equal(result.status.code, status.OK);
      assert.deepEqual(result.responses.map(seen).slice(2), [{ id: 'after', final: true, out: [2], idx: [0], error: '' }]);
      const [stats] = quick.server.modelStatistics('repeat');
      assert.equal(stats!.inference_stats.fail.count, 1);
      assert.equal(stats!.inference_stats.success.count, 1);
    } finally {
      quickClient.close();
      await quick.stop();
    }
  });

  it('cancelling the stream aborts the signal the backend holds', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.write(repeatRequest('cancel-me', [4], { mode: str('wait_cancel') }));
    const [first] = await nextResponses(stream, 1);
    assert.deepEqual(seen(first!), { id: 'cancel-me', final: false, out: [4], idx: [0], error: '' });
    assert.ok(!backend.cancelled.includes('cancel-me'));
    stream.cancel();
    const result = await done;
    assert.equal(result.status.code, status.CANCELLED);
    await backend.whenFinished('cancel-me');
    assert.ok(backend.cancelled.includes('cancel-me'));
  });

  it('preserve_ordering: a later request\'s responses wait until the earlier request is final', async () => {
    for (const [model, ordered] of [
      ['repeat_ordered', true],
      ['repeat_unordered', false],
    ] as const) {
      const stream = openStream(client);
      const done = collectStream(stream);
      stream.write(repeatRequest(`${model}-a`, [1, 2], { mode: str('hold') }, model, true));
      stream.write(repeatRequest(`${model}-b`, [3, 4], {}, model, true));
      await backend.whenFinished(`${model}-b`);
      await backend.release(`${model}-a`);
      stream.end();
      const result = await done;
      const ids = result.responses.map((m) => m.infer_response!.id);
      assert.deepEqual(
        ids,
        ordered ? [`${model}-a`, `${model}-a`, `${model}-b`, `${model}-b`] : [`${model}-b`, `${model}-b`, `${model}-a`, `${model}-a`],
        model,
      );
      assert.deepEqual(result.responses.map((m) => seen(m).final), [false, true, false, true]);
    }
  });

  it('unary ModelInfer refuses a decoupled model with UNIMPLEMENTED', async () => {
    const err = await unaryError(client, 'ModelInfer', repeatRequest('unary', [1]));
    assert.equal(err.code, status.UNIMPLEMENTED);
    assert.match(err.details, /ModelInfer RPC doesn't support models with decoupled transaction policy/);
  });

  it('response_stats are keyed by response index; success and fail count requests', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    for (const m of [
      repeatRequest('s1', [1, 2, 3], {}, 'repeat_stats'),
      repeatRequest('s2', [4], { mode: str('empty_final') }, 'repeat_stats'),
      repeatRequest('s3', [5, 6], { mode: str('error') }, 'repeat_stats'),
    ]) {
      stream.write(m);
    }
    stream.end();
    await done;
    const [stats] = srv.server.modelStatistics('repeat_stats');
    assert.ok(stats);
    assert.equal(stats.inference_stats.success.count, 2);
    assert.equal(stats.inference_stats.fail.count, 1);
    assert.equal(stats.execution_count, 3);
    const r = stats.response_stats;
    assert.deepEqual(Object.keys(r), ['0', '1', '2']);
    // Index 0: three data responses. Index 1: s1's data, s2's empty final, s3's data.
    // Index 2: s1's data and s3's error.
    assert.equal(r['0']!.success.count, 3);
    assert.equal(r['0']!.compute_output.count, 3);
    assert.equal(r['1']!.success.count, 2);
    assert.equal(r['1']!.empty_response.count, 1);
    assert.equal(r['2']!.success.count, 1);
    assert.equal(r['2']!.fail.count, 1);
    assert.equal(r['2']!.compute_infer.count, 2);
    for (const entry of Object.values(r)) assert.equal(entry.cancel.count, 0);
    // The same over the wire.
    const wire = await fetch(`${srv.url}/v2/models/repeat_stats/stats`).then((res) => res.json() as Promise<{ model_stats: { response_stats: Record<string, Record<string, { count: number }>> }[] }>);
    assert.equal(wire.model_stats[0]!.response_stats['1']!['empty_response']!.count, 1);
  });

  it('a non-decoupled model on the same stream still gets exactly one final response', async () => {
    const stream = openStream(client);
    const done = collectStream(stream);
    stream.write(simpleRequest(1, 2, { id: 'one', parameters: EMPTY_FINAL }).request);
    stream.end();
    const result = await done;
    assert.equal(result.responses.length, 1);
    assert.equal(result.responses[0]!.infer_response!.parameters['triton_final_response']?.bool_param, true);
  });
});
