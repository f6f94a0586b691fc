/**
 * Worker-thread entry of one ONNX Runtime instance. `InferenceSession.run()` blocks the thread
 * that calls it while the model computes, so each instance owns a worker and the event loop of
 * the main thread stays free for the network.
 */
import { parentPort, workerData } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import type { RunMessage, SessionWorkerOptions, WireTensor, WorkerReply } from './worker-protocol.js';

const options = workerData as SessionWorkerOptions;
const port = parentPort!;
const decoder = new TextDecoder();
const encoder = new TextEncoder();

function decodeStrings(buffer: ArrayBuffer): string[] {
  const view = new DataView(buffer);
  const bytes = new Uint8Array(buffer);
  const out: string[] = [];
  let offset = 0;
  while (offset < buffer.byteLength) {
    const length = view.getUint32(offset, true);
    offset += 4;
    out.push(decoder.decode(bytes.subarray(offset, offset + length)));
    offset += length;
  }
  return out;
}

function encodeStrings(values: readonly string[]): ArrayBuffer {
  const parts = values.map((v) => encoder.encode(v));
  let total = 0;
  for (const p of parts) total += 4 + p.byteLength;
  const buffer = new ArrayBuffer(total);
  const view = new DataView(buffer);
  const bytes = new Uint8Array(buffer);
  let offset = 0;
  for (const p of parts) {
    view.setUint32(offset, p.byteLength, true);
    bytes.set(p, offset + 4);
    offset += 4 + p.byteLength;
  }
  return buffer;
}

function toOrtTensor(t: WireTensor): ort.Tensor {
  const b = t.data;
  switch (t.type) {
    case 'string':
      return new ort.Tensor('string', decodeStrings(b), t.dims);
    case 'bool':
      return new ort.Tensor('bool', new Uint8Array(b), t.dims);
    case 'uint8':
      return new ort.Tensor('uint8', new Uint8Array(b), t.dims);
    case 'int8':
      return new ort.Tensor('int8', new Int8Array(b), t.dims);
    case 'uint16':
      return new ort.Tensor('uint16', new Uint16Array(b), t.dims);
    case 'int16':
      return new ort.Tensor('int16', new Int16Array(b), t.dims);
    case 'float16':
      return new ort.Tensor('float16', new Uint16Array(b), t.dims);
    case 'uint32':
      return new ort.Tensor('uint32', new Uint32Array(b), t.dims);
    case 'int32':
      return new ort.Tensor('int32', new Int32Array(b), t.dims);
    case 'float32':
      return new ort.Tensor('float32', new Float32Array(b), t.dims);
    case 'uint64':
      return new ort.Tensor('uint64', new BigUint64Array(b), t.dims);
    case 'int64':
      return new ort.Tensor('int64', new BigInt64Array(b), t.dims);
    case 'float64':
      return new ort.Tensor('float64', new Float64Array(b), t.dims);
  }
}

function fromOrtTensor(name: string, tensor: ort.Tensor, transfer: ArrayBuffer[]): WireTensor {
  const dims = [...tensor.dims];
  if (tensor.type === 'string') {
    const data = encodeStrings(tensor.data as string[]);
    transfer.push(data);
    return { name, type: 'string', dims, data };
  }
  const view = tensor.data as ArrayBufferView;
  let data: ArrayBuffer;
  if (view.byteOffset === 0 && view.byteLength === view.buffer.byteLength && view.buffer instanceof ArrayBuffer) {
    data = view.buffer;
  } else {
    data = new Uint8Array(view.buffer, view.byteOffset, view.byteLength).slice().buffer;
  }
  transfer.push(data);
  return { name, type: tensor.type as WireTensor['type'], dims, data };
}

async function main(): Promise<void> {
  let session: ort.InferenceSession;
  try {
    session = await ort.InferenceSession.create(options.modelPath, {
      intraOpNumThreads: options.intraOpNumThreads,
      interOpNumThreads: options.interOpNumThreads,
      graphOptimizationLevel: options.graphOptimizationLevel,
      executionMode: options.executionMode,
      enableCpuMemArena: options.enableCpuMemArena,
      enableMemPattern: options.enableMemPattern,
    });
  } catch (err) {
    port.postMessage({ kind: 'init-error', message: err instanceof Error ? err.message : String(err) } satisfies WorkerReply);
    return;
  }
  port.on('message', (message: RunMessage) => {
    void run(session, message);
  });
  port.postMessage({ kind: 'ready' } satisfies WorkerReply);
}

async function run(session: ort.InferenceSession, message: RunMessage): Promise<void> {
  try {
    const feeds: Record<string, ort.Tensor> = {};
    for (const t of message.feeds) feeds[t.name] = toOrtTensor(t);
    const start = process.hrtime.bigint();
    const results = await session.run(feeds, message.fetches);
    const inferNs = Number(process.hrtime.bigint() - start);
    const transfer: ArrayBuffer[] = [];
    const outputs = message.fetches.map((name) => fromOrtTensor(name, results[name]!, transfer));
    for (const t of Object.values(feeds)) t.dispose();
    for (const t of Object.values(results)) t.dispose();
    port.postMessage({ kind: 'result', id: message.id, outputs, inferNs } satisfies WorkerReply, transfer);
  } catch (err) {
    port.postMessage({
      kind: 'run-error',
      id: message.id,
      message: err instanceof Error ? err.message : String(err),
    } satisfies WorkerReply);
  }
}

void main();
