/**
 * Fault isolation of the Python backend (docs/backends.md): a stub killed with SIGKILL in the
 * middle of a request, or hung past its execute timeout, fails the requests it held with an
 * error naming the model, is restarted (initialize runs again) and serves again, while other
 * models keep serving; finalize runs on unload; a server killed with SIGKILL leaves no stub.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import type { NereidError } from '@nereid/protocol';
import { mappingUnavailableReason } from '@nereid/server';
import { addModels, makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { IDENTITY_PY, identityConfig, processAlive, requirePython, recordingLogger, SLEEPY_PY, waitUntil } from '../../helpers/python.js';


// Empties the stub's inbound ring file (server → stub) when asked: the server's next
// write into it lands past the end of the file.
const SHRINKS_PY = String.raw`
import json, os, re
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            if json.loads(request.parameters()).get("shrink") == "1":
                for fd in os.listdir("/proc/self/fd"):
                    try:
                        target = os.readlink("/proc/self/fd/" + fd)
                    except OSError:
                        continue
                    if re.search(r"nereid-\d+-[0-9a-f]+-in( \(deleted\))?$", target):
                        os.ftruncate(int(fd), 0)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([os.getpid()], dtype=np.int64))]))
        return responses
`;

const FINALIZE_PY = String.raw`
import json
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.marker = json.loads(args["model_config"])["parameters"]["MARKER"]["string_value"]

    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", np.array([0], dtype=np.int64))]) for _ in requests]

    def finalize(self):
        with open(self.marker, "w") as f:
            f.write("finalized")
`;

function sleepyConfig(name: string, extra = ''): string {
  return `
name: "${name}"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
${extra}
`;
}

const IN = [{ name: 'IN', datatype: 'INT32' as const, shape: [1], data: new Int32Array(1) }];

describe('Python backend: fault isolation', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;
  const logger = recordingLogger();
  let marker: string;

  const pidOf = async (model: string, sleep = 0): Promise<number> => {
    const r = await srv.server.infer({ model, parameters: { sleep: String(sleep) }, inputs: IN });
    const d = r.outputs[0]!.data;
    return Number(Buffer.from(d.buffer, d.byteOffset, 8).readBigInt64LE(0));
  };
  const identityStillServes = async () => {
    const r = await srv.server.infer({ model: 'identity', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 2], data: new Float32Array([7, 8]) }] });
    assert.deepEqual([...new Float32Array(new Uint8Array(r.outputs[0]!.data).buffer)], [7, 8]);
  };

  before(async () => {
    repo = await makeRepository({});
    marker = join(repo, 'finalized.txt');
    await addModels(repo, {
      sleepy: { 'config.pbtxt': sleepyConfig('sleepy'), '1/model.py': SLEEPY_PY },
      hangs: {
        'config.pbtxt': sleepyConfig('hangs', 'parameters { key: "EXECUTE_TIMEOUT_SECS" value: { string_value: "1" } }'),
        '1/model.py': SLEEPY_PY,
      },
      finalizes: {
        'config.pbtxt': sleepyConfig('finalizes', `parameters { key: "MARKER" value: { string_value: "${marker}" } }`),
        '1/model.py': FINALIZE_PY,
      },
      identity: { 'config.pbtxt': identityConfig('identity', 'TYPE_FP32'), '1/model.py': IDENTITY_PY },
      shrinks: { 'config.pbtxt': sleepyConfig('shrinks'), '1/model.py': SHRINKS_PY },
    });
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['*'], logger });
    assert.deepEqual(srv.server.startReport.failures, []);
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('fails the request of a stub killed mid-request, restarts it, and keeps the others serving', async () => {
    const pid = await pidOf('sleepy');
    const inits = () => logger.lines.filter((l) => l.includes("[model 'sleepy' instance 'sleepy_0'] initialize pid")).length;
    const initsBefore = inits();
    const slow = pidOf('sleepy', 30);
    await new Promise((r) => setTimeout(r, 300));
    process.kill(pid, 'SIGKILL');
    await assert.rejects(slow, (err: NereidError) => {
      assert.equal(err.code, 'PYTHON_STUB_FAILED');
      assert.match(err.message, /model 'sleepy' instance 'sleepy_0'/);
      assert.match(err.message, /SIGKILL/);
      return true;
    });
    await identityStillServes();
    const next = await pidOf('sleepy');
    assert.notEqual(next, pid);
    assert.ok(processAlive(next));
    // The print comes through the stub's stdout, which may trail its answers.
    await waitUntil(() => inits() === initsBefore + 1, 'initialize to run again in the new stub');
    assert.ok(logger.lines.some((l) => l.startsWith('E ') && l.includes("model 'sleepy'") && l.includes('restarts')));
  });

  it('kills a stub whose execute outlives the execute timeout, fails its request and serves again', async () => {
    const pid = await pidOf('hangs');
    const started = Date.now();
    await assert.rejects(pidOf('hangs', 60), (err: NereidError) => {
      assert.equal(err.code, 'PYTHON_STUB_FAILED');
      assert.match(err.message, /model 'hangs'/);
      assert.match(err.message, /did not return within 1 s/);
      return true;
    });
    assert.ok(Date.now() - started < 30_000, 'the timeout, not the 60 s sleep, ended the request');
    await waitUntil(() => !processAlive(pid), 'the hung stub to be gone');
    const next = await pidOf('hangs');
    assert.notEqual(next, pid);
    await identityStillServes();
  });

  it('stops a stub that shrinks its shared-memory ring, fails the request that needed it and serves again', async () => {
    const pid = await pidOf('shrinks');
    const shrink = () => srv.server.infer({ model: 'shrinks', parameters: { shrink: '1' }, inputs: IN });
    await shrink(); // its inputs were read before it shrank the ring
    if (mappingUnavailableReason() === undefined) {
      // The server's next write into the ring faults past the end of the file: the guarded copy
      // reports it, the stub is stopped, the request fails, the server carries on.
      await assert.rejects(pidOf('shrinks'), (err: NereidError) => {
        assert.equal(err.code, 'PYTHON_STUB_FAILED');
        assert.match(err.message, /model 'shrinks' instance 'shrinks_0'/);
        assert.match(err.message, /broke its shared-memory channel \(the shared-memory ring file was shrunk while writing a message\)/);
        return true;
      });
      await waitUntil(() => !processAlive(pid), 'the stub to be gone');
      const next = await pidOf('shrinks');
      assert.notEqual(next, pid);
    } else {
      // Positioned writes extend the file again: the stub keeps serving.
      assert.equal(await pidOf('shrinks'), pid);
    }
    await identityStillServes();
  });

  it('runs finalize on unload', async () => {
    const pid = await pidOf('finalizes').catch(() => 0);
    assert.equal(pid, 0);
    assert.equal(existsSync(marker), false);
    await srv.server.unloadModel('finalizes');
    // The unload resolves once the model is no longer ready; its instances are released after.
    await waitUntil(() => existsSync(marker), 'finalize to write its marker');
    assert.equal(await readFile(marker, 'utf8'), 'finalized');
    await identityStillServes();
  });

  it('leaves no stub behind when the server process is killed with SIGKILL', async () => {
    const serverDist = fileURLToPath(new URL('../../../../packages/server/dist/index.js', import.meta.url));
    const script = `
      const { Server, createLogger } = await import(${JSON.stringify(serverDist)});
      const server = new Server({ modelRepositories: [${JSON.stringify(repo)}], modelControlMode: 'explicit', loadModels: ['sleepy'], logger: createLogger() });
      await server.load();
      console.log('READY');
      setInterval(() => {}, 1000);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    try {
      // The stub's print and the server's READY come through different pipes, in either order.
      const started = () => output.includes('READY') && /initialize pid \d+/.test(output);
      await waitUntil(() => started() || child.exitCode !== null, 'the child server to start', 60_000);
      assert.ok(started(), `the child server did not start:\n${output}`);
      const m = /initialize pid (\d+)/.exec(output);
      assert.ok(m, `no stub pid in:\n${output}`);
      const stubPid = Number(m[1]);
      assert.ok(processAlive(stubPid));
      child.kill('SIGKILL');
      await waitUntil(() => !processAlive(stubPid), `stub ${stubPid} to exit after its server was killed`, 10_000);
    } finally {
      child.kill('SIGKILL');
    }
  });
});
