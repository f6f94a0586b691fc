/**
 * Every framework in one server and one ensemble: a TensorFlow SavedModel step, an OpenVINO IR
 * step, an ONNX Runtime step and a TorchScript step, chained, each run by its own runtime (the
 * runtimes environment's TensorFlow and OpenVINO, ONNX Runtime in the server, Debian's torch), over
 * HTTP and gRPC, batched requests included; the answer is checked element by element against the
 * chain computed here in FP32, and every step's statistics count the rows it ran.
 *
 * Needs the runtimes environment (`node scripts/setup.mjs runtimes`) and /usr/bin/python3 with torch
 * (`npm test` makes both); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GrpcClient } from '@nereid/client';
import { OnnxGraphBuilder } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { postInfer } from '../../helpers/http.js';
import { requireOpenVino, saveOpsetModel, writeOnnx } from '../../helpers/openvino.js';
import { requirePython, saveTorchScript } from '../../helpers/python.js';
import { makeTensorFlowModels, requireTensorFlow } from '../../helpers/tensorflow.js';

/** TF `scale` signature of the helper's `signatures` SavedModel: Y = X * 2.5 + 1 over FP32 [-1, 3]. */
const TF_STEP = `
name: "tf_step"
platform: "tensorflow_savedmodel"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 3 ] } ]
parameters { key: "TF_SIGNATURE_DEF" value: { string_value: "scale" } }
`;

/** OpenVINO: SQ = IN * IN. */
const OV_STEP = `
name: "ov_step"
backend: "openvino"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "SQ" data_type: TYPE_FP32 dims: [ 3 ] } ]
`;

/** ONNX Runtime: S = A + [0.5, -1, 2]. */
const ONNX_STEP = `
name: "onnx_step"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "S" data_type: TYPE_FP32 dims: [ 3 ] } ]
`;

/** TorchScript: OUTPUT__0 = INPUT__0 - 5. */
const TORCH_STEP = `
name: "torch_step"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
`;

const ENSEMBLE = `
name: "four_frameworks"
platform: "ensemble"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "V" data_type: TYPE_FP32 dims: [ 3 ] } ]
ensemble_scheduling {
  step [
    { model_name: "tf_step" model_version: -1 input_map { key: "X" value: "X" } output_map { key: "Y" value: "y" } },
    { model_name: "ov_step" model_version: -1 input_map { key: "IN" value: "y" } output_map { key: "SQ" value: "sq" } },
    { model_name: "onnx_step" model_version: -1 input_map { key: "A" value: "sq" } output_map { key: "S" value: "s" } },
    { model_name: "torch_step" model_version: -1 input_map { key: "INPUT__0" value: "s" } output_map { key: "OUTPUT__0" value: "V" } }
  ]
}
`;

const OFFSET = [0.5, -1, 2];

/** The chain in FP32, as the four runtimes compute it step by step. */
function expected(x: readonly number[]): number[] {
  const f = Math.fround;
  return x.map((v, i) => {
    const y = f(f(f(v) * 2.5) + 1);
    const sq = f(y * y);
    const s = f(sq + f(OFFSET[i % 3]!));
    return f(s - 5);
  });
}

/**
 * Within 1% (of the value, or of 1 near 0): OpenVINO's CPU plugin computes FP32 models in bfloat16
 * on CPUs that have it (docs/backends.md), 8 bits of mantissa.
 */
function close(actual: readonly number[], want: readonly number[], what: string): void {
  assert.equal(actual.length, want.length, `${what}: ${actual.length} elements, expected ${want.length}`);
  actual.forEach((v, i) => assert.ok(Math.abs(v - want[i]!) <= 1e-2 * Math.max(1, Math.abs(want[i]!)), `${what}[${i}]: ${v}, expected ${want[i]}`));
}

const f32 = (data: Uint8Array) => [...new Float32Array(new Uint8Array(data).buffer)];

describe('TensorFlow, OpenVINO, ONNX Runtime and TorchScript in one server and one ensemble', () => {
  let repo: string;
  let srv: RunningGrpcServer;

  before(async () => {
    await requireTensorFlow();
    await requireOpenVino();
    await requirePython(['numpy', 'torch']);
    repo = await makeRepository({
      tf_step: { 'config.pbtxt': TF_STEP },
      ov_step: { 'config.pbtxt': OV_STEP },
      onnx_step: { 'config.pbtxt': ONNX_STEP },
      torch_step: { 'config.pbtxt': TORCH_STEP },
      four_frameworks: { 'config.pbtxt': ENSEMBLE, '1/.keep': '' },
    });
    await makeTensorFlowModels([{ kind: 'savedmodel', model: 'signatures', path: join(repo, 'tf_step', '1', 'model.savedmodel') }]);
    await saveOpsetModel(
      join(repo, 'ov_step', '1', 'model.xml'),
      `x = ops.parameter([-1, 3], np.float32, name="IN")
x.output(0).get_tensor().set_names({"IN"})
y = ops.multiply(x, x)
y.output(0).get_tensor().set_names({"SQ"})
model = ov.Model([y], [x], "square")`,
    );
    await writeOnnx(
      join(repo, 'onnx_step', '1', 'model.onnx'),
      new OnnxGraphBuilder('offset')
        .input('A', 'FLOAT', ['batch', 3])
        .initializer('OFFSET', 'FLOAT', [3], new Float32Array(OFFSET))
        .output('S', 'FLOAT', ['batch', 3])
        .node('Add', ['A', 'OFFSET'], ['S']),
    );
    await saveTorchScript(
      join(repo, 'torch_step', '1', 'model.pt'),
      `
class M(torch.nn.Module):
    def forward(self, x: torch.Tensor):
        return x - 5
`,
    );
    srv = await startServer({ modelRepositories: [repo], grpc: true });
    assert.deepEqual(srv.server.startReport.failures, []);
  });

  after(async () => {
    await srv?.stop();
    if (repo) await removeDir(repo);
  });

  it('lists each step with its own backend', () => {
    const platforms = Object.fromEntries(['tf_step', 'ov_step', 'onnx_step', 'torch_step', 'four_frameworks'].map((m) => [m, srv.server.modelMetadata(m).platform]));
    assert.deepEqual(platforms, {
      tf_step: 'tensorflow_savedmodel',
      ov_step: 'openvino',
      onnx_step: 'onnxruntime_onnx',
      torch_step: 'pytorch_libtorch',
      four_frameworks: 'ensemble',
    });
  });

  it('answers the chain over HTTP', async () => {
    const x = [1, -2, 0.25, 3, 0, -0.5];
    const reply = await postInfer(srv.url, 'four_frameworks', { inputs: [{ name: 'X', datatype: 'FP32', shape: [2, 3], data: x }] });
    assert.equal(reply.status, 200, reply.body.toString());
    const out = (JSON.parse(reply.body.toString()) as { outputs: { name: string; shape: number[]; data: number[] }[] }).outputs[0]!;
    assert.equal(out.name, 'V');
    assert.deepEqual(out.shape, [2, 3]);
    close(out.data, expected(x), 'V over HTTP');
  });

  it('answers the chain over gRPC', async () => {
    const x = [0.5, 1.5, -3];
    const client = new GrpcClient(srv.grpcTarget);
    try {
      const result = await client.infer({ model: 'four_frameworks', inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 3], data: new Float32Array(x) }] });
      assert.deepEqual(result.shape('V'), [1, 3]);
      close(Array.from(result.typed('V') as Float32Array), expected(x), 'V over gRPC');
    } finally {
      client.close();
    }
  });

  it("counts the ensemble's rows in every step's statistics", async () => {
    const steps = ['tf_step', 'ov_step', 'onnx_step', 'torch_step'];
    const before = steps.map((m) => srv.server.modelStatistics(m)[0]!.inference_count);
    await srv.server.infer({ model: 'four_frameworks', inputs: [{ name: 'X', datatype: 'FP32', shape: [3, 3], data: new Float32Array(9).fill(0.5) }] });
    const after = steps.map((m) => srv.server.modelStatistics(m)[0]!.inference_count);
    assert.deepEqual(
      after.map((n, i) => Number(n - before[i]!)),
      [3, 3, 3, 3],
    );
  });

  it('answers concurrent requests of several batch sizes, each with its own rows', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => {
        const rows = 1 + (i % 3);
        const x = Array.from({ length: rows * 3 }, (_, k) => (i - 6) / 4 + k / 8);
        return srv.server
          .infer({ model: 'four_frameworks', inputs: [{ name: 'X', datatype: 'FP32', shape: [rows, 3], data: new Float32Array(x) }] })
          .then((r) => ({ r, x, rows }));
      }),
    );
    for (const { r, x, rows } of results) {
      assert.deepEqual(r.outputs[0]!.shape, [rows, 3]);
      close(f32(r.outputs[0]!.data), expected(x), `V for ${rows} rows`);
    }
  });
});
