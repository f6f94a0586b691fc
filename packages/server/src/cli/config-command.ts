/**
 * `nereid config MODEL_DIR`: the complete configuration Nereid would use for a model directory,
 * made by the load pipeline itself (read, derive, normalise, instance groups, backend
 * auto-complete, validate: models-and-scheduling.md §3.1 steps 1–9), with the origin of every
 * field: `file`, `override`, `auto-complete` or `default` (docs/configuration.md). Nothing is
 * served: the backend checks the configuration against the model, but no instance (no session)
 * is created.
 */
import { stat } from 'node:fs/promises';
import { basename, dirname, resolve } from 'node:path';
import { NereidError, toNereidError } from '@nereid/protocol';
import { BackendRegistry } from '../backends/registry.js';
import { configProvenance, DEFAULT_CONFIG_LIMITS, modelConfigToJson, printModelConfigText } from '../config/index.js';
import type { ModelConfig } from '../config/model-config.js';
import type { EffectiveConfigReport } from '../core/types.js';
import { discoverDevices } from '../devices/index.js';
import { backendLookup, backendSettings, completeVersionConfig, modelContext } from '../core/version-config.js';
import { createLogger } from '../observability/logger.js';
import { prepareModelConfig } from '../repository/config-loader.js';
import { listVersions } from '../repository/repository-scanner.js';
import { selectVersions } from '../repository/version-policy.js';
import { parseServeArgs } from './options.js';

export interface ConfigCommandOptions {
  /** Print JSON instead of annotated protobuf text. */
  json?: boolean;
  /** The version whose files auto-complete reads; default: the highest one the policy selects. */
  modelVersion?: string;
  /** A load's `config` parameter (ModelConfig JSON), used instead of the files. */
  configOverride?: string;
  /** As `nereid serve`'s options of the same names. */
  modelConfigName?: string;
  disableAutoCompleteConfig?: boolean;
  strictModelConfig?: string;
  backendConfig?: string[];
  backendDirectory?: string;
}

/** The command's JSON output: the endpoint's report plus where the model was read from. */
export interface ConfigCommandReport extends EffectiveConfigReport {
  directory: string;
  /** The configuration file read; absent with an override or without a file. */
  config_file?: string;
}

/** The effective configuration of a model directory: the report, and the configuration itself. */
export interface EffectiveConfig {
  readonly report: ConfigCommandReport;
  readonly config: ModelConfig;
}

/** Works out the effective configuration of the model in `directory`. Throws a NereidError. */
export async function effectiveConfigOf(directory: string, options: ConfigCommandOptions = {}): Promise<EffectiveConfig> {
  // The options shared with `nereid serve` are parsed by its parser, so they mean the same.
  const serveArgs = [
    ...(options.modelConfigName !== undefined ? [`--model-config-name=${options.modelConfigName}`] : []),
    ...(options.disableAutoCompleteConfig ? ['--disable-auto-complete-config'] : []),
    ...(options.strictModelConfig !== undefined ? [`--strict-model-config=${options.strictModelConfig}`] : []),
    ...(options.backendConfig ?? []).map((b) => `--backend-config=${b}`),
    ...(options.backendDirectory !== undefined ? [`--backend-directory=${options.backendDirectory}`] : []),
  ];
  const serve = parseServeArgs(serveArgs);
  const dir = resolve(directory);
  const info = await stat(dir).catch(() => undefined);
  if (info === undefined || !info.isDirectory()) {
    throw new NereidError('REPOSITORY_INVALID', `model directory '${directory}' does not exist or is not a directory`);
  }
  const name = basename(dir);
  // Warnings (auto-complete's choices, skipped versions) go to stderr; the result to stdout.
  const logger = createLogger({ info: false });
  const prepared = await prepareModelConfig(
    { name, repository: dirname(dir), directory: dir },
    { autoCompleteConfig: serve.autoCompleteConfig, modelConfigName: serve.modelConfigName, limits: { ...DEFAULT_CONFIG_LIMITS, ...serve.configLimits } },
    options.configOverride,
  );
  if (prepared.config.platform === 'ensemble') {
    throw new NereidError(
      'CONFIG_UNSUPPORTED',
      `model '${name}' is an ensemble: 'nereid config' completes the configuration of one model, and an ensemble is checked ` +
        `against its composing models only when a server loads it (run 'nereid serve' with the whole repository)`,
    );
  }
  const available = await listVersions(dir, logger);
  let version: number;
  if (options.modelVersion !== undefined) {
    version = Number(options.modelVersion);
    if (!available.includes(version)) {
      const have = available.length ? `it has versions ${available.join(', ')}` : 'it has no version directories';
      throw new NereidError('MODEL_VERSION_NOT_FOUND', `model '${name}' has no version ${options.modelVersion}: ${have}`);
    }
  } else {
    version = selectVersions(name, prepared.config.version_policy, available, logger).at(-1)!;
  }
  const settings = backendSettings(serve.backendConfig, prepared.config.backend);
  const registry = new BackendRegistry(undefined, { backendDirectory: serve.backendDirectory });
  const backend = await registry.resolve(prepared.config.backend, backendLookup(prepared, version, settings, logger));
  // The GPUs as a server would find them, so that KIND_AUTO and KIND_GPU groups complete as in a load.
  const devices = await discoverDevices({ visibleDevices: process.env['CUDA_VISIBLE_DEVICES'], logger });
  const { config, stages } = await completeVersionConfig(prepared, version, backend, settings, logger, devices);
  // The backend's own checks of the configuration against the model (ONNX Runtime: names, types,
  // dims), which a load makes when it creates the backend model; no instance is created.
  await (await backend.createModel(modelContext(prepared, version, config, settings, logger))).unload();
  const report: ConfigCommandReport = {
    name,
    version: String(version),
    source: prepared.sourceKind,
    config: modelConfigToJson(config, { emitDefaults: true, int64AsString: false }),
    provenance: configProvenance(stages),
    directory: dir,
    ...(prepared.configFile !== undefined ? { config_file: prepared.configFile } : {}),
  };
  return { report, config };
}

/** The configuration as protobuf text, each value followed by `# <origin>`, under a header. */
export function formatEffectiveConfig({ report, config }: EffectiveConfig): string {
  const source =
    report.source === 'file' ? report.config_file! : report.source === 'override' ? 'the --config-override JSON' : 'none (auto-complete made it)';
  const header = [
    `# Effective configuration of model '${report.name}' version ${report.version} (${report.directory})`,
    `# Read from: ${source}`,
    '# Each value is followed by its origin: file, override, auto-complete or default.',
  ];
  const text = printModelConfigText(config, { annotate: (path) => report.provenance[path] });
  return `${header.join('\n')}\n${text}`;
}

/** Runs the command; returns the exit code. */
export async function runConfigCommand(directory: string, options: ConfigCommandOptions): Promise<number> {
  try {
    const effective = await effectiveConfigOf(directory, options);
    process.stdout.write(options.json ? `${JSON.stringify(effective.report, null, 2)}\n` : formatEffectiveConfig(effective));
    return 0;
  } catch (err) {
    process.stderr.write(`nereid config: ${toNereidError(err).message}\n`);
    return 1;
  }
}
