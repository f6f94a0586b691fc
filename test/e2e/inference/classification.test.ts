/**
 * The classification extension over HTTP (protocol.md §3.11): top-k strings for FP32 and INT32
 * outputs, batching and non-batching shapes, clamped k, label files, binary BYTES encoding, and
 * unsupported source datatypes.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { identityModel, simpleModel } from '@nereid/testkit';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { binaryBody, bytesOf, parseInferResponse, postInfer, readBytesElements, type ResponseHeader } from '../../helpers/http.js';

/** The identity config with `label_filename` on OUTPUT0. */
function withLabelFile(config: string, file: string): string {
  const out = config.replace(/(output \[\n  \{\n    name: "OUTPUT0"\n)/, `$1    label_filename: "${file}"\n`);
  assert.notEqual(out, config, 'label_filename was not inserted');
  return out;
}

let repo: string;
let srv: RunningServer;

before(async () => {
  const labelled = identityModel('FP32', [-1, -1], { name: 'labelled' });
  repo = await makeRepository({
    simple: modelFiles(simpleModel()),
    identity_fp32: modelFiles(identityModel('FP32', [-1, -1])),
    identity_fp64: modelFiles(identityModel('FP64', [-1, -1])),
    identity_int64: modelFiles(identityModel('INT64', [-1, -1])),
    identity_bool: modelFiles(identityModel('BOOL', [-1, -1])),
    identity_bytes: modelFiles(identityModel('BYTES', [-1, -1])),
    identity_fp32_nobatch: modelFiles(identityModel('FP32', [5], { name: 'identity_fp32_nobatch' })),
    labelled: modelFiles(labelled, {
      config: withLabelFile(labelled.config!, 'labels.txt'),
      extra: { 'labels.txt': 'cat\ndog\nbird\nfish\n' },
    }),
  });
  srv = await startServer({ modelRepositories: [repo] });
  assert.deepEqual(srv.server.startReport.failures, []);
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
});

async function classify(model: string, input: Record<string, unknown>, k: number, binary = false): Promise<{ header: ResponseHeader; strings: string[] }> {
  const res = await postInfer(srv.url, model, {
    inputs: [{ name: 'INPUT0', ...input }],
    outputs: [{ name: 'OUTPUT0', parameters: { classification: k, binary_data: binary } }],
  });
  assert.equal(res.status, 200, res.body.toString());
  const { header, blobs } = parseInferResponse(res.headers, res.body);
  assert.equal(header.outputs.length, 1);
  const out = header.outputs[0]!;
  assert.equal(out.datatype, 'BYTES');
  const strings = binary ? readBytesElements(blobs.get('OUTPUT0')!) : (out.data as string[]);
  return { header, strings };
}

describe('classification', () => {
  test('FP32, batching model: shape [batch, k] and "%f:index" strings per batch entry', async () => {
    const { header, strings } = await classify(
      'identity_fp32',
      { datatype: 'FP32', shape: [2, 4], data: [0.25, 0.75, 0.5, 0.125, -1.5, -0.5, 2, 1] },
      2,
    );
    assert.deepEqual(header.outputs[0]!.shape, [2, 2]);
    assert.deepEqual(strings, ['0.750000:1', '0.500000:2', '2.000000:2', '1.000000:3']);
  });

  test('INT32 output of simple: integers printed plainly', async () => {
    const a = Array.from({ length: 16 }, (_, i) => (i * 7) % 16);
    const b = Array.from({ length: 16 }, () => 100);
    const res = await postInfer(srv.url, 'simple', {
      inputs: [
        { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: a },
        { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: b },
      ],
      outputs: [{ name: 'OUTPUT0', parameters: { classification: 3 } }, { name: 'OUTPUT1', parameters: { classification: 1 } }],
    });
    assert.equal(res.status, 200, res.body.toString());
    const { header } = parseInferResponse(res.headers, res.body);
    // a = 0,7,14,5,12,3,10,1,8,15,6,13,4,11,2,9: largest at index 9 (15), 2 (14), 11 (13).
    assert.deepEqual(header.outputs, [
      { name: 'OUTPUT0', datatype: 'BYTES', shape: [1, 3], data: ['115:9', '114:2', '113:11'] },
      { name: 'OUTPUT1', datatype: 'BYTES', shape: [1, 1], data: ['-85:9'] },
    ]);
  });

  test('FP64 and INT64 outputs are classifiable', async () => {
    const fp64 = await classify('identity_fp64', { datatype: 'FP64', shape: [1, 3], data: [0.1, 0.3, 0.2] }, 1);
    assert.deepEqual(fp64.strings, ['0.300000:1']);
    const int64 = await classify('identity_int64', { datatype: 'INT64', shape: [1, 3], data: [5, -2, 9] }, 3);
    assert.deepEqual(int64.strings, ['9:2', '5:0', '-2:1']);
  });

  test('float values are printed exactly as C printf %f would: ties to even, no exponent, signed zero', async () => {
    // Triton formats with std::to_string (printf "%f"): the exact binary value rounded half to
    // even at six decimals. 0.0078125 = 2^-7 is a tie; fround(1e21) needs all its digits.
    const body = '{"inputs":[{"name":"INPUT0","datatype":"FP32","shape":[1,5],"data":[0.0078125,1e21,-0.0,0.5,0.0234375]}],' +
      '"outputs":[{"name":"OUTPUT0","parameters":{"classification":5}}]}';
    const res = await postInfer(srv.url, 'identity_fp32', body);
    assert.equal(res.status, 200, res.body.toString());
    assert.deepEqual(parseInferResponse(res.headers, res.body).header.outputs[0]!.data, [
      '1000000020040877342720.000000:1',
      '0.500000:3',
      '0.023438:4',
      '0.007812:0',
      '-0.000000:2',
    ]);
  });

  test('k larger than the class count is clamped', async () => {
    const { header, strings } = await classify('identity_fp32', { datatype: 'FP32', shape: [1, 3], data: [0.5, 1.5, -0.25] }, 100);
    assert.deepEqual(header.outputs[0]!.shape, [1, 3]);
    assert.deepEqual(strings, ['1.500000:1', '0.500000:0', '-0.250000:2']);
  });

  test('non-batching model: shape [k]', async () => {
    const { header, strings } = await classify('identity_fp32_nobatch', { datatype: 'FP32', shape: [5], data: [3, 1, 4, 1.5, 9] }, 2);
    assert.deepEqual(header.outputs[0]!.shape, [2]);
    assert.deepEqual(strings, ['9.000000:4', '4.000000:2']);
  });

  test('a label file in the model directory gives "value:index:label"', async () => {
    const { strings } = await classify('labelled', { datatype: 'FP32', shape: [1, 4], data: [0.1, 0.75, 0.05, 0.1] }, 2);
    assert.deepEqual(strings.slice(0, 1), ['0.750000:1:dog']);
    assert.equal(strings.length, 2);
    assert.match(strings[1]!, /^0\.100000:(0:cat|3:fish)$/);
  });

  test('binary_data: true sends the strings as a binary BYTES tensor', async () => {
    const { header, strings } = await classify('labelled', { datatype: 'FP32', shape: [1, 4], data: [0.1, 0.2, 0.9, 0.3] }, 3, true);
    const expected = ['0.900000:2:bird', '0.300000:3:fish', '0.200000:1:dog'];
    assert.deepEqual(strings, expected);
    const size = expected.reduce((n, s) => n + 4 + Buffer.byteLength(s), 0);
    assert.deepEqual(header.outputs[0], { name: 'OUTPUT0', datatype: 'BYTES', shape: [1, 3], parameters: { binary_data_size: size } });
  });

  test('binary input with a classified output', async () => {
    const values = Float32Array.from([0.5, 0.25, 1]);
    const { body, headerLength } = binaryBody(
      {
        inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 3], parameters: { binary_data_size: 12 } }],
        outputs: [{ name: 'OUTPUT0', parameters: { classification: 1, binary_data: false } }],
      },
      [bytesOf(values)],
    );
    const res = await postInfer(srv.url, 'identity_fp32', body, { 'Inference-Header-Content-Length': headerLength });
    assert.equal(res.status, 200, res.body.toString());
    assert.deepEqual(parseInferResponse(res.headers, res.body).header.outputs[0]!.data, ['1.000000:2']);
  });

  for (const [model, datatype, data] of [
    ['identity_bool', 'BOOL', [true, false]],
    ['identity_bytes', 'BYTES', ['a', 'b']],
  ] as const) {
    test(`a ${datatype} output cannot be classified: 400`, async () => {
      const res = await postInfer(srv.url, model, {
        inputs: [{ name: 'INPUT0', datatype, shape: [1, 2], data }],
        outputs: [{ name: 'OUTPUT0', parameters: { classification: 1 } }],
      });
      assert.equal(res.status, 400);
      assert.equal(res.headers['content-type'], 'application/json');
      const { error } = JSON.parse(res.body.toString()) as { error: string };
      assert.match(error, new RegExp(`class result not available for output 'OUTPUT0'.*unsupported type '${datatype}'`));
    });
  }
});
