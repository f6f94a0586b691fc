/**
 * Path-escaping configurations: every path a configuration or a load request can name
 * (default_model_filename, cc_model_filenames, runtime, label_filename, warmup input_data_file,
 * the path parameters, the backend name, the model name itself) is refused lexically when it is
 * absolute, has a `..` segment, a NUL or a backslash, from a load request's config override and
 * from a repository on disk. Nothing outside the repository is opened or run; after each refusal
 * the server still answers a good request, and its memory stays bounded. Symbolic links the
 * repository's owner placed in a model directory are followed.
 */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GrpcClient } from '@nereid/client';
import { httpRequest, makeRepository, refusal, removeDir, startServer, type RunningGrpcServer } from '../helpers/harness.js';
import { INT32_16, ONNX, REFUSED_CONFIG_GRPC_CODE, REFUSED_CONFIG_STATUS, assertSimpleServing, loadModel, simpleConfig, toText } from './config-support.js';
import { requirePython } from '../helpers/python.js';


/** A Python model that leaves a marker file behind when the server runs it. */
function markerModel(marker: string): string {
  return [
    'import pathlib',
    `pathlib.Path(${JSON.stringify(marker)}).write_text("ran")`,
    'class TritonPythonModel:',
    '    def execute(self, requests):',
    '        return []',
    '',
  ].join('\n');
}

interface Case {
  readonly what: string;
  /** The configuration of model `name` (which must be the model's name). */
  readonly config: (name: string) => Record<string, unknown>;
  /** A fragment of the field named in the error. */
  readonly field: string;
}

describe('hostile config paths', () => {
  let repo: string;
  let outside: string;
  let srv: RunningGrpcServer;
  let grpc: GrpcClient;
  let cases: Case[];

  const load = (model: string, body: Record<string, unknown> = {}) => loadModel(srv.url, model, body);
  const assertServing = () => assertSimpleServing(srv.url, 5);

  function assertRefused(result: { status: number; error: string }, model: string, field: string): void {
    assert.equal(result.status, REFUSED_CONFIG_STATUS, result.error);
    assert.match(result.error, new RegExp(`^failed to load '${model}', failed to poll from model repository: `));
    assert.ok(result.error.includes(`model '${model}'`), result.error);
    assert.ok(result.error.includes(field), `expected '${field}' in: ${result.error}`);
    assert.match(result.error, /is refused: /);
    assert.ok(result.error.length < 2000, `the error is ${result.error.length} characters long`);
  }

  before(async () => {
    await requirePython();
    // Another repository, not served: its model file and a model.py that marks that it ran.
    outside = await mkdtemp(join(tmpdir(), 'nereid-outside-'));
    await mkdir(join(outside, 'other', '1'), { recursive: true });
    await writeFile(join(outside, 'other', '1', 'model.onnx'), ONNX);
    await writeFile(join(outside, 'evil.py'), markerModel(join(outside, 'marker')));
    await writeFile(join(outside, 'evil.mjs'), `import { writeFileSync } from 'node:fs'; writeFileSync(${JSON.stringify(join(outside, 'marker'))}, 'ran');\n`);

    const pythonConfig = (name: string, patch: Record<string, unknown>) => ({ ...simpleConfig({}, name), backend: 'python', ...patch });
    cases = [
      { what: "default_model_filename with '..' into another model", config: (n) => simpleConfig({ default_model_filename: '../../victim/1/model.onnx' }, n), field: 'default_model_filename' },
      { what: 'default_model_filename naming an ONNX file of another repository', config: (n) => simpleConfig({ default_model_filename: join(outside, 'other', '1', 'model.onnx') }, n), field: 'default_model_filename' },
      { what: 'default_model_filename /etc/hostname', config: (n) => simpleConfig({ default_model_filename: '/etc/hostname' }, n), field: 'default_model_filename' },
      { what: 'default_model_filename /proc/self/environ', config: (n) => simpleConfig({ default_model_filename: '/proc/self/environ' }, n), field: 'default_model_filename' },
      { what: 'default_model_filename with a NUL', config: (n) => simpleConfig({ default_model_filename: 'model.onnx\u0000.txt' }, n), field: 'default_model_filename' },
      { what: 'default_model_filename with a backslash', config: (n) => simpleConfig({ default_model_filename: '..\\..\\victim\\1\\model.onnx' }, n), field: 'default_model_filename' },
      { what: 'a Python model.py outside every repository', config: (n) => pythonConfig(n, { default_model_filename: join(outside, 'evil.py') }), field: 'default_model_filename' },
      { what: "a Python model.py reached with '..'", config: (n) => pythonConfig(n, { default_model_filename: `../../../../../../../../..${join(outside, 'evil.py')}` }), field: 'default_model_filename' },
      { what: 'cc_model_filenames naming /etc/hostname', config: (n) => simpleConfig({ cc_model_filenames: { '8.0': '/etc/hostname' } }, n), field: "cc_model_filenames['8.0']" },
      { what: "runtime with '..'", config: (n) => simpleConfig({ backend: 'escape', runtime: `../../../../../../../..${join(outside, 'evil.mjs')}` }, n), field: 'runtime' },
      { what: 'an absolute runtime', config: (n) => simpleConfig({ backend: 'escape', runtime: join(outside, 'evil.mjs') }, n), field: 'runtime' },
      {
        what: "a label file with '..'",
        config: (n) => simpleConfig({ output: [{ ...INT32_16('OUTPUT0'), label_filename: '../../../../../../etc/hostname' }, INT32_16('OUTPUT1')] }, n),
        field: "output 'OUTPUT0' label_filename",
      },
      {
        what: 'a warmup input_data_file of /proc/self/environ',
        config: (n) =>
          simpleConfig({ model_warmup: [{ name: 'w', batch_size: 1, inputs: { INPUT0: { data_type: 'TYPE_INT32', dims: [16], input_data_file: '/proc/self/environ' } } }] }, n),
        field: "input 'INPUT0' input_data_file",
      },
      {
        what: 'TRITON_BATCH_STRATEGY_PATH /etc/hostname',
        config: (n) => simpleConfig({ parameters: { TRITON_BATCH_STRATEGY_PATH: { string_value: '/etc/hostname' } } }, n),
        field: 'parameter TRITON_BATCH_STRATEGY_PATH',
      },
      { what: 'EXECUTION_ENV_PATH /usr', config: (n) => pythonConfig(n, { parameters: { EXECUTION_ENV_PATH: { string_value: '/usr' } } }), field: 'parameter EXECUTION_ENV_PATH' },
      {
        what: "EXECUTION_ENV_PATH leaving $$TRITON_MODEL_DIRECTORY with '..'",
        config: (n) => pythonConfig(n, { parameters: { EXECUTION_ENV_PATH: { string_value: '$$TRITON_MODEL_DIRECTORY/../../../../../../../usr' } } }),
        field: 'parameter EXECUTION_ENV_PATH',
      },
      {
        what: "a sequence state's initial data_file with '..'",
        config: (n) =>
          simpleConfig(
            {
              sequence_batching: {
                state: [
                  {
                    input_name: 'INPUT_STATE',
                    output_name: 'OUTPUT_STATE',
                    data_type: 'TYPE_INT32',
                    dims: [1],
                    initial_state: [{ name: 'leak', data_type: 'TYPE_INT32', dims: [1], data_file: '../../../../../../../../etc/hostname' }],
                  },
                ],
              },
            },
            n,
          ),
        field: 'sequence_batching.state[0].initial_state[0] data_file',
      },
      { what: "a backend name with '..'", config: (n) => simpleConfig({ backend: `../../../../../../..${outside}` }, n), field: 'backend' },
    ];

    const disk: Record<string, Record<string, string | Uint8Array>> = {
      simple: { 'config.pbtxt': 'name: "simple"\nbackend: "onnxruntime"\nmax_batch_size: 8\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n', '1/model.onnx': ONNX },
      victim: { 'config.pbtxt': 'name: "victim"\nbackend: "onnxruntime"\nmax_batch_size: 8\n', '1/model.onnx': ONNX },
    };
    // The same configurations on disk, in text format.
    cases.forEach((c, i) => (disk[`p_${i}`] = { 'config.pbtxt': toText(c.config(`p_${i}`)), '1/model.onnx': ONNX, '1/model.py': markerModel(join(outside, 'marker')) }));
    // A model whose file is a link, placed by the repository's owner, to a file outside it.
    disk.linked = { 'config.pbtxt': 'name: "linked"\nbackend: "onnxruntime"\nmax_batch_size: 8\ninstance_group [ { kind: KIND_CPU, count: 1 } ]\n' };
    repo = await makeRepository(disk);
    await mkdir(join(repo, 'linked', '1'));
    await symlink(join(outside, 'other', '1', 'model.onnx'), join(repo, 'linked', '1', 'model.onnx'));

    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['simple'], grpc: true });
    grpc = new GrpcClient(srv.grpcTarget);
    await assertServing();
  });

  after(async () => {
    grpc?.close();
    await srv?.stop();
    if (repo) await removeDir(repo);
    if (outside) await removeDir(outside);
  });

  it('refuses every escaping path in a load request config override, and keeps serving', async () => {
    for (const c of cases) {
      assertRefused(await load('simple', { parameters: { config: JSON.stringify(c.config('simple')) } }), 'simple', c.field);
      await assertServing();
    }
    assert.equal(existsSync(join(outside, 'marker')), false, 'a model file outside the repository ran');
  });

  it('refuses every escaping path in a load request with file overrides, and keeps serving', async () => {
    const files = { 'file:1/model.onnx': Buffer.from(ONNX).toString('base64'), 'file:1/model.py': Buffer.from(markerModel(join(outside, 'marker'))).toString('base64') };
    for (const c of cases) {
      assertRefused(await load('simple', { parameters: { config: JSON.stringify(c.config('simple')), ...files } }), 'simple', c.field);
      await assertServing();
    }
    assert.equal(existsSync(join(outside, 'marker')), false, 'a model file outside the repository ran');
  });

  it('refuses every escaping path in a config.pbtxt on disk, and keeps serving', async () => {
    for (const [i, c] of cases.entries()) {
      assertRefused(await load(`p_${i}`), `p_${i}`, c.field);
      await assertServing();
    }
    assert.equal(existsSync(join(outside, 'marker')), false, 'a model file outside the repository ran');
  });

  it('refuses over gRPC with INTERNAL, as Triton answers a configuration it cannot use', async () => {
    const err = await refusal(grpc.loadModel('simple', { config: cases[2]!.config('simple') }));
    assert.equal(err.grpcCode, REFUSED_CONFIG_GRPC_CODE, err.message);
    assert.match(err.message, /default_model_filename '\/etc\/hostname' is refused: absolute paths are not allowed/);
    await assertServing();
  });

  it('refuses model names that are not a directory name, with a bounded message', async () => {
    for (const name of ['..', '.', encodeURIComponent('a\\b'), encodeURIComponent('a\u0000b'), encodeURIComponent('../simple'), 'x'.repeat(100_000)]) {
      const reply = await httpRequest(`${srv.url}/v2/repository/models/${name}/load`, { method: 'POST', body: '{}' });
      // A 100 KB name does not fit in Node's header limit: 431 before the server sees it.
      assert.ok([400, 404, 431].includes(reply.status), `${name.slice(0, 40)}: ${reply.status} ${reply.text.slice(0, 300)}`);
      assert.ok(reply.text.length < 2000, `${name.slice(0, 40)}: the answer is ${reply.text.length} characters long`);
    }
    const long = await httpRequest(`${srv.url}/v2/repository/models/${'x'.repeat(5000)}/load`, { method: 'POST', body: '{}' });
    assert.equal(long.status, 400, long.text.slice(0, 300));
    assert.match(long.text, /longer than this server's limit of 1024 characters \(--model-config-limit name-length\)/);
    const err = await refusal(grpc.loadModel('a\\b'));
    assert.equal(err.grpcCode, 3, err.message);
    await assertServing();
  });

  it("follows a symbolic link the repository's owner placed in a model directory", async () => {
    const result = await load('linked');
    assert.equal(result.status, 200, result.error);
  });

  it('stays within bounded memory over every case, five times over', async () => {
    const rssBefore = process.memoryUsage().rss;
    for (let round = 0; round < 5; round++) {
      for (const c of cases) assert.equal((await load('simple', { parameters: { config: JSON.stringify(c.config('simple')) } })).status, REFUSED_CONFIG_STATUS);
    }
    await assertServing();
    const grownMiB = (process.memoryUsage().rss - rssBefore) / 2 ** 20;
    assert.ok(grownMiB < 256, `the process grew by ${grownMiB.toFixed(0)} MiB over ${5 * cases.length} refused loads`);
  });
});
