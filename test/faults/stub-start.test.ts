/**
 * A stub that is slow to start (docs/backends.md, Faults): `stub-timeout-seconds` bounds its
 * start-up, and a server that exits while a stub is starting leaves no ring file in /dev/shm
 * (the rings are unlinked once both processes hold them; before that, at the server's exit).
 * The slow start is an interpreter wrapper that sleeps before it runs Python.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chmod, writeFile } from 'node:fs/promises';
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { addModels, makeRepository, removeDir, startServer } from '../helpers/harness.js';
import { IDENTITY_PY, PYTHON, identityConfig, requirePython, waitUntil } from '../helpers/python.js';
import { shmEntries, stubs, stubsSeenDuring } from './census.js';

describe('faults: a stub that is slow to start', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let slowPython: string;

  before(async () => {
    repo = await makeRepository({});
    await addModels(repo, { identity: { 'config.pbtxt': identityConfig('identity', 'TYPE_FP32'), '1/model.py': IDENTITY_PY } });
    slowPython = join(repo, 'slow-python3');
    await writeFile(slowPython, `#!/bin/sh\nsleep 5\nexec ${PYTHON} "$@"\n`);
    await chmod(slowPython, 0o755);
  });

  after(async () => {
    await removeDir(repo);
  });

  it('fails the load once stub-timeout-seconds passed, kills the stub and leaves nothing', { timeout: 60_000 }, async () => {
    const srv = await startServer({
      modelRepositories: [repo],
      modelControlMode: 'explicit',
      backendConfig: new Map([['python', { 'python-executable': slowPython, 'stub-timeout-seconds': '1' }]]),
    });
    try {
      await assert.rejects(srv.server.loadModel('identity'), (err: Error) => {
        assert.match(err.message, /^load failed for model 'identity': version 1 is at UNAVAILABLE state: model 'identity' instance 'identity_0': the Python stub did not start within 1 s \(stub-timeout-seconds\)/);
        return true;
      });
      // The wrapper shell is the stub's process: it was killed, so its sleep never runs Python.
      await waitUntil(() => stubs().length === 0, 'the stub to be gone', 10_000);
      assert.deepEqual([...(await stubsSeenDuring(1000))], []);
      assert.deepEqual(shmEntries(), []);
    } finally {
      await srv.stop();
    }
  });

  it('a server that exits while a stub starts leaves no ring file in /dev/shm', { timeout: 60_000 }, async () => {
    const serverDist = fileURLToPath(new URL('../../../packages/server/dist/index.js', import.meta.url));
    const script = `
      const { Server, silentLogger } = await import(${JSON.stringify(serverDist)});
      const server = new Server({ modelRepositories: [${JSON.stringify(repo)}], modelControlMode: 'explicit', logger: silentLogger(),
        backendConfig: new Map([['python', { 'python-executable': ${JSON.stringify(slowPython)} }]]) });
      await server.load();
      void server.loadModel('identity').catch(() => undefined);
      setTimeout(async () => {
        const names = (await import('node:fs')).readdirSync('/dev/shm').filter((n) => n.startsWith('nereid-' + process.pid + '-'));
        console.log('RINGS ' + names.length);
        process.exit(0);
      }, 1500);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (c: Buffer) => (output += c.toString()));
    child.stderr.on('data', (c: Buffer) => (output += c.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    assert.equal(code, 0, output);
    // While the stub was starting its two rings existed; the exit removed them.
    assert.match(output, /RINGS 2/);
    assert.deepEqual(readdirSync('/dev/shm').filter((n) => n.startsWith(`nereid-${child.pid}-`)), []);
  });
});
