/**
 * The PyTorch backend (`platform: "pytorch_libtorch"`): TorchScript models saved at test time by
 * Debian's torch, inputs and outputs mapped by Triton's `INPUT__0`/`OUTPUT__0` convention and by
 * forward() argument names, batches formed by the dynamic batcher split back per request (the
 * requested outputs of each, ragged runs, a model that answers the wrong number of rows).
 *
 * Needs /usr/bin/python3 with numpy and torch (npm test installs them); fails naming what is missing
 * otherwise.
 */
import assert from 'node:assert/strict';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { InferResponse } from '@nereid/server';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { recordingLogger, requirePython, saveTorchScript } from '../../helpers/python.js';

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

/** Ragged rows (any length) add and subtract; the batcher may join requests of other lengths. */
const CONFIG_RAGGED = `
name: "torch_ragged"
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true },
  { name: "INPUT__1" data_type: TYPE_FP32 dims: [ -1 ] allow_ragged_batch: true }
]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }, { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
`;

/** Answers one row whatever the batch: wrong once requests are batched together. */
const FIRST_ROW_TORCH = `
class M(torch.nn.Module):
    def forward(self, a: torch.Tensor):
        return a[:1]
`;

const CONFIG_FIRST_ROW = `
name: "torch_first_row"
platform: "pytorch_libtorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
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
      torch_ragged: { 'config.pbtxt': CONFIG_RAGGED },
      torch_first_row: { 'config.pbtxt': CONFIG_FIRST_ROW },
    });
    await saveTorchScript(join(repo, 'torch_ragged', '1', 'model.pt'), ADD_SUB_TORCH);
    await saveTorchScript(join(repo, 'torch_first_row', '1', 'model.pt'), FIRST_ROW_TORCH);
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

  it('answers each request of a batch with the outputs it asked for', async () => {
    const asks = [['OUTPUT__0'], ['OUTPUT__1'], [], ['OUTPUT__1', 'OUTPUT__0']];
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) => {
        const a = Float32Array.from({ length: 4 }, (_, k) => i + k);
        const b = new Float32Array([1, 2, 3, 4]);
        const outputs = asks[i % asks.length]!;
        return srv.server
          .infer({
            model: 'torch_add_sub',
            inputs: [
              { name: 'INPUT__0', datatype: 'FP32', shape: [1, 4], data: a },
              { name: 'INPUT__1', datatype: 'FP32', shape: [1, 4], data: b },
            ],
            ...(outputs.length > 0 ? { outputs: outputs.map((name) => ({ name })) } : {}),
          })
          .then((r) => ({ r, a, b, outputs }));
      }),
    );
    for (const { r, a, b, outputs } of results) {
      const names = r.outputs.map((o) => o.name).sort();
      assert.deepEqual(names, outputs.length > 0 ? [...outputs].sort() : ['OUTPUT__0', 'OUTPUT__1']);
      if (names.includes('OUTPUT__0')) assert.deepEqual(f32(r, 'OUTPUT__0'), [...a].map((x, k) => x + b[k]!));
      if (names.includes('OUTPUT__1')) assert.deepEqual(f32(r, 'OUTPUT__1'), [...a].map((x, k) => x - b[k]!));
    }
  });

  it('runs ragged requests of other lengths batched together, one forward call per run of equal shapes', async () => {
    const before = srv.server.modelStatistics('torch_ragged')[0]!;
    const lengths = [3, 3, 5, 5, 5, 2, 3, 3];
    const results = await Promise.all(
      lengths.map((n, i) => {
        const a = Float32Array.from({ length: n }, (_, k) => 10 * i + k);
        const b = Float32Array.from({ length: n }, () => i);
        return srv.server
          .infer({
            model: 'torch_ragged',
            inputs: [
              { name: 'INPUT__0', datatype: 'FP32', shape: [1, n], data: a },
              { name: 'INPUT__1', datatype: 'FP32', shape: [1, n], data: b },
            ],
          })
          .then((r) => ({ r, a, b, n }));
      }),
    );
    for (const { r, a, b, n } of results) {
      assert.deepEqual(r.outputs.find((o) => o.name === 'OUTPUT__0')!.shape, [1, n]);
      assert.deepEqual(f32(r, 'OUTPUT__0'), [...a].map((x, k) => x + b[k]!));
      assert.deepEqual(f32(r, 'OUTPUT__1'), [...a].map((x, k) => x - b[k]!));
    }
    const after = srv.server.modelStatistics('torch_ragged')[0]!;
    // The batcher joined requests of other lengths (fewer executions than requests); each still got its own rows.
    assert.ok(after.execution_count - before.execution_count < lengths.length, `executions: ${after.execution_count - before.execution_count}`);
  });

  it("fails every request of a batch whose output's first dimension is not the batch's, naming the model and output", async () => {
    const settled = await Promise.allSettled(
      Array.from({ length: 4 }, (_, i) =>
        srv.server.infer({
          model: 'torch_first_row',
          inputs: [{ name: 'INPUT__0', datatype: 'FP32', shape: [1, 2], data: new Float32Array([i, i]) }],
        }),
      ),
    );
    const failed = settled.filter((s): s is PromiseRejectedResult => s.status === 'rejected');
    assert.ok(failed.length >= 2, `a batch of several requests must fail: ${JSON.stringify(settled.map((s) => s.status))}`);
    for (const f of failed) {
      assert.match((f.reason as Error).message, /model 'torch_first_row' returned output 'OUTPUT__0' with shape \[1,2\] for a batch of \d+; its first dimension must be the batch's/);
    }
    // The instance keeps serving.
    const alone = await srv.server.infer({
      model: 'torch_first_row',
      inputs: [{ name: 'INPUT__0', datatype: 'FP32', shape: [1, 2], data: new Float32Array([7, 8]) }],
    });
    assert.deepEqual(f32(alone, 'OUTPUT__0'), [7, 8]);
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

/**
 * Each forward multiplies a 384×384 matrix by itself a few times (a product OpenBLAS splits over
 * its threads), then adds 1 to the input: milliseconds per batch, whatever the batch holds.
 */
const HEAVY_TORCH = `
class M(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("w", torch.rand(384, 384) / 384)

    def forward(self, x: torch.Tensor):
        m = self.w
        for _ in range(6):
            m = m @ self.w
        return x + 1 + m.sum() * 0
`;

const CONFIG_HEAVY = `
name: "torch_heavy"
platform: "pytorch_libtorch"
max_batch_size: 2
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { }
parameters { key: "INTRA_OP_THREAD_COUNT" value: { string_value: "1" } }
`;

/** The stub process serving a model: a child of this process whose working directory is the model's version directory. */
function stubOf(versionDir: string): number {
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === process.pid && readlinkSync(`/proc/${entry}/cwd`) === versionDir) return Number(entry);
    } catch {
      // The process ended meanwhile.
    }
  }
  throw new Error(`no stub process of this server runs in ${versionDir}`);
}

/** CPU seconds (user + system) a process has used. */
function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return (Number(fields[11]) + Number(fields[12])) / 100;
}

describe('PyTorch backend: threads and batches handed ahead', () => {
  before(() => requirePython(['numpy', 'torch']));
  let repo: string;
  let srv: RunningServer;
  let logger: ReturnType<typeof recordingLogger>;

  before(async () => {
    repo = await makeRepository({
      torch_heavy: { 'config.pbtxt': CONFIG_HEAVY },
    });
    await saveTorchScript(join(repo, 'torch_heavy', '1', 'model.pt'), HEAVY_TORCH);
    logger = recordingLogger();
    srv = await startServer({ modelRepositories: [repo], logger });
    assert.deepEqual(srv.server.startReport.failures, []);
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  const one = (v: number) => ({ model: 'torch_heavy', inputs: [{ name: 'INPUT__0', datatype: 'FP32' as const, shape: [1, 3], data: new Float32Array([v, v, v]) }] });

  it('computes on the intra-op threads configured: OpenBLAS, which torch.set_num_threads does not reach, is capped the same', async () => {
    const versionDir = join(repo, 'torch_heavy', '1');
    const pid = stubOf(versionDir);
    const line = logger.lines.find((l) => l.includes("model 'torch_heavy': torch "));
    assert.ok(line, `no thread line in:\n${logger.lines.join('\n')}`);
    const openblas = readFileSync(`/proc/${pid}/maps`, 'utf8').includes('openblas');
    // Debian's torch multiplies matrices with OpenBLAS; a torch with MKL loads none.
    assert.match(line, openblas ? /: 1 intra-op thread; OpenBLAS capped at the same \(.*openblas.*\)$/ : /: 1 intra-op thread$/);
    for (let i = 0; i < 3; i++) await srv.server.infer(one(i));
    // One request after another for a second: the stub computes on one core. Uncapped, OpenBLAS
    // splits each product over a thread per core (and its idle threads spin between them).
    const cpu0 = cpuSeconds(pid);
    const t0 = performance.now();
    let n = 0;
    while (performance.now() - t0 < 1500) {
      const r = await srv.server.infer(one(n));
      assert.deepEqual(f32(r, 'OUTPUT__0'), [n + 1, n + 1, n + 1]);
      n++;
    }
    const cores = (cpuSeconds(pid) - cpu0) / ((performance.now() - t0) / 1000);
    assert.ok(n > 3, `only ${n} requests in 1.5 s`);
    assert.ok(cores < 1.3, `the stub used ${cores.toFixed(2)} cores with INTRA_OP_THREAD_COUNT 1`);
  });

  it('takes the next full batch while one computes (the dynamic batcher hands it ahead), and answers every request', async () => {
    const before = logger.lines.length;
    const answers = await Promise.all(Array.from({ length: 7 }, (_, i) => srv.server.infer(one(10 * i))));
    answers.forEach((r, i) => assert.deepEqual(f32(r, 'OUTPUT__0'), [10 * i + 1, 10 * i + 1, 10 * i + 1]));
    const batches = logger.lines.slice(before).filter((l) => l.includes("dynamic batcher for model 'torch_heavy': batch of"));
    assert.ok(
      batches.some((l) => / to torch_heavy_0 ahead, while it runs another, /.test(l)),
      `no batch was handed ahead:\n${batches.join('\n')}`,
    );
  });
});
