/**
 * Batch helpers every backend uses (models-and-scheduling.md §4.8): gather the requests' inputs
 * along the batch dimension (the one copy a tensor undergoes on its way through), and scatter a
 * batched output back to the requests as views, without copying.
 */
import { NereidError, elementCount, elementSize, type DataType } from '@nereid/protocol';
import type { BackendRequest, BackendTensor } from './spi.js';

export interface GatheredTensor {
  readonly name: string;
  readonly datatype: DataType;
  readonly shape: number[];
  /** A fresh buffer owned by the caller (it may be transferred to another thread). */
  readonly data: Uint8Array;
}

/**
 * Concatenates input `name` of every request, in order. For batching models the result's shape
 * is `[Σ batch sizes] + item shape`; for a single request its own shape is kept.
 * The scheduler guarantees equal item shapes within a batch. `allocate` gives the memory to
 * gather into (at least the bytes asked; the result views exactly the tensor's bytes of it);
 * by default a fresh buffer of the tensor's own.
 */
export function gatherInput(
  requests: readonly BackendRequest[],
  name: string,
  batching: boolean,
  allocate: (bytes: number) => Uint8Array = freshBytes,
): GatheredTensor {
  const first = requests[0]!.inputs.get(name);
  if (first === undefined) throw new NereidError('INPUT_MISSING', `input '${name}' is missing from the batch`);
  let total = 0;
  let rows = 0;
  for (const r of requests) {
    const t = r.inputs.get(name)!;
    total += t.data.byteLength;
    rows += batching ? t.shape[0]! : 1;
  }
  const data = allocate(total).subarray(0, total);
  let offset = 0;
  for (const r of requests) {
    const bytes = r.inputs.get(name)!.data;
    data.set(bytes, offset);
    offset += bytes.byteLength;
  }
  const shape = batching ? [rows, ...first.shape.slice(1)] : [...first.shape];
  return { name, datatype: first.datatype, shape, data };
}

/** Every byte is written by the gather: no zero-filling. Unpooled, so `data.buffer` is the tensor's own. */
function freshBytes(bytes: number): Uint8Array {
  return Buffer.allocUnsafeSlow(bytes);
}

/** Byte offsets of every BYTES element boundary (length n + 1). */
function bytesElementOffsets(data: Uint8Array, count: number, what: string): Uint32Array {
  const offsets = new Uint32Array(count + 1);
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let offset = 0;
  for (let i = 0; i < count; i++) {
    offsets[i] = offset;
    if (offset + 4 > data.byteLength) {
      throw new NereidError('BACKEND_ERROR', `${what}: BYTES output ends before element ${i}`);
    }
    offset += 4 + view.getUint32(offset, true);
  }
  if (offset !== data.byteLength) {
    throw new NereidError('BACKEND_ERROR', `${what}: BYTES output holds ${data.byteLength} bytes but its elements end at ${offset}`);
  }
  offsets[count] = offset;
  return offsets;
}

/**
 * Splits a batched output (`[N] + item shape`) along the first dimension: request i gets rows
 * [offset_i, offset_i + batchSize_i) as a view over `output.data`. For a single request the
 * tensor is returned as is.
 */
export function scatterOutput(
  output: BackendTensor,
  requests: readonly BackendRequest[],
  batching: boolean,
  what: string,
): BackendTensor[] {
  if (requests.length === 1) return [output];
  if (!batching) throw new NereidError('BACKEND_ERROR', `${what}: a batch of several requests for a non-batching model`);
  const rows = output.shape[0] ?? 0;
  const wanted = requests.reduce((n, r) => n + r.batchSize, 0);
  if (output.shape.length === 0 || rows !== wanted) {
    throw new NereidError(
      'BACKEND_ERROR',
      `${what}: output '${output.name}' has shape [${output.shape.join(',')}] but the batch holds ${wanted} rows`,
    );
  }
  const item = output.shape.slice(1);
  const perRow = elementCount(item);
  const parts: BackendTensor[] = [];
  if (output.datatype === 'BYTES') {
    const offsets = bytesElementOffsets(output.data, rows * perRow, what);
    let row = 0;
    for (const r of requests) {
      const start = offsets[row * perRow]!;
      const end = offsets[(row + r.batchSize) * perRow]!;
      parts.push({ name: output.name, datatype: output.datatype, shape: [r.batchSize, ...item], data: output.data.subarray(start, end) });
      row += r.batchSize;
    }
  } else {
    const rowBytes = perRow * elementSize(output.datatype);
    let offset = 0;
    for (const r of requests) {
      const size = r.batchSize * rowBytes;
      parts.push({
        name: output.name,
        datatype: output.datatype,
        shape: [r.batchSize, ...item],
        data: output.data.subarray(offset, offset + size),
      });
      offset += size;
    }
  }
  return parts;
}

/** Names of the outputs any request of the batch asked for, in first-seen order. */
export function unionOfRequestedOutputs(requests: readonly BackendRequest[]): string[] {
  if (requests.length === 1) return [...requests[0]!.requestedOutputs];
  const names = new Set<string>();
  for (const r of requests) for (const n of r.requestedOutputs) names.add(n);
  return [...names];
}
