/**
 * Worker-thread entry of one ONNX Runtime instance. `InferenceSession.run()` blocks the thread
 * that calls it while the model computes, so each instance owns a worker and the event loop of
 * the main thread stays free for the network.
 *
 * Runs arrive as messages and are executed one at a time, in arrival order; each reply carries
 * the real compute timestamps, so batches queued behind another are accounted correctly.
 */
import { createRequire } from 'node:module';
import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import type { RunOutcome, RunRequest, RunsMessage, SessionWorkerOptions, WireTensor, WorkerReply, WorkerRequest } from './worker-protocol.js';

const options = workerData as SessionWorkerOptions;
const port = parentPort!;
const decoder = new TextDecoder();
const encoder = new TextEncoder();

/** A tensor as the native binding returns it (an `ort.Tensor` or a plain record). */
interface RawTensor {
  type: string;
  dims: readonly number[];
  data: unknown;
}

/** Runs the session to completion on this thread. */
type SyncRun = (feeds: Record<string, ort.Tensor>, fetches: readonly string[]) => Record<string, RawTensor>;

interface NativeSession {
  loadModel(path: string, options: object): void;
  run(feeds: Record<string, ort.Tensor>, fetches: Record<string, null>, options: object): Record<string, RawTensor>;
  dispose(): void;
}

/**
 * onnxruntime-node's public `run()` defers the (synchronous) native call to `setImmediate` and a
 * promise, which costs an event-loop turn per run. On this dedicated thread the native session
 * class is used directly when the binding has the expected shape; otherwise (undefined) the
 * public API is.
 */
function nativeSessionClass(): (new () => NativeSession) | undefined {
  try {
    const require = createRequire(import.meta.url);
    const mod = require('onnxruntime-node/dist/binding.js') as {
      binding?: { InferenceSession?: new () => NativeSession };
      initOrt?: () => void;
    };
    const Native = mod.binding?.InferenceSession;
    if (typeof mod.initOrt !== 'function' || typeof Native !== 'function') return undefined;
    const proto = Native.prototype as Partial<NativeSession>;
    if (typeof proto.loadModel !== 'function' || typeof proto.run !== 'function' || typeof proto.dispose !== 'function') return undefined;
    mod.initOrt();
    return Native;
  } catch {
    return undefined;
  }
}

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

function fromRawTensor(name: string, tensor: RawTensor): WireTensor {
  const dims = [...tensor.dims];
  if (tensor.type === 'string') {
    const data = encodeStrings(tensor.data as string[]);
    return { name, type: 'string', dims, data };
  }
  const view = tensor.data as ArrayBufferView;
  let data: ArrayBuffer;
  if (view.byteOffset === 0 && view.byteLength === view.buffer.byteLength && view.buffer instanceof ArrayBuffer) {
    data = view.buffer;
  } else {
    data = new Uint8Array(view.buffer, view.byteOffset, view.byteLength).slice().buffer;
  }
  return { name, type: tensor.type as WireTensor['type'], dims, data };
}

/**
 * Results of one message go back together, except that results which would wait longer than this
 * for the next run to end (judged by the duration of the last one) are sent at once: grouping
 * saves thread wake-ups for small models without holding back the results of slow ones.
 */
const MAX_HOLD_NS = 200_000n;

/**
 * Executes the runs of `message`, and of every message that arrived meanwhile, in order, and
 * replies with their outcomes (see MAX_HOLD_NS). Messages queued behind the current one are read
 * synchronously, so one wake-up of this thread serves everything the main thread sent meanwhile;
 * a close request read that way is returned, to be honoured after the runs before it.
 */
async function handle(
  message: RunsMessage,
  execute: (run: RunRequest) => Promise<RunOutcome> | RunOutcome,
): Promise<'close' | undefined> {
  let close: 'close' | undefined;
  let results: RunOutcome[] = [];
  let transfer: ArrayBuffer[] = [];
  let oldest = 0n;
  const flush = () => {
    port.postMessage({ kind: 'results', results } satisfies WorkerReply, transfer);
    results = [];
    transfer = [];
  };
  const queue: RunRequest[] = [...message.runs];
  for (let i = 0; i < queue.length; i++) {
    const started = process.hrtime.bigint();
    const outcome = await execute(queue[i]!);
    const now = process.hrtime.bigint();
    if (outcome.ok) for (const o of outcome.outputs) transfer.push(o.data);
    if (results.length === 0) oldest = now;
    results.push(outcome);
    if (i === queue.length - 1 && close === undefined) {
      const next = receiveMessageOnPort(port as unknown as MessagePort)?.message as WorkerRequest | undefined;
      if (next?.kind === 'runs') queue.push(...next.runs);
      else if (next?.kind === 'close') close = 'close';
    }
    // Results held back wait for the next run as well; it is expected to take as long as this one.
    if (i === queue.length - 1 || now - oldest + (now - started) > MAX_HOLD_NS) flush();
  }
  return close;
}

function outcome(run: RunRequest, results: Record<string, RawTensor>, start: bigint, inputsReady: bigint, outputsStart: bigint): RunOutcome {
  const outputs = run.fetches.map((name) => fromRawTensor(name, results[name]!));
  return { id: run.id, ok: true, outputs, start, inputsReady, outputsStart, end: process.hrtime.bigint() };
}

function failure(run: RunRequest, err: unknown): RunOutcome {
  return { id: run.id, ok: false, message: err instanceof Error ? err.message : String(err) };
}

async function main(): Promise<void> {
  const sessionOptions: ort.InferenceSession.SessionOptions = {
    intraOpNumThreads: options.intraOpNumThreads,
    interOpNumThreads: options.interOpNumThreads,
    graphOptimizationLevel: options.graphOptimizationLevel,
    executionMode: options.executionMode,
    enableCpuMemArena: options.enableCpuMemArena,
    enableMemPattern: options.enableMemPattern,
    // The intra-op pool's threads stop spinning when a run returns (they still spin between the
    // parallel sections of a run). Between runs this thread hands results to the main thread and
    // waits for the next batch; threads spinning meanwhile take the cores the main thread needs
    // to receive and answer requests (measured on the MLP example at batch 14: about 190 µs of
    // spinning per request, more than the run itself).
    extra: { session: { force_spinning_stop: '1' } },
  };
  let syncRun: SyncRun | undefined;
  let session: ort.InferenceSession | undefined;
  let native: NativeSession | undefined;
  try {
    const Native = nativeSessionClass();
    if (Native !== undefined) {
      native = new Native();
      native.loadModel(options.modelPath, sessionOptions);
      const loaded = native;
      syncRun = (feeds, fetches) => {
        const wanted: Record<string, null> = {};
        for (const name of fetches) wanted[name] = null;
        return loaded.run(feeds, wanted, {});
      };
    } else {
      session = await ort.InferenceSession.create(options.modelPath, sessionOptions);
    }
  } catch (err) {
    port.postMessage({ kind: 'init-error', message: err instanceof Error ? err.message : String(err) } satisfies WorkerReply);
    return;
  }

  let execute: (run: RunRequest) => Promise<RunOutcome> | RunOutcome;
  if (syncRun !== undefined) {
    const runSync = syncRun;
    execute = (run) => {
      const start = process.hrtime.bigint();
      try {
        const feeds: Record<string, ort.Tensor> = {};
        for (const t of run.feeds) feeds[t.name] = toOrtTensor(t);
        const inputsReady = process.hrtime.bigint();
        const results = runSync(feeds, run.fetches);
        return outcome(run, results, start, inputsReady, process.hrtime.bigint());
      } catch (err) {
        return failure(run, err);
      }
    };
  } else {
    const s = session!;
    execute = async (run) => {
      const start = process.hrtime.bigint();
      try {
        const feeds: Record<string, ort.Tensor> = {};
        for (const t of run.feeds) feeds[t.name] = toOrtTensor(t);
        const inputsReady = process.hrtime.bigint();
        const results = await s.run(feeds, run.fetches);
        return outcome(run, results, start, inputsReady, process.hrtime.bigint());
      } catch (err) {
        return failure(run, err);
      }
    };
  }
  // Releases the session's native memory now rather than whenever the thread's heap is torn
  // down, then lets the thread end.
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try {
      if (native !== undefined) native.dispose();
      else await session!.release();
    } finally {
      port.postMessage({ kind: 'closed' } satisfies WorkerReply);
      port.close();
    }
  };
  // Messages are handled strictly one after another, in arrival order.
  let chain = Promise.resolve();
  port.on('message', (message: WorkerRequest) => {
    chain = chain.then(async () => {
      if (closed) return;
      if (message.kind === 'close' || (await handle(message, execute)) === 'close') await close();
    });
  });
  port.postMessage({ kind: 'ready' } satisfies WorkerReply);
}

void main();
