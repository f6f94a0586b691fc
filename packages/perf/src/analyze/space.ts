/**
 * The configuration space of one model: the knobs the search turns (instance count, max batch
 * size, dynamic batching, its queue delay and preferred sizes, ONNX Runtime's thread counts), how
 * a point of the space becomes a model configuration (the load API's JSON form, edited from the
 * model's own config.pbtxt so that everything else stays as the user wrote it), and the names of
 * the variants: `<model>_config_default` for the model's own configuration, `<model>_config_<n>`
 * for the others, numbered in the order they are first tried (an identical config reuses its name).
 */
import type { Variant, VariantSummary } from './types.js';

type Json = Record<string, unknown>;

/** One point of the space. */
export interface Knobs {
  instances: number;
  /** 0 for a model without batching. */
  maxBatchSize: number;
  dynamicBatching: boolean;
  maxQueueDelayUs: number;
  preferredBatchSizes: number[];
  /** ONNX Runtime's `intra_op_thread_count` / `inter_op_thread_count` parameters; 0: the backend's default. */
  intraOpThreads: number;
  interOpThreads: number;
}

const isObject = (v: unknown): v is Json => typeof v === 'object' && v !== null && !Array.isArray(v);

function num(v: unknown, fallback = 0): number {
  const n = typeof v === 'string' ? Number(v) : typeof v === 'number' ? v : NaN;
  return Number.isFinite(n) ? n : fallback;
}

function parameter(config: Json, key: string): number {
  const p = isObject(config.parameters) ? config.parameters[key] : undefined;
  return isObject(p) ? num(p.string_value) : 0;
}

/** The knobs a configuration has now (the default variant's point). */
export function knobsOf(config: Json): Knobs {
  const groups = Array.isArray(config.instance_group) ? (config.instance_group as unknown[]).filter(isObject) : [];
  const db = isObject(config.dynamic_batching) ? config.dynamic_batching : undefined;
  return {
    instances: groups.length === 0 ? 1 : groups.reduce((a, g) => a + (g.count === undefined ? 1 : num(g.count, 1)), 0),
    maxBatchSize: num(config.max_batch_size),
    dynamicBatching: db !== undefined,
    maxQueueDelayUs: db ? num(db.max_queue_delay_microseconds) : 0,
    preferredBatchSizes: db && Array.isArray(db.preferred_batch_size) ? (db.preferred_batch_size as unknown[]).map((v) => num(v)) : [],
    intraOpThreads: parameter(config, 'intra_op_thread_count'),
    interOpThreads: parameter(config, 'inter_op_thread_count'),
  };
}

/** Whether the model runs on ONNX Runtime (the only backend the thread knobs mean anything to). */
export function isOnnxRuntime(config: Json): boolean {
  return config.backend === 'onnxruntime' || config.platform === 'onnxruntime_onnx';
}

/**
 * `base` with `knobs` applied, named `name`. The instance groups become one group of
 * `knobs.instances` (its kind: KIND_CPU when `cpuOnly`, else the first group's kind); dynamic
 * batching is set or removed; preferred sizes above the max batch size are dropped (a variant
 * with them would not load).
 */
export function applyKnobs(base: Json, knobs: Knobs, name: string, cpuOnly: boolean): Json {
  const config: Json = structuredClone(base);
  config.name = name;
  const groups = Array.isArray(base.instance_group) ? (base.instance_group as unknown[]).filter(isObject) : [];
  const first: Json = groups.length > 0 ? structuredClone(groups[0]) : {};
  delete first.name;
  first.count = knobs.instances;
  if (cpuOnly || first.kind === undefined) first.kind = 'KIND_CPU';
  if (first.kind === 'KIND_CPU') delete first.gpus;
  config.instance_group = [first];
  if (knobs.maxBatchSize > 0) config.max_batch_size = knobs.maxBatchSize;
  if (knobs.dynamicBatching && knobs.maxBatchSize > 0) {
    const db: Json = isObject(base.dynamic_batching) ? structuredClone(base.dynamic_batching) : {};
    const preferred = knobs.preferredBatchSizes.filter((s) => s <= knobs.maxBatchSize);
    if (preferred.length > 0) db.preferred_batch_size = preferred;
    else delete db.preferred_batch_size;
    if (knobs.maxQueueDelayUs > 0) db.max_queue_delay_microseconds = knobs.maxQueueDelayUs;
    else delete db.max_queue_delay_microseconds;
    config.dynamic_batching = db;
  } else {
    delete config.dynamic_batching;
  }
  const parameters: Json = isObject(base.parameters) ? structuredClone(base.parameters) : {};
  for (const [key, value] of [
    ['intra_op_thread_count', knobs.intraOpThreads],
    ['inter_op_thread_count', knobs.interOpThreads],
  ] as const) {
    if (value > 0) parameters[key] = { string_value: String(value) };
    else delete parameters[key];
  }
  if (Object.keys(parameters).length > 0) config.parameters = parameters;
  else delete config.parameters;
  return config;
}

/** `config` with the fields of a manual `model_config_parameters` candidate set over it. */
export function applyFields(base: Json, fields: Json, name: string): Json {
  const config: Json = structuredClone(base);
  for (const [key, value] of Object.entries(fields)) {
    config[key] = structuredClone(value);
  }
  config.name = name;
  return config;
}

/** What the report says about a variant. */
export function summarize(config: Json, base: Json): VariantSummary {
  const k = knobsOf(config);
  const groups = Array.isArray(config.instance_group) ? (config.instance_group as unknown[]).filter(isObject) : [];
  const other: string[] = [];
  for (const key of new Set([...Object.keys(base), ...Object.keys(config)])) {
    if (['name', 'instance_group', 'max_batch_size', 'dynamic_batching'].includes(key)) continue;
    const a = JSON.stringify(base[key]);
    const b = JSON.stringify(config[key]);
    if (a !== b) other.push(`${key}=${b ?? '(unset)'}`);
  }
  return {
    instanceCount: k.instances,
    instanceKind: typeof groups[0]?.kind === 'string' ? (groups[0].kind as string) : 'KIND_AUTO',
    maxBatchSize: k.maxBatchSize,
    dynamicBatching: k.dynamicBatching,
    preferredBatchSizes: k.preferredBatchSizes,
    maxQueueDelayUs: k.maxQueueDelayUs,
    other,
  };
}

/** A canonical text of a config without its name: equal texts are the same variant. */
function identity(config: Json): string {
  const canonical = (v: unknown): unknown =>
    Array.isArray(v)
      ? v.map(canonical)
      : isObject(v)
        ? Object.fromEntries(
            Object.keys(v)
              .filter((k) => k !== 'name')
              .sort()
              .map((k) => [k, canonical(v[k])]),
          )
        : v;
  return JSON.stringify(canonical(config));
}

/**
 * The variants of one model: names them, recognizes a config already named, and keeps them in
 * the order they were made. Restored from a checkpoint, it continues the numbering.
 */
export class VariantBook {
  readonly #model: string;
  readonly #base: Json;
  readonly #byIdentity = new Map<string, Variant>();
  readonly variants: Variant[] = [];
  #next = 0;

  constructor(model: string, base: Json, restored: readonly Variant[] = []) {
    this.#model = model;
    this.#base = base;
    for (const v of restored) {
      if (v.model !== model) continue;
      this.#add(v);
      const n = /_config_(\d+)$/.exec(v.name);
      if (n) this.#next = Math.max(this.#next, Number(n[1]) + 1);
    }
    if (!this.variants.some((v) => v.isDefault)) {
      const name = `${model}_config_default`;
      this.#add({ name, model, isDefault: true, config: { ...structuredClone(base), name }, summary: summarize(base, base) });
    }
  }

  #add(v: Variant): void {
    this.variants.push(v);
    this.#byIdentity.set(identity(v.config), v);
  }

  get base(): Json {
    return this.#base;
  }

  get defaultVariant(): Variant {
    return this.variants.find((v) => v.isDefault)!;
  }

  /** The variant for `make(name)`'s config: an existing one when identical, else a new name. */
  variantFor(make: (name: string) => Json): Variant {
    const probe = make(`${this.#model}_config_${this.#next}`);
    const known = this.#byIdentity.get(identity(probe));
    if (known) return known;
    const name = `${this.#model}_config_${this.#next++}`;
    const v: Variant = { name, model: this.#model, isDefault: false, config: { ...probe, name }, summary: summarize(probe, this.#base) };
    this.#add(v);
    return v;
  }

  byName(name: string): Variant | undefined {
    return this.variants.find((v) => v.name === name);
  }
}
