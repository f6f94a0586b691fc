/**
 * What `nereid serve` logs at start, in tritonserver's shape: one `loading: <model>:<version>`
 * line as each version's load starts (also for loads through the repository API later), then
 * the backend table, the model status table and the option table with the values of the options
 * given, then the `Started …` lines.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { NEREID_VERSION } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { NereidProcess, startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { httpRequest, jsonBody, makeRepository, removeDir } from '../../helpers/harness.js';
import { scaleConfig, scaleModule } from '../backends/modules.js';

/** An info line's prefix, `I1202 17:36:00.123456 4242 nereid] `. */
const INFO = String.raw`I\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ nereid\] `;

/**
 * The table logged under the header `| <first> | …`: its rows as arrays of trimmed cells, and
 * where the log message holding it starts in `out`. The message is the line prefix alone, the
 * table on the next lines, then an empty line, as Triton writes it.
 */
function table(out: string, first: string): { rows: string[][]; at: number } {
  const header = new RegExp(String.raw`^${INFO}\n\+[-+]+\+\n\| ${first} +\|.*\n\+[-+]+\+\n((?:\|.*\|\n)*)\+[-+]+\+\n\n`, 'm');
  const m = header.exec(out);
  assert.ok(m, `no ${first} table in:\n${out}`);
  const rows = m[1]!
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => l.slice(1, -1).split('|').map((c) => c.trim()));
  return { rows, at: m.index };
}

after(stopAllNereid);

describe('nereid serve start-up log', () => {
  let repoA: string;
  let repoB: string;

  before(async () => {
    const onnx = simpleModel().onnx.bytes;
    repoA = await makeRepository({
      simple: { 'config.pbtxt': simpleModel().config!, '1/model.onnx': onnx },
      scaled: { 'config.pbtxt': scaleConfig('scaled', 'scale'), '1/model.mjs': scaleModule('scale', 3) },
    });
    repoB = await makeRepository({ other: { 'config.pbtxt': simpleModel({ name: 'other' }).config!, '1/model.onnx': onnx } });
  });
  after(async () => {
    await removeDir(repoA);
    await removeDir(repoB);
  });

  it('logs loading lines, then the backend, model and option tables with the options given, then starts listening', async () => {
    const server = await startNereidServe([
      `--model-repository=${repoA}`,
      '--model-repository',
      repoB,
      '--model-control-mode=explicit',
      '--load-model=simple',
      '--load-model=scaled',
      '--strict-readiness=false',
      '--exit-timeout-secs=7',
      '--backend-config=python,python-executable=/usr/bin/python3',
    ]);
    try {
      const out = server.process.stdout;
      const loading = [...out.matchAll(new RegExp(`^${INFO}loading: (\\S+)$`, 'gm'))];
      assert.deepEqual(loading.map((m) => m[1]).sort(), ['scaled:1', 'simple:1'], out);

      const backends = table(out, 'Backend');
      const byName = new Map(backends.rows.map((r) => [r[0], r]));
      assert.deepEqual([...byName.keys()], ['onnxruntime', 'openvino', 'python', 'pytorch', 'tensorflow', 'scale'], out);
      assert.match(byName.get('onnxruntime')![1]!, /^built in: ONNX Runtime \d+\.\d+\.\d+ \(onnxruntime-node\), on CPU$/);
      assert.match(byName.get('python')![1]!, /^built in: model\.py/);
      assert.equal(byName.get('python')![2], '{"cmdline":{"python-executable":"/usr/bin/python3"}}');
      assert.equal(byName.get('onnxruntime')![2], '{"cmdline":{}}');
      assert.match(byName.get('pytorch')![1]!, /^built in: TorchScript model\.pt/);
      assert.match(byName.get('tensorflow')![1]!, /^built in: TensorFlow SavedModel\/GraphDef \(tensorflow-cpu \d+\.\d+\.\d+\), one Python stub per instance$/);
      assert.equal(byName.get('scale')![1], `custom: JavaScript module ${repoA}/scaled/1/model.mjs (in the model's version directory)`);

      const models = table(out, 'Model');
      assert.deepEqual(
        models.rows.filter((r) => r[2] === 'READY').map((r) => r.slice(0, 2)),
        [
          ['scaled', '1'],
          ['simple', '1'],
        ],
      );

      const options = table(out, 'Option');
      const metadata = jsonBody(await httpRequest(`${server.url}/v2`)) as { extensions: string[] };
      assert.deepEqual(options.rows, [
        ['server_id', 'triton'],
        ['server_version', NEREID_VERSION],
        ['server_extensions', metadata.extensions.join(' ')],
        ['model_repository_path[0]', repoA],
        ['model_repository_path[1]', repoB],
        ['model_control_mode', 'MODE_EXPLICIT'],
        ['startup_models_0', 'simple'],
        ['startup_models_1', 'scaled'],
        ['strict_model_config', '0'],
        ['model_config_name', ''],
        ['rate_limit', 'OFF'],
        ['strict_readiness', '0'],
        ['exit_timeout', '7'],
        ['cache_enabled', '0'],
      ]);

      // Triton's order: loads, backends, models, options, then the endpoints.
      const lastLoading = Math.max(...loading.map((m) => m.index!));
      const started = out.search(/Started GRPCInferenceService/);
      assert.ok(lastLoading < backends.at && backends.at < models.at && models.at < options.at && options.at < started, out);
    } finally {
      await server.process.stop();
    }
  });

  it('logs loading: <model>:<version> for a load through the model repository API', async () => {
    const server = await startNereidServe([`--model-repository=${repoA}`, `--model-repository=${repoB}`, '--model-control-mode=explicit']);
    try {
      assert.doesNotMatch(server.process.stdout, /loading: /);
      assert.deepEqual(table(server.process.stdout, 'Model').rows.filter((r) => r[2] === 'READY'), []);
      const reply = await httpRequest(`${server.url}/v2/repository/models/other/load`, { method: 'POST' });
      assert.equal(reply.status, 200, reply.text);
      await server.process.waitFor(new RegExp(`^${INFO}loading: other:1$`, 'm'));
      const out = server.process.stdout;
      assert.ok(out.search(/loading: other:1/) > out.search(/Started HTTPService/), out);
      assert.equal((await httpRequest(`${server.url}/v2/models/other/ready`)).status, 200);
    } finally {
      await server.process.stop();
    }
  });

  it('prints the option table before exiting on a failed start-up load, as Triton does', async () => {
    const repo = await makeRepository({
      broken: { 'config.pbtxt': simpleModel({ name: 'broken' }).config!.replace('TYPE_INT32', 'TYPE_FP32'), '1/model.onnx': simpleModel().onnx.bytes },
    });
    try {
      const p = new NereidProcess(['serve', `--model-repository=${repo}`, '--http-address=127.0.0.1', '--http-port=0']);
      const exit = await p.waitForExit();
      assert.notEqual(exit.code, 0, p.output);
      assert.match(p.stdout, /loading: broken:1/);
      assert.match(table(p.stdout, 'Model').rows[0]![2]!, /^UNAVAILABLE: /);
      assert.deepEqual(table(p.stdout, 'Option').rows[3], ['model_repository_path[0]', repo]);
      assert.match(p.stderr, /failed to load all models; exiting/);
    } finally {
      await removeDir(repo);
    }
  });
});
