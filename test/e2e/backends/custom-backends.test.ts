/**
 * Custom JavaScript backends (docs/backends.md): modules found in the version directory, the
 * model directory, a --backend-directory and a named module, served over HTTP and gRPC; broken
 * modules fail their model's load with an error naming the model, the file and the fix; faulty
 * executions fail their request and the server keeps serving.
 */
import assert from 'node:assert/strict';
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, InferenceServerError } from '@nereid/client';
import type { ModelVersionStatus } from '@nereid/server';
import {
  inferJson,
  jsonBody,
  makeRepository,
  outputNamed,
  removeDir,
  startServer,
  type JsonInferResponse,
  type RunningGrpcServer,
} from '../../helpers/harness.js';
import { executeModule, factoryCommonJsModule, namedExportModule, scaleConfig, scaleModule, xInput } from './modules.js';

let repo: string;
let extras: string;
let srv: RunningGrpcServer;
let statuses: Map<string, ModelVersionStatus>;
let grpc: GrpcClient;

before(async () => {
  repo = await makeRepository({
    scale_mjs: { 'config.pbtxt': scaleConfig('scale_mjs', 'scale'), '1/model.mjs': scaleModule('scale', 2) },
    in_model_dir: { 'config.pbtxt': scaleConfig('in_model_dir', 'factory'), 'model.cjs': factoryCommonJsModule('factory', 3), '1/.keep': '' },
    version_wins: {
      'config.pbtxt': scaleConfig('version_wins', 'both'),
      'model.mjs': scaleModule('both', 100),
      '1/model.mjs': scaleModule('both', 4),
    },
    named_export: { 'config.pbtxt': scaleConfig('named_export', 'named'), '1/model.mjs': namedExportModule('named', 5) },
    runtime_file: { 'config.pbtxt': scaleConfig('runtime_file', 'byruntime', { extra: 'runtime: "scaler.mjs"\n' }), 'scaler.mjs': scaleModule('byruntime', 6), '1/.keep': '' },
    from_backend_dir: { 'config.pbtxt': scaleConfig('from_backend_dir', 'packaged'), '1/.keep': '' },
    from_module_option: { 'config.pbtxt': scaleConfig('from_module_option', 'optioned', { parameters: { factor: '8' } }), '1/.keep': '' },

    syntax_error: { 'config.pbtxt': scaleConfig('syntax_error', 'broken'), '1/model.mjs': 'export default {\n  spiVersion: 1,\n  createModel() {\n};\n' },
    import_throws: { 'config.pbtxt': scaleConfig('import_throws', 'throws'), '1/model.mjs': "throw new Error('licence key missing');\n" },
    no_export: { 'config.pbtxt': scaleConfig('no_export', 'noexport'), '1/model.mjs': 'export const somethingElse = 1;\n' },
    wrong_spi: { 'config.pbtxt': scaleConfig('wrong_spi', 'wrongspi'), '1/model.mjs': scaleModule('wrongspi', 1).replace('spiVersion: 1', 'spiVersion: 2') },
    no_spi: { 'config.pbtxt': scaleConfig('no_spi', 'nospi'), '1/model.mjs': scaleModule('nospi', 1).replace('spiVersion: 1,', '') },
    no_create_model: { 'config.pbtxt': scaleConfig('no_create_model', 'nocreate'), '1/model.mjs': "export default { spiVersion: 1, create() {} };\n" },
    name_mismatch: { 'config.pbtxt': scaleConfig('name_mismatch', 'asked'), '1/model.mjs': scaleModule('declared', 1) },
    esm_as_commonjs: {
      'config.pbtxt': scaleConfig('esm_as_commonjs', 'esmcjs'),
      '1/model.js': scaleModule('esmcjs', 1),
      '1/package.json': JSON.stringify({ type: 'commonjs' }),
    },
    create_model_throws: {
      'config.pbtxt': scaleConfig('create_model_throws', 'createthrows'),
      '1/model.mjs': "export default { spiVersion: 1, async createModel(ctx) { throw new Error(`weights of ${ctx.name} are corrupt`); } };\n",
    },
    no_module: { 'config.pbtxt': scaleConfig('no_module', 'nowhere'), '1/.keep': '' },

    execute_throws: { 'config.pbtxt': scaleConfig('execute_throws', 'exthrows'), '1/model.mjs': executeModule('exthrows', "throw new Error('tokenizer exploded');") },
    forgets_respond: { 'config.pbtxt': scaleConfig('forgets_respond', 'forgets'), '1/model.mjs': executeModule('forgets', 'return;') },
    wrong_output: {
      'config.pbtxt': scaleConfig('wrong_output', 'wrongout'),
      '1/model.mjs': executeModule('wrongout', "for (const r of requests) r.respond({ outputs: [{ name: 'Y', datatype: 'INT32', shape: [1, 1], data: new Uint8Array(4) }] });"),
    },
    short_output: {
      'config.pbtxt': scaleConfig('short_output', 'shortout'),
      '1/model.mjs': executeModule('shortout', "for (const r of requests) r.respond({ outputs: [{ name: 'Y', datatype: 'FP32', shape: [1, 3], data: new Uint8Array(4) }] });"),
    },
    responds_error: {
      'config.pbtxt': scaleConfig('responds_error', 'resperr'),
      '1/model.mjs': executeModule('resperr', "for (const r of requests) r.respond(new Error('X must be positive'));"),
    },
  });
  extras = await makeRepository({});
  // --backend-directory layout: <dir>/<backend>/ with a package.json naming its entry.
  await mkdir(join(extras, 'backends', 'packaged', 'lib'), { recursive: true });
  await writeFile(join(extras, 'backends', 'packaged', 'package.json'), JSON.stringify({ type: 'module', exports: { '.': { import: './lib/main.js' } } }));
  await writeFile(join(extras, 'backends', 'packaged', 'lib', 'main.js'), scaleModule('packaged', 7));
  // A module named by --backend-config=optioned,module=<path>: a package directory with index.mjs.
  await mkdir(join(extras, 'optioned-package'), { recursive: true });
  await writeFile(join(extras, 'optioned-package', 'index.mjs'), scaleModule('optioned', 1));

  srv = await startServer({
    modelRepositories: [repo],
    grpc: true,
    backendDirectory: join(extras, 'backends'),
    backendConfig: new Map([['optioned', { module: join(extras, 'optioned-package') }]]),
  });
  statuses = new Map(srv.server.modelStatuses().map((s) => [s.name, s]));
  grpc = new GrpcClient(srv.grpcTarget);
});

after(async () => {
  grpc?.close();
  await srv?.stop();
  await removeDir(repo);
  await removeDir(extras);
});

function failure(name: string): string {
  const s = statuses.get(name);
  assert.ok(s, `no status for '${name}'`);
  assert.equal(s.state, 'UNAVAILABLE', `${name} is ${s.state}: ${s.reason}`);
  return s.reason;
}

async function scaled(model: string, xs: number[]): Promise<{ ys: number[]; parameters: Record<string, unknown> }> {
  const reply = await inferJson(srv.url, model, [xInput(xs)]);
  assert.equal(reply.status, 200, `${model}: ${reply.text}`);
  const body = jsonBody(reply) as JsonInferResponse & { parameters?: Record<string, unknown> };
  return { ys: outputNamed(body, 'Y').data as number[], parameters: body.parameters ?? {} };
}

async function inferError(model: string): Promise<{ status: number; error: string }> {
  const reply = await inferJson(srv.url, model, [xInput([1, 2])]);
  assert.notEqual(reply.status, 200, `${model} succeeded: ${reply.text}`);
  return { status: reply.status, error: (JSON.parse(reply.text) as { error: string }).error };
}

describe('custom backends: where modules are found', () => {
  it('a model.mjs in the version directory serves over HTTP, with its response parameters', async () => {
    const r = await scaled('scale_mjs', [1, 2.5, -3]);
    assert.deepEqual(r.ys, [2, 5, -6]);
    assert.equal(r.parameters['instance'], 'scale_mjs_0_0');
    assert.equal(statuses.get('scale_mjs')!.state, 'READY');
  });

  it('the same model serves over gRPC', async () => {
    const result = await grpc.infer({ model: 'scale_mjs', inputs: [{ name: 'X', datatype: 'FP32', shape: [2, 2], data: new Float32Array([1, 2, 3, 4]) }] });
    assert.deepEqual(result.shape('Y'), [2, 2]);
    assert.deepEqual([...(result.typed('Y') as Float32Array)], [2, 4, 6, 8]);
    assert.equal(result.parameters['instance'], 'scale_mjs_0_0');
  });

  it('a CommonJS factory in the model directory is called with the backend name and SPI version', async () => {
    assert.deepEqual((await scaled('in_model_dir', [2])).ys, [6]);
  });

  it('the version directory wins over the model directory', async () => {
    assert.deepEqual((await scaled('version_wins', [1])).ys, [4]);
  });

  it("a named export 'backend' and a file named by the config's runtime are found", async () => {
    assert.deepEqual((await scaled('named_export', [1])).ys, [5]);
    assert.deepEqual((await scaled('runtime_file', [1])).ys, [6]);
  });

  it('--backend-directory/<backend>/ is a package whose exports name the entry', async () => {
    assert.deepEqual((await scaled('from_backend_dir', [1])).ys, [7]);
  });

  it('--backend-config=<backend>,module=<path> names the module; the model parameter reaches createModel', async () => {
    assert.deepEqual((await scaled('from_module_option', [1])).ys, [8]);
  });
});

describe('custom backends: modules that cannot load', () => {
  it('a syntax error names the model, the file and the line', () => {
    const reason = failure('syntax_error');
    assert.match(reason, /model 'syntax_error': custom backend 'broken' \(.*syntax_error\/1\/model\.mjs\) failed to import at .*syntax_error\/1\/model\.mjs:4 \(`};`\): SyntaxError: Unexpected token/);
  });

  it('a module that throws while importing reports what it threw', () => {
    assert.match(failure('import_throws'), /import_throws\/1\/model\.mjs\) failed to import: Error: licence key missing/);
  });

  it('a module without a backend export lists its exports and the fix', () => {
    const reason = failure('no_export');
    assert.match(reason, /model 'no_export': custom backend 'noexport' .* exports no backend: export the Backend object as the default export or as 'backend'/);
    assert.match(reason, /exports found: somethingElse/);
  });

  it('a wrong or missing SPI version is refused naming both versions', () => {
    assert.match(failure('wrong_spi'), /implements backend SPI version 2, this server implements version 1/);
    assert.match(failure('no_spi'), /does not declare its SPI version: set spiVersion: 1/);
  });

  it('a backend without createModel, or with another name, is refused', () => {
    assert.match(failure('no_create_model'), /has no createModel function/);
    assert.match(failure('name_mismatch'), /declares backend name 'declared' but the model's config asks for backend 'asked'/);
  });

  it('ES module syntax in a model.js of a "type": "commonjs" package says how to fix it', () => {
    assert.match(failure('esm_as_commonjs'), /loaded as CommonJS: name it model\.mjs, or put a package\.json with "type": "module" beside it/);
  });

  it('createModel throwing fails the load with its message', () => {
    assert.match(failure('create_model_throws'), /model 'create_model_throws': custom backend 'createthrows' .*: createModel failed: weights of create_model_throws are corrupt/);
  });

  it('a backend with no module anywhere lists every place looked at', () => {
    const reason = failure('no_module');
    assert.match(reason, /unable to find backend 'nowhere' for model 'no_module'/);
    assert.match(reason, /no_module\/1\/model\.mjs/);
    assert.match(reason, /no_module\/model\.cjs/);
    assert.match(reason, /backends\/nowhere\//);
    assert.match(reason, /module 'nereid-backend-nowhere'/);
  });
});

describe('custom backends: faulty executions fail their request, the server keeps serving', () => {
  it('execute throwing answers 500 with the backend, instance and message', async () => {
    const e = await inferError('execute_throws');
    assert.equal(e.status, 500);
    assert.match(e.error, /backend 'exthrows' failed to execute instance 'execute_throws_0_0': tokenizer exploded/);
    assert.deepEqual((await scaled('scale_mjs', [1])).ys, [2]);
  });

  it('execute returning without a response still answers the request', async () => {
    const e = await inferError('forgets_respond');
    assert.match(e.error, /backend 'forgets' returned from execute without sending a final response/);
  });

  it('an output of the wrong datatype or size is refused naming the output', async () => {
    assert.match((await inferError('wrong_output')).error, /model 'wrong_output' produced output 'Y' with datatype INT32, but its configuration says FP32/);
    assert.match((await inferError('short_output')).error, /model 'short_output' produced output 'Y' with shape \[1, 3\] \(12 bytes of FP32\) but 4 bytes of data/);
  });

  it('respond(new Error(…)) fails the request with that message', async () => {
    assert.match((await inferError('responds_error')).error, /X must be positive/);
  });

  it('errors reach gRPC clients with their status', async () => {
    const err = await grpc.infer({ model: 'execute_throws', inputs: [{ name: 'X', datatype: 'FP32', shape: [1, 1], data: new Float32Array([1]) }] }).then(
      () => assert.fail('succeeded'),
      (e: unknown) => e,
    );
    assert.ok(err instanceof InferenceServerError);
    assert.match(err.message, /tokenizer exploded/);
    assert.equal(err.grpcCode, 13);
  });
});
