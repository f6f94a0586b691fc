/**
 * HTTP inference with JSON tensor data (protocol.md §3.7): the `simple` model, request ids,
 * version paths, output selection, every datatype ONNX Runtime serves through identity models,
 * exact 64-bit integers, FP32 widening, nested `data`, and FP16 (binary only).
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { identityModel, simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type ModelFiles, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { bytesOf, parseInferResponse, postInfer, type ResponseHeader } from '../../helpers/http.js';

const IDENTITY_TYPES = ['BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BYTES'] as const;

const range = (n: number, f: (i: number) => number = (i) => i): number[] => Array.from({ length: n }, (_, i) => f(i));

let repo: string;
let srv: RunningServer;

before(async () => {
  const models: Record<string, ModelFiles> = { simple: modelFiles(simpleModel()) };
  // Identity models with a variable item dimension ([-1, -1]: batch 8, dims [-1]).
  for (const t of IDENTITY_TYPES) {
    const m = identityModel(t, [-1, -1]);
    models[m.name] = modelFiles(m);
  }
  repo = await makeRepository(models);
  srv = await startServer({ modelRepositories: [repo] });
  assert.deepEqual(srv.server.startReport.failures, []);
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

/** POSTs a JSON infer request and checks the pure-JSON response framing. */
async function inferJson(model: string, body: unknown, version?: string): Promise<{ header: ResponseHeader; text: string }> {
  const res = await postInfer(srv.url, model, body, {}, version);
  assert.equal(res.status, 200, res.body.toString());
  assert.equal(res.headers['content-type'], 'application/json');
  assert.equal(res.headers['inference-header-content-length'], undefined);
  const { header, text } = parseInferResponse(res.headers, res.body);
  return { header, text };
}

function simpleInputs(a: number[], b: number[], batch = 1): unknown[] {
  return [
    { name: 'INPUT0', datatype: 'INT32', shape: [batch, 16], data: a },
    { name: 'INPUT1', datatype: 'INT32', shape: [batch, 16], data: b },
  ];
}

describe('simple model over JSON', () => {
  const a = range(16);
  const b = range(16, () => 1);

  test('returns sums and differences with name, version, shapes and no binary framing', async () => {
    const { header, text } = await inferJson('simple', { inputs: simpleInputs(a, b) });
    assert.equal(header.model_name, 'simple');
    assert.equal(header.model_version, '1');
    assert.deepEqual(header.outputs, [
      { name: 'OUTPUT0', datatype: 'INT32', shape: [1, 16], data: range(16, (i) => i + 1) },
      { name: 'OUTPUT1', datatype: 'INT32', shape: [1, 16], data: range(16, (i) => i - 1) },
    ]);
    assert.ok(!text.includes('"id"'), 'no id in the response when the request had none');
    assert.ok(!text.includes('"parameters"'), 'JSON outputs never carry parameters');
    // Keys of each output in protocol order: name, datatype, shape, data.
    assert.match(text, /\{"name":"OUTPUT0","datatype":"INT32","shape":\[1,16\],"data":\[/);
  });

  test('echoes a request id, and omits an empty one', async () => {
    const withId = await inferJson('simple', { id: 'req-42 ✓', inputs: simpleInputs(a, b) });
    assert.equal(withId.header.id, 'req-42 ✓');
    const empty = await inferJson('simple', { id: '', inputs: simpleInputs(a, b) });
    assert.ok(!('id' in empty.header));
  });

  test('serves an explicit version path', async () => {
    const { header } = await inferJson('simple', { inputs: simpleInputs(a, b) }, '1');
    assert.equal(header.model_version, '1');
    assert.deepEqual(header.outputs[0]!.data, range(16, (i) => i + 1));
  });

  test('returns only the requested outputs, in the requested order', async () => {
    const one = await inferJson('simple', { inputs: simpleInputs(a, b), outputs: [{ name: 'OUTPUT1' }] });
    assert.deepEqual(one.header.outputs.map((o) => o.name), ['OUTPUT1']);
    assert.deepEqual(one.header.outputs[0]!.data, range(16, (i) => i - 1));

    const both = await inferJson('simple', { inputs: simpleInputs(a, b), outputs: [{ name: 'OUTPUT1' }, { name: 'OUTPUT0' }] });
    assert.deepEqual(both.header.outputs.map((o) => o.name), ['OUTPUT1', 'OUTPUT0']);
    assert.deepEqual(both.header.outputs[1]!.data, range(16, (i) => i + 1));
  });

  test('binary_data_output defaults to false; listed outputs default to JSON', async () => {
    const explicitFalse = await inferJson('simple', { parameters: { binary_data_output: false }, inputs: simpleInputs(a, b) });
    assert.ok(explicitFalse.header.outputs.every((o) => Array.isArray(o.data) && o.parameters === undefined));
    const listed = await inferJson('simple', { inputs: simpleInputs(a, b), outputs: [{ name: 'OUTPUT0' }, { name: 'OUTPUT1', parameters: { binary_data: false } }] });
    assert.ok(listed.header.outputs.every((o) => Array.isArray(o.data) && o.parameters === undefined));
  });

  test('accepts nested data arrays and always answers flat data', async () => {
    const nested = [range(8), range(8, (i) => i + 8)];
    const { header } = await inferJson('simple', {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: [nested] },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: [[b]] },
      ],
    });
    assert.deepEqual(header.outputs[0]!.data, range(16, (i) => i + 1));
    assert.deepEqual(header.outputs[0]!.shape, [1, 16]);
  });

  test('a batch of 3 returns [3,16] outputs with the right rows', async () => {
    const rows0 = [range(16), range(16, (i) => 100 + i), range(16, (i) => 0 - i)];
    const rows1 = [range(16, () => 1), range(16, () => 2), range(16, (i) => 2 * i)];
    const { header } = await inferJson('simple', {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [3, 16], data: rows0 },
        { name: 'INPUT1', datatype: 'INT32', shape: [3, 16], data: rows1 },
      ],
    });
    assert.deepEqual(header.outputs[0]!.shape, [3, 16]);
    assert.deepEqual(header.outputs[1]!.shape, [3, 16]);
    const sums = rows0.flatMap((r, k) => r.map((v, i) => v + rows1[k]![i]!));
    const diffs = rows0.flatMap((r, k) => r.map((v, i) => v - rows1[k]![i]!));
    assert.deepEqual(header.outputs[0]!.data, sums);
    assert.deepEqual(header.outputs[1]!.data, diffs);
  });

  test('a batch larger than max_batch_size (8) is refused with 400', async () => {
    const res = await postInfer(srv.url, 'simple', { inputs: simpleInputs(range(9 * 16), range(9 * 16), 9) });
    assert.equal(res.status, 400);
    assert.equal(res.headers['content-type'], 'application/json');
    const { error } = JSON.parse(res.body.toString()) as { error: string };
    assert.match(error, /batch-size must be <= 8/);
    assert.match(error, /simple/);
  });
});

describe('every datatype through identity models, JSON both ways', () => {
  const cases: { type: string; data: unknown[]; expect?: unknown[] }[] = [
    { type: 'BOOL', data: [true, false, false, true] },
    { type: 'UINT8', data: [0, 1, 128, 255] },
    { type: 'INT8', data: [-128, -1, 0, 127] },
    { type: 'UINT16', data: [0, 1, 40000, 65535] },
    { type: 'INT16', data: [-32768, -1, 0, 32767] },
    { type: 'UINT32', data: [0, 1, 3000000000, 4294967295] },
    { type: 'INT32', data: [-2147483648, -1, 0, 2147483647] },
    { type: 'FP64', data: [0.1, -2.5, 1e300, 5e-324] },
    { type: 'BYTES', data: ['hello', '', 'grüße ✓', '日本語 🙂'] },
  ];
  for (const c of cases) {
    test(c.type, async () => {
      const name = `identity_${c.type.toLowerCase()}`;
      const { header } = await inferJson(name, { inputs: [{ name: 'INPUT0', datatype: c.type, shape: [1, c.data.length], data: c.data }] });
      assert.deepEqual(header.outputs, [{ name: 'OUTPUT0', datatype: c.type, shape: [1, c.data.length], data: c.expect ?? c.data }]);
    });
  }

  test('FP32 is written as the double each float widens to', async () => {
    const { header, text } = await inferJson('identity_fp32', { inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [0.1, 1.5, -2.25, 3] }] });
    assert.match(text, /"data":\[0\.10000000149011612,1\.5,-2\.25,3\]/);
    assert.deepEqual(header.outputs[0]!.data, [Math.fround(0.1), 1.5, -2.25, 3]);
  });

  test('integer values are truncated to the element width', async () => {
    const { header } = await inferJson('identity_uint8', { inputs: [{ name: 'INPUT0', datatype: 'UINT8', shape: [1, 2], data: [256, 257] }] });
    assert.deepEqual(header.outputs[0]!.data, [0, 1]);
  });

  test('a zero-element tensor round-trips as an empty data array', async () => {
    const { header } = await inferJson('identity_int32', { inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, 0], data: [] }] });
    assert.deepEqual(header.outputs, [{ name: 'OUTPUT0', datatype: 'INT32', shape: [1, 0], data: [] }]);
  });
});

describe('exact 64-bit integers in JSON', () => {
  // Written as text: JSON.stringify cannot write these exactly, and JSON.parse would round them.
  const INT64 = ['-9223372036854775808', '9223372036854775807', '0', '-1', '9007199254740993', '-9007199254740993'];
  const UINT64 = ['0', '18446744073709551615', '9223372036854775808', '9007199254740993'];

  for (const [type, values] of [['INT64', INT64], ['UINT64', UINT64]] as const) {
    test(`${type} extremes round-trip JSON → JSON exactly`, async () => {
      const body = `{"inputs":[{"name":"INPUT0","datatype":"${type}","shape":[1,${values.length}],"data":[${values.join(',')}]}]}`;
      const { text } = await inferJson(`identity_${type.toLowerCase()}`, body);
      assert.ok(text.includes(`"data":[${values.join(',')}]`), text);
    });

    test(`${type} extremes go JSON → binary and binary → JSON exactly`, async () => {
      const model = `identity_${type.toLowerCase()}`;
      const expected = values.map((v) => BigInt(v));
      const typed = type === 'INT64' ? BigInt64Array.from(expected) : BigUint64Array.from(expected);

      const toBinary = `{"inputs":[{"name":"INPUT0","datatype":"${type}","shape":[1,${values.length}],"data":[${values.join(',')}]}],` +
        `"outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}}]}`;
      const res = await postInfer(srv.url, model, toBinary);
      assert.equal(res.status, 200, res.body.toString());
      const { blobs } = parseInferResponse(res.headers, res.body);
      assert.deepEqual(blobs.get('OUTPUT0'), bytesOf(typed));

      const json = Buffer.from(JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: type, shape: [1, values.length], parameters: { binary_data_size: typed.byteLength } }] }));
      const back = await postInfer(srv.url, model, Buffer.concat([json, bytesOf(typed)]), { 'Inference-Header-Content-Length': json.byteLength });
      assert.equal(back.status, 200, back.body.toString());
      assert.ok(back.body.toString().includes(`"data":[${values.join(',')}]`), back.body.toString());
    });
  }
});

describe('FP16', () => {
  test('JSON input data is refused with 400 asking for binary data', async () => {
    const res = await postInfer(srv.url, 'identity_fp16', { inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1, 2], data: [1, 2] }] });
    assert.equal(res.status, 400);
    assert.equal(res.headers['content-type'], 'application/json');
    const { error } = JSON.parse(res.body.toString()) as { error: string };
    assert.match(error, /FP16/);
    assert.match(error, /binary/);
  });

  test('works in binary both ways', async () => {
    const halfs = new Uint16Array([0x3c00, 0xc000, 0x7bff, 0x0001, 0x8000]); // 1, -2, 65504, smallest subnormal, -0
    const json = Buffer.from(JSON.stringify({
      inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1, 5], parameters: { binary_data_size: 10 } }],
      outputs: [{ name: 'OUTPUT0', parameters: { binary_data: true } }],
    }));
    const res = await postInfer(srv.url, 'identity_fp16', Buffer.concat([json, bytesOf(halfs)]), { 'Inference-Header-Content-Length': json.byteLength });
    assert.equal(res.status, 200, res.body.toString());
    assert.equal(res.headers['content-type'], 'application/octet-stream');
    const { header, blobs } = parseInferResponse(res.headers, res.body);
    assert.deepEqual(header.outputs, [{ name: 'OUTPUT0', datatype: 'FP16', shape: [1, 5], parameters: { binary_data_size: 10 } }]);
    assert.deepEqual(blobs.get('OUTPUT0'), bytesOf(halfs));
  });

  test('an FP16 output asked for as JSON is refused with 400', async () => {
    const json = Buffer.from(JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP16', shape: [1, 1], parameters: { binary_data_size: 2 } }] }));
    const res = await postInfer(srv.url, 'identity_fp16', Buffer.concat([json, Buffer.from([0, 0x3c])]), { 'Inference-Header-Content-Length': json.byteLength });
    assert.equal(res.status, 400);
    assert.match((JSON.parse(res.body.toString()) as { error: string }).error, /binary/);
  });
});
