/**
 * The tensor datatype table (protocol.md §2.2, models-and-scheduling.md §2.3): every KServe v2
 * datatype string, its element size, and its model-config `TYPE_*` twin.
 */

import { NereidError } from './errors.js';

/** Protocol datatype strings, exactly as they appear on the wire (case-sensitive). */
export type DataType =
  | 'BOOL'
  | 'UINT8'
  | 'UINT16'
  | 'UINT32'
  | 'UINT64'
  | 'INT8'
  | 'INT16'
  | 'INT32'
  | 'INT64'
  | 'FP16'
  | 'FP32'
  | 'FP64'
  | 'BYTES'
  | 'BF16';

/** Model-config enum names (`inference.DataType`). */
export type ConfigDataType =
  | 'TYPE_INVALID'
  | 'TYPE_BOOL'
  | 'TYPE_UINT8'
  | 'TYPE_UINT16'
  | 'TYPE_UINT32'
  | 'TYPE_UINT64'
  | 'TYPE_INT8'
  | 'TYPE_INT16'
  | 'TYPE_INT32'
  | 'TYPE_INT64'
  | 'TYPE_FP16'
  | 'TYPE_FP32'
  | 'TYPE_FP64'
  | 'TYPE_STRING'
  | 'TYPE_BF16';

export interface DataTypeInfo {
  readonly datatype: DataType;
  /** Bytes per element; 0 for BYTES, whose elements have variable size (§2.3). */
  readonly size: number;
  readonly configType: ConfigDataType;
  /** Numeric value of the config enum. */
  readonly configValue: number;
  /** Whether JSON `data` (HTTP) and typed gRPC contents can carry it (FP16/BF16 cannot). */
  readonly jsonCapable: boolean;
}

const TABLE: readonly DataTypeInfo[] = [
  { datatype: 'BOOL', size: 1, configType: 'TYPE_BOOL', configValue: 1, jsonCapable: true },
  { datatype: 'UINT8', size: 1, configType: 'TYPE_UINT8', configValue: 2, jsonCapable: true },
  { datatype: 'UINT16', size: 2, configType: 'TYPE_UINT16', configValue: 3, jsonCapable: true },
  { datatype: 'UINT32', size: 4, configType: 'TYPE_UINT32', configValue: 4, jsonCapable: true },
  { datatype: 'UINT64', size: 8, configType: 'TYPE_UINT64', configValue: 5, jsonCapable: true },
  { datatype: 'INT8', size: 1, configType: 'TYPE_INT8', configValue: 6, jsonCapable: true },
  { datatype: 'INT16', size: 2, configType: 'TYPE_INT16', configValue: 7, jsonCapable: true },
  { datatype: 'INT32', size: 4, configType: 'TYPE_INT32', configValue: 8, jsonCapable: true },
  { datatype: 'INT64', size: 8, configType: 'TYPE_INT64', configValue: 9, jsonCapable: true },
  { datatype: 'FP16', size: 2, configType: 'TYPE_FP16', configValue: 10, jsonCapable: false },
  { datatype: 'FP32', size: 4, configType: 'TYPE_FP32', configValue: 11, jsonCapable: true },
  { datatype: 'FP64', size: 8, configType: 'TYPE_FP64', configValue: 12, jsonCapable: true },
  { datatype: 'BYTES', size: 0, configType: 'TYPE_STRING', configValue: 13, jsonCapable: true },
  { datatype: 'BF16', size: 2, configType: 'TYPE_BF16', configValue: 14, jsonCapable: false },
];

const BY_DATATYPE = new Map<string, DataTypeInfo>(TABLE.map((t) => [t.datatype, t]));
const BY_CONFIG = new Map<string, DataTypeInfo>(TABLE.map((t) => [t.configType, t]));

/** Every protocol datatype, in enum order. */
export const DATATYPES: readonly DataType[] = TABLE.map((t) => t.datatype);

/** Every config datatype enum name, in value order (TYPE_INVALID first). */
export const CONFIG_DATATYPES: readonly ConfigDataType[] = [
  'TYPE_INVALID',
  ...TABLE.map((t) => t.configType),
];

export function isDataType(value: unknown): value is DataType {
  return typeof value === 'string' && BY_DATATYPE.has(value);
}

/** Table entry for a protocol datatype string, or undefined if the string is not one. */
export function dataTypeInfo(datatype: string): DataTypeInfo | undefined {
  return BY_DATATYPE.get(datatype);
}

/** `TYPE_FP32` → `FP32`, `TYPE_STRING` → `BYTES`; undefined for `TYPE_INVALID` and unknown names. */
export function fromConfigDataType(configType: string): DataType | undefined {
  return BY_CONFIG.get(configType)?.datatype;
}

/** `FP32` → `TYPE_FP32`, `BYTES` → `TYPE_STRING`. */
export function toConfigDataType(datatype: DataType): ConfigDataType {
  return BY_DATATYPE.get(datatype)!.configType;
}

/** Bytes per element, 0 for BYTES. */
export function elementSize(datatype: DataType): number {
  return BY_DATATYPE.get(datatype)!.size;
}

/**
 * Number of elements of a shape: the product of its dimensions, 1 for the scalar shape `[]`.
 * Dimensions must be non-negative integers (a request shape never holds -1, §2.4).
 */
export function elementCount(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) {
    // A zero dimension makes the tensor empty however large the others (and keeps an overflowed
    // product, Infinity, from turning into NaN).
    if (d === 0) return 0;
    n *= d;
  }
  return n;
}

/**
 * Checks a request shape's element count: it must be exact as a JavaScript number (at most
 * 2^53 - 1 elements); a product beyond that is inexact or Infinity and can describe no tensor.
 * Throws NereidError('INPUT_SHAPE') (INVALID_ARG) naming the tensor (`what`, e.g. "input
 * 'INPUT0' for model 'simple'") and the shape.
 */
export function checkShapeElementCount(shape: readonly number[], what: string): void {
  if (Number.isSafeInteger(elementCount(shape))) return;
  const shown = shape.length <= 8 ? shape.join(',') : `${shape.slice(0, 8).join(',')},… (${shape.length} dimensions)`;
  throw new NereidError(
    'INPUT_SHAPE',
    `${what} has shape [${shown}], whose element count exceeds ${Number.MAX_SAFE_INTEGER} (2^53 - 1)`,
  );
}

/**
 * Byte size of a fixed-size tensor of this shape, or undefined for BYTES (whose size depends on
 * its contents, §2.3).
 */
export function fixedByteSize(datatype: DataType, shape: readonly number[]): number | undefined {
  const size = elementSize(datatype);
  return size === 0 ? undefined : size * elementCount(shape);
}

/** The typed arrays tensor data may be given as; each is viewed as its bytes (little-endian). */
export type TypedArray =
  | Uint8Array
  | Int8Array
  | Uint16Array
  | Int16Array
  | Uint32Array
  | Int32Array
  | BigUint64Array
  | BigInt64Array
  | Float32Array
  | Float64Array;
