/**
 * Messages between a worker-thread backend instance (`worker-backend.ts`, main thread) and its
 * worker (`worker-host.ts`). Tensor bytes travel in one transferred ArrayBuffer per message, as
 * (offset, length) ranges of it. Each side sends arrays of messages.
 */
import type { DataType, ParameterValue } from '@nereid/protocol';
import type { ModelConfig } from '../../config/model-config.js';
import type { InstanceSpec } from '../spi.js';

export interface WorkerInit {
  /** The backend module's URL (with its content hash, see `versionedModuleUrl`). */
  readonly moduleUrl: string;
  /** The module file, for error messages and the CommonJS cache. */
  readonly modulePath: string;
  readonly backend: string;
  readonly model: {
    readonly name: string;
    readonly version: number;
    readonly config: ModelConfig;
    readonly modelDirectory: string;
    readonly versionDirectory: string;
    readonly modelPath: string;
    readonly backendConfig: Readonly<Record<string, string>>;
  };
  readonly spec: InstanceSpec;
  /** The server's verbose level when the worker started (`Logger.isVerbose` in the worker). */
  readonly verboseLevel: number;
}

export interface TensorRange {
  readonly name: string;
  readonly datatype: DataType;
  readonly shape: readonly number[];
  readonly offset: number;
  readonly length: number;
}

export interface WireError {
  readonly code: string;
  readonly message: string;
}

export interface WireRequest {
  readonly id: string;
  readonly inputs: readonly TensorRange[];
  readonly requestedOutputs: readonly string[];
  readonly parameters: Readonly<Record<string, ParameterValue>>;
  readonly batchSize: number;
  readonly aborted: boolean;
}

/** Timing marks (process.hrtime.bigint() readings; one clock for every thread). */
export interface WireMarks {
  computeStart?: bigint;
  inputsReady?: bigint;
  outputsStart?: bigint;
  computeEnd?: bigint;
}

export type ToWorker =
  | { readonly type: 'execute'; readonly exec: number; readonly requests: readonly WireRequest[]; readonly buffer: ArrayBuffer }
  | { readonly type: 'abort'; readonly exec: number; readonly index: number }
  | { readonly type: 'unload' };

export type FromWorker =
  | { readonly type: 'ready'; readonly pipelineDepth: number }
  | { readonly type: 'failed'; readonly error: WireError }
  | {
      readonly type: 'respond';
      readonly exec: number;
      readonly index: number;
      readonly final: boolean;
      readonly error?: WireError;
      readonly outputs?: readonly TensorRange[];
      readonly parameters?: Readonly<Record<string, ParameterValue>>;
      readonly buffer?: ArrayBuffer;
      /** `respond(null, final)`. */
      readonly empty?: boolean;
    }
  | { readonly type: 'done'; readonly exec: number; readonly marks: WireMarks; readonly error?: WireError }
  | { readonly type: 'log'; readonly level: 'info' | 'warning' | 'error' | 'verbose'; readonly verbose?: number; readonly message: string }
  | { readonly type: 'unloaded'; readonly error?: WireError };
