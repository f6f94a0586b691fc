/**
 * A loaded, servable model version — backend model, instances, scheduler — and the factory that
 * makes one from a prepared model (models-and-scheduling.md §3.1 steps 6–11).
 */
import { NereidError, toNereidError } from '@nereid/protocol';
import type { BackendRegistry } from '../backends/registry.js';
import type { BackendModel, InstanceSpec } from '../backends/spi.js';
import { configProvenance, loadLabelFiles, type ConfigOrigin, type ConfigStages } from '../config/index.js';
import type { ModelConfig } from '../config/model-config.js';
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
import type { Servable, VersionFactory } from '../repository/model-manager.js';
import { ModelStatistics } from '../observability/model-statistics.js';
import { DirectScheduler } from '../scheduling/direct-scheduler.js';
import { DynamicBatcher } from '../scheduling/dynamic-batcher.js';
import type { RateLimiter } from '../scheduling/rate-limiter.js';
import { InstanceRunner } from '../scheduling/instance-runner.js';
import type { Scheduler } from '../scheduling/scheduler.js';
import { buildIOSpec, type ModelIOSpec } from './request-validation.js';
import { backendLookup, backendSettings, completeVersionConfig, modelContext } from './version-config.js';
import { prepareWarmup, runWarmup } from './warmup.js';

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

export class ModelVersion implements Servable, MeteredVersion {
  readonly name: string;
  readonly version: number;
  readonly config: ModelConfig;
  readonly io: ModelIOSpec;
  /** Label lines per output with a `label_filename` (classification, protocol.md §3.11). */
  readonly labels: ReadonlyMap<string, readonly string[]>;
  readonly scheduler: Scheduler;
  /** Cumulative statistics since this version was loaded (models-and-scheduling.md §9). */
  readonly stats: ModelStatistics;
  /** How long loading this version took, in seconds (`nv_model_load_duration_secs`, protocol.md §5.3). */
  readonly loadDurationSecs: number;
  /** The load's duration per phase, seconds (`nv_model_load_phase_duration_secs`). */
  readonly loadPhases: PhaseDurations<LoadPhase>;
  /** This version's metric histograms, when the server enables any (see `ServerMetrics`). */
  readonly histograms: VersionHistograms | undefined;
  readonly #runners: readonly InstanceRunner[];
  readonly #backendModel: BackendModel;
  readonly #rateLimiter: RateLimiter | undefined;
  readonly #stages: ConfigStages;
  readonly #logger: Logger;
  readonly #onUnloaded: ((version: ModelVersion, phases: PhaseDurations<UnloadPhase>, totalSecs: number) => void) | undefined;
  #provenance: Record<string, ConfigOrigin> | undefined;
  #unloadPhases: PhaseDurations<UnloadPhase> | undefined;
  #unloading: Promise<void> | undefined;

  constructor(init: {
    config: ModelConfig;
    version: number;
    labels: Map<string, string[]>;
    scheduler: Scheduler;
    runners: InstanceRunner[];
    backendModel: BackendModel;
    stats: ModelStatistics;
    rateLimiter: RateLimiter | undefined;
    loadDurationSecs: number;
    loadPhases: PhaseDurations<LoadPhase>;
    histograms: VersionHistograms | undefined;
    stages: ConfigStages;
    logger: Logger;
    onUnloaded?: (version: ModelVersion, phases: PhaseDurations<UnloadPhase>, totalSecs: number) => void;
  }) {
    this.name = init.config.name;
    this.version = init.version;
    this.config = init.config;
    this.io = buildIOSpec(init.config, init.version);
    this.labels = init.labels;
    this.scheduler = init.scheduler;
    this.stats = init.stats;
    this.loadDurationSecs = init.loadDurationSecs;
    this.loadPhases = init.loadPhases;
    this.histograms = init.histograms;
    this.#stages = init.stages;
    this.#logger = init.logger;
    this.#onUnloaded = init.onUnloaded;
    this.#rateLimiter = init.rateLimiter;
    this.#runners = init.runners;
    this.#backendModel = init.backendModel;
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

  /** The unload's duration per phase, seconds, once `unload()` has finished. */
  get unloadPhases(): PhaseDurations<UnloadPhase> | undefined {
    return this.#unloadPhases;
  }

  /**
   * Stops taking requests, lets queued and executing ones finish, then releases every instance
   * (their worker threads, sessions and buffers) and the backend model. Idempotent. Logs one line
   * with the duration of each phase.
   */
  unload(): Promise<void> {
    this.#unloading ??= (async () => {
      const start = process.hrtime.bigint();
      this.scheduler.stop();
      await this.scheduler.drain();
      const drain = secondsSince(start);
      const released = process.hrtime.bigint();
      for (const r of this.#runners) this.#rateLimiter?.unregister(r.limited);
      const results = await Promise.allSettled(this.#runners.map((r) => r.unload()));
      // The backend model goes after its instances (backends/spi.ts).
      results.push(...(await Promise.allSettled([this.#backendModel.unload()])));
      const phases = { drain, release: secondsSince(released) };
      const total = secondsSince(start);
      this.#unloadPhases = phases;
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
        throw new NereidError('CONFIG_UNSUPPORTED', `model '${name}': ensembles are not supported by this version of Nereid`);
      }
      const settings = backendSettings(this.#options.backendConfig, prepared.config.backend);
      const backend = await this.#registry.resolve(prepared.config.backend, backendLookup(prepared, version, settings, logger));
      const { config, stages } = await completeVersionConfig(prepared, version, backend, settings, logger);
      const labels = await loadLabelFiles(config, prepared.location.directory);
      endPhase('backend_init');

      const backendModel = await backend.createModel(modelContext(prepared, version, config, settings, logger));
      const runners: InstanceRunner[] = [];
      try {
        const built = await this.#instances(config, version, backend.name, backendModel, runners);
        endPhase('warmup');
        await runWarmup(config, await prepareWarmup(config, prepared.location.directory), runners);
        phases.warmup = secondsSince(mark);
        const limiter = this.#options.rateLimiter;
        if (limiter) {
          const registered: InstanceRunner[] = [];
          try {
            for (const r of runners) {
              limiter.register(r.limited, name);
              registered.push(r);
            }
          } catch (err) {
            for (const r of registered) limiter.unregister(r.limited);
            throw err;
          }
        }
        const scheduler = config.dynamic_batching
          ? new DynamicBatcher({
              model: name,
              maxBatchSize: config.max_batch_size,
              config: config.dynamic_batching,
              shapeCheckedInputs: config.input
                .filter((t) => t.is_shape_tensor || (t.dims.includes(-1) && !t.allow_ragged_batch))
                .map((t) => t.name),
              hasOptionalInputs: config.input.some((t) => t.optional),
              runners: built.active,
              observer: built.stats,
              logger,
            })
          : new DirectScheduler(name, built.active, built.stats);
        const loadPhases = Object.fromEntries(LOAD_PHASES.map((p) => [p, phases[p] ?? 0])) as Record<LoadPhase, number>;
        const loadDurationSecs = total();
        logger.info(`loaded model '${name}' version ${version} in ${ms(loadDurationSecs)}: ${phaseList(LOAD_PHASES, loadPhases)}`);
        const metrics = this.#options.metrics;
        return new ModelVersion({
          config,
          version,
          labels,
          scheduler,
          runners,
          backendModel,
          stats: built.stats,
          rateLimiter: limiter,
          loadDurationSecs,
          loadPhases,
          histograms: built.histograms,
          stages,
          logger,
          ...(metrics
            ? {
                onUnloaded: (v: ModelVersion, unload: PhaseDurations<UnloadPhase>, totalSecs: number) =>
                  metrics.recordUnload({ name: v.name, version: v.version, phases: unload, totalSecs, at: process.hrtime.bigint() }),
              }
            : {}),
        });
      } catch (err) {
        await Promise.allSettled(runners.map((r) => r.unload()));
        await backendModel.unload().catch(() => undefined);
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
   * Creates every instance of `config` (in parallel) and its runner, pushing each runner into
   * `runners` as it is made so the caller can release them on failure.
   */
  async #instances(
    config: ModelConfig,
    version: number,
    backendName: string,
    backendModel: BackendModel,
    runners: InstanceRunner[],
  ): Promise<{ active: InstanceRunner[]; stats: ModelStatistics; histograms: VersionHistograms | undefined }> {
    const name = config.name;
    const specs: { spec: InstanceSpec; passive: boolean; group: ModelConfig['instance_group'][number] }[] = [];
    const total = config.instance_group.reduce((n, g) => n + g.count, 0);
    for (const group of config.instance_group) {
      if (group.kind === 'KIND_AUTO') throw new NereidError('INTERNAL', `instance group '${group.name}' was not normalised`);
      for (let c = 0; c < group.count; c++) {
        specs.push({
          spec: { name: `${group.name}_${c}`, groupName: group.name, kind: group.kind, deviceId: 0, instanceCount: total },
          passive: group.passive,
          group,
        });
      }
    }
    const created = await Promise.allSettled(specs.map((s) => backendModel.createInstance(s.spec)));
    const decoupled = config.model_transaction_policy?.decoupled ?? false;
    const stats = new ModelStatistics(name, version);
    const histograms = this.#options.metrics?.histogramsFor(config, stats);
    const active: InstanceRunner[] = [];
    created.forEach((c, i) => {
      if (c.status !== 'fulfilled') return;
      const limiter = this.#options.rateLimiter;
      const group = specs[i]!.group;
      const runner = new InstanceRunner(specs[i]!.spec, c.value, backendName, {
        decoupled,
        observer: stats,
        ...(limiter
          ? {
              rateLimiter: limiter,
              resources: group.rate_limiter?.resources ?? [],
              priority: group.rate_limiter?.priority ?? 1,
            }
          : {}),
      });
      runners.push(runner);
      if (!specs[i]!.passive) active.push(runner);
    });
    const failure = created.find((c): c is PromiseRejectedResult => c.status === 'rejected');
    if (failure) throw toNereidError(failure.reason, 'MODEL_LOAD_FAILED');
    return { active, stats, histograms };
  }
}
