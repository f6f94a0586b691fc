/**
 * Triton-style `model.py` files served by the Python backend, end to end through the `Server`
 * facade and the HTTP frontend, each instance a real Python process (models-and-scheduling.md
 * §8.5): identity over FP32 and BYTES, Triton's add_sub example, dynamic batching, an
 * `async def execute`, `auto_complete_config` (§3.5), BLS calls into an ONNX model (sync, async,
 * errors), model control from Python, and the model's prints in the server log.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { chmod, rm } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import type { InferResponse } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { ADD_SUB_CONFIG, ADD_SUB_PY, IDENTITY_PY, PYTHON, identityConfig, requirePython, recordingLogger, waitUntil } from '../../helpers/python.js';

const ASYNC_PY = String.raw`
import asyncio
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        await asyncio.sleep(0.001)
        out = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x * 2)]))
        return out
`;

const AUTO_COMPLETE_PY = String.raw`
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input({"name": "IN", "data_type": "TYPE_INT64", "dims": [3]})
        auto_complete_model_config.add_output({"name": "OUT", "data_type": "TYPE_INT64", "dims": [3]})
        auto_complete_model_config.set_max_batch_size(4)
        auto_complete_model_config.set_dynamic_batching()
        return auto_complete_model_config

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy() + 1)])
                for r in requests]
`;

/** BLS into the ONNX `simple` model; parameter `mode`: sync, async, missing (an unknown model). */
const BLS_PY = String.raw`
import json
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            mode = json.loads(request.parameters()).get("mode", "sync")
            inputs = [pb_utils.get_input_tensor_by_name(request, "INPUT0"), pb_utils.get_input_tensor_by_name(request, "INPUT1")]
            target = "no_such_model" if mode == "missing" else "simple"
            bls = pb_utils.InferenceRequest(model_name=target, requested_output_names=["OUTPUT0", "OUTPUT1"], inputs=inputs)
            result = await bls.async_exec() if mode == "async" else bls.exec()
            if result.has_error():
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError("BLS failed: " + result.error().message())))
                continue
            out0 = pb_utils.get_output_tensor_by_name(result, "OUTPUT0")
            out1 = pb_utils.get_output_tensor_by_name(result, "OUTPUT1")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", out0.as_numpy()), pb_utils.Tensor("OUTPUT1", out1.as_numpy())]))
        return responses
`;

const BLS_CONFIG = `
name: "bls"
backend: "python"
max_batch_size: 8
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
`;

/** Reports the directory of the interpreter it runs under (EXECUTION_ENV_PATH's wrapper sets it). */
const WHERE_PY = String.raw`
import os
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())], parameters={"python": os.environ.get("PACKED_ENV_BIN", "")})
                for r in requests]
`;

/** Model control from Python: parameter op = ready | unload | load, on model "simple_ctl". */
const CONTROL_PY = String.raw`
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            op = json.loads(request.parameters())["op"]
            if op == "unload":
                pb_utils.unload_model("simple_ctl")
            elif op == "load":
                pb_utils.load_model("simple_ctl")
            ready = pb_utils.is_model_ready("simple_ctl")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("READY", np.array([ready], dtype=np.bool_))]))
        return responses
`;

const CONTROL_CONFIG = `
name: "control"
backend: "python"
input [ { name: "DUMMY" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "READY" data_type: TYPE_BOOL dims: [ 1 ] } ]
`;

function f32(r: InferResponse, i = 0): number[] {
  const d = r.outputs[i]!.data;
  return [...new Float32Array(d.buffer.slice(d.byteOffset, d.byteOffset + d.byteLength))];
}

function i32(r: InferResponse, i = 0): number[] {
  const d = r.outputs[i]!.data;
  return [...new Int32Array(d.buffer.slice(d.byteOffset, d.byteOffset + d.byteLength))];
}

describe('Python backend: Triton model.py files', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;
  const logger = recordingLogger();
  /** Where the server unpacked the EXECUTION_ENV_PATH archive. */
  let unpacked = '';

  before(async () => {
    repo = await makeRepository({
      identity_fp32: { 'config.pbtxt': identityConfig('identity_fp32', 'TYPE_FP32', { extra: 'dynamic_batching { }' }), '1/model.py': IDENTITY_PY },
      identity_bytes: { 'config.pbtxt': identityConfig('identity_bytes', 'TYPE_STRING'), '1/model.py': IDENTITY_PY },
      add_sub: { 'config.pbtxt': ADD_SUB_CONFIG, '1/model.py': ADD_SUB_PY },
      async_double: { 'config.pbtxt': identityConfig('async_double', 'TYPE_FP32'), '1/model.py': ASYNC_PY },
      auto_completed: { '1/model.py': AUTO_COMPLETE_PY },
      bls: { 'config.pbtxt': BLS_CONFIG, '1/model.py': BLS_PY },
      control: { 'config.pbtxt': CONTROL_CONFIG, '1/model.py': CONTROL_PY },
      packed_env: {
        'config.pbtxt': identityConfig('packed_env', 'TYPE_FP32', {
          extra: 'parameters { key: "EXECUTION_ENV_PATH" value: { string_value: "$$TRITON_MODEL_DIRECTORY/env.tar.gz" } }',
        }),
        '1/model.py': WHERE_PY,
        'env/bin/python3': `#!/bin/sh\nPACKED_ENV_BIN=$(dirname "$0") exec ${PYTHON} "$@"\n`,
      },
      simple: modelFiles(simpleModel()),
      simple_ctl: modelFiles(simpleModel({ name: 'simple_ctl' })),
    });
    // A conda-pack style environment: a .tar.gz holding bin/python3 (here a wrapper of the system one).
    await chmod(join(repo, 'packed_env', 'env', 'bin', 'python3'), 0o755);
    execFileSync('tar', ['-czf', join(repo, 'packed_env', 'env.tar.gz'), '-C', join(repo, 'packed_env', 'env'), '.']);
    await rm(join(repo, 'packed_env', 'env'), { recursive: true });
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['*'], logger });
    assert.deepEqual(srv.server.startReport.failures, []);
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
    if (unpacked) await removeDir(unpacked);
  });

  it('runs an identity model on FP32 and returns its response parameters', async () => {
    const data = new Float32Array([1.5, -2, 3.25, 1e-3]);
    const r = await srv.server.infer({
      model: 'identity_fp32',
      id: 'req-7',
      parameters: { echo: 'hello', big: 2n ** 60n + 1n },
      inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data }],
    });
    assert.deepEqual(r.outputs[0]!.shape, [1, 4]);
    assert.equal(r.outputs[0]!.datatype, 'FP32');
    assert.deepEqual(f32(r), [...data]);
    assert.equal(r.parameters['request_id'], 'req-7');
    assert.equal(r.parameters['echo'], 'hello');
    assert.equal(r.parameters['big'], '1152921504606846977', 'a 64-bit parameter reaches the model exactly');
    assert.equal(r.parameters['version'], '1');
  });

  it('carries BYTES tensors as numpy object arrays of bytes', async () => {
    const items = ['', 'héllo', 'a\u0000b', 'x'.repeat(1000)];
    const r = await srv.server.infer({
      model: 'identity_bytes',
      inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, items.length], data: items }],
    });
    const out = r.outputs[0]!;
    assert.equal(out.datatype, 'BYTES');
    assert.deepEqual(out.shape, [1, items.length]);
    const decoded: string[] = [];
    const view = Buffer.from(out.data.buffer, out.data.byteOffset, out.data.byteLength);
    for (let o = 0; o < view.byteLength; ) {
      const n = view.readUInt32LE(o);
      decoded.push(view.toString('utf8', o + 4, o + 4 + n));
      o += 4 + n;
    }
    assert.deepEqual(decoded, items);
  });

  it("runs Triton's add_sub example unchanged", async () => {
    const r = await srv.server.infer({
      model: 'add_sub',
      inputs: [
        { name: 'INPUT0', datatype: 'FP32', shape: [4], data: new Float32Array([1, 2, 3, 4]) },
        { name: 'INPUT1', datatype: 'FP32', shape: [4], data: new Float32Array([10, 20, 30, 40]) },
      ],
    });
    assert.deepEqual(f32(r, 0), [11, 22, 33, 44]);
    assert.deepEqual(f32(r, 1), [-9, -18, -27, -36]);
  });

  it('answers over HTTP like any other model', async () => {
    const res = await fetch(`${srv.url}/v2/models/add_sub/infer`, {
      method: 'POST',
      body: JSON.stringify({
        inputs: [
          { name: 'INPUT0', datatype: 'FP32', shape: [4], data: [1, 1, 1, 1] },
          { name: 'INPUT1', datatype: 'FP32', shape: [4], data: [0.5, 0.5, 0.5, 0.5] },
        ],
      }),
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { outputs: { name: string; data: number[] }[] };
    assert.deepEqual(body.outputs.find((o) => o.name === 'OUTPUT1')!.data, [0.5, 0.5, 0.5, 0.5]);
  });

  it('gets batches of several requests from the dynamic batcher and answers each in order', async () => {
    const requests = Array.from({ length: 24 }, (_, i) =>
      srv.server.infer({ model: 'identity_fp32', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 3], data: new Float32Array([i, i + 0.5, -i]) }] }),
    );
    const results = await Promise.all(requests);
    results.forEach((r, i) => assert.deepEqual(f32(r), [i, i + 0.5, -i]));
    const largest = Math.max(...results.map((r) => Number(r.parameters['batch'])));
    assert.ok(largest > 1, `expected a batch of several requests, the largest had ${largest}`);
  });

  it('awaits an async def execute', async () => {
    const r = await srv.server.infer({ model: 'async_double', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 2], data: new Float32Array([3, 4]) }] });
    assert.deepEqual(f32(r), [6, 8]);
  });

  it('completes the configuration with auto_complete_config', async () => {
    const config = srv.server.modelConfig('auto_completed');
    assert.equal(config.max_batch_size, 4);
    assert.ok(config.dynamic_batching !== undefined);
    assert.deepEqual(config.input.map((t) => [t.name, t.data_type, t.dims]), [['IN', 'TYPE_INT64', [3]]]);
    assert.deepEqual(config.output.map((t) => [t.name, t.data_type, t.dims]), [['OUT', 'TYPE_INT64', [3]]]);
    const r = await srv.server.infer({ model: 'auto_completed', inputs: [{ name: 'IN', datatype: 'INT64', shape: [1, 3], data: new BigInt64Array([1n, 2n, 2n ** 40n]) }] });
    const d = r.outputs[0]!.data;
    assert.deepEqual([...new BigInt64Array(d.buffer.slice(d.byteOffset, d.byteOffset + 24))], [2n, 3n, 2n ** 40n + 1n]);
  });

  for (const mode of ['sync', 'async'] as const) {
    it(`calls an ONNX model through BLS (${mode === 'sync' ? 'exec' : 'async_exec'})`, async () => {
      const a = Int32Array.from({ length: 16 }, (_, i) => i * 3);
      const b = Int32Array.from({ length: 16 }, (_, i) => 100 - i);
      const r = await srv.server.infer({
        model: 'bls',
        parameters: { mode },
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
        ],
      });
      assert.deepEqual(i32(r, 0), [...a].map((x, i) => x + b[i]!));
      assert.deepEqual(i32(r, 1), [...a].map((x, i) => x - b[i]!));
    });
  }

  it('returns BLS errors as responses with has_error()', async () => {
    const data = new Int32Array(16);
    await assert.rejects(
      srv.server.infer({
        model: 'bls',
        parameters: { mode: 'missing' },
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data },
        ],
      }),
      (err: NereidError) => {
        // The model's own error response, with its message unchanged (as Triton passes it on).
        assert.equal(err.message, "BLS failed: Request for unknown model: 'no_such_model' is not found");
        return true;
      },
    );
  });

  it('loads, unloads and checks models from Python (explicit mode)', async () => {
    const call = async (op: string) => {
      const r = await srv.server.infer({ model: 'control', parameters: { op }, inputs: [{ name: 'DUMMY', datatype: 'INT32', shape: [1], data: new Int32Array(1) }] });
      return r.outputs[0]!.data[0] === 1;
    };
    assert.equal(await call('ready'), true);
    assert.equal(await call('unload'), false);
    assert.throws(() => srv.server.isModelReady('simple_ctl'));
    assert.equal(await call('load'), true);
    assert.equal(srv.server.isModelReady('simple_ctl'), true);
  });

  it('runs a model with the interpreter of its EXECUTION_ENV_PATH archive', async () => {
    const r = await srv.server.infer({ model: 'packed_env', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 1], data: new Float32Array([1]) }] });
    const python = String(r.parameters['python']);
    assert.match(python, /nereid-env-[0-9a-f]{16}\/bin$/);
    unpacked = dirname(python);
  });

  it("puts the model's prints in the server log, prefixed with model and instance", async () => {
    const line = "I [model 'identity_fp32' instance 'identity_fp32_0'] initialize identity_fp32 identity_fp32_0";
    await waitUntil(() => logger.lines.includes(line), `the line ${line}`, 5_000).catch(() => undefined);
    assert.ok(logger.lines.includes(line), `no initialize line in:\n${logger.lines.join('\n')}`);
  });
});
