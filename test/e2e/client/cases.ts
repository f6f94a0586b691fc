/**
 * Requests and models shared by the client tests: one identity case per datatype (edge values
 * included), the inputs of Triton's `simple`, and a classification model with a label file.
 */
import assert from 'node:assert/strict';
import type { ClientInput, InferResult } from '@nereid/client';
import { encodeBytesElements, type DataType } from '@nereid/protocol';
import { identityModel } from '@nereid/testkit';
import type { ModelFiles } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

/** The mlp of the cancellation tests: [512, 16] FP32 batches, slow enough to cancel mid-flight. */
export const MLP_BATCH = 512;
export const MLP_INPUT = 16;

/** A Buffer over the same bytes (for byte-exact comparisons). */
export function asBuffer(view: ArrayBufferView): Buffer {
  return Buffer.from(view.buffer, view.byteOffset, view.byteLength);
}

/** INPUT0 and INPUT1 of `simple` for `batch` rows; `seed` varies the values. */
export function simpleInputs(batch: number, seed: number): { a: Int32Array; b: Int32Array } {
  const n = batch * 16;
  return {
    a: Int32Array.from({ length: n }, (_, i) => i * 3 + seed),
    b: Int32Array.from({ length: n }, (_, i) => 1000 - 7 * i + 11 * seed),
  };
}

/** An identity request of one datatype, and the bytes the output must hold. */
export interface DatatypeCase {
  datatype: DataType;
  shape: number[];
  data: ClientInput['data'];
  bytes: Buffer;
  /** Checks beyond the bytes, through the typed accessors. */
  check?: (result: InferResult) => void;
}

function typedCase(datatype: DataType, data: ArrayBufferView & ArrayLike<number | bigint>, check?: (result: InferResult) => void): DatatypeCase {
  const c: DatatypeCase = { datatype, shape: [1, data.length], data: data as ClientInput['data'], bytes: Buffer.from(asBuffer(data)) };
  if (check) c.check = check;
  return c;
}

// Byte arrays and strings both; valid UTF-8 without NUL, as ONNX Runtime's STRING tensors require
// (docs/backends.md). Binary elements on the wire are checked by the client's unit tests.
const BYTES_ELEMENTS = ['', 'héllo wörld', new TextEncoder().encode('bytes ✓'), '𝄞 emoji 🙂', 'x'.repeat(1000)];

/** One case per datatype of `ORT_NODE_DATATYPES`, with the extremes of each. */
export const DATATYPE_CASES: readonly DatatypeCase[] = [
  typedCase('BOOL', Uint8Array.of(1, 0, 1, 1)),
  typedCase('UINT8', Uint8Array.of(0, 255, 7)),
  typedCase('UINT16', Uint16Array.of(0, 65535, 7)),
  typedCase('UINT32', Uint32Array.of(0, 2 ** 32 - 1, 7)),
  typedCase('UINT64', BigUint64Array.of(0n, 2n ** 64n - 1n, 2n ** 53n + 1n), (r) =>
    assert.deepEqual(Array.from(r.typed('OUTPUT0') as BigUint64Array), [0n, 2n ** 64n - 1n, 2n ** 53n + 1n]),
  ),
  typedCase('INT8', Int8Array.of(-128, 127, 0, -1)),
  typedCase('INT16', Int16Array.of(-32768, 32767, 0, -1)),
  typedCase('INT32', Int32Array.of(-(2 ** 31), 2 ** 31 - 1, 0, -1)),
  typedCase('INT64', BigInt64Array.of(-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n, 2n ** 53n + 1n), (r) =>
    assert.deepEqual(Array.from(r.typed('OUTPUT0') as BigInt64Array), [-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n, 2n ** 53n + 1n]),
  ),
  // FP16 travels as its bit patterns: 1.0, -2.0, 65504 (max), smallest subnormal, NaN.
  typedCase('FP16', Uint16Array.of(0x3c00, 0xc000, 0x7bff, 0x0001, 0x7e00)),
  typedCase('FP32', Float32Array.of(0.1, -3.4028234663852886e38, 1.401298464324817e-45, Number.NaN, Number.NEGATIVE_INFINITY, -0)),
  typedCase('FP64', Float64Array.of(Math.PI, -Number.MAX_VALUE, Number.MIN_VALUE, Number.NaN, Number.POSITIVE_INFINITY), (r) =>
    assert.deepEqual(Array.from(r.typed('OUTPUT0') as Float64Array), [Math.PI, -Number.MAX_VALUE, Number.MIN_VALUE, Number.NaN, Number.POSITIVE_INFINITY]),
  ),
  {
    datatype: 'BYTES',
    shape: [1, BYTES_ELEMENTS.length],
    data: BYTES_ELEMENTS,
    bytes: encodeBytesElements(BYTES_ELEMENTS),
    check: (r) => assert.deepEqual(r.strings('OUTPUT0').slice(0, 4), ['', 'héllo wörld', 'bytes ✓', '𝄞 emoji 🙂']),
  },
];

/** An FP32 identity model named `labelled` whose OUTPUT0 has a label file (cat, dog, bird, fish). */
export function labelledModelFiles(): ModelFiles {
  const model = identityModel('FP32', [-1, -1], { name: 'labelled' });
  const config = model.config!.replace(/(output \[\n  \{\n    name: "OUTPUT0"\n)/, '$1    label_filename: "labels.txt"\n');
  assert.notEqual(config, model.config, 'label_filename was not inserted');
  return modelFiles(model, { config, extra: { 'labels.txt': 'cat\ndog\nbird\nfish\n' } });
}
