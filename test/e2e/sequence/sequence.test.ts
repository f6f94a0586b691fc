/**
 * The sequence batcher (models-and-scheduling.md §5) with a real ONNX Runtime accumulator
 * (OUTPUT = INPUT + STATE_IN, STATE_OUT = OUTPUT) that echoes the control tensors it received:
 * many interleaved sequences keep their own state over HTTP, gRPC and a gRPC stream, with
 * integer and string correlation ids, under the direct and oldest strategies; the backlog, its
 * timeouts, the idle timeout, cancellation and the request errors of §5.1, and statistics.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { sequenceAccumulatorModel } from '@nereid/testkit';
import {
  httpRequest,
  jsonBody,
  makeRepository,
  outputNamed,
  removeDir,
  startServer,
  type HttpReply,
  type JsonInferResponse,
  type RunningGrpcServer,
} from '../../helpers/harness.js';
import { collectStream, inferRequest, inferenceClient, inputTensor, int32s, nextResponses, openStream, unary, unaryError } from '../../helpers/grpc.js';
import { modelFiles } from '../../helpers/models.js';

type Id = number | string;

interface Duration {
  count: number;
  ns: number;
}

interface Step {
  value: number;
  start?: boolean;
  end?: boolean;
  timeoutUs?: number;
  signal?: AbortSignal;
  outputs?: string[];
}

function sequenceInfer(url: string, model: string, id: Id | undefined, step: Step, batch = 1): Promise<HttpReply> {
  const parameters: Record<string, unknown> = {};
  if (id !== undefined) parameters.sequence_id = id;
  if (step.start) parameters.sequence_start = true;
  if (step.end) parameters.sequence_end = true;
  if (step.timeoutUs !== undefined) parameters.timeout = step.timeoutUs;
  const body: Record<string, unknown> = {
    parameters,
    inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [batch, 1], data: Array.from({ length: batch }, () => step.value) }],
  };
  if (step.outputs) body.outputs = step.outputs.map((name) => ({ name }));
  return httpRequest(`${url}/v2/models/${model}/infer`, { method: 'POST', body: JSON.stringify(body), ...(step.signal ? { signal: step.signal } : {}) });
}

/** Runs `values` as one sequence (START on the first, END on the last) and returns the parsed replies. */
async function runSequence(url: string, model: string, id: Id, values: readonly number[]): Promise<JsonInferResponse[]> {
  const replies: JsonInferResponse[] = [];
  for (let i = 0; i < values.length; i++) {
    const reply = await sequenceInfer(url, model, id, { value: values[i]!, start: i === 0, end: i === values.length - 1 });
    assert.equal(reply.status, 200, `sequence ${id} step ${i}: ${reply.text}`);
    replies.push(jsonBody(reply) as JsonInferResponse);
  }
  return replies;
}

/** Every reply of a sequence: running sums, the controls as §5.3 sets them, the id. */
function assertSequence(id: Id, values: readonly number[], replies: readonly JsonInferResponse[]): void {
  let sum = 0;
  replies.forEach((r, i) => {
    sum += values[i]!;
    assert.deepEqual(outputNamed(r, 'OUTPUT').data, [sum], `sequence ${id} step ${i}`);
    assert.deepEqual(outputNamed(r, 'OUT_START').data, [i === 0 ? 1 : 0]);
    assert.deepEqual(outputNamed(r, 'OUT_END').data, [i === values.length - 1 ? 1 : 0]);
    assert.deepEqual(outputNamed(r, 'OUT_READY').data, [1]);
    assert.deepEqual(outputNamed(r, 'OUT_CORRID').data, [id]);
    assert.equal(r.outputs.find((o) => o.name === 'STATE_OUT'), undefined, 'the state output is not returned unless requested');
  });
}

function valuesFor(seq: number, length: number): number[] {
  return Array.from({ length }, (_, i) => ((seq * 7 + i * 13) % 50) + 1);
}

async function stats(url: string, model: string): Promise<{ success: Duration; fail: Duration; inference_count: number }> {
  const reply = await httpRequest(`${url}/v2/models/${model}/stats`);
  assert.equal(reply.status, 200, reply.text);
  const s = (jsonBody(reply) as { model_stats: { inference_count: number; inference_stats: { success: Duration; fail: Duration } }[] }).model_stats[0]!;
  return { success: s.inference_stats.success, fail: s.inference_stats.fail, inference_count: s.inference_count };
}

/** The model's `nv_inference_pending_request_count` (queued or backlogged requests). */
async function pending(srv: RunningGrpcServer, model: string): Promise<number> {
  const text = await srv.server.metrics.text();
  const line = text.split('\n').find((l) => l.startsWith('nv_inference_pending_request_count{') && l.includes(`model="${model}"`));
  return line === undefined ? 0 : Number(line.slice(line.lastIndexOf(' ') + 1));
}

function errorOf(reply: HttpReply): string {
  return (jsonBody(reply) as { error: string }).error;
}

describe('sequence batcher with ONNX Runtime', () => {
  let repo: string;
  let srv: RunningGrpcServer;

  before(async () => {
    const direct = sequenceAccumulatorModel({ name: 'seq_direct', maxBatchSize: 4, instances: 2 });
    const oldest = sequenceAccumulatorModel({
      name: 'seq_oldest',
      maxBatchSize: 4,
      instances: 2,
      strategy: 'oldest { max_candidate_sequences: 6 max_queue_delay_microseconds: 2000 }',
    });
    const strings = sequenceAccumulatorModel({ name: 'seq_string', corrid: 'STRING', maxBatchSize: 4 });
    const single = sequenceAccumulatorModel({ name: 'seq_single', maxBatchSize: 1, stateOutputListed: true });
    const idle = sequenceAccumulatorModel({ name: 'seq_idle', maxBatchSize: 1, idleMicroseconds: 200_000 });
    repo = await makeRepository({
      seq_direct: modelFiles(direct),
      seq_oldest: modelFiles(oldest),
      seq_string: modelFiles(strings),
      seq_single: modelFiles(single),
      seq_idle: modelFiles(idle),
    });
    srv = await startServer({ modelRepositories: [repo], grpc: true });
    assert.deepEqual(srv.server.startReport.failures, []);
  });

  after(async () => {
    await srv?.stop();
    if (repo) await removeDir(repo);
  });

  it('100 interleaved sequences keep their own state (direct, 8 slots, the rest in the backlog)', async () => {
    const ids = Array.from({ length: 100 }, (_, i) => 1000 + i);
    const values = ids.map((_, i) => valuesFor(i, 4));
    const replies = await Promise.all(ids.map((id, i) => runSequence(srv.url, 'seq_direct', id, values[i]!)));
    ids.forEach((id, i) => assertSequence(id, values[i]!, replies[i]!));
    const s = await stats(srv.url, 'seq_direct');
    assert.equal(s.success.count, 400);
    assert.equal(s.fail.count, 0);
  });

  it('the oldest strategy keeps every sequence in order with its own state', async () => {
    const ids = Array.from({ length: 60 }, (_, i) => 2n ** 53n + 1n + BigInt(i));
    const values = ids.map((_, i) => valuesFor(i, 5));
    // 2^53 + k is not a JSON-safe double: send the ids as text that parses exactly.
    const run = async (id: bigint, vals: number[]) => {
      const replies: JsonInferResponse[] = [];
      for (let i = 0; i < vals.length; i++) {
        const body = `{"parameters":{"sequence_id":${id}${i === 0 ? ',"sequence_start":true' : ''}${i === vals.length - 1 ? ',"sequence_end":true' : ''}},` +
          `"inputs":[{"name":"INPUT","datatype":"INT32","shape":[1,1],"data":[${vals[i]}]}]}`;
        const reply = await httpRequest(`${srv.url}/v2/models/seq_oldest/infer`, { method: 'POST', body });
        assert.equal(reply.status, 200, reply.text);
        replies.push(JSON.parse(reply.text) as JsonInferResponse);
      }
      return replies;
    };
    const replies = await Promise.all(ids.map((id, i) => run(id, values[i]!)));
    ids.forEach((id, i) => {
      let sum = 0;
      replies[i]!.forEach((r, k) => {
        sum += values[i]![k]!;
        assert.deepEqual(outputNamed(r, 'OUTPUT').data, [sum], `sequence ${id} step ${k}`);
        assert.deepEqual(outputNamed(r, 'OUT_START').data, [k === 0 ? 1 : 0]);
        assert.deepEqual(outputNamed(r, 'OUT_READY').data, [1]);
      });
    });
  });

  it('string correlation ids reach a TYPE_STRING CORRID control', async () => {
    const ids = Array.from({ length: 20 }, (_, i) => `session-${i}-é`);
    const values = ids.map((_, i) => valuesFor(i, 3));
    const replies = await Promise.all(ids.map((id, i) => runSequence(srv.url, 'seq_string', id, values[i]!)));
    ids.forEach((id, i) => assertSequence(id, values[i]!, replies[i]!));
  });

  it('gRPC unary and a gRPC stream carry interleaved sequences', async () => {
    const client = inferenceClient(srv.grpcTarget);
    try {
      const request = (id: bigint, value: number, start: boolean, end: boolean) =>
        inferRequest({
          model_name: 'seq_direct',
          parameters: { sequence_id: { int64_param: id }, sequence_start: { bool_param: start }, sequence_end: { bool_param: end } },
          inputs: [inputTensor('INPUT', 'INT32', [1, 1], { int_contents: [value] })],
        });
      const ids = Array.from({ length: 12 }, (_, i) => BigInt(5000 + i));
      const sums = await Promise.all(
        ids.map(async (id, i) => {
          const got: number[] = [];
          for (let k = 0; k < 3; k++) {
            const r = await unary(client, 'ModelInfer', request(id, i + k, k === 0, k === 2));
            const index = r.outputs.findIndex((o) => o.name === 'OUTPUT');
            got.push(int32s(r.raw_output_contents[index]!)[0]!);
          }
          return got;
        }),
      );
      ids.forEach((_, i) => assert.deepEqual(sums[i], [i, 2 * i + 1, 3 * i + 3]));

      const stream = openStream(client);
      // As many sequences as the model has slots (2 instances × 4): a stream answers in order, so a
      // backlogged sequence's first answer would wait behind the slot holders' next requests.
      const streamIds = Array.from({ length: 8 }, (_, i) => BigInt(6000 + i));
      const totals = streamIds.map(() => 0);
      for (let round = 0; round < 3; round++) {
        const pending = nextResponses(stream, streamIds.length);
        streamIds.forEach((id, i) => stream.write(request(id, i * 10 + round, round === 0, round === 2)));
        const responses = await pending;
        // Non-decoupled responses come back in the order the requests were sent.
        responses.forEach((res, i) => {
          assert.equal(res.error_message, '', res.error_message);
          totals[i]! += i * 10 + round;
          const r = res.infer_response!;
          const index = r.outputs.findIndex((o) => o.name === 'OUTPUT');
          assert.deepEqual(int32s(r.raw_output_contents[index]!), [totals[i]]);
        });
      }
      const ended = collectStream(stream);
      stream.end();
      assert.equal((await ended).error, undefined);

      const err = await unaryError(client, 'ModelInfer', request(99n, 1, false, false));
      assert.equal(err.code, 3);
      assert.match(err.details, /must specify the START flag/);
    } finally {
      client.close();
    }
  });

  it('a state output listed in the config is returned when requested', async () => {
    const first = await sequenceInfer(srv.url, 'seq_single', 7, { value: 5, start: true, outputs: ['OUTPUT', 'STATE_OUT'] });
    assert.equal(first.status, 200, first.text);
    assert.deepEqual(outputNamed(jsonBody(first) as JsonInferResponse, 'STATE_OUT').data, [5]);
    const second = await sequenceInfer(srv.url, 'seq_single', 7, { value: 2, end: true, outputs: ['OUTPUT'] });
    const body = jsonBody(second) as JsonInferResponse;
    assert.deepEqual(outputNamed(body, 'OUTPUT').data, [7]);
    assert.equal(body.outputs.length, 1);
  });

  it('refuses requests without a correlation id, without START, with batch size > 1 or a mistyped id, uncounted', async () => {
    const before = await stats(srv.url, 'seq_direct');
    const missing = await sequenceInfer(srv.url, 'seq_direct', undefined, { value: 1, start: true });
    assert.equal(missing.status, 400);
    assert.match(errorOf(missing), /must specify a non-zero or non-empty correlation ID/);
    const zero = await sequenceInfer(srv.url, 'seq_direct', 0, { value: 1, start: true });
    assert.equal(zero.status, 400);
    assert.match(errorOf(zero), /non-zero or non-empty correlation ID/);
    const noStart = await sequenceInfer(srv.url, 'seq_direct', 424242, { value: 1 });
    assert.equal(noStart.status, 400);
    assert.match(errorOf(noStart), /inference request for sequence 424242 to model 'seq_direct' must specify the START flag/);
    const batch = await sequenceInfer(srv.url, 'seq_direct', 31, { value: 1, start: true }, 2);
    assert.equal(batch.status, 400);
    assert.match(errorOf(batch), /must specify batch-size 1 due to requirements of sequence batcher/);
    const typed = await sequenceInfer(srv.url, 'seq_direct', 'text-id', { value: 1, start: true });
    assert.equal(typed.status, 400);
    assert.match(errorOf(typed), /CORRID.*string/);
    const typed2 = await sequenceInfer(srv.url, 'seq_string', 12, { value: 1, start: true });
    assert.equal(typed2.status, 400);
    const badType = await httpRequest(`${srv.url}/v2/models/seq_direct/infer`, {
      method: 'POST',
      body: JSON.stringify({ parameters: { sequence_id: -3 }, inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: [1] }] }),
    });
    assert.equal(badType.status, 400);
    const after = await stats(srv.url, 'seq_direct');
    assert.deepEqual(after, before, 'refused requests are not counted');
    // The server keeps serving the model.
    assertSequence(77, [3], await runSequence(srv.url, 'seq_direct', 77, [3]));
  });

  it('a backlogged sequence whose request timeout expires fails UNAVAILABLE; counted as a failure', async () => {
    const before = await stats(srv.url, 'seq_single');
    const holder = await sequenceInfer(srv.url, 'seq_single', 1, { value: 1, start: true });
    assert.equal(holder.status, 200, holder.text);
    const waiting = await sequenceInfer(srv.url, 'seq_single', 2, { value: 1, start: true, timeoutUs: 50_000 });
    assert.equal(waiting.status, 503, waiting.text);
    assert.match(errorOf(waiting), /timeout of the corresponding sequence has been expired/);
    const s = await stats(srv.url, 'seq_single');
    assert.equal(s.fail.count, before.fail.count + 1);
    // The holder still owns its slot and its state.
    const end = await sequenceInfer(srv.url, 'seq_single', 1, { value: 4, end: true });
    assert.deepEqual(outputNamed(jsonBody(end) as JsonInferResponse, 'OUTPUT').data, [5]);
    // The timed-out sequence is gone.
    const late = await sequenceInfer(srv.url, 'seq_single', 2, { value: 1 });
    assert.equal(late.status, 400);
  });

  it('a backlogged sequence gets the slot when the holder ends', async () => {
    // Through the facade, whose infer enqueues synchronously: the requests arrive in call order.
    const call = (id: number, value: number, flags: { start?: boolean; end?: boolean }) =>
      srv.server.infer({
        model: 'seq_single',
        parameters: { sequence_id: id, ...(flags.start ? { sequence_start: true } : {}), ...(flags.end ? { sequence_end: true } : {}) },
        inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(value) }],
        outputs: [{ name: 'OUTPUT' }],
      });
    const sum = (r: { outputs: { data: unknown }[] }) => new Int32Array((r.outputs[0]!.data as Uint8Array).slice().buffer)[0];
    await call(11, 1, { start: true });
    const waiting = call(12, 10, { start: true });
    const second = call(12, 5, { end: true });
    const end = await call(11, 1, { end: true });
    assert.equal(sum(end), 2);
    const [w, s] = await Promise.all([waiting, second]);
    assert.equal(sum(w), 10);
    assert.equal(sum(s), 15);
  });

  it('an idle sequence is released: its slot goes to the backlog, its next request must START', async () => {
    const first = await sequenceInfer(srv.url, 'seq_idle', 1, { value: 3, start: true });
    assert.equal(first.status, 200, first.text);
    // The only slot is held; this sequence waits until the idle one is released (200 ms idle limit).
    const other = await runSequence(srv.url, 'seq_idle', 2, [4, 5]);
    assertSequence(2, [4, 5], other);
    const late = await sequenceInfer(srv.url, 'seq_idle', 1, { value: 1 });
    assert.equal(late.status, 400);
    assert.match(errorOf(late), /must specify the START flag/);
    // A fresh START with the same id begins from the initial state.
    const again = await runSequence(srv.url, 'seq_idle', 1, [6]);
    assertSequence(1, [6], again);
  });

  it('cancelling a backlogged request drops its sequence; the slot holder is unaffected', async () => {
    const before = await stats(srv.url, 'seq_single');
    await sequenceInfer(srv.url, 'seq_single', 21, { value: 2, start: true });
    const controller = new AbortController();
    const cancelled = sequenceInfer(srv.url, 'seq_single', 22, { value: 1, start: true, signal: controller.signal }).catch((e: unknown) => e);
    // Aborted only once the server holds it (the backlogged request counts as pending).
    for (let i = 0; i < 500 && !(await pending(srv, 'seq_single')); i++) await sleep(10);
    assert.equal(await pending(srv, 'seq_single'), 1);
    controller.abort();
    assert.ok((await cancelled) instanceof Error);
    // Wait until the server has counted the cancellation.
    for (let i = 0; i < 100 && (await stats(srv.url, 'seq_single')).fail.count === before.fail.count; i++) await sleep(20);
    assert.equal((await stats(srv.url, 'seq_single')).fail.count, before.fail.count + 1);
    const end = await sequenceInfer(srv.url, 'seq_single', 21, { value: 3, end: true });
    assert.deepEqual(outputNamed(jsonBody(end) as JsonInferResponse, 'OUTPUT').data, [5]);
    const late = await sequenceInfer(srv.url, 'seq_single', 22, { value: 1 });
    assert.equal(late.status, 400);
    assert.match(errorOf(late), /must specify the START flag/);
  });
});
