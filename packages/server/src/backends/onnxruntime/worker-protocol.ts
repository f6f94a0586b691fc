/**
 * Messages between an ONNX Runtime instance (main thread) and its session worker thread.
 * Tensor bytes travel as transferred ArrayBuffers (moved, not copied), or, for an input in a slab
 * (core/slabs.ts: memory both threads view), as the slab's id and the tensor's place in it.
 * Output buffers the main thread is done with go back to the worker as `spares`, which it copies
 * later outputs into.
 */
import type { OrtTensorType } from './ort-types.js';

/**
 * Outputs at least this large are pooled: the main thread lends them to responses and, once they
 * come back, sends them to the worker as spares to copy later outputs into (a copy into memory
 * already mapped costs less than the page faults of a fresh buffer and the collections fresh
 * external memory triggers on the main thread).
 */
export const POOLED_OUTPUT_MIN_BYTES = 256 * 1024;

export interface SessionWorkerOptions {
  modelPath: string;
  intraOpNumThreads: number;
  interOpNumThreads: number;
  graphOptimizationLevel: 'disabled' | 'basic' | 'extended' | 'all';
  executionMode: 'sequential' | 'parallel';
  enableCpuMemArena: boolean;
  enableMemPattern: boolean;
  /** Run through ONNX Runtime's C API where the model allows (native-session.ts), else the binding. */
  direct: boolean;
}

export interface WireTensor {
  name: string;
  type: OrtTensorType;
  dims: number[];
  /**
   * Raw bytes; for 'string' tensors the 4-byte length-prefixed element encoding. The tensor is
   * the first `byteLength` bytes (a spare output buffer may be larger); absent: all of them.
   * Absent for a tensor in a slab.
   */
  data?: ArrayBuffer;
  byteLength?: number;
  /**
   * An input's bytes are `byteLength` bytes at `byteOffset` of this slab (core/slabs.ts) instead
   * of `data`: the main thread owns the slab and leaves those bytes alone until the run's outcome
   * has arrived. An output's: the worker wrote them there (`RunRequest.targets`).
   */
  slab?: number;
  byteOffset?: number;
}

/** Where an output's bytes go when they fit: `byteLength` bytes at `byteOffset` of slab `slab`. */
export interface OutputTarget {
  name: string;
  slab: number;
  byteOffset: number;
  byteLength: number;
}

/** One execution: a batch's gathered inputs and the outputs to fetch. */
export interface RunRequest {
  id: number;
  feeds: WireTensor[];
  fetches: string[];
  /**
   * Outputs to be written into memory the main thread names (a client's shared-memory region,
   * `BackendRequest.outputBuffers`) instead of coming back as buffers: such an output comes back
   * as a `WireTensor` with `slab` set to the target's. One that does not fit comes back as usual.
   */
  targets?: OutputTarget[];
}

/** Runs are sent in groups: everything dispatched to the instance in one tick travels together. */
export interface RunsMessage {
  kind: 'runs';
  runs: RunRequest[];
  /**
   * Idle output buffers (transferred) for the worker to copy large outputs into, so that they
   * come back to the main thread in memory it already had instead of fresh allocations.
   */
  spares?: ArrayBuffer[];
}

/**
 * Asks the worker to release its session (native memory included) once the runs sent before have
 * finished, answer `closed`, and end.
 */
export interface CloseMessage {
  kind: 'close';
}

/** What the main thread sends. */
export type WorkerRequest = RunsMessage | CloseMessage;

export type RunOutcome =
  | {
      id: number;
      ok: true;
      outputs: WireTensor[];
      /** Monotonic timestamps (process.hrtime.bigint(), shared by all threads). */
      start: bigint;
      inputsReady: bigint;
      outputsStart: bigint;
      end: bigint;
    }
  | { id: number; ok: false; message: string };

export type WorkerReply =
  /** The session is loaded; `loadNs`: how long loading it took. */
  | { kind: 'ready'; loadNs: number }
  | { kind: 'init-error'; message: string }
  | { kind: 'results'; results: RunOutcome[] }
  | { kind: 'closed' };
