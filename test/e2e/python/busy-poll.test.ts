/**
 * Busy polling of an idle stub (`busy-poll-us`; python/nereid_stub/transport.py, `Channel`): after
 * an execute, the stub polls its channel for up to that long before it sleeps, but only while
 * messages keep coming within that window; a wait that outlasted it makes the next one sleep at
 * once. The model here answers each request with its process's CPU time, so the CPU a stub spent
 * between two requests shows whether it polled: about the window after a burst of requests, and
 * nothing after a request that followed an idle spell, or with `busy-poll-us=0`.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { availableParallelism } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { REPO_ROOT } from '../../helpers/cli.js';
import { PYTHON, requirePython } from '../../helpers/python.js';

/** The window under test, long enough to tell polling from sleeping by CPU time. */
const WINDOW_US = 300_000;
/** A stub on a machine of one CPU never polls: there the test checks that instead. */
const ONE_CPU = availableParallelism() < 2;

const CPU_CLOCK_PY = `
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        # The CPU time of the whole stub process: its main thread's polling counts.
        now = np.array([time.process_time()], dtype=np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("CPU", now)]) for _ in requests]
`;

const CONFIG = `
name: "cpu_clock"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "CPU" data_type: TYPE_FP64 dims: [ 1 ] } ]
`;

describe('Python backend: busy polling of an idle stub (busy-poll-us)', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  const servers: RunningServer[] = [];

  before(async () => {
    repo = await makeRepository({ cpu_clock: { 'config.pbtxt': CONFIG, '1/model.py': CPU_CLOCK_PY } });
  });
  after(async () => {
    for (const s of servers) await s.stop();
    await removeDir(repo);
  });

  async function serve(busyPollUs: string): Promise<RunningServer> {
    const srv = await startServer({ modelRepositories: [repo], backendConfig: new Map([['python', { 'busy-poll-us': busyPollUs }]]) });
    servers.push(srv);
    assert.deepEqual(srv.server.startReport.failures, []);
    return srv;
  }

  /** The stub's CPU seconds when it ran this request. */
  async function cpu(srv: RunningServer): Promise<number> {
    const r = await srv.server.infer({ model: 'cpu_clock', inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: new Float32Array([1]) }] });
    const data = r.outputs[0]!.data;
    return new Float64Array(data.buffer.slice(data.byteOffset, data.byteOffset + 8))[0]!;
  }

  /**
   * CPU seconds the stub spent from the last of a burst of requests to one sent `idleMs` later,
   * and the stub's CPU seconds at that later request.
   */
  async function afterBurst(srv: RunningServer, idleMs: number): Promise<{ spent: number; at: number }> {
    let last = 0;
    for (let i = 0; i < 6; i++) last = await cpu(srv);
    await sleep(idleMs);
    const at = await cpu(srv);
    return { spent: at - last, at };
  }

  it('polls for about the window after a burst of requests, then sleeps; after an idle spell it sleeps at once', async () => {
    const srv = await serve(String(WINDOW_US));
    if (ONE_CPU) {
      const { spent } = await afterBurst(srv, 900);
      assert.ok(spent < 0.05, `the stub of a one-CPU machine spent ${spent.toFixed(3)} s of CPU after a burst; it must not poll`);
      return;
    }
    // Requests back to back: each comes well within the window, so the stub polls after the last
    // one for the whole window (the CPU it spends), then sleeps.
    const polled = await afterBurst(srv, 900);
    assert.ok(polled.spent > 0.1 && polled.spent < 0.6, `the stub spent ${polled.spent.toFixed(3)} s of CPU in the 0.9 s after a burst; a ${WINDOW_US / 1000} ms poll expected`);
    // That request came after an idle spell longer than the window: the wait after it sleeps at once.
    await sleep(900);
    const idle = (await cpu(srv)) - polled.at;
    assert.ok(idle < 0.05, `the stub spent ${idle.toFixed(3)} s of CPU while idle after a request that followed an idle spell`);
    // A new burst polls again.
    const again = await afterBurst(srv, 900);
    assert.ok(again.spent > 0.1, `the stub spent ${again.spent.toFixed(3)} s of CPU after a second burst; a poll expected`);
  });

  it('never polls with busy-poll-us=0', async () => {
    const srv = await serve('0');
    const { spent } = await afterBurst(srv, 900);
    assert.ok(spent < 0.05, `the stub spent ${spent.toFixed(3)} s of CPU after a burst with busy-poll-us=0`);
  });

  it('refuses a busy-poll-us that is not a non-negative number, naming the model and setting', async () => {
    const srv = await startServer({ modelRepositories: [repo], backendConfig: new Map([['python', { 'busy-poll-us': 'fast' }]]) });
    servers.push(srv);
    const failure = srv.server.startReport.failures.find((f) => f.name === 'cpu_clock');
    assert.ok(failure, JSON.stringify(srv.server.startReport));
    assert.match(failure.reason, /model 'cpu_clock': 'busy-poll-us' must be a non-negative number, got 'fast'/);
  });

  it('does not poll on a single CPU, where polling would only delay the server', () => {
    const script = `
import os, sys
sys.path.insert(0, ${JSON.stringify(join(REPO_ROOT, 'packages/server/python'))})
os.environ["NEREID_STUB_BUSY_POLL_US"] = "200"
from nereid_stub import transport
many = transport._busy_poll_seconds()
os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
print(many, transport._busy_poll_seconds())
`;
    const r = spawnSync(PYTHON, ['-c', script], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    const [many, one] = r.stdout.trim().split(' ').map(Number);
    assert.equal(one, 0);
    // On a machine of several CPUs the setting applies.
    if (!ONE_CPU) assert.equal(many, 0.0002);
  });
});
