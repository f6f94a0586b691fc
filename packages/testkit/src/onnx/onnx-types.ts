/**
 * ONNX element types (`TensorProto.DataType`, onnx/onnx.proto) and their relation to Nereid's
 * protocol datatypes (models-and-scheduling.md §2.3), plus IEEE half-precision conversion.
 */
import type { DataType } from '@nereid/protocol';

/** `TensorProto.DataType` numbers. */
export const OnnxElemType = {
  UNDEFINED: 0,
  FLOAT: 1,
  UINT8: 2,
  INT8: 3,
  UINT16: 4,
  INT16: 5,
  INT32: 6,
  INT64: 7,
  STRING: 8,
  BOOL: 9,
  FLOAT16: 10,
  DOUBLE: 11,
  UINT32: 12,
  UINT64: 13,
  COMPLEX64: 14,
  COMPLEX128: 15,
  BFLOAT16: 16,
  FLOAT8E4M3FN: 17,
  FLOAT8E4M3FNUZ: 18,
  FLOAT8E5M2: 19,
  FLOAT8E5M2FNUZ: 20,
  UINT4: 21,
  INT4: 22,
  FLOAT4E2M1: 23,
} as const;

export type OnnxElemTypeName = Exclude<keyof typeof OnnxElemType, 'UNDEFINED'>;

/** An element type given by ONNX name (`'FLOAT'`), Nereid datatype (`'FP32'`) or enum number. */
export type ElemTypeLike = OnnxElemTypeName | DataType | number;

const NAME_BY_NUMBER = new Map<number, OnnxElemTypeName>(
  (Object.entries(OnnxElemType) as [keyof typeof OnnxElemType, number][])
    .filter(([name]) => name !== 'UNDEFINED')
    .map(([name, value]) => [value, name as OnnxElemTypeName]),
);

const ONNX_BY_DATATYPE: Readonly<Record<DataType, number>> = {
  BOOL: OnnxElemType.BOOL,
  UINT8: OnnxElemType.UINT8,
  UINT16: OnnxElemType.UINT16,
  UINT32: OnnxElemType.UINT32,
  UINT64: OnnxElemType.UINT64,
  INT8: OnnxElemType.INT8,
  INT16: OnnxElemType.INT16,
  INT32: OnnxElemType.INT32,
  INT64: OnnxElemType.INT64,
  FP16: OnnxElemType.FLOAT16,
  FP32: OnnxElemType.FLOAT,
  FP64: OnnxElemType.DOUBLE,
  BYTES: OnnxElemType.STRING,
  BF16: OnnxElemType.BFLOAT16,
};

const DATATYPE_BY_ONNX = new Map<number, DataType>(
  (Object.entries(ONNX_BY_DATATYPE) as [DataType, number][])
    // ONNX BFLOAT16 has no mapping in the ONNX Runtime backend's table (§2.3).
    .filter(([dt]) => dt !== 'BF16')
    .map(([dt, n]) => [n, dt]),
);

/** Element byte size of fixed-size ONNX types; undefined for STRING and sub-byte types. */
const ELEM_SIZE = new Map<number, number>([
  [OnnxElemType.FLOAT, 4],
  [OnnxElemType.UINT8, 1],
  [OnnxElemType.INT8, 1],
  [OnnxElemType.UINT16, 2],
  [OnnxElemType.INT16, 2],
  [OnnxElemType.INT32, 4],
  [OnnxElemType.INT64, 8],
  [OnnxElemType.BOOL, 1],
  [OnnxElemType.FLOAT16, 2],
  [OnnxElemType.DOUBLE, 8],
  [OnnxElemType.UINT32, 4],
  [OnnxElemType.UINT64, 8],
  [OnnxElemType.COMPLEX64, 8],
  [OnnxElemType.COMPLEX128, 16],
  [OnnxElemType.BFLOAT16, 2],
  [OnnxElemType.FLOAT8E4M3FN, 1],
  [OnnxElemType.FLOAT8E4M3FNUZ, 1],
  [OnnxElemType.FLOAT8E5M2, 1],
  [OnnxElemType.FLOAT8E5M2FNUZ, 1],
]);

/** The `TensorProto.DataType` number of an element type given by ONNX name, Nereid datatype or number. */
export function onnxElemType(type: ElemTypeLike): number {
  if (typeof type === 'number') {
    if (!NAME_BY_NUMBER.has(type)) throw new RangeError(`unknown ONNX element type ${type}`);
    return type;
  }
  if (Object.hasOwn(OnnxElemType, type) && type !== ('UNDEFINED' as string)) {
    return OnnxElemType[type as OnnxElemTypeName];
  }
  if (Object.hasOwn(ONNX_BY_DATATYPE, type)) return ONNX_BY_DATATYPE[type as DataType];
  throw new RangeError(`unknown element type '${type}'`);
}

/** `1` → `'FLOAT'`; undefined for numbers that are not ONNX element types. */
export function onnxElemTypeName(type: number): OnnxElemTypeName | undefined {
  return NAME_BY_NUMBER.get(type);
}

/** The Nereid datatype of an ONNX element type (`FLOAT` → `FP32`, `STRING` → `BYTES`), or undefined. */
export function dataTypeOfOnnx(type: ElemTypeLike): DataType | undefined {
  return DATATYPE_BY_ONNX.get(onnxElemType(type));
}

/** Bytes per element of a fixed-size ONNX type; undefined for STRING and 4-bit types. */
export function onnxElemSize(type: ElemTypeLike): number | undefined {
  return ELEM_SIZE.get(onnxElemType(type));
}

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);

/** IEEE 754 binary16 bits of `value`, rounded to nearest even (NaN stays NaN, overflow → ±Inf). */
export function toFloat16Bits(value: number): number {
  f32[0] = value;
  const x = u32[0]!;
  const sign = (x >>> 16) & 0x8000;
  const exp = (x >>> 23) & 0xff;
  let mant = x & 0x7fffff;
  if (exp === 0xff) return sign | 0x7c00 | (mant !== 0 ? 0x200 : 0);
  const e = exp - 127 + 15;
  if (e >= 0x1f) return sign | 0x7c00;
  if (e <= 0) {
    if (e < -10) return sign;
    mant |= 0x800000;
    const shift = 14 - e;
    let half = mant >>> shift;
    const rem = mant & ((1 << shift) - 1);
    const mid = 1 << (shift - 1);
    if (rem > mid || (rem === mid && (half & 1) === 1)) half++;
    return sign | half;
  }
  let half = (e << 10) | (mant >>> 13);
  const rem = mant & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && (half & 1) === 1)) half++;
  // A carry out of the mantissa rounds into the exponent (up to Inf), which is the right result.
  return sign | half;
}

/** The number that IEEE 754 binary16 `bits` encode. */
export function fromFloat16Bits(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const exp = (bits >>> 10) & 0x1f;
  const mant = bits & 0x3ff;
  if (exp === 0) return sign * mant * 2 ** -24;
  if (exp === 0x1f) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1 + mant / 1024) * 2 ** (exp - 15);
}
