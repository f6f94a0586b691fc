/**
 * Streaming over HTTP: the generate extension (`generate`, `generate_stream` with Server-Sent
 * Events, protocol.md §3.18) on a decoupled model and on ONNX models, errors before and during a
 * stream, cancellation when the client goes away, the response timeout, `infer` with
 * `Accept: text/event-stream` (beyond Triton), plain `infer` refusing decoupled models (§3.7.3),
 * and `HttpClient.generate`/`generateStream`.
 */
import assert from 'node:assert/strict';
import { request as httpRequestRaw } from 'node:http';
import { gzipSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import { HttpClient, InferenceServerError } from '@nereid/client';
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import { httpRequest, jsonBody, makeRepository, removeDir, simpleCase, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { DecoupledBackend, repeatConfig } from './decoupled-backend.js';

let repo: string;
let srv: RunningServer;
let backend: DecoupledBackend;
let client: HttpClient;

before(async () => {
  backend = new DecoupledBackend();
  repo = await makeRepository({
    repeat: { 'config.pbtxt': repeatConfig('repeat'), '1/.keep': '' },
    simple: modelFiles(simpleModel()),
    simple_string: modelFiles(simpleStringModel()),
  });
  srv = await startServer({ modelRepositories: [repo], backends: [backend.backend] });
  assert.deepEqual(srv.server.startReport.failures, []);
  client = new HttpClient(srv.url);
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

function post(path: string, body: unknown, headers: Record<string, string> = {}) {
  return httpRequest(`${srv.url}${path}`, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
}

const SSE_TYPE = 'text/event-stream; charset=utf-8';

describe('generate_stream (Server-Sent Events)', () => {
  it('one event per response of a decoupled model, exact framing, chunked; the stream ends after the final one', async () => {
    const reply = await post('/v2/models/repeat/generate_stream', { id: 'g1', IN: [10, 20, 30], delay_ms: 2 });
    assert.equal(reply.status, 200);
    assert.equal(reply.headers.get('content-type'), SSE_TYPE);
    assert.equal(reply.headers.get('content-length'), null);
    assert.equal(reply.headers.get('transfer-encoding'), 'chunked');
    assert.equal(
      reply.text,
      'data: {"id":"g1","model_name":"repeat","model_version":"1","OUT":10,"IDX":0}\n\n' +
        'data: {"id":"g1","model_name":"repeat","model_version":"1","OUT":20,"IDX":1}\n\n' +
        'data: {"id":"g1","model_name":"repeat","model_version":"1","OUT":30,"IDX":2}\n\n',
    );
  });

  it('a flags-only final response adds no event; inputs may sit in the parameters object', async () => {
    const reply = await post('/v2/models/repeat/versions/1/generate_stream', { parameters: { IN: [5, 6], mode: 'empty_final' } });
    assert.equal(reply.status, 200);
    assert.equal(
      reply.text,
      'data: {"model_name":"repeat","model_version":"1","OUT":5,"IDX":0}\n\n' + 'data: {"model_name":"repeat","model_version":"1","OUT":6,"IDX":1}\n\n',
    );
  });

  it('an error after the first response is an error event under status 200', async () => {
    const reply = await post('/v2/models/repeat/generate_stream', { id: 'e1', IN: [1], mode: 'error' });
    assert.equal(reply.status, 200);
    const frames = reply.text.split('\n\n').filter((f) => f !== '');
    assert.equal(frames.length, 2);
    assert.equal(frames[0], 'data: {"id":"e1","model_name":"repeat","model_version":"1","OUT":1,"IDX":0}');
    assert.deepEqual(JSON.parse(frames[1]!.slice('data: '.length)), { error: "decoupled_test failed request 'e1' on purpose after 1 responses" });
  });

  it('an error before any response is a JSON error with its status', async () => {
    const before = await post('/v2/models/repeat/generate_stream', { id: 'e0', IN: [], mode: 'error' });
    assert.equal(before.status, 500);
    assert.match((jsonBody(before) as { error: string }).error, /on purpose after 0 responses/);
    const unknown = await post('/v2/models/nope/generate_stream', { IN: [1] });
    assert.equal(unknown.status, 404);
    assert.match((jsonBody(unknown) as { error: string }).error, /nope/);
  });

  it('a model that never sends the final flag ends with a timeout error event', async () => {
    const quick = await startServer({ modelRepositories: [repo], backends: [new DecoupledBackend().backend], decoupledResponseTimeoutMs: 300 });
    try {
      const reply = await httpRequest(`${quick.url}/v2/models/repeat/generate_stream`, {
        method: 'POST',
        body: JSON.stringify({ id: 'forever', IN: [3], mode: 'no_final' }),
      });
      assert.equal(reply.status, 200);
      const frames = reply.text.split('\n\n').filter((f) => f !== '');
      assert.equal(frames.length, 2);
      const error = JSON.parse(frames[1]!.slice('data: '.length)) as { error: string };
      assert.match(error.error, /sent no response for request 'forever' in 300 ms and has not sent its final response/);
    } finally {
      await quick.stop();
    }
  });

  it('a client that goes away cancels the request: the backend sees its signal abort', async () => {
    const id = 'gone';
    await new Promise<void>((resolve, reject) => {
      const req = httpRequestRaw(`${srv.url}/v2/models/repeat/generate_stream`, { method: 'POST' }, (res) => {
        assert.equal(res.statusCode, 200);
        res.once('data', (chunk: Buffer) => {
          assert.match(chunk.toString(), /^data: \{"id":"gone"/);
          req.destroy();
          resolve();
        });
      });
      req.on('error', (err) => (String(err).includes('socket hang up') ? undefined : reject(err)));
      req.end(JSON.stringify({ id, IN: [1], mode: 'wait_cancel' }));
    });
    await backend.whenFinished(id);
    assert.ok(backend.cancelled.includes(id));
  });

  it('a non-decoupled ONNX model: one event', async () => {
    const c = simpleCase(1, 4);
    const reply = await post('/v2/models/simple/generate_stream', { id: 's', INPUT0: c.inputs[0]!.data, INPUT1: c.inputs[1]!.data });
    assert.equal(reply.status, 200);
    assert.equal(reply.headers.get('content-type'), SSE_TYPE);
    assert.equal(
      reply.text,
      `data: {"id":"s","model_name":"simple","model_version":"1","OUTPUT0":[${c.sum.join(',')}],"OUTPUT1":[${c.difference.join(',')}]}\n\n`,
    );
  });
});

describe('generate', () => {
  it('a non-decoupled ONNX model with BYTES inputs: strings in, strings out; other keys are parameters', async () => {
    const a = Array.from({ length: 16 }, (_, i) => String(i));
    const b = Array.from({ length: 16 }, (_, i) => String(2 * i));
    const reply = await post('/v2/models/simple_string/generate', { id: '7', INPUT0: a, parameters: { INPUT1: b, temperature: 0.5, note: 'x' } });
    assert.equal(reply.status, 200);
    assert.equal(reply.headers.get('content-type'), 'application/json');
    assert.deepEqual(jsonBody(reply), {
      id: '7',
      model_name: 'simple_string',
      model_version: '1',
      OUTPUT0: a.map((x, i) => String(Number(x) + Number(b[i]))),
      OUTPUT1: a.map((x, i) => String(Number(x) - Number(b[i]))),
    });
  });

  it('a decoupled model with exactly one response is served; with more it is an error', async () => {
    const one = await post('/v2/models/repeat/generate', { IN: 42 });
    assert.equal(one.status, 200);
    assert.deepEqual(jsonBody(one), { model_name: 'repeat', model_version: '1', OUT: 42, IDX: 0 });
    const many = await post('/v2/models/repeat/generate', { IN: [1, 2] });
    assert.equal(many.status, 500);
    assert.match((jsonBody(many) as { error: string }).error, /model 'repeat' sent 2 responses to a generate request, which takes exactly one; use generate_stream/);
  });

  it('bad requests: shape that does not fit, triton_ keys, wrong parameter types, non-identity Content-Encoding', async () => {
    const shape = await post('/v2/models/simple/generate', { INPUT0: [1, 2, 3], INPUT1: [1, 2, 3] });
    assert.equal(shape.status, 400);
    assert.match((jsonBody(shape) as { error: string }).error, /The schema can not convert input 'INPUT0' to tensor with proper shape/);
    const triton = await post('/v2/models/repeat/generate', { IN: 1, triton_enable_empty_final_response: true });
    assert.equal(triton.status, 400);
    assert.match((jsonBody(triton) as { error: string }).error, /triton_/);
    const type = await post('/v2/models/repeat/generate', { IN: 1, options: { a: 1 } });
    assert.equal(type.status, 400);
    assert.match((jsonBody(type) as { error: string }).error, /parameter 'options'/);
    const notObject = await post('/v2/models/repeat/generate', { IN: 1, parameters: [1] });
    assert.equal(notObject.status, 400);
    const gz = await httpRequest(`${srv.url}/v2/models/repeat/generate`, {
      method: 'POST',
      headers: { 'Content-Encoding': 'gzip' },
      body: gzipSync(JSON.stringify({ IN: 1 })),
    });
    assert.equal(gz.status, 400);
    assert.deepEqual(jsonBody(gz), { error: "Unsupported content-encoding, only 'identity' is supported." });
    // The server keeps serving.
    assert.equal((await post('/v2/models/repeat/generate', { IN: 1 })).status, 200);
  });
});

describe('infer and streaming', () => {
  const body = { id: 'i1', inputs: [{ name: 'IN', datatype: 'INT32', shape: [2], data: [8, 9] }] };

  it('plain infer refuses a decoupled model with 501', async () => {
    const reply = await post('/v2/models/repeat/infer', body);
    assert.equal(reply.status, 501);
    assert.match((jsonBody(reply) as { error: string }).error, /HTTP end point doesn't support models with decoupled transaction policy/);
  });

  it('infer with Accept: text/event-stream streams a decoupled model\'s responses with triton_final_response', async () => {
    const reply = await post('/v2/models/repeat/infer', body, { Accept: 'text/event-stream' });
    assert.equal(reply.status, 200);
    assert.equal(reply.headers.get('content-type'), SSE_TYPE);
    const events = reply.text
      .split('\n\n')
      .filter((f) => f !== '')
      .map((f) => {
        assert.ok(f.startsWith('data: '));
        return JSON.parse(f.slice(6)) as Record<string, unknown>;
      });
    assert.deepEqual(events, [
      {
        id: 'i1',
        model_name: 'repeat',
        model_version: '1',
        parameters: { triton_final_response: false },
        outputs: [
          { name: 'OUT', datatype: 'INT32', shape: [1], data: [8] },
          { name: 'IDX', datatype: 'INT32', shape: [1], data: [0] },
        ],
      },
      {
        id: 'i1',
        model_name: 'repeat',
        model_version: '1',
        parameters: { triton_final_response: true },
        outputs: [
          { name: 'OUT', datatype: 'INT32', shape: [1], data: [9] },
          { name: 'IDX', datatype: 'INT32', shape: [1], data: [1] },
        ],
      },
    ]);
  });

  it('infer with Accept: text/event-stream on a non-decoupled model: one final event; binary outputs refused', async () => {
    const c = simpleCase(1, 2);
    const reply = await post('/v2/models/simple/infer', { inputs: c.inputs }, { Accept: 'text/event-stream' });
    assert.equal(reply.status, 200);
    const frames = reply.text.split('\n\n').filter((f) => f !== '');
    assert.equal(frames.length, 1);
    const event = JSON.parse(frames[0]!.slice(6)) as { parameters: unknown; outputs: { name: string; data: number[] }[] };
    assert.deepEqual(event.parameters, { triton_final_response: true });
    assert.deepEqual(event.outputs.map((o) => [o.name, o.data]), [
      ['OUTPUT0', c.sum],
      ['OUTPUT1', c.difference],
    ]);
    const binary = await post(
      '/v2/models/simple/infer',
      { inputs: c.inputs, outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }] },
      { Accept: 'text/event-stream' },
    );
    assert.equal(binary.status, 400);
    assert.match((jsonBody(binary) as { error: string }).error, /output 'OUTPUT0'.*binary data, which server-sent events cannot carry/);
  });
});

describe('HttpClient generate and generateStream', () => {
  it('generate returns the response object; generateStream yields each event', async () => {
    assert.deepEqual(await client.generate({ model: 'repeat', body: { id: 'c1', IN: 3 } }), {
      id: 'c1',
      model_name: 'repeat',
      model_version: '1',
      OUT: 3,
      IDX: 0,
    });
    const got: unknown[] = [];
    for await (const event of client.generateStream({ model: 'repeat', body: { IN: [4, 5, 6] } })) got.push(event);
    assert.deepEqual(got, [
      { model_name: 'repeat', model_version: '1', OUT: 4, IDX: 0 },
      { model_name: 'repeat', model_version: '1', OUT: 5, IDX: 1 },
      { model_name: 'repeat', model_version: '1', OUT: 6, IDX: 2 },
    ]);
  });

  it('generateStream throws the error event after the events before it, and the HTTP error before any', async () => {
    const got: unknown[] = [];
    await assert.rejects(
      async () => {
        for await (const event of client.generateStream({ model: 'repeat', body: { id: 'ce', IN: [1, 2], mode: 'error' } })) got.push(event);
      },
      (err: unknown) => err instanceof InferenceServerError && /on purpose after 2 responses/.test(err.message),
    );
    assert.equal(got.length, 2);
    await assert.rejects(
      async () => {
        for await (const _ of client.generateStream({ model: 'nope', body: { IN: 1 } })) assert.fail('no event expected');
      },
      (err: unknown) => err instanceof InferenceServerError && err.status === 404,
    );
  });

  it('leaving the loop early cancels the request on the server', async () => {
    for await (const event of client.generateStream({ model: 'repeat', body: { id: 'early', IN: [1], mode: 'wait_cancel' } })) {
      assert.equal((event as { OUT: number }).OUT, 1);
      break;
    }
    await backend.whenFinished('early');
    assert.ok(backend.cancelled.includes('early'));
  });
});
