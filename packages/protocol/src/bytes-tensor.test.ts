import { test } from 'node:test';
import assert from 'node:assert/strict';
import { encodeBytesElements, decodeBytesElements, countBytesElements } from './bytes-tensor.js';
import { NereidError } from './errors.js';

const WHAT = "input 'INPUT0' of model 'simple'";

function encodingError(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, 'INPUT_BYTES_ENCODING');
    assert.equal(err.httpStatus, 400);
    assert.match(err.message, pattern);
    return true;
  });
}

test('encodes strings as UTF-8 and byte arrays as-is, each behind a 4-byte LE length', () => {
  const out = encodeBytesElements(['', 'ab', 'é', new Uint8Array([0, 255]), Buffer.alloc(0)]);
  assert.deepStrictEqual(
    [...out],
    [0, 0, 0, 0, 2, 0, 0, 0, 0x61, 0x62, 2, 0, 0, 0, 0xc3, 0xa9, 2, 0, 0, 0, 0, 255, 0, 0, 0, 0],
  );
  assert.equal(encodeBytesElements([]).length, 0);
  const big = 'x'.repeat(70_000);
  const enc = encodeBytesElements([big]);
  assert.deepStrictEqual([...enc.subarray(0, 4)], [0x70, 0x11, 0x01, 0x00]);
  assert.equal(enc.length, 70_004);
});

test('decodes to views over the input, round-tripping UTF-8 and empty elements', () => {
  const elements = ['', 'hello', '😀é', '', 'last'];
  const enc = encodeBytesElements(elements);
  const backing = Buffer.alloc(enc.length + 5);
  enc.copy(backing, 3);
  const view = new Uint8Array(backing.buffer, backing.byteOffset + 3, enc.length);
  const dec = decodeBytesElements(view, WHAT);
  assert.deepStrictEqual(dec.map((b) => b.toString('utf8')), elements);
  assert.equal(countBytesElements(view, WHAT), 5);
  // Views, not copies.
  assert.equal(dec[1].buffer, backing.buffer);
  backing[3 + 4 + 4] = 0x48;
  assert.equal(dec[1].toString(), 'Hello');
  assert.deepStrictEqual(decodeBytesElements(new Uint8Array(0), WHAT), []);
  assert.equal(countBytesElements(new Uint8Array(0), WHAT), 0);
});

test('an overrunning length prefix names the tensor, element, offset and sizes', () => {
  const data = Buffer.concat([encodeBytesElements(['abc']), Buffer.from([10, 0, 0, 0, 1, 2])]);
  const pattern = /^input 'INPUT0' of model 'simple': BYTES element 1 at offset 7 declares 10 bytes, but only 2 remain in the 13-byte data$/;
  encodingError(() => decodeBytesElements(data, WHAT), pattern);
  encodingError(() => countBytesElements(data, WHAT), pattern);
  encodingError(() => countBytesElements(Buffer.from([0xff, 0xff, 0xff, 0xff]), WHAT), /declares 4294967295 bytes, but only 0 remain/);
});

test('a truncated length prefix is reported', () => {
  const data = Buffer.concat([encodeBytesElements(['a', '']), Buffer.from([1, 0])]);
  const pattern = /BYTES element 2 at offset 9 has a truncated length prefix: 2 of its 4 bytes are present in the 11-byte data/;
  encodingError(() => decodeBytesElements(data, WHAT), pattern);
  encodingError(() => countBytesElements(data, WHAT), pattern);
  encodingError(() => countBytesElements(Buffer.from([0]), WHAT), /element 0 at offset 0/);
});
