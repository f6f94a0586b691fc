/**
 * Busy polling of an idle stub (`busy-poll-us`; python/nereid_stub/transport.py, `Channel`): after
 * an execute, the stub polls its channel for up to that long before it sleeps, but only while
 * messages keep coming within that window; a wait that outlasted it makes the next one sleep at
 * once. The model here answers each request with the wall time its process's channel has spent
 * polling (`Channel.polled_seconds`) and its process's CPU time, so the time between two requests
 * shows whether the stub polled: the whole window after a burst of requests, and nothing after a
 * request that followed an idle spell, or with `busy-poll-us=0`. Wall time, unlike CPU time, does
 * not depend on how busy the machine is (a poll that yields its CPU to other work spends little of
 * it); the CPU time is checked only where the machine is quiet enough to tell.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { availableParallelism, loadavg } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, it } from 'node:test';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { REPO_ROOT } from '../../helpers/cli.js';
import { PYTHON, requirePython } from '../../helpers/python.js';

/** The window under test, in µs and in seconds. */
const WINDOW_US = 300_000;
const WINDOW_S = WINDOW_US / 1e6;
/** The idle time after a burst, longer than the window, in ms. */
const IDLE_MS = 900;
/** A stub on a machine of one CPU never polls: there the test checks that instead. */
const ONE_CPU = availableParallelism() < 2;

const CLOCKS_PY = `
import time
import numpy as np
import triton_python_backend_utils as pb_utils
from nereid_stub.transport import Channel


class TritonPythonModel:
    def execute(self, requests):
        # The stub's polling so far (wall seconds) and its whole process's CPU seconds.
        now = np.array([Channel.polled_seconds, time.process_time()], dtype=np.float64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("CLOCKS", now)]) for _ in requests]
`;

const CONFIG = `
name: "clocks"
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "CLOCKS" data_type: TYPE_FP64 dims: [ 2 ] } ]
`;

interface Clocks {
  polled: number;
  cpu: number;
}

describe('Python backend: busy polling of an idle stub (busy-poll-us)', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  const servers: RunningServer[] = [];

  before(async () => {
    repo = await makeRepository({ clocks: { 'config.pbtxt': CONFIG, '1/model.py': CLOCKS_PY } });
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

  /** The stub's clocks when it ran this request. */
  async function clocks(srv: RunningServer): Promise<Clocks> {
    const r = await srv.server.infer({ model: 'clocks', inputs: [{ name: 'X', datatype: 'FP32', shape: [1], data: new Float32Array([1]) }] });
    const data = r.outputs[0]!.data;
    const [polled, cpu] = new Float64Array(data.buffer.slice(data.byteOffset, data.byteOffset + 16));
    return { polled: polled!, cpu: cpu! };
  }

  /** What the stub spent from the last of a burst of requests to one sent `IDLE_MS` later, and its clocks then. */
  async function afterBurst(srv: RunningServer): Promise<{ spent: Clocks; at: Clocks }> {
    let last = await clocks(srv);
    for (let i = 0; i < 5; i++) last = await clocks(srv);
    await sleep(IDLE_MS);
    const at = await clocks(srv);
    return { spent: { polled: at.polled - last.polled, cpu: at.cpu - last.cpu }, at };
  }

  it('polls for the window after a burst of requests, then sleeps; after an idle spell it sleeps at once', async () => {
    const srv = await serve(String(WINDOW_US));
    if (ONE_CPU) {
      const { at } = await afterBurst(srv);
      assert.equal(at.polled, 0, 'the stub of a one-CPU machine polled; it must not');
      return;
    }
    // Requests back to back: each comes well within the window, so the stub polls after the last
    // one for the whole window, then sleeps. Polling stops at the first check past the deadline:
    // a little later than the window where the machine is busy.
    const polled = await afterBurst(srv);
    assert.ok(polled.spent.polled >= WINDOW_S && polled.spent.polled < WINDOW_S + 0.2,
      `the stub polled ${polled.spent.polled.toFixed(3)} s in the ${IDLE_MS / 1000} s after a burst; the ${WINDOW_S} s window expected`);
    // Polling costs CPU: on a quiet machine, most of the window (the poll yields its CPU to any
    // other work, so a busy machine lets it spend far less).
    if (quiet()) assert.ok(polled.spent.cpu > WINDOW_S / 3, `the stub spent ${polled.spent.cpu.toFixed(3)} s of CPU polling for ${WINDOW_S} s`);
    // That request came after an idle spell longer than the window: the wait after it sleeps at once.
    await sleep(IDLE_MS);
    const idle = await clocks(srv);
    assert.equal(idle.polled - polled.at.polled, 0, 'the stub polled while idle after a request that followed an idle spell');
    // A new burst polls again: the requests after its first come within the window.
    const again = await afterBurst(srv);
    assert.ok(again.spent.polled >= WINDOW_S, `the stub polled ${again.spent.polled.toFixed(3)} s after a second burst; the ${WINDOW_S} s window expected`);
  });

  it('never polls with busy-poll-us=0', async () => {
    const srv = await serve('0');
    const { at } = await afterBurst(srv);
    assert.equal(at.polled, 0, `the stub polled ${at.polled.toFixed(3)} s with busy-poll-us=0`);
  });

  it('refuses a busy-poll-us that is not a non-negative number, naming the model and setting', async () => {
    const srv = await startServer({ modelRepositories: [repo], backendConfig: new Map([['python', { 'busy-poll-us': 'fast' }]]) });
    servers.push(srv);
    const failure = srv.server.startReport.failures.find((f) => f.name === 'clocks');
    assert.ok(failure, JSON.stringify(srv.server.startReport));
    assert.match(failure.reason, /model 'clocks': 'busy-poll-us' must be a non-negative number, got 'fast'/);
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

/** Whether the machine is idle enough that a yielding poll gets a CPU to itself: a load average under one per CPU less one. */
function quiet(): boolean {
  return loadavg()[0]! < availableParallelism() - 1;
}
