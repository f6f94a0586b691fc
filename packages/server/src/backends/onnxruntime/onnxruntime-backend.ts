/**
 * The ONNX Runtime backend (`backend: "onnxruntime"`, `platform: "onnxruntime_onnx"`): every
 * instance is an `InferenceSession` on a worker thread of its own, or, for tiny models, on the
 * event loop's thread (`execution_thread`, execution-thread.ts).
 *
 * Config parameters understood (Triton's onnxruntime backend names):
 *   intra_op_thread_count, inter_op_thread_count, execution_mode (0 sequential, 1 parallel),
 *   enable_mem_arena, enable_mem_pattern; `optimization { graph { level } }`.
 * Nereid's own: execution_thread (auto, inline, worker), execution_thread_max_run_us.
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
import { defaultIntraOpThreads } from '../threads.js';
import { gatherInput, scatterOutput, unionOfRequestedOutputs } from '../batching.js';
import { BufferPool, lendViews } from '../../core/buffer-pool.js';
import { slabId, slabView } from '../../core/slabs.js';
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
import { DEFAULT_INLINE_LIMITS, InlineChoice, parseExecutionThread, type ExecutionThread, type InlineLimits } from './execution-thread.js';
import { loadSyncSession, outputBytes, syncSessionsAvailable, toFeed, type Feed, type RawTensor, type SyncSession } from './native-session.js';
import { readOnnxModelInfo } from './onnx-model-info.js';
import { fromOrtType, toOrtType } from './ort-types.js';
import { POOLED_OUTPUT_MIN_BYTES, type CloseMessage, type OutputTarget, type RunOutcome, type RunRequest, type RunsMessage, type SessionWorkerOptions, type WireTensor, type WorkerReply } from './worker-protocol.js';
import { IdMap } from '../../core/id-map.js';

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

/**
 * `execution_thread_max_run_us` (default 50): in mode `auto`, the median run time (µs) under which
 * an instance runs on the event loop's thread; the other bounds scale with it (load time: 1000×,
 * a single inline run: at least 200×).
 */
function inlineLimits(config: ModelConfig): InlineLimits {
  const us = intParameter(config, 'execution_thread_max_run_us');
  if (us === undefined) return DEFAULT_INLINE_LIMITS;
  if (us === 0) {
    throw new NereidError('CONFIG_INVALID', `model '${config.name}': parameter 'execution_thread_max_run_us' must be at least 1, got '0'`);
  }
  return {
    ...DEFAULT_INLINE_LIMITS,
    maxRunNs: us * 1000,
    maxLoadNs: us * 1_000_000,
    maxSingleRunNs: Math.max(DEFAULT_INLINE_LIMITS.maxSingleRunNs, us * 200_000),
  };
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
  const intra = intParameter(config, 'intra_op_thread_count') || defaultIntraOpThreads(cores, instanceCount);
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
    // A model with STRING tensors would load once to find out it cannot run direct (native-session.ts).
    direct: boolParameter(config, 'direct_session', true) && ![...config.input, ...config.output].some((t) => t.data_type === 'TYPE_STRING'),
  };
}

type RunSuccess = Extract<RunOutcome, { ok: true }>;

interface Pending {
  resolve: (result: RunSuccess) => void;
  reject: (error: NereidError) => void;
}

/** An output of a run, before it is split per request. */
interface RunOutput {
  name: string;
  type: string;
  dims: readonly number[];
  data: Uint8Array;
  /** Set when `data.buffer` is pooled: it is lent to the responses (`lendViews`) and comes back here. */
  pool?: BufferPool;
}

interface InlineJob {
  instance: OnnxInstance;
  requests: readonly BackendRequest[];
  timing: ExecutionTiming;
  resolve: () => void;
  reject: (error: unknown) => void;
}

/**
 * Batches an instance may hold: one computing on its worker and the next ones waiting there, so
 * the worker thread goes straight on instead of sleeping until the main thread answers (waking a
 * thread costs far more than a small model's run).
 */
const PIPELINE_DEPTH = 4;

/**
 * Idle output buffers an instance keeps for reuse (`BufferPool`): enough for a few batches of
 * megabyte-sized outputs in flight, bounded so that an instance holds little memory it does not use.
 */
const OUTPUT_POOL_BYTES = 64 * 1024 * 1024;

/**
 * Inputs at least this large reach the worker in slabs (core/slabs.ts) when the native addon is
 * built: a request's own slab (an HTTP body), or one of the instance's that a batch or a request
 * in ordinary memory is gathered into, instead of a fresh buffer transferred per run.
 */
const SLAB_FEED_MIN_BYTES = 256 * 1024;

/** Idle gather slabs an instance keeps (`#feeds`). */
const FEED_POOL_BYTES = 64 * 1024 * 1024;

/** How long an unloading instance waits for its worker to release the session. */
const CLOSE_TIMEOUT_MS = 10_000;

/**
 * One session, on a worker thread of its own or on the event loop's thread (`execution_thread`,
 * see execution-thread.ts). The worker is restarted on the next execute if its thread dies.
 * Batches are computed one at a time in call order, wherever they run: a batch that runs inline
 * while worker runs are outstanding waits for them first.
 */
class OnnxInstance implements BackendInstance {
  readonly pipelineDepth = PIPELINE_DEPTH;
  readonly #spec: InstanceSpec;
  readonly #options: SessionWorkerOptions;
  readonly #config: ModelConfig;
  readonly #logger: Logger;
  readonly #mode: ExecutionThread;
  readonly #limits: InlineLimits;
  readonly #what: string;
  #worker: Worker | undefined;
  #ready: Promise<void> | undefined;
  #isReady = false;
  /** Not a Map: one turning over per run chains runs for the garbage collector (core/id-map.ts). */
  #pending = new IdMap<Pending>();
  /** Settles when the last run sent to the worker has (never rejects). */
  #workerTail: Promise<unknown> = Promise.resolve();
  /**
   * Large outputs of worker runs: lent to the responses that carry them; once every view came
   * back (`returnView`), idle here until the next message to the worker takes them as spares.
   */
  readonly #outputs = new BufferPool({ maxBytes: OUTPUT_POOL_BYTES });
  /** Slabs large inputs are gathered into (`#gatherMemory`), lent to one run at a time. */
  readonly #feeds = new BufferPool({ shared: true, minBytes: SLAB_FEED_MIN_BYTES, maxBytes: FEED_POOL_BYTES });
  #outbox: RunRequest[] = [];
  #outboxTransfer: ArrayBuffer[] = [];
  #nextId = 1;
  #closing = false;
  /** Set while `unload` waits for the worker's `closed` reply. */
  #onClosed: (() => void) | undefined;
  /** The session on the event loop's thread (modes `inline`, and `auto` once chosen). */
  #inline: SyncSession | undefined;
  /**
   * Batches of every instance waiting for their inline sessions (`#runSoon`): they run in one
   * callback, so the responses of all of them leave in one write per connection.
   */
  static #inlineQueue: InlineJob[] = [];
  /** Mode `auto`: the measurements that decide (set once the worker reports its load time). */
  #choice: InlineChoice | undefined;

  constructor(spec: InstanceSpec, options: SessionWorkerOptions, config: ModelConfig, logger: Logger, mode: ExecutionThread, limits: InlineLimits) {
    this.#spec = spec;
    this.#limits = limits;
    this.#options = options;
    this.#config = config;
    this.#logger = logger;
    this.#mode = syncSessionsAvailable() ? mode : 'worker';
    this.#what = `model '${config.name}' instance '${spec.name}'`;
    if (mode === 'inline' && this.#mode === 'worker') {
      logger.warning(`model '${config.name}': execution_thread "inline" needs ONNX Runtime's synchronous session, which this onnxruntime-node lacks; running on a worker thread`);
    }
  }

  /** Where batches run now: `inline` or `worker`. */
  get executionThread(): 'inline' | 'worker' {
    return this.#mode === 'inline' || this.#choice?.inline === true ? 'inline' : 'worker';
  }

  /** Loads the session (mode `inline`) or starts the worker and waits for its session; rejects with the load error. */
  start(): Promise<void> {
    if (this.#mode === 'inline') {
      try {
        this.#inline = loadSyncSession(this.#inlineOptions());
        this.#isReady = true;
        return Promise.resolve();
      } catch (err) {
        return Promise.reject(this.#loadError(err));
      }
    }
    const worker = new Worker(WORKER_URL, { workerData: this.#options, name: `onnxruntime ${this.#spec.name}` });
    this.#worker = worker;
    this.#isReady = false;
    this.#ready = new Promise<void>((resolve, reject) => {
      worker.on('message', (reply: WorkerReply) => {
        if (reply.kind === 'results') {
          this.#onResults(reply.results);
        } else if (reply.kind === 'ready') {
          this.#isReady = true;
          if (this.#mode === 'auto') this.#choice ??= new InlineChoice(reply.loadNs, this.#limits);
          resolve();
        } else if (reply.kind === 'closed') {
          this.#onClosed?.();
        } else {
          reject(this.#loadError(reply.message));
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

  #loadError(err: unknown): NereidError {
    const message = err instanceof Error ? err.message : String(err);
    return new NereidError('MODEL_LOAD_FAILED', `model '${this.#config.name}': ONNX Runtime could not load '${this.#options.modelPath}': ${message}`);
  }

  /**
   * The inline session computes on the event loop's thread alone: a model worth intra-op threads
   * is no model to run there.
   */
  #inlineOptions(): SessionWorkerOptions {
    return { ...this.#options, intraOpNumThreads: 1, interOpNumThreads: 1 };
  }

  #onResults(results: readonly RunOutcome[]): void {
    for (const r of results) {
      const p = this.#pending.get(r.id);
      this.#pending.delete(r.id);
      if (p === undefined) continue;
      if (r.ok) p.resolve(r);
      else p.reject(this.#executeError(r.message));
    }
  }

  #executeError(message: string): NereidError {
    return new NereidError('BACKEND_ERROR', `onnxruntime execute failure for ${this.#what}: ${message}`);
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
      `ONNX Runtime worker of ${this.#what} ${why}; the instance restarts on its next request`,
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
    const result = new Promise<RunSuccess>((resolve, reject) => {
      const idle = this.#pending.size === 0;
      this.#pending.set(run.id, { resolve, reject });
      this.#outbox.push(run);
      for (const t of transfer) this.#outboxTransfer.push(t);
      if (this.#outbox.length === 1) {
        if (idle) setImmediate(() => this.#flush());
        else queueMicrotask(() => this.#flush());
      }
    });
    this.#workerTail = result.catch(() => undefined);
    return result;
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
    const spares = this.#outputs.drain();
    for (const b of spares) transfer.push(b);
    this.#worker.postMessage({ kind: 'runs', runs, ...(spares.length > 0 && { spares: [...spares] }) } satisfies RunsMessage, transfer);
  }

  async execute(batch: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    const requests = withCarriableStrings(batch, this.#config.name);
    if (requests.length === 0) return;
    if (this.#mode === 'inline') return this.#runSoon(requests, timing);
    const choice = this.#choice;
    if (choice?.inline && this.#inline !== undefined && choice.fits(inputBytes(requests))) {
      // Keeps batches in call order behind those already on the worker.
      if (this.#pending.size > 0) await this.#workerTail;
      if (choice.inline) return this.#runSoon(requests, timing);
    }
    await this.#runOnWorker(requests, timing);
  }

  /**
   * Queues a batch for the inline session. Queued batches, of this instance and of every other
   * instance of the process, run in call order in one `setImmediate` callback: an inference
   * always takes an event-loop turn, as it does on the worker, so a caller awaiting inferences in
   * a loop cannot starve timers and I/O; and the responses of every batch that ran in the
   * callback are written together when it ends (the transports write once per turn), where a
   * callback per instance wrote once per instance.
   */
  #runSoon(requests: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      OnnxInstance.#inlineQueue.push({ instance: this, requests, timing, resolve, reject });
      if (OnnxInstance.#inlineQueue.length === 1) setImmediate(OnnxInstance.#drainInline);
    });
  }

  static readonly #drainInline = (): void => {
    const jobs = OnnxInstance.#inlineQueue;
    OnnxInstance.#inlineQueue = [];
    for (const job of jobs) job.instance.#runJob(job);
  };

  #runJob(job: InlineJob): void {
    const session = this.#inline;
    if (session === undefined) {
      job.reject(new NereidError('BACKEND_ERROR', `${this.#what} was unloaded before its batch ran`));
      return;
    }
    try {
      this.#runInline(job.requests, job.timing, session);
      job.resolve();
    } catch (err) {
      job.reject(err);
    }
  }

  async #runOnWorker(requests: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    if (!this.#isReady) {
      if (this.#worker === undefined) await this.start();
      else await this.#ready;
    }
    const batching = this.#config.max_batch_size > 0;
    const feeds: WireTensor[] = [];
    const transfer: ArrayBuffer[] = [];
    const lent: ArrayBuffer[] = [];
    let bytes = 0;
    // A single request's input that lies in a slab (an HTTP body read into one) goes to the
    // worker as it is. Any other large input is gathered into a slab of the instance's, small
    // ones into a fresh buffer that is transferred (the worker cannot see the request's memory).
    // Reusing transferred feed buffers (sent back with each outcome) was measured and dropped:
    // every buffer moved into the main thread counts there as new external memory, and the extra
    // transfer per run cost more collections than the fresh allocation it saved.
    for (const name of requests[0]!.inputs.keys()) {
      const only = requests.length === 1 ? requests[0]!.inputs.get(name)! : undefined;
      const inPlace = only !== undefined && only.data.byteLength >= SLAB_FEED_MIN_BYTES && slabId(only.data.buffer) !== undefined;
      const tensor = inPlace ? { datatype: only!.datatype, shape: [...only!.shape], data: only!.data } : gatherInput(requests, name, batching, this.#gatherInto);
      const data = tensor.data;
      const type = toOrtType(tensor.datatype)!;
      bytes += data.byteLength;
      const slab = data.byteLength >= SLAB_FEED_MIN_BYTES ? slabId(data.buffer) : undefined;
      if (slab === undefined) {
        feeds.push({ name, type, dims: tensor.shape, data: data.buffer as ArrayBuffer });
        transfer.push(data.buffer as ArrayBuffer);
        continue;
      }
      feeds.push({ name, type, dims: tensor.shape, slab, byteOffset: data.byteOffset, byteLength: data.byteLength });
      if (!inPlace) lent.push(data.buffer as ArrayBuffer);
    }
    const fetches = unionOfRequestedOutputs(requests);
    const targets = requests.length === 1 ? outputTargets(requests[0]!) : undefined;
    const sent = process.hrtime.bigint();
    let result: RunSuccess;
    try {
      result = await this.#send({ id: this.#nextId++, feeds, fetches, ...(targets && { targets }) }, transfer);
    } finally {
      // The worker has finished with them (or is gone).
      for (const buffer of lent) this.#feeds.give(buffer);
    }
    const hopNs = Number(process.hrtime.bigint() - sent - (result.end - result.start));
    timing.markComputeStart(result.start);
    timing.markInputsReady(result.inputsReady);
    timing.markOutputsStart(result.outputsStart);
    const choice = this.#choice;
    if (choice !== undefined && choice.recordWorkerRun(Number(result.outputsStart - result.inputsReady), bytes, hopNs)) this.#goInline(choice);
    const outputs: RunOutput[] = [];
    for (const out of result.outputs) {
      if (out.slab !== undefined) {
        // Written into its target by the worker.
        outputs.push({ name: out.name, type: out.type, dims: out.dims, data: new Uint8Array(slabView(out.slab), out.byteOffset, out.byteLength) });
        continue;
      }
      const data = new Uint8Array(out.data!, 0, out.byteLength ?? out.data!.byteLength);
      const pool = data.byteLength >= POOLED_OUTPUT_MIN_BYTES ? this.#outputs : undefined;
      outputs.push({ name: out.name, type: out.type, dims: out.dims, data, ...(pool && { pool }) });
    }
    this.#respond(requests, outputs, timing);
  }

  /**
   * Where a batch's input is gathered: a large one into a slab from `#feeds` (given back once the
   * run's outcome is in), a small one, or any without the addon, into a fresh buffer of its own.
   */
  readonly #gatherInto = (bytes: number): Uint8Array =>
    bytes < SLAB_FEED_MIN_BYTES ? Buffer.allocUnsafeSlow(bytes) : new Uint8Array(this.#feeds.take(bytes), 0, bytes);

  /** Mode `auto` chose inline runs: loads the inline session unless it is there already. */
  #goInline(choice: InlineChoice): void {
    try {
      this.#inline ??= loadSyncSession(this.#inlineOptions());
      if (this.#inline === undefined) choice.disable();
      else this.#logger.info(`${this.#what}: runs are shorter than the hop to the worker thread; running them on the event loop's thread`);
    } catch (err) {
      choice.disable();
      this.#logger.warning(`${this.#what}: could not load a session on the event loop's thread, runs stay on the worker: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  /**
   * Computes the batch on this thread. Single-request inputs are viewed in place; several
   * requests' inputs are gathered into one buffer.
   */
  #runInline(requests: readonly BackendRequest[], timing: ExecutionTiming, session: SyncSession): void {
    const start = process.hrtime.bigint();
    const batching = this.#config.max_batch_size > 0;
    const feeds: Record<string, Feed> = {};
    const first = requests[0]!;
    for (const [name, tensor] of first.inputs) {
      if (requests.length === 1) {
        feeds[name] = toFeed(toOrtType(tensor.datatype)!, tensor.shape, tensor.data);
      } else {
        const gathered = gatherInput(requests, name, batching);
        feeds[name] = toFeed(toOrtType(gathered.datatype)!, gathered.shape, gathered.data);
      }
    }
    const fetches = unionOfRequestedOutputs(requests);
    const inputsReady = process.hrtime.bigint();
    let results: Record<string, RawTensor>;
    try {
      results = session.run(feeds, fetches);
    } catch (err) {
      throw this.#executeError(err instanceof Error ? err.message : String(err));
    }
    const outputsStart = process.hrtime.bigint();
    timing.markComputeStart(start);
    timing.markInputsReady(inputsReady);
    timing.markOutputsStart(outputsStart);
    if (this.#choice !== undefined && !this.#choice.recordInlineRun(Number(outputsStart - inputsReady))) {
      this.#logger.info(`${this.#what}: runs are too long for the event loop's thread; running them on the worker thread`);
    }
    const outputs: RunOutput[] = [];
    for (const name of fetches) {
      const raw = results[name]!;
      outputs.push({ name, type: raw.type, dims: raw.dims, data: outputBytes(raw) });
    }
    this.#respond(requests, outputs, timing);
  }

  #respond(requests: readonly BackendRequest[], outputs: readonly RunOutput[], timing: ExecutionTiming): void {
    const batching = this.#config.max_batch_size > 0;
    const perRequest: BackendTensor[][] = requests.map(() => []);
    for (const out of outputs) {
      const tensor: BackendTensor = {
        name: out.name,
        datatype: fromOrtType(out.type)!,
        shape: out.dims.length === 0 && !batching ? scalarOutputShape(this.#config, out.name) : out.dims,
        data: out.data,
      };
      const parts = scatterOutput(tensor, requests, batching, this.#what);
      const handed: Uint8Array[] = [];
      for (let i = 0; i < requests.length; i++) {
        if (requests[i]!.requestedOutputs.includes(out.name)) {
          perRequest[i]!.push(parts[i]!);
          handed.push(parts[i]!.data);
        }
      }
      if (out.pool !== undefined) lendViews(out.pool, out.data.buffer as ArrayBuffer, handed);
    }
    timing.markComputeEnd();
    for (let i = 0; i < requests.length; i++) requests[i]!.respond({ outputs: perRequest[i]! });
  }

  /**
   * Releases the instance: the inline session is disposed of; the worker disposes of its session
   * (ONNX Runtime's native memory and threads) once the runs sent before have finished, then the
   * thread is terminated. A worker that does not answer within CLOSE_TIMEOUT_MS is terminated
   * anyway.
   */
  async unload(): Promise<void> {
    this.#closing = true;
    const inline = this.#inline;
    this.#inline = undefined;
    this.#choice?.disable();
    inline?.dispose();
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

/** Bytes of input a batch carries. */
function inputBytes(requests: readonly BackendRequest[]): number {
  let total = 0;
  for (const r of requests) for (const t of r.inputs.values()) total += t.data.byteLength;
  return total;
}

/**
 * The request's output buffers (`BackendRequest.outputBuffers`) that the worker can write into:
 * large ones in memory it views (a mapped shared-memory region, core/slabs.ts). Small outputs
 * come back with the rest of the outcome as usual.
 */
function outputTargets(request: BackendRequest): OutputTarget[] | undefined {
  if (request.outputBuffers === undefined) return undefined;
  let targets: OutputTarget[] | undefined;
  for (const [name, view] of request.outputBuffers) {
    if (view.byteLength < POOLED_OUTPUT_MIN_BYTES || !request.requestedOutputs.includes(name)) continue;
    const slab = slabId(view.buffer);
    if (slab !== undefined) (targets ??= []).push({ name, slab, byteOffset: view.byteOffset, byteLength: view.byteLength });
  }
  return targets;
}

class OnnxModel implements BackendModel {
  readonly #ctx: ModelContext;
  readonly #modelFile: string;
  /** Warnings already written: one about the model's configuration is written once, not per instance. */
  readonly #warned = new Set<string>();
  readonly #logger: Logger;

  constructor(ctx: ModelContext, modelFile: string) {
    this.#ctx = ctx;
    this.#modelFile = modelFile;
    const warned = this.#warned;
    const logger = ctx.logger;
    this.#logger = {
      info: (message) => logger.info(message),
      warning: (message) => {
        if (warned.has(message)) return;
        warned.add(message);
        logger.warning(message);
      },
      error: (message) => logger.error(message),
      verbose: (level, message) => logger.verbose(level, message),
      isVerbose: (level) => logger.isVerbose(level),
      get settings() {
        return logger.settings;
      },
      update: (settings) => logger.update(settings),
    };
  }

  async createInstance(spec: InstanceSpec): Promise<BackendInstance> {
    if (spec.kind === 'KIND_GPU') {
      throw new NereidError('CONFIG_UNSUPPORTED', `model '${this.#ctx.name}': this build of the onnxruntime backend runs on CPU only`);
    }
    const options = sessionOptions(this.#ctx.config, this.#modelFile, spec.instanceCount, this.#logger);
    const mode = parseExecutionThread(this.#ctx.name, parameter(this.#ctx.config, 'execution_thread'));
    const limits = inlineLimits(this.#ctx.config);
    const instance = new OnnxInstance(spec, options, this.#ctx.config, this.#logger, mode, limits);
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
    parseExecutionThread(ctx.name, parameter(ctx.config as ModelConfig, 'execution_thread'));
    inlineLimits(ctx.config as ModelConfig);
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
