import { test } from 'node:test';
import assert from 'node:assert/strict';
import { splitInferenceBody, BinaryDataReader, joinInferenceBody, INFERENCE_HEADER_CONTENT_LENGTH } from './binary-data.js';
import { NereidError, type ErrorCode } from './errors.js';

function fails(fn: () => unknown, code: ErrorCode, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, code);
    assert.equal(err.kind, 'INVALID_ARG');
    assert.match(err.message, pattern);
    return true;
  });
}

const header = '{"inputs":[]}';
const body = Buffer.concat([Buffer.from(header), Buffer.from([1, 2, 3, 4, 5, 6])]);

test('header name is the lower-case HTTP header', () => {
  assert.equal(INFERENCE_HEADER_CONTENT_LENGTH, 'inference-header-content-length');
});

test('without the header the whole body is JSON', () => {
  const parts = splitInferenceBody(body, undefined);
  assert.equal(parts.header, body);
  assert.equal(parts.binary.length, 0);
  assert.equal(parts.rawBinary, false);
});

test('the header length splits JSON from binary, as views', () => {
  const parts = splitInferenceBody(body, String(header.length));
  assert.equal(Buffer.from(parts.header).toString(), header);
  assert.deepStrictEqual([...parts.binary], [1, 2, 3, 4, 5, 6]);
  assert.equal(parts.binary.buffer, body.buffer);
  assert.equal(parts.rawBinary, false);
  const all = splitInferenceBody(body, String(body.length));
  assert.equal(all.header.length, body.length);
  assert.equal(all.binary.length, 0);
});

test('header length 0 selects the raw binary request', () => {
  const parts = splitInferenceBody(body, '0');
  assert.equal(parts.rawBinary, true);
  assert.equal(parts.header.length, 0);
  assert.equal(parts.binary, body);
  assert.equal(splitInferenceBody(Buffer.alloc(0), '0').rawBinary, true);
});

test('header length out of range or not a decimal integer is INVALID_ARG', () => {
  fails(() => splitInferenceBody(body, String(body.length + 1)), 'REQUEST_MALFORMED', /^inference header size should be in range \(0, 19\), got: 20; the body holds 19 bytes/);
  for (const bad of ['-1', 'abc', '', '12abc', '1.5', '+5', '0x10', '1e2', '99999999999999999999']) {
    fails(() => splitInferenceBody(body, bad), 'REQUEST_MALFORMED', /inference header size should be an integer in range \[0, 19\]/);
  }
  fails(() => splitInferenceBody(body, 'abc'), 'REQUEST_MALFORMED', /got: 'abc'$/);
  assert.equal(splitInferenceBody(body, ' 13 ').header.length, 13);
});

test('the reader hands out consecutive views and checks leftovers', () => {
  const data = Buffer.from([1, 2, 3, 4, 5, 6]);
  const r = new BinaryDataReader(data, 'simple');
  assert.deepStrictEqual([...r.next('A', 2)], [1, 2]);
  assert.equal(r.next('EMPTY', 0).length, 0);
  const b = r.next('B', 3n);
  assert.deepStrictEqual([...b], [3, 4, 5]);
  assert.equal(b.buffer, data.buffer);
  assert.equal(r.remaining, 1);
  fails(() => r.finish(), 'REQUEST_MALFORMED', /^unexpected additional input data for model 'simple': 1 bytes after the last binary input$/);
  assert.deepStrictEqual([...r.next('C', 1)], [6]);
  r.finish();
});

test('missing bytes are reported with Triton\'s wording', () => {
  const r = new BinaryDataReader(Buffer.from([1, 2, 3]), 'simple');
  r.next('A', 2);
  fails(() => r.next('INPUT1', 16), 'INPUT_BYTE_SIZE', /^unexpected size for input 'INPUT1', expecting 16 additional bytes for model 'simple', but only 1 remain/);
  fails(() => r.next('X', -1), 'INPUT_BYTE_SIZE', /non-negative integer/);
  fails(() => r.next('X', 1.5), 'INPUT_BYTE_SIZE', /non-negative integer/);
  fails(() => new BinaryDataReader(Buffer.alloc(0), 'm').next('X', 2n ** 64n), 'INPUT_BYTE_SIZE', /non-negative integer/);
  new BinaryDataReader(Buffer.alloc(0), 'm').finish();
});

test('response bodies: header then non-empty blobs, no copy', () => {
  const a = Buffer.from([1, 2, 3, 4]);
  const b = new Uint8Array(0);
  const c = new Uint8Array([9]);
  const json = '{"model_name":"é"}';
  const out = joinInferenceBody(json, [a, b, c]);
  assert.equal(out.headerLength, Buffer.byteLength(json));
  assert.equal(out.totalLength, Buffer.byteLength(json) + 5);
  assert.equal(out.chunks.length, 3);
  assert.equal(out.chunks[1], a);
  assert.equal(out.chunks[2], c);
  assert.equal(Buffer.from(out.chunks[0]).toString(), json);
  const pure = joinInferenceBody('{}', [b]);
  assert.equal(pure.chunks.length, 1);
  assert.equal(pure.totalLength, 2);
  // The response splits back the way a client splits it (§7.2 item 2).
  const whole = Buffer.concat(out.chunks);
  const parts = splitInferenceBody(whole, String(out.headerLength));
  assert.equal(Buffer.from(parts.header).toString(), json);
  assert.deepStrictEqual([...parts.binary], [1, 2, 3, 4, 9]);
});
