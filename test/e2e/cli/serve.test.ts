/**
 * `nereid serve` as a real process: the example repository, the model status table, options
 * accepted for compatibility, `--exit-on-error`, and the log line formats (protocol.md §6).
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { mappingUnavailableReason } from '@nereid/server';
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import {
  httpRequest,
  inferJson,
  jsonBody,
  makeRepository,
  outputNamed,
  removeDir,
  simpleCase,
  type JsonInferResponse,
} from '../../helpers/harness.js';
import { EXAMPLE_REPOSITORY, NereidProcess, startNereidServe, stopAllNereid } from '../../helpers/cli.js';

/** `I1202 17:36:00.123456 4242 nereid] ` (protocol.md §6.3 `default`). */
const DEFAULT_LINE = /^[IWEV]\d{4} \d{2}:\d{2}:\d{2}\.\d{6} \d+ nereid\] /;
/** `2026-12-02T17:36:00Z I 4242 nereid] ` (`ISO8601`). */
const ISO8601_LINE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z [IWEV] \d+ nereid\] /;

after(stopAllNereid);

function lines(text: string): string[] {
  return text.split('\n').filter((l) => l !== '');
}

/** Log lines only: the status table's rows are continuation lines of one log message. */
function logLines(text: string): string[] {
  return lines(text).filter((l) => !l.startsWith('|') && !l.startsWith('+'));
}

describe('nereid serve with the example repository', () => {
  let server: Awaited<ReturnType<typeof startNereidServe>>;

  before(async () => {
    server = await startNereidServe([
      '--model-repository',
      EXAMPLE_REPOSITORY,
      // tritonserver options accepted and ignored:
      '--allow-sagemaker=false',
      '--grpc-infer-thread-count',
      '2',
      '--allow-vertex-ai=false',
      '--grpc-use-ssl=false',
      '--pinned-memory-pool-byte-size=268435456',
    ]);
  });
  after(async () => {
    await server?.process.stop();
  });

  it('prints the model status table with every example model READY', () => {
    const out = server.process.stdout;
    assert.match(out, /nereid\] \n\+-+\+-+\+-+\+\n\| Model +\| Version \| Status \|\n/);
    for (const model of ['mlp', 'simple', 'simple_int8', 'simple_string', 'tokenizer']) {
      assert.match(out, new RegExp(`^\\| ${model} +\\| 1 +\\| READY +\\|$`, 'm'), out);
    }
    for (const l of logLines(out)) assert.match(l, DEFAULT_LINE);
  });

  it('warns about each accepted-but-ignored option, saying why it has no effect', () => {
    for (const [option, why] of [
      ['allow-sagemaker', 'Nereid has no SageMaker endpoint'],
      ['grpc-infer-thread-count', 'Nereid serves every request on the Node.js event loop, so there are no request threads to size'],
      ['allow-vertex-ai', 'Nereid has no Vertex AI endpoint'],
      ['grpc-use-ssl', 'no TLS in this version; terminate TLS in front of Nereid (a proxy or a service mesh)'],
      ['pinned-memory-pool-byte-size', 'Nereid has no CUDA memory management of its own: GPU memory belongs to the stub processes of KIND_GPU instances'],
    ]) {
      assert.ok(
        server.process.stderr.split('\n').some((l) => /^W/.test(l) && l.endsWith(`] option --${option} is not supported by this version of Nereid and has no effect: ${why}`)),
        server.process.output,
      );
    }
  });

  it('is ready and serves simple and simple_string', async () => {
    const ready = await httpRequest(`${server.url}/v2/health/ready`);
    assert.equal(ready.status, 200);
    const c = simpleCase(2, 11);
    let reply = await inferJson(server.url, 'simple', c.inputs);
    assert.equal(reply.status, 200, reply.text);
    let body = jsonBody(reply) as JsonInferResponse;
    assert.equal(body.model_name, 'simple');
    assert.equal(body.model_version, '1');
    assert.deepEqual(outputNamed(body, 'OUTPUT0').data, c.sum);
    assert.deepEqual(outputNamed(body, 'OUTPUT1').data, c.difference);

    const a = Array.from({ length: 16 }, (_, i) => String(i * 3 - 7));
    const b = Array.from({ length: 16 }, (_, i) => String(100 + i));
    reply = await inferJson(server.url, 'simple_string', [
      { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], data: a },
      { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: b },
    ]);
    assert.equal(reply.status, 200, reply.text);
    body = jsonBody(reply) as JsonInferResponse;
    assert.deepEqual(outputNamed(body, 'OUTPUT0').data, a.map((x, i) => String(Number(x) + Number(b[i]))));
  });

  it('exits 0 on SIGTERM', async () => {
    const exit = await server.process.stop('SIGTERM');
    assert.deepEqual(exit, { code: 0, signal: null }, server.process.output);
    assert.match(server.process.stdout, /received SIGTERM/);
    assert.match(server.process.stdout, /all models unloaded; exiting/);
  });
});

describe('--exit-on-error with a model that fails to load', () => {
  let repo: string;

  before(async () => {
    repo = await makeRepository({
      simple: { 'config.pbtxt': simpleModel().config!, '1/model.onnx': simpleModel().onnx.bytes },
      broken: {
        'config.pbtxt': simpleModel({ name: 'broken' }).config!.replace('TYPE_INT32', 'TYPE_FP32'),
        '1/model.onnx': simpleModel().onnx.bytes,
      },
    });
  });
  after(async () => {
    await removeDir(repo);
  });

  it('true (the default): reports the failure and exits non-zero', async () => {
    const p = new NereidProcess(['serve', `--model-repository=${repo}`, '--http-address=127.0.0.1', '--http-port=0']);
    const exit = await p.waitForExit();
    assert.equal(exit.signal, null);
    assert.notEqual(exit.code, 0, p.output);
    assert.match(p.stdout, /^\| broken +\| 1 +\| UNAVAILABLE: unable to load model 'broken': input 'INPUT0' has data type TYPE_FP32/m);
    assert.match(p.stdout, /^\| simple +\| 1 +\| READY +\|$/m);
    assert.match(p.stderr, /failed to load 'broken' version 1: .*TYPE_FP32/);
    assert.match(p.stderr, /failed to load all models; exiting/);
    assert.doesNotMatch(p.stdout, /Started HTTPService/);
  });

  it('false: starts and serves the models that loaded, not ready under strict readiness', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--exit-on-error=false']);
    try {
      assert.match(server.process.stdout, /^\| broken +\| 1 +\| UNAVAILABLE: /m);
      const c = simpleCase(1, 4);
      const reply = await inferJson(server.url, 'simple', c.inputs);
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data, c.sum);
      assert.equal((await httpRequest(`${server.url}/v2/health/ready`)).status, 400);
      assert.equal((await httpRequest(`${server.url}/v2/models/broken/versions/1/ready`)).status, 400);
    } finally {
      assert.deepEqual(await server.process.stop(), { code: 0, signal: null });
    }
  });

  it('false with --strict-readiness=false: ready', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--exit-on-error=off', '--strict-readiness=0']);
    try {
      assert.equal((await httpRequest(`${server.url}/v2/health/ready`)).status, 200);
    } finally {
      await server.process.stop();
    }
  });
});

describe('model options', () => {
  let repoA: string;
  let repoB: string;

  before(async () => {
    const onnx = simpleModel().onnx.bytes;
    repoA = await makeRepository({
      simple: { 'config.pbtxt': simpleModel().config!, '1/model.onnx': onnx },
      no_config: { '1/model.onnx': onnx },
    });
    repoB = await makeRepository({
      other: {
        'config.pbtxt': simpleModel({ name: 'other' }).config!,
        'configs/tiny.pbtxt': simpleModel({ name: 'other' }).config!.replace('max_batch_size: 8', 'max_batch_size: 1'),
        '1/model.onnx': onnx,
      },
    });
  });
  after(async () => {
    await removeDir(repoA);
    await removeDir(repoB);
  });

  it('--model-store (repeatable), --model-config-name and --disable-auto-complete-config take effect', async () => {
    const server = await startNereidServe([
      `--model-repository=${repoA}`,
      '--model-store',
      repoB,
      '--model-config-name=tiny',
      '--disable-auto-complete-config',
      '--exit-on-error=false',
      '--id=cli-test',
    ]);
    try {
      const out = server.process.stdout;
      assert.match(out, /^\| no_config +\| - +\| UNAVAILABLE: model 'no_config': '.*config\.pbtxt' does not exist, and auto-complete is disabled/m);
      assert.match(out, /^\| other +\| 1 +\| READY +\|$/m);
      assert.match(out, /^\| simple +\| 1 +\| READY +\|$/m);
      const config = jsonBody(await httpRequest(`${server.url}/v2/models/other/config`)) as { max_batch_size: number };
      assert.equal(config.max_batch_size, 1);
      const meta = jsonBody(await httpRequest(`${server.url}/v2`)) as { name: string };
      assert.equal(meta.name, 'cli-test');
    } finally {
      await server.process.stop();
    }
  });
});

describe('log options', () => {
  let repo: string;

  before(async () => {
    repo = await makeRepository({
      simple_string: { 'config.pbtxt': simpleStringModel().config!, '1/model.onnx': simpleStringModel().onnx.bytes },
    });
  });
  after(async () => {
    await removeDir(repo);
  });

  it('--log-format=ISO8601 writes ISO 8601 timestamps', async () => {
    const server = await startNereidServe([`--model-repository=${repo}`, '--log-format=ISO8601', '--allow-sagemaker=false']);
    await server.process.stop();
    const out = logLines(server.process.stdout);
    const err = logLines(server.process.stderr);
    assert.ok(out.length >= 3 && err.length >= 1, server.process.output);
    for (const l of [...out, ...err]) assert.match(l, ISO8601_LINE);
  });

  it('--log-verbose=1 adds verbose lines that the default level leaves out', async () => {
    const quiet = await startNereidServe([`--model-repository=${repo}`]);
    try {
      assert.equal((await httpRequest(`${quiet.url}/v2/health/ready`)).status, 200);
    } finally {
      await quiet.process.stop();
    }
    assert.equal(logLines(quiet.process.stdout).filter((l) => l.startsWith('V')).length, 0, quiet.process.output);

    const verbose = await startNereidServe([`--model-repository=${repo}`, '--log-verbose=1']);
    try {
      assert.equal((await httpRequest(`${verbose.url}/v2/health/ready`)).status, 200);
      await verbose.process.waitFor(/^V.* HTTP request: GET \/v2\/health\/ready$/m);
    } finally {
      await verbose.process.stop();
    }
    for (const l of logLines(verbose.process.stdout)) assert.match(l, DEFAULT_LINE);
  });

  it('warns at startup when shared memory is not memory-mapped, and says why', async () => {
    const POSITIONED = /^W.* shared-memory regions and Python tensor rings are read and written with positioned I\/O, slower for large tensors than mapped memory: (.*)$/m;
    const mapped = await startNereidServe([`--model-repository=${repo}`]);
    await mapped.process.stop();
    if (mappingUnavailableReason() === undefined) assert.doesNotMatch(mapped.process.stderr, POSITIONED, mapped.process.output);
    else assert.match(mapped.process.stderr, POSITIONED, mapped.process.output);

    const off = await startNereidServe([`--model-repository=${repo}`], { NEREID_SHM_MAPPING: 'off' });
    try {
      assert.equal((await httpRequest(`${off.url}/v2/health/ready`)).status, 200);
    } finally {
      await off.process.stop();
    }
    assert.equal(POSITIONED.exec(off.process.stderr)?.[1], 'turned off by NEREID_SHM_MAPPING=off', off.process.output);
  });

  it('--log-info=false keeps info lines out; --log-file writes the log to a file', async () => {
    const file = join(repo, 'nereid.log');
    const p = new NereidProcess(['serve', `--model-repository=${repo}`, '--http-address=127.0.0.1', '--http-port=0', `--log-file=${file}`, '--allow-sagemaker=0', '--allow-grpc=false', '--allow-metrics=false']);
    try {
      // Nothing reaches the console; wait for the start line in the file.
      let text = '';
      for (let i = 0; i < 600 && !/Started HTTPService/.test(text); i++) {
        await new Promise((r) => setTimeout(r, 50));
        text = await readFile(file, 'utf8').catch(() => '');
      }
      assert.match(text, /^I.* Started HTTPService at 127\.0\.0\.1:\d+$/m);
      assert.match(text, /^W.* option --allow-sagemaker is not supported/m);
    } finally {
      await p.stop();
    }
    assert.equal(p.stdout, '');
    assert.equal(p.stderr, '');

    const q = new NereidProcess(['serve', `--model-repository=${repo}`, '--log-info=false', '--model-store=/nonexistent-nereid-repo']);
    const exit = await q.waitForExit();
    assert.notEqual(exit.code, 0);
    assert.equal(q.stdout, '');
    assert.match(q.stderr, /^E.* model repository '\/nonexistent-nereid-repo' does not exist/m);
  });
});
