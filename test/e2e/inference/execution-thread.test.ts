/**
 * Where the ONNX Runtime backend runs a session (`execution_thread`, docs/backends.md): the same
 * results and errors on the worker thread and on the event loop's thread; `auto` moves a tiny
 * model onto the event loop's thread and keeps a slow one on its worker, so the event loop keeps
 * turning while it computes (an ordering assertion, never a timing one); unloading releases the
 * worker of an instance that went inline. Each mode runs with direct ONNX Runtime sessions (the
 * default) and, for `worker` and `inline`, with the binding's (`direct_session: false`).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { NereidError, typedArrayOf } from '@nereid/protocol';
import { Server, silentLogger, type InferRequest, type InferResponse, type Logger } from '@nereid/server';
import { OnnxGraphBuilder, encodeModel, mlpModel, simpleModel, simpleStringModel } from '@nereid/testkit';
import { makeRepository, removeDir } from '../../helpers/harness.js';

const ONE_INSTANCE = 'instance_group [ { kind: KIND_CPU, count: 1 } ]\n';
const thread = (mode: string) => `parameters { key: "execution_thread" value: { string_value: "${mode}" } }\n`;
/** A bound no `simple` run exceeds however busy the machine: the choice is then certain. */
const GENEROUS = 'parameters { key: "execution_thread_max_run_us" value: { string_value: "20000" } }\n';
const MODES = ['worker', 'inline', 'auto'] as const;
const BINDING = 'parameters { key: "direct_session" value: { string_value: "false" } }\n';
/** The modes, and two of them on onnxruntime-node's binding instead of direct sessions. */
const VARIANTS = [...MODES.map((mode) => ({ name: mode, config: thread(mode) })), ...(['worker', 'inline'] as const).map((mode) => ({ name: `${mode}_binding`, config: thread(mode) + BINDING }))];

/** A logger that keeps info lines (the backend says when an instance changes threads). */
function recordingLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  return { ...silentLogger(), info: (m: string) => void lines.push(m), lines };
}

/** A → A + B for 1-D INT32 tensors of independent lengths: ONNX Runtime fails when they differ. */
function addModel(name: string) {
  const g = new OnnxGraphBuilder(name).input('A', 'INT32', ['n']).input('B', 'INT32', ['m']).output('C', 'INT32', ['k']).node('Add', ['A', 'B'], ['C']);
  const tensor = (t: string) => `{ name: "${t}" data_type: TYPE_INT32 dims: [ -1 ] }`;
  const config = `name: "${name}"\nbackend: "onnxruntime"\nmax_batch_size: 0\ninput [ ${tensor('A')}, ${tensor('B')} ]\noutput [ ${tensor('C')} ]\n`;
  return { name, config, onnx: encodeModel(g) };
}

/**
 * `simple` inputs of `batch` rows, viewed at `offset` bytes into a larger buffer (a `Buffer`, as
 * the frontends' request bodies are, with `asBuffer`).
 */
function simpleRequest(model: string, batch: number, offset = 0, asBuffer = false): { request: InferRequest; sum: Int32Array; difference: Int32Array } {
  const a = Int32Array.from({ length: batch * 16 }, (_, i) => i * 7 - 3);
  const b = Int32Array.from({ length: batch * 16 }, (_, i) => 1000 - i);
  const at = (x: Int32Array) => {
    const bytes = asBuffer ? Buffer.alloc(offset + x.byteLength) : new Uint8Array(offset + x.byteLength);
    bytes.set(new Uint8Array(x.buffer), offset);
    return bytes.subarray(offset);
  };
  return {
    request: {
      model,
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [batch, 16], data: at(a) },
        { name: 'INPUT1', datatype: 'INT32', shape: [batch, 16], data: at(b) },
      ],
    },
    sum: a.map((x, i) => x + b[i]!),
    difference: a.map((x, i) => x - b[i]!),
  };
}

function out(response: InferResponse, name: string): Uint8Array {
  const o = response.outputs.find((t) => t.name === name);
  assert.ok(o, `no output '${name}'`);
  return o.data;
}

describe('execution_thread', () => {
  let repo: string;
  let server: Server;
  let logger: ReturnType<typeof recordingLogger>;

  before(async () => {
    const models: Record<string, Record<string, string | Uint8Array>> = {};
    for (const variant of VARIANTS) {
      const simple = simpleModel({ name: `simple_${variant.name}` });
      models[simple.name] = { 'config.pbtxt': simple.config! + ONE_INSTANCE + variant.config + GENEROUS, '1/model.onnx': simple.onnx.bytes };
      const add = addModel(`add_${variant.name}`);
      models[add.name] = { 'config.pbtxt': add.config! + ONE_INSTANCE + variant.config, '1/model.onnx': add.onnx.bytes };
    }
    for (const mode of MODES) {
      const strings = simpleStringModel({ name: `strings_${mode}` });
      models[strings.name] = { 'config.pbtxt': strings.config! + ONE_INSTANCE + thread(mode), '1/model.onnx': strings.onnx.bytes };
    }
    repo = await makeRepository(models);
    logger = recordingLogger();
    server = await Server.start({ modelRepositories: [repo], logger });
    assert.deepEqual(server.startReport.failures, []);
  });

  after(async () => {
    await server?.stop();
    if (repo) await removeDir(repo);
  });

  it('gives the same results on either thread, batched, with inputs at any offset, direct or through the binding', async () => {
    for (const { name: mode } of VARIANTS) {
      for (const [batch, offset, asBuffer] of [[1, 0, false], [1, 3, false], [1, 1, true], [8, 0, false], [5, 2, true]] as const) {
        const { request, sum, difference } = simpleRequest(`simple_${mode}`, batch, offset, asBuffer);
        const response = await server.infer(request);
        assert.deepEqual(response.outputs.map((o) => [o.name, o.datatype, o.shape]), [
          ['OUTPUT0', 'INT32', [batch, 16]],
          ['OUTPUT1', 'INT32', [batch, 16]],
        ]);
        assert.deepEqual(typedArrayOf('INT32', out(response, 'OUTPUT0')), sum, `${mode} batch ${batch} offset ${offset}`);
        assert.deepEqual(typedArrayOf('INT32', out(response, 'OUTPUT1')), difference, `${mode} batch ${batch} offset ${offset}`);
      }
    }
  });

  it('moves a tiny model onto the event loop thread in auto mode, and only there', async () => {
    for (let i = 0; i < 100; i++) {
      for (const mode of MODES) {
        const { request, sum } = simpleRequest(`simple_${mode}`, 1 + (i % 2));
        assert.deepEqual(typedArrayOf('INT32', out(await server.infer(request), 'OUTPUT0')), sum);
      }
    }
    const moved = logger.lines.filter((l) => l.includes("running them on the event loop's thread"));
    assert.deepEqual(moved.map((l) => /model '([^']+)'/.exec(l)![1]), ['simple_auto'], moved.join('\n'));
    // Larger batches than the ones measured still give correct results (they go to the worker).
    const { request, sum } = simpleRequest('simple_auto', 8);
    assert.deepEqual(typedArrayOf('INT32', out(await server.infer(request), 'OUTPUT0')), sum);
  });

  it('carries BYTES tensors on either thread', async () => {
    const encode = (values: string[]) => {
      const parts = values.map((v) => Buffer.from(v));
      const buf = Buffer.alloc(parts.reduce((n, p) => n + 4 + p.length, 0));
      let o = 0;
      for (const p of parts) {
        buf.writeUInt32LE(p.length, o);
        p.copy(buf, o + 4);
        o += 4 + p.length;
      }
      return new Uint8Array(buf);
    };
    const a = Array.from({ length: 16 }, (_, i) => String(i * 11));
    const b = Array.from({ length: 16 }, (_, i) => String(-i));
    const results = [];
    for (const mode of MODES) {
      const response = await server.infer({
        model: `strings_${mode}`,
        inputs: [
          { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], data: encode(a) },
          { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: encode(b) },
        ],
      });
      results.push(Buffer.from(out(response, 'OUTPUT0')).toString('hex'));
    }
    assert.equal(results[0], Buffer.from(encode(a.map((x, i) => String(Number(x) + Number(b[i]))))).toString('hex'));
    assert.deepEqual(results, [results[0], results[0], results[0]]);
  });

  it("answers ONNX Runtime's run errors on either thread the same way, direct or through the binding, and keeps serving", async () => {
    const messages: string[] = [];
    for (const { name: mode } of VARIANTS) {
      const model = `add_${mode}`;
      const bad = server.infer({
        model,
        inputs: [
          { name: 'A', datatype: 'INT32', shape: [3], data: new Int32Array([1, 2, 3]) },
          { name: 'B', datatype: 'INT32', shape: [4], data: new Int32Array([1, 2, 3, 4]) },
        ],
      });
      let caught: unknown;
      await assert.rejects(bad, (err: unknown) => ((caught = err), true));
      assert.ok(caught instanceof NereidError, String(caught));
      assert.equal(caught.code, 'BACKEND_ERROR');
      assert.match(caught.message, new RegExp(`onnxruntime execute failure for model '${model}' instance '${model}_0_0': `));
      messages.push(caught.message.replace(model, 'MODEL').replace(`${model}_0_0`, 'INSTANCE'));
      const good = await server.infer({
        model,
        inputs: [
          { name: 'A', datatype: 'INT32', shape: [2], data: new Int32Array([1, 2]) },
          { name: 'B', datatype: 'INT32', shape: [2], data: new Int32Array([10, 20]) },
        ],
      });
      assert.deepEqual(typedArrayOf('INT32', out(good, 'C')), new Int32Array([11, 22]));
    }
    assert.deepEqual(messages, VARIANTS.map(() => messages[0]));
  });

  it('answers cancelled requests CANCELLED on either thread', async () => {
    for (const mode of MODES) {
      const controller = new AbortController();
      controller.abort();
      const { request } = simpleRequest(`simple_${mode}`, 1);
      await assert.rejects(server.infer(request, { signal: controller.signal }), (err: unknown) => err instanceof NereidError && err.code === 'REQUEST_CANCELLED');
    }
  });
});

describe('execution_thread with a slow model', () => {
  const BATCH = 32;
  const INPUT = 256;
  let repo: string;
  let server: Server;
  let logger: ReturnType<typeof recordingLogger>;
  const input = Float32Array.from({ length: BATCH * INPUT }, (_, i) => Math.cos(i * 0.11));

  before(async () => {
    // 256 → 1024 → 1024 → 16 at batch 32: about 85 MFLOP a run, tens of milliseconds on one thread.
    const extra = `${ONE_INSTANCE}parameters { key: "intra_op_thread_count" value: { string_value: "1" } }\n`;
    const auto = mlpModel({ name: 'slow_auto', maxBatchSize: BATCH, configExtra: extra + thread('auto') });
    const inline = mlpModel({ name: 'slow_inline', maxBatchSize: BATCH, configExtra: extra + thread('inline') });
    repo = await makeRepository({
      slow_auto: { 'config.pbtxt': auto.config!, '1/model.onnx': auto.onnx.bytes },
      slow_inline: { 'config.pbtxt': inline.config!, '1/model.onnx': inline.onnx.bytes },
    });
    logger = recordingLogger();
    server = await Server.start({ modelRepositories: [repo], logger });
    assert.deepEqual(server.startReport.failures, []);
  });

  after(async () => {
    await server?.stop();
    if (repo) await removeDir(repo);
  });

  const heavy = (model: string) => server.infer({ model, inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [BATCH, INPUT], data: input }] });

  /**
   * Whether three event-loop turns pass while `count` heavy requests of `model` compute (several
   * keep the worker busy long enough that a descheduled main thread on a loaded machine still
   * gets its turns).
   */
  async function loopTurnsWhileComputing(model: string, count = 1): Promise<boolean> {
    let turns = 0;
    let done = false;
    const result = Promise.all(Array.from({ length: count }, () => heavy(model))).then((r) => ((done = true), r[0]!));
    const turned = new Promise<boolean>((resolve) => {
      const turn = () => {
        if (done) return resolve(false);
        if (++turns === 3) return resolve(true);
        setImmediate(turn);
      };
      setImmediate(turn);
    });
    const [response, whileComputing] = await Promise.all([result, turned]);
    assert.deepEqual(response.outputs[0]!.shape, [BATCH, 16]);
    return whileComputing;
  }

  it('stays on the worker in auto mode, and the event loop turns while it computes', async () => {
    // More runs than a measurement window: enough for auto to have decided.
    for (let i = 0; i < 70; i++) await heavy('slow_auto');
    assert.deepEqual(logger.lines.filter((l) => l.includes('slow_auto') && l.includes("event loop's thread")), []);
    assert.equal(await loopTurnsWhileComputing('slow_auto', 8), true);
  });

  it('blocks the event loop when forced inline (what auto avoids)', async () => {
    assert.equal(await loopTurnsWhileComputing('slow_inline'), false);
  });

  it('gives the same outputs in both modes', async () => {
    const [a, b] = await Promise.all([heavy('slow_auto'), heavy('slow_inline')]);
    assert.deepEqual(out(a, 'OUTPUT0'), out(b, 'OUTPUT0'));
  });
});

describe('execution_thread and unloading', () => {
  const threads = () => Number(/^Threads:\s+(\d+)$/m.exec(readFileSync('/proc/self/status', 'utf8'))![1]);

  it('releases the worker of an instance that went inline', async () => {
    const simple = simpleModel({ name: 'tiny' });
    const repo = await makeRepository({ tiny: { 'config.pbtxt': simple.config! + ONE_INSTANCE + GENEROUS, '1/model.onnx': simple.onnx.bytes } });
    const logger = recordingLogger();
    const server = await Server.start({ modelRepositories: [repo], logger, modelControlMode: 'explicit' });
    try {
      const before = threads();
      await server.loadModel('tiny');
      for (let i = 0; i < 100; i++) await server.infer(simpleRequest('tiny', 1).request);
      assert.equal(logger.lines.filter((l) => l.includes("model 'tiny'") && l.includes("event loop's thread")).length, 1);
      await server.unloadModel('tiny');
      let now = threads();
      for (let i = 0; i < 300 && now !== before; i++) {
        await new Promise((resolve) => setTimeout(resolve, 10));
        now = threads();
      }
      assert.equal(now, before);
      await assert.rejects(server.infer(simpleRequest('tiny', 1).request), (err: unknown) => err instanceof NereidError);
    } finally {
      await server.stop();
      await removeDir(repo);
    }
  });
});

describe('direct_session', () => {
  it('refuses a value that is not true or false at load, naming the model, and serves the others', async () => {
    const bad = simpleModel({ name: 'direct_maybe' });
    const good = simpleModel({ name: 'direct_off' });
    const repo = await makeRepository({
      direct_maybe: { 'config.pbtxt': bad.config! + 'parameters { key: "direct_session" value: { string_value: "maybe" } }\n', '1/model.onnx': bad.onnx.bytes },
      direct_off: { 'config.pbtxt': good.config! + BINDING, '1/model.onnx': good.onnx.bytes },
    });
    const server = await Server.start({ modelRepositories: [repo], logger: silentLogger() });
    try {
      assert.deepEqual(server.startReport.failures.map((f) => f.name), ['direct_maybe']);
      assert.match(server.startReport.failures[0]!.reason, /model 'direct_maybe': parameter 'direct_session' must be true or false, got 'maybe'/);
      const { request, sum } = simpleRequest('direct_off', 2);
      assert.deepEqual(typedArrayOf('INT32', out(await server.infer(request), 'OUTPUT0')), sum);
    } finally {
      await server.stop();
      await removeDir(repo);
    }
  });
});
