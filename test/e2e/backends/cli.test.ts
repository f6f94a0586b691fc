/**
 * Custom and unsupported backends through the `nereid` command: `serve --backend-directory` and
 * `--backend-config=<backend>,module=`, and `nereid config` running a custom backend's
 * auto-complete or refusing a backend that cannot run here.
 */
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runNereid, startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { inferJson, jsonBody, makeRepository, outputNamed, removeDir, type JsonInferResponse } from '../../helpers/harness.js';
import { scaleConfig, scaleModule, xInput } from './modules.js';

/** A backend whose auto-complete declares X and Y (FP32 [-1]) and max_batch_size 4. */
const AUTO_COMPLETE_MODULE = `export default {
  spiVersion: 1,
  async autoCompleteConfig(ctx) {
    const tensor = (name) => ({ name, data_type: 'TYPE_FP32', dims: [-1] });
    return { ...ctx.config, max_batch_size: 4, input: [tensor('X')], output: [tensor('Y')] };
  },
  async createModel() {
    return { async createInstance() { return { async execute() {}, async unload() {} }; }, async unload() {} };
  },
};
`;

let repo: string;
let backends: string;

before(async () => {
  repo = await makeRepository({
    packaged: { 'config.pbtxt': scaleConfig('packaged', 'dirbackend'), '1/.keep': '' },
    named: { 'config.pbtxt': scaleConfig('named', 'namedbackend'), '1/.keep': '' },
    auto: { 'config.pbtxt': 'backend: "auto"\n', '1/model.mjs': AUTO_COMPLETE_MODULE },
    plan: { '1/model.plan': 'plan' },
  });
  backends = await makeRepository({});
  await mkdir(join(backends, 'dirbackend'), { recursive: true });
  await writeFile(join(backends, 'dirbackend', 'index.mjs'), scaleModule('dirbackend', 11));
  await writeFile(join(backends, 'named.mjs'), scaleModule('namedbackend', 12));
});

after(async () => {
  await stopAllNereid();
  await removeDir(repo);
  await removeDir(backends);
});

describe('nereid and custom backends', () => {
  it('serve --backend-directory and --backend-config=<backend>,module= find the modules', async () => {
    const server = await startNereidServe([
      `--model-repository=${repo}`,
      '--model-control-mode=explicit',
      '--load-model=packaged',
      '--load-model=named',
      `--backend-directory=${backends}`,
      `--backend-config=namedbackend,module=${join(backends, 'named.mjs')}`,
    ]);
    for (const [model, factor] of [['packaged', 11], ['named', 12]] as const) {
      const reply = await inferJson(server.url, model, [xInput([2])]);
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'Y').data, [2 * factor]);
    }
    await server.process.stop();
  });

  it("nereid config runs a custom backend's auto-complete", async () => {
    const { exit, stdout, stderr } = await runNereid(['config', join(repo, 'auto'), '--json']);
    assert.equal(exit.code, 0, stderr);
    const report = JSON.parse(stdout) as { config: { max_batch_size: number; input: { name: string }[] }; provenance: Record<string, string> };
    assert.equal(report.config.max_batch_size, 4);
    assert.deepEqual(report.config.input.map((i) => i.name), ['X']);
    assert.equal(report.provenance['max_batch_size'], 'auto-complete');
  });

  it('nereid config refuses a TensorRT model saying why', async () => {
    const { exit, stderr } = await runNereid(['config', join(repo, 'plan')]);
    assert.equal(exit.code, 1);
    assert.match(stderr, /model 'plan' uses backend 'tensorrt', TensorRT .* which Nereid does not support on this server/);
  });
});
