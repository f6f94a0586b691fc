import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ProtoWriter } from './protobuf-writer.js';
import { fromFloat16Bits, toFloat16Bits } from './onnx-types.js';

const hex = (bytes: Uint8Array): string => Buffer.from(bytes).toString('hex');

describe('ProtoWriter', () => {
  it('writes varints', () => {
    const cases: [number | bigint, string][] = [
      [0, '00'],
      [1, '01'],
      [127, '7f'],
      [128, '8001'],
      [150, '9601'],
      [300, 'ac02'],
      [0xffffffff, 'ffffffff0f'],
      [2 ** 32, '8080808010'],
      [Number.MAX_SAFE_INTEGER, 'ffffffffffffff0f'],
      [-1, 'ffffffffffffffffff01'],
      [-2n, 'feffffffffffffffff01'],
      [(1n << 64n) - 1n, 'ffffffffffffffffff01'],
      [1n << 63n, '80808080808080808001'],
    ];
    for (const [value, expected] of cases) {
      assert.equal(hex(new ProtoWriter().varint(value).finish()), expected, `varint ${value}`);
    }
    assert.throws(() => new ProtoWriter().varint(1.5), RangeError);
    assert.throws(() => new ProtoWriter().varint(1n << 64n), RangeError);
  });

  it('writes the protobuf documentation examples', () => {
    // https://protobuf.dev/programming-guides/encoding/
    assert.equal(hex(new ProtoWriter().varintField(1, 150).finish()), '089601');
    assert.equal(hex(new ProtoWriter().stringField(2, 'testing').finish()), '120774657374696e67');
    assert.equal(hex(new ProtoWriter().messageField(3, (w) => w.varintField(1, 150)).finish()), '1a03089601');
    assert.equal(hex(new ProtoWriter().packedVarintField(4, [3, 270, 86942]).finish()), '2206038e029ea705');
  });

  it('writes fixed-width fields little-endian', () => {
    assert.equal(hex(new ProtoWriter().fixed32Field(5, 1).finish()), '2d01000000');
    assert.equal(hex(new ProtoWriter().fixed32Field(5, -1).finish()), '2dffffffff');
    assert.equal(hex(new ProtoWriter().fixed64Field(6, 1).finish()), '310100000000000000');
    assert.equal(hex(new ProtoWriter().fixed64Field(6, -2n).finish()), '31feffffffffffffff');
    assert.equal(hex(new ProtoWriter().floatField(1, 1).finish()), '0d0000803f');
    assert.equal(hex(new ProtoWriter().doubleField(1, 1).finish()), '09000000000000f03f');
    assert.equal(hex(new ProtoWriter().boolField(7, true).finish()), '3801');
  });

  it('writes packed repeated fields', () => {
    assert.equal(hex(new ProtoWriter().packedFloatField(4, [1, 2]).finish()), '22080000803f00000040');
    assert.equal(hex(new ProtoWriter().packedFloatField(4, new Float32Array([1, 2]).subarray(1)).finish()), '220400000040');
    assert.equal(hex(new ProtoWriter().packedDoubleField(10, [1]).finish()), '5208000000000000f03f');
    assert.equal(hex(new ProtoWriter().packedFixed32Field(1, [1, 2]).finish()), '0a080100000002000000');
    assert.equal(hex(new ProtoWriter().packedFixed64Field(1, [1n]).finish()), '0a080100000000000000');
    assert.equal(hex(new ProtoWriter().packedVarintField(7, [-1]).finish()), '3a0affffffffffffffffff01');
    assert.equal(new ProtoWriter().packedVarintField(7, []).length, 0);
  });

  it('writes multi-byte tags and long length prefixes', () => {
    assert.equal(hex(new ProtoWriter().varintField(20, 2).finish()), 'a00102');
    const big = new Uint8Array(300);
    const bytes = new ProtoWriter().bytesField(9, big).finish();
    assert.equal(hex(bytes.subarray(0, 3)), '4aac02');
    assert.equal(bytes.length, 303);
    assert.throws(() => new ProtoWriter().tag(0, 0), RangeError);
  });

  it('grows its buffer', () => {
    const w = new ProtoWriter(16);
    for (let i = 0; i < 10_000; i++) w.varint(i);
    assert.equal(w.length, 128 + (10_000 - 128) * 2);
  });
});

describe('float16 conversion', () => {
  it('round-trips exactly representable values', () => {
    const cases: [number, number][] = [
      [0, 0x0000],
      [1, 0x3c00],
      [-2, 0xc000],
      [0.5, 0x3800],
      [65504, 0x7bff],
      [2 ** -24, 0x0001],
      [2 ** -14, 0x0400],
      [Infinity, 0x7c00],
      [-Infinity, 0xfc00],
    ];
    for (const [value, bits] of cases) {
      assert.equal(toFloat16Bits(value), bits, `toFloat16Bits(${value})`);
      assert.equal(fromFloat16Bits(bits), value, `fromFloat16Bits(${bits})`);
    }
    assert.equal(toFloat16Bits(-0), 0x8000);
    assert.ok(Number.isNaN(fromFloat16Bits(toFloat16Bits(NaN))));
  });

  it('rounds to nearest even and overflows to infinity', () => {
    assert.equal(toFloat16Bits(1 + 2 ** -11), 0x3c00); // halfway, ties to even
    assert.equal(toFloat16Bits(1 + 3 * 2 ** -11), 0x3c02); // halfway, ties to even (up)
    assert.equal(toFloat16Bits(65520), 0x7c00);
    assert.equal(toFloat16Bits(1e-9), 0x0000);
    assert.equal(toFloat16Bits(3 * 2 ** -25), 0x0002); // subnormal halfway → even
  });
});
