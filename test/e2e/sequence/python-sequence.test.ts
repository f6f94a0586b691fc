/**
 * A Python model under the sequence batcher: it sees the control inputs and the implicit state as
 * ordinary inputs, and `request.correlation_id()` / `request.flags()` as Triton's Python backend
 * gives them (integer ids, including beyond 2^53, and string ids).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { requirePython } from '../../helpers/python.js';

const MODEL_PY = String.raw`
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            start = pb_utils.get_input_tensor_by_name(request, "START").as_numpy()
            total = (value + state).astype(np.int32)
            cid = request.correlation_id()
            info = f"{type(cid).__name__}:{cid}:{request.flags()}:{int(start.reshape(-1)[0])}"
            responses.append(pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor("OUTPUT", total),
                pb_utils.Tensor("STATE_OUT", total),
                pb_utils.Tensor("INFO", np.array([[info.encode()]], dtype=np.object_)),
            ]))
        return responses
`;

function config(name: string, corrid: 'TYPE_UINT64' | 'TYPE_STRING'): string {
  return `
name: "${name}"
backend: "python"
max_batch_size: 2
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "INFO" data_type: TYPE_STRING dims: [ 1 ] }
]
sequence_batching {
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: ${corrid} } ] }
  ]
  state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
            initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" } } ]
}
instance_group [ { kind: KIND_CPU count: 1 } ]
`;
}

describe('sequence batcher with a Python model', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      py_seq: { 'config.pbtxt': config('py_seq', 'TYPE_UINT64'), '1/model.py': MODEL_PY },
      py_seq_string: { 'config.pbtxt': config('py_seq_string', 'TYPE_STRING'), '1/model.py': MODEL_PY },
    });
    srv = await startServer({ modelRepositories: [repo] });
    assert.deepEqual(srv.server.startReport.failures, []);
  });

  after(async () => {
    await srv?.stop();
    if (repo) await removeDir(repo);
  });

  async function step(model: string, id: bigint | string, value: number, start: boolean, end: boolean): Promise<{ output: number; info: string }> {
    const response = await srv.server.infer({
      model,
      parameters: { sequence_id: id, sequence_start: start, sequence_end: end },
      inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: Int32Array.of(value) }],
    });
    const output = response.outputs.find((o) => o.name === 'OUTPUT')!;
    const info = response.outputs.find((o) => o.name === 'INFO')!;
    const bytes = info.data as Uint8Array;
    const out = output.data as Uint8Array;
    return {
      output: new DataView(out.buffer, out.byteOffset, out.byteLength).getInt32(0, true),
      info: Buffer.from(bytes.subarray(4)).toString(),
    };
  }

  it('passes correlation ids, flags, controls and state to the model', async () => {
    const big = 2n ** 60n + 3n;
    const a = await step('py_seq', big, 5, true, false);
    assert.deepEqual(a, { output: 5, info: `int:${big}:1:1` });
    const b = await step('py_seq', big, 6, false, true);
    assert.deepEqual(b, { output: 11, info: `int:${big}:2:0` });
    const s = await step('py_seq_string', 'conv-1', 2, true, true);
    assert.deepEqual(s, { output: 2, info: 'str:conv-1:3:1' });
  });
});
