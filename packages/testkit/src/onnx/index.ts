export { ProtoWriter, WireType } from './protobuf-writer.js';
export type { ElemTypeLike, OnnxElemTypeName } from './onnx-types.js';
export {
  OnnxElemType,
  dataTypeOfOnnx,
  fromFloat16Bits,
  onnxElemSize,
  onnxElemType,
  onnxElemTypeName,
  toFloat16Bits,
} from './onnx-types.js';
export type {
  AttributeValue,
  Dim,
  EncodedModel,
  ExternalDataFile,
  ModelOptions,
  NodeSpec,
  OpsetImport,
  Shape,
  TensorData,
  TensorSpec,
  ValueInfoSpec,
} from './model-writer.js';
export { OnnxGraphBuilder, attr, encodeModel, writeOnnxModel } from './model-writer.js';
