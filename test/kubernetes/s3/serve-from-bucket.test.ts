/**
 * S3 model repositories (docs/model-repository-s3.md) against a real SeaweedFS: `nereid serve`
 * processes serve an ONNX and a Python model from a bucket in modes none and poll, with both URI
 * forms, beside a local repository; bad credentials, an unknown bucket and an unreachable
 * endpoint stop the start with a clear error; hostile keys are refused; an upload in progress
 * never loads.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { EXAMPLE_REPOSITORY, NereidProcess, startNereidServe, stopAllNereid } from '../../helpers/cli.js';
import { inferJson, jsonBody, makeRepository, outputNamed, removeDir, simpleCase, httpRequest, type JsonInferResponse } from '../../helpers/harness.js';
import { taggedFiles, TAGGED_WIDTH, waitFor } from '../../helpers/lifecycle.js';
import { ADD_SUB_CONFIG, ADD_SUB_PY, requirePython } from '../../helpers/python.js';
import { freePort, startS3, type S3Store } from '../helpers/s3.js';
import { deleteModel, manifestOf, putModel, putObject, readModelDirectory } from '../helpers/s3-models.js';

const BUCKET = 'models';
const PREFIX = 'prod/repo/';

interface IndexEntry {
  name: string;
  version?: string;
  state?: string;
  reason?: string;
}

async function repositoryIndex(url: string): Promise<IndexEntry[]> {
  return jsonBody(await httpRequest(`${url}/v2/repository/index`, { method: 'POST', body: '{}' })) as IndexEntry[];
}

/** OUTPUT0 of the tagged model for a row of zeros: its tag; undefined when the request fails. */
async function taggedAnswer(url: string, model: string): Promise<number | undefined> {
  const reply = await inferJson(url, model, [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: [0, 0, 0, 0] }]);
  if (reply.status !== 200) return undefined;
  return outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data[0] as number;
}

describe('S3 model repositories', () => {
  let s3: S3Store;
  let env: Record<string, string>;

  before(async () => {
    await requirePython();
    s3 = await startS3();
    await s3.createBucket(BUCKET);
    await putModel(s3.client, BUCKET, PREFIX, 'simple', await readModelDirectory(join(EXAMPLE_REPOSITORY, 'simple')));
    await putModel(s3.client, BUCKET, PREFIX, 'add_sub', { 'config.pbtxt': ADD_SUB_CONFIG, '1/model.py': ADD_SUB_PY }, { manifest: true });
    env = { AWS_ACCESS_KEY_ID: s3.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.secretAccessKey, AWS_REGION: s3.region };
  });
  after(async () => {
    await stopAllNereid();
    await s3?.stop();
  });

  it('serves an ONNX and a Python model from s3://bucket/prefix (mode none, AWS_ENDPOINT_URL_S3), and removes its mirror at exit', async () => {
    const cache = await mkdtemp(join(tmpdir(), 'nereid-s3-cache-'));
    try {
      const srv = await startNereidServe([`--model-repository=s3://${BUCKET}/${PREFIX}`, `--model-repository-cache-dir=${cache}`], { ...env, AWS_ENDPOINT_URL_S3: s3.endpoint });
      const c = simpleCase(2, 3);
      const reply = await inferJson(srv.url, 'simple', c.inputs);
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0').data, c.sum);
      const py = await inferJson(srv.url, 'add_sub', [
        { name: 'INPUT0', datatype: 'FP32', shape: [4], data: [1, 2, 3, 4] },
        { name: 'INPUT1', datatype: 'FP32', shape: [4], data: [10, 20, 30, 40] },
      ]);
      assert.equal(py.status, 200, py.text);
      assert.deepEqual(outputNamed(jsonBody(py) as JsonInferResponse, 'OUTPUT0').data, [11, 22, 33, 44]);
      assert.deepEqual(await repositoryIndex(srv.url), [
        { name: 'add_sub', version: '1', state: 'READY' },
        { name: 'simple', version: '1', state: 'READY' },
      ]);
      assert.equal((await readdir(cache)).length, 1, 'one cache directory of the server');
      const exit = await srv.process.stop();
      assert.equal(exit.code, 0, srv.process.output);
      assert.deepEqual(await readdir(cache), [], 'the mirror is removed at exit');
    } finally {
      await rm(cache, { recursive: true, force: true });
    }
  });

  it('a server killed without cleaning up leaves a mirror that the next server in the same cache directory removes', async () => {
    const cache = await mkdtemp(join(tmpdir(), 'nereid-s3-cache-'));
    try {
      const args = [`--model-repository=s3://${BUCKET}/${PREFIX}`, `--model-repository-cache-dir=${cache}`];
      const first = await startNereidServe(args, { ...env, AWS_ENDPOINT_URL_S3: s3.endpoint });
      const [stale] = await readdir(cache);
      await first.process.stop('SIGKILL');
      assert.deepEqual(await readdir(cache), [stale], 'a killed server cannot clean up');
      const second = await startNereidServe(args, { ...env, AWS_ENDPOINT_URL_S3: s3.endpoint });
      const now = await readdir(cache);
      assert.equal(now.length, 1);
      assert.notEqual(now[0], stale);
      assert.match(second.process.stdout, /removing '[^']*': the mirror of a server that no longer runs/);
      // Answering a request: the server is past its start-up, its signal handlers in place.
      assert.equal((await httpRequest(`${second.url}/v2/health/ready`)).status, 200);
      assert.equal((await second.process.stop()).code, 0, second.process.output);
      assert.deepEqual(await readdir(cache), []);
    } finally {
      await rm(cache, { recursive: true, force: true });
    }
  });

  it("takes Triton's s3://host:port/bucket/prefix form, beside a local repository", async () => {
    const local = await makeRepository({ local_tagged: taggedFiles('local_tagged', { 1: 7 }) });
    try {
      const port = new URL(s3.endpoint).port;
      const srv = await startNereidServe([`--model-repository=s3://127.0.0.1:${port}/${BUCKET}/${PREFIX.slice(0, -1)}`, `--model-repository=${local}`], env);
      assert.equal(await taggedAnswer(srv.url, 'local_tagged'), 7);
      const c = simpleCase(1);
      const reply = await inferJson(srv.url, 'simple', c.inputs);
      assert.equal(reply.status, 200, reply.text);
      assert.deepEqual(outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT1').data, c.difference);
      assert.deepEqual((await repositoryIndex(srv.url)).map((e) => `${e.name}:${e.state}`), ['add_sub:READY', 'local_tagged:READY', 'simple:READY']);
      await srv.process.stop();
    } finally {
      await removeDir(local);
    }
  });

  it('mode poll: a model added, changed and removed in the bucket is loaded, reloaded and unloaded; one uploaded in pieces never loads half-way', async () => {
    const prefix = 'polled/';
    await putModel(s3.client, BUCKET, prefix, 'tagged', taggedFiles('tagged', { 1: 100 }), { manifest: true });
    const srv = await startNereidServe(
      [`--model-repository=s3://${BUCKET}/${prefix}`, '--model-control-mode=poll', '--repository-poll-secs=1', '--repository-settle-secs=2'],
      { ...env, AWS_ENDPOINT_URL: s3.endpoint },
    );
    assert.equal(await taggedAnswer(srv.url, 'tagged'), 100);

    // Changed (files first, manifest last).
    await putModel(s3.client, BUCKET, prefix, 'tagged', taggedFiles('tagged', { 1: 200 }), { manifest: true });
    await waitFor('the changed model to answer', async () => (await taggedAnswer(srv.url, 'tagged')) === 200, 30_000);

    // Added without a manifest, in two pieces 0.5 s apart: the settle interval covers the gap.
    const late = taggedFiles('late', { 1: 5 });
    await putObject(s3.client, BUCKET, `${prefix}late/config.pbtxt`, late['config.pbtxt']!);
    await new Promise((r) => setTimeout(r, 500));
    await putObject(s3.client, BUCKET, `${prefix}late/1/model.onnx`, late['1/model.onnx']!);
    await waitFor('the added model to answer', async () => (await taggedAnswer(srv.url, 'late')) === 5, 30_000);
    assert.doesNotMatch(srv.process.output, /failed to load[^\n]*'late'/, 'the half-uploaded model was never tried');

    // Removed.
    await deleteModel(s3.client, BUCKET, prefix, 'late');
    await waitFor('the removed model to be unloaded', async () => (await taggedAnswer(srv.url, 'late')) === undefined, 30_000);
    // It stops answering at once and is UNLOADING until its instances are released.
    await waitFor('the removed model released', async () => (await repositoryIndex(srv.url)).find((x) => x.name === 'late')?.state !== 'UNLOADING');
    assert.deepEqual((await repositoryIndex(srv.url)).find((e) => e.name === 'late'), { name: 'late', version: '1', state: 'UNAVAILABLE', reason: 'unloaded' });
    assert.equal(await taggedAnswer(srv.url, 'tagged'), 200);
    assert.equal((await srv.process.stop()).code, 0, srv.process.output);
  });

  it('a model whose upload is incomplete at start fails the start-up; with --exit-on-error=false the others serve and it loads once complete', async () => {
    const prefix = 'startup/';
    await putModel(s3.client, BUCKET, prefix, 'good', taggedFiles('good', { 1: 1 }), { manifest: true });
    const broken = taggedFiles('broken', { 1: 2 });
    await putModel(s3.client, BUCKET, prefix, 'broken', broken);
    await putObject(s3.client, BUCKET, `${prefix}broken/SHA256SUMS`, manifestOf({ ...broken, '1/labels.txt': 'a\n' }));
    const args = [`--model-repository=s3://${BUCKET}/${prefix}`, '--http-port=0', '--grpc-port=0', '--metrics-port=0', '--http-address=127.0.0.1', '--grpc-address=127.0.0.1'];
    const strict = new NereidProcess(['serve', ...args], { ...env, AWS_ENDPOINT_URL_S3: s3.endpoint });
    assert.equal((await strict.waitForExit()).code, 1, strict.output);
    assert.match(strict.output, /broken[^\n]*1\/labels\.txt listed in its SHA256SUMS is not in the store \(upload in progress\?\)/);
    assert.match(strict.stderr, /failed to load all models; exiting/);

    const srv = await startNereidServe([`--model-repository=s3://${BUCKET}/${prefix}`, '--exit-on-error=false', '--model-control-mode=poll', '--repository-poll-secs=1'], { ...env, AWS_ENDPOINT_URL_S3: s3.endpoint });
    assert.equal(await taggedAnswer(srv.url, 'good'), 1);
    const entry = (await repositoryIndex(srv.url)).find((e) => e.name === 'broken');
    assert.equal(entry?.state, 'UNAVAILABLE');
    assert.match(entry?.reason ?? '', /1\/labels\.txt listed in its SHA256SUMS is not in the store/);
    const ready = await httpRequest(`${srv.url}/v2/health/ready`);
    assert.equal(ready.status, 400, 'strict readiness: a model the server was asked to serve has failed');
    await putObject(s3.client, BUCKET, `${prefix}broken/1/labels.txt`, 'a\n');
    await waitFor('the completed model to answer', async () => (await taggedAnswer(srv.url, 'broken')) === 2, 30_000);
    assert.equal((await httpRequest(`${srv.url}/v2/health/ready`)).status, 200);
    await srv.process.stop();
  });

  it('writes every key inside its model directory: encoded separators stay part of a file name', async () => {
    // SeaweedFS itself refuses keys with '..' or '.' segments and turns backslashes into '/'
    // (the mirror's own refusal of those is covered by s3-location.test.ts); what it stores
    // literally must land inside the model directory as one file name.
    const prefix = 'hostile/';
    await putModel(s3.client, BUCKET, prefix, 'tagged', taggedFiles('tagged', { 1: 3 }));
    await putObject(s3.client, BUCKET, `${prefix}tagged/1/..%2f..%2f..%2fescaped.txt`, 'x');
    await putObject(s3.client, BUCKET, `${prefix}tagged/%2e%2e/escaped.txt`, 'y');
    const cache = await mkdtemp(join(tmpdir(), 'nereid-s3-cache-'));
    try {
      const srv = await startNereidServe([`--model-repository=s3://${BUCKET}/${prefix}`, `--model-repository-cache-dir=${cache}`, '--repository-settle-secs=0'], {
        ...env,
        AWS_ENDPOINT_URL: s3.endpoint,
      });
      assert.equal(await taggedAnswer(srv.url, 'tagged'), 3);
      const files: string[] = [];
      const walk = async (d: string) => {
        for (const e of await readdir(d, { withFileTypes: true })) {
          if (e.isDirectory()) await walk(join(d, e.name));
          else if (e.isFile()) files.push(relative(cache, join(d, e.name)));
        }
      };
      await walk(cache);
      const model = files.filter((f) => f.endsWith('config.pbtxt'))[0]!.slice(0, -'config.pbtxt'.length);
      assert.match(model, /^nereid-repositories-[^/]+\/0\/\.revisions\/tagged\.\d+\/$/);
      const owner = files.filter((f) => /^nereid-repositories-[^/]+\/\.owner$/.test(f));
      assert.equal(owner.length, 1, 'the file naming the server that owns the mirror');
      const rest = files.filter((f) => !owner.includes(f));
      assert.ok(rest.every((f) => f.startsWith(model)), `every other file is inside the model directory: ${rest.join(', ')}`);
      assert.deepEqual(rest.map((f) => f.slice(model.length)).sort(), ['%2e%2e/escaped.txt', '1/..%2f..%2f..%2fescaped.txt', '1/model.onnx', 'config.pbtxt']);
      await srv.process.stop();
    } finally {
      await rm(cache, { recursive: true, force: true });
    }
  });

  it('mode poll: while the store cannot be reached the server keeps serving and logs the failure once', async () => {
    const own = await startS3();
    try {
      await own.createBucket('gone');
      await putModel(own.client, 'gone', '', 'tagged', taggedFiles('tagged', { 1: 9 }), { manifest: true });
      const srv = await startNereidServe(['--model-repository=s3://gone', '--model-control-mode=poll', '--repository-poll-secs=1'], {
        ...env,
        AWS_ACCESS_KEY_ID: own.accessKeyId,
        AWS_SECRET_ACCESS_KEY: own.secretAccessKey,
        AWS_ENDPOINT_URL_S3: own.endpoint,
      });
      assert.equal(await taggedAnswer(srv.url, 'tagged'), 9);
      await own.stop();
      const failure = /model repository 's3:\/\/gone' \([^)]*\): cannot reach the S3 endpoint \(ECONNREFUSED\)[^\n]*; the server keeps serving the models it has/g;
      await waitFor('the failed poll to be logged', () => new RegExp(failure.source).test(srv.process.stderr), 30_000);
      await new Promise((r) => setTimeout(r, 4000));
      assert.equal(srv.process.stderr.match(failure)?.length, 1, srv.process.stderr);
      assert.equal(await taggedAnswer(srv.url, 'tagged'), 9);
      const ready = await httpRequest(`${srv.url}/v2/health/ready`);
      assert.equal(ready.status, 200);
      assert.equal((await srv.process.stop()).code, 0, srv.process.output);
    } finally {
      await own.stop();
    }
  });

  it('stops the start with a clear error for bad credentials, an unknown bucket and an unreachable endpoint', async () => {
    const start = async (uri: string, extra: Record<string, string>) => {
      const p = new NereidProcess(['serve', `--model-repository=${uri}`, '--http-port=0', '--grpc-port=0', '--metrics-port=0', '--http-address=127.0.0.1', '--grpc-address=127.0.0.1'], { ...env, ...extra });
      const exit = await p.waitForExit();
      assert.equal(exit.code, 1, p.output);
      return p.stderr;
    };
    const wrong = await start(`s3://${BUCKET}/${PREFIX}`, { AWS_ENDPOINT_URL_S3: s3.endpoint, AWS_SECRET_ACCESS_KEY: 'not-the-secret' });
    assert.match(wrong, new RegExp(`model repository 's3://${BUCKET}/${PREFIX}' \\(${s3.endpoint}\\): the store refused the credentials \\(SignatureDoesNotMatch\\); check AWS_ACCESS_KEY_ID`));
    const bucket = await start('s3://no-such-bucket/x', { AWS_ENDPOINT_URL_S3: s3.endpoint });
    assert.match(bucket, /model repository 's3:\/\/no-such-bucket\/x' \([^)]*\): bucket 'no-such-bucket' does not exist; create it or correct the bucket/);
    const port = await freePort();
    const unreachable = await start(`s3://127.0.0.1:${port}/${BUCKET}/x`, {});
    assert.match(unreachable, new RegExp(`model repository 's3://127.0.0.1:${port}/${BUCKET}/x' \\(http://127.0.0.1:${port}\\): cannot reach the S3 endpoint \\(ECONNREFUSED\\)`));
  });
});
