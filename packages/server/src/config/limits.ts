/**
 * Bounds on configuration values that make the server allocate memory, create instances or run
 * work in proportion to them. A configuration can come from a load request of the repository API,
 * so none of these may be left to the value a client chooses: a value above its limit fails the
 * load at once with CONFIG_INVALID, before anything is created.
 *
 * Each limit has a name (`--model-config-limit <name>=<value>` raises or lowers it), a default
 * meant to admit every real deployment Nereid can serve, and a message that says how to raise it.
 * Values that only cap something (max_queue_size, timeouts) are not bounded: a large cap
 * allocates nothing by itself.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig, ModelInput, ModelOutput } from './model-config.js';

/** The limits by name; every value is a positive integer. */
export interface ConfigLimits {
  /** Instances of one model version, over all its instance groups. */
  readonly 'instances-per-model': number;
  /** Instances of all loaded model versions together (checked when instances are created). */
  readonly 'instances-per-server': number;
  readonly 'max-batch-size': number;
  /** Entries of one `preferred_batch_size` list. */
  readonly 'preferred-batch-sizes': number;
  readonly 'priority-levels': number;
  /** Sequence slots of one model version: instances × (max_batch_size, or oldest.max_candidate_sequences). */
  readonly 'sequence-slots': number;
  /** Dimensions of one tensor (dims, reshape, state dims, warmup dims). */
  readonly 'tensor-rank': number;
  /** Elements of one batch item of a tensor with fixed dims (the product of its dims). */
  readonly 'tensor-elements': number;
  readonly 'ensemble-steps': number;
  /** `model_warmup` entries. */
  readonly 'warmup-samples': number;
  /** Executions of one warmup sample per instance (`count`). */
  readonly 'warmup-count': number;
  /** Bytes of the inputs of one warmup sample at its batch size. */
  readonly 'warmup-bytes': number;
  /** Characters of a name the configuration gives: model, tensor, instance group, parameter key. */
  readonly 'name-length': number;
  /** Buckets of one histogram of `model_metrics` (each request updates every bucket's series). */
  readonly 'histogram-buckets': number;
}

export type ConfigLimitName = keyof ConfigLimits;

/** The defaults; docs/configuration.md lists them with what each bounds. */
export const DEFAULT_CONFIG_LIMITS: ConfigLimits = Object.freeze({
  'instances-per-model': 128,
  'instances-per-server': 512,
  'max-batch-size': 65536,
  'preferred-batch-sizes': 1024,
  'priority-levels': 1024,
  'sequence-slots': 65536,
  'tensor-rank': 64,
  'tensor-elements': 2 ** 31 - 1,
  'ensemble-steps': 1024,
  'warmup-samples': 256,
  'warmup-count': 1000,
  'warmup-bytes': 1024 * 1024 * 1024,
  'name-length': 1024,
  'histogram-buckets': 1024,
});

export const CONFIG_LIMIT_NAMES = Object.keys(DEFAULT_CONFIG_LIMITS) as ConfigLimitName[];

/** Parses one `<name>=<value>` setting; throws REQUEST_PARAMETER naming the known limits. */
export function parseConfigLimit(text: string, option = 'model-config-limit'): [ConfigLimitName, number] {
  const eq = text.indexOf('=');
  const name = text.slice(0, eq);
  const value = Number(text.slice(eq + 1));
  if (eq === -1 || !(CONFIG_LIMIT_NAMES as string[]).includes(name)) {
    throw new NereidError(
      'REQUEST_PARAMETER',
      `--${option} expects <limit>=<positive integer> with a limit among ${CONFIG_LIMIT_NAMES.join(', ')}; got '${text}'`,
    );
  }
  if (text.slice(eq + 1).trim() === '' || !Number.isSafeInteger(value) || value < 1) {
    throw new NereidError('REQUEST_PARAMETER', `--${option} ${name} expects a positive integer, got '${text.slice(eq + 1)}'`);
  }
  return [name as ConfigLimitName, value];
}

function limitError(config: Pick<ModelConfig, 'name'>, field: string, value: number, limit: ConfigLimitName, bound: number): NereidError {
  return new NereidError(
    'CONFIG_INVALID',
    `model '${config.name}': ${field} is ${value}, above this server's limit of ${bound} (${limit}); ` +
      `lower it, or start the server with --model-config-limit ${limit}=<n> to allow more`,
  );
}

function check(config: Pick<ModelConfig, 'name'>, limits: ConfigLimits, limit: ConfigLimitName, field: string, value: number): void {
  const bound = limits[limit];
  if (value > bound) throw limitError(config, field, value, limit, bound);
}

/** Elements of one batch item of fixed dims; -1 dims count as 1 (their size comes with each request). */
function fixedElements(dims: readonly number[]): number {
  let n = 1;
  for (const d of dims) if (Number(d) > 0) n *= Number(d);
  return n;
}

/** The instances a config asks for, as planned at load (a count below 1 becomes the default of 1 or more). */
export function configuredInstanceCount(config: ModelConfig): number {
  return config.instance_group.reduce((n, g) => n + Math.max(1, g.count), 0);
}

/**
 * Checks `config` against `limits` (the defaults for any not given). Throws CONFIG_INVALID naming
 * the model, the field, its value, the limit and the option that raises it. Cheap: it runs on
 * every configuration before it is normalised further, and again once it is complete.
 */
export function validateConfigLimits(config: ModelConfig, limits: ConfigLimits = DEFAULT_CONFIG_LIMITS): void {
  const name = (field: string, text: string): void => {
    const bound = limits['name-length'];
    if (text.length > bound) {
      throw new NereidError(
        'CONFIG_INVALID',
        `model '${config.name.slice(0, 64)}${config.name.length > 64 ? '…' : ''}': ${field} is ${text.length} characters long, above this server's limit of ${bound} (name-length); ` +
          `shorten it, or start the server with --model-config-limit name-length=<n> to allow more`,
      );
    }
  };
  name('the model name', config.name);
  const tensorDims = (field: string, dims: readonly number[]): void => {
    check(config, limits, 'tensor-rank', `the number of ${field}`, dims.length);
    check(config, limits, 'tensor-elements', `the element count of ${field} [${dims.join(',')}]`, fixedElements(dims));
  };
  const tensor = (kind: string, io: ModelInput | ModelOutput): void => {
    name(`${kind} name '${io.name.slice(0, 64)}…'`, io.name);
    tensorDims(`${kind} '${io.name}' dims`, io.dims);
    if (io.reshape !== undefined) tensorDims(`${kind} '${io.name}' reshape`, io.reshape.shape);
  };

  check(config, limits, 'max-batch-size', 'max_batch_size', config.max_batch_size);
  const instances = config.ensemble_scheduling === undefined ? configuredInstanceCount(config) : 0;
  check(config, limits, 'instances-per-model', 'the instance count (over all instance_group entries)', instances);
  for (const group of config.instance_group) name(`instance group name '${group.name.slice(0, 64)}…'`, group.name);

  const db = config.dynamic_batching;
  if (db !== undefined) {
    check(config, limits, 'preferred-batch-sizes', 'the number of dynamic_batching.preferred_batch_size entries', db.preferred_batch_size.length);
    check(config, limits, 'priority-levels', 'dynamic_batching.priority_levels', db.priority_levels);
  }
  const sb = config.sequence_batching;
  if (sb !== undefined) {
    const oldest = sb.oldest;
    if (oldest !== undefined) {
      check(config, limits, 'preferred-batch-sizes', 'the number of sequence_batching.oldest.preferred_batch_size entries', oldest.preferred_batch_size.length);
      check(config, limits, 'sequence-slots', 'sequence_batching.oldest.max_candidate_sequences', oldest.max_candidate_sequences);
    }
    const perInstance = oldest !== undefined && oldest.max_candidate_sequences > 0 ? oldest.max_candidate_sequences : Math.max(1, config.max_batch_size);
    check(config, limits, 'sequence-slots', `the sequence slots (${instances} instance(s) × ${perInstance} slot(s) each)`, instances * perInstance);
    sb.state.forEach((state, i) => {
      name(`sequence_batching.state[${i}].input_name`, state.input_name);
      name(`sequence_batching.state[${i}].output_name`, state.output_name);
      tensorDims(`sequence_batching.state '${state.input_name}' dims`, state.dims);
      state.initial_state.forEach((initial, j) => tensorDims(`sequence_batching.state '${state.input_name}' initial_state[${j}] dims`, initial.dims));
    });
  }

  for (const input of config.input) tensor('input', input);
  for (const output of config.output) tensor('output', output);
  for (const key of Object.keys(config.parameters)) name(`parameter key '${key.slice(0, 64)}…'`, key);

  if (config.ensemble_scheduling !== undefined) {
    check(config, limits, 'ensemble-steps', 'the number of ensemble_scheduling steps', config.ensemble_scheduling.step.length);
  }

  config.model_metrics?.metric_control.forEach((control, i) => {
    const buckets = control.histogram_options?.buckets.length ?? 0;
    check(config, limits, 'histogram-buckets', `the number of model_metrics.metric_control[${i}] histogram buckets`, buckets);
  });

  check(config, limits, 'warmup-samples', 'the number of model_warmup entries', config.model_warmup.length);
  config.model_warmup.forEach((warmup, i) => {
    const where = `model_warmup[${i}] ('${warmup.name.slice(0, 64)}')`;
    check(config, limits, 'warmup-count', `${where} count`, warmup.count);
    check(config, limits, 'max-batch-size', `${where} batch_size`, warmup.batch_size);
    let bytes = 0;
    for (const [input, spec] of Object.entries(warmup.inputs)) {
      tensorDims(`${where} input '${input}' dims`, spec.dims);
      bytes += fixedElements(spec.dims) * Math.max(1, warmup.batch_size) * (spec.data_type === 'TYPE_STRING' ? 4 : elementBytes(spec.data_type));
    }
    check(config, limits, 'warmup-bytes', `the input bytes of ${where} at batch_size ${warmup.batch_size}`, bytes);
  });
}

function elementBytes(type: string): number {
  switch (type) {
    case 'TYPE_BOOL':
    case 'TYPE_UINT8':
    case 'TYPE_INT8':
      return 1;
    case 'TYPE_UINT16':
    case 'TYPE_INT16':
    case 'TYPE_FP16':
    case 'TYPE_BF16':
      return 2;
    case 'TYPE_UINT64':
    case 'TYPE_INT64':
    case 'TYPE_FP64':
      return 8;
    default:
      return 4;
  }
}

/**
 * The server-wide instance count (`instances-per-server`): every instance a version creates is
 * taken from it before it is created and given back when it is released. Not thread-safe in any
 * sense that matters: it runs on the event loop only.
 */
export class InstanceBudget {
  readonly #limit: number;
  #used = 0;

  constructor(limit: number = DEFAULT_CONFIG_LIMITS['instances-per-server']) {
    this.#limit = limit;
  }

  get used(): number {
    return this.#used;
  }

  /** Takes `count` instances for `model`, or throws CONFIG_INVALID when that would pass the limit. */
  take(model: string, count: number): void {
    if (this.#used + count > this.#limit) {
      throw new NereidError(
        'CONFIG_INVALID',
        `model '${model}': ${count} more instance(s) would make ${this.#used + count} on this server, above its limit of ` +
          `${this.#limit} (instances-per-server); unload models, lower instance_group counts, or start the server with ` +
          `--model-config-limit instances-per-server=<n> to allow more`,
      );
    }
    this.#used += count;
  }

  give(count: number): void {
    this.#used = Math.max(0, this.#used - count);
  }
}
