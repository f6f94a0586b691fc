/**
 * One input → Identity → one output, for each datatype ONNX Runtime's Node binding can feed.
 */
import type { DataType } from '@nereid/protocol';
import type { Dim } from '../onnx/model-writer.js';
import { OnnxGraphBuilder } from '../onnx/model-writer.js';
import type { ElemTypeLike } from '../onnx/onnx-types.js';
import { dataTypeOfOnnx } from '../onnx/onnx-types.js';
import type { BuilderOptions, TestModel } from './test-model.js';
import { finishModel } from './test-model.js';

/**
 * Datatypes an Identity model round-trips through onnxruntime-node 1.30 (checked by
 * identity tests). BF16 is not among them: ONNX Runtime loads a BFLOAT16 graph, but the Node
 * binding rejects it while reading the session's metadata ("Unsupported data type: 16").
 */
export const ORT_NODE_DATATYPES: readonly DataType[] = [
  'BOOL', 'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP16', 'FP32', 'FP64', 'BYTES',
];

/**
 * INPUT0 → Identity → OUTPUT0 of `datatype` (an ONNX name such as 'FLOAT', a Nereid datatype
 * such as 'FP32', or an enum number) and `shape` (default [-1, 16]). A -1 becomes a symbolic
 * dimension ('batch' first, then 'd1', 'd2', ...). `maxBatchSize` defaults to 8 when the first
 * dimension is -1 (or symbolic) and to 0 otherwise. Default name: `identity_<datatype>`
 * (lower case Nereid name, e.g. `identity_fp32`).
 */
export function identityModel(
  datatype: ElemTypeLike,
  shape: readonly (number | string)[] = [-1, 16],
  options: BuilderOptions = {},
): TestModel {
  const dims: Dim[] = shape.map((d, i) => (d === -1 ? (i === 0 ? 'batch' : `d${i}`) : d));
  const batchable = dims.length > 0 && typeof dims[0] === 'string';
  const label = (dataTypeOfOnnx(datatype) ?? String(datatype)).toLowerCase();
  const g = new OnnxGraphBuilder('identity')
    .input('INPUT0', datatype, dims)
    .output('OUTPUT0', datatype, dims)
    .node('Identity', ['INPUT0'], ['OUTPUT0']);
  return finishModel(g, options.name ?? `identity_${label}`, options.maxBatchSize ?? (batchable ? 8 : 0), options.model);
}
