/**
 * Decoupled Python models driven through the backend SPI directly (models-and-scheduling.md
 * §8.1, §8.5), with a real stub process: many responses per request through
 * `InferenceResponseSender`, sent from a thread after execute returned and from `async def
 * execute` coroutines, flags-only final responses, cancellation seen by `is_cancelled()`, and an
 * execute that raises; the instance released early, by model.py executes and by a built-in
 * runner's (TorchScript). Needs /usr/bin/python3 with numpy and torch (npm test installs them); fails naming
 * what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NereidError, type ParameterValue } from '@nereid/protocol';
import { completeModelConfig, modelConfigFromJson, normalizeModelConfig } from '../../config/index.js';
import { silentLogger } from '../../observability/logger.js';
import type { BackendInstance, BackendModel, BackendRequest, BackendResponse, BackendTensor, ExecutionTiming, ModelContext } from '../spi.js';
import { spawnSync } from 'node:child_process';
import { pythonBackend, pytorchBackend } from './python-backend.js';
import { requireNumpy } from './test-support.js';


/**
 * Triton's decoupled "repeat" pattern: for IN = [a, b, c] it sends OUT = [a], [b], [c] (IDX the
 * position), then a flags-only final response. Parameter `mode`: `thread` (a thread sends after
 * execute returned), `async` (coroutines), `until_cancelled` (one response every 10 ms until
 * cancelled), `raise`.
 */
const REPEAT_PY = String.raw`
import asyncio
import json
import threading
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        assert pb_utils.using_decoupled_model_transaction_policy(config)

    def execute(self, requests):
        mode = json.loads(requests[0].parameters()).get("mode", "thread")
        if mode == "raise":
            raise pb_utils.TritonModelException("repeat cannot run")
        if mode == "async":
            return self.execute_async(requests)
        for request in requests:
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            target = self.until_cancelled if mode == "until_cancelled" else self.repeat
            threading.Thread(target=target, args=(sender, values)).start()
        return None

    def repeat(self, sender, values):
        for i, v in enumerate(values):
            time.sleep(0.002)
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([v], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([i], dtype=np.int32))]))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def until_cancelled(self, sender, values):
        i = 0
        while not sender.is_cancelled():
            sender.send(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", np.array([values[0]], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([i], dtype=np.int32))]))
            i += 1
            time.sleep(0.01)
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    async def execute_async(self, requests):
        async def one(request):
            sender = request.get_response_sender()
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            for i, v in enumerate(values):
                await asyncio.sleep(0.001)
                last = i == len(values) - 1
                sender.send(pb_utils.InferenceResponse([
                    pb_utils.Tensor("OUT", np.array([v * 10], dtype=np.int32)),
                    pb_utils.Tensor("IDX", np.array([i], dtype=np.int32))]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL if last else 0)
        await asyncio.gather(*(one(r) for r in requests))
`;

interface Received {
  responses: (BackendResponse | NereidError | null)[];
  finals: number;
  done: Promise<void>;
}

/** A request as the scheduler would hand it over, recording what the backend sends. */
function request(values: number[], parameters: Record<string, ParameterValue>, signal = new AbortController().signal): BackendRequest & Received {
  const data = new Uint8Array(new Int32Array(values).buffer);
  const input: BackendTensor = { name: 'IN', datatype: 'INT32', shape: [values.length], data };
  let finish!: () => void;
  const received: Received = { responses: [], finals: 0, done: new Promise<void>((r) => (finish = r)) };
  return Object.assign(received, {
    id: '',
    inputs: new Map([['IN', input]]),
    requestedOutputs: ['OUT', 'IDX'],
    parameters,
    batchSize: 1,
    signal,
    respond(response: BackendResponse | NereidError | null, final = true) {
      if (received.finals > 0) return;
      received.responses.push(response);
      if (final) {
        received.finals++;
        finish();
      }
    },
  });
}

const timing: ExecutionTiming = { markComputeStart() {}, markInputsReady() {}, markOutputsStart() {}, markComputeEnd() {} };

function ints(r: BackendResponse | NereidError | null, name: string): number[] {
  assert.ok(r !== null && !(r instanceof NereidError), `expected outputs, got ${String(r)}`);
  const t = r.outputs.find((o) => o.name === name)!;
  return [...new Int32Array(new Uint8Array(t.data).buffer)];
}

/**
 * A one-instance Python model `name` from `source`, INT32 input IN [-1] and outputs OUT and IDX of
 * `outputDims`, in a directory of its own; `close` unloads it and removes the directory.
 */
async function loadModel(name: string, source: string, outputDims: number[], extra: Record<string, unknown> = {}) {
  const dir = await mkdtemp(join(tmpdir(), `nereid-${name}-`));
  await mkdir(join(dir, name, '1'), { recursive: true });
  await writeFile(join(dir, name, '1', 'model.py'), source);
  const config = normalizeModelConfig(
    completeModelConfig(
      modelConfigFromJson({
        name,
        backend: 'python',
        default_model_filename: 'model.py',
        ...extra,
        input: [{ name: 'IN', data_type: 'TYPE_INT32', dims: [-1] }],
        output: [
          { name: 'OUT', data_type: 'TYPE_INT32', dims: outputDims },
          { name: 'IDX', data_type: 'TYPE_INT32', dims: outputDims },
        ],
        instance_group: [{ name, kind: 'KIND_CPU', count: 1 }],
      }),
    ),
  );
  const ctx: ModelContext = {
    name,
    version: 1,
    config,
    modelDirectory: join(dir, name),
    versionDirectory: join(dir, name, '1'),
    modelPath: join(dir, name, '1', 'model.py'),
    backendConfig: {},
    logger: silentLogger(),
  };
  const model: BackendModel = await pythonBackend.createModel(ctx);
  const instance: BackendInstance = await model.createInstance({ name: `${name}_0`, groupName: name, kind: 'KIND_CPU', deviceId: 0, instanceCount: 1 });
  return {
    instance,
    async close() {
      await instance.unload();
      await model.unload();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

describe('Python backend: decoupled models through the SPI', () => {
  before(requireNumpy);
  let loaded: Awaited<ReturnType<typeof loadModel>> | undefined;
  let instance: BackendInstance;

  before(async () => {
    loaded = await loadModel('repeat', REPEAT_PY, [1], { model_transaction_policy: { decoupled: true } });
    instance = loaded.instance;
  });

  after(() => loaded?.close());

  it('sends many responses per request from a thread, then a flags-only final', async () => {
    const a = request([5, 6, 7], { mode: 'thread' });
    const b = request([9], { mode: 'thread' });
    await instance.execute([a, b], timing);
    await Promise.all([a.done, b.done]);
    assert.equal(a.responses.length, 4);
    assert.deepEqual(a.responses.slice(0, 3).map((r) => ints(r, 'OUT')[0]), [5, 6, 7]);
    assert.deepEqual(a.responses.slice(0, 3).map((r) => ints(r, 'IDX')[0]), [0, 1, 2]);
    assert.equal(a.responses[3], null, 'the final response carries no outputs');
    assert.equal(b.responses.length, 2);
    assert.deepEqual(ints(b.responses[0]!, 'OUT'), [9]);
  });

  it('sends from async def execute coroutines, the final flag on the last data response', async () => {
    const a = request([1, 2], { mode: 'async' });
    const b = request([3, 4, 5], { mode: 'async' });
    await instance.execute([a, b], timing);
    await Promise.all([a.done, b.done]);
    assert.deepEqual(a.responses.map((r) => ints(r, 'OUT')[0]), [10, 20]);
    assert.deepEqual(b.responses.map((r) => ints(r, 'OUT')[0]), [30, 40, 50]);
  });

  it('lets the model see cancellation through is_cancelled()', async () => {
    const abort = new AbortController();
    const r = request([42], { mode: 'until_cancelled' }, abort.signal);
    await instance.execute([r], timing);
    while (r.responses.length < 3) await new Promise((res) => setTimeout(res, 5));
    abort.abort();
    await r.done;
    assert.ok(r.responses.length >= 4);
    assert.equal(r.responses.at(-1), null);
    assert.deepEqual(ints(r.responses[0]!, 'OUT'), [42]);
  });

  it('rejects execute with the model error when execute raises, and keeps running', async () => {
    const r = request([1], { mode: 'raise' });
    await assert.rejects(instance.execute([r], timing), (err: NereidError) => {
      assert.equal(err.code, 'BACKEND_ERROR');
      assert.match(err.message, /^Failed to process the request\(s\) for model 'repeat_0', message: .*repeat cannot run/);
      return true;
    });
    const again = request([8], { mode: 'thread' });
    await instance.execute([again], timing);
    await again.done;
    assert.deepEqual(ints(again.responses[0]!, 'OUT'), [8]);
  });
});

/** A model whose execute answers every request from its return value (not decoupled). */
const ECHO_PY = String.raw`
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        if any("raise" in r.parameters() for r in requests):
            raise pb_utils.TritonModelException("echo cannot run")
        out = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUT", values),
                pb_utils.Tensor("IDX", values)]))
        return out
`;

describe('Python backend: the instance is released when the stub is done with a batch', () => {
  before(requireNumpy);
  let loaded: Awaited<ReturnType<typeof loadModel>> | undefined;
  let instance: BackendInstance;

  before(async () => {
    loaded = await loadModel('echo', ECHO_PY, [-1]);
    instance = loaded.instance;
  });

  after(() => loaded?.close());

  /** A timing whose releaseInstance, and the requests' responses, are written into `log`. */
  function logged(log: string[], ...requests: (BackendRequest & Received)[]): ExecutionTiming {
    for (const [i, r] of requests.entries()) {
      const respond = r.respond.bind(r);
      r.respond = (response, final) => {
        log.push(`respond ${i}`);
        respond(response, final);
      };
    }
    return { ...timing, releaseInstance: () => log.push('release') };
  }

  it('releases the instance before it hands the responses over, once', async () => {
    const log: string[] = [];
    const a = request([1, 2], {});
    const b = request([3], {});
    await instance.execute([a, b], logged(log, a, b));
    assert.deepEqual(log, ['release', 'respond 0', 'respond 1']);
    assert.deepEqual(ints(a.responses[0]!, 'OUT'), [1, 2]);
    assert.deepEqual(ints(b.responses[0]!, 'OUT'), [3]);
  });

  it('does not release an instance whose execute raised (the runner does when execute returns)', async () => {
    const log: string[] = [];
    const r = request([1], { raise: true });
    await assert.rejects(instance.execute([r], logged(log, r)), /echo cannot run/);
    assert.deepEqual(log, []);
  });
});

/** forward(a) = a * 2 on INT32 rows of any length: requests of other lengths form groups of their own. */
const DOUBLE_TORCH = `
class M(torch.nn.Module):
    def forward(self, a: torch.Tensor):
        return a * 2
`;

describe("Python backend: the instance is released when the stub is done with a built-in runner's batch", () => {
  let dir: string | undefined;
  let model: BackendModel | undefined;
  let instance: BackendInstance;

  before(async () => {
    requireNumpy();
    dir = await mkdtemp(join(tmpdir(), 'nereid-torch-release-'));
    await mkdir(join(dir, 'double', '1'), { recursive: true });
    const script = join(dir, 'make_model.py');
    await writeFile(script, `import sys, torch\n${DOUBLE_TORCH}\ntorch.jit.save(torch.jit.script(M()), sys.argv[1])\n`);
    const saved = spawnSync('/usr/bin/python3', [script, join(dir, 'double', '1', 'model.pt')], { encoding: 'utf8' });
    assert.equal(saved.status, 0, `saving a TorchScript model needs /usr/bin/python3 with torch (npm test installs python3-torch): ${saved.stderr}`);
    const config = normalizeModelConfig(
      completeModelConfig(
        modelConfigFromJson({
          name: 'double',
          platform: 'pytorch_libtorch',
          max_batch_size: 8,
          input: [{ name: 'INPUT__0', data_type: 'TYPE_INT32', dims: [-1], allow_ragged_batch: true }],
          output: [{ name: 'OUTPUT__0', data_type: 'TYPE_INT32', dims: [-1] }],
          instance_group: [{ name: 'double', kind: 'KIND_CPU', count: 1 }],
        }),
      ),
    );
    model = await pytorchBackend.createModel({
      name: 'double',
      version: 1,
      config,
      modelDirectory: join(dir, 'double'),
      versionDirectory: join(dir, 'double', '1'),
      modelPath: join(dir, 'double', '1', 'model.pt'),
      backendConfig: {},
      logger: silentLogger(),
    });
    instance = await model.createInstance({ name: 'double_0', groupName: 'double', kind: 'KIND_CPU', deviceId: 0, instanceCount: 1 });
  });

  after(async () => {
    await instance?.unload();
    await model?.unload();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  function row(values: number[], log: string[], i: number): BackendRequest & { out?: number[] } {
    const r: BackendRequest & { out?: number[] } = {
      id: String(i),
      inputs: new Map([['INPUT__0', { name: 'INPUT__0', datatype: 'INT32', shape: [1, values.length], data: new Uint8Array(new Int32Array(values).buffer) }]]),
      requestedOutputs: ['OUTPUT__0'],
      parameters: {},
      batchSize: 1,
      signal: new AbortController().signal,
      respond(response) {
        log.push(`respond ${i}`);
        if (response !== null && !(response instanceof NereidError)) r.out = [...new Int32Array(response.outputs[0]!.data.slice().buffer)];
      },
    };
    return r;
  }

  it('releases it once, when the last group of the batch is done, before that group is answered', async () => {
    const log: string[] = [];
    const released: ExecutionTiming = { ...timing, releaseInstance: () => log.push('release') };
    const same = [row([1, 2], log, 0), row([3, 4], log, 1)];
    await instance.execute(same, released);
    assert.deepEqual(log, ['release', 'respond 0', 'respond 1']);
    assert.deepEqual(same.map((r) => r.out), [[2, 4], [6, 8]]);

    log.length = 0;
    const ragged = [row([1, 2], log, 0), row([5, 6, 7], log, 1)];
    await instance.execute(ragged, released);
    assert.deepEqual(log, ['respond 0', 'release', 'respond 1']);
    assert.deepEqual(ragged.map((r) => r.out), [[2, 4], [10, 12, 14]]);
  });
});
