/**
 * Bad inference requests over HTTP (protocol.md §2.1, §3.1, §3.7.3, §3.8, §3.10, §3.12, §3.17.3):
 * each gets its exact status and a JSON `{"error": ...}` body naming what is wrong, and the
 * server answers a good request right after each of them.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { simpleModel, simpleStringModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { binaryBody, bytesElements, bytesOf, nodeRequest, postInfer, rawExchange, type HttpResult } from '../../helpers/http.js';

const range = (n: number, f: (i: number) => number = (i) => i): number[] => Array.from({ length: n }, (_, i) => f(i));

let repo: string;
let srv: RunningServer;

before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()), simple_string: modelFiles(simpleStringModel()) });
  srv = await startServer({ modelRepositories: [repo] });
  assert.deepEqual(srv.server.startReport.failures, []);
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

const A = range(16, (i) => i);
const B = range(16, (i) => 2 * i);

const input0 = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: A, ...extra });
const input1 = (extra: Record<string, unknown> = {}): Record<string, unknown> => ({ name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: B, ...extra });

/** Checks the error framing and returns the message. */
function errorOf(res: HttpResult, status: number): string {
  assert.equal(res.status, status, `expected ${status}, got ${res.status}: ${res.body.toString()}`);
  assert.equal(res.headers['content-type'], 'application/json');
  assert.equal(Number(res.headers['content-length']), res.body.byteLength);
  const body = JSON.parse(res.body.toString()) as Record<string, unknown>;
  assert.deepEqual(Object.keys(body), ['error']);
  assert.equal(typeof body.error, 'string');
  return body.error as string;
}

/** A good request must still work. */
async function assertGood(): Promise<void> {
  const res = await postInfer(srv.url, 'simple', { inputs: [input0(), input1()] });
  assert.equal(res.status, 200, res.body.toString());
  const out = JSON.parse(res.body.toString()) as { outputs: { data: number[] }[] };
  assert.deepEqual(out.outputs[0]!.data, A.map((v, i) => v + B[i]!));
}

interface BadCase {
  what: string;
  send: () => Promise<HttpResult>;
  status: number;
  /** The exact message, or a pattern it must match. */
  message: string | RegExp;
}

function binary(header: unknown, blobs: Uint8Array[], headers: Record<string, string | number> = {}, model = 'simple'): () => Promise<HttpResult> {
  const { body, headerLength } = binaryBody(header, blobs);
  return () => postInfer(srv.url, model, body, { 'Inference-Header-Content-Length': headerLength, ...headers });
}

const bin16 = bytesOf(Int32Array.from(A));

const CASES: BadCase[] = [
  {
    what: 'unknown model',
    send: () => postInfer(srv.url, 'x', { inputs: [input0(), input1()] }),
    status: 404,
    message: "Request for unknown model: 'x' is not found",
  },
  {
    what: 'unknown version',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0(), input1()] }, {}, '7'),
    status: 404,
    message: "Request for unknown model: 'simple' version 7 is not found",
  },
  {
    what: 'non-numeric version in the path',
    send: () => nodeRequest(srv.url, '/v2/models/simple/versions/one/infer', { body: JSON.stringify({ inputs: [input0(), input1()] }) }),
    status: 404,
    message: 'Not Found',
  },
  {
    what: 'malformed JSON',
    send: () => postInfer(srv.url, 'simple', '{"inputs": [{"name": "INPUT0",'),
    status: 400,
    message: /failed to parse/,
  },
  {
    what: 'JSON that is not an object',
    send: () => postInfer(srv.url, 'simple', '[1, 2, 3]'),
    status: 400,
    message: /must be a JSON object, got an array/,
  },
  {
    what: 'missing inputs',
    send: () => postInfer(srv.url, 'simple', { outputs: [{ name: 'OUTPUT0' }] }),
    status: 400,
    message: /has no 'inputs' array/,
  },
  {
    what: 'empty body',
    send: () => postInfer(srv.url, 'simple', ''),
    status: 400,
    message: /failed to parse/,
  },
  {
    what: 'inputs not an array',
    send: () => postInfer(srv.url, 'simple', { inputs: { name: 'INPUT0' } }),
    status: 400,
    message: /'inputs' .* must be an array/,
  },
  {
    what: 'datatype that does not match the model',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ datatype: 'FP32' }), input1()] }),
    status: 400,
    message: "inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'",
  },
  {
    what: 'unknown datatype string',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ datatype: 'INT33' }), input1()] }),
    status: 400,
    message: /input 'INPUT0'.*unknown datatype 'INT33'/,
  },
  {
    what: 'datatype in the wrong case',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0(), input1({ datatype: 'int32' })] }),
    status: 400,
    message: /input 'INPUT1'.*unknown datatype 'int32'/,
  },
  {
    what: 'wrong shape',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ shape: [1, 15], data: A.slice(1) }), input1()] }),
    status: 400,
    message: /unexpected shape for input 'INPUT0' for model 'simple'\. Expected \[-1,16\], got \[1,15\]/,
  },
  {
    what: 'shape without a batch dimension',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ shape: [2], data: [1, 2] }), input1({ shape: [2], data: [3, 4] })] }),
    status: 400,
    message: /Expected \[-1,16\], got \[2\]\. NOTE: Setting a non-zero max_batch_size/,
  },
  {
    what: 'negative dimension',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ shape: [-1, 16] }), input1()] }),
    status: 400,
    message: /input 'INPUT0'.*shape dimension -1/,
  },
  {
    what: 'inputs with different batch sizes',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0(), input1({ shape: [2, 16], data: [...B, ...B] })] }),
    status: 400,
    message: /batch size 2 does not match/,
  },
  {
    what: 'batch larger than max_batch_size',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ shape: [9, 16], data: range(144) }), input1({ shape: [9, 16], data: range(144) })] }),
    status: 400,
    message: "inference request batch-size must be <= 8 for 'simple', got 9",
  },
  {
    what: 'wrong element count in data',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ data: A.slice(1) }), input1()] }),
    status: 500,
    message: /^Unable to parse 'data': Shape does not match true shape of 'data' field: the shape of input 'INPUT0' of model 'simple' has 16 elements but 'data' holds 15$/,
  },
  {
    what: 'JSON element of the wrong type',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ data: [...A.slice(1), 'seven'] }), input1()] }),
    status: 500,
    message: /^Unable to parse 'data'.*INPUT0/,
  },
  {
    what: 'data that is not an array',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ data: 3 }), input1()] }),
    status: 500,
    message: /^Unable to parse 'data'/,
  },
  {
    what: 'missing input',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0()] }),
    status: 400,
    message: /expected 2 inputs but got 1 inputs for model 'simple'.*missing required input\(s\) \['INPUT1'\]/,
  },
  {
    what: 'unknown input name',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0(), input1({ name: 'INPUT7' })] }),
    status: 400,
    message: /^unexpected inference input 'INPUT7' for model 'simple'/,
  },
  {
    // Triton counts the inputs before it looks at their names.
    what: 'more inputs than the model has, one of them unknown',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0(), input1(), input0({ name: 'INPUT7' })] }),
    status: 400,
    message: /^expected 2 inputs but got 3 inputs for model 'simple'\. Got input\(s\) \['INPUT0', 'INPUT1', 'INPUT7'\]/,
  },
  {
    // Triton 2.51 refuses a batch of 0 with its byte-size check.
    what: 'a batch dimension of 0',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0({ shape: [0, 16], data: [] }), input1({ shape: [0, 16], data: [] })] }),
    status: 400,
    message: "input byte size mismatch for input 'INPUT0' for model 'simple': inference request batch-size must be >= 1, got a batch dimension of 0",
  },
  {
    what: 'duplicate input',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0(), input1(), input0()] }),
    status: 400,
    message: /input 'INPUT0' is given more than once/,
  },
  {
    what: 'unknown output name',
    send: () => postInfer(srv.url, 'simple', { inputs: [input0(), input1()], outputs: [{ name: 'OUTPUT0' }, { name: 'OUTPUT9' }] }),
    status: 400,
    message: /unexpected inference output 'OUTPUT9' for model 'simple'/,
  },
  {
    what: "both 'data' and 'binary_data_size'",
    send: binary({ inputs: [input0({ parameters: { binary_data_size: 64 } }), input1()] }, [bin16]),
    status: 400,
    message: /Input 'INPUT0' for model 'simple' must set only one of the following fields.*set more than one/,
  },
  {
    what: "neither 'data' nor 'binary_data_size'",
    send: () => postInfer(srv.url, 'simple', { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16] }, input1()] }),
    status: 400,
    message: /Input 'INPUT0' for model 'simple' must set only one of the following fields.*set none of them/,
  },
  {
    what: 'fewer binary bytes than declared',
    send: binary({ inputs: [input0({ data: undefined, parameters: { binary_data_size: 64 } }), input1()] }, [bin16.subarray(0, 60)]),
    status: 400,
    message: /unexpected size for input 'INPUT0', expecting 64 additional bytes for model 'simple'/,
  },
  {
    what: 'more binary bytes than declared',
    send: binary({ inputs: [input0({ data: undefined, parameters: { binary_data_size: 64 } }), input1()] }, [bin16, Buffer.from([1, 2, 3])]),
    status: 400,
    message: /unexpected additional input data for model 'simple'/,
  },
  {
    what: 'binary_data_size that matches the body but not the shape',
    send: binary({ inputs: [input0({ data: undefined, parameters: { binary_data_size: 60 } }), input1()] }, [bin16.subarray(0, 60)]),
    status: 400,
    message: /input byte size mismatch for input 'INPUT0' for model 'simple'\. Expected 64, got 60/,
  },
  {
    what: 'binary data without Inference-Header-Content-Length',
    send: () => postInfer(srv.url, 'simple', binaryBody({ inputs: [input0({ data: undefined, parameters: { binary_data_size: 64 } }), input1()] }, [bin16]).body),
    status: 400,
    message: /failed to parse/,
  },
  {
    what: 'Inference-Header-Content-Length larger than the body',
    send: () => postInfer(srv.url, 'simple', JSON.stringify({ inputs: [input0(), input1()] }), { 'Inference-Header-Content-Length': 100_000 }),
    status: 400,
    message: /^inference header size should be in range \(0, \d+\), got: 100000; /,
  },
  {
    what: 'non-numeric Inference-Header-Content-Length',
    send: () => postInfer(srv.url, 'simple', JSON.stringify({ inputs: [input0(), input1()] }), { 'Inference-Header-Content-Length': 'twelve' }),
    status: 400,
    message: /inference header size should be an integer.*'twelve'/,
  },
  {
    what: 'negative Inference-Header-Content-Length',
    send: () => postInfer(srv.url, 'simple', JSON.stringify({ inputs: [input0(), input1()] }), { 'Inference-Header-Content-Length': '-5' }),
    status: 400,
    message: /inference header size should be an integer/,
  },
  {
    what: 'a header length that cuts the JSON short',
    send: () => postInfer(srv.url, 'simple', JSON.stringify({ inputs: [input0(), input1()] }), { 'Inference-Header-Content-Length': 20 }),
    status: 400,
    message: /failed to parse/,
  },
  {
    what: 'a bad gzip stream',
    send: () => postInfer(srv.url, 'simple', Buffer.from('this is not gzip at all'), { 'Content-Encoding': 'gzip' }),
    status: 400,
    message: /failed to decompress the 'gzip' request body/,
  },
  {
    what: 'a bad deflate stream',
    send: () => postInfer(srv.url, 'simple', Buffer.from([0x78, 0x9c, 1, 2, 3, 4, 5]), { 'Content-Encoding': 'deflate' }),
    status: 400,
    message: /failed to decompress the 'deflate' request body/,
  },
  {
    what: 'an unsupported Content-Encoding',
    send: () => postInfer(srv.url, 'simple', JSON.stringify({ inputs: [input0(), input1()] }), { 'Content-Encoding': 'compress' }),
    status: 501,
    message: 'Unsupported compression type',
  },
  {
    what: 'BYTES elements whose length prefix overruns the data',
    send: () => {
      const good = bytesElements(A.map(String));
      const bad = Buffer.concat([bytesElements(A.slice(0, 15).map(String)), Buffer.from([100, 0, 0, 0, 0x31])]);
      return binary(
        {
          inputs: [
            { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], parameters: { binary_data_size: bad.byteLength } },
            { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], parameters: { binary_data_size: good.byteLength } },
          ],
        },
        [bad, good],
        {},
        'simple_string',
      )();
    },
    status: 400,
    message: /input 'INPUT0' of model 'simple_string': BYTES element 15 at offset \d+ declares 100 bytes, but only 1 remain/,
  },
  {
    what: 'BYTES with a truncated length prefix',
    send: () => {
      const bad = Buffer.concat([bytesElements(A.slice(0, 15).map(String)), Buffer.from([1, 0])]);
      return binary(
        {
          inputs: [
            { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], parameters: { binary_data_size: bad.byteLength } },
            { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: B.map(String) },
          ],
        },
        [bad],
        {},
        'simple_string',
      )();
    },
    status: 400,
    message: /BYTES element 15 .* truncated length prefix/,
  },
  {
    what: 'BYTES with fewer elements than the shape',
    send: () =>
      binary(
        {
          inputs: [
            { name: 'INPUT0', datatype: 'BYTES', shape: [1, 16], parameters: { binary_data_size: bytesElements(A.slice(1).map(String)).byteLength } },
            { name: 'INPUT1', datatype: 'BYTES', shape: [1, 16], data: B.map(String) },
          ],
        },
        [bytesElements(A.slice(1).map(String))],
        {},
        'simple_string',
      )(),
    status: 400,
    message: /input 'INPUT0' of model 'simple_string' holds 15 BYTES elements but its shape \[1,16\] needs 16/,
  },
  {
    what: "a 'triton_' request parameter",
    send: () => postInfer(srv.url, 'simple', { parameters: { triton_enable_empty_final_response: true }, inputs: [input0(), input1()] }),
    status: 400,
    message: /parameter keys starting with 'triton_' are reserved.*'triton_enable_empty_final_response'/,
  },
  {
    what: 'an object-valued custom parameter',
    send: () => postInfer(srv.url, 'simple', { parameters: { custom: { a: 1 } }, inputs: [input0(), input1()] }),
    status: 400,
    message: /parameter 'custom'.*should be either 'int', 'double', 'bool', or 'string'/,
  },
  {
    what: 'a null custom parameter',
    send: () => postInfer(srv.url, 'simple', { parameters: { custom: null }, inputs: [input0(), input1()] }),
    status: 400,
    message: /parameter 'custom'.*should be either/,
  },
  {
    what: "'parameters' that is not an object",
    send: () => postInfer(srv.url, 'simple', { parameters: [1], inputs: [input0(), input1()] }),
    status: 400,
    message: /'parameters' of the request .*should be a JSON object/,
  },
  {
    what: "'priority' of the wrong type",
    send: () => postInfer(srv.url, 'simple', { parameters: { priority: 'high' }, inputs: [input0(), input1()] }),
    status: 400,
    message: /parameter 'priority'.*expected an unsigned integer, got "high"/,
  },
  {
    what: "negative 'priority'",
    send: () => postInfer(srv.url, 'simple', { parameters: { priority: -1 }, inputs: [input0(), input1()] }),
    status: 400,
    message: /parameter 'priority'.*expected an unsigned integer/,
  },
  {
    what: "'timeout' of the wrong type",
    send: () => postInfer(srv.url, 'simple', { parameters: { timeout: 1.5 }, inputs: [input0(), input1()] }),
    status: 400,
    message: /parameter 'timeout'/,
  },
  {
    what: "'binary_data_output' that is not a bool",
    send: () => postInfer(srv.url, 'simple', { parameters: { binary_data_output: 1 }, inputs: [input0(), input1()] }),
    status: 400,
    message: /'binary_data_output'.*must be a bool/,
  },
  {
    what: "'binary_data' that is not a bool",
    send: () => postInfer(srv.url, 'simple', { inputs: [input0(), input1()], outputs: [{ name: 'OUTPUT0', parameters: { binary_data: 'yes' } }] }),
    status: 400,
    message: /'binary_data' of output 'OUTPUT0'.*must be a bool/,
  },
  {
    what: "'id' that is not a string",
    send: () => postInfer(srv.url, 'simple', { id: 42, inputs: [input0(), input1()] }),
    status: 400,
    message: /'id' .*must be a string/,
  },
  {
    what: 'a shared-memory input region that is not registered',
    send: () =>
      postInfer(srv.url, 'simple', {
        inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 16], parameters: { shared_memory_region: 'input_region', shared_memory_byte_size: 64 } }, input1()],
      }),
    status: 404,
    message: "Unable to find shared memory region: 'input_region'",
  },
  {
    what: 'a shared-memory output region that is not registered',
    send: () =>
      postInfer(srv.url, 'simple', {
        inputs: [input0(), input1()],
        outputs: [{ name: 'OUTPUT0', parameters: { shared_memory_region: 'output_region', shared_memory_byte_size: 64 } }],
      }),
    status: 404,
    message: "Unable to find shared memory region: 'output_region'",
  },
  {
    what: 'wrong method on the infer path',
    send: () => nodeRequest(srv.url, '/v2/models/simple/infer'),
    status: 405,
    message: 'Method Not Allowed',
  },
  {
    what: 'wrong method on a GET path',
    send: () => nodeRequest(srv.url, '/v2/health/live', { method: 'POST', body: '{}' }),
    status: 405,
    message: 'Method Not Allowed',
  },
  {
    what: 'unknown path',
    send: () => nodeRequest(srv.url, '/v2/nothing/here', { body: '{}' }),
    status: 404,
    message: 'Not Found',
  },
  {
    what: 'trailing slash',
    send: () => nodeRequest(srv.url, '/v2/models/simple/infer/', { body: JSON.stringify({ inputs: [input0(), input1()] }) }),
    status: 404,
    message: 'Not Found',
  },
  {
    what: 'path outside /v2',
    send: () => nodeRequest(srv.url, '/v1/models/simple/infer', { body: '{}' }),
    status: 404,
    message: 'Not Found',
  },
];

describe('an output requested twice', () => {
  test('is answered once, as Triton answers it', async () => {
    const res = await postInfer(srv.url, 'simple', { inputs: [input0(), input1()], outputs: [{ name: 'OUTPUT1' }, { name: 'OUTPUT1' }] });
    assert.equal(res.status, 200, res.body.toString());
    const out = JSON.parse(res.body.toString()) as { outputs: { name: string; data: number[] }[] };
    assert.deepEqual(out.outputs.map((o) => o.name), ['OUTPUT1']);
    assert.deepEqual(out.outputs[0]!.data, A.map((v, i) => v - B[i]!));
  });
});

describe('bad inference requests', () => {
  test('each bad request in turn, with a good request after each', async () => {
    for (const c of CASES) {
      const res = await c.send();
      const message = errorOf(res, c.status);
      if (typeof c.message === 'string') assert.equal(message, c.message, c.what);
      else assert.match(message, c.message, c.what);
      await assertGood();
    }
  });

  test('the same bad requests all at once, then a good one', async () => {
    const results = await Promise.all(CASES.map((c) => c.send()));
    results.forEach((res, i) => assert.equal(res.status, CASES[i]!.status, CASES[i]!.what));
    await assertGood();
  });

  test('errors keep the connection usable: pipelined bad requests with bodies, then a good one', async () => {
    const good = JSON.stringify({ inputs: [input0(), input1()] });
    const post = (path: string, body: string, extra = '') =>
      `POST ${path} HTTP/1.1\r\nHost: localhost\r\nContent-Length: ${Buffer.byteLength(body)}\r\n${extra}\r\n${body}`;
    const wire =
      post('/v2/models/simple/infer', '{"inputs": [') +
      post('/v2/models/nope/infer', good) +
      post('/v2/models/simple/infer', good, 'Content-Encoding: br\r\n') +
      post('/v2/no/such/path', good) +
      post('/v2/health/live', good) +
      post('/v2/models/simple/infer', good, 'Inference-Header-Content-Length: 5000\r\n') +
      post('/v2/models/simple/infer', good, 'Connection: close\r\n');
    const reply = await rawExchange(srv.port, wire);
    const statuses = [...reply.matchAll(/HTTP\/1\.1 (\d{3}) /g)].map((m) => m[1]);
    assert.deepEqual(statuses, ['400', '404', '501', '404', '405', '400', '200'], reply);
    assert.match(reply, /"data":\[0,3,6,9,/);
  });

  test('405 and 404 bodies are exact', async () => {
    const r405 = await nodeRequest(srv.url, '/v2/models/simple/infer', { method: 'PUT', body: '{}' });
    assert.equal(r405.status, 405);
    assert.equal(r405.body.toString(), '{"error":"Method Not Allowed"}');
    const r404 = await nodeRequest(srv.url, '/v2/models/simple/infer/extra', { body: '{}' });
    assert.equal(r404.status, 404);
    assert.equal(r404.body.toString(), '{"error":"Not Found"}');
  });

  test('an unsupported request coding answers Accept-Encoding: gzip, deflate', async () => {
    const res = await postInfer(srv.url, 'simple', '{}', { 'Content-Encoding': 'br' });
    assert.equal(errorOf(res, 501), 'Unsupported compression type');
    assert.equal(res.headers['accept-encoding'], 'gzip, deflate');
  });

  test('a raw binary request to a two-input model names the problem', async () => {
    const res = await postInfer(srv.url, 'simple', Buffer.alloc(128), { 'Inference-Header-Content-Length': 0 });
    assert.match(errorOf(res, 400), /raw binary request .* needs a model with exactly one input; model 'simple' has 2/);
    await assertGood();
  });
});
