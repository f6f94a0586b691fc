/**
 * Reads a model's configuration and prepares it for loading (models-and-scheduling.md §1.5 and
 * §3.1 steps 1–5): read, derive backend/platform, normalise, validate the model-level rules,
 * check the name. Backend-dependent steps happen per version, in the core.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { NereidError } from '@nereid/protocol';
import {
  completeModelConfig,
  deriveModelConfig,
  modelConfigFromJson,
  normalizeModelConfig,
  parseModelConfigText,
  readFirstSubdirectoryEntries,
  DEFAULT_CONFIG_LIMITS,
  validateConfigLimits,
  validateModelConfig,
  validateModelIO,
  type ConfigLimits,
} from '../config/index.js';
import type { ModelConfig, Sparse } from '../config/model-config.js';
import type { ModelLocation } from './repository-scanner.js';

export interface ConfigLoadOptions {
  /** Auto-complete enabled (default); `--disable-auto-complete-config` turns it off. */
  autoCompleteConfig: boolean;
  /** `--model-config-name`: use `configs/<name>.pbtxt` when present. */
  modelConfigName: string;
  /** `--model-config-limit`: bounds on what a configuration may ask for (default DEFAULT_CONFIG_LIMITS). */
  limits?: ConfigLimits;
}

/** Where a model's configuration text came from (models-and-scheduling.md §3.1 step 1). */
export type ConfigSourceKind = 'file' | 'override' | 'none';

/** Seconds spent in the model-level steps of a load (`nv_model_load_phase_duration_secs`). */
export interface PrepareTimings {
  /** Reading the config file. */
  readonly read: number;
  /** Parsing, derivation, normalisation, model-level validation. */
  readonly parse: number;
}

export interface PreparedModel {
  readonly location: ModelLocation;
  /** Derived, normalised, model-level-validated config (inputs/outputs may still be missing). */
  readonly config: ModelConfig;
  /** The file the config came from; undefined when there was none (auto-complete fills it). */
  readonly configFile: string | undefined;
  readonly autoComplete: boolean;
  /** The configuration exactly as given (only the fields it set), for provenance. */
  readonly source: Sparse<ModelConfig>;
  readonly sourceKind: ConfigSourceKind;
  /** The limits the configuration was checked against; the per-version steps check them again. */
  readonly limits: ConfigLimits;
  readonly timings: PrepareTimings;
}

async function readIfExists(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new NereidError('CONFIG_PARSE', `unable to read '${path}': ${(err as Error).message}`);
  }
}

/**
 * Steps 1–5 of the load pipeline. `override` is a load's `config` parameter (ModelConfig JSON,
 * models-and-scheduling.md §1.10): when given, it is used instead of the files.
 */
export async function prepareModelConfig(
  location: ModelLocation,
  options: ConfigLoadOptions,
  override?: string | Readonly<Record<string, unknown>>,
): Promise<PreparedModel> {
  const name = location.name;
  const readStart = process.hrtime.bigint();
  let configFile: string | undefined;
  let text: string | undefined;
  if (override !== undefined) {
    // Nothing is read: the override is the configuration.
  } else if (options.modelConfigName) {
    const custom = join(location.directory, 'configs', `${options.modelConfigName}.pbtxt`);
    text = await readIfExists(custom);
    if (text !== undefined) configFile = custom;
  }
  if (text === undefined && override === undefined) {
    const standard = join(location.directory, 'config.pbtxt');
    text = await readIfExists(standard);
    if (text !== undefined) configFile = standard;
  }
  const parseStart = process.hrtime.bigint();
  let sparse: Sparse<ModelConfig> = {};
  let sourceKind: ConfigSourceKind = 'none';
  if (override !== undefined) {
    sparse = modelConfigFromJson(override);
    sourceKind = 'override';
  } else if (text !== undefined) {
    sparse = parseModelConfigText(text, configFile);
    sourceKind = 'file';
  } else if (!options.autoCompleteConfig) {
    throw new NereidError(
      'CONFIG_MISSING',
      `model '${name}': '${join(location.directory, 'config.pbtxt')}' does not exist, and auto-complete is disabled ` +
        `(--disable-auto-complete-config / --strict-model-config=true): write a config.pbtxt or enable auto-complete`,
    );
  }

  const limits = options.limits ?? DEFAULT_CONFIG_LIMITS;
  let config = completeModelConfig(sparse);
  // Before anything works in proportion to the values (normalisation sorts and copies them).
  validateConfigLimits(config, limits);
  config = deriveModelConfig(config, name, await readFirstSubdirectoryEntries(location.directory));
  config = normalizeModelConfig(config);
  validateModelConfig(config);
  validateConfigLimits(config, limits);
  if (!options.autoCompleteConfig) validateModelIO(config);
  if (config.name !== name) {
    throw new NereidError(
      'CONFIG_INVALID',
      `model '${name}': the config's name '${config.name}' must equal the model directory name '${name}'`,
    );
  }
  const end = process.hrtime.bigint();
  return {
    location,
    config,
    configFile,
    autoComplete: options.autoCompleteConfig,
    source: sparse,
    sourceKind,
    limits,
    timings: { read: Number(parseStart - readStart) / 1e9, parse: Number(end - parseStart) / 1e9 },
  };
}
