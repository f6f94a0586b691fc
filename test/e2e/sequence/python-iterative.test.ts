/**
 * Iterative sequences with Python models (models-and-scheduling.md §5.9, §8.5): a model releases
 * a request with `set_release_flags(TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)` to have it executed
 * again; decoupled models stream a response per iteration, others answer once (`None` for the
 * rescheduled iterations).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Server, silentLogger } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { waitFor } from '../../helpers/lifecycle.js';
import { requirePython } from '../../helpers/python.js';

const DECOUPLED_PY = String.raw`
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            start = request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START
            source = "IN" if start else "STATE_IN"
            count = int(pb_utils.get_input_tensor_by_name(request, source).as_numpy().reshape(-1)[0])
            sender = request.get_response_sender()
            sender.send(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUT", np.array([[count]], dtype=np.int32)),
                pb_utils.Tensor("STATE_OUT", np.array([[count - 1]], dtype=np.int32)),
            ]))
            if count > 1:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
            else:
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
`;

const UNARY_PY = String.raw`
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.left = {}
        self.runs = {}

    def execute(self, requests):
        responses = []
        for request in requests:
            cid = request.correlation_id()
            if request.flags() & pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START:
                self.left[cid] = int(pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().reshape(-1)[0])
                self.runs[cid] = 0
            self.left[cid] -= 1
            self.runs[cid] += 1
            if self.left[cid] > 0:
                request.set_release_flags(pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE)
                responses.append(None)
                continue
            runs = self.runs.pop(cid)
            del self.left[cid]
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUT", np.array([[runs]], dtype=np.int32))]))
        return responses
`;

function config(name: string, decoupled: boolean): string {
  return `
name: "${name}"
backend: "python"
max_batch_size: 4
${decoupled ? 'model_transaction_policy { decoupled: true }' : ''}
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  iterative_sequence: true
  oldest { max_candidate_sequences: 4 }
  ${decoupled ? 'state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]' : ''}
}
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
}

describe('iterative sequences with Python models', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let server: Server;

  before(async () => {
    repo = await makeRepository({
      py_countdown: { 'config.pbtxt': config('py_countdown', true), '1/model.py': DECOUPLED_PY },
      py_countdown_unary: { 'config.pbtxt': config('py_countdown_unary', false), '1/model.py': UNARY_PY },
    });
    server = await Server.start({ modelRepositories: [repo], logger: silentLogger() });
    assert.deepEqual(server.startReport.failures, []);
  });

  after(async () => {
    await server?.stop();
    if (repo) await removeDir(repo);
  });

  const int32 = (data: Uint8Array) => new DataView(data.buffer, data.byteOffset, 4).getInt32(0, true);

  it('a decoupled model streams one response per iteration until it stops rescheduling', async () => {
    const run = async (count: number) => {
      const values: number[] = [];
      let finals = 0;
      await server.inferStream(
        { model: 'py_countdown', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(count) }] },
        {
          onResponse: ({ response, final }) => {
            if (final) finals++;
            const out = response?.outputs.find((o) => o.name === 'OUT');
            if (out !== undefined) values.push(int32(out.data));
          },
        },
      );
      return { values, finals };
    };
    const [a, b] = await Promise.all([run(3), run(2)]);
    assert.deepEqual(a, { values: [3, 2, 1], finals: 1 });
    assert.deepEqual(b, { values: [2, 1], finals: 1 });
    // A request's statistics are recorded when it completes, which may come just after
    // its final response reached the stream.
    await waitFor('both requests counted', () => server.modelStatistics('py_countdown')[0]!.inference_stats.success.count >= 2);
    const stats = server.modelStatistics('py_countdown')[0]!;
    assert.equal(stats.inference_stats.success.count, 2);
    assert.equal(stats.execution_count, 3, 'the iterations of both requests ran together');
  });

  it('a model that is not decoupled answers once, after its last iteration', async () => {
    const response = await server.infer({ model: 'py_countdown_unary', inputs: [{ name: 'IN', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(4) }] });
    assert.equal(int32(response.outputs[0]!.data), 4);
  });
});
