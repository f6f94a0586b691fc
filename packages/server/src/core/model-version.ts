/**
 * A loaded, servable model version — backend model, instances, scheduler — and the factory that
 * makes one from a prepared model (models-and-scheduling.md §3.1 steps 6–11).
 */
import { join } from 'node:path';
import { NereidError, toNereidError } from '@nereid/protocol';
import type { BackendRegistry } from '../backends/registry.js';
import type { BackendModel, InstanceSpec, ModelContext } from '../backends/spi.js';
import {
  loadLabelFiles,
  normalizeInstanceGroups,
  normalizeModelConfig,
  validateInstanceGroups,
  validateModelConfig,
  validateModelIO,
} from '../config/index.js';
import type { ModelConfig } from '../config/model-config.js';
import type { Logger } from '../observability/logger.js';
import type { MeteredVersion, ServerMetrics, VersionHistograms } from '../observability/metrics.js';
import type { PreparedModel } from '../repository/config-loader.js';
import type { Servable, VersionFactory } from '../repository/model-manager.js';
import { ModelStatistics } from '../observability/model-statistics.js';
import { DirectScheduler } from '../scheduling/direct-scheduler.js';
import { DynamicBatcher } from '../scheduling/dynamic-batcher.js';
import type { RateLimiter } from '../scheduling/rate-limiter.js';
import { InstanceRunner } from '../scheduling/instance-runner.js';
import type { Scheduler } from '../scheduling/scheduler.js';
import { buildIOSpec, type ModelIOSpec } from './request-validation.js';

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
  /** This version's metric histograms, when the server enables any (see `ServerMetrics`). */
  readonly histograms: VersionHistograms | undefined;
  readonly #runners: readonly InstanceRunner[];
  readonly #backendModel: BackendModel;
  readonly #rateLimiter: RateLimiter | undefined;
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
    histograms: VersionHistograms | undefined;
  }) {
    this.name = init.config.name;
    this.version = init.version;
    this.config = init.config;
    this.io = buildIOSpec(init.config, init.version);
    this.labels = init.labels;
    this.scheduler = init.scheduler;
    this.stats = init.stats;
    this.loadDurationSecs = init.loadDurationSecs;
    this.histograms = init.histograms;
    this.#rateLimiter = init.rateLimiter;
    this.#runners = init.runners;
    this.#backendModel = init.backendModel;
  }

  /** `platform` if set, else `backend` (protocol.md §3.5). */
  get platform(): string {
    return this.config.platform || this.config.backend;
  }

  /** Stops taking requests, lets queued and executing ones finish, then releases the backend. */
  unload(): Promise<void> {
    this.#unloading ??= (async () => {
      this.scheduler.stop();
      await this.scheduler.drain();
      for (const r of this.#runners) this.#rateLimiter?.unregister(r.limited);
      await Promise.allSettled(this.#runners.map((r) => r.unload()));
      await this.#backendModel.unload();
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
  /** The server's metrics: a version gets its histograms from them at load. */
  metrics?: ServerMetrics;
}

export class ModelVersionFactory implements VersionFactory<ModelVersion> {
  readonly #registry: BackendRegistry;
  readonly #options: ModelVersionFactoryOptions;

  constructor(registry: BackendRegistry, options: ModelVersionFactoryOptions) {
    this.#registry = registry;
    this.#options = options;
  }

  async load(prepared: PreparedModel, version: number): Promise<ModelVersion> {
    const loadStart = process.hrtime.bigint();
    const logger = this.#options.logger;
    const name = prepared.location.name;
    let config: ModelConfig = structuredClone(prepared.config);
    if (config.platform === 'ensemble') {
      throw new NereidError('CONFIG_UNSUPPORTED', `model '${name}': ensembles are not supported by this version of Nereid`);
    }
    const backend = this.#registry.get(config.backend, name);
    const versionDirectory = join(prepared.location.directory, String(version));
    const backendConfig = {
      ...(this.#options.backendConfig.get('') ?? {}),
      ...(this.#options.backendConfig.get(backend.name) ?? {}),
    };
    const context = (): ModelContext => ({
      name,
      version,
      config,
      modelDirectory: prepared.location.directory,
      versionDirectory,
      modelPath: join(versionDirectory, config.default_model_filename),
      backendConfig,
      logger,
    });

    // Step 6: instance groups.
    config = normalizeInstanceGroups(config, { gpus: [], defaultCpuCount: backend.defaultCpuInstanceCount ?? 1 });
    validateInstanceGroups(config, { gpus: [] });

    // Step 7: backend auto-complete, then normalise again.
    if (prepared.autoComplete && backend.autoCompleteConfig) {
      config = normalizeModelConfig(await backend.autoCompleteConfig(context()));
    }
    // Step 8.
    if (prepared.configFile === undefined && config.input.length === 0 && config.output.length === 0) {
      throw new NereidError('CONFIG_MISSING', `model configuration is not provided for model '${name}'`);
    }
    // Step 9.
    validateModelConfig(config);
    validateModelIO(config);
    const labels = await loadLabelFiles(config, prepared.location.directory);

    // Step 10: backend model, instances, scheduler.
    const backendModel = await backend.createModel(context());
    const runners: InstanceRunner[] = [];
    try {
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
      created.forEach((c, i) => {
        if (c.status === 'fulfilled') {
          const limiter = this.#options.rateLimiter;
          const group = specs[i]!.group;
          const runner = new InstanceRunner(specs[i]!.spec, c.value, backend.name, {
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
        }
      });
      const failure = created.find((c): c is PromiseRejectedResult => c.status === 'rejected');
      if (failure) throw toNereidError(failure.reason, 'MODEL_LOAD_FAILED');
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
      const active = runners.filter((_, i) => !specs[i]!.passive);
      const scheduler = config.dynamic_batching
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
          })
        : new DirectScheduler(name, active, stats);
      const loadDurationSecs = Number(process.hrtime.bigint() - loadStart) / 1e9;
      return new ModelVersion({
        config,
        version,
        labels,
        scheduler,
        runners,
        backendModel,
        stats,
        rateLimiter: limiter,
        loadDurationSecs,
        histograms,
      });
    } catch (err) {
      await Promise.allSettled(runners.map((r) => r.unload()));
      await backendModel.unload().catch(() => undefined);
      throw err;
    }
  }
}
