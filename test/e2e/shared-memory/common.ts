/**
 * What the shared-memory tests share: the tensors, the models' configurations, a request whose
 * inputs and outputs lie in two named regions, and the checks of its answer.
 */
import assert from 'node:assert/strict';
import type { ClientInferOptions, InferResult } from '@nereid/client';

export const range = (n: number, f: (i: number) => number): number[] => Array.from({ length: n }, (_, i) => f(i));
export const A = Int32Array.from(range(16, (i) => i * 3));
export const B = Int32Array.from(range(16, (i) => 7 - i));
export const SUM = Int32Array.from(range(16, (i) => i * 3 + 7 - i));
export const DIFF = Int32Array.from(range(16, (i) => i * 3 - (7 - i)));
/** What fresh regions are filled with, so that bytes written outside the outputs show. */
export const SENTINEL = 0xab;

const TENSORS = `
input [ { name: "INPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "INPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 16 ] }, { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 16 ] } ]
`;

/** One step, `simple`: the ensemble reads its inputs from regions and its outputs go into them. */
export const ENSEMBLE_CONFIG = `name: "simple_ensemble"
platform: "ensemble"
max_batch_size: 8
${TENSORS}
ensemble_scheduling { step [ {
  model_name: "simple" model_version: -1
  input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }
  output_map { key: "OUTPUT0" value: "OUTPUT0" } output_map { key: "OUTPUT1" value: "OUTPUT1" }
} ] }
`;

/** Triton's add_sub in the Python backend, over INT32 [16]: its stub gets the region's bytes. */
export const PYTHON_CONFIG = `name: "add_sub_py"
backend: "python"
max_batch_size: 8
${TENSORS}
instance_group [ { kind: KIND_CPU, count: 1 } ]
`;

export function int32(bytes: Uint8Array): Int32Array {
  return new Int32Array(Uint8Array.from(bytes).buffer);
}

/** Inputs at offsets 0 and 64 of `input`, outputs at 16 and 96 of `output` (both registered). */
export function shmRequest(model: string, input: string, output: string): ClientInferOptions {
  return {
    model,
    inputs: [
      { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: input, byteSize: 64 } },
      { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], sharedMemory: { region: input, byteSize: 64, offset: 64 } },
    ],
    outputs: [
      { name: 'OUTPUT0', sharedMemory: { region: output, byteSize: 64, offset: 16 } },
      { name: 'OUTPUT1', sharedMemory: { region: output, byteSize: 64, offset: 96 } },
    ],
  };
}

/** The outputs of `shmRequest` written at their offsets of a region read by `read(byteSize, offset)`, and nothing around them. */
export function assertOutputsAt(read: (byteSize: number, offset: number) => Uint8Array): void {
  assert.deepEqual(int32(read(64, 16)), SUM);
  assert.deepEqual(int32(read(64, 96)), DIFF);
  assert.ok(read(16, 0).every((b) => b === SENTINEL));
  assert.ok(read(16, 80).every((b) => b === SENTINEL));
}

/** A response to `shmRequest`: both outputs listed with datatype and shape, and no bytes. */
export function assertNoDataOutputs(result: InferResult): void {
  assert.deepEqual(result.outputNames(), ['OUTPUT0', 'OUTPUT1']);
  for (const name of ['OUTPUT0', 'OUTPUT1']) {
    assert.deepEqual(result.shape(name), [1, 16]);
    assert.equal(result.datatype(name), 'INT32');
    assert.equal(result.bytes(name).byteLength, 0);
  }
}
