/**
 * Load-time validation rules of models-and-scheduling.md §3.6, split as the load pipeline of §3.1
 * runs them: the config group (validateModelConfig, which includes the static ensemble checks of
 * §6.2), the instance-group group (validateInstanceGroups) and the I/O group (validateModelIO).
 * File-system checks live in validate-files.ts.
 *
 * Each function throws `NereidError('CONFIG_INVALID')` for the first rule broken; the message
 * names the model, the field or tensor, and what is expected.
 */
import { NereidError } from '@nereid/protocol';
import type {
  ModelConfig,
  ModelInput,
  ModelOutput,
  ModelQueuePolicy,
  ModelSequenceBatching,
  SequenceControl,
} from './model-config.js';
import { validateConfigPaths } from './paths.js';
import { validateEnsembleScheduling } from './validate-ensemble.js';

/** Thrown-error helper: `model '<name>': <message>`. */
function configError(config: Pick<ModelConfig, 'name'>, message: string): NereidError {
  return new NereidError('CONFIG_INVALID', `model '${config.name}': ${message}`);
}

/** Platforms each known backend accepts (§3.6, the table of §1.3). */
const BACKEND_PLATFORMS: Readonly<Record<string, readonly string[]>> = {
  tensorrt: ['tensorrt_plan'],
  onnxruntime: ['onnxruntime_onnx'],
  pytorch: ['pytorch_libtorch', 'torch_aoti'],
  tensorflow: ['tensorflow_graphdef', 'tensorflow_savedmodel'],
};

export const BATCH_STRATEGY_PATH_PARAMETER = 'TRITON_BATCH_STRATEGY_PATH';

// ---------------------------------------------------------------------------------------------
// Config group

/** The "config group" of §3.6 on a normalised config (§3.2 already applied). */
export function validateModelConfig(config: ModelConfig): void {
  if (config.name === '') throw new NereidError('CONFIG_INVALID', "model configuration must specify 'name'");
  validatePlatformAndBackend(config);
  validateConfigPaths(config);
  if (config.max_batch_size < 0) {
    throw configError(config, `'max_batch_size' must be non-negative, got ${config.max_batch_size}`);
  }
  if (config.version_policy === undefined) throw configError(config, "must specify 'version_policy'");
  validateDynamicBatching(config);
  validateSequenceBatching(config);

  if (config.ensemble_scheduling !== undefined) validateEnsembleScheduling(config);
  else if (config.platform === 'ensemble') {
    throw configError(config, "platform is 'ensemble' but 'ensemble_scheduling' is not set; an ensemble must specify its steps");
  }

  if (config.model_transaction_policy?.decoupled && config.response_cache?.enable) {
    // Triton's wording (models-and-scheduling.md §8.1), without the "model 'x':" prefix.
    throw new NereidError(
      'CONFIG_INVALID',
      `Response Cache does not currently support model ${config.name} with 'decoupled' transaction policy. Please disable the response cache.`,
    );
  }
  validateModelMetrics(config);
  if (config.sequence_batching !== undefined && Object.hasOwn(config.parameters, BATCH_STRATEGY_PATH_PARAMETER)) {
    throw configError(config, `parameter '${BATCH_STRATEGY_PATH_PARAMETER}' (custom batching) is not allowed with sequence batching`);
  }
}

function validatePlatformAndBackend(config: ModelConfig): void {
  const { platform, backend } = config;
  if (platform === '' && backend === '') throw configError(config, "must specify 'platform' or 'backend'");
  if (platform === 'ensemble') {
    if (backend !== '') {
      throw configError(config, `an ensemble (platform 'ensemble') must have an empty 'backend', got '${backend}'`);
    }
    return;
  }
  if (backend === '') {
    throw configError(config, `unexpected platform type '${platform}': 'backend' must be set unless the platform is 'ensemble'`);
  }
  const platforms = BACKEND_PLATFORMS[backend];
  if (platforms !== undefined && !platforms.includes(platform)) {
    throw configError(
      config,
      `unexpected 'platform' and 'backend' pair, got: '${platform}', '${backend}'; backend '${backend}' requires platform ${platforms
        .map((p) => `'${p}'`)
        .join(' or ')}`,
    );
  }
}

function validatePreferredBatchSizes(config: ModelConfig, sizes: readonly number[], where: string): void {
  for (const size of sizes) {
    if (size <= 0) throw configError(config, `${where} ${size} must be positive`);
    if (size > config.max_batch_size) {
      throw configError(config, `${where} ${size} must be <= max_batch_size (${config.max_batch_size})`);
    }
  }
}

function validateDynamicBatching(config: ModelConfig): void {
  const db = config.dynamic_batching;
  if (db === undefined) return;
  validatePreferredBatchSizes(config, db.preferred_batch_size, 'dynamic_batching.preferred_batch_size');

  const levels = db.priority_levels;
  if (levels > 0) {
    if (db.default_priority_level < 1 || db.default_priority_level > levels) {
      throw configError(
        config,
        `dynamic_batching.default_priority_level ${db.default_priority_level} must be in range [1, ${levels}] (priority_levels is ${levels})`,
      );
    }
    for (const key of Object.keys(db.priority_queue_policy)) {
      const level = Number(key);
      if (level < 1 || level > levels) {
        throw configError(config, `dynamic_batching.priority_queue_policy has priority level ${key}, which must be in range [1, ${levels}]`);
      }
    }
  }

  if (db.preserve_ordering) {
    if (levels > 1) {
      throw configError(config, `only one priority level is allowed when 'preserve_ordering' is true, got priority_levels ${levels}`);
    }
    const delaying = (policy: ModelQueuePolicy | undefined): boolean =>
      policy !== undefined && policy.timeout_action === 'DELAY' && policy.default_timeout_microseconds !== 0;
    const policies: [string, ModelQueuePolicy | undefined][] = [
      ['dynamic_batching.default_queue_policy', db.default_queue_policy],
      ...Object.entries(db.priority_queue_policy).map(
        ([k, p]): [string, ModelQueuePolicy] => [`dynamic_batching.priority_queue_policy[${k}]`, p],
      ),
    ];
    for (const [where, policy] of policies) {
      if (delaying(policy)) {
        throw configError(
          config,
          `${where} cannot combine timeout_action DELAY with a non-zero default_timeout_microseconds when 'preserve_ordering' is true`,
        );
      }
    }
  }
}

const BOOLEAN_CONTROLS = ['CONTROL_SEQUENCE_START', 'CONTROL_SEQUENCE_END', 'CONTROL_SEQUENCE_READY'] as const;
const CORRID_TYPES = ['TYPE_UINT64', 'TYPE_INT64', 'TYPE_UINT32', 'TYPE_INT32', 'TYPE_STRING'];

function validateSequenceBatching(config: ModelConfig): void {
  const sb = config.sequence_batching;
  if (sb === undefined) return;
  if (config.response_cache?.enable) {
    throw new NereidError(
      'CONFIG_INVALID',
      `Response Cache does not currently support model ${config.name} with sequence batching scheduler. Please disable the response cache.`,
    );
  }
  validateSequenceControls(config, sb);
  if (sb.oldest !== undefined) {
    validatePreferredBatchSizes(config, sb.oldest.preferred_batch_size, 'sequence_batching.oldest.preferred_batch_size');
  }
  if (sb.direct !== undefined) {
    const u = sb.direct.minimum_slot_utilization;
    if (!(u >= 0 && u <= 1)) {
      throw configError(config, `sequence_batching.direct.minimum_slot_utilization ${u} must be in range [0.0, 1.0]`);
    }
  }
}

function validateSequenceControls(config: ModelConfig, sb: ModelSequenceBatching): void {
  const tensors = new Set<string>();
  const kinds = new Map<string, string>();
  sb.control_input.forEach((input, index) => {
    if (input.name === '') throw configError(config, `sequence_batching.control_input[${index}] must have a name`);
    if (tensors.has(input.name)) {
      throw configError(config, `sequence batching control tensor '${input.name}' is specified in more than one control_input`);
    }
    tensors.add(input.name);
    for (const control of input.control) {
      const previous = kinds.get(control.kind);
      if (previous !== undefined) {
        throw configError(
          config,
          `sequence batching specifies multiple ${control.kind} controls (tensors '${previous}' and '${input.name}'); each control kind may appear at most once`,
        );
      }
      kinds.set(control.kind, input.name);
      validateControl(config, input.name, control);
    }
  });
}

function validateControl(config: ModelConfig, tensor: string, control: SequenceControl): void {
  const lists = (
    [
      ['int32_false_true', control.int32_false_true.length],
      ['fp32_false_true', control.fp32_false_true.length],
      ['bool_false_true', control.bool_false_true.length],
    ] as const
  ).filter(([, length]) => length > 0);
  const where = `control ${control.kind} of sequence batching tensor '${tensor}'`;
  if ((BOOLEAN_CONTROLS as readonly string[]).includes(control.kind)) {
    if (lists.length === 0) {
      throw configError(config, `${where} must specify one of 'int32_false_true', 'fp32_false_true' or 'bool_false_true'`);
    }
    if (lists.length > 1) {
      throw configError(
        config,
        `${where} specifies more than one of 'int32_false_true', 'fp32_false_true' and 'bool_false_true' (${lists.map(([n]) => n).join(', ')})`,
      );
    }
    const [name, length] = lists[0];
    if (length !== 2) {
      throw configError(config, `${where}: '${name}' must have exactly 2 entries [false_value, true_value], got ${length}`);
    }
    return;
  }
  // CONTROL_SEQUENCE_CORRID
  if (lists.length > 0) {
    throw configError(config, `${where} must not specify 'int32_false_true', 'fp32_false_true' or 'bool_false_true'; it uses 'data_type'`);
  }
  if (!CORRID_TYPES.includes(control.data_type)) {
    throw configError(
      config,
      `${where} has data_type ${control.data_type}; allowed data types are TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 and TYPE_STRING`,
    );
  }
}

function validateModelMetrics(config: ModelConfig): void {
  config.model_metrics?.metric_control.forEach((control, index) => {
    const where = `model_metrics.metric_control[${index}]`;
    if (control.metric_identifier === undefined) throw configError(config, `${where} must specify 'metric_identifier'`);
    if (control.metric_identifier.family === '') throw configError(config, `${where}.metric_identifier must specify a non-empty 'family'`);
    if (control.histogram_options === undefined) throw configError(config, `${where} must specify 'histogram_options'`);
    if (control.histogram_options.buckets.length === 0) {
      throw configError(config, `${where}.histogram_options must specify non-empty 'buckets'`);
    }
  });
}

// ---------------------------------------------------------------------------------------------
// Instance-group group

export interface InstanceGroupValidationOptions {
  /** Ids of the GPUs this server may use; `[]` on a CPU-only server (every KIND_GPU group fails). */
  readonly gpus: readonly number[];
}

/** The "instance-group group" of §3.6 on a config after normalizeInstanceGroups. Ensembles pass. */
export function validateInstanceGroups(config: ModelConfig, options: InstanceGroupValidationOptions): void {
  if (config.ensemble_scheduling !== undefined) return;
  if (config.instance_group.length === 0) throw configError(config, "must specify one or more 'instance_group's");
  const available = new Set(options.gpus);
  for (const group of config.instance_group) {
    const where = `instance group '${group.name}'`;
    switch (group.kind) {
      case 'KIND_MODEL':
      case 'KIND_CPU':
        if (group.gpus.length > 0) {
          throw configError(config, `${where} has kind ${group.kind} but specifies one or more GPUs (gpus: [${group.gpus.join(', ')}])`);
        }
        break;
      case 'KIND_GPU':
        if (available.size === 0) {
          throw configError(
            config,
            `${where} has kind KIND_GPU but server does not support GPUs (no GPU was found: see the server's start-up log); ` +
              'use KIND_CPU, or KIND_AUTO to run on a GPU where there is one',
          );
        }
        if (group.gpus.length === 0) throw configError(config, `${where} has kind KIND_GPU but specifies no GPUs`);
        for (const id of group.gpus) {
          if (!available.has(id)) {
            throw configError(
              config,
              `${where} specifies invalid or unsupported gpu id ${id}; available GPUs are: ${[...available].sort((a, b) => a - b).join(', ')}`,
            );
          }
        }
        break;
      default:
        throw configError(config, `${where} has unexpected kind ${group.kind}; instance groups must be normalised first`);
    }
    if (group.profile.length > 0) {
      if (config.platform !== 'tensorrt_plan') {
        throw configError(
          config,
          `${where} specifies 'profile', which is only supported for TensorRT models (platform 'tensorrt_plan'), but the platform is '${config.platform}'`,
        );
      }
      for (const profile of group.profile) {
        if (!/^\d+$/.test(profile)) {
          throw configError(config, `${where} specifies invalid profile '${profile}'; a profile must be the string form of a non-negative integer`);
        }
      }
    }
  }
}

/**
 * The rate-limiter rule of §3.6: a resource name may not be global in one place and per-device
 * in another, within this config or against `known` (resource name → global, gathered from the
 * models already loaded). Returns this config's resources (name → global) for the caller to merge.
 */
export function validateRateLimiterResources(config: ModelConfig, known: ReadonlyMap<string, boolean>): Map<string, boolean> {
  const mine = new Map<string, boolean>();
  for (const group of config.instance_group) {
    for (const resource of group.rate_limiter?.resources ?? []) {
      const scope = mine.get(resource.name) ?? known.get(resource.name);
      if (scope !== undefined && scope !== resource.global) {
        throw configError(
          config,
          `rate limiter resource '${resource.name}' of instance group '${group.name}' is ${resource.global ? 'global' : 'per-device'} here but ${scope ? 'global' : 'per-device'} elsewhere; a resource must be either global or per-device everywhere`,
        );
      }
      mine.set(resource.name, resource.global);
    }
  }
  return mine;
}

// ---------------------------------------------------------------------------------------------
// I/O group

/** The "I/O group" of §3.6 (all inputs, outputs, batch inputs and batch outputs). */
export function validateModelIO(config: ModelConfig): void {
  config.input.forEach((input, index) => validateInput(config, input, index));
  config.output.forEach((output, index) => validateOutput(config, output, index));
  validateBatchIO(config);
}

type TensorKind = 'input' | 'output';

function validateTensorShape(config: ModelConfig, io: ModelInput | ModelOutput, kind: TensorKind, index: number): string {
  if (io.name === '') throw configError(config, `${kind} ${index} must specify 'name'`);
  const where = `${kind} '${io.name}'`;
  if (io.data_type === 'TYPE_INVALID') throw configError(config, `${where} must specify 'data_type' (TYPE_INVALID is not allowed)`);
  if (io.dims.length === 0) {
    throw configError(config, `${where} must specify 'dims'; for one value per batch item use dims: [ 1 ] with reshape: { shape: [ ] }`);
  }
  if (io.reshape !== undefined && io.reshape.shape.length === 0 && config.max_batch_size === 0) {
    throw configError(config, `${where} cannot have empty reshape for non-batching model as scalar tensors are not supported`);
  }
  io.dims.forEach((dim, i) => {
    if (dim < 1 && dim !== -1) {
      throw configError(config, `${where} dimension ${i} is ${dim}: dimension must be integer >= 1, or -1 to indicate a variable-size dimension`);
    }
  });
  if (io.reshape !== undefined) validateReshape(config, where, io.dims, io.reshape.shape);
  return where;
}

/** §2.7 reshape rules: valid entries, equal element counts, or equal wildcard segments. */
function validateReshape(config: ModelConfig, where: string, dims: readonly number[], shape: readonly number[]): void {
  shape.forEach((dim, i) => {
    if (dim < 1 && dim !== -1) {
      throw configError(
        config,
        `${where} reshape dimension ${i} is ${dim}: reshape dimensions must be integer >= 1, or -1 to indicate a variable-size dimension`,
      );
    }
  });
  const show = (list: readonly number[]): string => `[${list.join(',')}]`;
  const mismatch = (): NereidError =>
    configError(config, `${where} has different size for dims ${show(dims)} and reshape ${show(shape)}; their element counts must be equal`);
  const dimsWildcard = dims.includes(-1);
  if (dimsWildcard !== shape.includes(-1)) throw mismatch();
  if (!dimsWildcard) {
    const count = (list: readonly number[]): number => list.reduce((a, b) => a * b, 1);
    if (shape.length === 0 ? count(dims) !== 1 : count(dims) !== count(shape)) throw mismatch();
    return;
  }
  const segments = (list: readonly number[]): number[] => {
    const out = [1];
    for (const d of list) {
      if (d === -1) out.push(1);
      else out[out.length - 1] *= d;
    }
    return out;
  };
  const a = segments(dims);
  const b = segments(shape);
  if (a.length !== b.length) {
    throw configError(
      config,
      `${where} has different number of variable-size dimensions for dims ${show(dims)} and reshape ${show(shape)}`,
    );
  }
  if (a.some((v, i) => v !== b[i])) throw mismatch();
}

function validateInput(config: ModelConfig, input: ModelInput, index: number): void {
  const where = validateTensorShape(config, input, 'input', index);
  if ((input.format === 'FORMAT_NHWC' || input.format === 'FORMAT_NCHW') && input.dims.length !== 3) {
    throw configError(config, `${where} has format ${input.format}, which requires exactly 3 dims, got ${input.dims.length}`);
  }
  validateTensorRtOnly(config, input, where);
}

function validateOutput(config: ModelConfig, output: ModelOutput, index: number): void {
  const where = validateTensorShape(config, output, 'output', index);
  validateTensorRtOnly(config, output, where);
}

function validateTensorRtOnly(config: ModelConfig, io: ModelInput | ModelOutput, where: string): void {
  if (io.is_shape_tensor && config.platform !== 'tensorrt_plan') {
    throw configError(config, `${where} is a shape tensor, but shape tensors are only supported for the TensorRT platform 'tensorrt_plan'`);
  }
  if (io.is_non_linear_format_io) {
    if (config.platform !== 'tensorrt_plan') {
      throw configError(config, `${where} uses non-linear IO format, which is only supported for the TensorRT platform 'tensorrt_plan'`);
    }
    if (io.dims.length !== 3) {
      throw configError(config, `${where} uses non-linear IO format, which requires exactly 3 dims, got ${io.dims.length}`);
    }
  }
}

const BATCH_INPUT_KINDS = [
  'BATCH_ELEMENT_COUNT',
  'BATCH_ACCUMULATED_ELEMENT_COUNT',
  'BATCH_ACCUMULATED_ELEMENT_COUNT_WITH_ZERO',
  'BATCH_MAX_ELEMENT_COUNT_AS_SHAPE',
  'BATCH_ITEM_SHAPE',
  'BATCH_ITEM_SHAPE_FLATTEN',
];

function validateBatchIO(config: ModelConfig): void {
  const inputs = new Set(config.input.map((i) => i.name));
  const outputs = new Set(config.output.map((o) => o.name));
  const checkSources = (where: string, kind: string, sources: readonly string[]): void => {
    if (sources.length !== 1) throw configError(config, `${where} of kind ${kind} expects 1 source input, got ${sources.length}`);
    for (const source of sources) {
      if (!inputs.has(source)) throw configError(config, `${where} has unknown source input name '${source}'; it must be a configured input`);
    }
  };
  config.batch_input.forEach((bi, index) => {
    const where = `batch_input ${index}`;
    if (!BATCH_INPUT_KINDS.includes(bi.kind)) throw configError(config, `${where} has unknown kind '${bi.kind}'`);
    checkSources(where, bi.kind, bi.source_input);
    if (bi.data_type !== 'TYPE_INT32' && bi.data_type !== 'TYPE_FP32') {
      throw configError(config, `${where} data type must be TYPE_INT32 or TYPE_FP32, got ${bi.data_type}`);
    }
  });
  config.batch_output.forEach((bo, index) => {
    const where = `batch_output ${index}`;
    if (bo.kind !== 'BATCH_SCATTER_WITH_INPUT_SHAPE') throw configError(config, `${where} has unknown kind '${bo.kind}'`);
    checkSources(where, bo.kind, bo.source_input);
    const seen = new Set<string>();
    for (const target of bo.target_name) {
      if (!outputs.has(target)) throw configError(config, `${where} has unknown target output name '${target}'; it must be a configured output`);
      if (seen.has(target)) throw configError(config, `${where}: target output name '${target}' can only be specified once`);
      seen.add(target);
    }
  });
}
