/**
 * Memory accounting and budgets (docs/resources.md): a Python model that allocates on demand
 * (input MIB: how many MiB to allocate and keep) shows its growth in the statistics'
 * `memory_usage` and in `nereid_model_memory_bytes`; a load over a limit or over the server's
 * budget is refused with a message naming the model, its need and the limit; a model that
 * outgrows its limit while serving is stopped (its requests fail with a clear error, the other
 * models keep answering, the index shows why) and loads again.
 *
 * Needs /usr/bin/python3 with numpy, and torch for the PyTorch case (npm test installs both);
 * fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { NereidError } from '@nereid/protocol';
import { GrpcClient } from '@nereid/client';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningGrpcServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { IDENTITY_PY, identityConfig, requirePython, saveTorchScript, waitUntil } from '../../helpers/python.js';

const MIB = 2 ** 20;

/**
 * Allocates MIB[0] MiB (touched, so resident) and keeps it, then waits for request parameter
 * \`hold\` seconds (default none); answers the MiB it holds in all.
 */
const HOARD_PY = String.raw`
import json
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.kept = []

    def execute(self, requests):
        responses = []
        for request in requests:
            mib = int(pb_utils.get_input_tensor_by_name(request, "MIB").as_numpy().reshape(-1)[0])
            if mib > 0:
                self.kept.append(np.ones(mib * 131072, dtype=np.float64))
            time.sleep(float(json.loads(request.parameters()).get("hold", 0)))
            held = sum(a.nbytes for a in self.kept) // 1048576
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("HELD", np.array([held], dtype=np.int32))]))
        return responses
`;

/** Allocates 150 MiB in initialize: over a small limit right after the load. */
const BIG_INIT_PY = String.raw`
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.weights = np.ones(150 * 131072, dtype=np.float64)

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())]) for r in requests]
`;

function hoardConfig(name: string, limit?: string): string {
  return `
name: "${name}"
backend: "python"
input [ { name: "MIB" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "HELD" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
${limit === undefined ? '' : `parameters { key: "memory_limit" value { string_value: "${limit}" } }`}
`;
}

/** The config of a hoarding model as a load request's JSON override. */
function hoardJson(name: string, limit: string, count = 1): string {
  return JSON.stringify({
    name,
    backend: 'python',
    input: [{ name: 'MIB', data_type: 'TYPE_INT32', dims: [1] }],
    output: [{ name: 'HELD', data_type: 'TYPE_INT32', dims: [1] }],
    instance_group: [{ kind: 'KIND_CPU', count }],
    parameters: { memory_limit: { string_value: limit } },
  });
}

function statusOf(srv: RunningServer, model: string): { state: string; reason: string } {
  const status = srv.server.modelStatuses().find((s) => s.name === model);
  assert.ok(status, `no status for ${model}`);
  return status;
}

/** Waits until `model` is UNAVAILABLE (stopped or unloaded, its stubs gone). */
function unavailable(srv: RunningServer, model: string): Promise<void> {
  return waitUntil(() => statusOf(srv, model).state === 'UNAVAILABLE', `${model} to be UNAVAILABLE`, 10_000);
}

const X = [{ name: 'INPUT0', datatype: 'FP32' as const, shape: [1, 2], data: new Float32Array([1, 2]) }];

async function allocate(srv: RunningServer, model: string, mib: number, holdSecs = 0): Promise<number> {
  const r = await srv.server.infer({
    model,
    inputs: [{ name: 'MIB', datatype: 'INT32', shape: [1], data: new Int32Array([mib]) }],
    ...(holdSecs > 0 ? { parameters: { hold: String(holdSecs) } } : {}),
  });
  return new Int32Array(new Uint8Array(r.outputs[0]!.data).slice().buffer)[0]!;
}

function cpuBytes(srv: RunningServer, model: string): number {
  const [s] = srv.server.modelStatistics(model);
  const cpu = s!.memory_usage.filter((m) => m.type === 'CPU');
  assert.equal(cpu.length, 1, `one CPU entry in ${JSON.stringify(s!.memory_usage)}`);
  assert.equal(cpu[0]!.id, 0);
  return cpu[0]!.byte_size;
}

async function refusal(p: Promise<unknown>): Promise<NereidError> {
  try {
    await p;
  } catch (err) {
    return err as NereidError;
  }
  assert.fail('expected a rejection');
}

describe('memory accounting and limits', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningGrpcServer;

  before(async () => {
    repo = await makeRepository({
      hoard: { 'config.pbtxt': hoardConfig('hoard', '1GiB'), '1/model.py': HOARD_PY },
      capped: { 'config.pbtxt': hoardConfig('capped', '160MiB'), '1/model.py': HOARD_PY },
      big_init: {
        'config.pbtxt': identityConfig('big_init', 'TYPE_FP32', { extra: 'parameters { key: "memory_limit" value { string_value: "100MiB" } }' }),
        '1/model.py': BIG_INIT_PY,
      },
      bad_limit: {
        'config.pbtxt': identityConfig('bad_limit', 'TYPE_FP32', { extra: 'parameters { key: "memory_limit" value { string_value: "lots" } }' }),
        '1/model.py': IDENTITY_PY,
      },
      good: { 'config.pbtxt': identityConfig('good', 'TYPE_FP32'), '1/model.py': IDENTITY_PY },
      simple: modelFiles(simpleModel()),
    });
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', memorySampleIntervalMs: 100, grpc: true });
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('reports what a stub-hosted model holds, growing as it allocates, in statistics and metrics', async () => {
    await srv.server.loadModel('hoard');
    const before = cpuBytes(srv, 'hoard');
    assert.ok(before > 5 * MIB, `an interpreter with numpy holds more than 5 MiB, got ${before}`);
    assert.equal(await allocate(srv, 'hoard', 64), 64);
    await waitUntil(() => cpuBytes(srv, 'hoard') >= before + 60 * MIB, 'memory_usage to grow by 64 MiB', 10_000);
    const text = await srv.server.metrics.text();
    const line = text.split('\n').find((l) => l.startsWith('nereid_model_memory_bytes{') && l.includes('model="hoard"'));
    assert.ok(line, text);
    assert.match(line, /id="0"/);
    assert.match(line, /type="CPU"/);
    assert.ok(Number(line.split(' ').at(-1)) >= before + 60 * MIB, line);
    assert.match(text, /^nereid_model_memory_limit_bytes\{model="hoard",version="1"\} 1073741824$/m);
    assert.match(text, /^nereid_memory_used_bytes \d+$/m);
    // The HTTP statistics carry it too.
    const body = (await (await fetch(`${srv.url}/v2/models/hoard/stats`)).json()) as { model_stats: { memory_usage: { type: string; byte_size: number }[] }[] };
    assert.ok(body.model_stats[0]!.memory_usage[0]!.byte_size >= before + 60 * MIB);
    // And gRPC's ModelStatistics.
    const grpc = new GrpcClient(srv.grpcTarget);
    try {
      const stats = await grpc.modelStatistics('hoard');
      const m = stats.model_stats[0]!.memory_usage[0]!;
      assert.equal(m.type, 'CPU');
      assert.equal(m.id, 0n);
      assert.ok(m.byte_size >= BigInt(before + 60 * MIB), String(m.byte_size));
    } finally {
      grpc.close();
    }
    await srv.server.unloadModel('hoard');
  });

  it('keeps the serving copy when a reload is refused over its limit', async () => {
    await srv.server.loadModel('hoard');
    const config = hoardJson('hoard', '4MiB');
    const err = await refusal(srv.server.loadModel('hoard', { config }));
    // Refused before it starts: its last load measured more than that.
    assert.match(err.message, /model 'hoard' version 1 needs an estimated [\d.]+ MiB \(as measured at its last load\), over its memory limit of 4 MiB/);
    assert.equal(await allocate(srv, 'hoard', 0), 0);
    assert.match(statusOf(srv, 'hoard').reason, /reload failed, this version keeps serving its previous copy/);
    await srv.server.unloadModel('hoard');
  });

  it('refuses more instances in place when they would pass the limit; the model keeps serving', async () => {
    await srv.server.loadModel('capped');
    assert.equal(await allocate(srv, 'capped', 125), 125);
    await waitUntil(() => cpuBytes(srv, 'capped') > 130 * MIB, 'the sample to see 125 MiB more', 10_000);
    const twoInstances = hoardJson('capped', '160MiB', 2);
    const err = await refusal(srv.server.loadModel('capped', { config: twoInstances }));
    assert.match(err.message, /model 'capped' version 1 needs [\d.]+ MiB with its 1 new instance\(s\) \([\d.]+ MiB of them\), over its memory limit of 160 MiB/);
    assert.equal(await allocate(srv, 'capped', 0), 125);
    await srv.server.unloadModel('capped');
    await unavailable(srv, 'capped');
  });

  it('reports a figure measured at load for an in-process ONNX Runtime model', async () => {
    await srv.server.loadModel('simple');
    assert.ok(cpuBytes(srv, 'simple') > 0);
    await srv.server.unloadModel('simple');
  });

  it('refuses a memory_limit that is not a byte size, naming the model and the fix', async () => {
    const err = await refusal(srv.server.loadModel('bad_limit'));
    assert.match(err.message, /model 'bad_limit': parameter 'memory_limit' must be a byte size such as "512MiB"/);
    assert.match(err.message, /got 'lots'/);
  });

  it('fails a load whose model is over its limit right after initialize', async () => {
    const err = await refusal(srv.server.loadModel('big_init'));
    assert.match(err.message, /model 'big_init' version 1 needs [\d.]+ MiB measured after initialize, over its memory limit of 100 MiB/);
    assert.match(err.message, /raise parameter 'memory_limit'/);
    assert.equal(statusOf(srv, 'big_init').state, 'UNAVAILABLE');
  });

  it('stops a model that outgrows its limit while serving; the others keep answering; it loads again', async () => {
    await Promise.all([srv.server.loadModel('capped'), srv.server.loadModel('good')]);
    assert.equal(await allocate(srv, 'capped', 32), 32);
    // 135 MiB more: over the 160 MiB limit with the interpreter's own (the data-segment backstop
    // is at twice the limit, so the allocation succeeds and a sample stops the model, maybe while
    // this request still runs: then it fails with the memory error).
    await allocate(srv, 'capped', 135).catch((err: NereidError) => assert.equal(err.code, 'MODEL_MEMORY_LIMIT'));
    await unavailable(srv, 'capped');
    const status = statusOf(srv, 'capped');
    assert.match(status.reason, /model 'capped' version 1 was stopped: it used [\d.]+ MiB, over its memory limit of 160 MiB/);
    const index = await srv.server.repositoryIndex();
    assert.match(index.find((e) => e.name === 'capped')!.reason!, /over its memory limit/);
    const refused = await refusal(allocate(srv, 'capped', 0));
    assert.match(refused.message, /capped/);
    const text = await srv.server.metrics.text();
    assert.match(text, /^nereid_model_memory_limit_stops_total\{model="capped"\} 1$/m);
    // Another model answers all along.
    const r = await srv.server.infer({ model: 'good', inputs: X });
    assert.deepEqual([...new Float32Array(new Uint8Array(r.outputs[0]!.data).slice().buffer)], [1, 2]);
    // Loading it again works, with a fresh stub.
    await srv.server.loadModel('capped');
    assert.equal(await allocate(srv, 'capped', 0), 0);
    await srv.server.unloadModel('capped');
    await srv.server.unloadModel('good');
  });

  it('refuses, through the stub\'s data-segment cap, one allocation far over the limit, and keeps serving', async () => {
    await srv.server.loadModel('capped');
    // 400 MiB at once: past the cap (twice the 160 MiB limit above what the stub held at its
    // start), so numpy cannot allocate it; nothing was allocated, so the model is not stopped.
    const err = await refusal(allocate(srv, 'capped', 400));
    assert.match(err.message, /MemoryError|Unable to allocate/);
    assert.equal(await allocate(srv, 'capped', 8), 8);
    assert.equal(statusOf(srv, 'capped').state, 'READY');
    await srv.server.unloadModel('capped');
    await unavailable(srv, 'capped');
  });

  it('fails the requests a stopped model held with the memory error', async () => {
    await srv.server.loadModel('capped');
    // The first request allocates past the limit and holds its execute for 5 s: a sample stops the
    // model meanwhile. It and the three queued behind it fail with the memory error.
    const results = await Promise.allSettled([allocate(srv, 'capped', 180, 5), ...Array.from({ length: 3 }, () => allocate(srv, 'capped', 1))]);
    for (const r of results) {
      assert.equal(r.status, 'rejected');
      const err = (r as PromiseRejectedResult).reason as NereidError;
      assert.match(err.message, /^model 'capped' version 1 was stopped: it used [\d.]+ MiB, over its memory limit of 160 MiB; raise parameter 'memory_limit'/);
      assert.equal(err.code, 'MODEL_MEMORY_LIMIT');
    }
    await unavailable(srv, 'capped');
  });
});

describe('memory accounting of a PyTorch model', () => {
  before(() => requirePython(['numpy', 'torch']));
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      torch_id: {
        'config.pbtxt': `name: "torch_id"\nbackend: "pytorch"\nmax_batch_size: 4\ninput [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]\noutput [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 2 ] } ]\n`,
      },
    });
    await saveTorchScript(join(repo, 'torch_id', '1', 'model.pt'), 'class M(torch.nn.Module):\n    def forward(self, x: torch.Tensor):\n        return x\n');
    srv = await startServer({ modelRepositories: [repo], memorySampleIntervalMs: 100 });
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it("reports the stub's memory with libtorch loaded", async () => {
    // An interpreter with numpy holds about 16 MiB of its own; libtorch's allocations add more.
    assert.ok(cpuBytes(srv, 'torch_id') > 20 * MIB, String(cpuBytes(srv, 'torch_id')));
  });
});

describe('the server-wide memory budget', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      first: { 'config.pbtxt': hoardConfig('first'), '1/model.py': HOARD_PY },
      second: { 'config.pbtxt': hoardConfig('second'), '1/model.py': HOARD_PY },
    });
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', memoryBudgetBytes: 200 * MIB, memorySampleIntervalMs: 100 });
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('refuses a second model once the first holds most of the budget, naming model, need and budget', async () => {
    await srv.server.loadModel('first');
    // 175 MiB and the interpreter's own (about 18 MiB): the second's (as much) passes the budget.
    await allocate(srv, 'first', 175);
    await waitUntil(() => srv.server.memory.usedBytes > 185 * MIB, 'the accounted memory to pass 185 MiB', 10_000);
    const err = await refusal(srv.server.loadModel('second'));
    assert.match(err.message, /model 'second' version 1 needs [\d.]+ (B|KiB|MiB) measured after initialize, but the models loaded hold [\d.]+ MiB of the server's memory budget of 200 MiB \(--memory-budget\)/);
    const text = await srv.server.metrics.text();
    assert.match(text, /^nereid_memory_budget_bytes 209715200$/m);
    // Once the first is unloaded, the second fits.
    await srv.server.unloadModel('first');
    await waitUntil(() => srv.server.memory.usedBytes === 0, 'the first model to be released', 10_000);
    await srv.server.loadModel('second');
  });
});
