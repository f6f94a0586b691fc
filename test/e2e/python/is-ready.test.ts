/**
 * A Python model's `is_ready()` (models-and-scheduling.md §8.5) behind the model-ready checks:
 * HTTP `GET /v2/models/{m}/ready` and gRPC `ModelReady` ask it (sync or `async def`), an error
 * in it means not ready, and a model without it is ready while its stub runs. Inference is not
 * affected by the answer.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, HttpClient } from '@nereid/client';
import { serveRepository, type RunningGrpcServer, type ServedRepository } from '../../helpers/harness.js';
import { IDENTITY_PY, identityConfig, requirePython } from '../../helpers/python.js';

/** Ready while the file named by the model's parameter `marker` exists. */
function markerModel(asyncReady: boolean): string {
  return String.raw`
import json
import os

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.marker = json.loads(args["model_config"])["parameters"]["marker"]["string_value"]

    ${asyncReady ? 'async ' : ''}def is_ready(self):
        return os.path.exists(self.marker)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
`;
}

const RAISING_PY = String.raw`
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def is_ready(self):
        raise RuntimeError("not today")

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
`;

describe('Python backend: is_ready()', () => {
  before(() => requirePython(['numpy']));
  let served: ServedRepository;
  let srv: RunningGrpcServer;
  let http: HttpClient;
  let grpc: GrpcClient;
  let marker: string;

  const markerConfig = (name: string) =>
    identityConfig(name, 'TYPE_FP32', { extra: `parameters { key: "marker" value { string_value: "${marker}" } }` });

  before(async () => {
    marker = join(tmpdir(), `nereid-ready-${randomUUID()}`);
    served = await serveRepository({
      sync_ready: { 'config.pbtxt': markerConfig('sync_ready'), '1/model.py': markerModel(false) },
      async_ready: { 'config.pbtxt': markerConfig('async_ready'), '1/model.py': markerModel(true) },
      raising_ready: { 'config.pbtxt': identityConfig('raising_ready', 'TYPE_FP32'), '1/model.py': RAISING_PY },
      no_probe: { 'config.pbtxt': identityConfig('no_probe', 'TYPE_FP32'), '1/model.py': IDENTITY_PY },
    });
    ({ srv, http, grpc } = served);
  });

  after(async () => {
    await served?.close();
    await rm(marker, { force: true });
  });

  it("follows the model's answer over HTTP and gRPC, sync and async", async () => {
    for (const model of ['sync_ready', 'async_ready']) {
      assert.equal(await http.isModelReady(model), false, `${model} over HTTP before the marker exists`);
      assert.equal(await grpc.isModelReady(model), false, `${model} over gRPC before the marker exists`);
    }
    await writeFile(marker, '');
    for (const model of ['sync_ready', 'async_ready']) {
      assert.equal(await http.isModelReady(model), true, `${model} over HTTP`);
      assert.equal(await grpc.isModelReady(model), true, `${model} over gRPC`);
    }
    await rm(marker);
    assert.equal(await http.isModelReady('sync_ready'), false);
    // Not being ready is the model's statement, not a refusal: requests still run.
    const r = await srv.server.infer({ model: 'sync_ready', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 2], data: new Float32Array([1, 2]) }] });
    assert.deepEqual([...new Float32Array(r.outputs[0]!.data.slice().buffer)], [1, 2]);
  });

  it('counts an is_ready() that raises as not ready, and a model without one as ready', async () => {
    assert.equal(await http.isModelReady('raising_ready'), false);
    assert.equal(await grpc.isModelReady('raising_ready'), false);
    assert.equal(await http.isModelReady('no_probe'), true);
    assert.equal(await grpc.isModelReady('no_probe'), true);
  });
});
