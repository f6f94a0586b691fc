/**
 * The ONNX Runtime backend (`backend: "onnxruntime"`, `platform: "onnxruntime_onnx"`): every
 * instance is an `InferenceSession` on a worker thread of its own.
 *
 * Config parameters understood (Triton's onnxruntime backend names):
 *   intra_op_thread_count, inter_op_thread_count, execution_mode (0 sequential, 1 parallel),
 *   enable_mem_arena, enable_mem_pattern; `optimization { graph { level } }`.
 * When intra_op_thread_count is not set, the machine's cores are divided among the model's
 * instances (ONNX Runtime's own default, all cores per session, oversubscribes the CPU as soon as
 * a model has two instances).
 */
import { availableParallelism } from 'node:os';
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { Worker } from 'node:worker_threads';
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from '../../config/model-config.js';
import type { Logger } from '../../observability/logger.js';
import { gatherInput, scatterOutput, unionOfRequestedOutputs } from '../batching.js';
import {
  BACKEND_SPI_VERSION,
  type AutoCompleteContext,
  type Backend,
  type BackendInstance,
  type BackendModel,
  type BackendRequest,
  type BackendTensor,
  type ExecutionTiming,
  type InstanceSpec,
  type ModelContext,
} from '../spi.js';
import { autoCompleteOnnxConfig, checkConfigAgainstModel } from './auto-complete.js';
import { readOnnxModelInfo } from './onnx-model-info.js';
import { fromOrtType, toOrtType } from './ort-types.js';
import type { RunMessage, SessionWorkerOptions, WireTensor, WorkerReply } from './worker-protocol.js';

const WORKER_URL = new URL('./session-worker.js', import.meta.url);

/** A `model.onnx` directory holds `model.onnx` plus external data files (§1.3). */
async function resolveModelFile(path: string, model: string): Promise<string> {
  const info = await stat(path).catch(() => undefined);
  if (info === undefined) {
    throw new NereidError('MODEL_LOAD_FAILED', `model '${model}': model file '${path}' does not exist`);
  }
  return info.isDirectory() ? join(path, 'model.onnx') : path;
}

function parameter(config: ModelConfig, key: string): string | undefined {
  return config.parameters[key]?.string_value;
}

function intParameter(config: ModelConfig, key: string): number | undefined {
  const text = parameter(config, key);
  if (text === undefined || text === '') return undefined;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 0) {
    throw new NereidError(
      'CONFIG_INVALID',
      `model '${config.name}': parameter '${key}' must be a non-negative integer, got '${text}'`,
    );
  }
  return n;
}

function boolParameter(config: ModelConfig, key: string, fallback: boolean): boolean {
  const text = parameter(config, key)?.toLowerCase();
  if (text === undefined || text === '') return fallback;
  if (['1', 'true', 'on', 'yes'].includes(text)) return true;
  if (['0', 'false', 'off', 'no'].includes(text)) return false;
  throw new NereidError('CONFIG_INVALID', `model '${config.name}': parameter '${key}' must be true or false, got '${text}'`);
}

function sessionOptions(config: ModelConfig, modelPath: string, instanceCount: number, logger: Logger): SessionWorkerOptions {
  const cores = availableParallelism();
  const intra = intParameter(config, 'intra_op_thread_count') || Math.max(1, Math.floor(cores / Math.max(1, instanceCount)));
  const inter = intParameter(config, 'inter_op_thread_count') || 1;
  if (intra * instanceCount > cores) {
    logger.warning(
      `model '${config.name}': ${instanceCount} instance(s) × intra_op_thread_count ${intra} = ${intra * instanceCount} threads on ${cores} cores; ` +
        `oversubscribed threads slow every instance down — lower intra_op_thread_count or the instance count`,
    );
  }
  const level = config.optimization?.graph?.level ?? 0;
  const mode = intParameter(config, 'execution_mode') ?? 0;
  return {
    modelPath,
    intraOpNumThreads: intra,
    interOpNumThreads: inter,
    graphOptimizationLevel: level === -1 ? 'basic' : level === 1 ? 'extended' : 'all',
    executionMode: mode === 1 ? 'parallel' : 'sequential',
    enableCpuMemArena: boolParameter(config, 'enable_mem_arena', true),
    enableMemPattern: boolParameter(config, 'enable_mem_pattern', true),
  };
}

interface Pending {
  resolve: (outputs: WireTensor[]) => void;
  reject: (error: NereidError) => void;
}

/** One session on one worker thread; restarted on the next execute if the thread dies. */
class OnnxInstance implements BackendInstance {
  readonly #spec: InstanceSpec;
  readonly #options: SessionWorkerOptions;
  readonly #config: ModelConfig;
  readonly #logger: Logger;
  #worker: Worker | undefined;
  #ready: Promise<void> | undefined;
  #pending = new Map<number, Pending>();
  #nextId = 1;
  #closing = false;

  constructor(spec: InstanceSpec, options: SessionWorkerOptions, config: ModelConfig, logger: Logger) {
    this.#spec = spec;
    this.#options = options;
    this.#config = config;
    this.#logger = logger;
  }

  /** Starts the worker and waits for its session; rejects with the load error. */
  start(): Promise<void> {
    const worker = new Worker(WORKER_URL, { workerData: this.#options, name: `onnxruntime ${this.#spec.name}` });
    this.#worker = worker;
    this.#ready = new Promise<void>((resolve, reject) => {
      const onMessage = (reply: WorkerReply) => {
        if (reply.kind === 'ready') {
          resolve();
        } else if (reply.kind === 'init-error') {
          reject(new NereidError('MODEL_LOAD_FAILED', `model '${this.#config.name}': ONNX Runtime could not load '${this.#options.modelPath}': ${reply.message}`));
          void worker.terminate();
        } else if (reply.kind === 'result') {
          const p = this.#pending.get(reply.id);
          this.#pending.delete(reply.id);
          p?.resolve(reply.outputs);
        } else if (reply.kind === 'run-error') {
          const p = this.#pending.get(reply.id);
          this.#pending.delete(reply.id);
          p?.reject(new NereidError('BACKEND_ERROR', `onnxruntime execute failure for model '${this.#config.name}' instance '${this.#spec.name}': ${reply.message}`));
        }
      };
      worker.on('message', onMessage);
      worker.once('error', (err) => {
        reject(new NereidError('MODEL_LOAD_FAILED', `model '${this.#config.name}': ONNX Runtime worker failed: ${err.message}`));
        this.#onWorkerGone(`failed: ${err.message}`);
      });
      worker.once('exit', (code) => {
        reject(new NereidError('MODEL_LOAD_FAILED', `model '${this.#config.name}': ONNX Runtime worker exited with code ${code}`));
        this.#onWorkerGone(`exited with code ${code}`);
      });
    });
    return this.#ready;
  }

  #onWorkerGone(why: string): void {
    if (this.#worker === undefined) return;
    this.#worker = undefined;
    this.#ready = undefined;
    const error = new NereidError(
      'BACKEND_ERROR',
      `ONNX Runtime worker of model '${this.#config.name}' instance '${this.#spec.name}' ${why}; the instance restarts on its next request`,
    );
    for (const p of this.#pending.values()) p.reject(error);
    this.#pending.clear();
    if (!this.#closing) this.#logger.error(error.message);
  }

  async execute(requests: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    if (this.#worker === undefined) await this.start();
    else await this.#ready;
    const worker = this.#worker;
    if (worker === undefined) {
      throw new NereidError('BACKEND_ERROR', `ONNX Runtime worker of model '${this.#config.name}' instance '${this.#spec.name}' is not running`);
    }
    const batching = this.#config.max_batch_size > 0;
    const feeds: WireTensor[] = [];
    const transfer: ArrayBuffer[] = [];
    for (const name of requests[0]!.inputs.keys()) {
      const gathered = gatherInput(requests, name, batching);
      const type = toOrtType(gathered.datatype)!;
      const data = gathered.data.buffer as ArrayBuffer;
      feeds.push({ name, type, dims: gathered.shape, data });
      transfer.push(data);
    }
    const fetches = unionOfRequestedOutputs(requests);
    timing.markInputsReady();
    const outputs = await new Promise<WireTensor[]>((resolve, reject) => {
      const id = this.#nextId++;
      this.#pending.set(id, { resolve, reject });
      worker.postMessage({ kind: 'run', id, feeds, fetches } satisfies RunMessage, transfer);
    });
    timing.markOutputsStart();
    const what = `model '${this.#config.name}' instance '${this.#spec.name}'`;
    const perRequest: BackendTensor[][] = requests.map(() => []);
    for (const out of outputs) {
      const tensor: BackendTensor = {
        name: out.name,
        datatype: fromOrtType(out.type)!,
        shape: out.dims,
        data: new Uint8Array(out.data),
      };
      const parts = scatterOutput(tensor, requests, batching, what);
      for (let i = 0; i < requests.length; i++) {
        if (requests[i]!.requestedOutputs.includes(out.name)) perRequest[i]!.push(parts[i]!);
      }
    }
    for (let i = 0; i < requests.length; i++) requests[i]!.respond({ outputs: perRequest[i]! });
  }

  async unload(): Promise<void> {
    this.#closing = true;
    const worker = this.#worker;
    this.#onWorkerGone('was unloaded');
    if (worker) await worker.terminate();
  }
}

class OnnxModel implements BackendModel {
  readonly #ctx: ModelContext;
  readonly #modelFile: string;

  constructor(ctx: ModelContext, modelFile: string) {
    this.#ctx = ctx;
    this.#modelFile = modelFile;
  }

  async createInstance(spec: InstanceSpec): Promise<BackendInstance> {
    if (spec.kind === 'KIND_GPU') {
      throw new NereidError('CONFIG_UNSUPPORTED', `model '${this.#ctx.name}': this build of the onnxruntime backend runs on CPU only`);
    }
    const options = sessionOptions(this.#ctx.config, this.#modelFile, spec.instanceCount, this.#ctx.logger);
    const instance = new OnnxInstance(spec, options, this.#ctx.config, this.#ctx.logger);
    await instance.start();
    return instance;
  }

  async unload(): Promise<void> {}
}

export const onnxRuntimeBackend: Backend = {
  name: 'onnxruntime',
  spiVersion: BACKEND_SPI_VERSION,
  defaultCpuInstanceCount: 2,

  async autoCompleteConfig(ctx: AutoCompleteContext): Promise<ModelConfig> {
    const file = await resolveModelFile(ctx.modelPath, ctx.name);
    const info = await readOnnxModelInfo(file);
    const fallback = Number(ctx.backendConfig['default-max-batch-size'] ?? 4);
    return autoCompleteOnnxConfig(ctx.config as ModelConfig, info, Number.isInteger(fallback) && fallback >= 0 ? fallback : 4, ctx.logger);
  },

  async createModel(ctx: ModelContext): Promise<BackendModel> {
    const file = await resolveModelFile(ctx.modelPath, ctx.name);
    const info = await readOnnxModelInfo(file);
    checkConfigAgainstModel(ctx.config as ModelConfig, info);
    for (const t of [...ctx.config.input, ...ctx.config.output]) {
      if (t.data_type === 'TYPE_BF16') {
        throw new NereidError('CONFIG_UNSUPPORTED', `model '${ctx.name}': tensor '${t.name}' is BF16, which ONNX Runtime's node binding cannot carry`);
      }
    }
    return new OnnxModel(ctx, file);
  },
};
