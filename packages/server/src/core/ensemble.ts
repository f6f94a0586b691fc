/**
 * Ensembles (models-and-scheduling.md §6): the load-time checks against the composing models'
 * configurations (§6.2 second table), and the scheduler that runs each ensemble request as a
 * dataflow graph of internal requests to the composing models through the facade (`EnsembleHost`),
 * so every step is validated, scheduled (and batched with other traffic) and counted like any
 * request, without going over the wire.
 *
 * Conditional steps (beyond Triton, docs/ensembles.md): the ensemble's model-level parameter
 * `step_condition:<step index or composing model name>` names a BOOL tensor (an ensemble input or
 * a step output) of exactly one element; the step runs only when it is true. A skipped step
 * produces none of its outputs; a step consuming a tensor that was not produced is skipped too,
 * and ensemble outputs that were not produced are omitted from the response.
 */
import { NereidError, fromConfigDataType, toNereidError, type DataType, type ParameterValue } from '@nereid/protocol';
import type { BackendTensor } from '../backends/spi.js';
import type { ModelConfig } from '../config/model-config.js';
import type { InstanceRunner } from '../scheduling/instance-runner.js';
import type { FailureReason, RequestTimes, ScheduledRequest, Scheduler, SchedulerObserver } from '../scheduling/scheduler.js';
import type { InferOptions, InferRequest, InferResponse, StreamInferOptions } from './types.js';
import { AbortControllerPool, watchAbort } from './abort-watch.js';

/** What the ensemble needs of the server: internal inference and the composing models' configs. */
export interface EnsembleHost {
  /** One internal request to a composing model, with its timestamps once it completed. */
  infer(request: InferRequest, options: InferOptions): Promise<{ response: InferResponse; times: RequestTimes }>;
  /** One internal request to a decoupled composing model (`Server.inferStream`). */
  inferStream(request: InferRequest, options: StreamInferOptions): Promise<void>;
  /**
   * The version a request for `model` and `version` ('' or -1: the latest ready one) resolves to
   * now, and the configuration it serves with (the same object until that version's copy or
   * configuration changes); throws the lookup error when there is none (§1.7).
   */
  resolve(model: string, version: string): { readonly version: number; readonly config: ModelConfig };
  /**
   * `resolve` for a step request about to be sent: with '' (or -1) the version an unversioned
   * request goes to, which follows the model's version weights when it has them. Each call counts
   * as one routed request.
   */
  route(model: string, version: string): { readonly version: number; readonly config: ModelConfig };
}

/** A step's model version and configuration, as `EnsembleHost.resolve` answers. */
type Resolved = { readonly version: number; readonly config: ModelConfig };

/** Plans kept per ensemble for the version combinations its steps were routed to. */
const MAX_PLANS = 8;

/** Parameter key prefix of a conditional step. */
export const STEP_CONDITION_PREFIX = 'step_condition:';

interface PlannedStep {
  readonly index: number;
  readonly model: string;
  /** The step's `model_version`: '' for the latest ready version (-1). */
  readonly version: string;
  /** The composing model's configuration the step was checked against. */
  readonly composing: ModelConfig;
  /** [composing input, ensemble tensor] */
  readonly inputs: readonly (readonly [string, string])[];
  /** [composing output, ensemble tensor] */
  readonly outputs: readonly (readonly [string, string])[];
  readonly condition: string | undefined;
  readonly batching: boolean;
  readonly decoupled: boolean;
  /** Per-item dims of each composing input (batch dimension excluded). */
  readonly inputDims: ReadonlyMap<string, readonly number[]>;
  /** The ensemble tensors the step waits for: its inputs and its condition. */
  readonly needs: readonly string[];
  /** The step's requested outputs (its output_map keys). */
  readonly requested: readonly { name: string }[];
  /** Composing inputs the composing model declares optional. */
  readonly optional: ReadonlySet<string>;
}

export interface EnsemblePlan {
  readonly name: string;
  readonly steps: readonly PlannedStep[];
  readonly batching: boolean;
  /** Some step is decoupled: so is the ensemble (§6.5). */
  readonly decoupled: boolean;
  /** `max_inflight_requests`: per step, the most internal requests outstanding at once (0: no limit). */
  readonly maxInflight: number;
  readonly outputDims: ReadonlyMap<string, readonly number[]>;
}

function stepLabel(config: ModelConfig, index: number): string {
  return `step ${index} (model '${config.ensemble_scheduling!.step[index]!.model_name}')`;
}

function dimsMatch(a: readonly number[], b: readonly number[]): boolean {
  return a.length === b.length && a.every((d, i) => d === -1 || b[i] === -1 || d === b[i]);
}

/**
 * The ensemble's steps checked against the composing models' completed configurations
 * (models-and-scheduling.md §6.2), with the step conditions. Throws MODEL_LOAD_FAILED naming the
 * step and tensor for the first rule broken. `resolved`: each step's version and configuration,
 * already looked up; without it they are looked up through `host.resolve`.
 */
export function planEnsemble(config: ModelConfig, host: EnsembleHost, resolved?: readonly Resolved[]): EnsemblePlan {
  const name = config.name;
  const fail = (message: string): never => {
    throw new NereidError('MODEL_LOAD_FAILED', `ensemble '${name}': ${message}`);
  };
  const steps = config.ensemble_scheduling!.step;
  const batching = config.max_batch_size > 0;
  /** Every use of an ensemble tensor: datatype, full shape and per-item dims, and where. */
  const uses = new Map<string, { datatype: string; dims: readonly number[]; full: readonly number[]; where: string }[]>();
  const use = (tensor: string, datatype: string, dims: readonly number[], batched: boolean, where: string) => {
    const list = uses.get(tensor) ?? [];
    list.push({ datatype, dims, full: batched ? [-1, ...dims] : dims, where });
    uses.set(tensor, list);
  };
  for (const t of config.input) use(t.name, t.data_type, t.reshape?.shape ?? t.dims, batching, `ensemble input '${t.name}'`);
  for (const t of config.output) use(t.name, t.data_type, t.reshape?.shape ?? t.dims, batching, `ensemble output '${t.name}'`);

  const conditions = new Map<number, string>();
  for (const [key, value] of Object.entries(config.parameters)) {
    if (!key.startsWith(STEP_CONDITION_PREFIX)) continue;
    const target = key.slice(STEP_CONDITION_PREFIX.length);
    let index = /^\d+$/.test(target) ? Number(target) : -1;
    if (index < 0) {
      const matching = steps.flatMap((s, i) => (s.model_name === target ? [i] : []));
      if (matching.length !== 1) {
        fail(
          `parameter '${key}' names ${matching.length === 0 ? 'no step' : 'more than one step'}; ` +
            `use '${STEP_CONDITION_PREFIX}<step index>' (0-based) or the model name of exactly one step`,
        );
      }
      index = matching[0]!;
    }
    if (index >= steps.length) fail(`parameter '${key}' names step ${index}, but the ensemble has ${steps.length} steps`);
    if (conditions.has(index)) fail(`${stepLabel(config, index)} has more than one '${STEP_CONDITION_PREFIX}' parameter`);
    conditions.set(index, value.string_value);
  }

  const planned: PlannedStep[] = steps.map((step, index) => {
    const label = stepLabel(config, index);
    const version = step.model_version >= 0 ? String(step.model_version) : '';
    let composing: ModelConfig;
    try {
      composing = resolved?.[index]?.config ?? host.resolve(step.model_name, version).config;
    } catch (err) {
      const wanted = version === '' ? 'no version of it is ready' : `model_version ${version} is not ready`;
      return fail(`${label}: the composing model is not available (${wanted}): ${toNereidError(err).message}`);
    }
    const stepBatching = composing.max_batch_size > 0;
    if (stepBatching && batching && composing.max_batch_size < config.max_batch_size) {
      fail(`${label}: the composing model's max_batch_size ${composing.max_batch_size} is smaller than the ensemble's ${config.max_batch_size}`);
    }
    const inputDims = new Map<string, readonly number[]>();
    for (const [input, tensor] of Object.entries(step.input_map)) {
      const spec = composing.input.find((t) => t.name === input);
      if (spec === undefined) fail(`${label}: input_map key '${input}' (ensemble tensor '${tensor}') is not an input of model '${step.model_name}'`);
      const dims = spec!.dims;
      inputDims.set(input, dims);
      use(tensor, spec!.data_type, dims, stepBatching, `${label} input '${input}'`);
    }
    for (const spec of composing.input) {
      if (!spec.optional && step.input_map[spec.name] === undefined) {
        fail(`${label}: input '${spec.name}' of model '${step.model_name}' is not mapped; add it to the step's input_map`);
      }
    }
    for (const [output, tensor] of Object.entries(step.output_map)) {
      const spec = composing.output.find((t) => t.name === output);
      if (spec === undefined) fail(`${label}: output_map key '${output}' (ensemble tensor '${tensor}') is not an output of model '${step.model_name}'`);
      use(tensor, spec!.data_type, spec!.dims, stepBatching, `${label} output '${output}'`);
    }
    const condition = conditions.get(index);
    if (condition !== undefined) use(condition, 'TYPE_BOOL', [1], false, `the condition of ${label}`);
    return {
      index,
      model: step.model_name,
      version,
      composing,
      inputs: Object.entries(step.input_map),
      outputs: Object.entries(step.output_map),
      condition,
      batching: stepBatching,
      decoupled: composing.model_transaction_policy?.decoupled ?? false,
      inputDims,
      needs: [...Object.values(step.input_map), ...(condition === undefined ? [] : [condition])],
      requested: Object.keys(step.output_map).map((name) => ({ name })),
      optional: new Set(composing.input.filter((t) => t.optional).map((t) => t.name)),
    };
  });

  const producer = new Map<string, number>();
  for (const s of planned) for (const [, t] of s.outputs) producer.set(t, s.index);
  // §6.2: a step may not consume tensors that come from two different decoupled steps.
  const origins = new Map<string, Set<number>>();
  const originsOf = (tensor: string, depth = 0): Set<number> => {
    let o = origins.get(tensor);
    if (o !== undefined) return o;
    o = new Set();
    const p = producer.get(tensor);
    if (p !== undefined && depth <= planned.length) {
      const s = planned[p]!;
      for (const t of s.needs) for (const d of originsOf(t, depth + 1)) o.add(d);
      if (s.decoupled) o.add(s.index);
    }
    origins.set(tensor, o);
    return o;
  };
  for (const s of planned) {
    const from = new Set<number>();
    for (const t of s.needs) for (const d of originsOf(t)) from.add(d);
    if (from.size > 1) {
      fail(
        `${stepLabel(config, s.index)} consumes tensors that come from more than one decoupled step ` +
          `(steps ${[...from].join(', ')}); its inputs must all come from the same decoupled step`,
      );
    }
  }
  for (const [tensor, list] of uses) {
    const first = list[0]!;
    for (const other of list.slice(1)) {
      if (other.datatype !== first.datatype) {
        fail(`ensemble tensor '${tensor}': ${other.where} has datatype ${other.datatype} but ${first.where} has ${first.datatype}`);
      }
      const condition = other.where.startsWith('the condition') || first.where.startsWith('the condition');
      if (!condition && !dimsMatch(other.dims, first.dims) && !dimsMatch(other.full, first.full)) {
        fail(`ensemble tensor '${tensor}': ${other.where} has dims [${other.dims.join(',')}] but ${first.where} has [${first.dims.join(',')}]`);
      }
    }
  }

  // Conditions must come from ensemble inputs or step outputs, and must not wait on their own step.
  const inputs = new Set(config.input.map((t) => t.name));
  const upstreamSteps = (index: number, seen = new Set<number>()): Set<number> => {
    const s = planned[index]!;
    const needs = [...s.inputs.map(([, t]) => t), ...(s.condition === undefined ? [] : [s.condition])];
    for (const t of needs) {
      const p = producer.get(t);
      if (p !== undefined && !seen.has(p)) {
        seen.add(p);
        upstreamSteps(p, seen);
      }
    }
    return seen;
  };
  for (const s of planned) {
    if (s.condition === undefined) continue;
    if (!inputs.has(s.condition) && !producer.has(s.condition)) {
      fail(`the condition of ${stepLabel(config, s.index)}, tensor '${s.condition}', is neither an ensemble input nor a step output`);
    }
    if (upstreamSteps(s.index).has(s.index)) {
      fail(`the condition of ${stepLabel(config, s.index)}, tensor '${s.condition}', depends on the step itself (a cycle)`);
    }
  }
  return {
    name,
    steps: planned,
    batching,
    decoupled: planned.some((s) => s.decoupled),
    maxInflight: config.ensemble_scheduling!.max_inflight_requests,
    outputDims: new Map(config.output.map((t) => [t.name, t.reshape?.shape ?? t.dims])),
  };
}

/** A tensor of the table: its data and the batch size of what produced it (0: non-batching). */
interface Held {
  readonly tensor: BackendTensor;
  readonly batch: number;
}

/** §6.4: the tensor as a consumer with `batching` and per-item `dims` takes it. */
function adapt(held: Held, batching: boolean, dims: readonly number[]): readonly number[] {
  const shape = held.tensor.shape;
  if (batching && held.batch === 0 && dimsMatch(shape, dims)) return [1, ...shape];
  if (!batching && held.batch === 1 && !dimsMatch(shape, dims) && shape[0] === 1) return shape.slice(1);
  return shape;
}

/**
 * Runs ensemble requests (models-and-scheduling.md §6.3, §6.5). A step is dispatched as soon as its
 * inputs (and its condition) exist, so independent branches run at once; output tensors are
 * handed to the next step as they are (the same bytes, no copy). The first failing step fails the
 * request with `in ensemble '<name>', step <i> (model '<m>'): …`, and aborts the steps in flight.
 */
export class EnsembleScheduler implements Scheduler {
  /** The ensemble's own configuration, to check it again when a composing model changes. */
  readonly #config: ModelConfig;
  #plan: EnsemblePlan;
  readonly #host: EnsembleHost;
  readonly #observer: SchedulerObserver;
  /** Requests in flight (a count: a Set turning over per request chains them for the garbage collector, core/id-map.ts). */
  #inflight = 0;
  /** The steps each set of requested outputs needs, per plan. */
  readonly #needed = new WeakMap<EnsemblePlan, Map<string, readonly PlannedStep[]>>();
  /** The signals that abort an ensemble request's steps, reused (abort-watch.ts). */
  readonly #aborts = new AbortControllerPool();
  /**
   * Plans made for other combinations of composing versions, most recent first: weighted routing
   * sends a step to one version or another from request to request, and each combination is
   * checked once.
   */
  #plans: EnsemblePlan[] = [];
  /** Per step: internal requests outstanding, and dispatches waiting for `maxInflight` (§6.5). */
  readonly #stepInflight: number[];
  readonly #stepWaiting: (() => void)[][];
  #stopped = false;
  #drained: (() => void)[] = [];

  /**
   * @param config  the ensemble's configuration, `plan` made from it (`planEnsemble`) against
   *                the composing models as they were at load
   */
  constructor(config: ModelConfig, plan: EnsemblePlan, host: EnsembleHost, observer: SchedulerObserver) {
    this.#config = config;
    this.#plan = plan;
    this.#host = host;
    this.#observer = observer;
    this.#stepInflight = plan.steps.map(() => 0);
    this.#stepWaiting = plan.steps.map(() => []);
  }

  /** Runs `send` once step `index` has fewer than `maxInflight` requests outstanding (no timeout). */
  #admit(index: number, send: () => void): void {
    const max = this.#plan.maxInflight;
    if (max > 0 && this.#stepInflight[index]! >= max) {
      this.#stepWaiting[index]!.push(send);
      return;
    }
    this.#stepInflight[index]!++;
    send();
  }

  /** A request of step `index` ended (its final response): the next waiting one goes. */
  #release(index: number): void {
    const next = this.#stepWaiting[index]!.shift();
    if (next !== undefined) next();
    else this.#stepInflight[index]!--;
  }

  get inflightCount(): number {
    return this.#inflight;
  }

  get queuedCount(): number {
    return 0;
  }

  addInstances(_runners: readonly InstanceRunner[]): void {}
  removeInstances(_runners: readonly InstanceRunner[]): void {}

  stop(): void {
    this.#stopped = true;
  }

  drain(): Promise<void> {
    if (this.#inflight === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drained.push(resolve));
  }

  enqueue(request: ScheduledRequest): void {
    if (this.#stopped) throw new NereidError('UNAVAILABLE', `ensemble '${this.#plan.name}' is unloading and takes no new requests`);
    const start = process.hrtime.bigint();
    request.times.queue = start;
    request.times.computeStart = start;
    request.times.computeInputEnd = start;
    this.#inflight++;
    request.onComplete(() => {
      const error = request.error;
      const reason: FailureReason | undefined = error === undefined ? undefined : error.kind === 'CANCELLED' ? 'CANCELED' : 'BACKEND';
      this.#observer.onRequestComplete(request, reason);
      this.#inflight--;
      if (this.#inflight === 0) for (const r of this.#drained.splice(0)) r();
    });
    this.#run(request);
  }

  /** §6.3 step 2, per distinct set of requested outputs (usually one). */
  #stepsFor(plan: EnsemblePlan, requested: readonly string[]): readonly PlannedStep[] {
    const key = requested.join('\0');
    let cache = this.#needed.get(plan);
    if (cache === undefined) this.#needed.set(plan, (cache = new Map()));
    let steps = cache.get(key);
    if (steps === undefined) {
      steps = needed(plan, requested);
      if (cache.size < 64) cache.set(key, steps);
    }
    return steps;
  }

  /**
   * §6.3 step 1: resolves every step's model and version now (`model_version` -1: the latest
   * ready version, or the one the model's version weights pick) and returns the version each
   * step's requests name for the whole ensemble request. When a step resolves to a configuration
   * other than the one the plan was checked against (the composing model was reloaded, or -1 now
   * names another version), a plan made earlier for those configurations serves, or the ensemble
   * is checked again (§6.2) and the new plan serves from then on. Throws a NereidError naming the
   * step when a step's model or version is not ready, or naming the rule the ensemble no longer
   * meets.
   */
  #pin(): string[] {
    const plan = this.#plan;
    const resolveAll = (p: EnsemblePlan) =>
      p.steps.map((step) => {
        try {
          return this.#host.route(step.model, step.version);
        } catch (err) {
          const e = toNereidError(err, 'UNAVAILABLE');
          const wanted = step.version === '' ? 'the latest ready version' : `model_version ${step.version}`;
          throw new NereidError(e.code, `in ensemble '${p.name}', step ${step.index} (model '${step.model}', ${wanted}): ${e.message}`, { cause: e });
        }
      });
    const resolved = resolveAll(plan);
    const versions = resolved.map((r) => String(r.version));
    const fits = (p: EnsemblePlan) => resolved.every((r, i) => r.config === p.steps[i]!.composing);
    if (fits(plan)) return versions;
    const earlier = this.#plans.findIndex(fits);
    let next: EnsemblePlan;
    if (earlier >= 0) {
      next = this.#plans.splice(earlier, 1)[0]!;
    } else {
      try {
        next = planEnsemble(this.#config, this.#host, resolved);
      } catch (err) {
        throw new NereidError(
          'UNAVAILABLE',
          `${toNereidError(err).message} (checked again because a composing model changed since the ensemble loaded); ` +
            `fix or reload that model, or reload the ensemble`,
          { cause: err },
        );
      }
      if (next.decoupled !== plan.decoupled) {
        throw new NereidError(
          'UNAVAILABLE',
          `ensemble '${plan.name}': a composing model became ${next.decoupled ? '' : 'not '}decoupled since the ensemble loaded; reload the ensemble`,
        );
      }
    }
    this.#plans.unshift(plan);
    if (this.#plans.length > MAX_PLANS) this.#plans.length = MAX_PLANS;
    this.#plan = next;
    return versions;
  }

  #run(request: ScheduledRequest): void {
    let pinned: string[];
    try {
      pinned = this.#pin();
    } catch (err) {
      request.fail(toNereidError(err, 'UNAVAILABLE'));
      return;
    }
    const plan = this.#plan;
    const root: Iteration = { table: new Map(), pending: new Set(this.#stepsFor(plan, request.requestedOutputs)), running: 0 };
    // §6.3 step 4: every step request carries the ensemble request's sequence parameters,
    // priority and timeout, so stateful composing models see the client's sequence.
    const forwarded: Record<string, ParameterValue> = { ...request.parameters };
    if (request.correlationId !== 0n && request.correlationId !== '') {
      forwarded.sequence_id = request.correlationId;
      forwarded.sequence_start = request.sequenceStart;
      forwarded.sequence_end = request.sequenceEnd;
    }
    if (request.priority > 0) forwarded.priority = request.priority;
    if (request.timeoutUs > 0) forwarded.timeout = request.timeoutUs;
    const batch = plan.batching ? request.batchSize : 0;
    for (const [name, tensor] of request.inputs) root.table.set(name, { tensor, batch });
    // Aborts the steps in flight on cancellation or a step's failure.
    const abort = this.#aborts.take();
    const unwatch = watchAbort(request.signal, () => abort.abort(request.signal.reason));
    /** Steps in flight over every iteration. */
    let running = 0;
    let failure: NereidError | undefined;
    // §6.6: the ensemble's compute durations are the sums of its steps'.
    let computeInput = 0n;
    let computeInfer = 0n;
    let computeOutput = 0n;
    const addTimes = (times: RequestTimes) => {
      computeInput += times.computeInputEnd - times.computeStart;
      computeInfer += times.computeOutputStart - times.computeInputEnd;
      computeOutput += times.computeEnd - times.computeOutputStart;
    };

    const outputsOf = (it: Iteration): BackendTensor[] => {
      const outputs: BackendTensor[] = [];
      for (const name of request.requestedOutputs) {
        const held = it.table.get(name);
        if (held === undefined || held === null) continue;
        outputs.push({ ...held.tensor, shape: adapt(held, plan.batching, plan.outputDims.get(name)!) });
      }
      return outputs;
    };
    /** An iteration with nothing in flight: a decoupled ensemble sends what it produced. */
    const iterationDone = (it: Iteration) => {
      if (!plan.decoupled || failure !== undefined || request.signal.aborted) return;
      const outputs = outputsOf(it);
      if (outputs.length === 0 || it.pending.size > 0 && !request.requestedOutputs.every((n) => it.table.has(n))) return;
      request.respond({ outputs }, false);
    };
    const finish = () => {
      unwatch();
      // Every step is over (finish runs when none is left running).
      this.#aborts.give(abort);
      if (failure === undefined && request.signal.aborted) {
        failure = new NereidError('REQUEST_CANCELLED', `ensemble '${plan.name}': the request was cancelled`);
      }
      if (failure !== undefined) {
        request.fail(failure);
        return;
      }
      const t = request.times;
      t.computeInputEnd = t.computeStart + computeInput;
      t.computeOutputStart = t.computeInputEnd + computeInfer;
      t.computeEnd = t.computeOutputStart + computeOutput;
      this.#observer.onExecution([request], Math.max(1, request.batchSize));
      if (plan.decoupled) request.respond(null, true);
      else request.respond({ outputs: outputsOf(root) }, true);
    };
    const failWith = (error: NereidError) => {
      if (failure !== undefined) return;
      failure = error;
      abort.abort(failure);
    };
    const stepError = (step: PlannedStep, err: unknown) => {
      const e = toNereidError(err, 'BACKEND_ERROR');
      failWith(new NereidError(e.code, `in ensemble '${plan.name}', step ${step.index} (model '${step.model}'): ${e.message}`, { cause: e }));
    };
    const store = (table: Map<string, Held | null>, step: PlannedStep, outputs: readonly InferResponse['outputs'][number][]) => {
      for (const [output, t] of step.outputs) {
        const o = outputs.find((x) => x.name === output);
        if (o === undefined) table.set(t, null);
        else table.set(t, { tensor: { name: t, datatype: o.datatype, shape: o.shape, data: o.data }, batch: step.batching ? (o.shape[0] ?? 0) : 0 });
      }
    };
    const settled = (it: Iteration, step?: PlannedStep) => {
      if (step !== undefined) this.#release(step.index);
      running--;
      it.running--;
      advance(it);
    };
    const dispatch = (it: Iteration, step: PlannedStep) => {
      const inputs = [];
      for (const [input, t] of step.inputs) {
        const held = it.table.get(t);
        if (held === undefined || held === null) continue;
        inputs.push({ name: input, datatype: held.tensor.datatype, shape: adapt(held, step.batching, step.inputDims.get(input)!), data: held.tensor.data });
      }
      running++;
      it.running++;
      const stepRequest: InferRequest = { model: step.model, version: pinned[step.index]!, id: request.id, parameters: forwarded, inputs, outputs: step.requested };
      // Sent once the step's max_inflight_requests allows (§6.5).
      const send = () => {
        if (!step.decoupled) {
          this.#host.infer(stepRequest, request.trace === undefined ? { signal: abort.signal } : { signal: abort.signal, trace: request.trace.child(step.model) }).then(
            ({ response, times }) => {
              addTimes(times);
              store(it.table, step, response.outputs);
              settled(it, step);
            },
            (err: unknown) => {
              stepError(step, err);
              settled(it, step);
            },
          );
          return;
        }
        // §6.5: every response of a decoupled step starts an iteration of the steps after it.
        this.#host
          .inferStream(stepRequest, {
            signal: abort.signal,
            ...(request.trace !== undefined && { trace: request.trace.child(step.model) }),
            onResponse: ({ response }) => {
              if (response === undefined || failure !== undefined) return;
              const next: Iteration = { table: new Map(it.table), pending: new Set(it.pending), running: 0 };
              store(next.table, step, response.outputs);
              running++;
              next.running++;
              queueMicrotask(() => settled(next));
            },
          })
          .then(
            () => settled(it, step),
            (err: unknown) => {
              stepError(step, err);
              settled(it, step);
            },
          );
      };
      this.#admit(step.index, send);
    };
    /** Dispatches every ready step of `it`, skips those that cannot run; finishes once nothing runs. */
    const advance = (it: Iteration) => {
      try {
        let progressed = true;
        while (progressed && failure === undefined && !request.signal.aborted) {
          progressed = false;
          for (const step of it.pending) {
            if (!step.needs.every((t) => it.table.has(t))) continue;
            it.pending.delete(step);
            progressed = true;
            const skipped =
              step.inputs.some(([input, t]) => it.table.get(t) === null && !isOptional(step, input)) ||
              (step.condition !== undefined && !conditionHolds(it.table.get(step.condition) ?? null, plan.name, step));
            if (skipped) for (const [, t] of step.outputs) it.table.set(t, null);
            else dispatch(it, step);
          }
        }
      } catch (err) {
        failWith(toNereidError(err, 'INTERNAL'));
      }
      if (it.running === 0) iterationDone(it);
      if (running === 0) finish();
    };
    advance(root);
  }
}

/** One iteration of the dataflow (§6.5): its tensors, the steps it has yet to run, its steps in flight. */
interface Iteration {
  readonly table: Map<string, Held | null>;
  readonly pending: Set<PlannedStep>;
  running: number;
}

function isOptional(step: PlannedStep, input: string): boolean {
  return step.optional.has(input);
}

/** Whether a conditional step runs: its condition was produced and is true. */
function conditionHolds(held: Held | null, ensemble: string, step: PlannedStep): boolean {
  if (held === null) return false;
  const t = held.tensor;
  const elements = t.shape.reduce((n, d) => n * d, 1);
  if ((t.datatype as DataType) !== fromConfigDataType('TYPE_BOOL') || elements !== 1) {
    throw new NereidError(
      'ENSEMBLE_CONDITION',
      `in ensemble '${ensemble}', step ${step.index} (model '${step.model}'): condition tensor '${step.condition}' must be one BOOL element, ` +
        `got ${t.datatype} of shape [${t.shape.join(',')}]`,
    );
  }
  return t.data[0] !== 0;
}

/** §6.3 step 2: the steps that lead to a requested output (and to the conditions of those). */
function needed(plan: EnsemblePlan, requested: readonly string[]): PlannedStep[] {
  const producer = new Map<string, PlannedStep>();
  for (const s of plan.steps) for (const [, t] of s.outputs) producer.set(t, s);
  const keep = new Set<PlannedStep>();
  const visit = (tensor: string) => {
    const s = producer.get(tensor);
    if (s === undefined || keep.has(s)) return;
    keep.add(s);
    for (const [, t] of s.inputs) visit(t);
    if (s.condition !== undefined) visit(s.condition);
  };
  for (const t of requested) visit(t);
  return plan.steps.filter((s) => keep.has(s));
}
