/**
 * Backends Triton has and Nereid cannot run here (TensorRT, FIL, DALI,
 * vLLM, TensorRT-LLM, …) are refused at load with an error that names the backend, says why,
 * lists what this server supports and what to do instead; however the backend was named
 * (`backend`, `platform`, or only the model file, models-and-scheduling.md §1.4). The other
 * models keep serving.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { ModelVersionStatus } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { httpRequest, inferJson, makeRepository, removeDir, simpleCase, startServer, type RunningServer } from '../../helpers/harness.js';

const IO = 'max_batch_size: 8\ninput [ { name: "X" data_type: TYPE_FP32 dims: [ 4 ] } ]\noutput [ { name: "Y" data_type: TYPE_FP32 dims: [ 4 ] } ]\n';

/** Model name → [its files, the backend the error must name]. */
const CASES: Record<string, [Record<string, string | Uint8Array>, string]> = {
  trt_platform: [{ 'config.pbtxt': `name: "trt_platform"\nplatform: "tensorrt_plan"\n${IO}`, '1/model.plan': 'plan' }, 'tensorrt'],
  trt_backend: [{ 'config.pbtxt': `name: "trt_backend"\nbackend: "tensorrt"\n${IO}`, '1/model.plan': 'plan' }, 'tensorrt'],
  trt_file_only: [{ '1/model.plan': 'plan' }, 'tensorrt'],
  fil: [{ 'config.pbtxt': `name: "fil"\nbackend: "fil"\n${IO}`, '1/xgboost.model': 'x' }, 'fil'],
  dali: [{ 'config.pbtxt': `name: "dali"\nbackend: "dali"\n${IO}`, '1/model.dali': 'x' }, 'dali'],
  vllm: [{ 'config.pbtxt': `name: "vllm"\nbackend: "vllm"\n${IO}`, '1/model.json': '{}' }, 'vllm'],
  tensorrtllm: [{ 'config.pbtxt': `name: "tensorrtllm"\nbackend: "tensorrtllm"\n${IO}`, '1/.keep': '' }, 'tensorrtllm'],
};

let repo: string;
let srv: RunningServer;
let statuses: Map<string, ModelVersionStatus>;

before(async () => {
  const models: Record<string, Record<string, string | Uint8Array>> = { simple: { 'config.pbtxt': simpleModel().config!, '1/model.onnx': simpleModel().onnx.bytes } };
  for (const [name, [files]] of Object.entries(CASES)) models[name] = files;
  repo = await makeRepository(models);
  srv = await startServer({ modelRepositories: [repo] });
  statuses = new Map(srv.server.modelStatuses().map((s) => [s.name, s]));
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

describe('backends that cannot run here', () => {
  for (const [name, [, backend]] of Object.entries(CASES)) {
    it(`${name}: refused, naming backend '${backend}', why, what runs here and what to do`, () => {
      const s = statuses.get(name);
      assert.ok(s, `no status for ${name}`);
      assert.equal(s.state, 'UNAVAILABLE');
      assert.match(s.reason, new RegExp(`model '${name}' uses backend '${backend}', .* which Nereid does not support on this server: `));
      assert.match(s.reason, /Supported here: onnxruntime.*, and custom JavaScript backends \(docs\/backends\.md\)\. Instead, /);
      assert.doesNotMatch(s.reason, /unable to find backend/);
    });
  }

  it('the reasons say why: a GPU runtime, or a runtime that cannot be installed', () => {
    assert.match(statuses.get('trt_platform')!.reason, /TensorRT .*needs NVIDIA CUDA and a GPU.*export the model to ONNX and serve it with backend 'onnxruntime'/);
  });

  it('an explicit load of one answers with the same reason, and the server keeps serving', async () => {
    const explicit = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['simple'] });
    try {
      const reply = await httpRequest(`${explicit.url}/v2/repository/models/vllm/load`, { method: 'POST' });
      assert.equal(reply.status, 400);
      assert.match(reply.text, /load failed for model 'vllm'.*uses backend 'vllm', vLLM, which Nereid does not support on this server/);
      const c = simpleCase(1);
      assert.equal((await inferJson(explicit.url, 'simple', c.inputs)).status, 200);
    } finally {
      await explicit.stop();
    }
  });
});
