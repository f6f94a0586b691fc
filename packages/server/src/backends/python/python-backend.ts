/**
 * The Python backend (`backend: "python"`, a Triton `model.py`; models-and-scheduling.md §8.5)
 * and the PyTorch backend (`backend: "pytorch"` / `platform: "pytorch_libtorch"`, a TorchScript
 * `model.pt`), both run by the Python stub: one long-lived process per instance
 * (`stub-process.ts`). docs/backends.md describes configuration and the differences from Triton.
 *
 * Fault isolation: a stub that exits or is killed after its model loaded fails the requests it
 * held (`PYTHON_STUB_FAILED`, naming the model and instance) and is started again (its
 * `initialize` runs again): at once the first time, then, while it keeps dying within
 * STABLE_MS of its start, after a delay that doubles up to MAX_RESTART_DELAY_MS; requests that
 * arrive meanwhile wait for the restart. An execute that has not returned after the execute
 * timeout gets its stub killed the same way. A stub whose first `initialize` fails (or does not
 * answer within the initialize timeout) is killed and not restarted: the load fails. Unloading
 * ends every restart. Nothing else is affected: every instance is its own process.
 *
 * Settings (`--backend-config=python,<key>=<value>`, or `pytorch,<key>=<value>` for the pytorch
 * backend; global `--backend-config=<key>=<value>` settings apply to both):
 *   python-executable      interpreter (default /usr/bin/python3)
 *   execute-timeout-secs   execute time limit, 0 = none (default 0); the model parameter
 *                          EXECUTE_TIMEOUT_SECS overrides it
 *   initialize-timeout-secs  time limit of `initialize` (and `auto_complete_config`), 0 = none
 *                          (default 600); the model parameter INITIALIZE_TIMEOUT_SECS overrides it
 *   stub-timeout-seconds   time limit of a stub's start-up before `initialize` (default 30, as
 *                          Triton's python backend)
 *   unload-timeout-secs    how long executes in flight may still run once the model unloads
 *                          before their stub is killed and their requests fail (default 20)
 *   shm-region-byte-size   bytes of each shared-memory ring (default 64 MiB)
 *   busy-poll-us           how long an idle stub polls for its next message before it sleeps,
 *                          and the server's event loop for a stub's answer, while they keep
 *                          coming that soon (default 400; 0 = never; nothing polls on a
 *                          single CPU); trades idle CPU for cheaper hand-overs (loop-poll.ts)
 * Model parameter EXECUTION_ENV_PATH: a directory holding `bin/python3`, or a conda-pack style
 * `.tar.gz` of one (unpacked once), whose interpreter runs this model.
 */
import { execFile } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, renameSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { availableParallelism, tmpdir } from 'node:os';
import { isAbsolute, join, resolve as resolvePath } from 'node:path';
import { promisify } from 'node:util';
import {
  NereidError,
  toNereidError,
  elementSize,
  fromConfigDataType,
  type DataType,
  type ErrorCode,
  type ErrorKind,
  type ParameterValue,
} from '@nereid/protocol';
import { completeModelConfig, modelConfigFromJson, modelConfigToJson } from '../../config/index.js';
import type { ModelConfig } from '../../config/model-config.js';
import type { InferInput, InferRequest, InferResponse, StreamResponse } from '../../core/types.js';
import {
  BACKEND_SPI_VERSION,
  type AutoCompleteContext,
  type Backend,
  type BackendInstance,
  type BackendModel,
  type BackendRequest,
  type BackendResponse,
  type BackendTensor,
  type ExecutionTiming,
  type InstanceSpec,
  type MemoryUsageEntry,
  type ModelContext,
  NEVER_ABORTED,
} from '../spi.js';
import { defaultIntraOpThreads } from '../threads.js';
import { processMemoryBytes } from '../../core/memory.js';
import { watchAbort } from '../../core/abort-watch.js';
import { IdMap } from '../../core/id-map.js';
import { StubProcess, type StubMessage } from './stub-process.js';
import { loopSaturated } from './loop-poll.js';

/** The interpreter of the stubs (and of the CUDA shared-memory helper) when none is configured. */
export const DEFAULT_PYTHON = '/usr/bin/python3';
const DEFAULT_RING_BYTES = 64 * 1024 * 1024;

/** `pb_utils.TRITONSERVER_REQUEST_FLAG_SEQUENCE_START` / `_END`. */
const SEQUENCE_START_FLAG = 1;
const SEQUENCE_END_FLAG = 2;

/**
 * The correlation id for the stub's JSON frame: a string id as is, an integer as a JSON number,
 * or, beyond 2^53, as decimal text the stub turns back into an int (`correlation_id_int`).
 */
function correlationJson(id: bigint | string | undefined): { correlation_id: number | string; correlation_id_int?: true } {
  if (id === undefined) return { correlation_id: 0 };
  if (typeof id === 'string') return { correlation_id: id };
  return id <= BigInt(Number.MAX_SAFE_INTEGER) ? { correlation_id: Number(id) } : { correlation_id: id.toString(), correlation_id_int: true };
}

/** How long `finalize` may take at unload before the stub is killed. */
const FINALIZE_TIMEOUT_MS = 30_000;

/** A stub that ran this long before it died is restarted at once. */
const STABLE_MS = 10_000;
/** The first delay before restarting a stub that died sooner than STABLE_MS; doubled each time. */
const FIRST_RESTART_DELAY_MS = 250;
/** The longest delay between restarts of a stub that keeps dying. */
const MAX_RESTART_DELAY_MS = 10_000;

/** The delay before the restart that follows `quick` quick deaths in a row: 0, 0, 0.25 s, 0.5 s, … 10 s. */
function restartDelay(quick: number): number {
  return quick <= 1 ? 0 : Math.min(MAX_RESTART_DELAY_MS, FIRST_RESTART_DELAY_MS * 2 ** (quick - 2));
}

const DEFAULT_INITIALIZE_TIMEOUT_SECS = 600;
const DEFAULT_STUB_TIMEOUT_SECS = 30;
/** Below --exit-timeout-secs' default (30 s), so that a hung execute is answered before a shutdown gives up. */
const DEFAULT_UNLOAD_TIMEOUT_SECS = 20;
/**
 * How long an idle stub busy-polls its channel before it sleeps (transport.py, `Channel`), and the
 * event loop for an execution's answer (loop-poll.ts): a hand-over to a sleeping process costs tens
 * of microseconds per side, more in a virtual machine, and the runtime it wakes runs colder.
 * Polling continues only while messages come within it.
 */
const DEFAULT_BUSY_POLL_US = 400;

/** How long a model's `is_ready()` may take before the instance counts as not ready (§8.5). */
const IS_READY_TIMEOUT_MS = 5_000;

/**
 * What the stub runs: a `model.py`, or one of its built-in runners (nereid_stub/<runner>_model.py)
 * for TorchScript, TensorFlow and OpenVINO models (framework-backends.ts).
 */
export type Runner = 'python' | 'pytorch' | 'tensorflow' | 'openvino';

/** A tensor as it crosses the channel: name, datatype, shape (bytes placed by the ring). */
interface WireTensor {
  name: string;
  d: DataType;
  s: number[];
  o?: number;
  n?: number;
}

interface WireError {
  message: string;
  code?: number;
  /** Set when the stub made the error (a response it could not encode), not the model. */
  stub?: boolean;
}

/** pb_utils.TritonError codes (triton_python_backend_utils.py) ↔ error kinds. */
const TRITON_ERROR_CODES: readonly ErrorCode[] = [
  'MODEL_ERROR_UNKNOWN',
  'BACKEND_ERROR',
  'NOT_FOUND',
  'MODEL_ERROR_INVALID_ARG',
  'UNAVAILABLE',
  'UNSUPPORTED',
  'ALREADY_EXISTS',
  'REQUEST_CANCELLED',
];
const KIND_TO_TRITON_CODE: Readonly<Record<ErrorKind, number>> = {
  UNKNOWN: 0,
  INTERNAL: 1,
  NOT_FOUND: 2,
  INVALID_ARG: 3,
  UNAVAILABLE: 4,
  UNSUPPORTED: 5,
  ALREADY_EXISTS: 6,
  CANCELLED: 7,
};

function wireError(err: unknown): WireError {
  if (err instanceof NereidError) return { message: err.message, code: KIND_TO_TRITON_CODE[err.kind] };
  return { message: err instanceof Error ? err.message : String(err), code: 1 };
}

function settingNumber(value: string | undefined, key: string, model: string, fallback: number): number {
  if (value === undefined || value === '') return fallback;
  const n = Number(value);
  if (!Number.isFinite(n) || n < 0) {
    throw new NereidError('CONFIG_INVALID', `model '${model}': '${key}' must be a non-negative number, got '${value}'`);
  }
  return n;
}

const execFileAsync = promisify(execFile);

/**
 * The interpreter for a model: EXECUTION_ENV_PATH's (a directory, or a `.tar.gz` unpacked once
 * into the temporary directory), else `python-executable`, else /usr/bin/python3.
 */
async function interpreterFor(
  config: Readonly<ModelConfig>,
  modelDirectory: string,
  settings: Readonly<Record<string, string>>,
  defaultPython: string,
): Promise<string> {
  let envPath = config.parameters['EXECUTION_ENV_PATH']?.string_value ?? '';
  if (envPath === '') return settings['python-executable'] || defaultPython;
  envPath = envPath.replace('$$TRITON_MODEL_DIRECTORY', modelDirectory);
  if (!isAbsolute(envPath)) envPath = resolvePath(modelDirectory, envPath);
  const info = statSync(envPath, { throwIfNoEntry: false });
  if (info === undefined) {
    throw new NereidError('MODEL_LOAD_FAILED', `model '${config.name}': EXECUTION_ENV_PATH '${envPath}' does not exist`);
  }
  let root = envPath;
  if (info.isFile()) {
    const key = createHash('sha256').update(`${envPath}:${info.size}:${info.mtimeMs}`).digest('hex').slice(0, 16);
    root = join(tmpdir(), `nereid-env-${key}`);
    if (!existsSync(root)) {
      const partial = `${root}.${process.pid}.partial`;
      mkdirSync(partial, { recursive: true });
      try {
        await execFileAsync('tar', ['-xzf', envPath, '-C', partial]);
      } catch (err) {
        throw new NereidError('MODEL_LOAD_FAILED', `model '${config.name}': could not unpack EXECUTION_ENV_PATH '${envPath}': ${(err as Error).message}`);
      }
      try {
        renameSync(partial, root);
      } catch {
        // another load unpacked it first
      }
    }
  }
  const python = join(root, 'bin', 'python3');
  if (!existsSync(python)) {
    throw new NereidError('MODEL_LOAD_FAILED', `model '${config.name}': EXECUTION_ENV_PATH '${envPath}' has no bin/python3`);
  }
  return python;
}

export interface StubSettings {
  python: string;
  ringBytes: number;
  /** execute time limit, 0 = none */
  timeoutMs: number;
  /** initialize / auto_complete_config time limit, 0 = none */
  initializeTimeoutMs: number;
  /** start-up time limit of a stub, 0 = none */
  startTimeoutMs: number;
  /** how long an idle stub busy-polls its channel before it sleeps, µs; 0 = never */
  busyPollUs: number;
  /** how long executes in flight may run once the instance unloads, 0 = no limit */
  unloadTimeoutMs: number;
}

/**
 * The stub settings of a model; `defaultPython` is the interpreter when neither EXECUTION_ENV_PATH
 * nor `python-executable` names one.
 */
export async function stubSettings(
  ctx: Pick<ModelContext, 'config' | 'modelDirectory' | 'backendConfig' | 'name'>,
  defaultPython = DEFAULT_PYTHON,
): Promise<StubSettings> {
  const s = ctx.backendConfig;
  const timeoutParam = ctx.config.parameters['EXECUTE_TIMEOUT_SECS']?.string_value;
  const timeoutSecs = settingNumber(timeoutParam || s['execute-timeout-secs'], 'execute-timeout-secs', ctx.name, 0);
  const ringBytes = Math.floor(settingNumber(s['shm-region-byte-size'], 'shm-region-byte-size', ctx.name, DEFAULT_RING_BYTES));
  const initParam = ctx.config.parameters['INITIALIZE_TIMEOUT_SECS']?.string_value;
  const initSecs = settingNumber(initParam || s['initialize-timeout-secs'], 'initialize-timeout-secs', ctx.name, DEFAULT_INITIALIZE_TIMEOUT_SECS);
  const startSecs = settingNumber(s['stub-timeout-seconds'], 'stub-timeout-seconds', ctx.name, DEFAULT_STUB_TIMEOUT_SECS);
  const unloadSecs = settingNumber(s['unload-timeout-secs'], 'unload-timeout-secs', ctx.name, DEFAULT_UNLOAD_TIMEOUT_SECS);
  const busyPollUs = settingNumber(s['busy-poll-us'], 'busy-poll-us', ctx.name, DEFAULT_BUSY_POLL_US);
  return {
    python: await interpreterFor(ctx.config, ctx.modelDirectory, s, defaultPython),
    ringBytes: Math.max(4096, ringBytes),
    timeoutMs: timeoutSecs * 1000,
    initializeTimeoutMs: initSecs * 1000,
    startTimeoutMs: startSecs * 1000,
    unloadTimeoutMs: unloadSecs * 1000,
    busyPollUs,
  };
}

/**
 * Request parameters as the JSON text `request.parameters()` returns; 64-bit integers (bigint)
 * are written exactly (Python's json reads them as ints).
 */
function parametersJson(parameters: Readonly<Record<string, ParameterValue>>): string {
  const keys = Object.keys(parameters);
  if (keys.length === 0) return '{}';
  const entries = keys.map((k) => {
    const v = parameters[k]!;
    return `${JSON.stringify(k)}:${typeof v === 'bigint' ? v.toString() : JSON.stringify(v)}`;
  });
  return `{${entries.join(',')}}`;
}

/** The output of a model checked against its configuration; an error names the model and tensor. */
function checkOutput(config: Readonly<ModelConfig>, t: WireTensor, data: Uint8Array, batchSize: number): BackendTensor | NereidError {
  // An implicit-state output (sequence batching, §5.8) need not be listed in `output`.
  let spec: { data_type: string; dims: readonly number[]; reshape?: { shape: number[] } } | undefined = config.output.find((o) => o.name === t.name);
  if (spec === undefined) {
    const state = config.sequence_batching?.state.find((st) => st.output_name === t.name);
    if (state !== undefined) spec = { data_type: state.data_type, dims: state.dims };
  }
  const model = config.name;
  if (spec === undefined) {
    return new NereidError(
      'BACKEND_ERROR',
      `model '${model}' returned output '${t.name}', which is not in its configuration (outputs: ${config.output.map((o) => o.name).join(', ')})`,
    );
  }
  const expected = fromConfigDataType(spec.data_type);
  if (expected !== t.d) {
    return new NereidError(
      'BACKEND_ERROR',
      `model '${model}' returned output '${t.name}' as ${t.d}, but its configuration says ${spec.data_type}; convert it (numpy astype) before building the pb_utils.Tensor`,
    );
  }
  const dims = spec.reshape?.shape ?? spec.dims;
  const batching = config.max_batch_size > 0;
  const want = batching ? [batchSize, ...dims] : dims;
  const fits = t.s.length === want.length && t.s.every((d, i) => want[i] === -1 || want[i] === d);
  if (!fits) {
    return new NereidError(
      'BACKEND_ERROR',
      `model '${model}' returned output '${t.name}' with shape [${t.s.join(',')}], but its configuration expects [${want.join(',')}] (-1: any)`,
    );
  }
  const size = elementSize(t.d);
  if (size > 0 && data.byteLength !== t.s.reduce((a, b) => a * b, 1) * size) {
    return new NereidError('BACKEND_ERROR', `model '${model}' output '${t.name}': ${data.byteLength} bytes do not match shape [${t.s.join(',')}]`);
  }
  return { name: t.name, datatype: t.d, shape: t.s, data };
}

/** An execute the stub holds: its requests until each has its final response. */
interface HeldExecute {
  readonly requests: readonly BackendRequest[];
  readonly final: boolean[];
  readonly aborts: (() => void)[];
  done: boolean;
  settle?: { resolve(): void; reject(e: NereidError): void };
  /** Releases the instance for its next batch (`ExecutionTiming.releaseInstance`), from `done` on. */
  release?: () => void;
  timer?: NodeJS.Timeout;
  /**
   * When the stub's `done` arrived, also for an execute that raised: the end of compute_infer
   * and start of compute_output (for the statistics, as Triton's Python backend splits them).
   */
  doneAt?: bigint;
  /**
   * When the responses `done` carried were handed to their requests: the end of compute_output
   * (unset for an execute that raised: its end is when `execute` settles).
   */
  endAt?: bigint;
  /** The unload timeout's timer, armed once the instance unloads. */
  unloadTimer?: NodeJS.Timeout;
  /** A built-in runner's group (`bexec`): its `done` carries one tensor per output for all its requests. */
  batched?: boolean;
}

/**
 * What a request's inputs must share with its neighbours to be concatenated along the batch
 * dimension: names, datatypes and the shapes past it.
 */
function inputsKey(r: BackendRequest): string {
  let key = '';
  for (const t of r.inputs.values()) key += `${t.name}\0${t.datatype}\0${t.shape.slice(1).join(',')}\0`;
  return key;
}

/** The outputs a group needs: every configured one if any request asked for none, else those asked for. */
function wantedOutputs(all: readonly string[], group: readonly BackendRequest[]): readonly string[] {
  if (group.some((r) => r.requestedOutputs.length === 0)) return all;
  return [...new Set(group.flatMap((r) => r.requestedOutputs))];
}

/**
 * The end of `elements` elements of datatype `d` that start at byte `offset` of `data` (BYTES:
 * each a 4-byte little-endian length and its bytes); undefined when `data` is too short.
 */
function rowsEnd(d: DataType, data: Uint8Array, offset: number, elements: number): number | undefined {
  const size = elementSize(d);
  if (size > 0) {
    const end = offset + elements * size;
    return end <= data.byteLength ? end : undefined;
  }
  let at = offset;
  for (let e = 0; e < elements; e++) {
    if (at + 4 > data.byteLength) return undefined;
    at += 4 + (data[at]! | (data[at + 1]! << 8) | (data[at + 2]! << 16) | (data[at + 3]! << 24));
    if (at > data.byteLength) return undefined;
  }
  return at;
}

/**
 * One model instance: one stub process, restarted when it dies after a successful start (see the
 * file's comment for the delays). A decoupled model's requests stay held after execute returns,
 * until their final responses.
 */
class PythonInstance implements BackendInstance {
  /**
   * A `model.py` model gets one execute at a time, as under Triton's Python backend. A built-in
   * runner's instance also takes the next full batch while it computes one (the dynamic batcher
   * hands a busy instance only full batches): the stub, which runs its messages in order, starts
   * on it at once instead of idling while the event loop answers the first batch's requests and
   * forms the next (with 64 clients on a PyTorch MLP, 82 800 inferences/s against 47 700).
   */
  get pipelineDepth(): number {
    return this.#runner === 'python' ? 1 : 2;
  }
  readonly #ctx: ModelContext;
  readonly #spec: InstanceSpec;
  readonly #runner: Runner;
  readonly #modelFile: string;
  readonly #settings: StubSettings;
  readonly #what: string;
  /** Not a Map: one turning over per execution chains executions for the garbage collector (core/id-map.ts). */
  readonly #held = new IdMap<HeldExecute>();
  /** The stub serving the instance: started, and its `initialize` succeeded. */
  #stub: StubProcess | undefined;
  #starting: Promise<StubProcess> | undefined;
  /** The stub of a start in progress, so that unloading can stop it. */
  #startingStub: StubProcess | undefined;
  /** When the serving stub's `initialize` finished (Date.now()). */
  #servingSince = 0;
  /** Restarts in a row of stubs that died sooner than STABLE_MS after their start. */
  #quickRestarts = 0;
  /** A restart waiting for its delay, and the promise requests wait on meanwhile. */
  #restart: { timer: NodeJS.Timeout; due: Promise<void>; fire(): void } | undefined;
  #nextExec = 1;
  /** Set once the instance unloads: nothing is started again. */
  #closing = false;
  /** Whether the model's class defines `is_ready` (reported by the stub's initialize). */
  #hasIsReady = false;
  /** Whether the stub runs a built-in runner that takes whole batches (`infer`; reported by its initialize). */
  #batched = false;
  /** The configured output names: what a batch whose requests name none asks the runner for. */
  readonly #outputNames: readonly string[];
  /** The last sample of the stub's memory (`memoryUsage`). */
  #memory: readonly MemoryUsageEntry[] = [];
  /** Set by `terminate`: every request held and every later execute fails with it. */
  #terminated: NereidError | undefined;

  constructor(ctx: ModelContext, spec: InstanceSpec, runner: Runner, modelFile: string, settings: StubSettings) {
    this.#ctx = ctx;
    this.#spec = spec;
    this.#runner = runner;
    this.#modelFile = modelFile;
    this.#settings = settings;
    this.#what = `model '${ctx.name}' instance '${spec.name}'`;
    this.#outputNames = ctx.config.output.map((o) => o.name);
  }

  /**
   * Starts the stub and runs the model's `initialize`; rejects with the load error. A stub whose
   * start or `initialize` fails is killed and not started again by this call's failure: the
   * caller has the error (at load, the load fails).
   */
  start(): Promise<StubProcess> {
    this.#starting ??= (async () => {
      if (this.#closing) throw this.#unloadingError();
      const stub = await StubProcess.start({
        python: this.#settings.python,
        ringBytes: this.#settings.ringBytes,
        what: this.#what,
        logger: this.#ctx.logger,
        cwd: this.#ctx.versionDirectory,
        startTimeoutMs: this.#settings.startTimeoutMs,
        busyPollUs: this.#settings.busyPollUs,
        // The stub caps its data segment with NEREID_MEMORY_LIMIT_BYTES (a backstop against
        // allocations faster than the server's samples; docs/resources.md). A KIND_GPU instance's
        // stub sees its own device only (as cuda:0), or with `cuda_visible_devices: server` the
        // server's GPUs in its order (devices/placement.ts).
        env: {
          ...(this.#ctx.memoryLimitBytes ? { NEREID_MEMORY_LIMIT_BYTES: String(this.#ctx.memoryLimitBytes) } : {}),
          ...(this.#spec.device ? { CUDA_VISIBLE_DEVICES: this.#spec.device.cudaVisibleDevices } : {}),
        },
      });
      this.#startingStub = stub;
      stub.listen(
        (m, tensors) => this.#onMessage(stub, m, tensors),
        (why) => this.#onExit(stub, why),
      );
      const config = this.#ctx.config;
      const args: Record<string, string> = {
        model_config: JSON.stringify(modelConfigToJson(config, { emitDefaults: true, int64AsString: false })),
        model_instance_kind: this.#spec.kind === 'KIND_GPU' ? 'GPU' : this.#spec.kind === 'KIND_MODEL' ? 'MODEL' : 'CPU',
        model_instance_name: this.#spec.name,
        model_instance_device_id: String(this.#spec.deviceId),
        // The torch device index of the instance's GPU inside the stub (pytorch_model.py).
        nereid_cuda_device: String(cudaDeviceInStub(this.#spec)),
        model_repository: this.#ctx.modelDirectory,
        model_version: String(this.#ctx.version),
        model_name: this.#ctx.name,
        // The PyTorch runner's INTRA_OP_THREAD_COUNT when the model sets none (threads.ts).
        nereid_default_intra_op_threads: String(defaultIntraOpThreads(availableParallelism(), this.#spec.instanceCount)),
      };
      try {
        if (this.#closing) throw this.#unloadingError();
        const init = await stub.call(
          { t: 'init', runner: this.#runner, path: this.#modelFile, args },
          `${this.#what}: initialize failed`,
          'MODEL_LOAD_FAILED',
          this.#settings.initializeTimeoutMs,
          'initialize-timeout-secs',
        );
        this.#hasIsReady = (init as { is_ready?: unknown } | undefined)?.is_ready === true;
        this.#batched = (init as { batched?: unknown } | undefined)?.batched === true;
        if (this.#closing) throw this.#unloadingError();
      } catch (err) {
        stub.kill('was stopped after a failed initialize');
        throw err;
      } finally {
        this.#startingStub = undefined;
      }
      this.#stub = stub;
      this.#servingSince = Date.now();
      this.memoryUsage(true);
      return stub;
    })();
    const starting = this.#starting;
    starting.catch(() => {
      if (this.#starting === starting) this.#starting = undefined;
    });
    return starting;
  }

  #unloadingError(): NereidError {
    return new NereidError('PYTHON_STUB_FAILED', `${this.#what}: the instance is unloading; its Python stub is not started again`);
  }

  /** The serving stub; while a restart waits for its delay, after that restart. */
  async #running(): Promise<StubProcess> {
    if (this.#stub?.alive) return this.#stub;
    if (this.#restart !== undefined) await this.#restart.due;
    if (this.#stub?.alive) return this.#stub;
    return this.start();
  }

  /**
   * Statistics (models-and-scheduling.md §9.1), split as Triton's Python backend splits them:
   * compute_input from here until the batch's inputs are in the stub's ring and its message is
   * built, compute_infer from then until the stub's `done` arrives (telling the stub, its execute
   * and the hand-off back), compute_output from then until the responses were handed to the requests.
   */
  async execute(requests: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    timing.markComputeStart();
    if (this.#terminated !== undefined) throw this.#terminated;
    const stub = await this.#running();
    if (this.#batched) {
      await this.#executeBatched(stub, requests, timing);
      return;
    }
    const x = this.#nextExec++;
    const parts: Uint8Array[] = [];
    const descriptors: WireTensor[] = [];
    const wireRequests = requests.map((r) => {
      const inputs: WireTensor[] = [];
      for (const t of r.inputs.values()) {
        const d: WireTensor = { name: t.name, d: t.datatype, s: [...t.shape] };
        inputs.push(d);
        descriptors.push(d);
        parts.push(t.data);
      }
      const flags = (r.sequenceStart ? SEQUENCE_START_FLAG : 0) | (r.sequenceEnd ? SEQUENCE_END_FLAG : 0);
      return { id: r.id, outputs: r.requestedOutputs, parameters: parametersJson(r.parameters), ...correlationJson(r.correlationId), flags, inputs };
    });
    const held: HeldExecute = { requests, final: requests.map(() => false), aborts: [], done: false, release: () => timing.releaseInstance?.() };
    this.#held.set(x, held);
    const finished = new Promise<void>((resolve, reject) => (held.settle = { resolve, reject }));
    requests.forEach((r, i) => {
      // A request without a caller's signal (an embedder's call without one) cannot be cancelled:
      // no listener to add and remove.
      if (r.signal === NEVER_ABORTED) return;
      held.aborts.push(watchAbort(r.signal, () => stub.send({ t: 'cancel', x, r: i })));
    });
    if (this.#settings.timeoutMs > 0) {
      held.timer = setTimeout(
        () => stub.kill(`was killed because execute did not return within ${this.#settings.timeoutMs / 1000} s (execute-timeout-secs)`),
        this.#settings.timeoutMs,
      );
    }
    if (this.#closing) this.#boundByUnload(stub, held);
    // compute_input ends with the inputs in the ring and the message built; the write that wakes
    // the stub (tens of microseconds across cores) is the hand-off, in compute_infer.
    stub.send({ t: 'exec', x, model: this.#ctx.name, requests: wireRequests }, parts, descriptors as unknown as Record<string, unknown>[], () =>
      timing.markInputsReady(),
    );
    requests.forEach((r, i) => r.signal.aborted && stub.send({ t: 'cancel', x, r: i }));
    try {
      await finished;
    } finally {
      // An execute that raised splits its time as one that returned; one whose stub died has no
      // `done`, and its whole wait counts as compute_infer.
      timing.markOutputsStart(held.doneAt);
      timing.markComputeEnd(held.endAt);
    }
  }

  /**
   * A built-in runner's execute (TorchScript, TensorFlow, OpenVINO: a runner class with `infer`): the
   * batch goes to the stub as one tensor per input, the requests' bytes placed back to back in the
   * ring (no copy here), and comes back as one tensor per output, split here by each request's
   * batch size. The stub's Python work per batch is the same whatever the batch holds: a runner's
   * `infer` gets and returns numpy arrays, never request objects. Requests whose inputs do not line
   * up with the one before (other names, types or shapes past the batch dimension, as with ragged
   * inputs) start a group of their own; each group is one `infer`.
   */
  async #executeBatched(stub: StubProcess, requests: readonly BackendRequest[], timing: ExecutionTiming): Promise<void> {
    const batching = this.#ctx.config.max_batch_size > 0;
    const groups: BackendRequest[][] = [];
    let key = '';
    for (const r of requests) {
      const k = batching ? inputsKey(r) : undefined;
      if (k === undefined || k !== key || groups.length === 0) groups.push([r]);
      else groups[groups.length - 1]!.push(r);
      key = k ?? '';
    }
    const finished: Promise<void>[] = [];
    const helds: HeldExecute[] = [];
    for (let g = 0; g < groups.length; g++) {
      const group = groups[g]!;
      const x = this.#nextExec++;
      const parts: Uint8Array[] = [];
      const counts: number[] = [];
      const descriptors: WireTensor[] = [];
      const first = group[0]!;
      for (const t of first.inputs.values()) {
        let rows = 0;
        for (const r of group) {
          const own = r.inputs.get(t.name)!;
          parts.push(own.data);
          rows += own.shape[0] ?? 0;
        }
        counts.push(group.length);
        descriptors.push({ name: t.name, d: t.datatype, s: group.length === 1 ? [...t.shape] : [rows, ...t.shape.slice(1)] });
      }
      const last = g === groups.length - 1;
      // The stub runs the groups in order: once the last one is done, it is free for the next batch.
      const held: HeldExecute = { requests: group, final: group.map(() => false), aborts: [], done: false, batched: true, ...(last && { release: () => timing.releaseInstance?.() }) };
      this.#held.set(x, held);
      helds.push(held);
      finished.push(new Promise<void>((resolve, reject) => (held.settle = { resolve, reject })));
      if (this.#settings.timeoutMs > 0) {
        held.timer = setTimeout(
          () => stub.kill(`was killed because execute did not return within ${this.#settings.timeoutMs / 1000} s (execute-timeout-secs)`),
          this.#settings.timeoutMs,
        );
      }
      if (this.#closing) this.#boundByUnload(stub, held);
      stub.send(
        { t: 'bexec', x, n: group.length, inputs: descriptors, outputs: wantedOutputs(this.#outputNames, group) },
        parts,
        descriptors as unknown as Record<string, unknown>[],
        last ? () => timing.markInputsReady() : undefined,
        counts,
      );
    }
    try {
      await Promise.all(finished);
    } finally {
      const end = helds[helds.length - 1]!;
      timing.markOutputsStart(end.doneAt);
      timing.markComputeEnd(end.endAt);
    }
  }

  /**
   * A runner's answer to one group: each output split by the requests' batch sizes (rows of
   * fixed-size elements by byte count, BYTES rows by walking their length prefixes), checked
   * against the configuration, and handed to each request with the outputs it asked for.
   */
  #applyBatched(held: HeldExecute, wire: readonly WireTensor[], tensors: readonly Uint8Array[]): void {
    const requests = held.requests;
    const config = this.#ctx.config;
    const pieces: BackendTensor[][] = requests.map(() => []);
    let error: NereidError | undefined;
    for (let i = 0; i < wire.length && error === undefined; i++) {
      const t = wire[i]!;
      const data = tensors[i]!;
      if (requests.length === 1) {
        const checked = checkOutput(config, t, data, requests[0]!.batchSize);
        if (checked instanceof NereidError) error = checked;
        else pieces[0]!.push(checked);
        continue;
      }
      const rows = requests.reduce((sum, r) => sum + r.batchSize, 0);
      if (t.s[0] !== rows) {
        error = new NereidError(
          'BACKEND_ERROR',
          `model '${config.name}' returned output '${t.name}' with shape [${t.s.join(',')}] for a batch of ${rows}; its first dimension must be the batch's`,
        );
        break;
      }
      const rest = t.s.slice(1);
      const rowElements = rest.reduce((a, b) => a * b, 1);
      let offset = 0;
      for (let j = 0; j < requests.length && error === undefined; j++) {
        const b = requests[j]!.batchSize;
        const end = rowsEnd(t.d, data, offset, b * rowElements);
        if (end === undefined) {
          error = new NereidError('BACKEND_ERROR', `model '${config.name}' output '${t.name}': its bytes do not hold shape [${t.s.join(',')}]`);
          break;
        }
        const checked = checkOutput(config, { name: t.name, d: t.d, s: [b, ...rest] }, data.subarray(offset, end), b);
        if (checked instanceof NereidError) error = checked;
        else pieces[j]!.push(checked);
        offset = end;
      }
    }
    requests.forEach((request, j) => {
      // A request the server already ended (preempt) gets nothing more.
      if (held.final[j]) return;
      held.final[j] = true;
      if (error !== undefined) {
        request.respond(error, true);
        return;
      }
      const wanted = request.requestedOutputs;
      request.respond({ outputs: wanted.length === 0 ? pieces[j]! : pieces[j]!.filter((o) => wanted.includes(o.name)) }, true);
    });
  }

  /**
   * The server ended a request this instance holds (a higher-priority request waits for it): the
   * stub marks it preempted, so that the model's `is_cancelled()` turns true and its next
   * `send` for it raises; nothing the stub still sends for it is applied.
   */
  preempt(request: BackendRequest, error: NereidError): void {
    for (const [x, held] of this.#held.entries()) {
      const index = held.requests.indexOf(request);
      if (index < 0) continue;
      if (held.final[index]) return;
      held.final[index] = true;
      this.#stub?.send({ t: 'cancel', x, r: index, preempted: error.message });
      if (held.done && held.final.every((f) => f)) this.#release(x, held);
      return;
    }
  }

  #release(x: number, held: HeldExecute): void {
    clearTimeout(held.timer);
    clearTimeout(held.unloadTimer);
    for (const a of held.aborts) a();
    this.#held.delete(x);
  }

  #onMessage(stub: StubProcess, m: StubMessage, tensors: Uint8Array[]): void {
    switch (m.t) {
      case 'resp':
        this.#onResponse(m, tensors);
        return;
      case 'done':
        this.#onDone(m, tensors);
        return;
      case 'bls':
        this.#onBls(stub, m, tensors);
        return;
      case 'control':
        this.#onControl(stub, m);
        return;
      default:
        this.#ctx.logger.error(`${this.#what}: unexpected message '${m.t}' from the Python stub`);
    }
  }

  #onResponse(m: StubMessage, tensors: Uint8Array[]): void {
    const x = m['x'] as number;
    const held = this.#held.get(x);
    if (held === undefined) return;
    this.#apply(held, m, (m['outputs'] as WireTensor[] | undefined) ?? [], tensors);
    if (held.done && held.final.every((f) => f)) this.#release(x, held);
  }

  /** Delivers one response entry (`r` request index, `f` final, `error` or outputs). */
  #apply(held: HeldExecute, entry: Readonly<Record<string, unknown>>, wire: readonly WireTensor[], tensors: readonly Uint8Array[]): void {
    const index = entry['r'] as number;
    const request = held.requests[index];
    if (request === undefined || held.final[index]) return;
    const final = entry['f'] === true;
    let response: BackendResponse | NereidError | null = null;
    if (entry['error'] !== undefined) {
      const e = entry['error'] as WireError;
      // A model's own error response reaches the client with the model's message unchanged, as in
      // Triton (clients match it); an error the stub made names the model.
      const message = e.stub === true ? `model '${this.#ctx.name}': ${e.message}` : e.message;
      response = new NereidError(TRITON_ERROR_CODES[e.code ?? 1] ?? 'BACKEND_ERROR', message);
    } else if (entry['has_response'] === true) {
      const outputs: BackendTensor[] = [];
      for (let i = 0; i < wire.length; i++) {
        const checked = checkOutput(this.#ctx.config, wire[i]!, tensors[i]!, request.batchSize);
        if (checked instanceof NereidError) {
          response = checked;
          break;
        }
        outputs.push(checked);
      }
      if (response === null) {
        const parameters = entry['parameters'] as Record<string, ParameterValue> | undefined;
        response = parameters ? { outputs, parameters } : { outputs };
      }
    }
    if (final) held.final[index] = true;
    request.respond(response, final);
  }

  #onDone(m: StubMessage, tensors: Uint8Array[]): void {
    const x = m['x'] as number;
    const held = this.#held.get(x);
    if (held === undefined) return;
    held.doneAt = process.hrtime.bigint();
    held.done = true;
    clearTimeout(held.timer);
    clearTimeout(held.unloadTimer);
    if (typeof m['error'] === 'string') {
      // The runner fails every request without a final response (spi.ts).
      // Triton's text for an execute that raised; the model is named by its instance, as there.
      held.settle?.reject(new NereidError('BACKEND_ERROR', `Failed to process the request(s) for model '${this.#spec.name}', message: ${m['error']}`));
      this.#release(x, held);
      return;
    }
    // Requests released with RESCHEDULE (iterative sequences, models-and-scheduling.md §5.9):
    // handed back to the sequence batcher before execute returns.
    for (const index of (m['rs'] as number[] | undefined) ?? []) {
      const request = held.requests[index];
      if (request === undefined || held.final[index]) continue;
      held.final[index] = true;
      try {
        if (request.reschedule === undefined) {
          throw new NereidError(
            'BACKEND_ERROR',
            `${this.#what}: execute released request '${request.id}' with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, ` +
              `but only models with sequence_batching { iterative_sequence: true } may reschedule requests`,
          );
        }
        request.reschedule();
      } catch (err) {
        request.respond(toNereidError(err, 'BACKEND_ERROR'), true);
      }
    }
    // The stub is done with the batch: the instance takes its next one now (the scheduler sends it
    // from a microtask that runs before the frontends encode these responses), while the
    // responses are handed over here. Not while the event loop is saturated (loop-poll.ts).
    if (held.release !== undefined && !loopSaturated()) held.release();
    const wire = (m['outputs'] as WireTensor[] | undefined) ?? [];
    if (held.batched === true) {
      this.#applyBatched(held, wire, tensors);
      held.endAt = process.hrtime.bigint();
      held.settle?.resolve();
      this.#release(x, held);
      return;
    }
    const responses = (m['responses'] as Record<string, unknown>[] | undefined) ?? [];
    let at = 0;
    for (const entry of responses) {
      const k = entry['k'] as number;
      this.#apply(held, entry, wire.slice(at, at + k), tensors.slice(at, at + k));
      at += k;
    }
    held.endAt = process.hrtime.bigint();
    held.settle?.resolve();
    if (held.final.every((f) => f)) this.#release(x, held);
  }

  #onBls(stub: StubProcess, m: StubMessage, tensors: Uint8Array[]): void {
    const call = m['call'] as number;
    const reply = (answer: Record<string, unknown>, parts: Uint8Array[] = [], descriptors: Record<string, unknown>[] = []) =>
      stub.send({ t: 'reply', call, ...answer }, parts, descriptors);
    const services = this.#ctx.models;
    if (services === undefined) {
      reply({ error: { message: `model '${this.#ctx.name}': calling other models (BLS) needs a server; this backend model was created without one`, code: 5 } });
      return;
    }
    const inputs: InferInput[] = ((m['inputs'] as WireTensor[]) ?? []).map((t, i) => ({
      name: t.name,
      datatype: t.d,
      shape: t.s,
      data: tensors[i]!,
    }));
    let parameters: Record<string, ParameterValue> = {};
    try {
      const parsed = JSON.parse((m['parameters'] as string) || '{}') as unknown;
      if (parsed !== null && typeof parsed === 'object') parameters = parsed as Record<string, ParameterValue>;
    } catch {
      // Triton's parameters() is JSON text; anything else is ignored.
    }
    const timeout = m['timeout'] as number;
    if (timeout > 0) parameters = { ...parameters, timeout };
    const outputs = (m['outputs'] as string[]) ?? [];
    const version = m['version'] as string;
    const request: InferRequest = {
      model: m['model'] as string,
      ...(version ? { version } : {}),
      id: (m['id'] as string) ?? '',
      parameters,
      inputs,
      ...(outputs.length > 0 ? { outputs: outputs.map((name) => ({ name })) } : {}),
    };
    if (m['decoupled'] === true) {
      // exec(decoupled=True): every response of the called model, the stub's iterator gets them
      // once the final one arrived (a flags-only final becomes an empty response, as in Triton).
      const descriptors: Record<string, unknown>[] = [];
      const parts: Uint8Array[] = [];
      const responses: Record<string, unknown>[] = [];
      const collect = (r: StreamResponse): void => {
        const res = r.response;
        if (res === undefined) {
          responses.push({ k: 0 });
          return;
        }
        for (const o of res.outputs) {
          descriptors.push({ name: o.name, d: o.datatype, s: o.shape });
          parts.push(o.data);
        }
        responses.push({ k: res.outputs.length, parameters: res.parameters });
      };
      services.inferStream(request, { onResponse: collect }).then(
        () => reply({ outputs: descriptors, responses }, parts, descriptors),
        (err: unknown) => reply({ outputs: descriptors, responses, error: wireError(err) }, parts, descriptors),
      );
      return;
    }
    services.infer(request).then(
      (res: InferResponse) => {
        const descriptors = res.outputs.map((o) => ({ name: o.name, d: o.datatype, s: o.shape }) as Record<string, unknown>);
        reply({ outputs: descriptors, parameters: res.parameters }, res.outputs.map((o) => o.data), descriptors);
      },
      (err: unknown) => reply({ error: wireError(err) }),
    );
  }

  #onControl(stub: StubProcess, m: StubMessage): void {
    const call = m['call'] as number;
    const services = this.#ctx.models;
    const model = m['model'] as string;
    const run = async (): Promise<unknown> => {
      if (services === undefined) throw new NereidError('UNSUPPORTED', `model '${this.#ctx.name}': model control needs a server`);
      switch (m['op']) {
        case 'load': {
          const files = m['files'] as Record<string, string> | undefined;
          const config = m['config'] as string | null | undefined;
          await services.loadModel(model, {
            ...(config ? { config } : {}),
            ...(files && Object.keys(files).length > 0
              ? { files: new Map(Object.entries(files).map(([k, v]) => [k, new Uint8Array(Buffer.from(v, 'hex'))])) }
              : {}),
          });
          return true;
        }
        case 'unload':
          await services.unloadModel(model, { unloadDependents: m['unload_dependents'] === true });
          return true;
        case 'ready':
          try {
            const version = m['version'] as string;
            return services.isModelReady(model, version || undefined);
          } catch {
            return false;
          }
        default:
          throw new NereidError('UNSUPPORTED', `unknown model-control operation '${String(m['op'])}'`);
      }
    };
    run().then(
      (value) => stub.send({ t: 'reply', call, value }),
      (err: unknown) => stub.send({ t: 'reply', call, error: wireError(err) }),
    );
  }

  #onExit(stub: StubProcess, why: string): void {
    // A stub that never finished starting is not restarted: its start() rejects with the reason.
    if (this.#stub !== stub) return;
    this.#stub = undefined;
    this.#starting = undefined;
    const error =
      this.#terminated ??
      new NereidError('PYTHON_STUB_FAILED', `${this.#what}: the Python stub ${why}${this.#closing ? '' : '; the requests it held failed and the instance restarts'}`);
    for (const [x, held] of this.#held.entries()) {
      if (!held.done) held.settle?.reject(error);
      else held.requests.forEach((r, i) => held.final[i] || r.respond(error, true));
      this.#release(x, held);
    }
    if (this.#closing) return;
    this.#ctx.logger.error(error.message);
    const lived = Date.now() - this.#servingSince;
    this.#quickRestarts = lived >= STABLE_MS ? 0 : this.#quickRestarts + 1;
    const delay = restartDelay(this.#quickRestarts);
    if (delay > 0) {
      this.#ctx.logger.warning(
        `${this.#what}: the Python stub died ${this.#quickRestarts} times in a row within ${STABLE_MS / 1000} s of its start; restarting it in ${delay / 1000} s`,
      );
    }
    this.#scheduleRestart(delay);
  }

  /** Starts the stub again after `delay` ms; a failed start tries again after a longer delay. */
  #scheduleRestart(delay: number): void {
    let fire!: () => void;
    const due = new Promise<void>((resolve) => (fire = resolve));
    const timer = setTimeout(() => {
      this.#restart = undefined;
      fire();
      if (this.#closing) return;
      this.start().then(
        () => this.#ctx.logger.info(`${this.#what}: the Python stub restarted`),
        (err: unknown) => {
          if (this.#closing) return;
          this.#quickRestarts++;
          const next = restartDelay(this.#quickRestarts);
          this.#ctx.logger.error(`${this.#what}: restarting the Python stub failed (next try in ${next / 1000} s): ${(err as Error).message}`);
          this.#scheduleRestart(next);
        },
      );
    }, delay);
    this.#restart = { timer, due, fire };
  }

  /**
   * Readiness (models-and-scheduling.md §8.5): the stub must be running; a model that defines
   * `is_ready()` is asked, and an answer other than true, an error, or no answer within
   * IS_READY_TIMEOUT_MS means not ready. The stub answers between executes, so a model busy
   * executing for longer than that counts as not ready meanwhile.
   */
  async isReady(): Promise<boolean> {
    const stub = this.#stub;
    if (stub === undefined || !stub.alive) return false;
    if (!this.#hasIsReady) return true;
    const answer = await stub.call({ t: 'is_ready' }, `${this.#what}: is_ready failed`, 'BACKEND_ERROR', IS_READY_TIMEOUT_MS);
    return answer === true;
  }

  /** Runs `finalize`, then the stub exits; killed if either takes longer than FINALIZE_TIMEOUT_MS. */
  /**
   * The version unloads, or the server begins to shut down: no more restarts, a start in
   * progress is stopped, and from now on every execute (those in flight, from now) that runs
   * longer than the unload timeout gets the stub killed (its requests fail), so that a hung
   * execute cannot hold the unload or the server's shutdown.
   */
  unloading(): void {
    if (this.#closing) return;
    this.#closing = true;
    if (this.#restart !== undefined) {
      clearTimeout(this.#restart.timer);
      this.#restart.fire();
      this.#restart = undefined;
    }
    this.#startingStub?.kill('was stopped: the instance is unloading');
    const stub = this.#stub;
    if (stub !== undefined) for (const held of this.#held.values()) if (!held.done) this.#boundByUnload(stub, held);
  }

  /**
   * The stub process's own memory (its resident anonymous memory; core/memory.ts) as one CPU entry; with `fresh`,
   * read from /proc now, else the last sample. Empty while no stub runs. A stub using a GPU adds
   * a GPU entry per device (the server's index), from the server's last nvidia-smi sample.
   */
  memoryUsage(fresh = false): readonly MemoryUsageEntry[] {
    if (!fresh) return this.#memory;
    const pid = this.#stub?.alive ? this.#stub.pid : undefined;
    const bytes = pid === undefined ? undefined : processMemoryBytes(pid);
    const gpu = pid === undefined ? [] : [...(this.#ctx.gpuMemoryOf?.(pid) ?? [])].map(([id, size]) => ({ type: 'GPU' as const, id, byte_size: size }));
    this.#memory = bytes === undefined ? gpu : [{ type: 'CPU', id: 0, byte_size: bytes }, ...gpu];
    return this.#memory;
  }

  /** Stops the stub for good: its requests fail with `error`, and so does every later execute. */
  terminate(error: NereidError): void {
    if (this.#terminated !== undefined) return;
    this.#terminated = error;
    this.unloading();
    this.#stub?.kill(`was stopped: ${error.message}`);
  }

  /** An execute in flight once the instance unloads may run for unload-timeout-secs more. */
  #boundByUnload(stub: StubProcess, held: HeldExecute): void {
    const limit = this.#settings.unloadTimeoutMs;
    if (limit <= 0 || held.unloadTimer !== undefined) return;
    held.unloadTimer = setTimeout(
      () => stub.kill(`was killed because execute did not return within ${limit / 1000} s once the model began to unload (unload-timeout-secs)`),
      limit,
    );
  }

  async unload(): Promise<void> {
    this.unloading();
    const stub = this.#stub ?? (await this.#starting?.catch(() => undefined));
    if (stub === undefined || !stub.alive) return;
    try {
      await stub.call({ t: 'finalize' }, `${this.#what}: finalize failed`, 'BACKEND_ERROR', FINALIZE_TIMEOUT_MS);
    } catch (err) {
      this.#ctx.logger.warning((err as Error).message);
    }
    stub.closeChannel();
    const timer = setTimeout(() => stub.kill('was killed after finalize did not end it'), FINALIZE_TIMEOUT_MS);
    await stub.exited;
    clearTimeout(timer);
  }
}

export class PythonModel implements BackendModel {
  readonly #ctx: ModelContext;
  readonly #runner: Runner;
  readonly #modelFile: string;
  readonly #settings: StubSettings;

  constructor(ctx: ModelContext, runner: Runner, modelFile: string, settings: StubSettings) {
    this.#ctx = ctx;
    this.#runner = runner;
    this.#modelFile = modelFile;
    this.#settings = settings;
  }

  async createInstance(spec: InstanceSpec): Promise<BackendInstance> {
    const instance = new PythonInstance(this.#ctx, spec, this.#runner, this.#modelFile, this.#settings);
    await instance.start();
    return instance;
  }

  async unload(): Promise<void> {}
}

/** The CUDA device index of a KIND_GPU instance as its stub sees it (0 when it sees only its own). */
function cudaDeviceInStub(spec: InstanceSpec): number {
  const device = spec.device;
  if (device === undefined) return 0;
  const visible = device.cudaVisibleDevices.split(',');
  return Math.max(0, visible.indexOf(device.mig?.uuid ?? device.uuid));
}

/**
 * The model file: `default_model_filename` in the version directory, or `fallback` there when the
 * configuration names none (§1.4 leaves it empty for `platform: "pytorch_libtorch"`).
 */
function requireModelFile(ctx: Pick<ModelContext, 'config' | 'versionDirectory' | 'name'>, what: string, fallback: string): string {
  const path = join(ctx.versionDirectory, ctx.config.default_model_filename || fallback);
  const info = statSync(path, { throwIfNoEntry: false });
  if (info === undefined || !info.isFile()) {
    throw new NereidError('MODEL_LOAD_FAILED', `model '${ctx.name}': ${what} '${path}' does not exist`);
  }
  return path;
}

/**
 * Auto-complete (§3.5) in a throw-away stub: `message` (the model file's `path`, and for a
 * built-in runner its `runner`) goes with the configuration as read; the stub answers the
 * configuration completed, or null to leave it as it is. `what` names the model in errors.
 */
export async function autoCompleteInStub(
  ctx: AutoCompleteContext,
  settings: StubSettings,
  message: Readonly<Record<string, unknown>>,
  what: string,
  env: Readonly<Record<string, string>> = {},
): Promise<ModelConfig> {
  const stub = await StubProcess.start({
    python: settings.python,
    ringBytes: 4096,
    what,
    logger: ctx.logger,
    cwd: ctx.versionDirectory,
    startTimeoutMs: settings.startTimeoutMs,
    env,
  });
  try {
    const config = modelConfigToJson(ctx.config as ModelConfig, { emitDefaults: true, int64AsString: false });
    const completed = await stub.call(
      { t: 'auto_complete', ...message, config },
      `${what} failed`,
      'MODEL_LOAD_FAILED',
      settings.initializeTimeoutMs,
      'initialize-timeout-secs',
    );
    if (completed === null || completed === undefined) return ctx.config as ModelConfig;
    try {
      return completeModelConfig(modelConfigFromJson(completed));
    } catch (err) {
      throw new NereidError('MODEL_LOAD_FAILED', `${what} returned a configuration that is not valid: ${(err as Error).message}`);
    }
  } finally {
    stub.kill('was stopped after auto-complete');
  }
}

export const pythonBackend: Backend = {
  name: 'python',
  spiVersion: BACKEND_SPI_VERSION,
  gpu: true,

  /**
   * `TritonPythonModel.auto_complete_config` (§3.5), run in a throw-away stub; a model without
   * it leaves the configuration as it is.
   */
  async autoCompleteConfig(ctx: AutoCompleteContext): Promise<ModelConfig> {
    const modelFile = requireModelFile(ctx, 'model file', 'model.py');
    // A model.py that never mentions the method cannot define it: no interpreter to start.
    if (!(await readFile(modelFile, 'utf8')).includes('auto_complete_config')) return ctx.config as ModelConfig;
    return autoCompleteInStub(ctx, await stubSettings(ctx), { path: modelFile }, `model '${ctx.name}' (auto_complete_config)`);
  },

  async createModel(ctx: ModelContext): Promise<BackendModel> {
    const modelFile = requireModelFile(ctx, 'model file', 'model.py');
    return new PythonModel(ctx, 'python', modelFile, await stubSettings(ctx));
  },
};

export const pytorchBackend: Backend = {
  name: 'pytorch',
  spiVersion: BACKEND_SPI_VERSION,
  gpu: true,

  async createModel(ctx: ModelContext): Promise<BackendModel> {
    if (ctx.config.platform === 'torch_aoti') {
      throw new NereidError('CONFIG_UNSUPPORTED', `model '${ctx.name}': platform torch_aoti (model.pt2) is not supported; export a TorchScript model.pt`);
    }
    const modelFile = requireModelFile(ctx, 'TorchScript file', 'model.pt');
    return new PythonModel(ctx, 'pytorch', modelFile, await stubSettings(ctx));
  },
};
