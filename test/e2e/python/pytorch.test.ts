/**
 * The PyTorch backend (`platform: "pytorch_libtorch"`): TorchScript models saved at test time by
 * Debian's torch, inputs and outputs mapped by Triton's `INPUT__0`/`OUTPUT__0` convention and by
 * forward() argument names, batches formed by the dynamic batcher split back per request.
 *
 * Needs /usr/bin/python3 with numpy and torch (npm test installs them); fails naming what is missing
 * otherwise.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { InferResponse } from '@nereid/server';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { requirePython, saveTorchScript } from '../../helpers/python.js';

const ADD_SUB_TORCH = `
class M(torch.nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor):
        return a + b, a - b
`;

/** forward(x, scale): y = x * scale, summed per row. Configured inputs in the other order. */
const NAMED_TORCH = `
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor, scale: torch.Tensor):
        y = x * scale
        return y.sum(dim=1, keepdim=True)
`;

const CONFIG_INDEXED = `
name: "torch_add_sub"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] }, { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
`;

const CONFIG_NAMED = `
name: "torch_named"
backend: "pytorch"
max_batch_size: 4
input [ { name: "scale" data_type: TYPE_FP32 dims: [ 3 ] }, { name: "x" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]
`;

function f32(r: InferResponse, name: string): number[] {
  const out = r.outputs.find((o) => o.name === name)!;
  return [...new Float32Array(new Uint8Array(out.data).buffer)];
}

describe('PyTorch backend: TorchScript models', () => {
  before(() => requirePython(['numpy', 'torch']));
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      torch_add_sub: { 'config.pbtxt': CONFIG_INDEXED },
      torch_named: { 'config.pbtxt': CONFIG_NAMED },
    });
    await saveTorchScript(join(repo, 'torch_add_sub', '1', 'model.pt'), ADD_SUB_TORCH);
    await saveTorchScript(join(repo, 'torch_named', '1', 'model.pt'), NAMED_TORCH);
    srv = await startServer({ modelRepositories: [repo] });
    assert.deepEqual(srv.server.startReport.failures, []);
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('maps INPUT__n / OUTPUT__n to argument and result positions', async () => {
    const r = await srv.server.infer({
      model: 'torch_add_sub',
      inputs: [
        { name: 'INPUT__0', datatype: 'FP32', shape: [1, 4], data: new Float32Array([1, 2, 3, 4]) },
        { name: 'INPUT__1', datatype: 'FP32', shape: [1, 4], data: new Float32Array([0.5, 0.5, 0.5, 0.5]) },
      ],
    });
    assert.deepEqual(f32(r, 'OUTPUT__0'), [1.5, 2.5, 3.5, 4.5]);
    assert.deepEqual(f32(r, 'OUTPUT__1'), [0.5, 1.5, 2.5, 3.5]);
    assert.equal(srv.server.modelMetadata('torch_add_sub').platform, 'pytorch_libtorch');
  });

  it('runs batches formed by the dynamic batcher and splits them back per request', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => {
        const rows = 1 + (i % 3);
        const a = Float32Array.from({ length: rows * 4 }, (_, k) => i * 100 + k);
        const b = Float32Array.from({ length: rows * 4 }, () => i);
        return srv.server
          .infer({
            model: 'torch_add_sub',
            inputs: [
              { name: 'INPUT__0', datatype: 'FP32', shape: [rows, 4], data: a },
              { name: 'INPUT__1', datatype: 'FP32', shape: [rows, 4], data: b },
            ],
          })
          .then((r) => ({ r, a, b, rows }));
      }),
    );
    for (const { r, a, b, rows } of results) {
      assert.deepEqual(r.outputs[0]!.shape, [rows, 4]);
      assert.deepEqual(f32(r, 'OUTPUT__0'), [...a].map((x, k) => x + b[k]!));
      assert.deepEqual(f32(r, 'OUTPUT__1'), [...a].map((x, k) => x - b[k]!));
    }
    const stats = srv.server.modelStatistics('torch_add_sub')[0]!;
    assert.ok(stats.batch_stats.some((s) => s.batch_size > 3), `expected a batch larger than one request: ${JSON.stringify(stats.batch_stats.map((s) => s.batch_size))}`);
  });

  it("maps inputs by forward()'s argument names when the configuration uses them", async () => {
    const r = await srv.server.infer({
      model: 'torch_named',
      inputs: [
        { name: 'x', datatype: 'FP32', shape: [2, 3], data: new Float32Array([1, 2, 3, 4, 5, 6]) },
        { name: 'scale', datatype: 'FP32', shape: [2, 3], data: new Float32Array([1, 1, 1, 10, 10, 10]) },
      ],
    });
    assert.deepEqual(r.outputs[0]!.shape, [2, 1]);
    assert.deepEqual(f32(r, 'y'), [6, 150]);
  });
});
