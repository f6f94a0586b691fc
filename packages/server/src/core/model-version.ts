/**
 * A loaded, servable model version — backend model, instances, scheduler — and the factory that
 * makes one from a prepared model (models-and-scheduling.md §3.1 steps 6–11).
 */
import { NereidError, toNereidError } from '@nereid/protocol';
import type { BackendRegistry } from '../backends/registry.js';
import type { BackendModel, InstanceSpec, MemoryUsageEntry, ModelServices } from '../backends/spi.js';
import { configProvenance, loadLabelFiles, type ConfigOrigin, type ConfigStages, type InstanceBudget } from '../config/index.js';
import type { ModelConfig, ModelInstanceGroup } from '../config/model-config.js';
import { DeviceList, type MigHolds, type PlacedDevice, type Placement } from '../devices/index.js';
import type { Logger } from '../observability/logger.js';
import {
  LOAD_PHASES,
  UNLOAD_PHASES,
  type LoadPhase,
  type MeteredVersion,
  type PhaseDurations,
  type ServerMetrics,
  type UnloadPhase,
  type VersionHistograms,
} from '../observability/metrics.js';
import type { PreparedModel } from '../repository/config-loader.js';
import type { PendingUpdate, Servable, VersionFactory } from '../repository/model-manager.js';
import { ModelStatistics } from '../observability/model-statistics.js';
import { DirectScheduler } from '../scheduling/direct-scheduler.js';
import { DynamicBatcher } from '../scheduling/dynamic-batcher.js';
import { preemptionSettings } from '../scheduling/preemption.js';
import { SequenceBatcher, resolveSequenceStates, sequenceWarmupInputs } from '../scheduling/sequence-batcher.js';
import type { RateLimiter } from '../scheduling/rate-limiter.js';
import { InstanceRunner } from '../scheduling/instance-runner.js';
import type { Scheduler } from '../scheduling/scheduler.js';
import { EnsembleScheduler, planEnsemble, type EnsembleHost } from './ensemble.js';
import { validateModelConfig, validateModelIO } from '../config/index.js';
import { buildIOSpec, type ModelIOSpec } from './request-validation.js';
import { backendLookup, backendSettings, completeVersionConfig, modelContext, warnIneffectiveFields } from './version-config.js';
import { prepareWarmup, runWarmup, type WarmupSample } from './warmup.js';
import type { ResponseCache } from '../cache/index.js';
import { directoryBytes, LoadMeasure, modelMemoryLimit, sumEntries, totalBytes, type AccountedVersion, type MemoryAccounting } from './memory.js';

/** Seconds since `start` (a process.hrtime.bigint() reading). */
function secondsSince(start: bigint): number {
  return Number(process.hrtime.bigint() - start) / 1e9;
}

/** `12.3 ms`: load and unload log lines. */
function ms(seconds: number): string {
  return `${(seconds * 1e3).toFixed(1)} ms`;
}

/** `read 0.2 ms, parse 1.1 ms, …` for the phases that have a duration, in order. */
function phaseList<P extends string>(order: readonly P[], phases: Partial<Record<P, number>>): string {
  return order
    .filter((p) => phases[p] !== undefined)
    .map((p) => `${p} ${ms(phases[p]!)}`)
    .join(', ');
}

/** What every runner of a version shares. */
interface RunnerContext {
  readonly backendName: string;
  readonly backendModel: BackendModel;
  readonly decoupled: boolean;
  readonly stats: ModelStatistics;
  readonly rateLimiter: RateLimiter | undefined;
  /** The model's name, for the budget's error. */
  readonly model: string;
  /** The server-wide instance count (`instances-per-server`); each runner gives its share back when released. */
  readonly budget: InstanceBudget | undefined;
  /** Where the KIND_GPU instances run, and the MIG holds the version gives back once unloaded. */
  readonly placement?: Placement;
}

/** An instance to create: its spec and the group it belongs to. */
interface PlannedInstance {
  readonly spec: InstanceSpec;
  readonly group: ModelInstanceGroup;
}

/** A runner and whether it takes work from the scheduler (passive instances do not). */
interface MadeRunner {
  readonly runner: InstanceRunner;
  readonly passive: boolean;
}

/**
 * Creates the planned instances in parallel, each with its runner. All or nothing: when one
 * fails, the ones created are unloaded and the first failure is thrown as MODEL_LOAD_FAILED.
 */
async function createRunners(ctx: RunnerContext, planned: readonly PlannedInstance[]): Promise<MadeRunner[]> {
  const budget = ctx.budget;
  budget?.take(ctx.model, planned.length);
  const created = await Promise.allSettled(planned.map((p) => ctx.backendModel.createInstance(p.spec)));
  budget?.give(created.filter((c) => c.status !== 'fulfilled').length);
  const made: MadeRunner[] = [];
  created.forEach((c, i) => {
    if (c.status !== 'fulfilled') return;
    const { spec, group } = planned[i]!;
    const limiter = ctx.rateLimiter;
    const runner = new InstanceRunner(spec, c.value, ctx.backendName, {
      decoupled: ctx.decoupled,
      observer: ctx.stats,
      ...(budget ? { onReleased: () => budget.give(1) } : {}),
      ...(limiter ? { rateLimiter: limiter, resources: group.rate_limiter?.resources ?? [], priority: group.rate_limiter?.priority ?? 1 } : {}),
    });
    made.push({ runner, passive: group.passive });
  });
  const failure = created.find((c): c is PromiseRejectedResult => c.status === 'rejected');
  if (failure) {
    await Promise.allSettled(made.map((m) => m.runner.unload()));
    throw toNereidError(failure.reason, 'MODEL_LOAD_FAILED');
  }
  return made;
}

/** Registers runners with the rate limiter; all or nothing. */
function registerRunners(limiter: RateLimiter | undefined, runners: readonly InstanceRunner[], model: string): void {
  if (limiter === undefined) return;
  const registered: InstanceRunner[] = [];
  try {
    for (const r of runners) {
      limiter.register(r.limited, model);
      registered.push(r);
    }
  } catch (err) {
    for (const r of registered) limiter.unregister(r.limited);
    throw err;
  }
}

/**
 * Instances of every group of `config`, named `<group>_<index>` (§2.10), from index `from[group]`
 * on. A KIND_GPU group has `count` instances on each of its devices (`placement`), numbered count
 * first: with two GPUs, `_0` and `_1` are the first instance on each.
 */
function planInstances(config: ModelConfig, from: ReadonlyMap<string, number> = new Map(), placement?: Placement): PlannedInstance[] {
  const devicesOf = (group: ModelInstanceGroup): readonly (PlacedDevice | undefined)[] =>
    group.kind === 'KIND_GPU' ? placement?.groups.get(group.name) ?? [] : [undefined];
  const total = config.instance_group.reduce((n, g) => n + g.count * devicesOf(g).length, 0);
  const planned: PlannedInstance[] = [];
  for (const group of config.instance_group) {
    if (group.kind === 'KIND_AUTO') throw new NereidError('INTERNAL', `instance group '${group.name}' was not normalised`);
    const devices = devicesOf(group);
    if (devices.length === 0) throw new NereidError('INTERNAL', `instance group '${group.name}' was not placed on a device`);
    for (let k = from.get(group.name) ?? 0; k < group.count * devices.length; k++) {
      const device = devices[k % devices.length];
      const spec = { name: `${group.name}_${k}`, groupName: group.name, kind: group.kind, deviceId: device?.index ?? 0, instanceCount: total };
      planned.push({ spec: device ? { ...spec, device } : spec, group });
    }
  }
  return planned;
}

/**
 * How each instance group's count changes from `current` to `next`, when that is all that
 * changes (models-and-scheduling.md §1.10: the version policy may change too, as it shapes no
 * version); undefined when anything else differs (a group's other settings, the set of groups,
 * any other field), which needs a full reload.
 */
export function instanceCountChange(current: ModelConfig, next: ModelConfig): { group: string; from: number; to: number }[] | undefined {
  const shape = (c: ModelConfig) => {
    const { version_policy: _policy, instance_group, ...rest } = c;
    return JSON.stringify({ ...rest, instance_group: instance_group.map((g) => ({ ...g, count: 0 })) });
  };
  if (current.instance_group.length !== next.instance_group.length || shape(current) !== shape(next)) return undefined;
  return next.instance_group.map((g, i) => ({ group: g.name, from: current.instance_group[i]!.count, to: g.count }));
}

/** What a version needs for memory accounting (core/memory.ts). */
interface VersionMemory {
  /** The limit in bytes; 0: none. */
  readonly limitBytes: number;
  /** The figure measured at load, for versions whose instances report none (in-process runtimes). */
  readonly atLoad: readonly MemoryUsageEntry[];
  readonly accounting: MemoryAccounting | undefined;
  /** Takes the version out of service after it was stopped for passing its limit. */
  readonly onStopped: ((version: ModelVersion, error: NereidError) => void) | undefined;
}

export class ModelVersion implements Servable, MeteredVersion, AccountedVersion {
  readonly name: string;
  readonly version: number;
  readonly io: ModelIOSpec;
  /** Label lines per output with a `label_filename` (classification, protocol.md §3.11). */
  readonly labels: ReadonlyMap<string, readonly string[]>;
  readonly scheduler: Scheduler;
  /** Cumulative statistics since this version was loaded (models-and-scheduling.md §9). */
  readonly stats: ModelStatistics;
  /**
   * The server's response cache when this version uses it (models-and-scheduling.md §8.2): the
   * server has one and the configuration enables it (`response_cache { enable: true }`); an
   * ensemble that turned out decoupled (a decoupled step) does not.
   */
  readonly responseCache: ResponseCache | undefined;
  /** How long loading this version took, in seconds (`nv_model_load_duration_secs`, protocol.md §5.3). */
  readonly loadDurationSecs: number;
  /** The load's duration per phase, seconds (`nv_model_load_phase_duration_secs`). */
  readonly loadPhases: PhaseDurations<LoadPhase>;
  /** This version's metric histograms, when the server enables any (see `ServerMetrics`). */
  readonly histograms: VersionHistograms | undefined;
  /** Every instance serving this version (passive ones included), in creation order. */
  #runners: MadeRunner[];
  readonly #runnerContext: RunnerContext;
  #config: ModelConfig;
  #stages: ConfigStages;
  readonly #logger: Logger;
  /** Instances removed in place that are finishing their batches before they are released. */
  readonly #retiring = new Set<Promise<void>>();
  readonly #onUnloaded: ((version: ModelVersion, phases: PhaseDurations<UnloadPhase>, totalSecs: number) => void) | undefined;
  #provenance: Record<string, ConfigOrigin> | undefined;
  #unloadPhases: PhaseDurations<UnloadPhase> | undefined;
  #unloading: Promise<void> | undefined;
  readonly #memory: VersionMemory;

  constructor(init: {
    config: ModelConfig;
    version: number;
    labels: Map<string, string[]>;
    scheduler: Scheduler;
    runners: MadeRunner[];
    runnerContext: RunnerContext;
    loadDurationSecs: number;
    loadPhases: PhaseDurations<LoadPhase>;
    histograms: VersionHistograms | undefined;
    stages: ConfigStages;
    logger: Logger;
    onUnloaded?: (version: ModelVersion, phases: PhaseDurations<UnloadPhase>, totalSecs: number) => void;
    memory?: VersionMemory;
    responseCache?: ResponseCache | undefined;
  }) {
    this.responseCache = init.responseCache;
    this.name = init.config.name;
    this.version = init.version;
    this.#config = init.config;
    this.io = buildIOSpec(init.config, init.version);
    this.labels = init.labels;
    this.scheduler = init.scheduler;
    this.stats = init.runnerContext.stats;
    this.loadDurationSecs = init.loadDurationSecs;
    this.loadPhases = init.loadPhases;
    this.histograms = init.histograms;
    this.#stages = init.stages;
    this.#logger = init.logger;
    this.#onUnloaded = init.onUnloaded;
    this.#runnerContext = init.runnerContext;
    this.#runners = init.runners;
    this.#memory = init.memory ?? { limitBytes: 0, atLoad: [], accounting: undefined, onStopped: undefined };
  }

  /** The memory limit in bytes (parameter `memory_limit` or `--model-memory-limit`); 0: none. */
  get memoryLimitBytes(): number {
    return this.#memory.limitBytes;
  }

  /** Whether the memory figure is live: the instances report theirs (stub-hosted backends). */
  get memoryLive(): boolean {
    return this.#runners.length > 0 && this.#runners.some(({ runner }) => runner.reportsMemory);
  }

  /** The memory this version holds, as the statistics' `memory_usage`: the last samples, or the figure of its load. */
  get memory(): readonly MemoryUsageEntry[] {
    if (!this.memoryLive) return this.#memory.atLoad;
    return sumEntries(this.#runners.flatMap(({ runner }) => runner.memoryUsage(false)));
  }

  /** Samples the instances now (live versions); the figure of the load otherwise. */
  sampleMemory(): readonly MemoryUsageEntry[] {
    if (!this.memoryLive) return this.#memory.atLoad;
    return sumEntries(this.#runners.flatMap(({ runner }) => runner.memoryUsage(true)));
  }

  /**
   * The version outgrew its memory limit: every instance stops for good (the requests they hold
   * fail with `error`, and so do the queued ones as the version drains), then the server takes the
   * version out of service.
   */
  stopForMemory(error: NereidError): void {
    for (const { runner } of this.#runners) runner.terminate(error);
    this.#memory.onStopped?.(this, error);
  }

  /**
   * The configuration the version serves with. It changes only through an in-place instance
   * update (`prepareInstanceUpdate`), and then only in instance counts and the version policy.
   */
  get config(): ModelConfig {
    return this.#config;
  }

  /**
   * Whether every instance answers its readiness probe with true (`BackendInstance.isReady`,
   * probed in parallel); a version without instances (an ensemble) is ready.
   */
  async probeReady(): Promise<boolean> {
    const answers = await Promise.all(this.#runners.map(({ runner }) => runner.probeReady()));
    return answers.every((ready) => ready);
  }

  /** Instances serving this version now, per instance group name. */
  get instanceCounts(): ReadonlyMap<string, number> {
    const counts = new Map<string, number>();
    for (const { runner } of this.#runners) counts.set(runner.spec.groupName, (counts.get(runner.spec.groupName) ?? 0) + 1);
    return counts;
  }

  /** `platform` if set, else `backend` (protocol.md §3.5). */
  get platform(): string {
    return this.config.platform || this.config.backend;
  }

  /**
   * Where each field of `config` came from (`file`, `override`, `auto-complete`, `default`),
   * keyed by field path (see `configProvenance`). Computed on first use.
   */
  get provenance(): Readonly<Record<string, ConfigOrigin>> {
    this.#provenance ??= configProvenance(this.#stages);
    return this.#provenance;
  }

  /** Where the configuration was read from: a file, a load's override, or nothing (auto-complete). */
  get configSource(): ConfigStages['sourceKind'] {
    return this.#stages.sourceKind;
  }

  /**
   * Prepares an in-place change of instance counts to `config` (models-and-scheduling.md §1.10)
   * while the version keeps serving with the instances it has: creates the extra instances of
   * each group that grows and runs `samples` (warmup) on them. Returns undefined when `config`
   * differs from the serving configuration in more than instance counts and the version policy.
   * Rejects with the load error when an instance cannot be created or warmed up, after releasing
   * what it created; the version is then unchanged.
   *
   * The update returned must be committed or discarded before another is prepared. `commit` is
   * synchronous: the surplus instances of each shrinking group (the last created first) take no
   * new work, the new ones take work, `config` becomes the serving configuration; the surplus
   * instances are released in the background once they finish what they hold (`unload` waits
   * for them). Statistics carry on.
   */
  async prepareInstanceUpdate(config: ModelConfig, stages: ConfigStages, samples: readonly WarmupSample[]): Promise<PendingUpdate | undefined> {
    const change = instanceCountChange(this.#config, config);
    if (change === undefined) return undefined;
    if (this.#unloading !== undefined) {
      throw new NereidError('MODEL_LOAD_FAILED', `model '${this.name}' version ${this.version} is unloading; its instances cannot change`);
    }
    const start = process.hrtime.bigint();
    const counts = this.instanceCounts;
    const ctx = this.#runnerContext;
    const made = await createRunners(ctx, planInstances(config, counts));
    try {
      this.#checkAddedMemory(made.map((m) => m.runner));
      await runWarmup(config, samples, made.map((m) => m.runner));
      registerRunners(ctx.rateLimiter, made.map((m) => m.runner), this.name);
    } catch (err) {
      await Promise.allSettled(made.map((m) => m.runner.unload()));
      throw err;
    }
    const prepareSecs = secondsSince(start);
    const removed: MadeRunner[] = [];
    for (const { group, to } of change) {
      const members = this.#runners.filter((m) => m.runner.spec.groupName === group);
      removed.push(...members.slice(to));
    }
    let settled = false;
    const settle = () => {
      if (settled) throw new NereidError('INTERNAL', `the instance update of model '${this.name}' version ${this.version} was already settled`);
      settled = true;
    };
    return {
      commit: () => {
        settle();
        this.#runners = [...this.#runners.filter((m) => !removed.includes(m)), ...made];
        this.scheduler.removeInstances(removed.filter((m) => !m.passive).map((m) => m.runner));
        this.scheduler.addInstances(made.filter((m) => !m.passive).map((m) => m.runner));
        this.#config = config;
        this.#stages = stages;
        this.#provenance = undefined;
        for (const m of removed) this.#retire(m.runner);
        const groups = change.map((c) => `group '${c.group}' ${c.from} → ${c.to}`).join(', ');
        this.#logger.info(
          `updated model '${this.name}' version ${this.version} in place in ${ms(prepareSecs)}: instances ${groups}` +
            ` (${made.length} created and warmed up, ${removed.length} removed)`,
        );
      },
      discard: async () => {
        settle();
        for (const m of made) ctx.rateLimiter?.unregister(m.runner.limited);
        await Promise.allSettled(made.map((m) => m.runner.unload()));
      },
    };
  }

  /**
   * Instances created in place count against the version's memory limit and the server's budget
   * (core/memory.ts) once they exist: throws MEMORY_BUDGET when the version with them would pass
   * either. Instances that report no memory (in-process runtimes) are not measured.
   */
  #checkAddedMemory(added: readonly InstanceRunner[]): void {
    const accounting = this.#memory.accounting;
    if (accounting === undefined || !added.some((r) => r.reportsMemory)) return;
    const extra = totalBytes(sumEntries(added.flatMap((r) => r.memoryUsage(true))));
    accounting.checkGrowth(this.name, this.version, this.#memory.limitBytes, totalBytes(this.sampleMemory()), extra, added.length);
  }

  /** An instance removed in place: released once it holds no batch (its scheduler no longer gives it any). */
  #retire(runner: InstanceRunner): void {
    const job: Promise<void> = (async () => {
      await runner.idle();
      this.#runnerContext.rateLimiter?.unregister(runner.limited);
      await runner.unload();
    })()
      .catch((err: unknown) => {
        this.#logger.error(
          `model '${this.name}' version ${this.version}: releasing removed instance '${runner.spec.name}' failed: ${toNereidError(err).message}`,
        );
      })
      .finally(() => this.#retiring.delete(job));
    this.#retiring.add(job);
  }

  /** The unload's duration per phase, seconds, once `unload()` has finished. */
  get unloadPhases(): PhaseDurations<UnloadPhase> | undefined {
    return this.#unloadPhases;
  }

  /**
   * Stops taking requests, lets queued and executing ones finish, then releases every instance
   * (their worker threads, sessions and buffers) and the backend model. Idempotent. Logs one line
   * with the duration of each phase.
   */
  /**
   * Tells the backend instances that this version is going away (`BackendInstance.unloading`):
   * at `unload`, and earlier when the server begins to shut down. Requests are still served.
   */
  unloading(): void {
    for (const { runner } of this.#runners) runner.unloading();
  }

  unload(): Promise<void> {
    this.#unloading ??= (async () => {
      const start = process.hrtime.bigint();
      this.scheduler.stop();
      this.unloading();
      await this.scheduler.drain();
      const drain = secondsSince(start);
      const released = process.hrtime.bigint();
      // Instances removed in place are idle once the scheduler drained; they go first.
      const results = await Promise.allSettled([...this.#retiring]);
      for (const { runner } of this.#runners) this.#runnerContext.rateLimiter?.unregister(runner.limited);
      results.push(...(await Promise.allSettled(this.#runners.map(({ runner }) => runner.unload()))));
      // The backend model goes after its instances (backends/spi.ts).
      results.push(...(await Promise.allSettled([this.#runnerContext.backendModel.unload()])));
      this.#runnerContext.placement?.release();
      const phases = { drain, release: secondsSince(released) };
      const total = secondsSince(start);
      this.#unloadPhases = phases;
      this.#memory.accounting?.remove(this);
      this.#logger.info(`unloaded model '${this.name}' version ${this.version} in ${ms(total)}: ${phaseList(UNLOAD_PHASES, phases)}`);
      this.#onUnloaded?.(this, phases, total);
      const failure = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
      if (failure !== undefined) throw toNereidError(failure.reason, 'INTERNAL', `model '${this.name}' version ${this.version} did not release cleanly`);
    })();
    return this.#unloading;
  }
}

export interface ModelVersionFactoryOptions {
  /** `--backend-config` settings: backend name → key → value; '' holds global settings. */
  backendConfig: ReadonlyMap<string, Readonly<Record<string, string>>>;
  logger: Logger;
  /** Set with `--rate-limit=execution_count` (models-and-scheduling.md §7.3). */
  rateLimiter?: RateLimiter;
  /** The server's metrics: a version gets its histograms from them at load, and reports its unload. */
  metrics?: ServerMetrics;
  /** The server's models, offered to backends as `ModelContext.models` (calls between models). */
  models?: ModelServices;
  /** How ensembles call their steps and read the composing models' configurations. */
  ensembleHost?: EnsembleHost;
  /** The server-wide instance count (`--model-config-limit instances-per-server`). */
  instanceBudget?: InstanceBudget;
  /** Memory limits and budget (core/memory.ts); without it limits are checked for syntax only. */
  memory?: MemoryAccounting;
  /** Takes a version stopped for passing its memory limit out of service (the server's model manager). */
  onMemoryStop?: (version: ModelVersion, error: NereidError) => void;
  /** The GPUs and MIG instances found at start-up (none until discovery ran). */
  devices?: () => DeviceList;
  /** Who holds which MIG instance, across the server's models. */
  migHolds?: MigHolds;
  /** The GPU memory a process uses, by GPU index (`ModelContext.gpuMemoryOf`). */
  gpuMemoryOf?: (pid: number) => ReadonlyMap<number, number>;
  /** The server's response cache (`--cache-config`), once created; undefined: none. */
  responseCache?: () => ResponseCache | undefined;
}

export class ModelVersionFactory implements VersionFactory<ModelVersion> {
  readonly #registry: BackendRegistry;
  readonly #options: ModelVersionFactoryOptions;

  constructor(registry: BackendRegistry, options: ModelVersionFactoryOptions) {
    this.#registry = registry;
    this.#options = options;
  }

  /**
   * Steps 6–11 for one version: configuration, backend model, instances, warmup on every
   * instance, scheduler. All or nothing: on failure whatever was created is released and the
   * load error is thrown. Logs one line with the duration of each phase, on success and on
   * failure.
   */
  async load(prepared: PreparedModel, version: number): Promise<ModelVersion> {
    const loadStart = process.hrtime.bigint();
    const logger = this.#options.logger;
    const name = prepared.location.name;
    const phases: Partial<Record<LoadPhase, number>> = { read: prepared.timings.read, parse: prepared.timings.parse };
    let phase: LoadPhase = 'auto_complete';
    let mark = loadStart;
    /** Ends the current phase; the next one starts now. */
    const endPhase = (next: LoadPhase) => {
      const now = process.hrtime.bigint();
      phases[phase] = Number(now - mark) / 1e9;
      mark = now;
      phase = next;
    };
    const total = () => prepared.timings.read + prepared.timings.parse + secondsSince(loadStart);
    try {
      if (prepared.config.platform === 'ensemble') {
        // An ensemble queues nothing of its own: preemption parameters on one are refused, not ignored.
        preemptionSettings(prepared.config);
        return this.#loadEnsemble(prepared, version, loadStart);
      }
      const settings = backendSettings(this.#options.backendConfig, prepared.config.backend);
      const backend = await this.#registry.resolve(prepared.config.backend, backendLookup(prepared, version, settings, logger));
      const devices = this.#options.devices?.() ?? DeviceList.NONE;
      const { config, stages } = await completeVersionConfig(prepared, version, backend, settings, logger, devices, this.#options.responseCache?.() !== undefined);
      const preemption = preemptionSettings(config);
      const labels = await loadLabelFiles(config, prepared.location.directory);
      const sequenceStates = await resolveSequenceStates(config, prepared.location.directory);
      endPhase('backend_init');

      const placement = config.instance_group.some((g) => g.kind === 'KIND_GPU') ? this.#options.migHolds?.place(config, devices) : undefined;
      const accounting = this.#options.memory;
      const limitBytes = accounting?.limitOf(name, config.parameters) ?? modelMemoryLimit(name, config.parameters);
      const context = modelContext(prepared, version, config, settings, logger, this.#options.models);
      const fileBytes = accounting === undefined ? 0 : directoryBytes(context.versionDirectory);
      let reservation: ReturnType<MemoryAccounting['reserve']> | undefined;
      let backendModel: BackendModel;
      try {
        reservation = accounting?.reserve(name, version, limitBytes, fileBytes);
        const gpuMemoryOf = this.#options.gpuMemoryOf;
        backendModel = await backend.createModel({ ...context, memoryLimitBytes: limitBytes, ...(gpuMemoryOf ? { gpuMemoryOf } : {}) });
      } catch (err) {
        reservation?.release();
        placement?.release();
        throw err;
      }
      let made: MadeRunner[] = [];
      try {
        const stats = new ModelStatistics(name, version);
        const histograms = this.#options.metrics?.histogramsFor(config, stats);
        const limiter = this.#options.rateLimiter;
        const runnerContext: RunnerContext = {
          backendName: backend.name,
          backendModel,
          decoupled: config.model_transaction_policy?.decoupled ?? false,
          stats,
          rateLimiter: limiter,
          model: name,
          budget: this.#options.instanceBudget,
          ...(placement ? { placement } : {}),
        };
        const measure = new LoadMeasure();
        const created = await createRunners(runnerContext, planInstances(config, new Map(), placement)).finally(() => measure.end());
        const growth = measure.growth;
        made = created;
        const runners = made.map((m) => m.runner);
        // Live figures (instances that report their memory) now; the others once, from this load.
        const live = runners.some((r) => r.reportsMemory);
        const atLoad: MemoryUsageEntry[] = live ? [] : [{ type: 'CPU', id: 0, byte_size: growth ?? fileBytes }];
        reservation?.settle(live ? totalBytes(sumEntries(runners.flatMap((r) => r.memoryUsage(true)))) : totalBytes(atLoad));
        const active = made.filter((m) => !m.passive).map((m) => m.runner);
        if (preemption.running) {
          const fixed = active.find((r) => !r.preemptible);
          if (fixed !== undefined) {
            throw new NereidError(
              'CONFIG_INVALID',
              `model '${name}': parameter 'preemption' "running" needs a backend that can stop a running request; ` +
                `backend '${backend.name}' cannot (instance '${fixed.spec.name}'); the python backend can`,
            );
          }
        }
        endPhase('warmup');
        await runWarmup(config, await prepareWarmup(config, prepared.location.directory, sequenceWarmupInputs(config, sequenceStates)), runners);
        phases.warmup = secondsSince(mark);
        registerRunners(limiter, runners, name);
        const scheduler = config.sequence_batching
          ? new SequenceBatcher({
              model: name,
              maxBatchSize: config.max_batch_size,
              config: config.sequence_batching,
              states: sequenceStates,
              runners: active,
              observer: stats,
              logger,
            })
          : config.dynamic_batching
          ? new DynamicBatcher({
              model: name,
              maxBatchSize: config.max_batch_size,
              config: config.dynamic_batching,
              shapeCheckedInputs: config.input
                .filter((t) => t.is_shape_tensor || (t.dims.includes(-1) && !t.allow_ragged_batch))
                .map((t) => t.name),
              hasOptionalInputs: config.input.some((t) => t.optional),
              runners: active,
              observer: stats,
              logger,
              preemption,
            })
          : new DirectScheduler(name, active, stats);
        const loadPhases = Object.fromEntries(LOAD_PHASES.map((p) => [p, phases[p] ?? 0])) as Record<LoadPhase, number>;
        const loadDurationSecs = total();
        logger.info(`loaded model '${name}' version ${version} in ${ms(loadDurationSecs)}: ${phaseList(LOAD_PHASES, loadPhases)}`);
        const metrics = this.#options.metrics;
        const loaded = new ModelVersion({
          config,
          version,
          responseCache: config.response_cache?.enable ? this.#options.responseCache?.() : undefined,
          labels,
          scheduler,
          runners: made,
          runnerContext,
          loadDurationSecs,
          loadPhases,
          histograms,
          stages,
          logger,
          memory: { limitBytes, atLoad, accounting, onStopped: this.#options.onMemoryStop },
          ...(metrics
            ? {
                onUnloaded: (v: ModelVersion, unload: PhaseDurations<UnloadPhase>, totalSecs: number) =>
                  metrics.recordUnload({ name: v.name, version: v.version, phases: unload, totalSecs, at: process.hrtime.bigint() }),
              }
            : {}),
        });
        accounting?.add(loaded);
        reservation?.release();
        return loaded;
      } catch (err) {
        reservation?.release();
        await Promise.allSettled(made.map((m) => m.runner.unload()));
        await backendModel.unload().catch(() => undefined);
        placement?.release();
        throw err;
      }
    } catch (err) {
      phases[phase] = secondsSince(mark);
      logger.info(
        `failed to load model '${name}' version ${version} after ${ms(total())}, in phase ${phase}: ${phaseList(LOAD_PHASES, phases)}`,
      );
      throw err;
    }
  }

  /**
   * An ensemble version (models-and-scheduling.md §6): its steps checked against the composing
   * models (loaded before it, §1.11), then served by an `EnsembleScheduler`; no instances.
   */
  #loadEnsemble(prepared: PreparedModel, version: number, loadStart: bigint): ModelVersion {
    const host = this.#options.ensembleHost;
    const name = prepared.location.name;
    if (host === undefined) throw new NereidError('CONFIG_UNSUPPORTED', `model '${name}': ensembles need a server to call their steps through`);
    const config = structuredClone(prepared.config);
    validateModelConfig(config);
    validateModelIO(config);
    warnIneffectiveFields(config, this.#options.logger, this.#options.responseCache?.() !== undefined);
    const plan = planEnsemble(config, host);
    // §6.1, §6.5: decoupled when a step is, whatever the configuration said.
    config.model_transaction_policy = { decoupled: plan.decoupled };
    const stats = new ModelStatistics(name, version);
    const histograms = this.#options.metrics?.histogramsFor(config, stats);
    const backendModel = {
      createInstance: () => Promise.reject(new NereidError('INTERNAL', `ensemble '${name}' has no instances`)),
      unload: () => Promise.resolve(),
    };
    const runnerContext: RunnerContext = { backendName: 'ensemble', backendModel, decoupled: plan.decoupled, stats, rateLimiter: undefined, model: name, budget: undefined };
    const loadDurationSecs = prepared.timings.read + prepared.timings.parse + secondsSince(loadStart);
    const loadPhases = Object.fromEntries(LOAD_PHASES.map((p) => [p, 0])) as Record<LoadPhase, number>;
    loadPhases.read = prepared.timings.read;
    loadPhases.parse = prepared.timings.parse;
    this.#options.logger.info(`loaded ensemble '${name}' version ${version} in ${ms(loadDurationSecs)}: ${plan.steps.length} steps`);
    const metrics = this.#options.metrics;
    return new ModelVersion({
      config,
      version,
      responseCache: config.response_cache?.enable && !plan.decoupled ? this.#options.responseCache?.() : undefined,
      labels: new Map(),
      scheduler: new EnsembleScheduler(config, plan, host, stats),
      runners: [],
      runnerContext,
      loadDurationSecs,
      loadPhases,
      histograms,
      stages: { source: prepared.source, sourceKind: prepared.sourceKind, beforeAutoComplete: config, afterAutoComplete: config, effective: config },
      logger: this.#options.logger,
      ...(metrics
        ? {
            onUnloaded: (v: ModelVersion, unload: PhaseDurations<UnloadPhase>, totalSecs: number) =>
              metrics.recordUnload({ name: v.name, version: v.version, phases: unload, totalSecs, at: process.hrtime.bigint() }),
          }
        : {}),
    });
  }

  /**
   * The in-place path of a reload (models-and-scheduling.md §1.10): completes `prepared`'s
   * configuration for `version` as a load would and, when it differs from what `current` serves
   * with only in instance counts (and the version policy), prepares that change on `current`
   * (`ModelVersion.prepareInstanceUpdate`). Undefined: a full reload is needed. Rejects with the
   * load error; `current` is then unchanged.
   */
  async updateInPlace(current: ModelVersion, prepared: PreparedModel, version: number): Promise<PendingUpdate | undefined> {
    const name = prepared.location.name;
    if (prepared.config.platform === 'ensemble') return undefined;
    const logger = this.#options.logger;
    const backend = this.#registry.get(prepared.config.backend, name);
    const settings = backendSettings(this.#options.backendConfig, backend.name);
    const { config, stages } = await completeVersionConfig(
      prepared,
      version,
      backend,
      settings,
      logger,
      this.#options.devices?.(),
      this.#options.responseCache?.() !== undefined,
    );
    // GPU instances are placed per device (and may hold MIG instances): a count change reloads.
    if (config.instance_group.some((g) => g.kind === 'KIND_GPU')) return undefined;
    if (instanceCountChange(current.config, config) === undefined) return undefined;
    const extras = sequenceWarmupInputs(config, await resolveSequenceStates(config, prepared.location.directory));
    return current.prepareInstanceUpdate(config, stages, await prepareWarmup(config, prepared.location.directory, extras));
  }
}
