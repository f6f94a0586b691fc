/**
 * Worker-thread custom backends: a backend module whose `execute` runs off the main event loop,
 * one worker thread per instance (docs/backends.md, "Worker threads").
 *
 * Contracts:
 * - Each instance's worker imports the module and calls its `createModel` and then
 *   `createInstance` once: model-level state is per instance, not shared between instances.
 * - Requests of a batch are copied once into one fresh buffer that is transferred to the worker;
 *   each response's outputs are copied once into a fresh buffer that is transferred back.
 * - An instance holds up to four batches: one executing in the worker and the next waiting there.
 *   The worker runs them one at a time, in order, and reports their real compute times.
 * - A worker that dies (an uncaught exception, `process.exit`) fails the requests it held with an
 *   error naming the model, instance and module; the next request starts a new worker.
 */
import { isAbsolute } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { Worker } from 'node:worker_threads';
import { ERROR_CODES, NereidError, type ErrorCode } from '@nereid/protocol';
import type { Logger } from '../../observability/logger.js';
import type { AutoCompleteContext, Backend, BackendInstance, BackendModel, BackendRequest, ExecutionTiming, InstanceSpec, ModelContext } from '../spi.js';
import { BACKEND_SPI_VERSION } from '../spi.js';
import type { ModelConfig } from '../../config/model-config.js';
import { describeModule } from './module-loader.js';
import { watchAbort } from '../../core/abort-watch.js';
import { IdMap } from '../../core/id-map.js';
import type { FromWorker, TensorRange, ToWorker, WireError, WireRequest, WorkerInit } from './worker-protocol.js';

const HOST_URL = new URL('./worker-host.js', import.meta.url);
/** How long an unloading instance waits for its worker's `unload`. */
const UNLOAD_TIMEOUT_MS = 10_000;
/** Batches an instance holds: one executing in the worker, the next ones waiting there. */
const PIPELINE_DEPTH = 4;

export interface WorkerBackendOptions {
  /** The backend name models ask for (`backend: "<name>"`). */
  readonly name: string;
  /** Runs on the main thread, when auto-complete is enabled. */
  readonly autoCompleteConfig?: (ctx: AutoCompleteContext) => Promise<ModelConfig>;
  readonly defaultCpuInstanceCount?: number;
}

function fromWire(error: WireError): NereidError {
  const code = (error.code in ERROR_CODES ? error.code : 'BACKEND_ERROR') as ErrorCode;
  return new NereidError(code, error.message);
}

/**
 * A `Backend` whose instances each run the backend module at `module` (a `file:` URL or an
 * absolute path; the module exports a `Backend` or factory as for any custom backend) in a
 * worker thread of their own.
 */
export function runInWorkers(module: string | URL, options: WorkerBackendOptions): Backend {
  const url = module instanceof URL ? module.href : isAbsolute(module) ? pathToFileURL(module).href : module;
  if (!url.startsWith('file:')) {
    throw new NereidError('BACKEND_MODULE_INVALID', `runInWorkers needs a file: URL or an absolute path to the backend module, got '${String(module)}'`);
  }
  const path = fileURLToPath(url.replace(/\?.*$/, ''));
  return {
    name: options.name,
    spiVersion: BACKEND_SPI_VERSION,
    ...(options.defaultCpuInstanceCount !== undefined ? { defaultCpuInstanceCount: options.defaultCpuInstanceCount } : {}),
    ...(options.autoCompleteConfig ? { autoCompleteConfig: options.autoCompleteConfig } : {}),
    createModel(ctx: ModelContext): Promise<BackendModel> {
      return Promise.resolve({
        async createInstance(spec: InstanceSpec): Promise<BackendInstance> {
          const instance = new WorkerInstance(
            {
              moduleUrl: url,
              modulePath: path,
              backend: options.name,
              model: {
                name: ctx.name,
                version: ctx.version,
                config: ctx.config,
                modelDirectory: ctx.modelDirectory,
                versionDirectory: ctx.versionDirectory,
                modelPath: ctx.modelPath,
                backendConfig: ctx.backendConfig,
              },
              spec,
              verboseLevel: ctx.logger.settings.verboseLevel,
            },
            ctx.logger,
          );
          await instance.start();
          return instance;
        },
        unload: () => Promise.resolve(),
      });
    },
  };
}

interface Execution {
  readonly requests: readonly BackendRequest[];
  readonly timing: ExecutionTiming;
  readonly resolve: () => void;
  readonly reject: (error: NereidError) => void;
  readonly cleanup: () => void;
}

class WorkerInstance implements BackendInstance {
  readonly pipelineDepth = PIPELINE_DEPTH;
  readonly #init: WorkerInit;
  readonly #logger: Logger;
  readonly #where: string;
  #worker: Worker | undefined;
  #ready: Promise<void> | undefined;
  /** Not a Map: one turning over per execution chains executions for the garbage collector (core/id-map.ts). */
  #executions = new IdMap<Execution>();
  #outbox: ToWorker[] = [];
  #outboxTransfer: ArrayBuffer[] = [];
  #nextExec = 1;
  #closing = false;
  #onUnloaded: ((error?: WireError) => void) | undefined;

  constructor(init: WorkerInit, logger: Logger) {
    this.#init = init;
    this.#logger = logger;
    this.#where = describeModule(init.model.name, init.backend, init.modulePath);
  }

  /** Starts the worker; resolves once its model and instance exist, rejects with the load error. */
  start(): Promise<void> {
    const worker = new Worker(HOST_URL, { workerData: this.#init, name: `${this.#init.backend} ${this.#init.spec.name}` });
    this.#worker = worker;
    this.#ready = new Promise<void>((resolve, reject) => {
      worker.on('message', (messages: FromWorker[]) => {
        for (const message of messages) {
          if (message.type === 'ready') resolve();
          else if (message.type === 'failed') {
            // The worker ends itself; its exit is not a crash to report.
            if (this.#worker === worker) this.#worker = undefined;
            this.#ready = undefined;
            reject(fromWire(message.error));
          } else this.#onMessage(message);
        }
      });
      const gone = (why: string) => {
        reject(new NereidError('MODEL_LOAD_FAILED', `${this.#where}: the worker thread of instance '${this.#init.spec.name}' ${why} while loading`));
        this.#onWorkerGone(worker, why);
      };
      worker.once('error', (err) => gone(`failed: ${err.name}: ${err.message}`));
      worker.once('exit', (code) => gone(`exited with code ${code}`));
    });
    return this.#ready;
  }

  /** Starts a worker in place of one that died; its failure is an execution error. */
  async #restart(): Promise<void> {
    try {
      await this.start();
    } catch (err) {
      throw new NereidError('BACKEND_ERROR', `${this.#where}: could not restart instance '${this.#init.spec.name}': ${(err as Error).message}`, { cause: err });
    }
  }

  #onMessage(message: FromWorker): void {
    switch (message.type) {
      case 'respond': {
        const request = this.#executions.get(message.exec)?.requests[message.index];
        if (request === undefined) return;
        if (message.error) request.respond(fromWire(message.error), true);
        else if (message.empty) request.respond(null, message.final);
        else {
          const buffer = message.buffer!;
          const outputs = message.outputs!.map((r: TensorRange) => ({
            name: r.name,
            datatype: r.datatype,
            shape: r.shape,
            data: new Uint8Array(buffer, r.offset, r.length),
          }));
          request.respond({ outputs, parameters: message.parameters ?? {} }, message.final);
        }
        return;
      }
      case 'done': {
        const e = this.#executions.get(message.exec);
        if (e === undefined) return;
        this.#executions.delete(message.exec);
        e.cleanup();
        const m = message.marks;
        e.timing.markComputeStart(m.computeStart);
        if (m.inputsReady !== undefined) e.timing.markInputsReady(m.inputsReady);
        if (m.outputsStart !== undefined) e.timing.markOutputsStart(m.outputsStart);
        e.timing.markComputeEnd(m.computeEnd);
        if (message.error) e.reject(fromWire(message.error));
        else e.resolve();
        return;
      }
      case 'log': {
        const text = `${this.#init.backend} ${this.#init.spec.name}: ${message.message}`;
        if (message.level === 'verbose') this.#logger.verbose(message.verbose ?? 1, text);
        else this.#logger[message.level](text);
        return;
      }
      case 'unloaded':
        this.#onUnloaded?.(message.error);
        return;
      default:
        return;
    }
  }

  #onWorkerGone(worker: Worker, why: string): void {
    if (this.#worker !== worker) return;
    this.#worker = undefined;
    this.#ready = undefined;
    this.#outbox = [];
    this.#outboxTransfer = [];
    this.#onUnloaded?.();
    const error = new NereidError(
      'BACKEND_ERROR',
      `${this.#where}: the worker thread of instance '${this.#init.spec.name}' ${why}; the instance restarts on its next request`,
    );
    for (const e of this.#executions.values()) {
      e.cleanup();
      e.reject(error);
    }
    this.#executions.clear();
    if (!this.#closing) this.#logger.error(error.message);
  }

  async execute(requests: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    if (this.#worker === undefined) await this.#restart();
    else await this.#ready;
    // A worker that died while this call waited for it is replaced.
    if (this.#worker === undefined) await this.#restart();
    let total = 0;
    for (const r of requests) for (const t of r.inputs.values()) total += t.data.byteLength;
    const buffer = new ArrayBuffer(total);
    const bytes = new Uint8Array(buffer);
    let offset = 0;
    const wire: WireRequest[] = requests.map((r) => {
      const inputs: TensorRange[] = [];
      for (const t of r.inputs.values()) {
        bytes.set(t.data, offset);
        inputs.push({ name: t.name, datatype: t.datatype, shape: [...t.shape], offset, length: t.data.byteLength });
        offset += t.data.byteLength;
      }
      return {
        id: r.id,
        inputs,
        requestedOutputs: [...r.requestedOutputs],
        parameters: r.parameters,
        batchSize: r.batchSize,
        aborted: r.signal.aborted,
      };
    });
    const exec = this.#nextExec++;
    const unwatch = requests.map((r, index) => watchAbort(r.signal, () => this.#send({ type: 'abort', exec, index }, [])));
    const cleanup = () => unwatch.forEach((stop) => stop());
    return new Promise<void>((resolve, reject) => {
      const idle = this.#executions.size === 0;
      this.#executions.set(exec, { requests, timing, resolve, reject, cleanup });
      this.#send({ type: 'execute', exec, requests: wire, buffer }, [buffer], idle);
    });
  }

  /**
   * Queues a message for the worker. As the ONNX Runtime backend does, batches for an idle worker
   * wait for the end of this event-loop turn so that those arriving in it wake the worker once;
   * other messages go at the end of this tick. Messages keep their order.
   */
  #send(message: ToWorker, transfer: ArrayBuffer[], idle = false): void {
    this.#outbox.push(message);
    this.#outboxTransfer.push(...transfer);
    if (this.#outbox.length === 1) {
      if (idle) setImmediate(() => this.#flush());
      else queueMicrotask(() => this.#flush());
    }
  }

  /** Sends what is queued; dropped when the worker is gone (its executions were failed). */
  #flush(): void {
    const messages = this.#outbox;
    const transfer = this.#outboxTransfer;
    this.#outbox = [];
    this.#outboxTransfer = [];
    if (messages.length > 0) this.#worker?.postMessage(messages, transfer);
  }

  async unload(): Promise<void> {
    this.#closing = true;
    const worker = this.#worker;
    if (worker === undefined) return;
    await this.#ready?.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const error = await new Promise<WireError | undefined>((resolve) => {
      this.#onUnloaded = resolve;
      timer = setTimeout(() => resolve({ code: 'BACKEND_ERROR', message: `${this.#where}: instance '${this.#init.spec.name}' did not unload within ${UNLOAD_TIMEOUT_MS} ms` }), UNLOAD_TIMEOUT_MS);
      worker.postMessage([{ type: 'unload' }] satisfies ToWorker[]);
    });
    clearTimeout(timer);
    this.#onUnloaded = undefined;
    await worker.terminate();
    if (error) throw fromWire(error);
  }
}
