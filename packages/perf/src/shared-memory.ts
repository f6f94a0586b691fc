/**
 * `--shared-memory system` (perf-and-analyzer.md §1.3; protocol.md §3.17): every input tensor of
 * the prepared requests is written once into one POSIX shared-memory object and every request
 * refers to its place there; every output goes to a second object that all requests share (its
 * contents are never read: only the server's write of it is measured). Both objects are
 * registered with the server before the first request and unregistered and removed by `release`.
 *
 * An output's space is its byte size times the batch size when the model's metadata gives it a
 * fixed shape; otherwise (BYTES, variable dimensions) `--output-shared-memory-size` bytes.
 */
import { randomBytes } from 'node:crypto';
import { NereidError, elementSize } from '@nereid/protocol';
import { InferenceServerError, SystemSharedMemoryRegion, type ClientInput, type ClientRequestedOutput, type ClientSharedMemoryInput } from '@nereid/client';
import type { ModelInfo, PreparedData } from './input-data.js';
import type { Transport } from './transport.js';

export interface SharedMemoryRun {
  /** The requests (and streams) with every input replaced by its shared-memory reference. */
  data: { requests: ClientSharedMemoryInput[][]; streams?: ClientSharedMemoryInput[][][] };
  /** Unregisters both regions on the server and removes the objects; never throws. */
  release(): Promise<void>;
}

function inputBytes(input: ClientInput): Uint8Array {
  const d = input.data as ArrayBufferView;
  return new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
}

/** Bytes an output may need in one request: fixed size × batch, or `fallback` for BYTES and variable shapes. */
export function outputSpace(model: ModelInfo, output: ModelInfo['outputs'][number], batchSize: number, fallback: number): number {
  const dims = model.maxBatchSize > 0 ? output.shape.slice(1) : output.shape;
  const size = elementSize(output.datatype);
  if (size === 0 || dims.some((d) => d < 0)) return fallback;
  return size * dims.reduce((a, b) => a * b, 1) * Math.max(1, batchSize);
}

export async function setUpSharedMemory(
  transport: Transport,
  model: ModelInfo,
  prepared: PreparedData,
  options: { batchSize: number; outputSharedMemorySize: number },
): Promise<SharedMemoryRun> {
  const tag = `nereid_perf_${process.pid}_${randomBytes(3).toString('hex')}`;
  const offsets = new Map<ClientInput, number>();
  let inputSize = 0;
  const all = [...prepared.requests, ...(prepared.streams ?? []).flat()];
  for (const request of all) {
    for (const input of request) {
      if (offsets.has(input)) continue;
      offsets.set(input, inputSize);
      inputSize += inputBytes(input).byteLength;
    }
  }
  let outputSize = 0;
  const outputs: ClientRequestedOutput[] = model.outputs.map((o) => {
    const byteSize = outputSpace(model, o, options.batchSize, options.outputSharedMemorySize);
    const ref = { name: o.name, sharedMemory: { region: `${tag}_output`, byteSize, offset: outputSize } };
    outputSize += byteSize;
    return ref;
  });

  const regions: { name: string; region: SystemSharedMemoryRegion; registered: boolean }[] = [];
  const release = async (): Promise<void> => {
    for (const r of regions) {
      if (r.registered) await transport.unregisterSystemSharedMemory(r.name).catch(() => undefined);
      r.region.destroy();
    }
    regions.length = 0;
  };
  try {
    const input = { name: `${tag}_input`, region: SystemSharedMemoryRegion.create(`/${tag}_input`, Math.max(1, inputSize), { exclusive: true }), registered: false };
    regions.push(input);
    for (const [tensor, offset] of offsets) input.region.write(inputBytes(tensor), offset);
    const output = { name: `${tag}_output`, region: SystemSharedMemoryRegion.create(`/${tag}_output`, Math.max(1, outputSize), { exclusive: true }), registered: false };
    regions.push(output);
    for (const r of regions) {
      await transport.registerSystemSharedMemory(r.name, r.region.key, r.region.byteSize);
      r.registered = true;
    }
  } catch (err) {
    await release();
    if (err instanceof NereidError) throw err;
    const why = err instanceof InferenceServerError ? err.message : err instanceof Error ? err.message : String(err);
    throw new NereidError(
      'PERF_SERVER_UNREACHABLE',
      `--shared-memory system: cannot set up the regions for model '${model.name}' (${why}); the server must share /dev/shm with this machine and allow client regions (nereid serve --allow-client-shm=true)`,
      { cause: err },
    );
  }
  transport.requestOutputs(outputs);
  const toShm = (request: readonly ClientInput[]): ClientSharedMemoryInput[] =>
    request.map((i) => ({
      name: i.name,
      datatype: i.datatype,
      shape: i.shape,
      sharedMemory: { region: `${tag}_input`, byteSize: inputBytes(i).byteLength, offset: offsets.get(i)! },
    }));
  return {
    data: { requests: prepared.requests.map(toShm), streams: prepared.streams?.map((s) => s.map(toShm)) },
    release,
  };
}
