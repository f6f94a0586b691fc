/**
 * Preemption by priority end to end (docs/resources.md): HTTP and gRPC clients fill a model's
 * model-wide queue with low-priority requests and a higher-priority one evicts the most recent of
 * them, which is answered UNAVAILABLE "preempted"; a decoupled Python model streaming at low
 * priority is stopped between two responses when a higher-priority request waits for its only
 * instance. Every request is answered, and `nereid_inference_preemptions_total` counts both kinds.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { ServiceError } from '@grpc/grpc-js';
import { GrpcClient, HttpClient, InferenceServerError, type StreamResult } from '@nereid/client';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { inferenceClient, inferRequest, inputTensor, startUnary } from '../../helpers/grpc.js';
import { requirePython } from '../../helpers/python.js';
import { GateBackend, gateConfig, gateRequest, sample, scrape, startMetrics, type RunningMetrics } from '../metrics/exposition.js';

const GATED_EXTRA = `
dynamic_batching { priority_levels: 3 default_priority_level: 3 }
parameters { key: "preemption" value: { string_value: "queued" } }
parameters { key: "max_total_queue_size" value: { string_value: "2" } }
`;

/**
 * Streams IN[0] responses (0, 1, …) 20 ms apart from `execute`; when a send raises, it records
 * the request id, `is_cancelled()` and the exception's text in preempted.jsonl beside its config.
 */
const STREAMER_PY = String.raw`
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.log = os.path.join(args["model_repository"], "preempted.jsonl")

    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            n = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()[0])
            try:
                for i in range(n):
                    sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.array([i], dtype=np.int32))]))
                    time.sleep(0.02)
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            except pb_utils.TritonModelException as err:
                with open(self.log, "a") as f:
                    f.write(json.dumps({"id": request.request_id(), "cancelled": request.is_cancelled(), "error": str(err)}) + "\n")
        return None
`;

const STREAMER_CONFIG = `
name: "streamer"
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
model_transaction_policy { decoupled: true }
instance_group [ { kind: KIND_CPU count: 1 } ]
dynamic_batching { priority_levels: 2 default_priority_level: 2 }
parameters { key: "preemption" value: { string_value: "running" } }
`;

/** An ensemble over `gated` that asks for preemption, which only a dynamic batcher can do. */
const ENSEMBLE_CONFIG = `
name: "ensemble"
platform: "ensemble"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
ensemble_scheduling { step [ { model_name: "gated" model_version: -1 input_map { key: "IN" value: "IN" } output_map { key: "OUT" value: "OUT" } } ] }
parameters { key: "preemption" value: { string_value: "running" } }
`;

let repo: string;
let srv: RunningGrpcServer;
let metrics: RunningMetrics;
let gate: GateBackend;
let grpc: GrpcClient;
let http: HttpClient;

before(async () => {
  await requirePython(['numpy']);
  gate = new GateBackend();
  repo = await makeRepository({
    gated: { 'config.pbtxt': gateConfig('gated', { extra: GATED_EXTRA }), '1/.keep': '' },
    streamer: { 'config.pbtxt': STREAMER_CONFIG, '1/model.py': STREAMER_PY },
    unbounded: {
      'config.pbtxt': gateConfig('unbounded', { extra: 'dynamic_batching { priority_levels: 2 default_priority_level: 2 }\nparameters { key: "preemption" value: { string_value: "queued" } }' }),
      '1/.keep': '',
    },
    ensemble: { 'config.pbtxt': ENSEMBLE_CONFIG, '1/.keep': '' },
  });
  srv = await startServer({ modelRepositories: [repo], grpc: true, backends: [gate.backend] });
  metrics = await startMetrics(srv.server);
  grpc = new GrpcClient(srv.grpcTarget);
  http = new HttpClient(srv.url);
});

after(async () => {
  grpc?.close();
  await metrics?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

const series = (family: string, labels: string) => `${family}{${labels}}`;

/** Waits until the model's queue holds `n` requests (`nv_inference_pending_request_count`). */
async function pending(model: string, n: number): Promise<void> {
  const name = series('nv_inference_pending_request_count', `model="${model}",version="1"`);
  for (let i = 0; i < 500; i++) {
    if (sample(await scrape(metrics.url), name) === n) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.fail(`model '${model}' never held ${n} queued requests`);
}

function postInfer(model: string, id: string, value: number, priority: number): Promise<{ status: number; body: Record<string, unknown> }> {
  return fetch(`${srv.url}/v2/models/${model}/infer`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ id, parameters: { priority }, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [value] }] }),
  }).then(async (res) => ({ status: res.status, body: (await res.json()) as Record<string, unknown> }));
}

describe('queued preemption (preemption "queued", max_total_queue_size)', () => {
  it('a higher-priority request evicts the most recent lowest-priority queued one, over HTTP and gRPC; every request is answered', async () => {
    const client = inferenceClient(srv.grpcTarget);
    try {
      const grpcInfer = (id: string, value: number, priority: number) =>
        startUnary(
          client,
          'ModelInfer',
          inferRequest({
            model_name: 'gated',
            id,
            parameters: { priority: { uint64_param: BigInt(priority) } },
            inputs: [inputTensor('IN', 'INT32', [1], { int_contents: [value] })],
          }),
        ).response;
      const blocker = srv.server.infer(gateRequest('gated', 1));
      await gate.held(1);
      const httpLow = postInfer('gated', 'http-low', 2, 3);
      await pending('gated', 1);
      const grpcLow = grpcInfer('grpc-low', 3, 3).then(
        () => assert.fail('grpc-low should have been preempted'),
        (err: ServiceError) => err,
      );
      await pending('gated', 2);

      const httpHigh = postInfer('gated', 'http-high', 4, 1);
      const evicted = await grpcLow;
      assert.equal(evicted.code, 14, 'gRPC UNAVAILABLE');
      assert.match(
        evicted.details,
        /^Request preempted while queued: model 'gated' evicted request 'grpc-low' \(priority level 3, the lowest queued\) from its full queue \(max_total_queue_size 2\) to admit a request of priority level 1; retry later or send it with a higher priority$/,
      );

      const grpcMid = grpcInfer('grpc-mid', 5, 2);
      const lowReply = await httpLow;
      assert.equal(lowReply.status, 503, 'HTTP 503 for UNAVAILABLE');
      assert.match(String(lowReply.body['error']), /^Request preempted while queued: model 'gated' evicted request 'http-low' \(priority level 3, the lowest queued\).*priority level 2;/);

      const refused = await postInfer('gated', 'http-equal', 6, 2);
      assert.equal(refused.status, 503);
      assert.match(String(refused.body['error']), /^Exceeds maximum queue size: model 'gated' already holds 2 queued requests across its priority levels \(max_total_queue_size 2\), none of a lower priority than level 2; retry later$/);

      gate.open();
      assert.equal((await blocker).outputs.length, 1);
      const high = await httpHigh;
      assert.equal(high.status, 200, JSON.stringify(high.body));
      assert.deepEqual((high.body['outputs'] as { data: number[] }[])[0]!.data, [4]);
      const mid = await grpcMid;
      assert.equal(mid.id, 'grpc-mid');

      const text = await scrape(metrics.url);
      assert.equal(sample(text, series('nereid_inference_preemptions_total', 'kind="queued",model="gated",version="1"')), 2);
      assert.equal(sample(text, series('nereid_inference_preemptions_total', 'kind="running",model="gated",version="1"')), 0);
      assert.equal(sample(text, series('nv_inference_request_failure', 'model="gated",reason="REJECTED",version="1"')), 3, 'two evicted, one refused');
      assert.equal(sample(text, series('nv_inference_request_success', 'model="gated",version="1"')), 3);
      assert.equal(sample(text, series('nv_inference_pending_request_count', 'model="gated",version="1"')), 0);
    } finally {
      gate.open();
      client.close();
    }
  });

  it('a model whose preemption parameters cannot work does not load, and says why', () => {
    const reason = (model: string) => {
      const failure = srv.server.startReport.failures.find((f) => f.name === model);
      assert.ok(failure, JSON.stringify(srv.server.startReport));
      return failure.reason;
    };
    assert.match(reason('unbounded'), /^model 'unbounded': parameter 'preemption' "queued" evicts requests from a full model-wide queue: set parameter 'max_total_queue_size'/);
    assert.match(reason('ensemble'), /^model 'ensemble': parameter 'preemption' acts between priority levels and needs dynamic_batching with priority_levels of 2 or more; the model has no dynamic_batching section$/);
  });
});

/** The OUT values of a result list's data responses for `id`. */
const outs = (results: readonly StreamResult[], id: string) =>
  results.filter((r) => r.id === id && r.result !== undefined).map((r) => (r.result!.typed('OUT') as Int32Array)[0]);

async function preemptedRecords(): Promise<{ id: string; cancelled: boolean; error: string }[]> {
  const text = await readFile(join(repo, 'streamer', 'preempted.jsonl'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as { id: string; cancelled: boolean; error: string });
}

async function records(n: number): Promise<{ id: string; cancelled: boolean; error: string }[]> {
  for (let i = 0; i < 500; i++) {
    const got = await preemptedRecords();
    if (got.length >= n) return got;
    await new Promise((r) => setTimeout(r, 10));
  }
  assert.fail(`the model recorded fewer than ${n} preempted sends`);
}

describe('running preemption (preemption "running", a decoupled Python model, one instance)', () => {
  const values = (n: number) => [{ name: 'IN', datatype: 'INT32' as const, shape: [1], data: Int32Array.from([n]) }];

  it('gRPC stream at low priority: ended with a preempted error between two responses; the HTTP SSE request of higher priority is served', async () => {
    const stream = grpc.stream();
    stream.send({ model: 'streamer', id: 'grpc-low', inputs: values(1_000_000), parameters: { priority: 2 } });
    const results: StreamResult[] = [];
    let high: Promise<unknown[]> | undefined;
    for await (const r of stream) {
      results.push(r);
      if (high === undefined && outs(results, 'grpc-low').length === 3) {
        high = (async () => {
          const events: unknown[] = [];
          for await (const e of http.generateStream({ model: 'streamer', body: { IN: 3, parameters: { priority: 1 } } })) events.push(e['OUT']);
          return events;
        })();
      }
      if (r.final) stream.end();
    }
    const last = results.at(-1)!;
    assert.equal(last.id, 'grpc-low');
    assert.equal(last.final, true);
    assert.ok(last.error instanceof InferenceServerError, String(last.error));
    assert.match(
      last.error.message,
      /^Request preempted while running: model 'streamer' stopped request 'grpc-low' \(priority level 2\) between two responses to give its instance to a request of priority level 1; the responses already sent stand;/,
    );
    const sent = outs(results, 'grpc-low');
    assert.ok(sent.length >= 3);
    assert.deepEqual(sent, sent.map((_, i) => i), 'the responses before the error arrived whole and in order');
    assert.deepEqual(await high, [0, 1, 2]);
    const [record] = await records(1);
    assert.equal(record!.id, 'grpc-low');
    assert.equal(record!.cancelled, true, "the model's request.is_cancelled() is true");
    assert.match(record!.error, /^request 'grpc-low' was preempted and has ended; send nothing more for it \(Request preempted while running/);
  });

  it('HTTP generate_stream at low priority: the event stream ends with the preempted error; the gRPC request of higher priority is served', async () => {
    const events: unknown[] = [];
    let high: Promise<StreamResult[]> | undefined;
    const error = await (async () => {
      try {
        for await (const e of http.generateStream({ model: 'streamer', body: { id: 'http-low', IN: 1_000_000, parameters: { priority: 2 } } })) {
          events.push(e['OUT']);
          if (events.length === 3 && high === undefined) {
            high = (async () => {
              const stream = grpc.stream();
              stream.send({ model: 'streamer', id: 'grpc-high', inputs: values(2), parameters: { priority: 1 }, enableEmptyFinalResponse: true });
              const got: StreamResult[] = [];
              for await (const r of stream) {
                got.push(r);
                if (r.final) stream.end();
              }
              return got;
            })();
          }
        }
      } catch (err) {
        return err;
      }
      return undefined;
    })();
    assert.ok(error instanceof InferenceServerError, `the stream ended with ${String(error)}`);
    assert.match(error.message, /^Request preempted while running: model 'streamer' stopped request 'http-low' \(priority level 2\)/);
    assert.deepEqual(events, events.map((_, i) => i));
    const got = await high!;
    assert.deepEqual(outs(got, 'grpc-high'), [0, 1]);
    assert.equal(got.at(-1)!.final, true);
    assert.equal(got.at(-1)!.error, undefined);
    const all = await records(2);
    assert.deepEqual(all.map((r) => [r.id, r.cancelled]), [['grpc-low', true], ['http-low', true]]);

    const text = await scrape(metrics.url);
    assert.equal(sample(text, series('nereid_inference_preemptions_total', 'kind="running",model="streamer",version="1"')), 2);
    assert.equal(sample(text, series('nereid_inference_preemptions_total', 'kind="queued",model="streamer",version="1"')), 0);
    assert.equal(sample(text, series('nv_inference_request_failure', 'model="streamer",reason="REJECTED",version="1"')), 2);
    assert.equal(sample(text, series('nv_inference_request_success', 'model="streamer",version="1"')), 2, 'both higher-priority requests');
  });
});
