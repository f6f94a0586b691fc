/**
 * ONNX Runtime sessions that compute on the calling thread, and the tensor conversions around
 * them. Shared by the session worker (`session-worker.ts`) and by instances that run on the event
 * loop's thread (`onnxruntime-backend.ts`, `execution_thread`).
 *
 * Two kinds, the same `SyncSession`:
 *   - direct: ONNX Runtime's C API called by Nereid's native addon (packages/server/native/ort.c),
 *     on the library onnxruntime-node ships. For a small model it costs a fraction of the
 *     binding's run (Triton's `simple`: about 13 µs against 35). Models whose inputs and outputs
 *     are all numeric tensors get it, unless the model parameter `direct_session` is false or the
 *     addon is not built.
 *   - binding: onnxruntime-node's native session without its promise wrapper (its public `run()`
 *     only defers the same call to `setImmediate`). Every other model.
 * `run()` is synchronous native work on the calling thread. With `intraOpNumThreads` 1 the calling
 * thread computes alone; with more, it computes with the session's pool and waits for it. Either
 * way the caller's thread is blocked for the whole run.
 */
import { existsSync, readdirSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import type * as ort from 'onnxruntime-node';
import { NereidError } from '@nereid/protocol';
import { nativeAddon, type NativeAddon } from '../../core/native.js';
import { onnxElemTypeToDataType } from './onnx-model-info.js';
import { toOrtType, type OrtTensorType } from './ort-types.js';
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

/** A tensor as a session returns it (an `ort.Tensor` or a plain record). */
export interface RawTensor {
  type: string;
  dims: readonly number[];
  data: unknown;
}

/** An input as a session takes it: a typed array (numeric) or the strings of a STRING tensor. */
export interface Feed {
  type: OrtTensorType;
  dims: readonly number[];
  data: ArrayBufferView | string[];
}

/** `feeds` as onnxruntime-node's tensors. */
export function ortTensors(feeds: Record<string, Feed>): Record<string, ort.Tensor> {
  const { Tensor } = ortLibrary();
  const out: Record<string, ort.Tensor> = {};
  for (const name in feeds) {
    const f = feeds[name]!;
    out[name] = new Tensor(f.type, f.data as ort.Tensor.DataTypeMap[typeof f.type], f.dims);
  }
  return out;
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
  /** Which kind it is (see the top of this file). */
  readonly kind: 'direct' | 'binding';
  /** Throws ONNX Runtime's error (an `Error`) when the run fails. */
  run(feeds: Record<string, Feed>, fetches: readonly string[]): Record<string, RawTensor>;
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

/**
 * Session configuration entries every session gets. ONNX Runtime's intra-op pool's threads stop
 * spinning when a run returns (they still spin between the parallel sections of a run). Between
 * runs the session's thread hands results on and waits for the next batch; threads spinning
 * meanwhile take the cores the main thread needs to receive and answer requests (measured on the
 * MLP example at batch 14: about 190 µs of spinning per request, more than the run itself).
 */
const SESSION_CONFIG = ['session.force_spinning_stop', '1'];

/** The session options ONNX Runtime gets for `options`. */
export function ortSessionOptions(options: SessionWorkerOptions): ort.InferenceSession.SessionOptions {
  return {
    intraOpNumThreads: options.intraOpNumThreads,
    interOpNumThreads: options.interOpNumThreads,
    graphOptimizationLevel: options.graphOptimizationLevel,
    executionMode: options.executionMode,
    enableCpuMemArena: options.enableCpuMemArena,
    enableMemPattern: options.enableMemPattern,
    // SESSION_CONFIG (the binding joins the keys with dots).
    extra: { session: { force_spinning_stop: '1' } },
  };
}

/**
 * Loads the model on this thread, synchronously: a direct session where it can be one (see the
 * top of this file), else the binding's. Returns undefined when neither is available (the binding
 * does not offer synchronous sessions: `syncSessionsAvailable`); throws ONNX Runtime's load error.
 */
export function loadSyncSession(options: SessionWorkerOptions): SyncSession | undefined {
  if (options.direct) {
    const direct = loadDirectSession(options);
    if (direct !== undefined) return direct;
  }
  const Native = nativeSessionClass();
  if (Native === undefined) return undefined;
  const native = new Native();
  const start = process.hrtime.bigint();
  native.loadModel(options.modelPath, ortSessionOptions(options));
  const loadNs = Number(process.hrtime.bigint() - start);
  const noOptions = {};
  return {
    kind: 'binding',
    loadNs,
    run(feeds, fetches) {
      const wanted: Record<string, null> = {};
      for (const name of fetches) wanted[name] = null;
      return native.run(ortTensors(feeds), wanted, noOptions);
    },
    dispose() {
      native.dispose();
    },
  };
}

/** ONNX's element type numbers (TensorProto.DataType) of the numeric types, both ways. */
const TYPE_OF_ELEMENT = new Map<number, OrtTensorType>();
for (let n = 0; n < 32; n++) {
  const datatype = onnxElemTypeToDataType(n);
  const type = datatype === undefined ? undefined : toOrtType(datatype);
  if (type !== undefined && type !== 'string') TYPE_OF_ELEMENT.set(n, type);
}
const ELEMENT_TYPE = new Map([...TYPE_OF_ELEMENT].map(([n, type]) => [type, n]));
/** Numbers per output in the run's `meta` (ort.c: its type, its rank, up to 64 dimensions). */
const META_STRIDE = 66;
const LEVEL: Record<SessionWorkerOptions['graphOptimizationLevel'], number> = { disabled: 0, basic: 1, extended: 2, all: 99 };

let direct: NativeAddon | null | undefined;

/**
 * The addon's direct calls, opened on the libonnxruntime beside onnxruntime-node's binding (the
 * library the binding already loaded, so there is one ONNX Runtime in the process); undefined
 * when the addon is not built or the library is not where the binding keeps it.
 */
function directRuntime(): NativeAddon | undefined {
  if (direct !== undefined) return direct ?? undefined;
  direct = null;
  const addon = nativeAddon();
  if (addon === undefined || process.platform !== 'linux') return undefined;
  try {
    ortLibrary();
    const bin = join(dirname(requireHere.resolve('onnxruntime-node/package.json')), 'bin');
    const library = readdirSync(bin)
      .filter((d) => d.startsWith('napi-v'))
      .map((d) => join(bin, d, process.platform, process.arch, 'libonnxruntime.so.1'))
      .find((path) => existsSync(path));
    if (library === undefined) return undefined;
    addon.ortInit(library);
    direct = addon;
  } catch {
    return undefined;
  }
  return direct;
}

/**
 * A direct session for the model, or undefined when one cannot be had here (no addon) or the model
 * has an input or output that is not a numeric tensor. Throws ONNX Runtime's load error.
 */
function loadDirectSession(options: SessionWorkerOptions): SyncSession | undefined {
  const runtime = directRuntime();
  if (runtime === undefined) return undefined;
  const start = process.hrtime.bigint();
  const model = runtime.ortLoad(
    options.modelPath,
    options.intraOpNumThreads,
    options.interOpNumThreads,
    LEVEL[options.graphOptimizationLevel],
    options.executionMode === 'parallel',
    options.enableCpuMemArena,
    options.enableMemPattern,
    SESSION_CONFIG,
  );
  const loadNs = Number(process.hrtime.bigint() - start);
  if (![...model.inputTypes, ...model.outputTypes].every((t) => TYPE_OF_ELEMENT.has(t))) {
    runtime.ortRelease(model.session);
    return undefined;
  }
  const inputIndex = new Map(model.inputs.map((name, i) => [name, i]));
  const outputIndex = new Map(model.outputs.map((name, i) => [name, i]));
  const meta = new Float64Array(META_STRIDE * model.outputs.length);
  const session = model.session;
  return {
    kind: 'direct',
    loadNs,
    run(feeds, fetches) {
      if (fetches.length === 0) return {};
      const inputs: unknown[] = [];
      for (const name in feeds) {
        const index = inputIndex.get(name);
        if (index === undefined) throw new Error(`'${name}' is not an input of the model (its inputs: ${model.inputs.join(', ')})`);
        const feed = feeds[name]!;
        inputs.push(index, ELEMENT_TYPE.get(feed.type) ?? 0, feed.dims, feed.data);
      }
      const wanted = new Uint32Array(fetches.length);
      for (let k = 0; k < fetches.length; k++) {
        const index = outputIndex.get(fetches[k]!);
        if (index === undefined) throw new Error(`'${fetches[k]}' is not an output of the model (its outputs: ${model.outputs.join(', ')})`);
        wanted[k] = index;
      }
      const buffers = runtime.ortRun(session, inputs, wanted, meta);
      const results: Record<string, RawTensor> = {};
      for (let k = 0; k < fetches.length; k++) {
        const at = k * META_STRIDE;
        const rank = meta[at + 1]!;
        const dims: number[] = [];
        for (let d = 0; d < rank; d++) dims.push(meta[at + 2 + d]!);
        results[fetches[k]!] = { type: TYPE_OF_ELEMENT.get(meta[at]!)!, dims, data: new Uint8Array(buffers[k]!) };
      }
      return results;
    },
    dispose() {
      runtime.ortRelease(session);
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
 * A session input over `bytes` (BYTES: 4-byte length-prefixed elements). Numeric data is viewed
 * in place when aligned for its element type and copied otherwise; the input must not outlive
 * `bytes`' contents (a run reads its inputs before it returns).
 */
export function toFeed(type: OrtTensorType, dims: readonly number[], bytes: Uint8Array): Feed {
  if (type === 'string') return { type, dims, data: decodeStrings(bytes) };
  const Array = ARRAY_OF[type];
  const size = Array.BYTES_PER_ELEMENT;
  // `new Uint8Array(view)` copies; `slice()` would not for a Buffer.
  const aligned = bytes.byteOffset % size === 0 ? bytes : new Uint8Array(bytes);
  return { type, dims, data: new Array(aligned.buffer, aligned.byteOffset, aligned.byteLength / size) };
}

/** The bytes of an output tensor: a view over its data, or the BYTES encoding of its strings. */
export function outputBytes(tensor: RawTensor): Uint8Array {
  if (tensor.type === 'string') return encodeStrings(tensor.data as string[]);
  const view = tensor.data as ArrayBufferView;
  return new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
}
