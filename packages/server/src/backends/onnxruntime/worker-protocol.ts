/**
 * Messages between an ONNX Runtime instance (main thread) and its session worker thread.
 * Tensor bytes travel as transferred ArrayBuffers (moved, not copied). Feed buffers come back
 * with the run's outcome (`returned`), so the instance reuses them for later runs.
 */
import type { OrtTensorType } from './ort-types.js';

export interface SessionWorkerOptions {
  modelPath: string;
  intraOpNumThreads: number;
  interOpNumThreads: number;
  graphOptimizationLevel: 'disabled' | 'basic' | 'extended' | 'all';
  executionMode: 'sequential' | 'parallel';
  enableCpuMemArena: boolean;
  enableMemPattern: boolean;
}

export interface WireTensor {
  name: string;
  type: OrtTensorType;
  dims: number[];
  /**
   * Raw bytes; for 'string' tensors the 4-byte length-prefixed element encoding. The tensor is
   * the first `byteLength` bytes (a pooled feed buffer may be larger); absent: all of them.
   */
  data: ArrayBuffer;
  byteLength?: number;
}

/** One execution: a batch's gathered inputs and the outputs to fetch. */
export interface RunRequest {
  id: number;
  feeds: WireTensor[];
  fetches: string[];
}

/** Runs are sent in groups: everything dispatched to the instance in one tick travels together. */
export interface RunsMessage {
  kind: 'runs';
  runs: RunRequest[];
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
      /** The run's feed buffers, transferred back once ONNX Runtime is done with them. */
      returned: ArrayBuffer[];
    }
  | { id: number; ok: false; message: string; returned?: ArrayBuffer[] };

export type WorkerReply =
  /** The session is loaded; `loadNs`: how long loading it took. */
  | { kind: 'ready'; loadNs: number }
  | { kind: 'init-error'; message: string }
  | { kind: 'results'; results: RunOutcome[] }
  | { kind: 'closed' };
