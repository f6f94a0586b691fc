/**
 * A stub that dies in the middle of a request (docs/backends.md, Faults): the request gets an
 * error response naming the model, instance and how the stub ended (never lost), the next
 * request is served by a new stub, and a stub that dies again soon after every restart is
 * restarted with a growing delay (bounded: it cannot keep a core busy) until unloading stops it.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import type { NereidError } from '@nereid/protocol';
import { addModels, httpRequest, makeRepository, removeDir, startServer, type RunningServer } from '../helpers/harness.js';
import { processAlive, recordingLogger, requirePython, waitUntil } from '../helpers/python.js';
import { shmEntries, stubs, stubsSeenDuring } from './census.js';

/**
 * Answers its pid; `crash` = `exit` ends the process with os._exit(3), `kill` sends itself
 * SIGKILL. While the MARKER file exists, every stub dies 50 ms after its initialize.
 */
const CRASHY_PY = String.raw`
import json, os, signal, threading
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        print("initialize pid", os.getpid(), flush=True)
        marker = json.loads(args["model_config"])["parameters"]["MARKER"]["string_value"]
        if os.path.exists(marker):
            threading.Timer(0.05, lambda: os._exit(7)).start()

    def execute(self, requests):
        out = []
        for request in requests:
            how = json.loads(request.parameters()).get("crash", "")
            if how == "exit":
                os._exit(3)
            if how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))]))
        return out
`;

const IN = [{ name: 'IN', datatype: 'INT32' as const, shape: [1], data: new Int32Array(1) }];

describe('faults: a stub that crashes', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let marker: string;
  let srv: RunningServer;
  const logger = recordingLogger();

  before(async () => {
    repo = await makeRepository({});
    marker = join(repo, 'die-after-start');
    await addModels(repo, {
      crashy: {
        'config.pbtxt': `
name: "crashy"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
parameters { key: "MARKER" value: { string_value: "${marker}" } }
`,
        '1/model.py': CRASHY_PY,
      },
    });
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['crashy'], logger });
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  const pid = async (crash = ''): Promise<number> => {
    const r = await srv.server.infer({ model: 'crashy', parameters: { crash }, inputs: IN });
    const d = r.outputs[0]!.data;
    return Number(Buffer.from(d.buffer, d.byteOffset, 8).readBigInt64LE(0));
  };

  for (const [how, why] of [
    ['exit', /the Python stub exited with code 3/],
    ['kill', /the Python stub was killed by SIGKILL/],
  ] as const) {
    it(`answers the request in flight with an error when execute ends the stub (${how}), then serves the next one`, { timeout: 60_000 }, async () => {
      const before = await pid();
      await assert.rejects(pid(how), (err: NereidError) => {
        assert.equal(err.code, 'PYTHON_STUB_FAILED');
        assert.match(err.message, /^model 'crashy' instance 'crashy_0': /);
        assert.match(err.message, why);
        return true;
      });
      const after = await pid();
      assert.notEqual(after, before);
      assert.ok(!processAlive(before));
    });
  }

  it('answers a crashed request over HTTP with an error status and body', { timeout: 60_000 }, async () => {
    const body = JSON.stringify({ parameters: { crash: 'exit' }, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [0] }] });
    const reply = await httpRequest(`${srv.url}/v2/models/crashy/infer`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
    assert.equal(reply.status, 500, reply.text);
    assert.match(reply.text, /model 'crashy' instance 'crashy_0': the Python stub exited with code 3/);
    await pid();
  });

  it('restarts a stub that dies after every start with a growing delay, and unloading stops it', { timeout: 120_000 }, async () => {
    await writeFile(marker, '');
    await assert.rejects(pid('exit'));
    // Restarted at once, then after 0.25 s, 0.5 s, 1 s, 2 s, 4 s: about seven starts in 6 s
    // (without a delay, a start every 0.1-0.2 s). A slower machine starts fewer.
    const seen = await stubsSeenDuring(6000);
    assert.ok(seen.size >= 2, `the stub was not restarted (${seen.size} seen)`);
    assert.ok(seen.size <= 12, `${seen.size} stubs started in 6 s: restarts are not slowed down`);
    assert.ok(logger.lines.some((l) => l.startsWith('W ') && /the Python stub died \d+ times in a row within 10 s of its start; restarting it in/.test(l)));
    // Once the model stops dying, a request waits for the next restart and is served.
    await rm(marker);
    assert.ok((await pid()) > 0);
    await srv.server.unloadModel('crashy');
    await waitUntil(() => stubs().length === 0, 'the stub to end at unload', 60_000);
    assert.deepEqual([...(await stubsSeenDuring(1500))], [], 'a stub was started after the unload');
    assert.deepEqual(shmEntries(), []);
  });

  it('stops a pending restart at unload: nothing is started afterwards', { timeout: 120_000 }, async () => {
    await srv.server.loadModel('crashy');
    await writeFile(marker, '');
    await assert.rejects(pid('exit'));
    // Let the delays grow, then unload while a restart waits.
    await waitUntil(() => logger.lines.some((l) => /restarting it in [1-9]/.test(l)), 'a restart delay of a second or more', 60_000);
    await srv.server.unloadModel('crashy');
    await waitUntil(() => stubs().length === 0, 'the stub to end at unload', 60_000);
    assert.deepEqual([...(await stubsSeenDuring(3000))], [], 'a stub was started after the unload');
    assert.deepEqual(shmEntries(), []);
    await rm(marker);
  });
});
