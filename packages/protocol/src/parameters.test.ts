import { test } from 'node:test';
import assert from 'node:assert/strict';
import { parseHttpParameters, isReservedParameter, RESERVED_PARAMETERS, SERVER_PARAMETERS } from './parameters.js';
import { parseJson } from './json.js';
import { NereidError, type ErrorCode } from './errors.js';

function fails(fn: () => unknown, code: ErrorCode, pattern: RegExp): void {
  assert.throws(fn, (err: unknown) => {
    assert.ok(err instanceof NereidError);
    assert.equal(err.code, code);
    assert.equal(err.httpStatus, 400);
    assert.match(err.message, pattern);
    return true;
  });
}

test('reserved names (§2.7)', () => {
  for (const name of RESERVED_PARAMETERS) assert.ok(isReservedParameter(name), name);
  assert.ok(isReservedParameter('triton_anything'));
  assert.ok(!isReservedParameter('custom'));
  assert.ok(!isReservedParameter('Sequence_id'));
  assert.ok(SERVER_PARAMETERS.includes('triton_enable_empty_final_response'));
});

test('valid values keep their types, 64-bit integers exact', () => {
  const v = parseJson('{"sequence_id": 18446744073709551615, "sequence_start": true, "priority": 1, "ratio": 0.5, "tag": "x", "timeout": 100}');
  const m = parseHttpParameters(v);
  assert.deepStrictEqual([...m], [
    ['sequence_id', 2n ** 64n - 1n],
    ['sequence_start', true],
    ['priority', 1],
    ['ratio', 0.5],
    ['tag', 'x'],
    ['timeout', 100],
  ]);
  assert.equal(parseHttpParameters(undefined).size, 0);
  assert.equal(parseHttpParameters({}).size, 0);
});

test('other value types are rejected', () => {
  for (const bad of [null, [1], { a: 1 }]) {
    fails(() => parseHttpParameters({ custom: bad }), 'REQUEST_PARAMETER_TYPE', /parameter 'custom' of the request has an invalid type; it should be either 'int', 'double', 'bool', or 'string'/);
  }
  for (const bad of [null, [], 'x', 3]) {
    fails(() => parseHttpParameters(bad), 'REQUEST_MALFORMED', /'parameters' of the request should be a JSON object/);
  }
});

test("keys starting with 'triton_' are rejected on HTTP requests", () => {
  fails(() => parseHttpParameters({ a: 1, triton_enable_empty_final_response: true }), 'REQUEST_PARAMETER', /^parameter keys starting with 'triton_' are reserved for Triton usage and should not be specified, got 'triton_enable_empty_final_response'/);
  const m = parseHttpParameters({ triton_final_response: true }, { where: 'response', rejectTritonKeys: false });
  assert.equal(m.get('triton_final_response'), true);
});
