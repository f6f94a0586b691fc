/**
 * The effective-configuration endpoint (Nereid's, docs/protocol.md):
 * `GET /v2/models/{m}[/versions/{v}]/effective-config` answers the configuration in use, exactly
 * as `/config` does, with the origin of every field; `nereid config` prints the same.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import { httpRequest, jsonBody, makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { runNereid } from '../../helpers/cli.js';

interface EffectiveConfig {
  name: string;
  version: string;
  source: string;
  config: Record<string, unknown>;
  provenance: Record<string, string>;
}

describe('GET /v2/models/{m}/effective-config', () => {
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    const model = simpleModel();
    repo = await makeRepository({
      // Only max_batch_size: inputs and outputs come from the ONNX graph.
      partial: modelFiles(simpleModel({ name: 'partial' }), { config: 'max_batch_size: 4\n' }),
      simple: modelFiles(model),
      bare: { '1/model.onnx': model.onnx.bytes },
      versions: { ...modelFiles(simpleModel({ name: 'versions' }), { config: 'version_policy { all { } }' }), '2/model.onnx': model.onnx.bytes },
      overridden: modelFiles(simpleModel({ name: 'overridden' })),
    });
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['*'] });
  });
  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  async function effective(path: string): Promise<EffectiveConfig> {
    const reply = await httpRequest(`${srv.url}${path}`);
    assert.equal(reply.status, 200, reply.text);
    return jsonBody(reply) as EffectiveConfig;
  }

  it('answers the config the /config endpoint answers, with an origin for every field', async () => {
    for (const model of ['partial', 'simple', 'bare']) {
      const body = await effective(`/v2/models/${model}/effective-config`);
      const config = jsonBody(await httpRequest(`${srv.url}/v2/models/${model}/config`));
      assert.deepEqual(body.config, config);
      assert.equal(body.name, model);
      assert.equal(body.version, '1');
      assert.ok(Object.keys(body.provenance).length > 40);
      assert.ok(Object.values(body.provenance).every((o) => ['file', 'override', 'auto-complete', 'default'].includes(o)));
    }
  });

  it('tells the file, auto-complete and defaults apart', async () => {
    const partial = await effective('/v2/models/partial/effective-config');
    assert.equal(partial.source, 'file');
    assert.equal(partial.provenance['max_batch_size'], 'file');
    assert.equal(partial.provenance['input[0].name'], 'auto-complete');
    assert.equal(partial.provenance['output[1].dims'], 'auto-complete');
    assert.equal(partial.provenance['name'], 'default');
    assert.equal(partial.provenance['instance_group[0].count'], 'default');

    const simple = await effective('/v2/models/simple/effective-config');
    assert.equal(simple.provenance['input[0].name'], 'file');
    assert.equal(simple.provenance['platform'], 'file');
    assert.equal(simple.provenance['backend'], 'default');

    const bare = await effective('/v2/models/bare/effective-config');
    assert.equal(bare.source, 'none');
    assert.ok(!Object.values(bare.provenance).includes('file'));
    assert.equal(bare.provenance['max_batch_size'], 'auto-complete');
  });

  it('reports a load’s config override as override', async () => {
    await srv.server.loadModel('overridden', { config: JSON.stringify({ max_batch_size: 2, dynamic_batching: { max_queue_delay_microseconds: 100 } }) });
    const body = await effective('/v2/models/overridden/effective-config');
    assert.equal(body.source, 'override');
    assert.equal(body.provenance['max_batch_size'], 'override');
    assert.equal(body.provenance['dynamic_batching.max_queue_delay_microseconds'], 'override');
    assert.equal(body.provenance['input[0].name'], 'auto-complete');
    assert.equal((body.config as { max_batch_size: number }).max_batch_size, 2);
  });

  it('serves a named version, and answers lookup errors as /config does', async () => {
    assert.equal((await effective('/v2/models/versions/versions/2/effective-config')).version, '2');
    assert.equal((await effective('/v2/models/versions/versions/1/effective-config')).version, '1');
    for (const path of ['/v2/models/nope/effective-config', '/v2/models/simple/versions/9/effective-config']) {
      const got = await httpRequest(`${srv.url}${path}`);
      const want = await httpRequest(`${srv.url}${path.replace('effective-config', 'config')}`);
      assert.deepEqual([got.status, got.text], [want.status, want.text]);
    }
    assert.equal((await httpRequest(`${srv.url}/v2/models/simple/effective-config`, { method: 'POST' })).status, 405);
  });

  it('agrees with `nereid config --json` on the same model directory', async () => {
    const { exit, stdout, stderr } = await runNereid(['config', join(repo, 'partial'), '--json']);
    assert.deepEqual(exit, { code: 0, signal: null }, stderr);
    const cli = JSON.parse(stdout) as EffectiveConfig & { directory: string; config_file: string };
    const http = await effective('/v2/models/partial/effective-config');
    assert.deepEqual(cli.config, http.config);
    assert.deepEqual(cli.provenance, http.provenance);
    assert.equal(cli.config_file, join(repo, 'partial', 'config.pbtxt'));
  });
});
