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
import { isUtf8 } from 'node:buffer';
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
import type { CloseMessage, RunOutcome, RunRequest, RunsMessage, SessionWorkerOptions, WireTensor, WorkerReply } from './worker-protocol.js';

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

/**
 * ONNX Runtime reports a scalar output as shape []; the config describes it as dims of all 1s
 * (models-and-scheduling.md §3.4), and responses carry those dims, as Triton's backend does.
 */
function scalarOutputShape(config: ModelConfig, name: string): number[] {
  const output = config.output.find((o) => o.name === name);
  const dims = output?.reshape?.shape ?? output?.dims ?? [];
  return dims.every((d) => d === 1) ? [...dims] : [];
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

type RunSuccess = Extract<RunOutcome, { ok: true }>;

interface Pending {
  resolve: (result: RunSuccess) => void;
  reject: (error: NereidError) => void;
}

/**
 * Batches an instance may hold: one computing on its worker and the next ones waiting there, so
 * the worker thread goes straight on instead of sleeping until the main thread answers (waking a
 * thread costs far more than a small model's run).
 */
const PIPELINE_DEPTH = 4;

/** How long an unloading instance waits for its worker to release the session. */
const CLOSE_TIMEOUT_MS = 10_000;

/** One session on one worker thread; restarted on the next execute if the thread dies. */
class OnnxInstance implements BackendInstance {
  readonly pipelineDepth = PIPELINE_DEPTH;
  readonly #spec: InstanceSpec;
  readonly #options: SessionWorkerOptions;
  readonly #config: ModelConfig;
  readonly #logger: Logger;
  #worker: Worker | undefined;
  #ready: Promise<void> | undefined;
  #isReady = false;
  #pending = new Map<number, Pending>();
  #outbox: RunRequest[] = [];
  #outboxTransfer: ArrayBuffer[] = [];
  #nextId = 1;
  #closing = false;
  /** Set while `unload` waits for the worker's `closed` reply. */
  #onClosed: (() => void) | undefined;

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
    this.#isReady = false;
    this.#ready = new Promise<void>((resolve, reject) => {
      worker.on('message', (reply: WorkerReply) => {
        if (reply.kind === 'results') {
          this.#onResults(reply.results);
        } else if (reply.kind === 'ready') {
          this.#isReady = true;
          resolve();
        } else if (reply.kind === 'closed') {
          this.#onClosed?.();
        } else {
          reject(new NereidError('MODEL_LOAD_FAILED', `model '${this.#config.name}': ONNX Runtime could not load '${this.#options.modelPath}': ${reply.message}`));
          void worker.terminate();
        }
      });
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

  #onResults(results: readonly RunOutcome[]): void {
    for (const r of results) {
      const p = this.#pending.get(r.id);
      this.#pending.delete(r.id);
      if (p === undefined) continue;
      if (r.ok) p.resolve(r);
      else {
        p.reject(
          new NereidError('BACKEND_ERROR', `onnxruntime execute failure for model '${this.#config.name}' instance '${this.#spec.name}': ${r.message}`),
        );
      }
    }
  }

  #onWorkerGone(why: string): void {
    if (this.#worker === undefined) return;
    this.#worker = undefined;
    this.#ready = undefined;
    this.#isReady = false;
    this.#outbox = [];
    this.#outboxTransfer = [];
    const error = new NereidError(
      'BACKEND_ERROR',
      `ONNX Runtime worker of model '${this.#config.name}' instance '${this.#spec.name}' ${why}; the instance restarts on its next request`,
    );
    for (const p of this.#pending.values()) p.reject(error);
    this.#pending.clear();
    if (!this.#closing) this.#logger.error(error.message);
  }

  /**
   * Queues a run. Runs queued while the worker is busy follow at the end of the current tick (the
   * worker is awake, sending is cheap); runs for an idle worker wait for the end of this
   * event-loop turn, so that every request that arrived in it goes in one message and wakes the
   * worker once.
   */
  #send(run: RunRequest, transfer: ArrayBuffer[]): Promise<RunSuccess> {
    return new Promise<RunSuccess>((resolve, reject) => {
      const idle = this.#pending.size === 0;
      this.#pending.set(run.id, { resolve, reject });
      this.#outbox.push(run);
      this.#outboxTransfer.push(...transfer);
      if (this.#outbox.length === 1) {
        if (idle) setImmediate(() => this.#flush());
        else queueMicrotask(() => this.#flush());
      }
    });
  }

  #flush(): void {
    const runs = this.#outbox;
    const transfer = this.#outboxTransfer;
    this.#outbox = [];
    this.#outboxTransfer = [];
    if (runs.length === 0) return;
    if (this.#worker === undefined) {
      this.#onResults(runs.map((r) => ({ id: r.id, ok: false, message: 'the worker is not running' })));
      return;
    }
    this.#worker.postMessage({ kind: 'runs', runs } satisfies RunsMessage, transfer);
  }

  async execute(batch: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    const requests = withCarriableStrings(batch, this.#config.name);
    if (requests.length === 0) return;
    if (!this.#isReady) {
      if (this.#worker === undefined) await this.start();
      else await this.#ready;
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
    const result = await this.#send({ id: this.#nextId++, feeds, fetches }, transfer);
    timing.markComputeStart(result.start);
    timing.markInputsReady(result.inputsReady);
    timing.markOutputsStart(result.outputsStart);
    const what = `model '${this.#config.name}' instance '${this.#spec.name}'`;
    const perRequest: BackendTensor[][] = requests.map(() => []);
    for (const out of result.outputs) {
      const tensor: BackendTensor = {
        name: out.name,
        datatype: fromOrtType(out.type)!,
        shape: out.dims.length === 0 && !batching ? scalarOutputShape(this.#config, out.name) : out.dims,
        data: new Uint8Array(out.data),
      };
      const parts = scatterOutput(tensor, requests, batching, what);
      for (let i = 0; i < requests.length; i++) {
        if (requests[i]!.requestedOutputs.includes(out.name)) perRequest[i]!.push(parts[i]!);
      }
    }
    timing.markComputeEnd();
    for (let i = 0; i < requests.length; i++) requests[i]!.respond({ outputs: perRequest[i]! });
  }

  /**
   * Releases the instance: the worker disposes of its session (ONNX Runtime's native memory and
   * threads) once the runs sent before have finished, then the thread is terminated. A worker
   * that does not answer within CLOSE_TIMEOUT_MS is terminated anyway.
   */
  async unload(): Promise<void> {
    this.#closing = true;
    const worker = this.#worker;
    if (worker !== undefined && this.#isReady) {
      this.#flush();
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, CLOSE_TIMEOUT_MS);
        const done = () => {
          clearTimeout(timer);
          this.#onClosed = undefined;
          resolve();
        };
        this.#onClosed = done;
        worker.once('exit', done);
        worker.postMessage({ kind: 'close' } satisfies CloseMessage);
      });
    }
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

/**
 * The requests of `batch` whose BYTES inputs ONNX Runtime's Node binding can carry; each other
 * request is answered INPUT_BYTES_UNSUPPORTED and left out. The binding passes STRING elements
 * as JavaScript strings, so an element that is not valid UTF-8 or holds a NUL byte would reach the
 * model changed (replacement characters, or cut at the NUL) instead of failing.
 */
function withCarriableStrings(batch: readonly BackendRequest[], model: string): readonly BackendRequest[] {
  let kept: BackendRequest[] | undefined;
  for (let i = 0; i < batch.length; i++) {
    const request = batch[i]!;
    const problem = uncarriableString(request, model);
    if (problem !== undefined) {
      kept ??= batch.slice(0, i);
      request.respond(problem);
    } else if (kept !== undefined) {
      kept.push(request);
    }
  }
  return kept ?? batch;
}

function uncarriableString(request: BackendRequest, model: string): NereidError | undefined {
  for (const [name, tensor] of request.inputs) {
    if (tensor.datatype !== 'BYTES') continue;
    const data = tensor.data;
    const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
    let element = 0;
    for (let offset = 0; offset + 4 <= data.byteLength; element++) {
      const length = view.getUint32(offset, true);
      const bytes = data.subarray(offset + 4, offset + 4 + length);
      offset += 4 + length;
      const nul = bytes.indexOf(0) !== -1;
      if (nul || !isUtf8(bytes)) {
        return new NereidError(
          'INPUT_BYTES_UNSUPPORTED',
          `input '${name}' of model '${model}': element ${element} ${nul ? 'contains a NUL byte' : 'is not valid UTF-8'}, ` +
            'which the onnxruntime backend cannot pass to an ONNX STRING tensor unchanged; send UTF-8 text without NUL ' +
            'characters (for example base64-encode binary content)',
        );
      }
    }
  }
  return undefined;
}
