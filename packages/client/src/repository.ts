/**
 * The model repository extension as both clients offer it (protocol.md §3.13, §4.8): types and
 * the parameter forms they send.
 */

/** A model version state, as the repository index reports it (protocol.md §2.1). */
export type ModelState = 'UNKNOWN' | 'READY' | 'UNAVAILABLE' | 'LOADING' | 'UNLOADING';

/**
 * One entry of the repository index: `version` and `state` for a model with lifecycle history
 * (one entry per version), `name` alone for a model never loaded, `reason` when the server gave one.
 */
export interface RepositoryIndexEntry {
  name: string;
  version?: string;
  state?: ModelState | string;
  reason?: string;
  /** Nereid over HTTP: the version's weight for requests that name no version, when the model has weights. */
  weight?: number;
}

export interface RepositoryIndexOptions {
  /** Only READY versions. */
  ready?: boolean;
}

export interface LoadModelOptions {
  /** A ModelConfig (JSON text or object) to use instead of the configuration on the server's disk. */
  config?: string | Readonly<Record<string, unknown>>;
  /**
   * Files of the model directory to use instead of the repository's, by path relative to it
   * (`1/model.onnx`; a `file:` prefix is accepted and ignored). Requires `config`.
   */
  files?: ReadonlyMap<string, Uint8Array> | Readonly<Record<string, Uint8Array>>;
  /**
   * Weights of the served versions for requests that name no version (`{ '1': 90, '2': 10 }`),
   * sent as the `version_weights` load parameter; `{}` clears them. Left out, the server keeps the
   * weights it has.
   */
  versionWeights?: Readonly<Record<string, number>>;
  /**
   * The version policy to serve with (`{ specific: { versions: [1, 2] } }`, `{ latest: { num_versions: 2 } }`,
   * `{ all: {} }`), sent as the `version_policy` load parameter. It applies over the model's
   * configuration (the repository's, or `config`) and stays for the server's reloads of the model
   * from its repository; left out, the configuration's own policy serves.
   */
  versionPolicy?: VersionPolicy;
}

/** A ModelVersionPolicy with one of its choices. */
export type VersionPolicy =
  | { readonly latest: { readonly num_versions: number } }
  | { readonly all: Readonly<Record<string, never>> }
  | { readonly specific: { readonly versions: readonly number[] } };

export interface UnloadModelOptions {
  /** Also unload the models this one depended on that nothing else needs (e.g. an ensemble's steps). */
  unloadDependents?: boolean;
}

/** `config` as the JSON text the servers take. */
export function configText(config: LoadModelOptions['config']): string | undefined {
  return config === undefined ? undefined : typeof config === 'string' ? config : JSON.stringify(config);
}

/** `versionWeights` as the JSON text of the `version_weights` load parameter. */
export function versionWeightsText(weights: LoadModelOptions['versionWeights']): string | undefined {
  return weights === undefined ? undefined : JSON.stringify(weights);
}

/** `versionPolicy` as the JSON text of the `version_policy` load parameter. */
export function versionPolicyText(policy: LoadModelOptions['versionPolicy']): string | undefined {
  return policy === undefined ? undefined : JSON.stringify(policy);
}

/** `[parameter key, bytes]` for each override file: `file:<path>`. */
export function fileParameters(files: LoadModelOptions['files']): [string, Uint8Array][] {
  if (files === undefined) return [];
  const entries = files instanceof Map ? [...files] : Object.entries(files as Readonly<Record<string, Uint8Array>>);
  return entries.map(([path, bytes]) => [path.startsWith('file:') ? path : `file:${path}`, bytes]);
}
