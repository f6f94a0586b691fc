/**
 * The parameters of the repository extension's load and unload requests, as either frontend
 * received them, checked and turned into the facade's options (protocol.md §3.13, §4.8;
 * models-and-scheduling.md §1.10).
 */
import { NereidError, toNereidError } from '@nereid/protocol';
import { completeModelConfig, modelConfigFromJson, type ModelVersionPolicy } from '../config/index.js';
import type { LoadModelOptions, UnloadModelOptions } from './types.js';

/**
 * One parameter value as the wire carried it: a gRPC `ModelRepositoryParameter` choice, or for
 * HTTP a JSON string (`string`) or any other JSON value (`json`).
 */
export type RepositoryParameter =
  | { readonly kind: 'string'; readonly value: string }
  | { readonly kind: 'bool'; readonly value: boolean }
  | { readonly kind: 'int64'; readonly value: bigint }
  | { readonly kind: 'bytes'; readonly value: Uint8Array }
  | { readonly kind: 'json'; readonly value: unknown }
  | { readonly kind: 'none' };

const FILE_PREFIX = 'file:';
/**
 * Padded base64: whole 4-character groups of the alphabet, `=` only at the end. Checked with one
 * character-class run and the length, not a repeated group, which V8 matches recursively and which
 * overflows its stack on a file of a few megabytes.
 */
const BASE64_CHARS = /^[A-Za-z0-9+/]*={0,2}$/;
const BASE64 = { test: (s: string): boolean => s.length % 4 === 0 && BASE64_CHARS.test(s) };

function describe(p: RepositoryParameter): string {
  switch (p.kind) {
    case 'string':
      return 'a string';
    case 'bool':
      return 'a bool';
    case 'int64':
      return 'an int64';
    case 'bytes':
      return 'bytes';
    case 'none':
      return 'no value';
    default:
      return `the JSON value ${JSON.stringify(p.value)?.slice(0, 40) ?? String(p.value)}`;
  }
}

/** The largest weight `version_weights` takes for one version. */
export const MAX_VERSION_WEIGHT = 1_000_000;

const VERSION_WEIGHTS_FORM = `a JSON object of version numbers to integer weights from 0 to ${MAX_VERSION_WEIGHT}, e.g. {"1": 90, "2": 10}, or {} to clear the weights`;

/**
 * A `version_weights` value (a Nereid addition, docs/protocol.md) checked and turned into the map
 * the model manager takes: version → weight, empty to clear the weights. Keys are version numbers,
 * values integers from 0 to MAX_VERSION_WEIGHT; unless the object is empty, one weight must be
 * above 0. Throws LOAD_PARAMETER naming the model, the key and the rule.
 */
export function versionWeightsOf(model: string, value: unknown): Map<number, number> {
  const bad = (why: string) => new NereidError('LOAD_PARAMETER', `load parameter 'version_weights' of model '${model}': ${why}; it must be ${VERSION_WEIGHTS_FORM}`);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw bad(`got ${value === null ? 'null' : Array.isArray(value) ? 'an array' : `the ${typeof value} ${JSON.stringify(value)?.slice(0, 40)}`}, not an object`);
  }
  const weights = new Map<number, number>();
  for (const [key, weight] of Object.entries(value)) {
    // Canonical numbers only: '01' beside '1' would name one version twice.
    if (!/^(0|[1-9][0-9]*)$/.test(key) || !Number.isSafeInteger(Number(key))) throw bad(`key '${key.slice(0, 40)}' is not a version number`);
    if (typeof weight !== 'number' || !Number.isInteger(weight) || weight < 0 || weight > MAX_VERSION_WEIGHT) {
      throw bad(`the weight of version ${key} is ${JSON.stringify(weight)?.slice(0, 40) ?? String(weight)}, not an integer from 0 to ${MAX_VERSION_WEIGHT}`);
    }
    weights.set(Number(key), weight);
  }
  if (weights.size > 0 && [...weights.values()].every((w) => w === 0)) throw bad('every weight is 0, so no version would take requests');
  return weights;
}

/**
 * The JSON value of parameter `key` as either wire carries it: a JSON object (HTTP) or its JSON
 * text (HTTP or gRPC `string_param`); `form` says what it must be. An empty text is `undefined`.
 */
function jsonParameter(model: string, key: string, form: string, p: RepositoryParameter): unknown {
  if (p.kind === 'json') return p.value;
  if (p.kind !== 'string') {
    throw new NereidError('LOAD_PARAMETER', `load parameter '${key}' of model '${model}' must be ${form} (over gRPC: its JSON text in string_param), got ${describe(p)}`);
  }
  if (p.value.trim() === '') return undefined;
  try {
    return JSON.parse(p.value);
  } catch {
    throw new NereidError('LOAD_PARAMETER', `load parameter '${key}' of model '${model}' is not JSON (${JSON.stringify(p.value.slice(0, 40))}); it must be ${form}`);
  }
}

/** The `version_weights` parameter; an empty text clears the weights as `{}` does. */
function versionWeightsParameter(model: string, p: RepositoryParameter): Map<number, number> {
  const value = jsonParameter(model, 'version_weights', VERSION_WEIGHTS_FORM, p);
  return value === undefined ? new Map() : versionWeightsOf(model, value);
}

const VERSION_POLICY_FORM =
  'a ModelVersionPolicy as JSON with one of its choices, e.g. {"specific": {"versions": [1, 2]}}, {"latest": {"num_versions": 2}} or {"all": {}}';

/**
 * A `version_policy` value (a Nereid addition, docs/protocol.md) checked and turned into the
 * policy the model manager applies over the model's configuration: a ModelVersionPolicy read as a
 * configuration's `version_policy` is, with exactly one choice, which must select something (a
 * `specific` list of versions ≥ 0 that is not empty, or `latest` with `num_versions` ≥ 1). Throws
 * LOAD_PARAMETER naming the model, what is wrong and the expected form.
 */
export function versionPolicyOf(model: string, value: unknown): ModelVersionPolicy {
  const bad = (why: string) => new NereidError('LOAD_PARAMETER', `load parameter 'version_policy' of model '${model}': ${why}; it must be ${VERSION_POLICY_FORM}`);
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw bad(`got ${value === null ? 'null' : Array.isArray(value) ? 'an array' : `the ${typeof value} ${JSON.stringify(value)?.slice(0, 40)}`}, not an object`);
  }
  let policy: ModelVersionPolicy | undefined;
  try {
    policy = completeModelConfig(modelConfigFromJson({ version_policy: value })).version_policy;
  } catch (err) {
    // The configuration reader's message names the field ("at 'version_policy.latest.num_versions': …").
    throw bad(toNereidError(err, 'CONFIG_PARSE').message.replace(/^model configuration JSON /, ''));
  }
  const choices = Object.keys(value);
  if (policy === undefined || choices.length !== 1) throw bad(choices.length === 0 ? 'it sets no choice' : `it sets ${choices.join(' and ')}`);
  if (policy.specific !== undefined) {
    const versions = policy.specific.versions;
    if (versions.length === 0) throw bad("'specific.versions' is empty, so no version would be served");
    const negative = versions.find((v) => v < 0);
    if (negative !== undefined) throw bad(`'specific.versions' holds ${negative}, not a version number`);
  }
  if (policy.latest !== undefined && policy.latest.num_versions < 1) throw bad("'latest.num_versions' is 0, so no version would be served");
  return policy;
}

/** The `version_policy` parameter (an empty text is refused like any value that is not a policy). */
function versionPolicyParameter(model: string, p: RepositoryParameter): ModelVersionPolicy {
  const value = jsonParameter(model, 'version_policy', VERSION_POLICY_FORM, p);
  if (value === undefined) throw new NereidError('LOAD_PARAMETER', `load parameter 'version_policy' of model '${model}' is empty; it must be ${VERSION_POLICY_FORM}`);
  return versionPolicyOf(model, value);
}

/**
 * Load parameters → `LoadModelOptions`. `config` must be a string; `file:<path>` a base64 string
 * over HTTP (`files: 'base64'`) or bytes over gRPC (`files: 'raw'`); `version_weights` and
 * `version_policy` a JSON object or its JSON text; any other key is refused.
 */
export function loadOptionsFromParameters(
  model: string,
  parameters: Readonly<Record<string, RepositoryParameter>>,
  files: 'base64' | 'raw',
): LoadModelOptions {
  const options: LoadModelOptions = {};
  const fileMap = new Map<string, Uint8Array>();
  for (const [key, p] of Object.entries(parameters)) {
    if (key === 'config') {
      if (p.kind !== 'string') {
        throw new NereidError('LOAD_PARAMETER', `load parameter 'config' of model '${model}' must be a string holding ModelConfig JSON, got ${describe(p)}`);
      }
      options.config = p.value;
    } else if (key === 'version_weights') {
      options.versionWeights = Object.fromEntries(versionWeightsParameter(model, p));
    } else if (key === 'version_policy') {
      options.versionPolicy = versionPolicyParameter(model, p);
    } else if (key.startsWith(FILE_PREFIX)) {
      const path = key.slice(FILE_PREFIX.length);
      if (files === 'raw') {
        if (p.kind !== 'bytes') {
          throw new NereidError('LOAD_PARAMETER', `load parameter '${key}' of model '${model}' must be bytes_param holding the file's bytes, got ${describe(p)}`);
        }
        fileMap.set(path, p.value);
      } else {
        if (p.kind !== 'string' || !BASE64.test(p.value)) {
          throw new NereidError(
            'LOAD_PARAMETER',
            `load parameter '${key}' of model '${model}' must be a string holding the file's contents in base64, got ${p.kind === 'string' ? 'a string that is not base64' : describe(p)}`,
          );
        }
        fileMap.set(path, Buffer.from(p.value, 'base64'));
      }
    } else {
      throw new NereidError(
        'LOAD_PARAMETER',
        `Unrecognized load parameter '${key}'. A load takes 'config' (ModelConfig JSON), 'file:<version>/<path>', 'version_weights' and 'version_policy' parameters`,
      );
    }
  }
  if (fileMap.size > 0) options.files = fileMap;
  return options;
}

/** Unload parameters → `UnloadModelOptions`: `unload_dependents` must be a bool; other keys are ignored. */
export function unloadOptionsFromParameters(parameters: Readonly<Record<string, RepositoryParameter>>): UnloadModelOptions {
  const p = parameters.unload_dependents;
  if (p === undefined || p.kind === 'none') return {};
  if (p.kind !== 'bool') {
    throw new NereidError('LOAD_PARAMETER', `unload parameter 'unload_dependents' must be a bool, got ${describe(p)}`);
  }
  return { unloadDependents: p.value };
}

/** What `loadRequestOf` makes: the model manager's `LoadRequest`. */
interface ManagerLoadRequest {
  config?: string;
  files?: ReadonlyMap<string, Uint8Array>;
  versionWeights?: ReadonlyMap<number, number>;
  versionPolicy?: ModelVersionPolicy;
}

/**
 * The facade's load options as the model manager takes them: config as JSON text, files and
 * version weights as maps (`versionWeights` and `versionPolicy` checked here; throws LOAD_PARAMETER).
 */
export function loadRequestOf(model: string, options: LoadModelOptions): ManagerLoadRequest {
  const request: ManagerLoadRequest = {};
  if (options.versionWeights !== undefined) request.versionWeights = versionWeightsOf(model, options.versionWeights);
  if (options.versionPolicy !== undefined) request.versionPolicy = versionPolicyOf(model, options.versionPolicy);
  if (options.config !== undefined) request.config = typeof options.config === 'string' ? options.config : JSON.stringify(options.config);
  if (options.files !== undefined) {
    request.files = options.files instanceof Map ? options.files : new Map(Object.entries(options.files as Readonly<Record<string, Uint8Array>>));
  }
  return request;
}
