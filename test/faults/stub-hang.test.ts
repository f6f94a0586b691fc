/**
 * A stub whose execute never returns, and no execute timeout set (docs/backends.md, Faults).
 * Nereid's answer: once the model unloads, or the server begins to shut down (SIGTERM), every
 * execute may run for `unload-timeout-secs` more (default 20 s, below --exit-timeout-secs'
 * 30 s); past that its stub is killed and its requests get an error response. So an unload and
 * a shutdown finish, the hung request is answered, and no process or /dev/shm file is left.
 * (A hung initialize is in stub-initialize.test.ts.)
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { readdirSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { NereidError } from '@nereid/protocol';
import { addModels, httpRequest, makeRepository, removeDir, startServer, type RunningServer } from '../helpers/harness.js';
import { startNereidServe, stopAllNereid } from '../helpers/cli.js';
import { processAlive, requirePython, SLEEPY_PY, waitUntil } from '../helpers/python.js';
import { shmEntries, stubs } from './census.js';

const CONFIG = `
name: "hangs"
backend: "python"
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
`;

const IN = [{ name: 'IN', datatype: 'INT32' as const, shape: [1], data: new Int32Array(1) }];
const BACKEND_CONFIG = new Map([['python', { 'unload-timeout-secs': '1' }]]);
const HUNG = /the Python stub was killed because execute did not return within 1 s once the model began to unload \(unload-timeout-secs\)/;

describe('faults: a stub that hangs in execute', () => {
  before(() => requirePython(['numpy']));
  let repo: string;

  before(async () => {
    repo = await makeRepository({});
    await addModels(repo, { hangs: { 'config.pbtxt': CONFIG, '1/model.py': SLEEPY_PY } });
  });

  after(async () => {
    await stopAllNereid();
    await removeDir(repo);
  });

  const hungRequest = (srv: RunningServer) => srv.server.infer({ model: 'hangs', parameters: { sleep: '3600' }, inputs: IN });
  const answeredWithError = (request: Promise<unknown>) =>
    assert.rejects(request, (err: NereidError) => {
      assert.equal(err.code, 'PYTHON_STUB_FAILED');
      assert.match(err.message, /^model 'hangs' instance 'hangs_0': /);
      assert.match(err.message, HUNG);
      return true;
    });

  it('an unload ends the hung execute after unload-timeout-secs: the request gets an error, the stub is gone', { timeout: 90_000 }, async () => {
    const srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['hangs'], backendConfig: BACKEND_CONFIG });
    try {
      // A request that finishes is not cut off by the unload: only a hung one is.
      const quick = srv.server.infer({ model: 'hangs', parameters: { sleep: '0.3' }, inputs: IN });
      const hung = hungRequest(srv);
      await new Promise((r) => setTimeout(r, 100));
      await srv.server.unloadModel('hangs');
      await quick;
      await answeredWithError(hung);
      await waitUntil(() => stubs().length === 0, 'the stub to be gone', 30_000);
      assert.deepEqual(shmEntries(), []);
    } finally {
      await srv.stop();
    }
  });

  it('Server.stop() with a hung execute finishes: the request gets an error, the stub is gone', { timeout: 90_000 }, async () => {
    const srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['hangs'], backendConfig: BACKEND_CONFIG });
    const hung = hungRequest(srv);
    await new Promise((r) => setTimeout(r, 300));
    const stopping = srv.stop();
    await answeredWithError(hung);
    await stopping;
    await waitUntil(() => stubs().length === 0, 'the stub to be gone', 30_000);
    assert.deepEqual(shmEntries(), []);
  });

  it('SIGTERM of nereid serve with a hung execute: the request is answered with an error, exit 0, nothing left', { timeout: 120_000 }, async () => {
    const { process: nereid, url } = await startNereidServe([
      `--model-repository=${repo}`,
      '--model-control-mode=explicit',
      '--load-model=hangs',
      '--backend-config=python,unload-timeout-secs=1',
      '--exit-timeout-secs=60',
    ]);
    const serverPid = nereid.child.pid!;
    const m = await nereid.waitFor(/initialize pid (\d+)/, 'stdout').catch(() => nereid.waitFor(/initialize pid (\d+)/, 'stderr'));
    const stubPid = Number(m[1]);
    const body = JSON.stringify({ parameters: { sleep: '3600' }, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [0] }] });
    const reply = httpRequest(`${url}/v2/models/hangs/infer`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
    await new Promise((r) => setTimeout(r, 500));
    nereid.child.kill('SIGTERM');
    const answer = await reply;
    assert.equal(answer.status, 500, answer.text);
    assert.match(answer.text, HUNG);
    const exit = await nereid.waitForExit();
    assert.deepEqual(exit, { code: 0, signal: null }, nereid.output);
    await waitUntil(() => !processAlive(stubPid), 'the stub to be gone', 10_000);
    assert.deepEqual(readdirSync('/dev/shm').filter((n) => n.startsWith(`nereid-${serverPid}-`)), []);
  });
});
