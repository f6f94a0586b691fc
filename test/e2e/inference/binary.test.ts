/**
 * The binary tensor data extension (protocol.md §3.8), the raw binary request (§3.9) and the
 * C++ client's request style (§7.3: header length always sent, Content-Type, empty `Expect:`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { identityModel, simpleModel, simpleStringModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import {
  binaryBody,
  bytesElements,
  bytesOf,
  nodeRequest,
  parseInferResponse,
  postInfer,
  rawExchange,
  readBytesElements,
  type HttpResult,
} from '../../helpers/http.js';

const range = (n: number, f: (i: number) => number = (i) => i): number[] => Array.from({ length: n }, (_, i) => f(i));

let repo: string;
let srv: RunningServer;

before(async () => {
  repo = await makeRepository({
    simple: modelFiles(simpleModel()),
    simple_string: modelFiles(simpleStringModel()),
    identity_int32: modelFiles(identityModel('INT32', [-1, -1])),
    identity_fp32: modelFiles(identityModel('FP32', [-1, -1])),
    identity_bytes: modelFiles(identityModel('BYTES', [-1, -1])),
    identity_int32_16: modelFiles(identityModel('INT32', [-1, 16], { name: 'identity_int32_16' })),
    identity_fp32_nobatch: modelFiles(identityModel('FP32', [4], { name: 'identity_fp32_nobatch' })),
    identity_bytes_nobatch: modelFiles(identityModel('BYTES', [1], { name: 'identity_bytes_nobatch' })),
  });
  srv = await startServer({ modelRepositories: [repo] });
  assert.deepEqual(srv.server.startReport.failures, []);
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

const A = Int32Array.from(range(16, (i) => i * 3));
const B = Int32Array.from(range(16, (i) => 7 - i));
const SUM = Int32Array.from(range(16, (i) => i * 3 + 7 - i));
const DIFF = Int32Array.from(range(16, (i) => i * 3 - (7 - i)));

async function postBinary(model: string, header: unknown, blobs: readonly Uint8Array[], extra: Record<string, string> = {}): Promise<HttpResult> {
  const { body, headerLength } = binaryBody(header, blobs);
  return postInfer(srv.url, model, body, { 'Inference-Header-Content-Length': headerLength, ...extra });
}

function assertBinaryFraming(res: HttpResult): void {
  assert.equal(res.status, 200, res.body.toString());
  assert.equal(res.headers['content-type'], 'application/octet-stream');
  const h = Number(res.headers['inference-header-content-length']);
  assert.ok(h > 0 && h < res.body.byteLength);
  assert.equal(res.body[h - 1], '}'.charCodeAt(0));
  JSON.parse(res.body.subarray(0, h).toString());
}

function assertJsonFraming(res: HttpResult): void {
  assert.equal(res.status, 200, res.body.toString());
  assert.equal(res.headers['content-type'], 'application/json');
  assert.equal(res.headers['inference-header-content-length'], undefined);
}

describe('binary inputs and outputs', () => {
  test('binary inputs; binary_data_output: true with no outputs listed returns every output binary', async () => {
    const res = await postBinary(
      'simple',
      {
        parameters: { binary_data_output: true },
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        ],
      },
      [bytesOf(A), bytesOf(B)],
    );
    assertBinaryFraming(res);
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs, [
      { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
    ]);
    assert.deepEqual(blobs.get('OUTPUT0'), bytesOf(SUM));
    assert.deepEqual(blobs.get('OUTPUT1'), bytesOf(DIFF));
    assert.equal(res.body.byteLength, Number(res.headers['inference-header-content-length']) + 128);
  });

  test('blobs are consumed in the order of `inputs` and returned in the order of `outputs`', async () => {
    const res = await postBinary(
      'simple',
      {
        inputs: [
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        ],
        outputs: [
          { name: 'OUTPUT1', parameters: { binary_data: true } },
          { name: 'OUTPUT0', parameters: { binary_data: true } },
        ],
      },
      [bytesOf(B), bytesOf(A)],
    );
    assertBinaryFraming(res);
    const { header } = parseInferResponse(res.headers, res.body);
    const binary = res.body.subarray(Number(res.headers['inference-header-content-length']));
    assert.deepEqual(header.outputs.map((o) => o.name), ['OUTPUT1', 'OUTPUT0']);
    assert.deepEqual(binary, Buffer.concat([bytesOf(DIFF), bytesOf(SUM)]));
  });

  test('mixed JSON and binary inputs and outputs', async () => {
    const res = await postBinary(
      'simple',
      {
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from(A) },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        ],
        outputs: [
          { name: 'OUTPUT0', parameters: { binary_data: false } },
          { name: 'OUTPUT1', parameters: { binary_data: true } },
        ],
      },
      [bytesOf(B)],
    );
    assertBinaryFraming(res);
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs, [
      { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from(SUM) },
      { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
    ]);
    assert.deepEqual(blobs.get('OUTPUT1'), bytesOf(DIFF));
  });

  test('a binary batch of 3 returns [3,16] binary outputs', async () => {
    const a = Int32Array.from(range(48, (i) => i));
    const b = Int32Array.from(range(48, (i) => 1000 * Math.floor(i / 16)));
    const res = await postBinary(
      'simple',
      {
        parameters: { binary_data_output: true },
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [3, 16], parameters: { binary_data_size: 192 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [3, 16], parameters: { binary_data_size: 192 } },
        ],
      },
      [bytesOf(a), bytesOf(b)],
    );
    assertBinaryFraming(res);
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs.map((o) => o.shape), [[3, 16], [3, 16]]);
    assert.deepEqual(blobs.get('OUTPUT0'), bytesOf(Int32Array.from(a, (v, i) => v + b[i]!)));
    assert.deepEqual(blobs.get('OUTPUT1'), bytesOf(Int32Array.from(a, (v, i) => v - b[i]!)));
  });

  test('zero-byte blobs: a zero-element input is read from 0 bytes; a 0-byte output makes a pure JSON response', async () => {
    const res = await postBinary(
      'identity_int32',
      {
        inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 0], parameters: { binary_data_size: 0 } }],
        outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
      },
      [],
    );
    assertJsonFraming(res);
    const header = JSON.parse(res.body.toString()) as unknown;
    assert.deepEqual(header, {
      model_name: 'identity_int32',
      model_version: '1',
      outputs: [{ name: 'OUTPUT0', datatype: 'INT32', shape: [1, 0], parameters: { binary_data_size: 0 } }],
    });
  });

  test('a zero-element BYTES input from a zero-byte blob, answered as JSON', async () => {
    const empty = await postBinary(
      'identity_bytes',
      {
        inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 0], parameters: { binary_data_size: 0 } }],
        outputs: [{ name: 'OUTPUT0', parameters: { binary_data: false } }],
      },
      [],
    );
    assertJsonFraming(empty);
    assert.deepEqual((JSON.parse(empty.body.toString()) as { outputs: unknown }).outputs, [
      { name: 'OUTPUT0', datatype: 'BYTES', shape: [1, 0], data: [] },
    ]);
  });

  test('BYTES in binary both ways, including empty and multi-byte UTF-8 elements', async () => {
    // onnxruntime-node carries string tensors as JS strings (and ORT as C strings), so elements
    // that are not UTF-8 or hold NUL cannot pass through an ONNX model unchanged.
    const elements = [Buffer.from('hello'), Buffer.alloc(0), Buffer.from('grüße ✓'), Buffer.from('日本語 🙂\n\t"')];
    const blob = bytesElements(elements);
    const res = await postBinary(
      'identity_bytes',
      {
        inputs: [{ name: 'INPUT0', datatype: 'BYTES', shape: [1, 4], parameters: { binary_data_size: blob.byteLength } }],
        outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
      },
      [blob],
    );
    assertBinaryFraming(res);
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs, [{ name: 'OUTPUT0', datatype: 'BYTES', shape: [1, 4], parameters: { binary_data_size: blob.byteLength } }]);
    assert.deepEqual(blobs.get('OUTPUT0'), blob);
  });

  test('simple_string computes over binary BYTES inputs and answers BYTES both as JSON and binary', async () => {
    const a = range(16, (i) => i);
    const b = range(16, (i) => 2 * i + 1);
    const blobA = bytesElements(a.map(String));
    const blobB = bytesElements(b.map(String));
    const res = await postBinary(
      'simple_string',
      {
        inputs: [
          { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], parameters: { binary_data_size: blobA.byteLength } },
          { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], parameters: { binary_data_size: blobB.byteLength } },
        ],
        outputs: [
          { name: 'OUTPUT0', parameters: { binary_data: false } },
          { name: 'OUTPUT1', parameters: { binary_data: true } },
        ],
      },
      [blobA, blobB],
    );
    assertBinaryFraming(res);
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs[0], { name: 'OUTPUT0', datatype: 'BYTES', shape: [1, 16], data: a.map((v, i) => String(v + b[i]!)) });
    assert.deepEqual(readBytesElements(blobs.get('OUTPUT1')!), a.map((v, i) => String(v - b[i]!)));
  });
});

describe('raw binary request (Inference-Header-Content-Length: 0)', () => {
  test('a one-input batching model gets the whole body as batch 1; every output comes back binary', async () => {
    const values = Float32Array.from([1.5, -2, 0.25, 1e6, 7]);
    const res = await postInfer(srv.url, 'identity_fp32', bytesOf(values), { 'Inference-Header-Content-Length': 0 });
    assertBinaryFraming(res);
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs, [{ name: 'OUTPUT0', datatype: 'FP32', shape: [1, 5], parameters: { binary_data_size: 20 } }]);
    assert.deepEqual(blobs.get('OUTPUT0'), bytesOf(values));
  });

  test('fixed dims: the body must be exactly one item', async () => {
    const values = Int32Array.from(range(16, (i) => i * i));
    const ok = await postInfer(srv.url, 'identity_int32_16', bytesOf(values), { 'Inference-Header-Content-Length': '0' });
    assertBinaryFraming(ok);
    const { header, blobs } = parseInferResponse(ok.headers, ok.body);
    assert.deepEqual(header.outputs[0]!.shape, [1, 16]);
    assert.deepEqual(blobs.get('OUTPUT0'), bytesOf(values));

    const bad = await postInfer(srv.url, 'identity_int32_16', bytesOf(values).subarray(0, 60), { 'Inference-Header-Content-Length': '0' });
    assert.equal(bad.status, 400);
    assert.match((JSON.parse(bad.body.toString()) as { error: string }).error, /raw binary request of 60 bytes/);
  });

  test('a non-batching model gets the body as its input shape', async () => {
    const values = Float32Array.from([1, 2, 3, 4]);
    const res = await postInfer(srv.url, 'identity_fp32_nobatch', bytesOf(values), { 'Inference-Header-Content-Length': '0' });
    assertBinaryFraming(res);
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs[0]!.shape, [4]);
    assert.deepEqual(blobs.get('OUTPUT0'), bytesOf(values));
  });

  test('a BYTES input is one element of shape [1]', async () => {
    const blob = bytesElements(['one element']);
    const res = await postInfer(srv.url, 'identity_bytes_nobatch', blob, { 'Inference-Header-Content-Length': '0' });
    assertBinaryFraming(res);
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs[0]!.shape, [1]);
    assert.deepEqual(readBytesElements(blobs.get('OUTPUT0')!), ['one element']);
  });

  test('a two-input model is refused with a clear 400', async () => {
    const res = await postInfer(srv.url, 'simple', Buffer.concat([bytesOf(A), bytesOf(B)]), { 'Inference-Header-Content-Length': '0' });
    assert.equal(res.status, 400);
    assert.equal(res.headers['content-type'], 'application/json');
    const { error } = JSON.parse(res.body.toString()) as { error: string };
    assert.match(error, /exactly one input/);
    assert.match(error, /'simple' has 2/);
  });
});

describe('C++ client request style (protocol.md §7.3)', () => {
  const jsonRequest = JSON.stringify({
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from(A) },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from(B) },
    ],
    outputs: [{ name: 'OUTPUT0', parameters: { binary_data: false } }],
  });

  test('all-JSON body with the header length equal to the body, Content-Type and an empty Expect: 200, not 417', async () => {
    const res = await nodeRequest(srv.url, '/v2/models/simple/infer', {
      method: 'POST',
      headers: {
        'Content-Type': 'application/json',
        Expect: '',
        'Inference-Header-Content-Length': Buffer.byteLength(jsonRequest),
      },
      body: jsonRequest,
    });
    assertJsonFraming(res);
    assert.deepEqual((JSON.parse(res.body.toString()) as { outputs: { data: unknown }[] }).outputs[0]!.data, Array.from(SUM));
  });

  test('binary body with application/octet-stream and an empty Expect:', async () => {
    const { body, headerLength } = binaryBody(
      {
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
        ],
        outputs: [{ name: 'OUTPUT1', parameters: { binary_data: true } }],
      },
      [bytesOf(A), bytesOf(B)],
    );
    const res = await nodeRequest(srv.url, '/v2/models/simple/infer', {
      method: 'POST',
      headers: { 'Content-Type': 'application/octet-stream', Expect: '', 'Inference-Header-Content-Length': headerLength },
      body,
    });
    assertBinaryFraming(res);
    assert.deepEqual(parseInferResponse(res.headers, res.body).blobs.get('OUTPUT1'), bytesOf(DIFF));
  });

  test('the exact bytes on the wire: "Expect: " with no value, keep-alive, then a second request on the same connection', async () => {
    const len = Buffer.byteLength(jsonRequest);
    const one =
      'POST /v2/models/simple/infer HTTP/1.1\r\nHost: localhost\r\nExpect: \r\nContent-Type: application/json\r\n' +
      `Inference-Header-Content-Length: ${len}\r\nContent-Length: ${len}\r\n\r\n${jsonRequest}`;
    const two = 'GET /v2/health/live HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n';
    const reply = await rawExchange(srv.port, one + two);
    const statuses = [...reply.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1]);
    assert.deepEqual(statuses, ['200', '200'], reply);
    assert.ok(!reply.includes('100 Continue'));
  });
});
