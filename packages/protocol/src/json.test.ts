import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseJson, parseJsonExact, MAX_JSON_DEPTH } from './json.js';
import { NereidError } from './errors.js';

function malformed(fn: () => unknown, pattern?: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, 'REQUEST_MALFORMED');
    assert.equal(err.httpStatus, 400);
    if (pattern) assert.match(err.message, pattern);
    return true;
  });
}

/** Deterministic PRNG so failures reproduce. */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const STRING_PIECES = ['a', 'é', '€', '😀', '\n', '\t', '"', '\\', '/', '\u0001', '\u001f', '\u2028', ' ', 'xyz', '\ud83d', '\ude00'];

function randomString(r: () => number): string {
  let s = '';
  const n = Math.floor(r() * 6);
  for (let i = 0; i < n; i++) s += STRING_PIECES[Math.floor(r() * STRING_PIECES.length)];
  return s;
}

function randomNumberText(r: () => number): string {
  const kind = Math.floor(r() * 6);
  const sign = r() < 0.3 ? '-' : '';
  switch (kind) {
    case 0:
      return sign + String(Math.floor(r() * 1000));
    case 1:
      return sign + String(Math.floor(r() * 2 ** 52));
    case 2:
      return sign + String(r() * 1000);
    case 3:
      return `${sign}${Math.floor(r() * 10)}.${Math.floor(r() * 1e6)}e${r() < 0.5 ? '-' : '+'}${Math.floor(r() * 30)}`;
    case 4:
      return `${sign}${Math.floor(r() * 9) + 1}E${Math.floor(r() * 300)}`;
    default:
      return sign + '0';
  }
}

/** A random ordinary JSON document (no integers beyond 2^53), written with random whitespace. */
function randomDoc(r: () => number, depth: number): string {
  const ws = () => [' ', '', '\n', '\t', '\r\n  '][Math.floor(r() * 5)];
  const pick = Math.floor(r() * (depth > 4 ? 5 : 7));
  switch (pick) {
    case 0:
      return randomNumberText(r);
    case 1:
      return JSON.stringify(randomString(r));
    case 2:
      return ['true', 'false', 'null'][Math.floor(r() * 3)];
    case 3:
    case 4:
      return randomNumberText(r);
    case 5: {
      const n = Math.floor(r() * 5);
      const items = Array.from({ length: n }, () => ws() + randomDoc(r, depth + 1) + ws());
      return `[${items.join(',')}]`;
    }
    default: {
      const n = Math.floor(r() * 5);
      const keys = ['a', 'b', '__proto__', '1', 'ключ', randomString(r)];
      const items = Array.from(
        { length: n },
        () => `${ws()}${JSON.stringify(keys[Math.floor(r() * keys.length)])}${ws()}:${ws()}${randomDoc(r, depth + 1)}${ws()}`,
      );
      return `{${items.join(',')}}`;
    }
  }
}

test('fast and exact paths agree with JSON.parse on random ordinary documents', () => {
  const r = rng(1);
  for (let i = 0; i < 3000; i++) {
    const doc = randomDoc(r, 0);
    const expected = JSON.parse(doc);
    assert.deepStrictEqual(parseJson(doc), expected, doc);
    assert.deepStrictEqual(parseJsonExact(doc), expected, doc);
    assert.deepStrictEqual(parseJsonExact(Buffer.from(doc)), expected, doc);
  }
});

test('the exact parser accepts exactly what JSON.parse accepts on random mutations', () => {
  const r = rng(2);
  const alphabet = '{}[],:"\\ 0123456789-+.eEtrufalsn\u0001x';
  let rejected = 0;
  for (let i = 0; i < 5000; i++) {
    const doc = randomDoc(r, 0);
    const at = Math.floor(r() * doc.length);
    const mutated = doc.slice(0, at) + alphabet[Math.floor(r() * alphabet.length)] + doc.slice(at + 1);
    let expected: unknown;
    let ok = true;
    try {
      expected = JSON.parse(mutated);
    } catch {
      ok = false;
    }
    if (ok) {
      // Mutations can create integer tokens beyond 2^53, which parseJson keeps exact.
      const got = parseJsonExact(mutated);
      assert.equal(JSON.stringify(got, (_k, v: unknown) => (typeof v === 'bigint' ? Number(v) : v)), JSON.stringify(expected), mutated);
    } else {
      rejected++;
      malformed(() => parseJsonExact(mutated));
      malformed(() => parseJson(mutated));
    }
  }
  assert.ok(rejected > 1000);
});

test('64-bit integers are exact bigints beyond ±(2^53−1) and numbers within', () => {
  const doc = '{"a":[-9223372036854775808,18446744073709551615,9007199254740991,-9007199254740991,9007199254740992,-9007199254740992,9223372036854775807,0,-0]}';
  const v = parseJson(doc) as { a: unknown[] };
  assert.deepStrictEqual(v.a, [
    -(2n ** 63n),
    2n ** 64n - 1n,
    9007199254740991,
    -9007199254740991,
    2n ** 53n,
    -(2n ** 53n),
    2n ** 63n - 1n,
    0,
    -0,
  ]);
  assert.ok(Object.is(v.a[8], -0));
  assert.deepStrictEqual(parseJsonExact(doc), v);
  assert.equal(parseJson('123456789012345678901234567890'), 123456789012345678901234567890n);
});

test('numbers with a fraction or exponent stay JS numbers, however large', () => {
  assert.deepStrictEqual(parseJson('[1e20, 12345678901234567890.0, 1E400, -1e-400, 0.30000000000000004]'), [
    1e20, 12345678901234567890, Infinity, -0, 0.30000000000000004,
  ]);
  assert.deepStrictEqual(parseJson('[9007199254740993, 1.5e3]'), [9007199254740993n, 1500]);
});

test('strings: every escape and surrogate pairs', () => {
  const doc = String.raw`["\"\\\/\b\f\n\r\t", "\u00e9\u20AC\ud83d\ude00", "\ud800", "plain", "", "é€😀", 18446744073709551615]`;
  const got = parseJson(doc) as unknown[];
  const expected = JSON.parse(doc.replace('18446744073709551615', '0')) as unknown[];
  assert.deepStrictEqual(got.slice(0, 6), expected.slice(0, 6));
  assert.equal(got[1], 'é€😀');
  assert.equal(got[6], 2n ** 64n - 1n);
  malformed(() => parseJson('["\\x"]'), /escape/);
  malformed(() => parseJson('["\\u12G4"]'), /hex/);
  malformed(() => parseJson('["a\u0001"]'), /control/);
  malformed(() => parseJson('["abc'), /closing quote/);
});

test('NaN, Infinity and -Infinity tokens are accepted', () => {
  assert.deepStrictEqual(parseJson('[NaN, Infinity, -Infinity, 1]'), [NaN, Infinity, -Infinity, 1]);
  malformed(() => parseJson('[Nan]'));
  malformed(() => parseJson('[-Inf]'));
});

test('"__proto__" becomes an own property, as with JSON.parse', () => {
  const v = parseJsonExact('{"__proto__": {"x": 1}, "big": 18446744073709551615}') as Record<string, unknown>;
  assert.equal(Object.getPrototypeOf(v), Object.prototype);
  assert.deepStrictEqual(Object.keys(v), ['__proto__', 'big']);
  assert.equal((v as { x?: number }).x, undefined);
});

test('byte input: UTF-8, views at an offset', () => {
  const bytes = Buffer.from('xx{"k":"é😀","n":18446744073709551615}yy');
  const view = new Uint8Array(bytes.buffer, bytes.byteOffset + 2, bytes.length - 4);
  assert.deepStrictEqual(parseJson(view), { k: 'é😀', n: 2n ** 64n - 1n });
  assert.deepStrictEqual(parseJson(new Uint8Array(Buffer.from('{"k":[1,2]}'))), { k: [1, 2] });
});

test('errors say what was expected, what was found, and where', () => {
  malformed(() => parseJson('{"inputs": [1, 2,]}', 'the request JSON buffer'), /^failed to parse the request JSON buffer: expected a value, found '\]' at 17$/);
  malformed(() => parseJson('{"a" 1}'), /expected ':' after an object key, found '1' at 5/);
  malformed(() => parseJson('[1 2]'), /expected ',' or '\]' after an array element, found '2' at 3/);
  malformed(() => parseJson('{"a":1,}'), /expected a string key, found '}' at 7/);
  malformed(() => parseJson('[01]'), /found '1' at 2/);
  malformed(() => parseJson('[1.]'), /digit after the decimal point/);
  malformed(() => parseJson('[1e+]'), /digit in the exponent/);
  malformed(() => parseJson(''), /expected a value, found end of input at 0/);
  malformed(() => parseJson('{} x'), /expected end of input, found 'x' at 3/);
  malformed(() => parseJson('\ufeff{}'), /at 0/);
  // Offsets are byte offsets for byte input, code-unit indexes for string input.
  malformed(() => parseJson('["é😀", ]'), /at 8$/);
  malformed(() => parseJson(Buffer.from('["é😀", ]')), /at 11$/);
});

test('nesting is limited to MAX_JSON_DEPTH on both paths', () => {
  const nest = (d: number, inner: string) => '['.repeat(d) + inner + ']'.repeat(d);
  assert.ok(Array.isArray(parseJson(nest(MAX_JSON_DEPTH, '1'))));
  assert.ok(Array.isArray(parseJson(nest(MAX_JSON_DEPTH, '18446744073709551615'))));
  malformed(() => parseJson(nest(MAX_JSON_DEPTH + 1, '1')), /at most 512 levels of nesting, found '\[' at 512/);
  malformed(() => parseJson(nest(MAX_JSON_DEPTH + 1, '18446744073709551615')), /at most 512 levels/);
  malformed(() => parseJson('{"a":'.repeat(MAX_JSON_DEPTH + 1) + '1' + '}'.repeat(MAX_JSON_DEPTH + 1)), /levels of nesting/);
  // Hostile depth does not overflow the stack.
  malformed(() => parseJson(nest(1_000_000, '')), /levels of nesting/);
  malformed(() => parseJson('['.repeat(1_000_000)), /levels of nesting/);
});

test('large documents with 64-bit integers take the exact path and stay exact', () => {
  const values = Array.from({ length: 10_000 }, (_, i) => (1n << 60n) + BigInt(i) * 922337203685477n);
  const doc = `{"data":[${values.join(',')}],"x":[1.5,"s"]}`;
  const v = parseJson(doc) as { data: bigint[]; x: unknown[] };
  assert.deepStrictEqual(v.data, values);
  assert.deepStrictEqual(v.x, [1.5, 's']);
});

test('stringifyJson writes bigints as exact integers and everything else as JSON.stringify', async () => {
  const { stringifyJson } = await import('./json.js');
  const doc = { a: 2n ** 64n - 1n, b: [-(2n ** 63n), 1, 'x'], c: { d: 0n }, s: 'bigint:1' };
  const text = stringifyJson(doc);
  assert.equal(text, '{"a":18446744073709551615,"b":[-9223372036854775808,1,"x"],"c":{"d":0},"s":"bigint:1"}');
  // Integers within ±(2^53 − 1) come back as numbers.
  assert.deepEqual(parseJson(text), { ...doc, c: { d: 0 } });
  assert.equal(stringifyJson({ plain: [1, 2] }), JSON.stringify({ plain: [1, 2] }));
});
