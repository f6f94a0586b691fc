import { test } from 'node:test';
import assert from 'node:assert/strict';
import { jsonToTensorData, tensorDataToJson, typedArrayOf, MAX_JSON_DATA_DEPTH } from './json-tensor.js';
import { parseJson } from './json.js';
import { encodeBytesElements } from './bytes-tensor.js';
import type { DataType } from './datatypes.js';
import { NereidError, type ErrorCode } from './errors.js';

const WHAT = "input 'INPUT0' of model 'simple'";

function fails(fn: () => unknown, code: ErrorCode, pattern?: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof NereidError, String(err));
    assert.equal(err.code, code, err.message);
    if (pattern) assert.match(err.message, pattern);
    return true;
  });
}

/** Little-endian bytes of `values` written with a DataView setter. */
function le(size: number, set: (dv: DataView, off: number, v: never) => void, values: readonly unknown[]): Buffer {
  const buf = Buffer.alloc(size * values.length);
  const dv = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  values.forEach((v, i) => set(dv, i * size, v as never));
  return buf;
}

interface Case {
  datatype: DataType;
  json: string;
  bytes: Buffer;
  /** JSON written back, when it differs from `json`. */
  out?: string;
}

const CASES: Case[] = [
  { datatype: 'BOOL', json: '[true,false,true]', bytes: Buffer.from([1, 0, 1]) },
  { datatype: 'UINT8', json: '[0,1,255]', bytes: Buffer.from([0, 1, 255]) },
  { datatype: 'INT8', json: '[-128,-1,0,127]', bytes: Buffer.from([0x80, 0xff, 0, 0x7f]) },
  { datatype: 'UINT16', json: '[0,65535,258]', bytes: le(2, (d, o, v: number) => d.setUint16(o, v, true), [0, 65535, 258]) },
  { datatype: 'INT16', json: '[-32768,32767,-2]', bytes: le(2, (d, o, v: number) => d.setInt16(o, v, true), [-32768, 32767, -2]) },
  { datatype: 'UINT32', json: '[0,4294967295,16909060]', bytes: le(4, (d, o, v: number) => d.setUint32(o, v, true), [0, 4294967295, 16909060]) },
  { datatype: 'INT32', json: '[-2147483648,2147483647,-5]', bytes: le(4, (d, o, v: number) => d.setInt32(o, v, true), [-2147483648, 2147483647, -5]) },
  {
    datatype: 'UINT64',
    json: '[0,18446744073709551615,9007199254740993,4294967296,1]',
    bytes: le(8, (d, o, v: bigint) => d.setBigUint64(o, v, true), [0n, 2n ** 64n - 1n, 9007199254740993n, 4294967296n, 1n]),
  },
  {
    datatype: 'INT64',
    json: '[-9223372036854775808,9223372036854775807,-1,-9007199254740991,9007199254740991,-4294967297,0]',
    bytes: le(8, (d, o, v: bigint) => d.setBigInt64(o, v, true), [
      -(2n ** 63n), 2n ** 63n - 1n, -1n, -9007199254740991n, 9007199254740991n, -4294967297n, 0n,
    ]),
  },
  {
    datatype: 'FP32',
    json: '[1.5,-0.25,3.4028234663852886e+38,1.401298464324817e-45,0.10000000149011612]',
    bytes: le(4, (d, o, v: number) => d.setFloat32(o, v, true), [1.5, -0.25, 3.4028234663852886e38, 1.401298464324817e-45, 0.1]),
  },
  {
    datatype: 'FP64',
    json: '[0.1,-1e-300,1.7976931348623157e+308,5e-324,123456789.125]',
    bytes: le(8, (d, o, v: number) => d.setFloat64(o, v, true), [0.1, -1e-300, 1.7976931348623157e308, 5e-324, 123456789.125]),
  },
  {
    datatype: 'BYTES',
    json: '["","abc","é😀","quote\\"back\\\\slash\\nnl\\u0001"]',
    bytes: encodeBytesElements(['', 'abc', 'é😀', 'quote"back\\slash\nnl\u0001']),
  },
];

for (const c of CASES) {
  test(`${c.datatype}: JSON data → bytes → JSON`, () => {
    const data = parseJson(c.json) as unknown[];
    const bytes = jsonToTensorData(c.datatype, data, data.length, WHAT);
    assert.deepStrictEqual(bytes, c.bytes);
    const text = tensorDataToJson(c.datatype, bytes, WHAT);
    assert.equal(text, c.out ?? c.json);
  });

  test(`${c.datatype}: nested data gives the same bytes; unaligned views write the same JSON`, () => {
    const flat = parseJson(c.json) as unknown[];
    const nested = [[flat.slice(0, 1)], [], flat.slice(1, 2), [[[flat.slice(2)]]]];
    assert.deepStrictEqual(jsonToTensorData(c.datatype, nested, flat.length, WHAT), c.bytes);
    const backing = Buffer.alloc(c.bytes.length + 3);
    c.bytes.copy(backing, 1);
    const unaligned = backing.subarray(1, 1 + c.bytes.length);
    assert.equal(tensorDataToJson(c.datatype, unaligned, WHAT), c.out ?? c.json);
  });
}

test('integers are truncated to the element width (wrap, no range check)', () => {
  const data = parseJson('[256, 257, 511, 65536, 4294967297, 18446744073709551617, -18446744073709551615]') as unknown[];
  assert.deepStrictEqual([...jsonToTensorData('UINT8', data.slice(0, 4), 4, WHAT)], [0, 1, 255, 0]);
  assert.deepStrictEqual([...jsonToTensorData('INT8', [128, -129, 2n ** 70n + 3n], 3, WHAT)], [0x80, 0x7f, 3]);
  assert.deepStrictEqual([...typedArrayOf('INT16', jsonToTensorData('INT16', [32768, 65535, -32769, 1e20], 4, WHAT))], [-32768, -1, 32767, Number(BigInt.asIntN(16, 10n ** 20n))]);
  assert.deepStrictEqual([...typedArrayOf('INT32', jsonToTensorData('INT32', data.slice(4), 3, WHAT))], [1, 1, 1]);
  assert.deepStrictEqual([...typedArrayOf('UINT32', jsonToTensorData('UINT32', [4294967297, 2n ** 40n + 7n], 2, WHAT))], [1, 7]);
  assert.deepStrictEqual([...typedArrayOf('INT64', jsonToTensorData('INT64', [2n ** 63n, 2n ** 64n + 5n, -(2n ** 63n) - 1n, 1e20], 4, WHAT))], [
    -(2n ** 63n), 5n, 2n ** 63n - 1n, BigInt.asIntN(64, 10n ** 20n),
  ]);
  assert.deepStrictEqual([...typedArrayOf('UINT64', jsonToTensorData('UINT64', [2n ** 64n + 3n, 1e20, -0], 3, WHAT))], [3n, BigInt.asUintN(64, 10n ** 20n), 0n]);
});

test('FP32 stores any number (rounded to single precision), bigints included', () => {
  const f = typedArrayOf('FP32', jsonToTensorData('FP32', [1e40, -1e-50, 0.1, 2n ** 64n, 7], 5, WHAT));
  assert.deepStrictEqual([...f], [Infinity, -0, Math.fround(0.1), 2 ** 64, 7]);
});

test('element count must match the shape', () => {
  fails(() => jsonToTensorData('INT32', [1, 2, 3], 4, WHAT), 'REQUEST_JSON_DATA', /^Unable to parse 'data': Shape does not match true shape of 'data' field: the shape of input 'INPUT0' of model 'simple' has 4 elements but 'data' holds 3$/);
  fails(() => jsonToTensorData('INT32', [[1, 2], [3, 4, 5]], 4, WHAT), 'REQUEST_JSON_DATA', /has 4 elements but 'data' holds 5/);
  fails(() => jsonToTensorData('FP32', [[1, 2], [3, 4], [], [5]], 4, WHAT), 'REQUEST_JSON_DATA', /holds 5/);
  fails(() => jsonToTensorData('BYTES', [], 1, WHAT), 'REQUEST_JSON_DATA', /holds 0/);
  assert.deepStrictEqual(jsonToTensorData('INT32', [1, [], [[]]], 1, WHAT), Buffer.from([1, 0, 0, 0]));
  const err = (() => {
    try {
      jsonToTensorData('INT32', [1], 2, WHAT);
    } catch (e) {
      return e as NereidError;
    }
    return undefined;
  })();
  assert.equal(err?.httpStatus, 500, "Triton's status for data that does not fit the shape");
});

test('zero-element shapes do not read data', () => {
  for (const dt of ['FP32', 'BYTES', 'BOOL', 'FP16'] as const) {
    if (dt === 'FP16') continue;
    assert.equal(jsonToTensorData(dt, undefined, 0, WHAT).length, 0);
    assert.equal(jsonToTensorData(dt, 'garbage', 0, WHAT).length, 0);
  }
  assert.equal(tensorDataToJson('FP32', Buffer.alloc(0), WHAT), '[]');
  assert.equal(tensorDataToJson('BYTES', Buffer.alloc(0), WHAT), '[]');
  assert.equal(tensorDataToJson('INT64', Buffer.alloc(0), WHAT), '[]');
});

test('nesting deeper than 100 levels is refused', () => {
  let ok: unknown = [1];
  for (let d = 1; d < MAX_JSON_DATA_DEPTH; d++) ok = [ok];
  assert.deepStrictEqual(jsonToTensorData('INT8', ok, 1, WHAT), Buffer.from([1]));
  fails(() => jsonToTensorData('INT8', [ok], 1, WHAT), 'REQUEST_JSON_DATA', /^Unable to parse 'data': the arrays of input 'INPUT0' of model 'simple' nest deeper than 100 levels$/);
  // Also when the count already overflowed before the deep part is reached.
  fails(() => jsonToTensorData('INT8', [1, [ok]], 1, WHAT), 'REQUEST_JSON_DATA', /deeper than 100/);
});

test('wrong element types are REQUEST_JSON_DATA (INTERNAL) naming the element and the type', () => {
  const cases: [DataType, unknown[], number, RegExp][] = [
    ['INT32', [1, 2, 'x'], 3, /^Unable to parse 'data': element 2 of input 'INPUT0' of model 'simple' should be a JSON integer for datatype INT32, got the string "x"$/],
    ['INT32', [1.5], 1, /element 0 .* should be a JSON integer .*got the number 1.5/],
    ['UINT8', [[1], [-1]], 2, /element 1 .* should be a non-negative JSON integer for datatype UINT8, got the number -1/],
    ['UINT64', [-1n], 1, /non-negative JSON integer for datatype UINT64, got the number -1/],
    ['INT64', [true], 1, /JSON integer for datatype INT64, got the bool true/],
    ['INT64', [0.5], 1, /JSON integer for datatype INT64/],
    ['FP32', [1, null], 2, /element 1 .* should be a JSON number for datatype FP32, got null/],
    ['FP64', [{}], 1, /JSON number for datatype FP64, got an object/],
    ['BOOL', [1], 1, /should be a JSON bool \(true or false\) for datatype BOOL, got the number 1/],
    ['BYTES', ['a', 3], 2, /element 1 .* should be a JSON string for datatype BYTES, got the number 3/],
  ];
  for (const [dt, data, n, pattern] of cases) {
    fails(() => jsonToTensorData(dt, data, n, WHAT), 'REQUEST_JSON_DATA', pattern);
  }
  fails(() => jsonToTensorData('FP32', { a: 1 }, 1, WHAT), 'REQUEST_JSON_DATA', /expected an array for input 'INPUT0' of model 'simple', got an object/);
  fails(() => jsonToTensorData('FP32', 5, 1, WHAT), 'REQUEST_JSON_DATA', /expected an array/);
  try {
    jsonToTensorData('INT32', ['x'], 1, WHAT);
  } catch (e) {
    assert.equal((e as NereidError).httpStatus, 500);
  }
});

test('FP16/BF16 are refused as JSON both ways, pointing to binary data', () => {
  for (const dt of ['FP16', 'BF16'] as const) {
    fails(() => jsonToTensorData(dt, [1], 1, WHAT), 'INPUT_JSON_UNSUPPORTED', /datatype (FP16|BF16).*binary data format/);
    fails(() => tensorDataToJson(dt, Buffer.alloc(2), "output 'OUT' of model 'm'"), 'OUTPUT_JSON_UNSUPPORTED', /output 'OUT' of model 'm'.*"binary_data": true/);
  }
});

test('NaN, ±Infinity and -0 are written as NaN / Infinity / -Infinity / -0.0', () => {
  const f32 = new Float32Array([NaN, Infinity, -Infinity, -0, 0, 1.25]);
  const bytes = Buffer.from(f32.buffer);
  assert.equal(tensorDataToJson('FP32', bytes, WHAT), '[NaN,Infinity,-Infinity,-0.0,0,1.25]');
  assert.equal(tensorDataToJson('FP64', Buffer.from(new Float64Array([1, NaN]).buffer), WHAT), '[1,NaN]');
  assert.equal(tensorDataToJson('FP64', Buffer.from(new Float64Array([-0]).buffer), WHAT), '[-0.0]');
  assert.equal(tensorDataToJson('FP32', Buffer.from(new Float32Array([Infinity]).buffer), WHAT), '[Infinity]');
  // The output reads back through parseJson with the same values.
  const back = parseJson(tensorDataToJson('FP32', bytes, WHAT)) as number[];
  assert.deepStrictEqual(back, [NaN, Infinity, -Infinity, -0, 0, 1.25]);
});

test('FP32 is written as the double it widens to, in shortest round-trip form', () => {
  const values = [0.1, 1 / 3, 16777217, 1e-7, 3.14159];
  const f32 = new Float32Array(values);
  const text = tensorDataToJson('FP32', Buffer.from(f32.buffer), WHAT);
  assert.equal(text, `[${[...f32].map(String).join(',')}]`);
  assert.deepStrictEqual(JSON.parse(text), [...f32]);
});

test('non-zero BOOL bytes read as true; BYTES invalid UTF-8 becomes U+FFFD', () => {
  assert.equal(tensorDataToJson('BOOL', Buffer.from([0, 2, 255]), WHAT), '[false,true,true]');
  const bytes = encodeBytesElements([Buffer.from([0x61, 0xff, 0x62])]);
  assert.equal(tensorDataToJson('BYTES', bytes, WHAT), '["a\ufffdb"]');
  fails(() => tensorDataToJson('BYTES', Buffer.from([5, 0, 0, 0, 1]), WHAT), 'INPUT_BYTES_ENCODING');
});

test('typedArrayOf: views share memory when aligned, copy when not', () => {
  const backing = new ArrayBuffer(20);
  const aligned = new Uint8Array(backing, 8, 8);
  const v = typedArrayOf('FP32', aligned);
  assert.ok(v instanceof Float32Array);
  assert.equal(v.buffer, backing);
  v[0] = 2;
  assert.deepStrictEqual([...aligned.subarray(0, 4)], [0, 0, 0, 0x40]);

  const odd = new Uint8Array(backing, 1, 8);
  const c = typedArrayOf('INT32', odd);
  assert.notEqual(c.buffer, backing);
  assert.equal(c.length, 2);
  assert.ok(typedArrayOf('UINT8', odd).buffer === backing);

  const types: [DataType, unknown][] = [
    ['BOOL', Uint8Array], ['UINT8', Uint8Array], ['INT8', Int8Array], ['UINT16', Uint16Array], ['INT16', Int16Array],
    ['UINT32', Uint32Array], ['INT32', Int32Array], ['UINT64', BigUint64Array], ['INT64', BigInt64Array],
    ['FP16', Uint16Array], ['BF16', Uint16Array], ['FP32', Float32Array], ['FP64', Float64Array],
  ];
  for (const [dt, ctor] of types) {
    const arr = typedArrayOf(dt, new Uint8Array(16));
    assert.equal(arr.constructor, ctor, dt);
    assert.equal(arr.byteLength, 16);
  }
  fails(() => typedArrayOf('BYTES', new Uint8Array(4)), 'INTERNAL', /BYTES/);
  fails(() => typedArrayOf('FP32', new Uint8Array(6)), 'INTERNAL', /6 bytes is not a whole number of FP32 elements/);
});

test('large FP32 round trip (1e5 elements)', () => {
  const n = 100_000;
  const f = new Float32Array(n);
  for (let i = 0; i < n; i++) f[i] = Math.sin(i) * 1000;
  const text = tensorDataToJson('FP32', Buffer.from(f.buffer), WHAT);
  const bytes = jsonToTensorData('FP32', parseJson(text), n, WHAT);
  assert.deepStrictEqual(bytes, Buffer.from(f.buffer));
});

test('a huge shape with little data fails before allocating for the shape', () => {
  fails(() => jsonToTensorData('FP64', [1, [2]], 2 ** 40, WHAT), 'REQUEST_JSON_DATA', /has 1099511627776 elements but 'data' holds 2/);
  fails(() => jsonToTensorData('BYTES', ['a'], 2 ** 40, WHAT), 'REQUEST_JSON_DATA', /holds 1$/);
});
