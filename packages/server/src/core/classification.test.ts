import assert from 'node:assert/strict';
import { test } from 'node:test';
import { formatFixed6 } from './classification.js';

test('formatFixed6 writes what printf("%f") writes', () => {
  const cases: [number, string][] = [
    [0, '0.000000'],
    [-0, '-0.000000'],
    [0.75, '0.750000'],
    [Math.fround(0.1), '0.100000'],
    [0.0078125, '0.007812'], // exact tie: to even
    [0.0234375, '0.023438'], // exact tie: to even
    [-0.0000004, '-0.000000'],
    [Math.fround(1e21), '1000000020040877342720.000000'],
    [2 ** 70, '1180591620717411303424.000000'],
    [5e-324, '0.000000'],
    [Infinity, 'inf'],
    [-Infinity, '-inf'],
    [NaN, 'nan'],
  ];
  for (const [value, text] of cases) assert.equal(formatFixed6(value), text, String(value));
});
