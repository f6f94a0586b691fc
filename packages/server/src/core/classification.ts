/**
 * The classification extension (protocol.md §3.11): an output returned as its top-k classes,
 * `"<value>:<index>"` or `"<value>:<index>:<label>"`, as a BYTES tensor.
 */
import { NereidError, elementCount, encodeBytesElements, typedArrayOf, type DataType } from '@nereid/protocol';
import type { BackendTensor } from '../backends/spi.js';

const CLASSIFIABLE = new Set<DataType>([
  'UINT8', 'UINT16', 'UINT32', 'UINT64', 'INT8', 'INT16', 'INT32', 'INT64', 'FP32', 'FP64',
]);

/**
 * @param batched  the model's max_batch_size > 0: the first dimension is the batch
 * @param labels   lines of the output's label file, if it has one
 */
export function classify(
  output: BackendTensor,
  k: number,
  batched: boolean,
  labels: readonly string[] | undefined,
  model: string,
): BackendTensor {
  if (!CLASSIFIABLE.has(output.datatype)) {
    throw new NereidError(
      'CLASSIFICATION_UNSUPPORTED',
      `class result not available for output '${output.name}' of model '${model}' due to unsupported type '${output.datatype}'`,
    );
  }
  const values = typedArrayOf(output.datatype, output.data) as ArrayLike<number | bigint>;
  const batch = batched && output.shape.length > 0 ? output.shape[0]! : 1;
  const perEntry = batched && output.shape.length > 0 ? elementCount(output.shape.slice(1)) : elementCount(output.shape);
  const kk = Math.min(k, perEntry);
  const isFloat = output.datatype === 'FP32' || output.datatype === 'FP64';
  const strings: string[] = [];
  const order = new Array<number>(perEntry);
  for (let b = 0; b < batch; b++) {
    const base = b * perEntry;
    for (let i = 0; i < perEntry; i++) order[i] = i;
    order.sort((x, y) => {
      const vx = values[base + x]!;
      const vy = values[base + y]!;
      return vx > vy ? -1 : vx < vy ? 1 : x - y;
    });
    for (let j = 0; j < kk; j++) {
      const index = order[j]!;
      const v = values[base + index]!;
      const text = isFloat ? formatFixed6(v as number) : String(v);
      const label = labels?.[index];
      strings.push(label !== undefined ? `${text}:${index}:${label}` : `${text}:${index}`);
    }
  }
  return {
    name: output.name,
    datatype: 'BYTES',
    shape: batched ? [batch, kk] : [kk],
    data: encodeBytesElements(strings),
  };
}

const SCALE = 1_000_000n;
const F64 = new Float64Array(1);
const F64_BITS = new BigUint64Array(F64.buffer);

/**
 * `value` as C's `printf("%f")` (Triton's `std::to_string`) writes it: the exact binary value
 * rounded half to even at six decimals, never in exponent form, keeping the sign of -0, and
 * `inf`/`nan` for non-finite values. `toFixed` differs on exact ties and from 1e21 up.
 */
export function formatFixed6(value: number): string {
  if (Number.isNaN(value)) return 'nan';
  const sign = value < 0 || Object.is(value, -0) ? '-' : '';
  if (!Number.isFinite(value)) return `${sign}inf`;
  F64[0] = Math.abs(value);
  const bits = F64_BITS[0]!;
  const biased = Number(bits >> 52n);
  let mantissa = bits & 0xfffffffffffffn;
  if (biased !== 0) mantissa |= 1n << 52n;
  const exponent = (biased === 0 ? 1 : biased) - 1075;
  let scaled: bigint;
  if (exponent >= 0) {
    scaled = (mantissa << BigInt(exponent)) * SCALE;
  } else {
    const shift = BigInt(-exponent);
    const num = mantissa * SCALE;
    scaled = num >> shift;
    const twice = (num - (scaled << shift)) << 1n;
    const den = 1n << shift;
    if (twice > den || (twice === den && (scaled & 1n) === 1n)) scaled += 1n;
  }
  const digits = scaled.toString().padStart(7, '0');
  return `${sign}${digits.slice(0, -6)}.${digits.slice(-6)}`;
}
