/**
 * HTTP compression of inference requests and responses (protocol.md §3.10): gzip and zlib-framed
 * deflate request bodies whose header length refers to the decompressed body, Accept-Encoding
 * negotiation with weights and ties, whole-body response compression, unsupported codings.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, test } from 'node:test';
import { deflateSync, gunzipSync, gzipSync, inflateSync } from 'node:zlib';
import { HttpClient } from '@nereid/client';
import { simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { binaryBody, bytesOf, parseInferResponse, postInfer, type HttpResult } from '../../helpers/http.js';

const range = (n: number, f: (i: number) => number = (i) => i): number[] => Array.from({ length: n }, (_, i) => f(i));

let repo: string;
let srv: RunningServer;

before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()) });
  srv = await startServer({ modelRepositories: [repo] });
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

const A = Int32Array.from(range(16, (i) => 10 * i));
const B = Int32Array.from(range(16, (i) => i + 1));
const SUM = bytesOf(Int32Array.from(A, (v, i) => v + B[i]!));
const DIFF = bytesOf(Int32Array.from(A, (v, i) => v - B[i]!));

/** Binary inputs; OUTPUT0 binary, OUTPUT1 JSON. */
const request = binaryBody(
  {
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], parameters: { binary_data_size: 64 } },
    ],
    outputs: [
      { name: 'OUTPUT0', parameters: { binary_data: true } },
      { name: 'OUTPUT1', parameters: { binary_data: false } },
    ],
  },
  [bytesOf(A), bytesOf(B)],
);

function checkResult(res: HttpResult, body: Buffer): void {
  assert.equal(res.status, 200, body.toString());
  assert.equal(res.headers['content-type'], 'application/octet-stream');
  const { header, blobs } = parseInferResponse(res.headers, body);
  assert.deepEqual(blobs.get('OUTPUT0'), SUM);
  assert.deepEqual(header.outputs[1]!.data, Array.from(new Int32Array(DIFF.buffer, DIFF.byteOffset, 16)));
}

async function withAccept(accept: string | undefined): Promise<HttpResult> {
  const headers: Record<string, string | number> = { 'Inference-Header-Content-Length': request.headerLength };
  if (accept !== undefined) headers['Accept-Encoding'] = accept;
  return postInfer(srv.url, 'simple', request.body, headers);
}

function decode(res: HttpResult): Buffer {
  switch (res.headers['content-encoding']) {
    case undefined:
      return res.body;
    case 'gzip':
      return gunzipSync(res.body);
    case 'deflate':
      return inflateSync(res.body); // zlib framing (RFC 1950)
    default:
      throw new Error(`unexpected Content-Encoding ${res.headers['content-encoding']}`);
  }
}

describe('request compression', () => {
  for (const [coding, compress] of [['gzip', gzipSync], ['deflate', deflateSync]] as const) {
    test(`Content-Encoding: ${coding}, header length counted on the decompressed body`, async () => {
      const compressed = compress(request.body);
      assert.notEqual(compressed.byteLength, request.body.byteLength);
      const res = await postInfer(srv.url, 'simple', compressed, {
        'Content-Encoding': coding,
        'Inference-Header-Content-Length': request.headerLength,
      });
      assert.equal(res.headers['content-encoding'], undefined, 'the response is not compressed unless asked');
      checkResult(res, res.body);
    });
  }

  test('Content-Encoding: identity (and empty) leaves the body as is', async () => {
    for (const coding of ['identity', '']) {
      const res = await postInfer(srv.url, 'simple', request.body, {
        'Content-Encoding': coding,
        'Inference-Header-Content-Length': request.headerLength,
      });
      checkResult(res, res.body);
    }
  });

  test('an unsupported coding is 501 with Accept-Encoding: gzip, deflate', async () => {
    const res = await postInfer(srv.url, 'simple', request.body, {
      'Content-Encoding': 'br',
      'Inference-Header-Content-Length': request.headerLength,
    });
    assert.equal(res.status, 501);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(res.headers['accept-encoding'], 'gzip, deflate');
    assert.equal(res.body.toString(), '{"error":"Unsupported compression type"}');
  });
});

describe('response compression', () => {
  const cases: [string | undefined, string | undefined][] = [
    [undefined, undefined],
    ['gzip', 'gzip'],
    ['deflate', 'deflate'],
    ['identity', undefined],
    ['gzip;q=0.5, deflate;q=0.8', 'deflate'],
    ['deflate;q=0.3, gzip', 'gzip'],
    ['deflate, gzip', 'deflate'],
    ['gzip, deflate', 'gzip'],
    ['gzip;q=0.7, deflate;q=0.7', 'gzip'],
    ['identity, gzip', undefined],
    ['identity;q=0.1, gzip;q=0.2', 'gzip'],
    ['br', undefined],
    ['br, deflate;q=0.1', 'deflate'],
  ];
  for (const [accept, expected] of cases) {
    test(`Accept-Encoding: ${accept ?? '(none)'} → ${expected ?? 'identity'}`, async () => {
      const res = await withAccept(accept);
      assert.equal(res.status, 200);
      assert.equal(res.headers['content-encoding'], expected);
      assert.equal(Number(res.headers['content-length']), res.body.byteLength);
      checkResult(res, decode(res));
    });
  }

  test('the whole body is compressed; Inference-Header-Content-Length gives the uncompressed JSON length', async () => {
    const plain = await withAccept(undefined);
    const gz = await withAccept('gzip');
    assert.equal(gz.headers['inference-header-content-length'], plain.headers['inference-header-content-length']);
    assert.deepEqual(gunzipSync(gz.body), plain.body);
  });

  test('a pure JSON response is compressed too', async () => {
    const json = JSON.stringify({
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from(A) },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from(B) },
      ],
    });
    const res = await postInfer(srv.url, 'simple', json, { 'Accept-Encoding': 'deflate' });
    assert.equal(res.status, 200);
    assert.equal(res.headers['content-type'], 'application/json');
    assert.equal(res.headers['content-encoding'], 'deflate');
    assert.equal(res.headers['inference-header-content-length'], undefined);
    const body = JSON.parse(inflateSync(res.body).toString()) as { outputs: { data: number[] }[] };
    assert.deepEqual(body.outputs[0]!.data, Array.from(A, (v, i) => v + B[i]!));
  });

  test('compressed both ways with the HTTP client', async () => {
    const client = new HttpClient(srv.url);
    for (const coding of ['gzip', 'deflate'] as const) {
      const result = await client.infer({
        model: 'simple',
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: A },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: B },
        ],
        requestCompression: coding,
        responseCompression: coding,
      });
      assert.deepEqual(bytesOf(result.bytes('OUTPUT0')), SUM);
      assert.deepEqual(bytesOf(result.bytes('OUTPUT1')), DIFF);
    }
  });

  test('the HTTP client asks for an uncompressed answer unless a call asks for compression', async () => {
    // fetch alone would send `Accept-Encoding: gzip, deflate` on every call, and a server that
    // honours it (Nereid, Triton) would compress every response. A recording server shows what
    // each call sends.
    const seen: { url: string; headers: IncomingHttpHeaders }[] = [];
    const recorder = createServer((req, res) => {
      seen.push({ url: req.url ?? '', headers: req.headers });
      req.resume();
      req.on('end', () => {
        if (req.url?.endsWith('/generate_stream')) {
          res.writeHead(200, { 'Content-Type': 'text/event-stream' });
          res.end('data: {"model_name":"m","text_output":"x"}\n\n');
        } else if (req.url?.endsWith('/infer')) {
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify({ model_name: 'm', model_version: '1', outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1], data: [7] }] }));
        } else {
          res.writeHead(200, { 'Content-Type': 'application/json' });
          res.end(JSON.stringify({ name: 'nereid', version: '0', extensions: [] }));
        }
      });
    });
    await new Promise<void>((resolve) => recorder.listen(0, '127.0.0.1', resolve));
    try {
      const client = new HttpClient(`http://127.0.0.1:${(recorder.address() as AddressInfo).port}`);
      await client.serverMetadata();
      const inputs = [{ name: 'IN', datatype: 'INT32' as const, shape: [1], data: Int32Array.of(1) }];
      await client.infer({ model: 'm', inputs });
      await client.infer({ model: 'm', inputs, responseCompression: 'gzip' });
      await client.infer({ model: 'm', inputs, headers: { 'accept-encoding': 'deflate' } });
      for await (const _ of client.generateStream({ model: 'm', body: { text_input: 'x' } })) void _;
      assert.deepEqual(
        seen.map((r) => [r.url, r.headers['accept-encoding']]),
        [
          ['/v2', 'identity'],
          ['/v2/models/m/infer', 'identity'],
          ['/v2/models/m/infer', 'gzip'],
          ['/v2/models/m/infer', 'deflate'],
          ['/v2/models/m/generate_stream', 'identity'],
        ],
      );
    } finally {
      recorder.closeAllConnections();
      await new Promise((resolve) => recorder.close(resolve));
    }
  });
});
