/**
 * onnxruntime-node's session without its promise wrapper, and the tensor conversions around it.
 * Shared by the session worker (`session-worker.ts`) and by instances that run on the event
 * loop's thread (`onnxruntime-backend.ts`, `execution_thread`).
 *
 * `run()` is synchronous native work on the calling thread: the binding's public `run()` only
 * defers the same call to `setImmediate`. With `intraOpNumThreads` 1 the calling thread computes
 * alone; with more, it computes with the session's pool and waits for it. Either way the caller's
 * thread is blocked for the whole run.
 */
import { createRequire } from 'node:module';
import type * as ort from 'onnxruntime-node';
import { NereidError } from '@nereid/protocol';
import type { OrtTensorType } from './ort-types.js';
import type { SessionWorkerOptions } from './worker-protocol.js';

const requireHere = createRequire(import.meta.url);
let ortModule: typeof ort | undefined;

/**
 * onnxruntime-node, loaded at its first use: a server that loads no ONNX model starts and
 * serves without it (a copy of the server carried without node_modules, for example). Throws
 * BACKEND_UNSUPPORTED when it is not installed.
 */
export function ortLibrary(): typeof ort {
  if (ortModule !== undefined) return ortModule;
  try {
    ortModule = requireHere('onnxruntime-node') as typeof ort;
  } catch (err) {
    throw new NereidError('BACKEND_UNSUPPORTED', `the onnxruntime backend needs onnxruntime-node, which cannot be loaded: ${(err as Error).message.split('\n')[0]}`, { cause: err });
  }
  return ortModule;
}

/** The ONNX Runtime version of the installed onnxruntime-node, as it reports it. */
export function onnxRuntimeVersion(): string {
  const { env } = ortLibrary();
  return env.versions.node ?? env.versions.common;
}

const decoder = new TextDecoder();
const encoder = new TextEncoder();

/** A tensor as the native binding returns it (an `ort.Tensor` or a plain record). */
export interface RawTensor {
  type: string;
  dims: readonly number[];
  data: unknown;
}

interface NativeBindingSession {
  loadModel(path: string, options: object): void;
  run(feeds: Record<string, ort.Tensor>, fetches: Record<string, null>, options: object): Record<string, RawTensor>;
  dispose(): void;
}

/** A loaded session whose `run` computes on the calling thread and returns when done. */
export interface SyncSession {
  /** How long ONNX Runtime took to load the model (ns). */
  readonly loadNs: number;
  /** Throws ONNX Runtime's error (an `Error`) when the run fails. */
  run(feeds: Record<string, ort.Tensor>, fetches: readonly string[]): Record<string, RawTensor>;
  /** Releases the session's native memory and threads; the session is unusable afterwards. */
  dispose(): void;
}

let nativeClass: (new () => NativeBindingSession) | null | undefined;

/**
 * The binding's native session class, when the binding has the expected shape (it is not a
 * public API); undefined otherwise, and callers fall back to the public, promise-based API.
 */
function nativeSessionClass(): (new () => NativeBindingSession) | undefined {
  if (nativeClass !== undefined) return nativeClass ?? undefined;
  nativeClass = null;
  try {
    const mod = requireHere('onnxruntime-node/dist/binding.js') as {
      binding?: { InferenceSession?: new () => NativeBindingSession };
      initOrt?: () => void;
    };
    const Native = mod.binding?.InferenceSession;
    if (typeof mod.initOrt !== 'function' || typeof Native !== 'function') return undefined;
    const proto = Native.prototype as Partial<NativeBindingSession>;
    if (typeof proto.loadModel !== 'function' || typeof proto.run !== 'function' || typeof proto.dispose !== 'function') return undefined;
    mod.initOrt();
    nativeClass = Native;
    return Native;
  } catch {
    return undefined;
  }
}

/** Whether synchronous sessions are available with this onnxruntime-node. */
export function syncSessionsAvailable(): boolean {
  return nativeSessionClass() !== undefined;
}

/** The session options ONNX Runtime gets for `options`. */
export function ortSessionOptions(options: SessionWorkerOptions): ort.InferenceSession.SessionOptions {
  return {
    intraOpNumThreads: options.intraOpNumThreads,
    interOpNumThreads: options.interOpNumThreads,
    graphOptimizationLevel: options.graphOptimizationLevel,
    executionMode: options.executionMode,
    enableCpuMemArena: options.enableCpuMemArena,
    enableMemPattern: options.enableMemPattern,
    // The intra-op pool's threads stop spinning when a run returns (they still spin between the
    // parallel sections of a run). Between runs the session's thread hands results on and waits
    // for the next batch; threads spinning meanwhile take the cores the main thread needs to
    // receive and answer requests (measured on the MLP example at batch 14: about 190 µs of
    // spinning per request, more than the run itself).
    extra: { session: { force_spinning_stop: '1' } },
  };
}

/**
 * Loads the model on this thread, synchronously. Returns undefined when the binding does not
 * offer synchronous sessions (see `syncSessionsAvailable`); throws ONNX Runtime's load error.
 */
export function loadSyncSession(options: SessionWorkerOptions): SyncSession | undefined {
  const Native = nativeSessionClass();
  if (Native === undefined) return undefined;
  const native = new Native();
  const start = process.hrtime.bigint();
  native.loadModel(options.modelPath, ortSessionOptions(options));
  const loadNs = Number(process.hrtime.bigint() - start);
  const noOptions = {};
  return {
    loadNs,
    run(feeds, fetches) {
      const wanted: Record<string, null> = {};
      for (const name of fetches) wanted[name] = null;
      return native.run(feeds, wanted, noOptions);
    },
    dispose() {
      native.dispose();
    },
  };
}

function decodeStrings(bytes: Uint8Array): string[] {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const out: string[] = [];
  let offset = 0;
  while (offset < bytes.byteLength) {
    const length = view.getUint32(offset, true);
    offset += 4;
    out.push(decoder.decode(bytes.subarray(offset, offset + length)));
    offset += length;
  }
  return out;
}

function encodeStrings(values: readonly string[]): Uint8Array {
  const parts = values.map((v) => encoder.encode(v));
  let total = 0;
  for (const p of parts) total += 4 + p.byteLength;
  const bytes = new Uint8Array(total);
  const view = new DataView(bytes.buffer);
  let offset = 0;
  for (const p of parts) {
    view.setUint32(offset, p.byteLength, true);
    bytes.set(p, offset + 4);
    offset += 4 + p.byteLength;
  }
  return bytes;
}

type TypedArrayClass = { new (buffer: ArrayBufferLike, byteOffset: number, length: number): ArrayBufferView; BYTES_PER_ELEMENT: number };

const ARRAY_OF: Record<Exclude<OrtTensorType, 'string'>, TypedArrayClass> = {
  bool: Uint8Array,
  uint8: Uint8Array,
  int8: Int8Array,
  uint16: Uint16Array,
  int16: Int16Array,
  float16: Uint16Array,
  uint32: Uint32Array,
  int32: Int32Array,
  float32: Float32Array,
  uint64: BigUint64Array,
  int64: BigInt64Array,
  float64: Float64Array,
};

/**
 * An ONNX Runtime tensor over `bytes` (BYTES: 4-byte length-prefixed elements). Numeric data is
 * viewed in place when aligned for its element type and copied otherwise; the tensor must not
 * outlive `bytes`' contents (a run reads its inputs before it returns).
 */
export function toOrtTensor(type: OrtTensorType, dims: readonly number[], bytes: Uint8Array): ort.Tensor {
  const { Tensor } = ortLibrary();
  if (type === 'string') return new Tensor('string', decodeStrings(bytes), dims);
  const Array = ARRAY_OF[type];
  const size = Array.BYTES_PER_ELEMENT;
  // `new Uint8Array(view)` copies; `slice()` would not for a Buffer.
  const aligned = bytes.byteOffset % size === 0 ? bytes : new Uint8Array(bytes);
  const data = new Array(aligned.buffer, aligned.byteOffset, aligned.byteLength / size);
  return new Tensor(type, data as ort.Tensor.DataTypeMap[typeof type], dims);
}

/** The bytes of an output tensor: a view over its data, or the BYTES encoding of its strings. */
export function outputBytes(tensor: RawTensor): Uint8Array {
  if (tensor.type === 'string') return encodeStrings(tensor.data as string[]);
  const view = tensor.data as ArrayBufferView;
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}
