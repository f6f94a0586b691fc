/**
 * Messages between an ONNX Runtime instance (main thread) and its session worker thread.
 * Tensor bytes travel as transferred ArrayBuffers (moved, not copied).
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
  /** Raw bytes; for 'string' tensors the 4-byte length-prefixed element encoding. */
  data: ArrayBuffer;
}

export interface RunMessage {
  kind: 'run';
  id: number;
  feeds: WireTensor[];
  fetches: string[];
}

export type WorkerReply =
  | { kind: 'ready' }
  | { kind: 'init-error'; message: string }
  | { kind: 'result'; id: number; outputs: WireTensor[]; inferNs: number }
  | { kind: 'run-error'; id: number; message: string };
