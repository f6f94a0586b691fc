/**
 * The sequence batcher (models-and-scheduling.md §5): stateful models whose requests form
 * sequences identified by a correlation id. Each instance owns sequence slots; a sequence holds
 * one slot from its START to its END (or idle timeout, or cancellation) and every request of it
 * runs on that slot's instance, in order. Sequences that find no free slot wait in the backlog.
 *
 * The batcher adds the configured control tensors (§5.3) and the implicit state (§5.8) to each
 * request as ordinary inputs, so backends need not know about sequences, and captures the state
 * outputs from the backend's response before it reaches the client.
 *
 * Strategies: `direct` (§5.4) keeps every request of a sequence in the same batch row and fills
 * idle lower rows with filler rows (READY false, never answered); `oldest` (§5.5) batches the
 * heads of ready sequences of an instance, oldest first, with its own preferred sizes and delay.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { NereidError, elementCount, elementSize, fromConfigDataType, type DataType } from '@nereid/protocol';
import type { BackendResponse, BackendTensor } from '../backends/spi.js';
import type { ModelConfig, ModelSequenceBatching, SequenceControl } from '../config/model-config.js';
import type { Logger } from '../observability/logger.js';
import type { InstanceRunner } from './instance-runner.js';
import { NEVER_ABORTED } from '../backends/spi.js';
import { watchAbort } from '../core/abort-watch.js';
import {
  NO_OBSERVER,
  type FailureReason,
  type ResponseRecord,
  type ScheduledRequest,
  type Scheduler,
  type SchedulerObserver,
} from './scheduler.js';

/** How often idle sequences still in the backlog are re-checked (§5.6). */
const BACKLOG_IDLE_RECHECK_MS = 50;
/** Longest an instance loop sleeps with nothing ready (§5.4). */
const IDLE_WAKE_MS = 500;

/** One `state` entry, resolved at load: datatype, dims and the bytes of its initial value. */
export interface ResolvedState {
  readonly inputName: string;
  readonly outputName: string;
  readonly datatype: DataType;
  /** Shape (batch dimension excluded) of the first request's state: -1 taken as 1, or the initial state's dims. */
  readonly initialShape: readonly number[];
  /** The initial state; zeros when none is configured (the spec leaves it uninitialised). */
  readonly initialData: Uint8Array;
}

function stateError(config: ModelConfig, message: string): NereidError {
  return new NereidError('CONFIG_INVALID', `model '${config.name}': sequence_batching.state: ${message}`);
}

function zeros(datatype: DataType, shape: readonly number[]): Uint8Array {
  const count = elementCount(shape);
  // A BYTES element of length 0 is its 4-byte length prefix.
  return new Uint8Array(datatype === 'BYTES' ? 4 * count : count * elementSize(datatype));
}

/**
 * Validates the `state` entries of `config` (§5.8 load-time rules) and reads their initial
 * states (`<modelDirectory>/initial_state/<file>`). Throws CONFIG_INVALID naming the state.
 */
export async function resolveSequenceStates(config: ModelConfig, modelDirectory: string): Promise<ResolvedState[]> {
  const sb = config.sequence_batching;
  if (sb === undefined) return [];
  const seen = new Set<string>();
  const states: ResolvedState[] = [];
  for (const state of sb.state) {
    const where = `state '${state.input_name}'`;
    if (state.input_name === '' || state.output_name === '') throw stateError(config, 'every state must set input_name and output_name');
    if (seen.has(state.input_name)) throw stateError(config, `${where} is specified more than once`);
    seen.add(state.input_name);
    const datatype = fromConfigDataType(state.data_type);
    if (datatype === undefined) throw stateError(config, `${where} has invalid data_type ${state.data_type}`);
    if (state.dims.length === 0) throw stateError(config, `${where} must specify dims`);
    if (state.initial_state.length > 1) throw stateError(config, `${where} has ${state.initial_state.length} initial_state entries; at most one is allowed`);
    const initial = state.initial_state[0];
    if (initial === undefined) {
      const shape = state.dims.map((d) => (d === -1 ? 1 : d));
      states.push({ inputName: state.input_name, outputName: state.output_name, datatype, initialShape: shape, initialData: zeros(datatype, shape) });
      continue;
    }
    const iwhere = `initial_state '${initial.name}' of ${where}`;
    if (initial.name === '') throw stateError(config, `the initial_state of ${where} must have a name`);
    if (initial.data_type !== state.data_type) {
      throw stateError(config, `${iwhere} has data_type ${initial.data_type}; it must equal the state's ${state.data_type}`);
    }
    if (initial.dims.length !== state.dims.length) {
      throw stateError(config, `${iwhere} has dims [${initial.dims.join(',')}] of rank ${initial.dims.length}; the state has rank ${state.dims.length}`);
    }
    initial.dims.forEach((d, i) => {
      if (d < 0) throw stateError(config, `${iwhere} dims [${initial.dims.join(',')}] must not contain -1`);
      const s = state.dims[i]!;
      if (s !== -1 && s !== d) throw stateError(config, `${iwhere} dims [${initial.dims.join(',')}] do not match the state dims [${state.dims.join(',')}]`);
    });
    const shape = [...initial.dims];
    let data: Uint8Array;
    if (initial.data_file !== undefined) {
      const file = join(modelDirectory, 'initial_state', initial.data_file);
      const bytes = await readFile(file).catch((err: NodeJS.ErrnoException) => {
        throw stateError(config, `${iwhere}: cannot read data_file '${file}': ${err.code ?? err.message}`);
      });
      const needed = datatype === 'BYTES' ? 0 : elementCount(shape) * elementSize(datatype);
      if (bytes.byteLength < needed) {
        throw stateError(config, `${iwhere}: data_file '${file}' holds ${bytes.byteLength} bytes, ${needed} are needed for dims [${shape.join(',')}]`);
      }
      data = new Uint8Array(bytes.buffer, bytes.byteOffset, datatype === 'BYTES' ? bytes.byteLength : needed);
    } else if (initial.zero_data !== undefined) {
      data = zeros(datatype, shape);
    } else {
      throw stateError(config, `${iwhere} must set zero_data or data_file`);
    }
    states.push({ inputName: state.input_name, outputName: state.output_name, datatype, initialShape: shape, initialData: data });
  }
  return states;
}

/** A boolean control tensor (START, END, READY) with its false and true encodings. */
interface FlagControl {
  readonly name: string;
  readonly datatype: DataType;
  readonly values: readonly [Uint8Array, Uint8Array];
}

function flagControl(name: string, control: SequenceControl): FlagControl {
  if (control.int32_false_true.length === 2) {
    const [f, t] = control.int32_false_true as [number, number];
    return { name, datatype: 'INT32', values: [new Uint8Array(Int32Array.of(f).buffer), new Uint8Array(Int32Array.of(t).buffer)] };
  }
  if (control.fp32_false_true.length === 2) {
    const [f, t] = control.fp32_false_true as [number, number];
    return { name, datatype: 'FP32', values: [new Uint8Array(Float32Array.of(f).buffer), new Uint8Array(Float32Array.of(t).buffer)] };
  }
  const [f, t] = control.bool_false_true as [boolean, boolean];
  return { name, datatype: 'BOOL', values: [Uint8Array.of(f ? 1 : 0), Uint8Array.of(t ? 1 : 0)] };
}

/** The control inputs a model configures (§5.3). */
interface Controls {
  start?: FlagControl;
  end?: FlagControl;
  ready?: FlagControl;
  corrid?: { readonly name: string; readonly datatype: DataType };
}

function parseControls(sb: ModelSequenceBatching): Controls {
  const controls: Controls = {};
  for (const input of sb.control_input) {
    for (const control of input.control) {
      switch (control.kind) {
        case 'CONTROL_SEQUENCE_START':
          controls.start = flagControl(input.name, control);
          break;
        case 'CONTROL_SEQUENCE_END':
          controls.end = flagControl(input.name, control);
          break;
        case 'CONTROL_SEQUENCE_READY':
          controls.ready = flagControl(input.name, control);
          break;
        case 'CONTROL_SEQUENCE_CORRID':
          controls.corrid = { name: input.name, datatype: fromConfigDataType(control.data_type)! };
          break;
      }
    }
  }
  return controls;
}

/** A request's tensor of per-item shape `itemShape`: `[1, ...itemShape]` for batching models. */
function requestTensor(batching: boolean, name: string, datatype: DataType, itemShape: readonly number[], data: Uint8Array): BackendTensor {
  return { name, datatype, shape: batching ? [1, ...itemShape] : [...itemShape], data };
}

/** Sets the control tensors of one request (§5.3) in `inputs`. */
function setControls(
  controls: Controls,
  batching: boolean,
  inputs: Map<string, BackendTensor>,
  start: boolean,
  end: boolean,
  ready: boolean,
  id: bigint | string,
): void {
  const flag = (c: FlagControl | undefined, value: boolean) => {
    if (c !== undefined) inputs.set(c.name, requestTensor(batching, c.name, c.datatype, [1], c.values[value ? 1 : 0]));
  };
  flag(controls.start, start);
  flag(controls.end, end);
  flag(controls.ready, ready);
  const corrid = controls.corrid;
  if (corrid === undefined) return;
  let data: Uint8Array;
  if (corrid.datatype === 'BYTES') {
    const text = Buffer.from(typeof id === 'string' ? id : '', 'utf8');
    data = new Uint8Array(4 + text.byteLength);
    new DataView(data.buffer).setUint32(0, text.byteLength, true);
    data.set(text, 4);
  } else {
    const n = typeof id === 'bigint' ? id : 0n;
    const wide = corrid.datatype === 'UINT64' || corrid.datatype === 'INT64';
    data = new Uint8Array(wide ? 8 : 4);
    const view = new DataView(data.buffer);
    if (wide) view.setBigUint64(0, BigInt.asUintN(64, n), true);
    else view.setUint32(0, Number(BigInt.asUintN(32, n)), true);
  }
  inputs.set(corrid.name, requestTensor(batching, corrid.name, corrid.datatype, [1], data));
}

/**
 * What a warmup request of a sequence model carries besides its sample's inputs
 * (models-and-scheduling.md §8.3 with §5.3 and §5.8): every configured control input as for a
 * sequence of one request (START, END and READY true; CORRID 0, or '' for TYPE_STRING, an id no
 * client sequence can have), every state input at its initial value, and the state outputs to
 * request. Warmup bypasses the sequence batcher, so it leaves no sequence or state behind; a
 * sample that lists a control or state input itself overrides what is given here.
 */
export function sequenceWarmupInputs(config: ModelConfig, states: readonly ResolvedState[]): { inputs: Map<string, BackendTensor>; outputs: string[] } {
  const sb = config.sequence_batching;
  const inputs = new Map<string, BackendTensor>();
  if (sb === undefined) return { inputs, outputs: [] };
  const batching = config.max_batch_size > 0;
  const controls = parseControls(sb);
  setControls(controls, batching, inputs, true, true, true, controls.corrid?.datatype === 'BYTES' ? '' : 0n);
  for (const s of states) inputs.set(s.inputName, requestTensor(batching, s.inputName, s.datatype, s.initialShape, s.initialData));
  return { inputs, outputs: states.map((s) => s.outputName) };
}

/** An active sequence: its id, its implicit state, and whether a request of it is executing. */
interface Sequence {
  readonly id: bigint | string;
  readonly key: string;
  /** An iterative sequence (§5.9): one request, executed until the model stops rescheduling it. */
  readonly iterative: boolean;
  /** Current state per state input name (shape without the batch dimension). */
  state: Map<string, { shape: readonly number[]; data: Uint8Array }> | undefined;
  /** A request of this sequence is executing (oldest: the next one waits). */
  executing: boolean;
  cancelled: boolean;
}

/** A request waiting in a slot or backlog queue, or a force-end marker (idle timeout). */
type Entry =
  | {
      readonly kind: 'request';
      readonly request: ScheduledRequest;
      readonly seq: Sequence;
      /** The START and END controls of this execution (a rescheduled iteration has neither). */
      readonly start: boolean;
      readonly end: boolean;
      /** Executions of the request so far (iterative sequences run it more than once). */
      readonly iteration: number;
    }
  | { readonly kind: 'end'; readonly seq: Sequence };

interface Slot {
  readonly instance: InstanceBatcher;
  readonly index: number;
  queue: Entry[];
  /** The sequence the slot serves (undefined: free). */
  seq: Sequence | undefined;
}

interface Backlog {
  readonly key: string;
  entries: Entry[];
  /** Monotonic ms after which the whole backlog queue fails (Infinity: no timeout). */
  expiry: number;
  cancelled: boolean;
}

interface InstanceBatcher {
  readonly runner: InstanceRunner;
  readonly slots: Slot[];
  executing: boolean;
  /** Oldest with preserve_ordering: the delivery of the request last taken for execution (§4.7). */
  lastDelivered: Promise<unknown>;
  removed: boolean;
  timer: NodeJS.Timeout | undefined;
}

const keyOf = (id: bigint | string): string => (typeof id === 'string' ? `s:${id}` : `n:${id}`);
const describeId = (id: bigint | string): string => (typeof id === 'string' ? `'${id}'` : String(id));
const nowMs = (): number => performance.now();

/**
 * What the backend sees for one request of a sequence: the client's inputs plus control and
 * state inputs, the client's requested outputs plus the state outputs. Everything else is the
 * client's request; responses pass through with the state outputs taken out.
 *
 * Under `iterative_sequence` (§5.9) the backend may call `reschedule()` instead of sending the
 * final response: the step then counts as released (`completed`, and completion callbacks are
 * dropped) and the batcher queues the request again for its next iteration.
 */
class SequenceStep implements ScheduledRequest {
  readonly #inner: ScheduledRequest;
  readonly #stateOutputs: ReadonlySet<string>;
  readonly #onState: (outputs: BackendTensor[]) => void;
  readonly #model: string;
  readonly inputs: ReadonlyMap<string, BackendTensor>;
  readonly requestedOutputs: readonly string[];
  /** The queue entry executed and the slot it came from. */
  readonly entry: Entry & { kind: 'request' };
  readonly slot: Slot;
  #rescheduled = false;
  #returned = false;

  constructor(
    model: string,
    entry: Entry & { kind: 'request' },
    slot: Slot,
    inputs: ReadonlyMap<string, BackendTensor>,
    stateOutputs: ReadonlySet<string>,
    onState: (outputs: BackendTensor[]) => void,
  ) {
    this.#model = model;
    this.entry = entry;
    this.slot = slot;
    this.#inner = entry.request;
    this.inputs = inputs;
    this.#stateOutputs = stateOutputs;
    this.#onState = onState;
    const requested = [...this.#inner.requestedOutputs];
    for (const name of stateOutputs) if (!requested.includes(name)) requested.push(name);
    this.requestedOutputs = requested;
  }

  get id(): string { return this.#inner.id; }
  get parameters() { return this.#inner.parameters; }
  get batchSize(): number { return this.#inner.batchSize; }
  get signal(): AbortSignal { return this.#inner.signal; }
  get times() { return this.#inner.times; }
  get priority(): number { return this.#inner.priority; }
  get timeoutUs(): number { return this.#inner.timeoutUs; }
  get correlationId(): bigint | string { return this.entry.seq.id; }
  get sequenceStart(): boolean { return this.entry.start; }
  get sequenceEnd(): boolean { return this.entry.end; }
  /** Completed, or handed back for another iteration. */
  get completed(): boolean { return this.#inner.completed || this.#rescheduled; }
  get error(): NereidError | undefined { return this.#inner.error; }
  get completedAt(): bigint { return this.#inner.completedAt; }
  get responses(): readonly ResponseRecord[] { return this.#inner.responses; }
  get delivered(): Promise<unknown> { return this.#inner.delivered; }
  /** The backend asked for another iteration (and has not completed the request). */
  get rescheduled(): boolean { return this.#rescheduled && !this.#inner.completed; }
  executeReturned(): void { this.#inner.executeReturned(); }
  fail(error: NereidError): void { this.#inner.fail(error); }
  /** A rescheduled step drops `callback`: the request completes in a later iteration. */
  onComplete(callback: () => void): void {
    if (!this.#rescheduled) this.#inner.onComplete(callback);
  }
  deliverAfter(previous: Promise<unknown>): void { this.#inner.deliverAfter(previous); }

  /**
   * Releases the request back to the sequence batcher for another iteration (§5.9; Triton's
   * TRITONSERVER_REQUEST_RELEASE_RESCHEDULE). Only for models with `iterative_sequence`, and
   * only before `execute` returns; throws a NereidError otherwise.
   */
  reschedule(): void {
    if (!this.entry.seq.iterative) {
      throw new NereidError(
        'BACKEND_ERROR',
        `model '${this.#model}' rescheduled request '${this.id}', but only models with sequence_batching { iterative_sequence: true } may reschedule requests`,
      );
    }
    if (this.#returned) {
      throw new NereidError(
        'BACKEND_ERROR',
        `model '${this.#model}' rescheduled request '${this.id}' after execute returned; reschedule a request before execute returns`,
      );
    }
    this.#rescheduled = true;
  }

  /** The execution that held this step ended: `reschedule` is refused from now on. */
  markReturned(): void {
    this.#returned = true;
  }

  /** Captures the state outputs (once, from the response that carries them) and forwards the rest. */
  respond(response: BackendResponse | NereidError | null, final?: boolean): void {
    if (response === null || response instanceof NereidError || this.#inner.completed) {
      this.#inner.respond(response, final);
      return;
    }
    const states = response.outputs.filter((t) => this.#stateOutputs.has(t.name));
    if (states.length > 0) this.#onState(states);
    const wanted = this.#inner.requestedOutputs;
    const outputs = response.outputs.filter((t) => !this.#stateOutputs.has(t.name) || wanted.includes(t.name));
    this.#inner.respond(outputs.length === response.outputs.length ? response : { ...response, outputs }, final);
  }
}

/** A filler row of the direct strategy (§5.4): executed with READY false, never answered or counted. */
class FillerRow implements ScheduledRequest {
  readonly id = '';
  readonly parameters = {};
  readonly batchSize = 1;
  readonly signal = NEVER_ABORTED;
  readonly priority = 0;
  readonly timeoutUs = 0;
  readonly correlationId = 0n;
  readonly sequenceStart = false;
  readonly sequenceEnd = false;
  readonly completed = true;
  readonly error = undefined;
  readonly completedAt = 0n;
  readonly responses: readonly ResponseRecord[] = [];
  readonly delivered: Promise<unknown> = Promise.resolve();
  readonly times = { request: 0n, queue: 0n, computeStart: 0n, computeInputEnd: 0n, computeOutputStart: 0n, computeEnd: 0n };
  readonly inputs: ReadonlyMap<string, BackendTensor>;
  readonly requestedOutputs: readonly string[];

  constructor(inputs: ReadonlyMap<string, BackendTensor>, requestedOutputs: readonly string[]) {
    this.inputs = inputs;
    this.requestedOutputs = requestedOutputs;
  }

  respond(): void {}
  executeReturned(): void {}
  fail(): void {}
  /** Never completes as far as statistics are concerned. */
  onComplete(): void {}
  deliverAfter(): void {}
}

export interface SequenceBatcherOptions {
  readonly model: string;
  readonly maxBatchSize: number;
  readonly config: ModelSequenceBatching;
  /** From `resolveSequenceStates`. */
  readonly states?: readonly ResolvedState[];
  readonly runners: readonly InstanceRunner[];
  readonly observer?: SchedulerObserver;
  readonly logger?: Logger;
}

export class SequenceBatcher implements Scheduler {
  readonly #model: string;
  readonly #batching: boolean;
  readonly #maxBatchSize: number;
  readonly #config: ModelSequenceBatching;
  readonly #oldest: boolean;
  readonly #preserveOrdering: boolean;
  readonly #iterative: boolean;
  readonly #slotsPerInstance: number;
  readonly #idleMs: number;
  readonly #states: readonly ResolvedState[];
  readonly #stateOutputs: ReadonlySet<string>;
  readonly #observer: SchedulerObserver;
  readonly #logger: Logger | undefined;
  readonly #controls: Controls;
  /** The largest preferred batch size of the oldest strategy (or max_batch_size). */
  readonly #preferred: number;
  #instances: InstanceBatcher[] = [];
  /** Correlation id → the slot its sequence holds (removed once its END arrived). */
  readonly #bound = new Map<string, Slot>();
  /** Last request time (monotonic ms) of each id bound to a slot. */
  readonly #lastSeen = new Map<string, number>();
  /** Correlation id → its backlog queue (removed once its END arrived). */
  readonly #backlogBound = new Map<string, Backlog>();
  #backlogs: Backlog[] = [];
  #queued = 0;
  #executing = 0;
  #stopped = false;
  #drainWaiters: (() => void)[] = [];
  #reaper: NodeJS.Timeout | undefined;
  #backlogTimer: NodeJS.Timeout | undefined;
  /** The last internal id given to an iterative request without one (§5.9). */
  #internalIds = 0;

  constructor(options: SequenceBatcherOptions) {
    this.#model = options.model;
    this.#config = options.config;
    this.#maxBatchSize = Math.max(1, options.maxBatchSize);
    this.#batching = options.maxBatchSize > 0;
    this.#oldest = options.config.oldest !== undefined;
    const candidates = options.config.oldest?.max_candidate_sequences ?? 0;
    this.#slotsPerInstance = this.#oldest && candidates > 0 ? candidates : this.#maxBatchSize;
    this.#idleMs = (options.config.max_sequence_idle_microseconds || 1_000_000) / 1000;
    this.#states = options.states ?? [];
    this.#stateOutputs = new Set(this.#states.map((s) => s.outputName));
    this.#observer = options.observer ?? NO_OBSERVER;
    this.#logger = options.logger;
    this.#preserveOrdering = options.config.oldest?.preserve_ordering ?? false;
    this.#iterative = options.config.iterative_sequence;
    const preferred = options.config.oldest?.preferred_batch_size ?? [];
    this.#preferred = Math.min(this.#maxBatchSize, preferred.length > 0 ? Math.max(...preferred) : this.#maxBatchSize);
    this.#controls = parseControls(options.config);
    this.addInstances(options.runners);
  }

  get inflightCount(): number {
    return this.#queued + this.#executing;
  }

  get queuedCount(): number {
    return this.#queued;
  }

  /** Sequences holding a slot, and sequences waiting in the backlog (for tests and diagnostics). */
  get activeSequences(): { slots: number; backlog: number } {
    let slots = 0;
    for (const inst of this.#instances) for (const s of inst.slots) if (s.seq !== undefined) slots++;
    return { slots, backlog: this.#backlogs.length };
  }

  /**
   * Accepts a request of a sequence (§5.1, §5.2). Under `iterative_sequence` (§5.9) a request
   * without a correlation id is a whole sequence of its own under an internal id, started at
   * once; a client's END flag is ignored there, as the sequence ends when the model releases the
   * request without rescheduling it.
   */
  enqueue(request: ScheduledRequest): void {
    let id = request.correlationId;
    const anonymous = id === 0n || id === '';
    const internal = anonymous && this.#iterative;
    const start = internal || request.sequenceStart;
    const end = !this.#iterative && request.sequenceEnd;
    if (this.#stopped && (start || !this.#knows(id))) {
      throw new NereidError(
        'SERVER_STOPPING',
        `Server is stopping, scheduler for model '${this.#model}' has stopped accepting new inference requests`,
      );
    }
    if (anonymous && !internal) {
      throw new NereidError(
        'SEQUENCE_ID_MISSING',
        `inference request to model '${this.#model}' must specify a non-zero or non-empty correlation ID; ` +
          `set the 'sequence_id' parameter (with 'sequence_start' on the first request of the sequence)`,
      );
    }
    if (request.batchSize > 1) {
      throw new NereidError(
        'SEQUENCE_BATCH_SIZE',
        `inference request to model '${this.#model}' must specify batch-size 1 due to requirements of sequence batcher (got batch size ${request.batchSize} for sequence ${describeId(id)})`,
      );
    }
    if (!internal && this.#controls.corrid !== undefined && (this.#controls.corrid.datatype === 'BYTES') !== (typeof id === 'string')) {
      throw new NereidError(
        'SEQUENCE_ID_TYPE',
        `sequence batching control '${this.#controls.corrid.name}' of model '${this.#model}' has data type ` +
          `${this.#controls.corrid.datatype === 'BYTES' ? 'TYPE_STRING' : 'an integer type'} but the request's correlation ID ${describeId(id)} is ` +
          `${typeof id === 'string' ? 'a string' : 'an integer'}; send a ${this.#controls.corrid.datatype === 'BYTES' ? 'string' : 'integer'} 'sequence_id'`,
      );
    }
    let key = keyOf(id);
    if (!start && !this.#bound.has(key) && !this.#backlogBound.has(key)) {
      throw new NereidError(
        'SEQUENCE_START_MISSING',
        `inference request for sequence ${describeId(id)} to model '${this.#model}' must specify the START flag on the first request of the sequence ` +
          `(the sequence is unknown: it never started, already ended, or was released after ${this.#idleMs * 1000} µs idle)`,
      );
    }
    if (request.signal.aborted) {
      request.fail(new NereidError('REQUEST_CANCELLED', `request '${request.id}' for model '${this.#model}' was cancelled`));
      this.#observer.onRequestComplete(request, 'CANCELED');
      return;
    }
    if (internal) {
      // Internal ids have a key space of their own: they never meet a client's sequence.
      const n = ++this.#internalIds;
      id = this.#controls.corrid?.datatype === 'BYTES' ? `iterative-${n}` : BigInt(n);
      key = `i:${n}`;
    }
    request.times.queue = process.hrtime.bigint();
    const flags = { start, end };
    const slot = internal ? undefined : this.#bound.get(key);
    const backlog = internal ? undefined : this.#backlogBound.get(key);
    if (start && (slot !== undefined || backlog !== undefined)) {
      this.#logger?.warning(
        `model '${this.#model}': sequence ${describeId(id)} received a START request while active; the earlier sequence is considered ended`,
      );
    }
    if (slot !== undefined) {
      const seq = start ? this.#newSequence(id, key) : slot.queue.at(-1)?.seq ?? slot.seq!;
      this.#push(slot.queue, request, seq, flags);
      if (end) {
        this.#bound.delete(key);
        this.#lastSeen.delete(key);
      } else {
        this.#lastSeen.set(key, nowMs());
      }
      this.#wake(slot.instance);
      return;
    }
    if (backlog !== undefined) {
      const seq = start ? this.#newSequence(id, key) : backlog.entries.at(-1)!.seq;
      this.#push(backlog.entries, request, seq, flags);
      this.#backlogExpiry(backlog, request);
      if (end) this.#backlogBound.delete(key);
      return;
    }
    // A START request of an unknown sequence: a free slot, or a new backlog queue.
    const seq = this.#newSequence(id, key);
    const free = this.#freeSlot();
    if (free !== undefined) {
      free.seq = seq;
      this.#push(free.queue, request, seq, flags);
      if (!end && !internal) {
        this.#bound.set(key, free);
        this.#lastSeen.set(key, nowMs());
        this.#armReaper();
      }
      this.#wake(free.instance);
      return;
    }
    const queue: Backlog = { key, entries: [], expiry: Infinity, cancelled: false };
    this.#push(queue.entries, request, seq, flags);
    this.#backlogs.push(queue);
    this.#backlogExpiry(queue, request);
    if (!end && !internal) this.#backlogBound.set(key, queue);
  }

  addInstances(runners: readonly InstanceRunner[]): void {
    for (const runner of runners) {
      if (this.#instances.some((i) => i.runner === runner)) continue;
      const inst: InstanceBatcher = { runner, slots: [], executing: false, lastDelivered: Promise.resolve(), removed: false, timer: undefined };
      for (let index = 0; index < this.#slotsPerInstance; index++) inst.slots.push({ instance: inst, index, queue: [], seq: undefined });
      this.#instances.push(inst);
      for (const slot of inst.slots) this.#fillFromBacklog(slot);
    }
  }

  /**
   * Removed instances take no new sequences. Sequences they hold end: their queued requests fail
   * UNAVAILABLE and their ids are released (a later request must START again).
   */
  removeInstances(runners: readonly InstanceRunner[]): void {
    for (const inst of this.#instances) {
      if (!runners.includes(inst.runner)) continue;
      inst.removed = true;
      if (inst.timer !== undefined) clearTimeout(inst.timer);
      for (const slot of inst.slots) {
        const error = new NereidError(
          'UNAVAILABLE',
          `instance '${inst.runner.spec.name}' of model '${this.#model}' was removed while sequence ${slot.seq ? describeId(slot.seq.id) : ''} held its slot; start the sequence again`,
        );
        this.#failEntries(slot.queue.splice(0), error, 'REJECTED');
        if (slot.seq !== undefined && this.#bound.get(slot.seq.key) === slot) {
          this.#bound.delete(slot.seq.key);
          this.#lastSeen.delete(slot.seq.key);
        }
        slot.seq = undefined;
      }
    }
    this.#instances = this.#instances.filter((i) => !i.removed);
    this.#settle();
  }

  stop(): void {
    this.#stopped = true;
  }

  drain(): Promise<void> {
    if (this.inflightCount === 0) {
      this.#clearTimers();
      return Promise.resolve();
    }
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  // -------------------------------------------------------------------------------------------
  // Sequences, slots, backlog

  #knows(id: bigint | string): boolean {
    const key = keyOf(id);
    return this.#bound.has(key) || this.#backlogBound.has(key);
  }

  #newSequence(id: bigint | string, key: string): Sequence {
    return { id, key, iterative: this.#iterative, state: undefined, executing: false, cancelled: false };
  }

  #push(queue: Entry[], request: ScheduledRequest, seq: Sequence, flags: { start: boolean; end: boolean }): void {
    queue.push({ kind: 'request', request, seq, start: flags.start, end: flags.end, iteration: 0 });
    this.#queued++;
    if (request.signal !== NEVER_ABORTED) {
      // Listens until the request completes: cancelling an executing request also ends its sequence.
      request.onComplete(watchAbort(request.signal, () => this.#cancel(seq)));
    }
  }

  /** Takes a request entry out of its queue (for execution, or to fail it). */
  #take(_entry: Entry & { kind: 'request' }): void {
    this.#queued--;
  }

  #failEntries(entries: Entry[], error: NereidError, reason: FailureReason): void {
    for (const e of entries) {
      if (e.kind !== 'request') continue;
      this.#take(e);
      e.request.fail(error);
      this.#observer.onRequestComplete(e.request, reason);
    }
  }

  /** The free slot with the lowest index, among the instances that take work (§5.2). */
  #freeSlot(): Slot | undefined {
    let best: Slot | undefined;
    for (const inst of this.#instances) {
      if (inst.removed) continue;
      for (const slot of inst.slots) {
        if (slot.seq === undefined && slot.queue.length === 0) {
          if (best === undefined || slot.index < best.index) best = slot;
          break;
        }
      }
    }
    return best;
  }

  /** Frees `slot`: the oldest live backlog queue moves in, or the slot becomes free (§5.2). */
  #release(slot: Slot): void {
    slot.seq = undefined;
    this.#fillFromBacklog(slot);
  }

  #fillFromBacklog(slot: Slot): void {
    if (slot.seq !== undefined || slot.queue.length > 0 || slot.instance.removed) return;
    while (this.#backlogs.length > 0) {
      const backlog = this.#backlogs.shift()!;
      if (backlog.cancelled || backlog.entries.length === 0) continue;
      slot.queue = backlog.entries;
      slot.seq = backlog.entries[0]!.seq;
      if (this.#backlogBound.get(backlog.key) === backlog) {
        this.#backlogBound.delete(backlog.key);
        this.#bound.set(backlog.key, slot);
        this.#lastSeen.set(backlog.key, nowMs());
        this.#armReaper();
      }
      this.#wake(slot.instance);
      return;
    }
  }

  /**
   * Cancellation of a queued request (§5.10): every queued request of its sequence is answered
   * CANCELLED and the sequence's slot is released (a backlog sequence is dropped).
   */
  #cancel(seq: Sequence): void {
    if (seq.cancelled) return;
    seq.cancelled = true;
    const error = new NereidError(
      'REQUEST_CANCELLED',
      `a request of sequence ${describeId(seq.id)} for model '${this.#model}' was cancelled; the sequence and its state were released`,
    );
    for (const inst of this.#instances) {
      for (const slot of inst.slots) {
        const mine = slot.queue.filter((e) => e.seq === seq);
        if (mine.length === 0 && slot.seq !== seq) continue;
        slot.queue = slot.queue.filter((e) => e.seq !== seq);
        this.#failEntries(mine, error, 'CANCELED');
        if (this.#bound.get(seq.key) === slot) {
          this.#bound.delete(seq.key);
          this.#lastSeen.delete(seq.key);
        }
        if (slot.seq === seq) {
          seq.state = undefined;
          if (slot.queue.length > 0) slot.seq = slot.queue[0]!.seq;
          else this.#release(slot);
        }
        this.#wake(inst);
      }
    }
    for (const backlog of this.#backlogs) {
      const mine = backlog.entries.filter((e) => e.seq === seq);
      if (mine.length === 0) continue;
      backlog.entries = backlog.entries.filter((e) => e.seq !== seq);
      this.#failEntries(mine, error, 'CANCELED');
      if (backlog.entries.length === 0) backlog.cancelled = true;
      if (this.#backlogBound.get(seq.key) === backlog) this.#backlogBound.delete(seq.key);
    }
    this.#settle();
  }

  // -------------------------------------------------------------------------------------------
  // Timeouts

  /** The idle reaper (§5.6): wakes at the next possible expiry of a sequence holding a slot. */
  #armReaper(): void {
    if (this.#reaper !== undefined || this.#lastSeen.size === 0) return;
    let next = Infinity;
    for (const at of this.#lastSeen.values()) next = Math.min(next, at + this.#idleMs);
    this.#reaper = setTimeout(() => {
      this.#reaper = undefined;
      this.#reap();
      this.#armReaper();
    }, Math.max(1, next - nowMs()));
    this.#reaper.unref();
  }

  #reap(): void {
    const now = nowMs();
    for (const [key, at] of this.#lastSeen) {
      if (now - at <= this.#idleMs) continue;
      const slot = this.#bound.get(key);
      this.#lastSeen.delete(key);
      if (slot === undefined) continue;
      this.#bound.delete(key);
      const seq = slot.queue.at(-1)?.seq ?? slot.seq!;
      this.#logger?.verbose(1, `model '${this.#model}': sequence ${describeId(seq.id)} idle for over ${this.#idleMs} ms, released`);
      slot.queue.push({ kind: 'end', seq });
      this.#wake(slot.instance);
    }
  }

  #backlogExpiry(backlog: Backlog, request: ScheduledRequest): void {
    if (request.timeoutUs <= 0) return;
    backlog.expiry = Math.min(backlog.expiry, nowMs() + request.timeoutUs / 1000);
    this.#armBacklogTimer();
  }

  #armBacklogTimer(): void {
    if (this.#backlogTimer !== undefined) clearTimeout(this.#backlogTimer);
    this.#backlogTimer = undefined;
    let next = Infinity;
    for (const b of this.#backlogs) if (!b.cancelled) next = Math.min(next, b.expiry);
    if (next === Infinity) return;
    this.#backlogTimer = setTimeout(() => {
      this.#backlogTimer = undefined;
      this.#expireBacklogs();
    }, Math.max(1, Math.min(next - nowMs(), BACKLOG_IDLE_RECHECK_MS * 20)));
    this.#backlogTimer.unref();
  }

  /** Backlog queues past their expiry fail as a whole with UNAVAILABLE (§5.7). */
  #expireBacklogs(): void {
    const now = nowMs();
    const keep: Backlog[] = [];
    for (const b of this.#backlogs) {
      if (b.cancelled || b.expiry > now) {
        keep.push(b);
        continue;
      }
      if (this.#backlogBound.get(b.key) === b) this.#backlogBound.delete(b.key);
      const id = b.entries[0]?.seq.id ?? '';
      this.#failEntries(
        b.entries,
        new NereidError(
          'SEQUENCE_TIMEOUT',
          `timeout of the corresponding sequence has been expired (sequence ${describeId(id)} of model '${this.#model}' waited in the backlog for a free sequence slot); ` +
            `raise the request timeout or add instances or slots`,
        ),
        'REJECTED',
      );
    }
    this.#backlogs = keep;
    this.#armBacklogTimer();
    this.#settle();
  }

  #clearTimers(): void {
    if (this.#reaper !== undefined) clearTimeout(this.#reaper);
    if (this.#backlogTimer !== undefined) clearTimeout(this.#backlogTimer);
    this.#reaper = undefined;
    this.#backlogTimer = undefined;
    for (const inst of this.#instances) if (inst.timer !== undefined) clearTimeout(inst.timer);
  }

  // -------------------------------------------------------------------------------------------
  // Execution

  #wake(inst: InstanceBatcher): void {
    if (inst.executing || inst.removed) return;
    queueMicrotask(() => this.#schedule(inst));
  }

  /** Pops leading force-end markers of every slot, releasing those slots. */
  #processMarkers(inst: InstanceBatcher): void {
    for (const slot of inst.slots) {
      while (slot.queue[0]?.kind === 'end') {
        const marker = slot.queue.shift()!;
        if (slot.queue.length === 0) {
          marker.seq.state = undefined;
          this.#release(slot);
        } else {
          slot.seq = slot.queue[0]!.seq;
        }
      }
    }
  }

  #schedule(inst: InstanceBatcher): void {
    if (inst.executing || inst.removed || !inst.runner.available) return;
    if (inst.timer !== undefined) {
      clearTimeout(inst.timer);
      inst.timer = undefined;
    }
    this.#processMarkers(inst);
    const batch = this.#oldest ? this.#formOldest(inst) : this.#formDirect(inst);
    if (batch === undefined) {
      this.#settle();
      return;
    }
    inst.executing = true;
    const real = batch.filter((r) => !(r instanceof FillerRow));
    this.#executing += real.length;
    void inst.runner.run(batch).then(() => {
      inst.executing = false;
      this.#executing -= real.length;
      for (const r of real) if (r instanceof SequenceStep && r.entry.seq.iterative) this.#iterationEnded(r);
      this.#schedule(inst);
      this.#settle();
    });
  }

  /**
   * An execution of an iterative sequence's request returned (§5.9): a rescheduled request is
   * queued on its slot again with neither START nor END; otherwise the model released it and the
   * sequence ends, freeing its slot once what is queued ahead ran.
   */
  #iterationEnded(step: SequenceStep): void {
    step.markReturned();
    const { entry, slot } = step;
    const { seq, request } = entry;
    const holds = slot.seq === seq || slot.queue.some((e) => e.seq === seq);
    if (step.rescheduled) {
      if (!seq.cancelled && !request.signal.aborted && holds && !slot.instance.removed) {
        slot.queue.push({ ...entry, start: false, end: false, iteration: entry.iteration + 1 });
        this.#queued++;
        seq.executing = false;
        if (this.#bound.get(seq.key) === slot) this.#lastSeen.set(seq.key, nowMs());
        return;
      }
      const error = seq.cancelled || request.signal.aborted
        ? new NereidError('REQUEST_CANCELLED', `request '${request.id}' of iterative sequence ${describeId(seq.id)} for model '${this.#model}' was cancelled`)
        : new NereidError('UNAVAILABLE', `iterative sequence ${describeId(seq.id)} of model '${this.#model}' lost its slot before its next iteration; send the request again`);
      request.fail(error);
      this.#observer.onRequestComplete(request, error.kind === 'CANCELLED' ? 'CANCELED' : 'REJECTED');
    }
    if (!holds) return;
    if (this.#bound.get(seq.key) === slot) {
      this.#bound.delete(seq.key);
      this.#lastSeen.delete(seq.key);
    }
    slot.queue.push({ kind: 'end', seq });
  }

  /** Sleeps `ms` then schedules `inst` again. */
  #retryIn(inst: InstanceBatcher, ms: number): undefined {
    inst.timer = setTimeout(() => {
      inst.timer = undefined;
      this.#schedule(inst);
    }, Math.max(1, ms));
    inst.timer.unref();
    return undefined;
  }

  /** Direct strategy (§5.4): one row per slot up to the highest ready one, fillers elsewhere. */
  #formDirect(inst: InstanceBatcher): ScheduledRequest[] | undefined {
    let highest = -1;
    let ready = 0;
    let earliest = Infinity;
    let reference: (Entry & { kind: 'request' }) | undefined;
    for (const slot of inst.slots) {
      const head = slot.queue[0];
      if (head?.kind !== 'request') continue;
      ready++;
      highest = slot.index;
      reference ??= head;
      earliest = Math.min(earliest, Number(head.request.times.queue) / 1e6);
    }
    if (reference === undefined) return undefined;
    const direct = this.#config.direct;
    if (direct !== undefined && direct.max_queue_delay_microseconds > 0 && direct.minimum_slot_utilization > 0) {
      const waited = Number(process.hrtime.bigint()) / 1e6 - earliest;
      const delayMs = direct.max_queue_delay_microseconds / 1000;
      if (waited <= delayMs && ready / this.#slotsPerInstance < direct.minimum_slot_utilization) {
        return this.#retryIn(inst, Math.min(delayMs - waited, IDLE_WAKE_MS));
      }
    }
    const referenceSlot = inst.slots.find((s) => s.queue[0] === reference)!;
    const referenceStep = this.#step(reference, referenceSlot);
    const rows: ScheduledRequest[] = [];
    for (const slot of inst.slots.slice(0, highest + 1)) {
      const head = slot.queue[0];
      if (head?.kind === 'request' && (head === reference || this.#compatible(head.request, reference.request))) {
        slot.queue.shift();
        rows.push(head === reference ? referenceStep : this.#step(head, slot));
        if (head.end) this.#endTaken(slot);
      } else {
        rows.push(this.#filler(referenceStep));
      }
    }
    if (!this.#batching) return rows.filter((r) => !(r instanceof FillerRow)).slice(0, 1);
    return rows;
  }

  /**
   * Oldest strategy (§5.5): the heads of the instance's sequences with nothing executing, oldest
   * first and compatible with the oldest, up to max_batch_size; waits up to
   * `max_queue_delay_microseconds` for the preferred size.
   */
  #formOldest(inst: InstanceBatcher): ScheduledRequest[] | undefined {
    const heads: { slot: Slot; entry: Entry & { kind: 'request' } }[] = [];
    for (const slot of inst.slots) {
      const head = slot.queue[0];
      if (head?.kind === 'request' && !head.seq.executing) heads.push({ slot, entry: head });
    }
    if (heads.length === 0) return undefined;
    heads.sort((a, b) => (a.entry.request.times.queue < b.entry.request.times.queue ? -1 : 1));
    const oldest = heads[0]!.entry.request;
    const picked = heads.filter((h) => h === heads[0] || this.#compatible(h.entry.request, oldest)).slice(0, this.#batching ? this.#maxBatchSize : 1);
    const delayMs = (this.#config.oldest?.max_queue_delay_microseconds ?? 0) / 1000;
    if (delayMs > 0 && picked.length < this.#preferred) {
      const waited = Number(process.hrtime.bigint() - oldest.times.queue) / 1e6;
      if (waited < delayMs) return this.#retryIn(inst, delayMs - waited);
    }
    const batch: ScheduledRequest[] = [];
    for (const { slot, entry } of picked) {
      slot.queue.shift();
      entry.seq.executing = true;
      const step = this.#step(entry, slot);
      if (entry.iteration === 0) {
        entry.request.onComplete(() => {
          entry.seq.executing = false;
          this.#wake(inst);
        });
        // §5.5: the internal batcher's preserve_ordering (§4.7), in the order requests are taken.
        if (this.#preserveOrdering) {
          entry.request.deliverAfter(inst.lastDelivered);
          inst.lastDelivered = entry.request.delivered;
        }
      }
      batch.push(step);
      if (entry.end) this.#endTaken(slot);
    }
    return batch;
  }

  /** The END request of `seq` was taken for execution: its slot is released (§5.2). */
  #endTaken(slot: Slot): void {
    if (slot.queue.length > 0) {
      slot.seq = slot.queue[0]!.seq;
      return;
    }
    this.#release(slot);
  }

  /** Same shapes for every input a client sent (the batch dimension aside), §4.5. */
  #compatible(a: ScheduledRequest, b: ScheduledRequest): boolean {
    for (const [name, t] of a.inputs) {
      const u = b.inputs.get(name);
      if (u === undefined || u.datatype !== t.datatype || u.shape.length !== t.shape.length) return false;
      for (let i = this.#batching ? 1 : 0; i < t.shape.length; i++) if (t.shape[i] !== u.shape[i]) return false;
    }
    return a.inputs.size === b.inputs.size;
  }

  /** The request as the backend sees it: controls and current state added (§5.3, §5.8). */
  #step(entry: Entry & { kind: 'request' }, slot: Slot): SequenceStep {
    this.#take(entry);
    const { request, seq } = entry;
    const inputs = new Map(request.inputs);
    setControls(this.#controls, this.#batching, inputs, entry.start, entry.end, true, seq.id);
    if (this.#states.length > 0) {
      if (entry.start || seq.state === undefined) {
        seq.state = new Map(this.#states.map((s) => [s.inputName, { shape: s.initialShape, data: s.initialData }]));
      }
      for (const s of this.#states) {
        const current = seq.state.get(s.inputName)!;
        inputs.set(s.inputName, requestTensor(this.#batching, s.inputName, s.datatype, current.shape, current.data));
      }
    }
    const byOutput = new Map(this.#states.map((s) => [s.outputName, s] as const));
    return new SequenceStep(this.#model, entry, slot, inputs, this.#stateOutputs, (outputs) => {
      if (seq.cancelled) return;
      const state = (seq.state ??= new Map());
      for (const t of outputs) {
        const s = byOutput.get(t.name)!;
        // Copied: the response's tensors are views over the whole batch's output buffer.
        state.set(s.inputName, { shape: this.#batching ? t.shape.slice(1) : [...t.shape], data: t.data.slice() });
      }
    });
  }

  /** A filler row (§5.4): the reference row's data with READY false and CORRID 0. */
  #filler(reference: SequenceStep): FillerRow {
    const inputs = new Map(reference.inputs);
    setControls(this.#controls, this.#batching, inputs, false, false, false, this.#controls.corrid?.datatype === 'BYTES' ? '' : 0n);
    return new FillerRow(inputs, reference.requestedOutputs);
  }

  #settle(): void {
    if (this.inflightCount === 0 && this.#drainWaiters.length > 0) {
      const waiters = this.#drainWaiters;
      this.#drainWaiters = [];
      this.#clearTimers();
      for (const w of waiters) w();
    }
  }
}
