import test from 'node:test';
import assert from 'node:assert/strict';
import * as pb from './generated/grpc_service.js';
import { encodeModelInferResponse, encodeModelStreamInferResponse, whenEncoded } from './infer-response-encoder.js';

function response(overrides: Partial<pb.ModelInferResponse> = {}): pb.ModelInferResponse {
  return {
    model_name: 'simple',
    model_version: '1',
    id: 'req-7',
    parameters: {
      triton_final_response: { bool_param: true },
      big: { int64_param: -(2n ** 63n) },
      unsigned: { uint64_param: 2n ** 64n - 1n },
      text: { string_param: 'héllo ✓' },
      ratio: { double_param: -0.125 },
      '': { bool_param: false },
    },
    outputs: [
      { name: 'OUTPUT0', datatype: 'INT32', shape: [1n, 16n], parameters: {}, contents: undefined },
      { name: 'OUT_Ω', datatype: 'BYTES', shape: [3n, 300n, 2n ** 40n], parameters: { p: { int64_param: 1n } }, contents: undefined },
      { name: 'EMPTY', datatype: 'FP32', shape: [], parameters: {}, contents: undefined },
    ],
    raw_output_contents: [new Uint8Array(64).fill(7), new Uint8Array(200_000).map((_, i) => i & 0xff), new Uint8Array(0)],
    ...overrides,
  };
}

test('encodes exactly the bytes of the generated encoder', () => {
  for (const m of [
    response(),
    response({ id: '', model_version: '', parameters: {} }),
    response({ outputs: [], raw_output_contents: [] }),
    response({ model_name: 'x'.repeat(300) }),
  ]) {
    const want = Buffer.from(pb.ModelInferResponse.encode(m).finish());
    assert.deepEqual(encodeModelInferResponse(m), want);
  }
});

test('encodes stream responses, with and without an error, like the generated encoder', () => {
  for (const m of [
    { error_message: '', infer_response: response() },
    { error_message: "in ensemble 'e', bad input", infer_response: response({ outputs: [], raw_output_contents: [] }) },
    { error_message: 'only an error', infer_response: undefined },
  ]) {
    const want = Buffer.from(pb.ModelStreamInferResponse.encode(m).finish());
    assert.deepEqual(encodeModelStreamInferResponse(m), want);
    assert.deepEqual(pb.ModelStreamInferResponse.decode(encodeModelStreamInferResponse(m)).error_message, m.error_message);
  }
});

test('refuses typed output contents', () => {
  const m = response();
  m.outputs[0]!.contents = { bool_contents: [], int_contents: [1], int64_contents: [], uint_contents: [], uint64_contents: [], fp32_contents: [], fp64_contents: [], bytes_contents: [] };
  assert.throws(() => encodeModelInferResponse(m), /typed output contents/);
});

test('dimensions at the edges of the small-number path, and repeated names, encode like the generated encoder every time', () => {
  const dims = [0n, 127n, 128n, 16_383n, 16_384n, 2n ** 31n - 1n, 2n ** 31n, 2n ** 53n, -1n];
  const m = response({
    model_name: 'módel',
    parameters: { [`k${'e'.repeat(70)}`]: { int64_param: 2n ** 31n - 1n }, neg: { int64_param: -5n } },
    outputs: [
      { name: 'OUT_Ω', datatype: 'INT32', shape: dims, parameters: {}, contents: undefined },
      { name: 'x'.repeat(65), datatype: 'INT32', shape: [1n], parameters: {}, contents: undefined },
    ],
    raw_output_contents: [new Uint8Array(3), new Uint8Array(4)],
  });
  const want = Buffer.from(pb.ModelInferResponse.encode(m).finish());
  for (let i = 0; i < 3; i++) assert.deepEqual(encodeModelInferResponse(m), want);
  assert.deepEqual(pb.ModelInferResponse.decode(encodeModelInferResponse(m)).outputs[0]!.shape, dims);
});

test('whenEncoded runs once, right after the message was encoded, when its tensor bytes are copied', () => {
  const unary = response();
  const stream: pb.ModelStreamInferResponse = { error_message: '', infer_response: response() };
  const calls: string[] = [];
  whenEncoded(unary, () => {
    calls.push('unary');
    unary.raw_output_contents[0]!.fill(9); // the buffer is reused: the encoded message must not change
  });
  whenEncoded(stream, () => calls.push('stream'));
  const want = Buffer.from(pb.ModelInferResponse.encode(response()).finish());
  assert.deepEqual(calls, []);
  assert.deepEqual(encodeModelInferResponse(response()), want, 'another message with the same content runs nothing');
  assert.deepEqual(calls, []);
  const encoded = encodeModelInferResponse(unary);
  assert.deepEqual(calls, ['unary']);
  assert.deepEqual(encoded, want);
  encodeModelInferResponse(unary);
  assert.deepEqual(calls, ['unary'], 'once only');
  encodeModelStreamInferResponse(stream);
  assert.deepEqual(calls, ['unary', 'stream']);
});
