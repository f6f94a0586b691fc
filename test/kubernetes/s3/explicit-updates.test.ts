/**
 * S3 model repositories in mode explicit (docs/model-repository-s3.md): a load by name takes the
 * newest complete revision from the store; with --repository-poll-secs the loaded models are
 * re-checked and reloaded when their objects change, keeping their config override and version
 * policy parameter; a partial
 * upload never loads; and a model updated in the bucket while several clients send requests
 * without pause is replaced with no failed request.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { httpRequest, inferJson, jsonBody, outputNamed, type JsonInferResponse } from '../../helpers/harness.js';
import { taggedConfig, taggedConfigJson, taggedFiles, taggedOnnx, TAGGED_WIDTH, waitFor } from '../../helpers/lifecycle.js';
import { startS3, type S3Store } from '../helpers/s3.js';
import { manifestOf, putModel, putObject } from '../helpers/s3-models.js';

const BUCKET = 'fleet-models';

/** An ensemble of one step: the tagged model `step`. */
const PIPELINE_CONFIG = `
name: "pipeline"
platform: "ensemble"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_INT32 dims: [ ${TAGGED_WIDTH} ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ ${TAGGED_WIDTH} ] } ]
ensemble_scheduling {
  step [ { model_name: "step" model_version: -1 input_map { key: "INPUT0" value: "IN" } output_map { key: "OUTPUT0" value: "OUT" } } ]
}
`;

async function load(url: string, model: string, config?: string): Promise<{ status: number; text: string }> {
  const body = config === undefined ? {} : { parameters: { config } };
  return httpRequest(`${url}/v2/repository/models/${model}/load`, { method: 'POST', body: JSON.stringify(body) });
}

async function answer(url: string, model: string): Promise<number | undefined> {
  const reply = await inferJson(url, model, [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: [0, 0, 0, 0] }]);
  if (reply.status !== 200) return undefined;
  return outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data[0] as number;
}

async function maxBatchSize(url: string, model: string): Promise<number> {
  return (jsonBody(await httpRequest(`${url}/v2/models/${model}/config`)) as { max_batch_size: number }).max_batch_size;
}

describe('S3 model repositories in mode explicit', () => {
  let s3: S3Store;
  let env: Record<string, string>;

  before(async () => {
    s3 = await startS3();
    await s3.createBucket(BUCKET);
    env = { AWS_ACCESS_KEY_ID: s3.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.secretAccessKey, AWS_REGION: s3.region, AWS_ENDPOINT_URL_S3: s3.endpoint };
  });
  after(async () => {
    await stopAllNereid();
    await s3?.stop();
  });

  it('a load by name takes the newest revision from the store first; an unknown model fails as for a local repository', async () => {
    const prefix = 'byname/';
    await putModel(s3.client, BUCKET, prefix, 'tagged', taggedFiles('tagged', { 1: 1 }), { manifest: true });
    const srv = await startNereidServe([`--model-repository=s3://${BUCKET}/${prefix}`, '--model-control-mode=explicit'], env);
    const index = jsonBody(await httpRequest(`${srv.url}/v2/repository/index`, { method: 'POST', body: '{}' }));
    assert.deepEqual(index, [{ name: 'tagged' }], 'the index lists the models of the bucket before any load');
    assert.equal((await load(srv.url, 'tagged')).status, 200);
    assert.equal(await answer(srv.url, 'tagged'), 1);
    await putModel(s3.client, BUCKET, prefix, 'tagged', taggedFiles('tagged', { 1: 2 }), { manifest: true });
    assert.equal(await answer(srv.url, 'tagged'), 1, 'no re-check without --repository-poll-secs');
    assert.equal((await load(srv.url, 'tagged')).status, 200);
    assert.equal(await answer(srv.url, 'tagged'), 2);
    const missing = await load(srv.url, 'absent');
    assert.equal(missing.status, 500, missing.text);
    assert.match(missing.text, /failed to load 'absent', failed to poll from model repository: no directory 'absent' in s3:\/\/fleet-models\/byname\//);
    await srv.process.stop();
  });

  it('a load of an ensemble by name brings its composing models from the store too; an empty version directory is a directory marker', async () => {
    const prefix = 'ensemble/';
    await putModel(s3.client, BUCKET, prefix, 'step', taggedFiles('step', { 1: 40 }), { manifest: true });
    await putObject(s3.client, BUCKET, `${prefix}pipeline/config.pbtxt`, PIPELINE_CONFIG);
    await putObject(s3.client, BUCKET, `${prefix}pipeline/1/`, '');
    const srv = await startNereidServe([`--model-repository=s3://${BUCKET}/${prefix}`, '--model-control-mode=explicit', '--repository-settle-secs=0'], env);
    const loaded = await load(srv.url, 'pipeline');
    assert.equal(loaded.status, 200, loaded.text);
    const reply = await inferJson(srv.url, 'pipeline', [{ name: 'IN', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: [1, 1, 1, 1] }]);
    assert.equal(reply.status, 200, reply.text);
    assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUT').data, [41, 41, 41, 41]);
    await srv.process.stop();
  });

  describe('with --repository-poll-secs', () => {
    const prefix = 'rechecked/';
    let srv: Awaited<ReturnType<typeof startNereidServe>>;

    before(async () => {
      await putModel(s3.client, BUCKET, prefix, 'tagged', taggedFiles('tagged', { 1: 100 }), { manifest: true });
      await putModel(s3.client, BUCKET, prefix, 'plain', taggedFiles('plain', { 1: 10 }), { manifest: true });
      srv = await startNereidServe([`--model-repository=s3://${BUCKET}/${prefix}`, '--model-control-mode=explicit', '--repository-poll-secs=1', '--load-model=plain'], env);
      // Loaded with a config override: max_batch_size 4 instead of the file's 8.
      const loaded = await load(srv.url, 'tagged', taggedConfigJson('tagged', { max_batch_size: 4 }));
      assert.equal(loaded.status, 200, loaded.text);
      assert.equal(await answer(srv.url, 'tagged'), 100);
      assert.equal(await maxBatchSize(srv.url, 'tagged'), 4);
    });
    after(async () => {
      await srv?.process.stop();
    });

    it('a partial upload (config changed, model file not yet) does not load until it is complete', async () => {
      const next = { 'config.pbtxt': taggedConfig('plain', 'parameters { key: "generation" value: { string_value: "2" } }'), '1/model.onnx': taggedOnnx(20) };
      await putObject(s3.client, BUCKET, `${prefix}plain/config.pbtxt`, next['config.pbtxt']);
      // Three re-checks see the new configuration beside the old model file and manifest.
      await waitFor('the re-check to refuse the partial revision', () => /model 'plain': revision in [^\n]* not taken: [^\n]*config\.pbtxt' does not match its SHA256SUMS checksum/.test(srv.process.stderr), 20_000);
      await new Promise((r) => setTimeout(r, 3000));
      assert.equal(await answer(srv.url, 'plain'), 10);
      const config = jsonBody(await httpRequest(`${srv.url}/v2/models/plain/config`)) as { parameters?: Record<string, unknown> };
      assert.equal(config.parameters?.generation, undefined, 'the served configuration is the old one');
      assert.equal(srv.process.stderr.match(/model 'plain': revision/g)?.length, 1, 'the refusal is logged once');
      await putObject(s3.client, BUCKET, `${prefix}plain/1/model.onnx`, next['1/model.onnx']);
      await putObject(s3.client, BUCKET, `${prefix}plain/SHA256SUMS`, manifestOf(next));
      await waitFor('the completed upload to serve', async () => (await answer(srv.url, 'plain')) === 20, 30_000);
      const updated = jsonBody(await httpRequest(`${srv.url}/v2/models/plain/config`)) as { parameters?: Record<string, { string_value: string }> };
      assert.equal(updated.parameters?.generation?.string_value, '2');
    });

    it('a model updated in the bucket under load from several clients: 0 failed requests, the new version answers, the override stays', async (t) => {
      const clients = 6;
      let stop = false;
      let ok = 0;
      const failures: string[] = [];
      const seen = new Set<number>();
      const loop = async () => {
        while (!stop) {
          try {
            const reply = await inferJson(srv.url, 'tagged', [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: [1, 2, 3, 4] }]);
            if (reply.status !== 200) failures.push(`${reply.status} ${reply.text}`);
            else {
              const out = outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data as number[];
              seen.add(out[0]! - 1);
              ok++;
            }
          } catch (err) {
            failures.push(String(err));
          }
        }
      };
      const running = Array.from({ length: clients }, loop);
      try {
        await waitFor('requests to flow', () => ok > 50);
        await putModel(s3.client, BUCKET, prefix, 'tagged', taggedFiles('tagged', { 1: 200 }), { manifest: true });
        await waitFor('the new version to answer', () => seen.has(200), 30_000);
        const after = ok;
        await waitFor('more requests on the new version', () => ok > after + 50);
      } finally {
        stop = true;
        await Promise.all(running);
      }
      assert.deepEqual(failures, []);
      assert.deepEqual([...seen].sort((a, b) => a - b), [100, 200]);
      assert.equal(await answer(srv.url, 'tagged'), 200);
      assert.equal(await maxBatchSize(srv.url, 'tagged'), 4, 'the reload kept the config override');
      assert.match(srv.process.stdout, /model 'tagged' changed in its repository; reloading it/);
      assert.ok(ok > 100, `${ok} requests answered`);
      t.diagnostic(`${ok} requests from ${clients} clients, none failed`);
    });

    it("a model loaded with version_policy: a change in the bucket reloads with the new config.pbtxt and the same policy", async () => {
      const generation = (n: number) => `dynamic_batching { }\nparameters { key: "generation" value: { string_value: "${n}" } }`;
      await putModel(s3.client, BUCKET, prefix, 'versioned', taggedFiles('versioned', { 1: 1000, 2: 2000, 3: 3000 }, generation(1)), { manifest: true });
      const body = JSON.stringify({ parameters: { version_policy: { specific: { versions: [1, 2] } } } });
      const loaded = await httpRequest(`${srv.url}/v2/repository/models/versioned/load`, { method: 'POST', body });
      assert.equal(loaded.status, 200, loaded.text);
      const ready = async () =>
        ((jsonBody(await httpRequest(`${srv.url}/v2/repository/index`, { method: 'POST', body: '{"ready": true}' })) as { name: string; version: string }[]))
          .filter((e) => e.name === 'versioned')
          .map((e) => e.version);
      const tagOf = async (version: string) => {
        const reply = await inferJson(srv.url, 'versioned', [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: [0, 0, 0, 0] }], { version });
        return reply.status === 200 ? (outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data[0] as number) : undefined;
      };
      const served = async (version: string) =>
        jsonBody(await httpRequest(`${srv.url}/v2/models/versioned/versions/${version}/config`)) as {
          input: unknown[];
          max_batch_size: number;
          dynamic_batching?: unknown;
          parameters?: Record<string, { string_value: string }>;
          version_policy: unknown;
        };
      assert.deepEqual(await ready(), ['1', '2']);
      assert.equal((await served('1')).input.length, 1, "config.pbtxt's inputs");
      assert.equal((await served('1')).max_batch_size, 8);

      await putModel(s3.client, BUCKET, prefix, 'versioned', taggedFiles('versioned', { 1: 1001, 2: 2001, 3: 3001 }, generation(2)), { manifest: true });
      await waitFor('the re-check to reload version 2 from the new revision', async () => (await tagOf('2')) === 2001, 30_000);
      assert.equal(await tagOf('1'), 1001);
      assert.deepEqual(await ready(), ['1', '2'], 'the policy of the load still selects the versions');
      const config = await served('2');
      assert.equal(config.parameters?.generation?.string_value, '2', "the new config.pbtxt's settings");
      assert.notEqual(config.dynamic_batching, undefined);
      assert.deepEqual(config.version_policy, { specific: { versions: [1, 2] } });
      assert.match(srv.process.stdout, /model 'versioned' changed in its repository; reloading it/);
    });
  });
});
