/**
 * Custom backends on worker threads (docs/backends.md, "Worker threads"): with the model parameter
 * `execution_thread: "worker"` (or `runInWorkers` from the API) each instance executes on a
 * thread of its own, so a CPU-bound execute does not block the server's event loop. Tensors
 * cross in transferred buffers; a worker that dies fails what it held and is replaced; unload
 * reaches the backend inside the worker.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { runInWorkers, type ModelVersionStatus } from '@nereid/server';
import {
  addModels,
  httpRequest,
  inferJson,
  jsonBody,
  makeRepository,
  outputNamed,
  removeDir,
  startServer,
  type JsonInferResponse,
  type RunningServer,
} from '../../helpers/harness.js';
import { executeModule, scaleConfig, scaleModule, xInput } from './modules.js';

/**
 * Busy-loops without yielding until the file `release_file` exists (output RELEASED 1) or
 * `cap_ms` passed (RELEASED 0); writes `started_file` first and, on instance unload, writes the
 * instance name to `unloaded_file`.
 */
const BUSY_MODULE = `import { existsSync, writeFileSync } from 'node:fs';
export default {
  spiVersion: 1,
  async createModel(ctx) {
    const p = (k) => ctx.config.parameters[k]?.string_value;
    return {
      async createInstance(spec) {
        return {
          async execute(requests) {
            writeFileSync(p('started_file'), 'started');
            const t0 = Date.now();
            let released = 0;
            while (Date.now() - t0 < Number(p('cap_ms'))) {
              if (existsSync(p('release_file'))) { released = 1; break; }
            }
            for (const r of requests) {
              r.respond({ outputs: [{ name: 'RELEASED', datatype: 'INT32', shape: [1, 1], data: new Uint8Array(new Int32Array([released]).buffer) }] });
            }
          },
          async unload() { writeFileSync(p('unloaded_file'), spec.name); },
        };
      },
      async unload() {},
    };
  },
};
`;

let repo: string;
let srv: RunningServer;
let statuses: Map<string, ModelVersionStatus>;

function busyConfig(name: string, thread: 'main' | 'worker', capMs: number): string {
  const file = (what: string) => join(repo, `${name}.${what}`);
  return (
    `name: "${name}"\nbackend: "busy"\nmax_batch_size: 8\n` +
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n' +
    'output [ { name: "RELEASED" data_type: TYPE_INT32 dims: [ 1 ] } ]\n' +
    'instance_group [ { kind: KIND_CPU, count: 1 } ]\n' +
    `parameters { key: "execution_thread" value { string_value: "${thread}" } }\n` +
    `parameters { key: "cap_ms" value { string_value: "${capMs}" } }\n` +
    ['started_file', 'release_file', 'unloaded_file'].map((k) => `parameters { key: "${k}" value { string_value: "${file(k)}" } }\n`).join('')
  );
}

before(async () => {
  repo = await makeRepository({});
  await addModels(repo, {
    busy_worker: { 'config.pbtxt': busyConfig('busy_worker', 'worker', 30_000), '1/model.mjs': BUSY_MODULE },
    busy_main: { 'config.pbtxt': busyConfig('busy_main', 'main', 600), '1/model.mjs': BUSY_MODULE },
    scale_worker: {
      'config.pbtxt': scaleConfig('scale_worker', 'scale', {
        parameters: { execution_thread: 'worker' },
        extra: 'dynamic_batching { max_queue_delay_microseconds: 20000 }\n',
      }).replace('count: 1', 'count: 2'),
      '1/model.mjs': scaleModule('scale', 3),
    },
    crash_worker: {
      'config.pbtxt': scaleConfig('crash_worker', 'crash', { parameters: { execution_thread: 'worker' } }),
      '1/model.mjs': executeModule(
        'crash',
        `for (const r of requests) {
          const x = new Float32Array(new Uint8Array(r.inputs.get('X').data).buffer);
          if (x[0] < 0) process.exit(3);
          r.respond({ outputs: [{ name: 'Y', datatype: 'FP32', shape: r.inputs.get('X').shape, data: new Uint8Array(x.buffer) }] });
        }`,
      ),
    },
    restart_fails: {
      'config.pbtxt': scaleConfig('restart_fails', 'restartfails', { parameters: { execution_thread: 'worker' } }),
      '1/model.mjs':
        `import { existsSync } from 'node:fs';\n` +
        `if (existsSync(${JSON.stringify(join(repo, 'no-restart'))})) throw new Error('the licence server is gone');\n` +
        executeModule('restartfails', 'process.exit(4);'),
    },
    abort_worker: {
      'config.pbtxt': scaleConfig('abort_worker', 'aborts', { parameters: { execution_thread: 'worker' } }),
      '1/model.mjs': executeModule(
        'aborts',
        `const { writeFileSync } = await import('node:fs');
        const r = requests[0];
        writeFileSync(${JSON.stringify(repo)} + '/abort.started', 'x');
        await new Promise((resolve) => {
          r.signal.addEventListener('abort', resolve, { once: true });
          setTimeout(resolve, 5000);
        });
        writeFileSync(${JSON.stringify(repo)} + '/abort.seen', String(r.signal.aborted));
        r.respond(new Error('cancelled'));`,
      ),
    },
    broken_worker: { 'config.pbtxt': scaleConfig('broken_worker', 'broken', { parameters: { execution_thread: 'worker' } }), '1/model.mjs': 'export default {' },
    bad_thread: { 'config.pbtxt': scaleConfig('bad_thread', 'scale', { parameters: { execution_thread: 'gpu' } }), '1/model.mjs': scaleModule('scale', 3) },
    via_api: { 'config.pbtxt': scaleConfig('via_api', 'viaapi'), '1/.keep': '' },
  });
  await writeFile(join(repo, 'viaapi.mjs'), scaleModule('viaapi', 9));
  srv = await startServer({
    modelRepositories: [repo],
    modelControlMode: 'explicit',
    loadModels: ['busy_worker', 'busy_main', 'scale_worker', 'crash_worker', 'restart_fails', 'abort_worker', 'broken_worker', 'bad_thread', 'via_api'],
    backends: [runInWorkers(join(repo, 'viaapi.mjs'), { name: 'viaapi' })],
  });
  statuses = new Map(srv.server.modelStatuses().map((s) => [s.name, s]));
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

async function waitForFile(path: string): Promise<void> {
  for (let i = 0; i < 2000 && !existsSync(path); i++) await sleep(5);
  assert.ok(existsSync(path), `${path} never appeared`);
}

/**
 * Starts an inference on `model`, waits until its execute has started, asks for health, then
 * releases the execute. Returns RELEASED and whether health was answered while the inference
 * was still running.
 */
async function healthDuringExecute(model: string): Promise<{ released: number; healthWhileRunning: boolean }> {
  let finished = false;
  const inflight = inferJson(srv.url, model, [xInput([1])]).finally(() => (finished = true));
  await waitForFile(join(repo, `${model}.started_file`));
  const health = await httpRequest(`${srv.url}/v2/health/live`);
  assert.equal(health.status, 200);
  const healthWhileRunning = !finished;
  await writeFile(join(repo, `${model}.release_file`), 'go');
  const reply = await inflight;
  assert.equal(reply.status, 200, reply.text);
  return { released: outputNamed(jsonBody(reply) as JsonInferResponse, 'RELEASED').data[0] as number, healthWhileRunning };
}

describe('custom backends on worker threads', () => {
  it('a CPU-bound execute on a worker leaves the event loop free: health answers while it runs', async () => {
    const r = await healthDuringExecute('busy_worker');
    assert.equal(r.healthWhileRunning, true);
    assert.equal(r.released, 1, 'the execute saw the release the test wrote while it ran');
  });

  it('the same execute on the main thread blocks the event loop until it gives up', async () => {
    const r = await healthDuringExecute('busy_main');
    assert.equal(r.released, 0, 'nothing could run on the main thread while execute looped');
  });

  it('batches cross to the workers and back intact, on both instances', async () => {
    const xs = Array.from({ length: 24 }, (_, i) => [i + 1, -(i + 1) / 2, i * 1.5 + 1]);
    const replies = await Promise.all(xs.map((x) => inferJson(srv.url, 'scale_worker', [xInput(x)])));
    const instances = new Set<unknown>();
    replies.forEach((reply, i) => {
      assert.equal(reply.status, 200, reply.text);
      const body = jsonBody(reply) as JsonInferResponse & { parameters?: Record<string, unknown> };
      assert.deepEqual(outputNamed(body, 'Y').data, xs[i]!.map((v) => v * 3));
      instances.add(body.parameters?.['instance']);
    });
    assert.ok([...instances].every((n) => n === 'scale_worker_0_0' || n === 'scale_worker_0_1'), [...instances].join(', '));
  });

  it('runInWorkers from the API serves a backend module passed to the server', async () => {
    const reply = await inferJson(srv.url, 'via_api', [xInput([2])]);
    assert.equal(reply.status, 200, reply.text);
    assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'Y').data, [18]);
  });

  it('a worker that exits fails its request naming model and instance; the next request gets a new worker', async () => {
    const crash = await inferJson(srv.url, 'crash_worker', [xInput([-1])]);
    assert.equal(crash.status, 500);
    assert.match(crash.text, /model 'crash_worker': custom backend 'crash' .*the worker thread of instance 'crash_worker_0_0' exited with code 3; the instance restarts on its next request/);
    const ok = await inferJson(srv.url, 'crash_worker', [xInput([4])]);
    assert.equal(ok.status, 200, ok.text);
    assert.deepEqual(outputNamed(jsonBody(ok) as JsonInferResponse, 'Y').data, [4]);
  });

  it('a worker that cannot be restarted fails the request with the reason', async () => {
    assert.equal((await inferJson(srv.url, 'restart_fails', [xInput([1])])).status, 500);
    await writeFile(join(repo, 'no-restart'), 'x');
    const reply = await inferJson(srv.url, 'restart_fails', [xInput([1])]);
    assert.equal(reply.status, 500);
    assert.match(reply.text, /could not restart instance 'restart_fails_0_0': .*failed to import: Error: the licence server is gone/);
  });

  it("a client that goes away aborts the request's signal inside the worker", async () => {
    const controller = new AbortController();
    const inflight = fetch(`${srv.url}/v2/models/abort_worker/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: [xInput([1])] }),
      signal: controller.signal,
    }).catch((err: unknown) => err);
    await waitForFile(join(repo, 'abort.started'));
    controller.abort();
    await inflight;
    await waitForFile(join(repo, 'abort.seen'));
    assert.equal(await readFile(join(repo, 'abort.seen'), 'utf8'), 'true');
  });

  it('a broken module fails the load from the worker, naming the file; a bad execution_thread is refused', () => {
    assert.equal(statuses.get('broken_worker')!.state, 'UNAVAILABLE');
    assert.match(statuses.get('broken_worker')!.reason, /model 'broken_worker': custom backend 'broken' \(.*broken_worker\/1\/model\.mjs\) failed to import/);
    assert.match(statuses.get('bad_thread')!.reason, /parameter 'execution_thread' must be "main" or "worker", got "gpu"/);
  });

  it('unloading the model unloads the instance inside its worker', async () => {
    await srv.server.unloadModel('busy_worker');
    // Versions are released in the background once drained.
    await waitForFile(join(repo, 'busy_worker.unloaded_file'));
    assert.equal(await readFile(join(repo, 'busy_worker.unloaded_file'), 'utf8'), 'busy_worker_0_0');
  });
});
