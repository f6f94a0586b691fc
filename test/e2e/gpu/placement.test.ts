/**
 * GPU and MIG placement (docs/resources.md) on machines described by recorded nvidia-smi output:
 * the real server runs the real discovery against the fake nvidia-smi of test/helpers/nvidia-smi
 * (on PATH), and Python models report, through their outputs, the CUDA_VISIBLE_DEVICES their stub
 * runs with and the `model_instance_device_id` and kind they were given. No GPU is used.
 *
 * Needs /usr/bin/python3 with numpy (and torch for the PyTorch case).
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { simpleModel } from '@nereid/testkit';
import type { NereidError } from '@nereid/protocol';
import { makeRepository, removeDir, startServer, type ModelFiles, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { requirePython, saveTorchScript, waitUntil } from '../../helpers/python.js';

const FAKE_BIN = fileURLToPath(new URL('../../../../test/helpers/nvidia-smi/bin', import.meta.url));

const T4 = ['GPU-3f1c9a52-6b1e-4d8a-9c0e-1a2b3c4d5e60', 'GPU-8e2d7b41-0c3f-4a9b-8d1e-6f5a4b3c2d10'];
const A100_MIG = ['MIG-4b2d6e8f-1a3c-5e7a-9b1d-3f5a7c9e1b2d', 'MIG-7e9a1c3e-5b7d-5f1a-8c2e-4a6c8e0a2c4e', 'MIG-a1c3e5a7-9c1e-5b3d-8f5a-6c8e0a2c4e6a'];
const H100_MIG_3G = 'MIG-2f4a6c8e-0b2d-5f4a-9c6e-8b0d2f4a6c8e';
const H100_WHOLE = 'GPU-c4b3a291-8f7e-4d6c-b5a4-3e2f1d0c9b8a';

/** Answers WHERE = "<instance>|<CUDA_VISIBLE_DEVICES>|<kind>|<device id>", slowly enough that concurrent requests spread over the instances. */
const WHERE_PY = String.raw`
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.where = "|".join([args["model_instance_name"], os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>"),
                               args["model_instance_kind"], args["model_instance_device_id"]])

    def execute(self, requests):
        time.sleep(0.25)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("WHERE", np.array([self.where.encode()], dtype=np.object_))])
                for _ in requests]
`;

/** Answers SPAN = [start, end] of its execute (wall-clock seconds), after 0.4 s of sleep. */
const SPAN_PY = String.raw`
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        start = time.time()
        time.sleep(0.4)
        span = np.array([start, time.time()], dtype=np.float64)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("SPAN", span)]) for _ in requests]
`;

function spanModel(name: string, gpus: string): ModelFiles {
  const group = `instance_group [ { kind: KIND_GPU count: ${gpus === '[ 0 ]' ? 2 : 1} gpus: ${gpus} rate_limiter { resources [ { name: "R" count: 1 } ] } } ]`;
  return pythonModel(name, SPAN_PY, 'output [ { name: "SPAN" data_type: TYPE_FP64 dims: [ 2 ] } ]', group);
}

/** Whether two concurrent requests to `model` ran at the same time. */
async function ranTogether(srv: RunningServer, model: string): Promise<boolean> {
  const spans = await Promise.all(
    [0, 1].map(async () => {
      const r = await srv.server.infer({ model, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: new Int32Array([1]) }] });
      const d = r.outputs[0]!.data;
      return new Float64Array(d.buffer.slice(d.byteOffset, d.byteOffset + 16));
    }),
  );
  const [a, b] = spans as [Float64Array, Float64Array];
  return a[0]! < b[1]! && b[0]! < a[1]!;
}

/** A Python model with input IN (INT32 [1]), `output` and `extra` configuration. */
function pythonModel(name: string, source: string, output: string, extra: string): ModelFiles {
  return {
    'config.pbtxt': `
name: "${name}"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
${output}
${extra}
`,
    '1/model.py': source,
  };
}

function whereModel(name: string, extra: string): ModelFiles {
  return pythonModel(name, WHERE_PY, 'output [ { name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] } ]', extra);
}

/** Each instance's report (instance name → [visible, kind, device id]), from concurrent requests until all `count` answered. */
async function placements(srv: RunningServer, model: string, count: number): Promise<Map<string, [string, string, string]>> {
  const seen = new Map<string, [string, string, string]>();
  for (let round = 0; round < 20 && seen.size < count; round++) {
    const answers = await Promise.all(
      Array.from({ length: count }, () => srv.server.infer({ model, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: new Int32Array([1]) }] })),
    );
    for (const a of answers) {
      const data = a.outputs[0]!.data;
      const text = Buffer.from(data.buffer, data.byteOffset + 4, data.byteLength - 4).toString();
      const [instance, visible, kind, device] = text.split('|') as [string, string, string, string];
      seen.set(instance, [visible, kind, device]);
    }
  }
  return new Map([...seen].sort(([a], [b]) => a.localeCompare(b)));
}

/** The error loading `model` fails with (fails the test if it loads). */
async function loadRefusal(srv: RunningServer, model: string): Promise<NereidError> {
  return srv.server.loadModel(model).then(
    () => assert.fail(`model '${model}' loaded`),
    (err: unknown) => err as NereidError,
  );
}

/** Unloads `model` and waits until its versions are released (an unload finishes in the background). */
async function unload(srv: RunningServer, model: string): Promise<void> {
  await srv.server.unloadModel(model);
  await waitUntil(() => srv.server.modelStatuses().every((s) => s.name !== model || s.state !== 'UNLOADING'), `'${model}' to unload`);
}

/** Starts a server whose nvidia-smi answers from fixture set `fixture`. */
async function serverOn(fixture: string, repo: string, options: { explicit?: boolean } = {}): Promise<RunningServer> {
  process.env['FAKE_NVIDIA_SMI_FIXTURE'] = fixture;
  return startServer({
    modelRepositories: [repo],
    ...(options.explicit ? { modelControlMode: 'explicit' as const } : {}),
    metrics: { intervalMs: 100 },
  });
}

const PATH = process.env['PATH'];
before(async () => {
  await requirePython(['numpy']);
  process.env['PATH'] = `${FAKE_BIN}:${PATH}`;
});
after(() => {
  process.env['PATH'] = PATH;
  delete process.env['FAKE_NVIDIA_SMI_FIXTURE'];
});

describe('two GPUs without MIG', () => {
  let repo: string;
  let srv: RunningServer;
  before(async () => {
    const onnxGpu = simpleModel().config!.replace('name: "simple"', 'name: "onnx_gpu"') + 'instance_group [ { kind: KIND_GPU } ]\n';
    repo = await makeRepository({
      spread: whereModel('spread', 'instance_group [ { kind: KIND_GPU count: 2 gpus: [ 0, 1 ] } ]'),
      shared: whereModel('shared', 'instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]\nparameters { key: "cuda_visible_devices" value { string_value: "server" } }'),
      auto_python: whereModel('auto_python', ''),
      simple: modelFiles(simpleModel()),
      onnx_gpu: modelFiles(simpleModel(), { config: onnxGpu }),
    });
    srv = await serverOn('two-gpus', repo);
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('finds both GPUs', () => {
    assert.deepEqual(srv.server.devices.devices.map((d) => [d.index, d.uuid, d.name]), [
      [0, T4[0], 'Tesla T4'],
      [1, T4[1], 'Tesla T4'],
    ]);
  });

  it('count: 2, gpus: [0, 1] puts two instances on each GPU, each stub seeing only its own as its one device', async () => {
    assert.deepEqual(
      [...(await placements(srv, 'spread', 4))],
      [
        ['spread_0_0', [T4[0], 'GPU', '0']],
        ['spread_0_1', [T4[1], 'GPU', '1']],
        ['spread_0_2', [T4[0], 'GPU', '0']],
        ['spread_0_3', [T4[1], 'GPU', '1']],
      ],
    );
  });

  it("cuda_visible_devices: server shows the server's GPUs in its order, so cuda:<device id> is the instance's GPU", async () => {
    assert.deepEqual([...(await placements(srv, 'shared', 1))], [['shared_0_0', [T4.join(','), 'GPU', '1']]]);
  });

  it('KIND_AUTO makes a Python model KIND_GPU on every GPU, and keeps an ONNX model on the CPU', async () => {
    assert.deepEqual(
      srv.server.modelConfig('auto_python').instance_group.map((g) => [g.kind, g.count, g.gpus]),
      [['KIND_GPU', 1, [0, 1]]],
    );
    assert.deepEqual([...(await placements(srv, 'auto_python', 2))].map(([, [visible]]) => visible), T4);
    assert.deepEqual(srv.server.modelConfig('simple').instance_group.map((g) => [g.kind, g.gpus]), [['KIND_CPU', []]]);
  });

  it('an explicit KIND_GPU ONNX model fails: this ONNX Runtime build runs on CPU only', () => {
    const failure = srv.server.startReport.failures.find((f) => f.name === 'onnx_gpu');
    assert.match(failure?.reason ?? '', /model 'onnx_gpu': instance group 'onnx_gpu_0' has kind KIND_GPU, but the onnxruntime backend of this build runs on CPU only; use KIND_CPU/);
    assert.equal(srv.server.startReport.failures.length, 1);
  });

  it("reports each stub's GPU memory (nvidia-smi --query-compute-apps) as GPU entries of the statistics' memory_usage", async () => {
    const gpuEntries = () =>
      srv.server
        .modelStatistics('spread')[0]!
        .memory_usage.filter((m) => m.type === 'GPU')
        .map((m) => [m.id, Number(m.byte_size) / 2 ** 20]);
    await waitUntil(() => gpuEntries().length === 2, 'GPU entries in memory_usage');
    // Two stubs on each GPU, each using the 1536 MiB the fake nvidia-smi reports per process.
    assert.deepEqual(gpuEntries(), [
      [0, 3072],
      [1, 3072],
    ]);
    const cpu = srv.server.modelStatistics('spread')[0]!.memory_usage.find((m) => m.type === 'CPU');
    assert.ok(cpu !== undefined && Number(cpu.byte_size) > 0 && Number(cpu.byte_size) < 1536 * 2 ** 20 * 4);
  });

  it('reports the nv_gpu_* families with gpu_uuid labels and the values nvidia-smi gave', async () => {
    let text = '';
    for (let i = 0; i < 50 && !text.includes('nv_energy_consumption{'); i++) {
      await new Promise((r) => setTimeout(r, 100));
      text = await srv.server.metrics.text();
    }
    const line = (family: string, uuid: string) => new RegExp(`^${family}\\{gpu_uuid="${uuid}"\\} (\\S+)$`, 'm').exec(text)?.[1];
    assert.equal(line('nv_gpu_utilization', T4[0]), '0.37');
    assert.equal(line('nv_gpu_utilization', T4[1]), '0');
    assert.equal(line('nv_gpu_memory_total_bytes', T4[0]), String(15360 * 1024 * 1024));
    assert.equal(line('nv_gpu_memory_used_bytes', T4[1]), String(1027 * 1024 * 1024));
    assert.equal(line('nv_gpu_power_usage', T4[0]), '27.53');
    assert.equal(line('nv_gpu_power_limit', T4[1]), '70');
    assert.ok(Number(line('nv_energy_consumption', T4[0])) >= 0);
    assert.match(text, /# TYPE nv_energy_consumption counter/);
  });
});

describe('the rate limiter pools per-device resources by each instance\'s GPU', () => {
  let repo: string;
  let srv: RunningServer;
  before(async () => {
    repo = await makeRepository({ one_gpu: spanModel('one_gpu', '[ 0 ]'), two_gpus: spanModel('two_gpus', '[ 0, 1 ]') });
    process.env['FAKE_NVIDIA_SMI_FIXTURE'] = 'two-gpus';
    srv = await startServer({ modelRepositories: [repo], rateLimit: 'execution_count' });
    assert.deepEqual(srv.server.startReport.failures, []);
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('two instances on one GPU take turns for a resource of count 1; on two GPUs they run together', async () => {
    assert.equal(await ranTogether(srv, 'one_gpu'), false);
    assert.equal(await ranTogether(srv, 'two_gpus'), true);
  });
});

describe('A100 40GB in MIG mode (3g.20gb + 2 × 1g.5gb)', () => {
  let repo: string;
  let srv: RunningServer;
  before(async () => {
    repo = await makeRepository({
      by_uuid: whereModel('by_uuid', `instance_group [ { kind: KIND_GPU } ]\nparameters { key: "mig_devices" value { string_value: "${A100_MIG[1]}" } }`),
      same_uuid: whereModel('same_uuid', `instance_group [ { kind: KIND_GPU } ]\nparameters { key: "mig_devices" value { string_value: "${A100_MIG[1]}" } }`),
      by_profile: whereModel('by_profile', 'instance_group [ { name: "small" kind: KIND_GPU count: 1 } ]\nparameters { key: "mig_devices.small" value { string_value: "1g.5gb:2" } }'),
      big: whereModel('big', 'instance_group [ { kind: KIND_GPU count: 2 } ]\nparameters { key: "mig_devices" value { string_value: "3g.20gb" } }'),
      whole: whereModel('whole', 'instance_group [ { kind: KIND_GPU gpus: [ 0 ] } ]'),
    });
    srv = await serverOn('a100-mig', repo, { explicit: true });
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('finds the MIG instances with their profiles and memory', () => {
    assert.deepEqual(
      srv.server.devices.devices.filter((d) => d.mig).map((d) => [d.uuid, d.mig!.profile, d.mig!.memoryBytes / 2 ** 20, d.mig!.parentIndex]),
      [
        [A100_MIG[0], '3g.20gb', 19968, 0],
        [A100_MIG[1], '1g.5gb', 4864, 0],
        [A100_MIG[2], '1g.5gb', 4864, 0],
      ],
    );
  });

  it('by UUID: the stub sees that MIG instance; a second model asking for it is refused naming the holder, and loads once it is freed', async () => {
    await srv.server.loadModel('by_uuid');
    assert.deepEqual([...(await placements(srv, 'by_uuid', 1))], [['by_uuid_0_0', [A100_MIG[1], 'GPU', '0']]]);
    const refused = await loadRefusal(srv, 'same_uuid');
    assert.match(refused.message, new RegExp(`model 'same_uuid': MIG instance ${A100_MIG[1]} \\(1g.5gb on GPU 0\\) is held by model 'by_uuid'`));
    await unload(srv, 'by_uuid');
    await srv.server.loadModel('same_uuid');
    assert.deepEqual([...(await placements(srv, 'same_uuid', 1))].map(([, [v]]) => v), [A100_MIG[1]]);
    await unload(srv, 'same_uuid');
  });

  it('by profile: 1g.5gb:2 spreads the group one instance per MIG instance; none is left for another', async () => {
    await srv.server.loadModel('by_profile');
    assert.deepEqual(
      [...(await placements(srv, 'by_profile', 2))],
      [
        ['small_0', [A100_MIG[1], 'GPU', '0']],
        ['small_1', [A100_MIG[2], 'GPU', '0']],
      ],
    );
    const refused = await loadRefusal(srv, 'by_uuid');
    assert.match(refused.message, /held by model 'by_profile'/);
    await unload(srv, 'by_profile');
  });

  it('count: 2 on one MIG instance runs both instances there', async () => {
    await srv.server.loadModel('big');
    assert.deepEqual([...(await placements(srv, 'big', 2))].map(([, [v]]) => v), [A100_MIG[0], A100_MIG[0]]);
    await unload(srv, 'big');
  });

  it('a whole GPU in MIG mode is refused, naming the parameter to use', async () => {
    const refused = await loadRefusal(srv, 'whole');
    assert.match(refused.message, /instance group 'whole_0' is placed on GPU 0 \(NVIDIA A100-SXM4-40GB\), which is in MIG mode: .*parameter 'mig_devices'/);
  });
});

describe('H100 80GB: one GPU in MIG mode (3g.40gb + 4 × 1g.10gb), one whole', () => {
  let repo: string;
  let srv: RunningServer;
  before(async () => {
    repo = await makeRepository({
      mixed: whereModel(
        'mixed',
        `instance_group [ { name: "mig" kind: KIND_GPU }, { name: "whole" kind: KIND_GPU gpus: [ 1 ] } ]
parameters { key: "mig_devices.mig" value { string_value: "3g.40gb,1g.10gb:3" } }`,
      ),
      auto: whereModel('auto', ''),
    });
    srv = await serverOn('h100-mig', repo);
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('places one group on MIG instances by profile and another on the whole GPU', async () => {
    assert.deepEqual(srv.server.startReport.failures, []);
    const seen = await placements(srv, 'mixed', 5);
    assert.deepEqual([...seen.keys()], ['mig_0', 'mig_1', 'mig_2', 'mig_3', 'whole_0']);
    assert.equal(seen.get('mig_0')![0], H100_MIG_3G);
    assert.equal(new Set([...seen.values()].map(([v]) => v)).size, 5);
    assert.ok(['mig_1', 'mig_2', 'mig_3'].every((n) => seen.get(n)![0].startsWith('MIG-') && seen.get(n)![2] === '0'));
    assert.deepEqual(seen.get('whole_0'), [H100_WHOLE, 'GPU', '1']);
    assert.deepEqual(srv.server.modelConfig('mixed').instance_group.map((g) => [g.name, g.gpus]), [
      ['mig', [0]],
      ['whole', [1]],
    ]);
  });

  it('KIND_AUTO uses only the whole GPU (a GPU in MIG mode is used through named MIG instances)', async () => {
    assert.deepEqual([...(await placements(srv, 'auto', 1))].map(([, v]) => v), [[H100_WHOLE, 'GPU', '1']]);
  });
});

describe('KIND_GPU where there is no GPU, and PyTorch without CUDA', () => {
  let repo: string;
  before(async () => {
    repo = await makeRepository({
      gpu_python: whereModel('gpu_python', 'instance_group [ { kind: KIND_GPU } ]'),
      torch_gpu: {
        'config.pbtxt': `
name: "torch_gpu"
platform: "pytorch_libtorch"
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] } ]
instance_group [ { kind: KIND_GPU gpus: [ 1 ] } ]
`,
      },
    });
  });
  after(async () => {
    await removeDir(repo);
  });

  it("without nvidia-smi a KIND_GPU model fails with Triton's message and the fix", async () => {
    const srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', gpuDiscovery: { command: 'nereid-test-no-nvidia-smi' } });
    try {
      assert.equal(srv.server.devices.hasGpu, false);
      const refused = await loadRefusal(srv, 'gpu_python');
      assert.match(refused.message, /instance group 'gpu_python_0' has kind KIND_GPU but server does not support GPUs \(no GPU was found: .*\); use KIND_CPU, or KIND_AUTO/);
    } finally {
      await srv.stop();
    }
  });

  it('a KIND_GPU PyTorch model fails to load when torch has no CUDA, naming the model, the interpreter and the fix', async () => {
    await requirePython(['numpy', 'torch']);
    await saveTorchScript(join(repo, 'torch_gpu', '1', 'model.pt'), 'class M(torch.nn.Module):\n    def forward(self, x: torch.Tensor):\n        return x * 2\n');
    const srv = await serverOn('two-gpus', repo, { explicit: true });
    try {
      const refused = await loadRefusal(srv, 'torch_gpu');
      assert.match(
        refused.message,
        /model 'torch_gpu': instance 'torch_gpu_0_0' has kind KIND_GPU, but torch \S+ of the Python interpreter \S*python3\S* has no CUDA \(torch.cuda.is_available\(\) is false\): install a CUDA build of torch/,
      );
    } finally {
      await srv.stop();
    }
  });
});
