/**
 * Nereid datatypes ⇄ ONNX Runtime (node binding) tensor types.
 */
import type { DataType } from '@nereid/protocol';

/** The tensor type names of onnxruntime-node that Nereid datatypes map to. */
export type OrtTensorType =
  | 'bool'
  | 'uint8'
  | 'uint16'
  | 'uint32'
  | 'uint64'
  | 'int8'
  | 'int16'
  | 'int32'
  | 'int64'
  | 'float16'
  | 'float32'
  | 'float64'
  | 'string';

const TO_ORT: Partial<Record<DataType, OrtTensorType>> = {
  BOOL: 'bool',
  UINT8: 'uint8',
  UINT16: 'uint16',
  UINT32: 'uint32',
  UINT64: 'uint64',
  INT8: 'int8',
  INT16: 'int16',
  INT32: 'int32',
  INT64: 'int64',
  FP16: 'float16',
  FP32: 'float32',
  FP64: 'float64',
  BYTES: 'string',
};

const FROM_ORT = new Map<string, DataType>(Object.entries(TO_ORT).map(([k, v]) => [v, k as DataType]));

/** undefined for datatypes ONNX Runtime's node binding cannot carry (BF16). */
export function toOrtType(datatype: DataType): OrtTensorType | undefined {
  return TO_ORT[datatype];
}

export function fromOrtType(type: string): DataType | undefined {
  return FROM_ORT.get(type);
}
