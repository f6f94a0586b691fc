/**
 * Decoupled Python models end to end (models-and-scheduling.md §8.1, §8.5): a Triton-style
 * `model.py` sending many responses through `InferenceResponseSender`, streamed to clients over
 * gRPC ModelStreamInfer and HTTP Server-Sent Events; and BLS into that model with
 * `exec(decoupled=True)` / `await async_exec(decoupled=True)`, which iterate over its responses.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, HttpClient, type StreamResult } from '@nereid/client';
import type { StreamResponse } from '@nereid/server';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { REPEAT_CONFIG, REPEAT_PY, requirePython } from '../../helpers/python.js';

/**
 * BLS into "repeat" with exec(decoupled=True) (parameter mode "sync") or async_exec (mode
 * "async"): SUM is the sum of the OUT values received, COUNT the number of responses, EMPTY the
 * number of responses without tensors, ERRORS those with has_error().
 */
const BLS_PY = String.raw`
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "sync")
            bls = pb_utils.InferenceRequest(model_name="repeat", requested_output_names=["OUT"],
                                            inputs=[pb_utils.get_input_tensor_by_name(request, "IN")])
            if mode == "async":
                received = [r async for r in await bls.async_exec(decoupled=True)]
            else:
                received = list(bls.exec(decoupled=True))
            total = 0
            empty = 0
            errors = 0
            for r in received:
                if r.has_error():
                    errors += 1
                    continue
                out = pb_utils.get_output_tensor_by_name(r, "OUT")
                if out is None:
                    empty += 1
                else:
                    total += int(out.as_numpy().sum())
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("SUM", np.array([total], dtype=np.int32)),
                pb_utils.Tensor("COUNT", np.array([len(received)], dtype=np.int32)),
                pb_utils.Tensor("EMPTY", np.array([empty], dtype=np.int32)),
                pb_utils.Tensor("ERRORS", np.array([errors], dtype=np.int32))]))
        return responses
`;

const BLS_CONFIG = `
name: "bls_repeat"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [
  { name: "SUM" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "EMPTY" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "ERRORS" data_type: TYPE_INT32 dims: [ 1 ] }
]
`;

let repo: string;
let srv: RunningGrpcServer;
let grpc: GrpcClient;
let http: HttpClient;

before(async () => {
  await requirePython(['numpy']);
  repo = await makeRepository({
    repeat: { 'config.pbtxt': REPEAT_CONFIG, '1/model.py': REPEAT_PY },
    bls_repeat: { 'config.pbtxt': BLS_CONFIG, '1/model.py': BLS_PY },
  });
  srv = await startServer({ modelRepositories: [repo], grpc: true });
  grpc = new GrpcClient(srv.grpcTarget);
  http = new HttpClient(srv.url);
});

after(async () => {
  grpc?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

/** The first INT32 of a tensor's bytes (which may be a view into a larger buffer). */
function firstInt32(data: Uint8Array): number {
  return new DataView(data.buffer, data.byteOffset, data.byteLength).getInt32(0, true);
}

function values(v: number[]) {
  return [{ name: 'IN', datatype: 'INT32' as const, shape: [v.length], data: Int32Array.from(v) }];
}

describe('a decoupled Python model streamed to clients', () => {
  it('gRPC ModelStreamInfer: one response per value, in order, the empty final only on opt-in', async () => {
    const stream = grpc.stream();
    stream.send({ model: 'repeat', id: 'a', inputs: values([3, 1, 4]), enableEmptyFinalResponse: true });
    stream.send({ model: 'repeat', id: 'b', inputs: values([7, 8]) });
    stream.end();
    const results: StreamResult[] = [];
    for await (const r of stream) results.push(r);
    const of = (id: string) =>
      results.filter((r) => r.id === id).map((r) => [r.result === undefined ? null : Array.from(r.result.typed('OUT') as Int32Array), r.final]);
    assert.deepEqual(of('a'), [
      [[3], false],
      [[1], false],
      [[4], false],
      [null, true],
    ]);
    assert.deepEqual(of('b'), [
      [[7], false],
      [[8], false],
    ]);
    for (const r of results) assert.equal(r.error, undefined);
  });

  it('an error response from the sender reaches the client in-band and ends the request', async () => {
    const stream = grpc.stream();
    stream.send({ model: 'repeat', id: 'e', inputs: values([5, -1, 6]) });
    stream.end();
    const results: StreamResult[] = [];
    for await (const r of stream) results.push(r);
    assert.deepEqual(Array.from(results[0]!.result!.typed('OUT') as Int32Array), [5]);
    const failed = results.find((r) => r.error !== undefined);
    assert.ok(failed, 'the error arrived');
    assert.match(failed.error!.message, /negative value -1/);
    assert.ok(!results.some((r) => r.result !== undefined && Array.from(r.result.typed('OUT') as Int32Array)[0] === 6), 'nothing after the final error');
  });

  it('HTTP: the same responses as Server-Sent Events through generate_stream', async () => {
    const events: unknown[] = [];
    for await (const e of http.generateStream({ model: 'repeat', body: { IN: [2, 9] } })) events.push(e);
    assert.deepEqual(
      events.map((e) => (e as Record<string, unknown>)['OUT']),
      [2, 9],
    );
  });

  it('the facade: inferStream hands each response over with its final flag', async () => {
    const got: StreamResponse[] = [];
    await srv.server.inferStream({ model: 'repeat', inputs: [{ name: 'IN', datatype: 'INT32', shape: [2], data: new Uint8Array(Int32Array.from([11, 12]).buffer) }] }, {
      onResponse: (r) => got.push(r),
    });
    assert.deepEqual(
      got.map((r) => [r.response ? [firstInt32(r.response.outputs[0]!.data)] : null, r.final]),
      [
        [[11], false],
        [[12], false],
        [null, true],
      ],
    );
  });
});

describe('BLS into a decoupled model from Python', () => {
  for (const mode of ['sync', 'async']) {
    it(`${mode === 'sync' ? 'exec' : 'async_exec'}(decoupled=True) iterates over every response, the flags-only final as an empty one`, async () => {
      const res = await srv.server.infer({
        model: 'bls_repeat',
        parameters: { mode },
        inputs: [{ name: 'IN', datatype: 'INT32', shape: [3], data: new Uint8Array(Int32Array.from([10, 20, 30]).buffer) }],
      });
      const scalar = (name: string) => firstInt32(res.outputs.find((t) => t.name === name)!.data);
      assert.equal(scalar('SUM'), 60);
      assert.equal(scalar('COUNT'), 4);
      assert.equal(scalar('EMPTY'), 1);
      assert.equal(scalar('ERRORS'), 0);
    });
  }

  it('an error inside the decoupled model comes back as a response with has_error()', async () => {
    const res = await srv.server.infer({
      model: 'bls_repeat',
      parameters: { mode: 'sync' },
      inputs: [{ name: 'IN', datatype: 'INT32', shape: [3], data: new Uint8Array(Int32Array.from([1, -2, 3]).buffer) }],
    });
    const scalar = (name: string) => firstInt32(res.outputs.find((t) => t.name === name)!.data);
    assert.equal(scalar('SUM'), 1);
    assert.equal(scalar('ERRORS'), 1);
  });
});
