/**
 * 200 load → infer → unload cycles of a Python model and of an ONNX model: what a cycle takes it
 * gives back. Checked on this process (the server runs in it): resident memory, open descriptors
 * (/proc/self/fd), threads (/proc/self/task), child processes (a Python stub is one) and the
 * /dev/shm entries of this server (`nereid-<pid>-…`; other servers' entries are not counted),
 * after warm-up cycles and at the end. The figures are printed as test diagnostics.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { makeRepository, removeDir, startServer, type RunningServer } from '../helpers/harness.js';
import { TAGGED_WIDTH, taggedFiles } from '../helpers/lifecycle.js';
import { IDENTITY_PY, identityConfig, requirePython, waitUntil } from '../helpers/python.js';
import { census, children, shmEntries, type Census } from './census.js';

const CYCLES = 200;
/** Cycles before the first sample: allocator pools, JIT and first-use caches settle. */
const WARM_UP = 20;
/**
 * Growth over the measured cycles beyond these fails. A leaked stub, ring, worker thread or
 * session per cycle would add one or more descriptors or threads per cycle (hundreds in all)
 * and megabytes of memory per cycle.
 */
const FD_SLACK = 8;
const THREAD_SLACK = 4;
const RSS_LIMIT_MB = 64;

describe('faults: load/unload cycles give back what they took', { timeout: 900_000 }, () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      py: { 'config.pbtxt': identityConfig('py', 'TYPE_FP32'), '1/model.py': IDENTITY_PY },
      onnx: taggedFiles('onnx', { 1: 7 }, 'instance_group [ { kind: KIND_CPU, count: 1 } ]\n'),
    });
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit' });
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  const inferPy = async () => {
    const r = await srv.server.infer({ model: 'py', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 2], data: new Float32Array([1, 2]) }] });
    assert.deepEqual([...new Float32Array(new Uint8Array(r.outputs[0]!.data).buffer)], [1, 2]);
  };
  const inferOnnx = async () => {
    const r = await srv.server.infer({ model: 'onnx', inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: new Int32Array(TAGGED_WIDTH) }] });
    assert.deepEqual([...new Int32Array(new Uint8Array(r.outputs[0]!.data).buffer)], [7, 7, 7, 7]);
  };

  /** What is held once every unloaded instance has been released (they go after the unload). */
  const settled = async (): Promise<Census> => {
    await waitUntil(() => children().length === 0 && shmEntries().length === 0, 'stubs and ring files to be gone', 30_000);
    // Worker threads and descriptors of released instances close asynchronously.
    let last = census();
    for (let i = 0; i < 50; i++) {
      await new Promise((r) => setTimeout(r, 40));
      const now = census();
      if (now.fds === last.fds && now.threads === last.threads) break;
      last = now;
    }
    return census();
  };

  async function cycles(t: TestContext, model: string, infer: () => Promise<void>): Promise<void> {
    const empty = await settled();
    let first: Census | undefined;
    for (let i = 0; i < CYCLES; i++) {
      if (i === WARM_UP) first = await settled();
      await srv.server.loadModel(model);
      await infer();
      await srv.server.unloadModel(model);
    }
    const last = await settled();
    const mb = (n: number) => (n / 2 ** 20).toFixed(1);
    t.diagnostic(
      `${model}: ${CYCLES} cycles; before ${JSON.stringify({ ...empty, rss: `${mb(empty.rss)} MB` })}; ` +
        `after ${WARM_UP}: ${JSON.stringify({ ...first!, rss: `${mb(first!.rss)} MB` })}; end: ${JSON.stringify({ ...last, rss: `${mb(last.rss)} MB` })}`,
    );
    assert.equal(last.children, 0, 'child processes left');
    assert.equal(last.shm, 0, '/dev/shm entries left');
    assert.ok(last.fds <= first!.fds + FD_SLACK, `open descriptors grew from ${first!.fds} to ${last.fds}`);
    assert.ok(last.threads <= first!.threads + THREAD_SLACK, `threads grew from ${first!.threads} to ${last.threads}`);
    assert.ok(last.rss - first!.rss < RSS_LIMIT_MB * 2 ** 20, `resident memory grew by ${mb(last.rss - first!.rss)} MB`);
  }

  it(`${CYCLES} cycles of a Python model`, async (t) => {
    await cycles(t, 'py', inferPy);
  });

  it(`${CYCLES} cycles of an ONNX model`, async (t) => {
    await cycles(t, 'onnx', inferOnnx);
  });
});
