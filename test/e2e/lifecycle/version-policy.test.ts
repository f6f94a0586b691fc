/**
 * The `version_policy` load parameter (docs/protocol.md) in a real `nereid serve` process, set
 * through @nereid/client over HTTP and gRPC and with plain HTTP: the policy applies over the
 * repository's config.pbtxt, so an ONNX model keeps its inputs, batching and instance settings
 * (a `config` parameter holding only a version_policy would replace them all); changing only the
 * policy reloads no version that stays; weights are checked against the versions it serves; a
 * load without it goes back to config.pbtxt's policy; bad values are refused naming the model and
 * the expected form.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, HttpClient, InferenceServerError } from '@nereid/client';
import { startNereidServe, type NereidProcess } from '../../helpers/cli.js';
import { httpRequest, inferJson, jsonBody, makeRepository, outputNamed, removeDir, type JsonInferResponse } from '../../helpers/harness.js';
import { taggedFiles, TAGGED_WIDTH } from '../../helpers/lifecycle.js';

const EXTRA = 'dynamic_batching { max_queue_delay_microseconds: 700 }\ninstance_group [ { kind: KIND_CPU, count: 2 } ]\n';

let repo: string;
let proc: NereidProcess;
let url: string;
let http: HttpClient;
let grpc: GrpcClient;

before(async () => {
  repo = await makeRepository({ t: taggedFiles('t', { 1: 100, 2: 200, 3: 300 }, EXTRA) });
  const started = await startNereidServe([`--model-repository=${repo}`, '--model-control-mode=explicit', '--load-model=t', '--log-verbose=1']);
  proc = started.process;
  url = started.url;
  assert.ok(started.grpcPort !== undefined, proc.output);
  http = new HttpClient(url);
  grpc = new GrpcClient(`127.0.0.1:${started.grpcPort}`);
});

after(async () => {
  grpc?.close();
  await proc?.stop();
  if (repo) await removeDir(repo);
});

interface ServedConfig {
  max_batch_size: number;
  input: { name: string }[];
  dynamic_batching?: { max_queue_delay_microseconds?: string | number };
  instance_group: { count: number }[];
  version_policy: unknown;
}

async function servedConfig(version: string): Promise<ServedConfig> {
  return jsonBody(await httpRequest(`${url}/v2/models/t/versions/${version}/config`)) as ServedConfig;
}

/** What version `version` adds to its input ('' : the version requests without one go to). */
async function tag(version = ''): Promise<number> {
  const reply = await inferJson(url, 't', [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: [0, 0, 0, 0] }], version === '' ? {} : { version });
  assert.equal(reply.status, 200, reply.text);
  return outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data[0] as number;
}

async function ready(): Promise<string[]> {
  return (await http.repositoryIndex({ ready: true })).map((e) => e.version ?? '');
}

describe('the version_policy load parameter', () => {
  it("serves the policy's versions with config.pbtxt's inputs, batching and instances", async () => {
    assert.deepEqual(await ready(), ['3']);
    await http.loadModel('t', { versionPolicy: { specific: { versions: [1, 2] } } });
    assert.deepEqual(await ready(), ['1', '2']);
    for (const v of ['1', '2']) {
      const config = await servedConfig(v);
      assert.deepEqual(config.input.map((i) => i.name), ['INPUT0']);
      assert.equal(config.max_batch_size, 8);
      assert.equal(Number(config.dynamic_batching?.max_queue_delay_microseconds), 700);
      assert.equal(config.instance_group[0]?.count, 2);
      assert.deepEqual(config.version_policy, { specific: { versions: [1, 2] } });
    }
    assert.equal(await tag('1'), 100);
    assert.equal(await tag(), 200);
  });

  it('over gRPC with weights: widening the policy loads only the new version; the weights split requests', async () => {
    const before = proc.output.split('successfully loaded').length;
    await grpc.loadModel('t', { versionPolicy: { latest: { num_versions: 2 } }, versionWeights: { 2: 1, 3: 1 } });
    assert.deepEqual(await ready(), ['2', '3']);
    assert.equal(proc.output.split('successfully loaded').length - before, 1, `only version 3 loads:\n${proc.output}`);
    const seen = [await tag(), await tag(), await tag(), await tag()].sort();
    assert.deepEqual(seen, [200, 200, 300, 300]);
    await assert.rejects(http.loadModel('t', { versionPolicy: { specific: { versions: [3] } }, versionWeights: { 2: 1 } }), (err: InferenceServerError) => {
      assert.equal(err.status, 400);
      assert.match(err.message, /load parameter 'version_weights' of model 't' names version 2, which this load does not serve \(it serves version 3,/);
      return true;
    });
    assert.deepEqual(await ready(), ['2', '3'], 'a refused load changes nothing');
  });

  it("a load without it goes back to config.pbtxt's policy", async () => {
    await http.loadModel('t');
    assert.deepEqual(await ready(), ['3']);
    assert.equal(await tag(), 300);
    assert.deepEqual((await servedConfig('3')).version_policy, { latest: { num_versions: 1 } }, 'the kept copy reports the policy in effect');
  });

  it('bad values are refused with 400 / INVALID_ARGUMENT naming the model and the form', async () => {
    const cases: [unknown, RegExp][] = [
      [{}, /it sets no choice/],
      [{ latest: { num_versions: 1 }, all: {} }, /only one may be set/],
      [{ specific: { versions: [] } }, /'specific.versions' is empty/],
      [{ specific: { versions: [1, 'x'] } }, /at 'version_policy.specific.versions\[1\]': expected an integer/],
      [{ latest: { num_versions: 0 } }, /'latest.num_versions' is 0/],
      [{ newest: {} }, /unknown field 'newest'/],
      [[1, 2], /got an array, not an object/],
      ['{"all":', /is not JSON/],
    ];
    for (const [value, why] of cases) {
      const reply = await httpRequest(`${url}/v2/repository/models/t/load`, { method: 'POST', body: JSON.stringify({ parameters: { version_policy: value } }) });
      assert.equal(reply.status, 400, `${JSON.stringify(value)}: ${reply.text}`);
      assert.match(reply.text, /load parameter 'version_policy' of model 't'/);
      assert.match(reply.text, why);
      assert.match(reply.text, /\{\\"specific\\": \{\\"versions\\": \[1, 2\]\}\}/, 'the message shows the expected form');
    }
    // gRPC: the JSON text in string_param; another kind is refused.
    await assert.rejects(grpc.loadModel('t', { versionPolicy: { specific: { versions: [] } } }), (err: InferenceServerError) => {
      assert.equal(err.grpcCode, 3);
      assert.match(err.message, /load parameter 'version_policy' of model 't': 'specific.versions' is empty/);
      return true;
    });
    assert.deepEqual(await ready(), ['3']);
  });
});
