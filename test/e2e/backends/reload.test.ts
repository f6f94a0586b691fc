/**
 * Reloading a model whose custom backend module changed runs the new code (ES modules and
 * CommonJS alike); an unchanged module is not imported again; a reload with a broken module
 * leaves the serving version in place.
 */
import assert from 'node:assert/strict';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { inferJson, jsonBody, makeRepository, outputNamed, removeDir, startServer, type JsonInferResponse, type RunningServer } from '../../helpers/harness.js';
import { factoryCommonJsModule, scaleConfig, scaleModule, xInput } from './modules.js';

let repo: string;
let srv: RunningServer;

before(async () => {
  repo = await makeRepository({
    reload_esm: { 'config.pbtxt': scaleConfig('reload_esm', 'esm'), '1/model.mjs': scaleModule('esm', 2) },
    reload_cjs: { 'config.pbtxt': scaleConfig('reload_cjs', 'cjs'), '1/model.cjs': factoryCommonJsModule('cjs', 2) },
  });
  srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['reload_esm', 'reload_cjs'] });
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

async function y(model: string): Promise<number> {
  const reply = await inferJson(srv.url, model, [xInput([1])]);
  assert.equal(reply.status, 200, reply.text);
  return outputNamed(jsonBody(reply) as JsonInferResponse, 'Y').data[0] as number;
}

describe('reloading custom backends', () => {
  it('an ES module changed on disk is imported afresh by the next load', async () => {
    assert.equal(await y('reload_esm'), 2);
    await writeFile(join(repo, 'reload_esm', '1', 'model.mjs'), scaleModule('esm', 10));
    assert.equal(await y('reload_esm'), 2, 'the serving version keeps its code until a reload');
    await srv.server.loadModel('reload_esm');
    assert.equal(await y('reload_esm'), 10);
    // Back to the first text: its module is imported again under its own content, not stale.
    await writeFile(join(repo, 'reload_esm', '1', 'model.mjs'), scaleModule('esm', 2));
    await srv.server.loadModel('reload_esm');
    assert.equal(await y('reload_esm'), 2);
  });

  it('a CommonJS module changed on disk is required afresh', async () => {
    assert.equal(await y('reload_cjs'), 2);
    await writeFile(join(repo, 'reload_cjs', '1', 'model.cjs'), factoryCommonJsModule('cjs', 7));
    await srv.server.loadModel('reload_cjs');
    assert.equal(await y('reload_cjs'), 7);
  });

  it('a reload whose module is broken fails and the previous code keeps serving', async () => {
    await writeFile(join(repo, 'reload_esm', '1', 'model.mjs'), 'export default {');
    await assert.rejects(srv.server.loadModel('reload_esm'), /reload_esm\/1\/model\.mjs\) failed to import/);
    assert.equal(await y('reload_esm'), 2);
  });
});
