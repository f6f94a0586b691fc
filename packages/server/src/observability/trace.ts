/**
 * Request tracing, Triton's trace extension (docs/observability.md): which requests are traced
 * (`TraceManager.sample`, by the rate and count of the global or model setting), what a trace
 * records (`Trace`: timestamps, tensors at level TENSORS, child traces of ensemble steps) and who
 * receives finished traces (`TraceSink`s: the trace file of mode `triton`, trace-file.ts).
 *
 * ## Interface for another trace mode (a `TraceSink`)
 *
 * A mode is a `TraceSink` handed to `TraceManager` (`addSink`; with no sink nothing is sampled,
 * and a level other than OFF set through the API is refused as Triton refuses it without a trace
 * file). The manager calls
 * `sink.write(trace)` once per *root* trace, on the event loop, on the turn after the request's
 * response was sent (HTTP_SEND_END / GRPC_SEND_END) or the request failed; by then every child
 * trace (one per ensemble step request, `trace.children`, recursively) has ended too. The sink reads:
 *
 * - `trace.id`, `trace.parentId` (0 for a root), `trace.model`, `trace.version`, `trace.requestId`;
 * - `trace.timestamps()`: `[name, ns]` pairs in time order, `ns` a `bigint` of
 *   `process.hrtime.bigint()` (monotonic; `epochNs(ns)` converts to Unix-epoch nanoseconds). Names
 *   are Triton's: HTTP_RECV_START/END, GRPC_WAITREAD_START/END, REQUEST_START, QUEUE_START,
 *   COMPUTE_START, COMPUTE_INPUT_END, COMPUTE_OUTPUT_START, COMPUTE_END, INFER_RESPONSE_COMPLETE,
 *   REQUEST_END, HTTP_SEND_START/END, GRPC_SEND_START/END. Any may be missing (a request that
 *   failed before execution has no COMPUTE_*; an ensemble has none: its steps compute);
 * - `trace.tensors` at level TENSORS (inputs as queued, outputs as the backend gave them);
 * - `trace.carrier`: the request's trace-context headers (`traceparent`, `tracestate`) as the
 *   client sent them (HTTP headers, gRPC metadata), for a mode that continues the client's trace;
 * - `trace.error`: the request's error message, if it failed.
 *
 * `write` must not throw and must not block: a sink that exports does so asynchronously and in
 * batches. `flush()` resolves once everything written so far is out; `close()` flushes and
 * releases the sink (server shutdown). Frontends and the facade never know which sinks exist.
 *
 * ## Cost
 *
 * With tracing off (every setting at level OFF, the default) a request pays one property read and
 * one branch in its frontend (`manager.enabled`) and nothing else: no trace object, no timestamp.
 * A sampled request records its timestamps into two arrays; the request's own timestamps
 * (queue, compute) are read from its `RequestTimes` when the trace is written, not copied.
 */
import { NereidError } from '@nereid/protocol';
import type { BackendTensor } from '../backends/spi.js';
import type { RequestTimes } from '../scheduling/scheduler.js';

/** Triton's trace levels; TIMESTAMPS and TENSORS combine, OFF stands alone. */
export type TraceLevelName = 'OFF' | 'TIMESTAMPS' | 'TENSORS';
export type TraceMode = 'triton' | 'opentelemetry';

/** Level bits. */
export const TRACE_TIMESTAMPS = 1;
export const TRACE_TENSORS = 2;

/** One trace setting, as in effect for the server or for a model. */
export interface TraceSettingValues {
  /** Bits of TRACE_TIMESTAMPS and TRACE_TENSORS; 0 is OFF. */
  level: number;
  /** Every `rate`-th request is traced (1 ≤ rate ≤ 2^32-1). */
  rate: number;
  /** Traces left to collect; -1: no limit. Counts down as traces are taken. */
  count: number;
  /** Root traces per trace file (`<file>.0`, `<file>.1`, …); 0: one file, `<file>` itself. */
  logFrequency: number;
  /** Where mode `triton` writes traces; '' for nowhere. Set by the operator only. */
  file: string;
  mode: TraceMode;
}

export const DEFAULT_TRACE_SETTINGS: Readonly<TraceSettingValues> = {
  level: 0,
  rate: 1000,
  count: -1,
  logFrequency: 0,
  file: '',
  mode: 'triton',
};

const UINT32_MAX = 4294967295;
const INT32_MAX = 2147483647;

/** The wire names of the settings, in Triton's answer order. */
export const TRACE_SETTING_NAMES = ['trace_level', 'trace_rate', 'trace_count', 'log_frequency', 'trace_file', 'trace_mode'] as const;
export type TraceSettingName = (typeof TRACE_SETTING_NAMES)[number];

/**
 * The settings as both protocols answer them, in answer order: every value a list of strings
 * (HTTP: trace_level a list, the others strings). Mode `triton` answers the six of
 * `TRACE_SETTING_NAMES`; mode `opentelemetry`, as Triton, answers trace_level, trace_rate,
 * trace_count and trace_mode, then the mode's own settings (`TraceManager.modeSettings`).
 */
export type TraceSettingsAnswer = Record<string, string[]>;

/**
 * An update as both protocols carry it: each named setting with its values (HTTP's string, or
 * list for trace_level; gRPC's repeated string), or null to clear it (HTTP null, gRPC an empty list).
 */
export type TraceSettingsUpdate = ReadonlyMap<string, readonly string[] | null>;

export function levelNames(level: number): string[] {
  if (level === 0) return ['OFF'];
  const names: string[] = [];
  if (level & TRACE_TIMESTAMPS) names.push('TIMESTAMPS');
  if (level & TRACE_TENSORS) names.push('TENSORS');
  return names;
}

/** Parses trace_level values (OFF alone, or TIMESTAMPS and/or TENSORS), with Triton's wording where it has one. */
export function parseTraceLevel(values: readonly string[]): number {
  if (values.length === 0) {
    throw new NereidError('TRACE_SETTING_INVALID', "Unable to parse 'trace_level': expected OFF, or TIMESTAMPS and/or TENSORS, got no value");
  }
  let level = 0;
  let off = false;
  for (const v of values) {
    if (v === 'OFF') off = true;
    else if (v === 'TIMESTAMPS') level |= TRACE_TIMESTAMPS;
    else if (v === 'TENSORS') level |= TRACE_TENSORS;
    else throw new NereidError('TRACE_SETTING_INVALID', `Unable to parse 'trace_level', got: ${v}; expected OFF, TIMESTAMPS or TENSORS`);
  }
  if (off && values.length > 1) throw new NereidError('TRACE_SETTING_INVALID', "Expect only one trace level 'OFF' is specified");
  return level;
}

/** An integer setting in [min, max], Triton's wording for what does not parse or is out of range. */
function parseIntSetting(name: string, value: string, min: number, max: number, grpc = false): number {
  if (!/^-?[0-9]+$/.test(value)) throw new NereidError('TRACE_SETTING_INVALID', `Unable to parse '${name}', got: ${value}`);
  const n = Number(value);
  if (name === 'trace_count' && n < -1) {
    // Triton's two frontends word this one differently.
    throw new NereidError('TRACE_SETTING_INVALID', `Unable to parse 'trace_count'. Expecting value >= -1, got:${grpc ? ' ' : ''}${value}`);
  }
  if (n < min || n > max) throw new NereidError('TRACE_SETTING_INVALID', `Unable to parse '${name}', value is out of range [ ${min}, ${max} ], got: ${value}`);
  return n;
}

/** A rate of 0 parses: it is refused only where it would trace (`checkTraceable`), as in Triton. */
export function parseTraceRate(value: string): number {
  return parseIntSetting('trace_rate', value, 0, UINT32_MAX);
}

/**
 * Refuses a setting that traces (a level other than OFF) with a rate of 0 (but in mode
 * opentelemetry) or nowhere to put traces (no sink: mode triton without a file), in Triton's words.
 */
export function checkTraceable(values: Pick<TraceSettingValues, 'level' | 'rate' | 'mode'>, hasSink: boolean): void {
  if (values.level === 0) return;
  // Mode opentelemetry takes rate 0, as Triton 2.51 does: only requests with a client's context are traced.
  if (values.rate === 0 && values.mode !== 'opentelemetry') throw new NereidError('TRACE_SETTING_INVALID', 'Attempting to set invalid trace setting :sample rate must be non-zero');
  if (!hasSink) throw new NereidError('TRACE_SETTING_INVALID', 'Attempting to set invalid trace setting :trace file name is not given');
}

export function parseTraceCount(value: string, grpc = false): number {
  return parseIntSetting('trace_count', value, -1, INT32_MAX, grpc);
}

export function parseLogFrequency(value: string): number {
  return parseIntSetting('log_frequency', value, 0, UINT32_MAX);
}

export function parseTraceMode(value: string): TraceMode {
  if (value === 'triton' || value === 'opentelemetry') return value;
  throw new NereidError('TRACE_SETTING_INVALID', `Unknown trace mode '${value}': expected triton or opentelemetry`);
}

const ONE_VALUE = new Set(['trace_rate', 'trace_count', 'log_frequency']);

/**
 * The changes an update makes, checked whole before any applies: `undefined` for a setting it
 * does not name, `null` for one it clears. Refuses the trace file and mode (operator settings,
 * Triton's 501 for the file) and names no setting it does not know.
 */
function checkUpdate(update: TraceSettingsUpdate, grpc: boolean): Partial<Record<'level' | 'rate' | 'count' | 'logFrequency', number | null>> {
  const out: Partial<Record<'level' | 'rate' | 'count' | 'logFrequency', number | null>> = {};
  for (const [name, values] of update) {
    if (name === 'trace_file') throw new NereidError('TRACE_SETTING_READ_ONLY', 'trace file location can not be updated through network protocol');
    if (name === 'trace_mode') {
      throw new NereidError('TRACE_SETTING_READ_ONLY', 'trace mode can not be updated through network protocol; the server sets it at start (--trace-config mode=<triton|opentelemetry>)');
    }
    if (!(TRACE_SETTING_NAMES as readonly string[]).includes(name)) {
      throw new NereidError('TRACE_SETTING_INVALID', `Unknown trace setting '${name}': the settings are trace_level, trace_rate, trace_count and log_frequency`);
    }
    if (values !== null && ONE_VALUE.has(name) && values.length !== 1) {
      throw new NereidError('TRACE_SETTING_INVALID', `Expect only one value for '${name}', got ${values.length}`);
    }
    switch (name) {
      case 'trace_level':
        out.level = values === null ? null : parseTraceLevel(values);
        break;
      case 'trace_rate':
        out.rate = values === null ? null : parseTraceRate(values[0]!);
        break;
      case 'trace_count':
        out.count = values === null ? null : parseTraceCount(values[0]!, grpc);
        break;
      case 'log_frequency':
        out.logFrequency = values === null ? null : parseLogFrequency(values[0]!);
        break;
    }
  }
  return out;
}

/** The clock conversion of `epochNs`, fixed once: hrtime has no epoch of its own. */
const EPOCH_OFFSET_NS = BigInt(Date.now()) * 1_000_000n - process.hrtime.bigint();

/** A `process.hrtime.bigint()` reading as nanoseconds since the Unix epoch (±1 ms). */
export function epochNs(ns: bigint): bigint {
  return ns + EPOCH_OFFSET_NS;
}

/** A tensor as a trace at level TENSORS records it (Triton's trace file form). */
export interface TraceTensor {
  activity: 'TENSOR_QUEUE_INPUT' | 'TENSOR_BACKEND_OUTPUT';
  ns: bigint;
  name: string;
  datatype: string;
  /** Dimensions joined by commas. */
  shape: string;
  /** Elements joined by commas (BYTES: each element as text). */
  data: string;
}

/** The elements of a tensor as Triton's trace file writes them: comma-separated. */
export function tensorText(datatype: string, data: Uint8Array): string {
  const { buffer, byteOffset, byteLength } = data;
  // Typed views need aligned offsets: an unaligned tensor is copied (`new Uint8Array` copies; a Buffer's slice would not).
  const view = (size: number): [ArrayBufferLike, number, number] =>
    byteOffset % size === 0 ? [buffer, byteOffset, Math.floor(byteLength / size)] : [new Uint8Array(data).buffer, 0, Math.floor(byteLength / size)];
  let values: ArrayLike<unknown>;
  switch (datatype) {
    case 'BOOL':
      return Array.from(data, (b) => (b ? '1' : '0')).join(',');
    case 'UINT8':
      values = data;
      break;
    case 'INT8':
      values = new Int8Array(...view(1));
      break;
    case 'UINT16':
      values = new Uint16Array(...view(2));
      break;
    case 'INT16':
      values = new Int16Array(...view(2));
      break;
    case 'UINT32':
      values = new Uint32Array(...view(4));
      break;
    case 'INT32':
      values = new Int32Array(...view(4));
      break;
    case 'UINT64':
      values = new BigUint64Array(...view(8));
      break;
    case 'INT64':
      values = new BigInt64Array(...view(8));
      break;
    case 'FP32':
      values = new Float32Array(...view(4));
      break;
    case 'FP64':
      values = new Float64Array(...view(8));
      break;
    case 'BYTES': {
      const parts: string[] = [];
      const dv = new DataView(buffer, byteOffset, byteLength);
      for (let at = 0; at + 4 <= byteLength; ) {
        const n = dv.getUint32(at, true);
        at += 4;
        parts.push(Buffer.from(data.subarray(at, at + n)).toString('utf8'));
        at += n;
      }
      return parts.join(',');
    }
    default:
      // FP16, BF16: Triton writes the raw 16-bit values too.
      values = new Uint16Array(...view(2));
  }
  return Array.prototype.join.call(values, ',');
}

/**
 * One traced request. Created by `TraceManager.sample` (a root) or `child` (an ensemble step's
 * request); stamped by the frontend (receive, send) and the facade (request start, response
 * complete); the request's queue and compute timestamps come from its `RequestTimes`
 * (`attach`). A root is handed to the sinks when the frontend calls `end`.
 */
export class Trace {
  readonly id: number;
  readonly parentId: number;
  readonly level: number;
  model: string;
  version: string;
  requestId = '';
  /** Trace-context headers the client sent (`traceparent`, `tracestate`), for another mode. */
  carrier: Record<string, string> | undefined;
  error: string | undefined;
  /** Level TENSORS: inputs as queued and outputs as computed. */
  tensors: TraceTensor[] | undefined;
  children: Trace[] | undefined;
  readonly #manager: TraceManager;
  readonly #names: string[] = [];
  readonly #ns: bigint[] = [];
  #times: RequestTimes | undefined;
  #completedAt: (() => bigint) | undefined;
  #compute = true;
  #ended = false;

  constructor(manager: TraceManager, id: number, parentId: number, level: number, model: string) {
    this.#manager = manager;
    this.id = id;
    this.parentId = parentId;
    this.level = level;
    this.model = model;
    this.version = '';
  }

  /** Records `name` at `ns` (now by default). */
  stamp(name: string, ns: bigint = process.hrtime.bigint()): void {
    this.#names.push(name);
    this.#ns.push(ns);
  }

  /**
   * The request this trace follows: its queue and compute timestamps (read when the trace is
   * written) and REQUEST_END (`completedAt`, 0 while running). `compute` false: no COMPUTE_*
   * (an ensemble, whose steps compute).
   */
  attach(times: RequestTimes, completedAt: () => bigint, compute: boolean): void {
    this.#times = times;
    this.#completedAt = completedAt;
    this.#compute = compute;
  }

  /** Level TENSORS: records the tensors of `activity`, their bytes formatted now (buffers are reused). */
  recordTensors(activity: TraceTensor['activity'], tensors: Iterable<BackendTensor>): void {
    const ns = process.hrtime.bigint();
    const list = (this.tensors ??= []);
    for (const t of tensors) {
      list.push({ activity, ns, name: t.name, datatype: t.datatype, shape: t.shape.join(','), data: tensorText(t.datatype, t.data) });
    }
  }

  /** A child trace for a request this request makes (an ensemble step), `parentId` this trace's id. */
  child(model: string): Trace {
    const c = new Trace(this.#manager, this.#manager.nextId(), this.id, this.level, model);
    (this.children ??= []).push(c);
    return c;
  }

  /** Every timestamp, `[name, ns]` in time order (see the file comment). */
  timestamps(): [string, bigint][] {
    const out: [string, bigint][] = [];
    for (let i = 0; i < this.#names.length; i++) out.push([this.#names[i]!, this.#ns[i]!]);
    const t = this.#times;
    if (t !== undefined) {
      if (t.queue !== 0n) out.push(['QUEUE_START', t.queue]);
      if (this.#compute) {
        if (t.computeStart !== 0n) out.push(['COMPUTE_START', t.computeStart]);
        if (t.computeInputEnd !== 0n) out.push(['COMPUTE_INPUT_END', t.computeInputEnd]);
        if (t.computeOutputStart !== 0n) out.push(['COMPUTE_OUTPUT_START', t.computeOutputStart]);
        if (t.computeEnd !== 0n) out.push(['COMPUTE_END', t.computeEnd]);
      }
      const end = this.#completedAt!();
      if (end !== 0n) out.push(['REQUEST_END', end]);
    }
    out.sort((a, b) => (a[1] < b[1] ? -1 : a[1] > b[1] ? 1 : 0));
    return out;
  }

  /** A root trace is complete (its response sent, or its request failed): the sinks get it. Once only. */
  end(): void {
    if (this.#ended || this.parentId !== 0) return;
    this.#ended = true;
    this.#manager.finished(this);
  }
}

/** Receives finished root traces (see the file comment). */
export interface TraceSink {
  write(trace: Trace): void;
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** A setting in effect and its sampling state. Replaced (counter restarted) when it changes. */
class Sampler {
  seen = 0;
  constructor(readonly values: TraceSettingValues) {}
}

type Overrides = Partial<Pick<TraceSettingValues, 'level' | 'rate' | 'count' | 'logFrequency'>>;

/**
 * The trace settings (global, per model) and the sampling of requests. A model without settings
 * of its own follows the global setting (and shares its counters); one with some follows the
 * global setting for the others. Clearing a global setting restores the value the server
 * started with; clearing every setting of a model returns it to the global setting.
 */
export class TraceManager {
  /** Some setting traces (a level other than OFF) and a sink takes traces: the one test a request pays with tracing off. */
  enabled = false;
  readonly #startup: TraceSettingValues;
  #global: Sampler;
  readonly #models = new Map<string, { overrides: Overrides; sampler: Sampler }>();
  readonly #sinks: TraceSink[] = [];
  #nextId = 1;

  constructor(settings: Partial<TraceSettingValues> = {}) {
    this.#startup = { ...DEFAULT_TRACE_SETTINGS, ...settings };
    this.#global = new Sampler({ ...this.#startup });
    this.#refresh();
  }

  addSink(sink: TraceSink): void {
    this.#sinks.push(sink);
    this.#refresh();
  }

  /** The global setting in effect (a copy). */
  get global(): TraceSettingValues {
    return { ...this.#global.values };
  }

  /** The setting in effect for `model`. */
  settingsOf(model: string | undefined): TraceSettingValues {
    const m = model === undefined ? undefined : this.#models.get(model);
    return { ...(m?.sampler ?? this.#global).values };
  }

  /**
   * The settings of the mode's sink that the trace extension answers after the global ones (mode
   * `opentelemetry`: url, resource, bsp_*), set by whoever adds that sink; fixed at start.
   */
  modeSettings: readonly (readonly [string, string[]])[] = [];

  /** Both protocols' answer for the server (`model` undefined) or a model. */
  answer(model?: string): TraceSettingsAnswer {
    const v = this.settingsOf(model);
    if (v.mode === 'opentelemetry') {
      const answer: TraceSettingsAnswer = {
        trace_level: levelNames(v.level),
        trace_rate: [String(v.rate)],
        trace_count: [String(v.count)],
        trace_mode: [v.mode],
      };
      for (const [name, values] of this.modeSettings) answer[name] = [...values];
      return answer;
    }
    return {
      trace_level: levelNames(v.level),
      trace_rate: [String(v.rate)],
      trace_count: [String(v.count)],
      log_frequency: [String(v.logFrequency)],
      trace_file: [v.file],
      trace_mode: [v.mode],
    };
  }

  /**
   * Applies an update to the global setting (`model` undefined) or a model's; checked whole
   * first, so a refused update changes nothing. The caller checks that the model exists.
   * `grpc`: word errors as Triton's gRPC frontend does, where it differs from its HTTP one.
   */
  update(model: string | undefined, update: TraceSettingsUpdate, options: { grpc?: boolean } = {}): TraceSettingsAnswer {
    const changes = checkUpdate(update, options.grpc ?? false);
    if (model === undefined) {
      const next = { ...this.#global.values };
      for (const key of ['level', 'rate', 'count', 'logFrequency'] as const) {
        const v = changes[key];
        if (v === null) next[key] = this.#startup[key];
        else if (v !== undefined) next[key] = v;
      }
      checkTraceable(next, this.#sinks.length > 0);
      if (Object.keys(changes).length > 0) {
        this.#global = new Sampler(next);
        for (const m of this.#models.values()) m.sampler = new Sampler({ ...next, ...m.overrides });
      }
    } else if (Object.keys(changes).length > 0) {
      const overrides: Overrides = { ...this.#models.get(model)?.overrides };
      for (const key of ['level', 'rate', 'count', 'logFrequency'] as const) {
        const v = changes[key];
        if (v === null) delete overrides[key];
        else if (v !== undefined) overrides[key] = v;
      }
      checkTraceable({ ...this.#global.values, ...overrides }, this.#sinks.length > 0);
      if (Object.keys(overrides).length === 0) this.#models.delete(model);
      else this.#models.set(model, { overrides, sampler: new Sampler({ ...this.#global.values, ...overrides }) });
    }
    this.#refresh();
    return this.answer(model);
  }

  /** Forgets a model's own settings (the model was unloaded for good). */
  forgetModel(model: string): void {
    if (this.#models.delete(model)) this.#refresh();
  }

  /** On while some setting traces and some sink takes traces: without one, sampling would be wasted. */
  #refresh(): void {
    let on = this.#global.values.level !== 0;
    for (const m of this.#models.values()) on ||= m.sampler.values.level !== 0;
    this.enabled = on && this.#sinks.length > 0;
  }

  /**
   * Whether this request of `model` is traced (every `rate`-th request while `count` lasts): a
   * new root trace, or undefined. Call only when `enabled`. In mode `opentelemetry` a request
   * that carries the client's trace context (`withContext`: a `traceparent`) is traced whatever
   * the rate and count, as Triton does, and does not count down `count`; rate 0 traces only those.
   */
  sample(model: string, withContext = false): Trace | undefined {
    const s = this.#models.get(model)?.sampler ?? this.#global;
    const v = s.values;
    if (v.level === 0) return undefined;
    if (withContext && v.mode === 'opentelemetry') return new Trace(this, this.#nextId++, 0, v.level, model);
    if (v.count === 0 || v.rate === 0) return undefined;
    if (++s.seen < v.rate) return undefined;
    s.seen = 0;
    if (v.count > 0) v.count--;
    return new Trace(this, this.#nextId++, 0, v.level, model);
  }

  /** A new trace id (child traces). */
  nextId(): number {
    return this.#nextId++;
  }

  /**
   * Called by `Trace.end`. The sinks get the trace on the next turn of the event loop: an
   * instance stamps a request's compute times when its `execute` returns, which may come just
   * after the response went out.
   */
  finished(trace: Trace): void {
    if (this.#sinks.length === 0) return;
    this.#finished.push(trace);
    if (this.#finished.length === 1) setImmediate(this.#deliver);
  }

  readonly #finished: Trace[] = [];
  readonly #deliver = (): void => {
    const traces = this.#finished.splice(0);
    for (const trace of traces) for (const sink of this.#sinks) sink.write(trace);
  };

  /** Hands every finished trace to the sinks and flushes them. */
  async flush(): Promise<void> {
    this.#deliver();
    await Promise.all(this.#sinks.map((s) => s.flush()));
  }

  /** Flushes and closes every sink (server shutdown). */
  async close(): Promise<void> {
    this.#deliver();
    await Promise.all(this.#sinks.map((s) => s.close()));
  }
}
