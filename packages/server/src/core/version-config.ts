/**
 * The per-version configuration steps of a load (models-and-scheduling.md §3.1 steps 6–9):
 * instance groups, backend auto-complete, full validation. Loading a version and
 * `nereid config` both go through here, so the effective configuration the command prints is the
 * one a load would use.
 */
import { join } from 'node:path';
import { NereidError } from '@nereid/protocol';
import type { BackendLookup } from '../backends/custom/custom-backends.js';
import type { Backend, ModelContext, ModelServices } from '../backends/spi.js';
import {
  normalizeInstanceGroups,
  normalizeModelConfig,
  validateConfigLimits,
  validateInstanceGroups,
  validateModelConfig,
  validateModelIO,
  type ConfigStages,
} from '../config/index.js';
import type { ModelConfig } from '../config/model-config.js';
import { DeviceList, checkDevicePlacement } from '../devices/index.js';
import type { Logger } from '../observability/logger.js';
import type { PreparedModel } from '../repository/config-loader.js';

/** `--backend-config` settings for `backend`: the global ones, overridden by the backend's own. */
export function backendSettings(
  backendConfig: ReadonlyMap<string, Readonly<Record<string, string>>>,
  backend: string,
): Record<string, string> {
  return { ...(backendConfig.get('') ?? {}), ...(backendConfig.get(backend) ?? {}) };
}

/** What the backend registry is told to find a model's backend (custom backends: the module). */
export function backendLookup(
  prepared: PreparedModel,
  version: number,
  backendConfig: Readonly<Record<string, string>>,
  logger: Logger,
): BackendLookup {
  return {
    model: prepared.location.name,
    modelDirectory: prepared.location.directory,
    versionDirectory: join(prepared.location.directory, String(version)),
    config: prepared.config,
    backendConfig,
    logger,
  };
}

/** What a backend is told about the version being loaded, with `config` as it stands. */
export function modelContext(
  prepared: PreparedModel,
  version: number,
  config: ModelConfig,
  backendConfig: Readonly<Record<string, string>>,
  logger: Logger,
  models?: ModelServices,
): ModelContext {
  const versionDirectory = join(prepared.location.directory, String(version));
  return {
    name: prepared.location.name,
    version,
    config,
    modelDirectory: prepared.location.directory,
    versionDirectory,
    modelPath: join(versionDirectory, config.default_model_filename),
    backendConfig,
    logger,
    ...(models ? { models } : {}),
  };
}

/**
 * One warning per load for each configuration field Nereid accepts but does not act on, naming
 * what is missing (docs/differences.md).
 */
export function warnIneffectiveFields(config: ModelConfig, logger: Logger, serverCache = false): void {
  if (config.response_cache?.enable && !serverCache) {
    logger.warning(
      `model '${config.name}': response_cache.enable is true, but the server has no response cache (--cache-config): ` +
        'every request is computed by the model, and the cache statistics stay 0',
    );
  }
  const agents = config.model_repository_agents?.agents ?? [];
  if (agents.length > 0) {
    logger.warning(
      `model '${config.name}': model_repository_agents (${agents.map((a) => `'${a.name}'`).join(', ')}) has no effect: ` +
        'Nereid runs no repository agents, so their checks (a checksum agent\'s, for one) are not made',
    );
  }
  const accelerators = config.optimization?.execution_accelerators;
  const named = [...(accelerators?.gpu_execution_accelerator ?? []), ...(accelerators?.cpu_execution_accelerator ?? [])];
  if (named.length > 0) {
    logger.warning(
      `model '${config.name}': optimization.execution_accelerators (${named.map((a) => `'${a.name}'`).join(', ')}) has no effect: ` +
        "the model runs on its backend's default CPU execution",
    );
  }
  if ((config.model_operations?.op_library_filename.length ?? 0) > 0) {
    logger.warning(
      `model '${config.name}': model_operations.op_library_filename has no effect: Nereid loads no custom operation ` +
        'libraries, so a model that needs one fails when its backend meets the operation',
    );
  }
}

export interface CompletedVersionConfig {
  /** The complete, normalised, validated configuration of the version. */
  readonly config: ModelConfig;
  /** The pipeline's stages, for `configProvenance`. */
  readonly stages: ConfigStages;
}

/**
 * Steps 6–9 for one version of `prepared`. Throws the load error (NereidError) of the first rule
 * that fails. Label files (step 9) are not read here: serving needs them, the configuration does
 * not.
 */
export async function completeVersionConfig(
  prepared: PreparedModel,
  version: number,
  backend: Backend,
  backendConfig: Readonly<Record<string, string>>,
  logger: Logger,
  devices: DeviceList = DeviceList.NONE,
  serverCache = false,
): Promise<CompletedVersionConfig> {
  const name = prepared.location.name;
  // Step 6: instance groups. KIND_AUTO becomes KIND_GPU only for a backend that runs on GPUs,
  // and only on whole GPUs (one in MIG mode is used through its MIG instances, named).
  const wholeGpus = backend.gpu ? devices.gpus.filter((g) => !g.migEnabled).map((g) => g.index) : [];
  let config = normalizeInstanceGroups(structuredClone(prepared.config), { gpus: wholeGpus, defaultCpuCount: backend.defaultCpuInstanceCount ?? 1 });
  if (devices.hasGpu) {
    const gpuGroup = config.instance_group.find((g) => g.kind === 'KIND_GPU');
    if (!backend.gpu && gpuGroup !== undefined) {
      throw new NereidError(
        'CONFIG_UNSUPPORTED',
        `model '${name}': instance group '${gpuGroup.name}' has kind KIND_GPU, but the ${backend.name} backend of this build runs on CPU only; ` +
          'use KIND_CPU (KIND_AUTO also places it on the CPU)',
      );
    }
    const requested = new Map(config.instance_group.map((g, i) => [g.name, prepared.config.instance_group?.[i]?.gpus ?? []] as const));
    checkDevicePlacement(config, devices, requested);
  }
  validateInstanceGroups(config, { gpus: devices.gpus.map((g) => g.index) });
  validateConfigLimits(config, prepared.limits);
  const beforeAutoComplete = structuredClone(config);
  let afterAutoComplete = beforeAutoComplete;

  // Step 7: backend auto-complete, then normalise again.
  if (prepared.autoComplete && backend.autoCompleteConfig) {
    const completed = await backend.autoCompleteConfig(modelContext(prepared, version, config, backendConfig, logger));
    afterAutoComplete = structuredClone(completed);
    config = normalizeModelConfig(completed);
  }
  // Step 8.
  if (prepared.sourceKind === 'none' && config.input.length === 0 && config.output.length === 0) {
    throw new NereidError('CONFIG_MISSING', `model configuration is not provided for model '${name}'`);
  }
  // Step 9.
  validateModelConfig(config);
  validateModelIO(config);
  validateConfigLimits(config, prepared.limits);
  warnIneffectiveFields(config, logger, serverCache);
  return {
    config,
    stages: { source: prepared.source, sourceKind: prepared.sourceKind, beforeAutoComplete, afterAutoComplete, effective: config },
  };
}
