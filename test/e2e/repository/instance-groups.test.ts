/**
 * Instance groups (models-and-scheduling.md §2.10, §3.3): normalised names and counts, and a
 * model with several CPU instances answering concurrent requests correctly.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { simpleModel } from '@nereid/testkit';
import {
  httpRequest,
  inferJson,
  jsonBody,
  makeRepository,
  outputNamed,
  removeDir,
  simpleCase,
  startServer,
  type JsonInferResponse,
  type RunningServer,
} from '../../helpers/harness.js';

let repo: string;
let srv: RunningServer;

before(async () => {
  const onnx = simpleModel().onnx.bytes;
  repo = await makeRepository({
    three: {
      'config.pbtxt': `${simpleModel({ name: 'three' }).config}instance_group [ { kind: KIND_CPU, count: 3 } ]\n`,
      '1/model.onnx': onnx,
    },
    groups: {
      'config.pbtxt':
        `${simpleModel({ name: 'groups' }).config}` +
        'instance_group [ { count: 1 }, { name: "extra", kind: KIND_AUTO }, { kind: KIND_CPU, count: 1, passive: true } ]\n',
      '1/model.onnx': onnx,
    },
  });
  srv = await startServer({ modelRepositories: [repo] });
});

after(async () => {
  await srv?.stop();
  await removeDir(repo);
});

type Group = { name: string; kind: string; count: number; passive: boolean };

async function groupsOf(model: string): Promise<Group[]> {
  const reply = await httpRequest(`${srv.url}/v2/models/${model}/config`);
  assert.equal(reply.status, 200, reply.text);
  return (jsonBody(reply) as { instance_group: Group[] }).instance_group;
}

describe('instance groups', () => {
  it('normalises names, kinds and counts', async () => {
    assert.deepEqual((await groupsOf('three')).map((g) => [g.name, g.kind, g.count]), [['three_0', 'KIND_CPU', 3]]);
    // KIND_AUTO becomes KIND_CPU on a CPU-only server; count 0 becomes 2 for onnxruntime.
    assert.deepEqual((await groupsOf('groups')).map((g) => [g.name, g.kind, g.count, g.passive]), [
      ['groups_0', 'KIND_CPU', 1, false],
      ['extra', 'KIND_CPU', 2, false],
      ['groups_2', 'KIND_CPU', 1, true],
    ]);
  });

  it('a model with three CPU instances answers concurrent requests, each with its own result', async () => {
    const cases = Array.from({ length: 24 }, (_, i) => simpleCase(1 + (i % 8), i * 31));
    const replies = await Promise.all(cases.map((c) => inferJson(srv.url, 'three', c.inputs)));
    replies.forEach((reply, i) => {
      assert.equal(reply.status, 200, reply.text);
      const body = jsonBody(reply) as JsonInferResponse;
      assert.deepEqual(outputNamed(body, 'OUTPUT0').shape, [1 + (i % 8), 16]);
      assert.deepEqual(outputNamed(body, 'OUTPUT0').data, cases[i]!.sum, `request ${i}`);
      assert.deepEqual(outputNamed(body, 'OUTPUT1').data, cases[i]!.difference, `request ${i}`);
    });
  });

  it('a model with several groups, one passive, serves too', async () => {
    const cases = Array.from({ length: 8 }, (_, i) => simpleCase(2, i));
    const replies = await Promise.all(cases.map((c) => inferJson(srv.url, 'groups', c.inputs)));
    replies.forEach((reply, i) => {
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data, cases[i]!.sum);
    });
  });
});
