/**
 * Where each field of an effective configuration came from (Nereid's effective-configuration
 * extension, docs/configuration.md): the config file, a load's config override, the backend's
 * auto-complete, or Nereid's own rules (derivation, normalisation, proto3 defaults).
 *
 * Provenance is computed by comparing the stages of the load pipeline
 * (models-and-scheduling.md §3.1), so no step has to record what it did.
 */
import { isDeepStrictEqual } from 'node:util';
import type { ModelConfig, Sparse } from './model-config.js';
import { type MessageObject, isPlainObject } from './message-object.js';
import { type FieldSchema, type MessageSchema, MODEL_CONFIG_SCHEMA, valueSchemaOf } from './schema.js';

export type ConfigOrigin = 'file' | 'override' | 'auto-complete' | 'default';

/** The configuration at the points of the load pipeline that tell origins apart. */
export interface ConfigStages {
  /** The configuration as given: only the fields the file or override set. */
  readonly source: Sparse<ModelConfig>;
  /** What `source` is; `none` when there was no file (auto-complete made the configuration). */
  readonly sourceKind: 'file' | 'override' | 'none';
  /** Completed, derived and normalised, instance groups included, before backend auto-complete. */
  readonly beforeAutoComplete: ModelConfig;
  /** What the backend's auto-complete returned, before normalisation; equal to the above when none ran. */
  readonly afterAutoComplete: ModelConfig;
  /** The configuration in use. */
  readonly effective: ModelConfig;
}

/** One step of a field path: a field, a repeated element (with its `name` if it has one), a map entry. */
type Step = { field: string } | { index: number; name: string | undefined } | { key: string };

/**
 * The origin of every value of `stages.effective`, keyed by field path in the notation of the
 * text printer's annotations (`max_batch_size`, `input[0].dims`, `parameters["k"].string_value`),
 * in printing order. A value is a leaf: a scalar, a whole repeated scalar field, an empty list,
 * map or message.
 *
 * Rules, first match wins: present in the source with the value in use → the source's kind;
 * changed by the backend's auto-complete and not changed afterwards → `auto-complete`;
 * otherwise `default`. Repeated elements are matched across stages by `name` where they have one
 * (auto-complete may add inputs around configured ones), else by position.
 */
export function configProvenance(stages: ConfigStages): Record<string, ConfigOrigin> {
  const out: Record<string, ConfigOrigin> = {};
  const sourceOrigin = stages.sourceKind === 'none' ? undefined : stages.sourceKind;
  const origin = (steps: readonly Step[], value: unknown): ConfigOrigin => {
    if (sourceOrigin !== undefined) {
      const given = lookup(stages.source as MessageObject, steps);
      if (given !== undefined && isDeepStrictEqual(given, value)) return sourceOrigin;
    }
    const before = lookup(stages.beforeAutoComplete as unknown as MessageObject, steps);
    const after = lookup(stages.afterAutoComplete as unknown as MessageObject, steps);
    if (after !== undefined && isDeepStrictEqual(after, value) && !isDeepStrictEqual(before, after)) return 'auto-complete';
    return 'default';
  };
  walkMessage(stages.effective as unknown as MessageObject, MODEL_CONFIG_SCHEMA, [], '', (steps, path, value) => {
    out[path] = origin(steps, value);
  });
  return out;
}

type Visit = (steps: readonly Step[], path: string, value: unknown) => void;

function walkMessage(message: MessageObject, schema: MessageSchema, steps: Step[], path: string, visit: Visit): void {
  let any = false;
  for (const field of schema.fields) {
    const value = message[field.name];
    if (value === undefined) continue;
    any = true;
    walkField(field, value, [...steps, { field: field.name }], path === '' ? field.name : `${path}.${field.name}`, visit);
  }
  if (!any && path !== '') visit(steps, path, message);
}

function walkField(field: FieldSchema, value: unknown, steps: Step[], path: string, visit: Visit): void {
  const element = valueSchemaOf(field);
  if (field.type === 'map') {
    const entries = Object.entries(value as Record<string, unknown>);
    if (entries.length === 0) visit(steps, path, value);
    for (const [key, v] of entries) {
      const entrySteps = [...steps, { key }];
      const entryPath = `${path}[${JSON.stringify(key)}]`;
      if (element.type === 'message') walkMessage(v as MessageObject, element.message, entrySteps, entryPath, visit);
      else visit(entrySteps, entryPath, v);
    }
    return;
  }
  if (field.repeated && element.type === 'message') {
    const items = value as MessageObject[];
    if (items.length === 0) visit(steps, path, value);
    items.forEach((item, index) => {
      const name = typeof item.name === 'string' ? item.name : undefined;
      walkMessage(item, element.message, [...steps, { index, name }], `${path}[${index}]`, visit);
    });
    return;
  }
  if (element.type === 'message') walkMessage(value as MessageObject, element.message, steps, path, visit);
  else visit(steps, path, value);
}

/** The value at `steps` in `root`, or undefined when it is not there. */
function lookup(root: MessageObject, steps: readonly Step[]): unknown {
  let at: unknown = root;
  for (const step of steps) {
    if ('field' in step) {
      at = isPlainObject(at) ? at[step.field] : undefined;
    } else if ('key' in step) {
      at = isPlainObject(at) && Object.prototype.hasOwnProperty.call(at, step.key) ? at[step.key] : undefined;
    } else {
      at = Array.isArray(at) ? element(at, step) : undefined;
    }
    if (at === undefined) return undefined;
  }
  return at;
}

/**
 * The element of `list` that is the one at `step`: the element with the same name, else the
 * element at the same position if it has no name yet (instance groups are named by normalisation).
 */
function element(list: readonly unknown[], step: { index: number; name: string | undefined }): unknown {
  if (step.name === undefined || step.name === '') return list[step.index];
  const named = list.find((e) => isPlainObject(e) && e.name === step.name);
  if (named !== undefined) return named;
  const at = list[step.index];
  return isPlainObject(at) && (at.name === undefined || at.name === '') ? at : undefined;
}
