import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { BackendTensor } from '../backends/spi.js';
import { requestKey } from './request-key.js';

const tensor = (name: string, bytes: number[], shape = [1, bytes.length], datatype: BackendTensor['datatype'] = 'UINT8'): BackendTensor => ({
  name,
  datatype,
  shape,
  data: new Uint8Array(bytes),
});
const inputs = (...ts: BackendTensor[]) => new Map(ts.map((t) => [t.name, t] as const));

describe('requestKey', () => {
  const base = requestKey('m', 1, inputs(tensor('A', [1, 2, 3, 4]), tensor('B', [5])), ['Y', 'X']);

  it('is the same for the same model, version, inputs and outputs, whatever their order', () => {
    assert.equal(requestKey('m', 1, inputs(tensor('B', [5]), tensor('A', [1, 2, 3, 4])), ['X', 'Y']), base);
  });

  it('hashes the bytes where they lie: a view into a larger buffer keys as its own bytes', () => {
    const big = new Uint8Array([9, 9, 1, 2, 3, 4, 9]);
    const a: BackendTensor = { name: 'A', datatype: 'UINT8', shape: [1, 4], data: big.subarray(2, 6) };
    assert.equal(requestKey('m', 1, inputs(a, tensor('B', [5])), ['X', 'Y']), base);
  });

  it('differs with the model, version, any input byte, name, datatype or shape, and the requested outputs', () => {
    const others = [
      requestKey('n', 1, inputs(tensor('A', [1, 2, 3, 4]), tensor('B', [5])), ['X', 'Y']),
      requestKey('m', 2, inputs(tensor('A', [1, 2, 3, 4]), tensor('B', [5])), ['X', 'Y']),
      requestKey('m', 1, inputs(tensor('A', [1, 2, 3, 5]), tensor('B', [5])), ['X', 'Y']),
      requestKey('m', 1, inputs(tensor('C', [1, 2, 3, 4]), tensor('B', [5])), ['X', 'Y']),
      requestKey('m', 1, inputs(tensor('A', [1, 2, 3, 4], [2, 2]), tensor('B', [5])), ['X', 'Y']),
      requestKey('m', 1, inputs(tensor('A', [1, 2, 3, 4], [1, 4], 'INT8'), tensor('B', [5])), ['X', 'Y']),
      requestKey('m', 1, inputs(tensor('A', [1, 2, 3, 4]), tensor('B', [5])), ['X']),
      // Bytes moved from one input to the next: the lengths keep them apart.
      requestKey('m', 1, inputs(tensor('A', [1, 2, 3], [1, 4]), tensor('B', [4, 5], [1, 1])), ['X', 'Y']),
    ];
    assert.equal(new Set([base, ...others]).size, others.length + 1);
  });
});
