/**
 * The model manager: which models exist, which of their versions serve and in what state, how
 * they are loaded, reloaded and unloaded under each control mode, and the lookup every request
 * goes through (protocol.md §2.1, §3.13; models-and-scheduling.md §1.7–§1.11).
 *
 * It does not know how a version is made servable: the core gives it a `VersionFactory`.
 *
 * Live updates: a reload loads new copies of the versions that changed beside the serving ones;
 * only when every new copy is ready are they switched in, all in one synchronous step, so that a
 * request resolves either to the old set or to the new one. Retired copies are unloaded in the
 * background (`Servable.unload` finishes their in-flight and queued requests first). A version
 * whose configuration changed only in its instance groups may instead be updated in place
 * (`VersionFactory.updateInPlace`): the update is prepared beside the serving copy and committed
 * in the same synchronous step. A failed reload discards what it made (new copies and prepared
 * updates) and leaves the serving copies as they were.
 *
 * Version weights (`version_weights`, a Nereid addition): a model may carry weights for its
 * versions; requests that name no version are then routed between the READY weighted versions by
 * `route` (smooth weighted round-robin, version-weights.ts). Weights change only when a load that
 * sets them succeeds, and such a load reloads only the versions whose configuration or files
 * changed.
 *
 * Version policy overrides (`version_policy`, a Nereid addition): a load may name the version
 * policy to serve with, applied over the model's configuration (the repository's, or the load's
 * `config`). It is kept with the model as a `config` override is: the re-check of an S3
 * repository reloads the model from its changed files with the same policy. A load without one
 * goes back to the configuration's own policy; an unload forgets it.
 *
 * Concurrency: operations on one model (load, unload, a poll's reload) run one at a time, in
 * arrival order; operations on different models run in parallel, their loads bounded by the load
 * pool (`--model-load-thread-count`). Dependencies (ensembles, §1.11) are resolved before a
 * model's own turn begins, so that no operation waits for another model's turn while holding its
 * own.
 */
import { join, resolve as resolvePath } from 'node:path';
import { stat } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { NereidError, toNereidError } from '@nereid/protocol';
import type { ModelConfig, ModelVersionPolicy } from '../config/model-config.js';
import type { Logger } from '../observability/logger.js';
import { prepareModelConfig, type ConfigLoadOptions, type PreparedModel } from './config-loader.js';
import { dependenciesOf, describeCycle, type Dependency } from './dependencies.js';
import { unloadWaves } from './unload-order.js';
import { directoryStamp } from './directory-stamp.js';
import { OverrideDirectory } from './file-override.js';
import { LoadPool } from './load-pool.js';
import { checkRepositories, listVersions, scanRepositories, type ModelLocation } from './repository-scanner.js';
import { selectVersions } from './version-policy.js';
import { hasRemoteRepositories, RepositoryMirrors } from './repository-mirrors.js';
import { VersionWeights } from './version-weights.js';

export type VersionState = 'UNKNOWN' | 'READY' | 'UNAVAILABLE' | 'LOADING' | 'UNLOADING';

/** `--model-control-mode` (models-and-scheduling.md §1.9). */
export type ControlMode = 'none' | 'poll' | 'explicit';

/** A loaded model version, as the manager sees it. */
export interface Servable {
  readonly config: ModelConfig;
  /** Stops accepting requests, waits for in-flight ones, releases everything. */
  unload(): Promise<void>;
}

/** A change to a serving copy, made ready beside it: committed or discarded, once. */
export interface PendingUpdate {
  /** Puts the change into effect, synchronously. */
  commit(): void;
  /** Releases what the change made; the copy stays as it was. */
  discard(): Promise<void>;
}

/** Makes one version of a prepared model servable (models-and-scheduling.md §3.1 steps 6–11). */
export interface VersionFactory<S extends Servable> {
  load(model: PreparedModel, version: number): Promise<S>;
  /**
   * Prepares `current` (a serving copy of `version`) to serve as `model` says without a new copy,
   * when the difference allows it (instance counts, §1.10); undefined when it does not. Rejects
   * with the load error, leaving `current` unchanged. Optional: without it every change reloads.
   */
  updateInPlace?(current: S, model: PreparedModel, version: number): Promise<PendingUpdate | undefined>;
}

interface VersionSlot<S> {
  state: VersionState;
  reason: string;
  /** The copy that serves while READY. */
  servable: S | undefined;
  /** What the serving copy was made from (config, files): equal on a reload → the copy stays. */
  fingerprint: string;
  /** The same less the instance groups: equal on a reload → the copy may be updated in place. */
  shape: string;
  /** The override directory the serving copy was loaded from, released when it is unloaded. */
  override: OverrideDirectory | undefined;
  /** The copy retired from this slot while it drains (UNLOADING). */
  draining: S | undefined;
  /** UNAVAILABLE because a load failed (as opposed to unloaded on purpose): counts against readiness. */
  failed: boolean;
  /** Selected by the model's current version policy; others do not count for readiness. */
  wanted: boolean;
}

interface ModelEntry<S> {
  readonly name: string;
  /** Where the serving copies were loaded from. */
  location: ModelLocation | undefined;
  /** Why the model as a whole is unavailable (duplicate, config error) when no version could be tried. */
  reason: string;
  versions: Map<number, VersionSlot<S>>;
  /** Stamp of the model directory at the last successful load; undefined: poll loads it again. */
  stamp: string | undefined;
  /** Loaded on request (or by the repository in modes none/poll), not only as a dependency (§1.11). */
  explicit: boolean;
  /**
   * The `config` parameter of the load the serving copies were made from (§1.10), kept for the
   * reloads of the explicit-mode re-check; undefined when they came from the repository's file.
   */
  overrideConfig: string | undefined;
  /**
   * The `version_policy` parameter of the load the serving copies were made from, applied over
   * the configuration on every reload of the explicit-mode re-check; undefined: the configuration's.
   */
  overridePolicy: ModelVersionPolicy | undefined;
  /** The serving copies were made from a load's file overrides, not from the repository. */
  fileOverride: boolean;
  dependencies: readonly Dependency[];
  /** How requests that name no version are spread over the versions; undefined: the highest READY one. */
  weights: VersionWeights | undefined;
}

export interface ModelManagerOptions extends ConfigLoadOptions {
  repositories: readonly string[];
  /** `--model-control-mode`; default `none`. */
  controlMode?: ControlMode;
  /** Loads at once, on any path (`--model-load-thread-count`). */
  loadThreadCount: number;
  /** Extra attempts of a version load that fails (`--model-load-retry-count`, §1.10 item 5); default 0. */
  loadRetryCount?: number;
  /** Where S3 repositories are mirrored (`--model-repository-cache-dir`); default the OS temp directory. */
  repositoryCacheDir?: string;
  /** `--repository-settle-secs`: see docs/model-repository-s3.md. */
  repositorySettleSecs?: number;
  logger: Logger;
}

/** A load request's parameters (models-and-scheduling.md §1.10). */
export interface LoadRequest {
  /** ModelConfig JSON used instead of the configuration files. */
  readonly config?: string;
  /** Files of an override model directory, by path relative to it (`1/model.onnx`); needs `config`. */
  readonly files?: ReadonlyMap<string, Uint8Array>;
  /**
   * Weights of the versions for requests that name no version (checked: non-negative integers,
   * one above 0); empty: no weights. Every version must be one the load serves. Left out, the
   * weights stay (less the versions the load no longer serves). With it, a load reloads only
   * versions whose configuration or files changed, even with `config` (which otherwise always
   * reloads, §1.10).
   */
  readonly versionWeights?: ReadonlyMap<number, number>;
  /**
   * The version policy to serve with instead of the configuration's (checked by the caller).
   * Changing only the policy reloads no version that stays selected.
   */
  readonly versionPolicy?: ModelVersionPolicy;
}

export interface UnloadRequest {
  /** Also unload what this model depended on and nothing else needs (§1.11). */
  readonly unloadDependents?: boolean;
}

export interface VersionStatus {
  name: string;
  version: number | undefined;
  state: VersionState;
  reason: string;
}

/** One entry of the repository index (protocol.md §3.13). */
export interface IndexEntry {
  name: string;
  version?: string;
  state?: VersionState;
  reason?: string;
  /** The version's weight for requests that name no version, when the model has weights. */
  weight?: number;
}

interface LoadContext {
  /** Requested by name (or by the repository), not only needed by another model. */
  readonly explicit: boolean;
  /** Models whose loads led to this one, for cycle detection. */
  readonly chain: readonly string[];
}

/** Refuses names a load or unload may not use (models-and-scheduling.md §1.1). */
export function checkModelName(name: string, maxLength = 1024): void {
  // Escaped (a NUL or control character stays visible); a long name is shortened where the
  // message reaches a client (clientErrorMessage), as every echoed name is.
  const shown = JSON.stringify(name).slice(1, -1);
  const refuse = (why: string) =>
    new NereidError(
      'MODEL_NAME_INVALID',
      `invalid model name '${shown}': ${why}; a model name is the name of a directory of the model repository`,
    );
  if (name.trim() === '') throw refuse('it must not be empty');
  if (name.includes('/') || name.includes('\\')) throw refuse("it must not contain '/' or '\\'");
  if (name.includes('\0')) throw refuse('it must not contain a NUL character');
  if (name === '.' || name === '..') throw refuse(`'${name}' names a directory, not a model`);
  if (name.length > maxLength) throw refuse(`it is longer than this server's limit of ${maxLength} characters (--model-config-limit name-length)`);
}

const CONTROL_DISABLED = 'explicit model load / unload is not allowed if polling is enabled';

/**
 * A failure to read, parse or validate a model's configuration, or to write its file overrides:
 * what Triton's repository poll checks before it tries a version. Its code and message are the
 * cause's; `load` answers it as Triton does (`pollFailure`).
 */
class PollFailure extends NereidError {
  constructor(cause: NereidError) {
    super(cause.code, cause.message, { cause });
  }
}

/** The load error Triton gives when its repository poll fails, with the cause after its text. */
function pollFailure(name: string, cause: NereidError): NereidError {
  return new NereidError('MODEL_POLL_FAILED', `failed to load '${name}', failed to poll from model repository: ${cause.message}`, { cause });
}

export class ModelManager<S extends Servable> {
  readonly #options: ModelManagerOptions;
  readonly #mode: ControlMode;
  readonly #factory: VersionFactory<S>;
  readonly #pool: LoadPool;
  readonly #models = new Map<string, ModelEntry<S>>();
  /** The tail of each model's operation queue. */
  readonly #turns = new Map<string, Promise<void>>();
  /** Operations and unloads under way, awaited by `shutdown`. */
  readonly #operations = new Set<Promise<unknown>>();
  #closed = false;
  #pollTimer: NodeJS.Timeout | undefined;
  #polling: Promise<void> | undefined;
  /** The S3 repositories' mirrors; undefined when every repository is local. */
  readonly #mirrors: RepositoryMirrors | undefined;
  /** The local root of each repository (an S3 repository's mirror root), set by `startup`. */
  #roots: readonly string[];
  /** The mirror stamp each model's last re-check reload was tried with. */
  readonly #rechecked = new Map<string, string>();
  readonly #turn = <T>(name: string, job: () => Promise<T>): Promise<T> => this.#inTurn(name, job);

  constructor(options: ModelManagerOptions, factory: VersionFactory<S>) {
    this.#options = options;
    this.#mode = options.controlMode ?? 'none';
    this.#factory = factory;
    this.#pool = new LoadPool(options.loadThreadCount);
    this.#roots = options.repositories;
    this.#mirrors = hasRemoteRepositories(options.repositories)
      ? new RepositoryMirrors(options.repositories, {
          ...(options.repositoryCacheDir !== undefined ? { cacheDir: options.repositoryCacheDir } : {}),
          ...(options.repositorySettleSecs !== undefined ? { settleSecs: options.repositorySettleSecs } : {}),
          logger: options.logger,
        })
      : undefined;
  }

  get controlMode(): ControlMode {
    return this.#mode;
  }

  // ---------------------------------------------------------------- start-up, polling, shutdown

  /**
   * The start-up load (models-and-scheduling.md §1.9): every model of every repository in modes
   * `none` and `poll`; in `explicit` mode the models named in `loadModels` (`*`: every model).
   * Failures are recorded per model and version and returned (empty when everything loaded).
   * Rejects only for a missing or unreadable repository.
   */
  async startup(loadModels: readonly string[] = []): Promise<VersionStatus[]> {
    const all = this.#mode !== 'explicit' || loadModels.includes('*');
    let problems = new Map<string, string>();
    if (this.#mirrors !== undefined) {
      this.#roots = await this.#mirrors.open();
      problems = await this.#mirrors.sync(all ? 'all' : new Set(loadModels), this.#turn, { strict: true, wait: true });
      // A model whose revision in the store could not be taken (incomplete, failed its checks)
      // fails the start-up as a model whose configuration does not parse would.
      for (const [name, why] of problems) this.#entry(name).reason = `failed to load '${name}': ${why}`;
    }
    await checkRepositories(this.#roots);
    const scan = await scanRepositories(this.#roots);
    if (all) {
      for (const [name, repos] of scan.duplicates) this.#entry(name).reason = duplicateReason(repos.map((r) => this.#shown(r)));
    }
    const names = (all ? [...scan.models.keys()] : [...new Set(loadModels)]).filter((name) => !problems.has(name));
    const unknown: VersionStatus[] = [];
    await Promise.all(
      names.map((name) =>
        this.#track(this.#loadModel(name, {}, { explicit: true, chain: [] })).catch((err: unknown) => {
          const error = toNereidError(err, 'MODEL_LOAD_FAILED');
          if (error.code === 'MODEL_NOT_IN_REPOSITORY' || error.code === 'MODEL_NAME_INVALID') {
            this.#options.logger.error(error.message);
            unknown.push({ name, version: undefined, state: 'UNAVAILABLE', reason: error.message });
          }
        }),
      ),
    );
    return [...this.statuses().filter((s) => this.#counts(s)), ...unknown];
  }

  /**
   * Polls the repositories every `seconds` (mode `poll`) until `shutdown`. In mode `explicit`
   * with S3 repositories, re-checks the loaded models instead (`recheck`).
   */
  startPolling(seconds: number): void {
    const recheck = this.#mode === 'explicit' && this.#mirrors !== undefined;
    if ((this.#mode !== 'poll' && !recheck) || this.#closed || this.#pollTimer !== undefined) return;
    const next = () => {
      this.#pollTimer = setTimeout(() => {
        void (recheck ? this.recheck() : this.poll()).finally(() => {
          if (!this.#closed) next();
        });
      }, seconds * 1000);
      this.#pollTimer.unref();
    };
    next();
  }

  /**
   * One poll (models-and-scheduling.md §1.9): new model directories are loaded, removed ones
   * unloaded, changed ones reloaded (see the file comment), failed ones tried again. Never
   * rejects; failures are recorded as states and reasons and logged. A poll already running is
   * joined.
   */
  poll(): Promise<void> {
    this.#polling ??= this.#track(this.#pollOnce()).finally(() => {
      this.#polling = undefined;
    });
    return this.#polling;
  }

  /**
   * The explicit-mode re-check of S3 repositories (a Nereid extension, docs/model-repository-s3.md):
   * every model loaded from the repository (not from file overrides) whose objects changed in the
   * store is reloaded, with the `config` parameter it was loaded with. Never rejects.
   */
  async recheck(): Promise<void> {
    if (this.#closed || this.#mirrors === undefined) return;
    const loaded = [...this.#models.values()].filter((e) => e.explicit && !e.fileOverride && this.#hasVersionsInService(e));
    await this.#track(this.#mirrors.sync(new Set(loaded.map((e) => e.name)), this.#turn));
    const jobs = loaded.map(async (entry) => {
      const location = entry.location;
      if (location === undefined || this.#closed) return;
      const stamp = await directoryStamp(location.directory);
      // A revision whose reload failed is tried again only once it changes.
      if (stamp === entry.stamp || stamp === this.#rechecked.get(entry.name)) return;
      this.#rechecked.set(entry.name, stamp);
      this.#options.logger.info(`model '${entry.name}' changed in its repository; reloading it`);
      const request: LoadRequest = {
        ...(entry.overrideConfig !== undefined ? { config: entry.overrideConfig } : {}),
        ...(entry.overridePolicy !== undefined ? { versionPolicy: entry.overridePolicy } : {}),
      };
      await this.#track(this.#loadModel(entry.name, request, { explicit: true, chain: [] })).catch((err: unknown) => {
        this.#options.logger.error(toNereidError(err).message);
      });
    });
    await Promise.allSettled(jobs);
  }

  async #pollOnce(): Promise<void> {
    if (this.#closed) return;
    const logger = this.#options.logger;
    await this.#mirrors?.sync('all', this.#turn);
    let scan;
    try {
      scan = await scanRepositories(this.#roots);
    } catch (err) {
      logger.error(`failed to poll the model repositories: ${toNereidError(err).message}`);
      return;
    }
    const jobs: Promise<unknown>[] = [];
    for (const entry of this.#models.values()) {
      if (scan.models.has(entry.name) || scan.duplicates.has(entry.name)) continue;
      if (!this.#isActive(entry)) continue;
      logger.info(`model '${entry.name}' was removed from the repository; unloading it`);
      jobs.push(this.#unloadModel(entry.name, 'unloaded'));
    }
    for (const [name, repos] of scan.duplicates) {
      const entry = this.#models.get(name);
      const reason = duplicateReason(repos.map((r) => this.#shown(r)));
      if (entry?.reason === reason && !this.#hasVersionsInService(entry)) continue;
      logger.error(`model '${name}': ${reason}; unloading it`);
      jobs.push(
        this.#unloadModel(name, 'unloaded').then(() => {
          this.#entry(name).reason = reason;
        }),
      );
    }
    for (const [name, location] of scan.models) {
      const entry = this.#models.get(name);
      const stamp = await directoryStamp(location.directory);
      if (entry !== undefined && entry.stamp === stamp && entry.location?.directory === location.directory) continue;
      jobs.push(
        this.#loadModel(name, {}, { explicit: true, chain: [] }).catch((err: unknown) => {
          logger.error(toNereidError(err).message);
        }),
      );
    }
    await Promise.allSettled(jobs);
  }

  /**
   * Stops polling, refuses new operations, lets running ones finish (what they made is
   * discarded), then unloads every version, a model only after the models that use it; each
   * finishes its in-flight requests first.
   */
  async shutdown(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#pollTimer);
    while (this.#operations.size > 0) await Promise.allSettled([...this.#operations]);
    // In dependency order: ensembles before the models they use (unload-order.ts).
    const graph = new Map([...this.#models.values()].map((e) => [e.name, e.dependencies.map((d) => d.model)] as const));
    for (const wave of unloadWaves(graph)) {
      for (const name of wave) {
        for (const slot of this.#models.get(name)!.versions.values()) if (slot.servable !== undefined) this.#retire(slot, 'unloaded');
      }
      while (this.#operations.size > 0) await Promise.allSettled([...this.#operations]);
    }
    await this.#mirrors?.close();
  }

  // ---------------------------------------------------------------- the repository extension

  /**
   * Loads or reloads `name` (explicit mode; protocol.md §3.13, models-and-scheduling.md §1.10).
   * Resolves once the new copies serve; rejects with the failure (the serving copies, if any,
   * keep serving).
   */
  async load(name: string, request: LoadRequest = {}): Promise<void> {
    this.#checkControl();
    checkModelName(name, this.#options.limits?.['name-length']);
    if (request.files !== undefined && request.files.size > 0 && request.config === undefined) {
      throw pollFailure(name, new NereidError('LOAD_PARAMETER', `Load parameter 'config' must be specified for model file override of model '${name}'`));
    }
    this.#checkOpen();
    if (this.#mirrors !== undefined) {
      // A load by name takes the model's newest complete revision from the store first.
      const problems = await this.#track(this.#mirrors.sync(new Set([name]), this.#turn, { wait: true, strict: true })).catch((err: unknown) => {
        throw pollFailure(name, toNereidError(err, 'REPOSITORY_INVALID'));
      });
      const problem = problems.get(name);
      if (problem !== undefined) throw new NereidError('MODEL_LOAD_FAILED', `load failed for model '${name}': ${problem}`);
    }
    try {
      await this.#track(this.#loadModel(name, request, { explicit: true, chain: [] }));
    } catch (err) {
      if (!(err instanceof NereidError)) throw err;
      if (err.code === 'FILE_OVERRIDE_INVALID') throw pollFailure(name, err);
      if (err.cause instanceof PollFailure) throw pollFailure(name, err.cause);
      throw err;
    }
  }

  /**
   * Unloads every version of `name` (explicit mode; protocol.md §3.13): they stop taking requests
   * now and are released once their in-flight requests finish. Models that depend on `name` are
   * unloaded too; with `unloadDependents`, so is what `name` depended on and nothing else needs
   * (§1.11). Unloading a model that is not loaded succeeds.
   */
  async unload(name: string, request: UnloadRequest = {}): Promise<void> {
    this.#checkControl();
    checkModelName(name, this.#options.limits?.['name-length']);
    this.#checkOpen();
    await this.#track(this.#unloadCascade(name, 'unloaded', request.unloadDependents ?? false, new Set()));
    const still = this.readyVersions(name);
    if (still.length > 0) {
      throw new NereidError('MODEL_UNLOAD_FAILED', `failed to unload '${name}', versions that are still available: ${still.join(', ')}`);
    }
  }

  /**
   * The repository index (protocol.md §3.13): every model directory of every repository and every
   * model with lifecycle history, sorted by name; one entry per version with a state, `{name}`
   * alone for models never loaded. `readyOnly`: READY versions only.
   */
  async index(readyOnly = false): Promise<IndexEntry[]> {
    const names = new Set(this.#models.keys());
    const duplicates = new Map<string, string[]>();
    try {
      const scan = await scanRepositories(this.#roots);
      for (const name of scan.models.keys()) names.add(name);
      for (const [name, repos] of scan.duplicates) {
        names.add(name);
        duplicates.set(name, repos.map((r) => this.#shown(r)));
      }
    } catch (err) {
      this.#options.logger.warning(`repository index: ${toNereidError(err).message}`);
    }
    const out: IndexEntry[] = [];
    for (const name of [...names].sort(compareNames)) {
      const entry = this.#models.get(name);
      const dup = duplicates.get(name);
      // A model-level failure (a duplicate, a configuration that does not parse) has no version.
      const reason = entry?.reason || (dup && !entry?.versions.size ? duplicateReason(dup) : '');
      if (reason && !readyOnly) out.push({ name, state: 'UNAVAILABLE', reason });
      if (entry !== undefined && entry.versions.size > 0) {
        for (const v of [...entry.versions.keys()].sort((a, b) => a - b)) {
          const slot = entry.versions.get(v)!;
          if (readyOnly && slot.state !== 'READY') continue;
          const weight = entry.weights?.weights.get(v);
          out.push({
            name,
            version: String(v),
            state: slot.state,
            ...(slot.reason ? { reason: slot.reason } : {}),
            ...(weight !== undefined ? { weight } : {}),
          });
        }
      } else if (!reason && !readyOnly) {
        out.push({ name });
      }
    }
    return out;
  }

  // ---------------------------------------------------------------- lookups

  /**
   * The servable an inference request goes to: `resolve`, except that a request naming no version
   * (empty, absent or -1) of a model with version weights goes to one of its READY versions with a
   * weight above 0, picked by smooth weighted round-robin; with none of them READY, to the highest
   * READY version. Each call counts as one routed request.
   */
  route(name: string, version?: string): { servable: S; version: number } {
    if (version === undefined || version === '' || version === '-1') {
      const entry = this.#models.get(name);
      const weights = entry?.weights;
      if (weights !== undefined) {
        const versions = entry!.versions;
        const picked = weights.pick((v) => versions.get(v)?.state === 'READY');
        if (picked !== undefined) return { servable: versions.get(picked)!.servable!, version: picked };
      }
    }
    return this.resolve(name, version);
  }

  /** Every weighted version of every model, sorted by model name then version (the weight gauge). */
  versionWeights(): { model: string; version: number; weight: number }[] {
    const out: { model: string; version: number; weight: number }[] = [];
    for (const name of [...this.#models.keys()].sort(compareNames)) {
      const weights = this.#models.get(name)!.weights;
      if (weights === undefined) continue;
      for (const [version, weight] of weights.weights) out.push({ model: name, version, weight });
    }
    return out;
  }

  /**
   * The servable for a request (protocol.md §2.1). `version` empty, absent or -1: the highest
   * READY version.
   */
  resolve(name: string, version?: string): { servable: S; version: number } {
    const entry = this.#models.get(name);
    if (entry === undefined) {
      throw new NereidError('MODEL_NOT_FOUND', `Request for unknown model: '${name}' is not found`);
    }
    if (version === undefined || version === '' || version === '-1') {
      let best: number | undefined;
      for (const [v, slot] of entry.versions) if (slot.state === 'READY' && (best === undefined || v > best)) best = v;
      if (best === undefined) {
        const why = entry.reason ? ` (${entry.reason})` : '';
        throw new NereidError('MODEL_NO_READY_VERSION', `Request for unknown model: '${name}' has no available versions${why}`);
      }
      return { servable: entry.versions.get(best)!.servable!, version: best };
    }
    const v = parseVersion(name, version);
    const slot = entry.versions.get(v);
    if (slot === undefined) {
      throw new NereidError('MODEL_VERSION_NOT_FOUND', `Request for unknown model: '${name}' version ${v} is not found`);
    }
    if (slot.state !== 'READY') {
      throw new NereidError(
        'MODEL_VERSION_NOT_READY',
        `Request for unknown model: '${name}' version ${v} is not at ready state${this.#readyHint(name)}`,
      );
    }
    return { servable: slot.servable!, version: v };
  }

  #readyHint(name: string): string {
    const ready = this.readyVersions(name);
    return ready.length ? `; ready versions: ${ready.join(', ')}` : '; no version is ready';
  }

  /** READY versions of a model, ascending (empty for unknown models). */
  readyVersions(name: string): number[] {
    const entry = this.#models.get(name);
    if (entry === undefined) return [];
    return [...entry.versions].filter(([, s]) => s.state === 'READY').map(([v]) => v).sort((a, b) => a - b);
  }

  /** Every READY servable, sorted by model name then version; optionally of one model only. */
  readyServables(name?: string): { name: string; version: number; servable: S }[] {
    const out: { name: string; version: number; servable: S }[] = [];
    const names = name === undefined ? [...this.#models.keys()].sort(compareNames) : [name];
    for (const n of names) {
      const entry = this.#models.get(n);
      if (entry === undefined) continue;
      for (const v of [...entry.versions.keys()].sort((a, b) => a - b)) {
        const slot = entry.versions.get(v)!;
        if (slot.state === 'READY' && slot.servable !== undefined) out.push({ name: n, version: v, servable: slot.servable });
      }
    }
    return out;
  }

  /** Every known (model, version) with its state, sorted by name then version. */
  statuses(): VersionStatus[] {
    const out: VersionStatus[] = [];
    for (const name of [...this.#models.keys()].sort(compareNames)) {
      const entry = this.#models.get(name)!;
      if (entry.reason) out.push({ name, version: undefined, state: 'UNAVAILABLE', reason: entry.reason });
      for (const v of [...entry.versions.keys()].sort((a, b) => a - b)) {
        const slot = entry.versions.get(v)!;
        out.push({ name, version: v, state: slot.state, reason: slot.reason });
      }
    }
    return out;
  }

  /** Whether a status counts as a failure (start-up report, strict readiness). */
  #counts(s: VersionStatus): boolean {
    const entry = this.#models.get(s.name);
    if (entry === undefined) return false;
    if (s.version === undefined) return entry.reason !== '';
    const slot = entry.versions.get(s.version)!;
    return slot.wanted && slot.state === 'UNAVAILABLE' && slot.failed;
  }

  /**
   * Strict readiness (protocol.md §3.3): no model the server was asked to serve has failed.
   * Versions loading (a model being added), being unloaded, unloaded on purpose or no longer
   * selected by their policy do not count; a failed reload leaves its version READY.
   */
  allReady(): boolean {
    for (const s of this.statuses()) if (this.#counts(s)) return false;
    return true;
  }

  // ---------------------------------------------------------------- loading

  #checkControl(): void {
    if (this.#mode !== 'explicit') throw new NereidError('MODEL_CONTROL_DISABLED', CONTROL_DISABLED);
  }

  #checkOpen(): void {
    if (this.#closed) throw new NereidError('SERVER_STOPPING', 'Server is stopping: models can no longer be loaded or unloaded');
  }

  #entry(name: string): ModelEntry<S> {
    let entry = this.#models.get(name);
    if (entry === undefined) {
      entry = {
        name,
        location: undefined,
        reason: '',
        versions: new Map(),
        stamp: undefined,
        explicit: false,
        overrideConfig: undefined,
        overridePolicy: undefined,
        fileOverride: false,
        dependencies: [],
        weights: undefined,
      };
      this.#models.set(name, entry);
    }
    return entry;
  }

  /** Runs `job` in `name`'s turn: after every operation on it queued before, before later ones. */
  async #inTurn<T>(name: string, job: () => Promise<T>): Promise<T> {
    const previous = this.#turns.get(name) ?? Promise.resolve();
    let done!: () => void;
    const mine = new Promise<void>((resolve) => (done = resolve));
    const tail = previous.then(() => mine);
    this.#turns.set(name, tail);
    await previous;
    try {
      return await job();
    } finally {
      done();
      if (this.#turns.get(name) === tail) this.#turns.delete(name);
    }
  }

  #track<T>(promise: Promise<T>): Promise<T> {
    const tracked = promise.finally(() => this.#operations.delete(tracked));
    this.#operations.add(tracked);
    return tracked;
  }

  /** A repository as the user named it: the URI of an S3 repository's mirror root. */
  #shown(root: string): string {
    return this.#mirrors?.uriOf(root) ?? root;
  }

  /** The one directory of `name` among the repositories, or the load error (§1.1, §10). */
  async #locate(name: string): Promise<ModelLocation> {
    const found: ModelLocation[] = [];
    if (!name.startsWith('.')) {
      for (const root of this.#roots) {
        const repository = resolvePath(root);
        const directory = join(repository, name);
        const info = await stat(directory).catch(() => undefined);
        if (info?.isDirectory()) found.push({ name, repository, directory });
      }
    }
    if (found.length === 0) {
      throw new NereidError(
        'MODEL_NOT_IN_REPOSITORY',
        `failed to load '${name}', failed to poll from model repository: no directory '${name}' in ${this.#options.repositories.join(', ')}`,
      );
    }
    if (found.length > 1) {
      const reason = duplicateReason(found.map((f) => this.#shown(f.repository)));
      const entry = this.#entry(name);
      if (!this.#hasVersionsInService(entry)) entry.reason = reason;
      throw new NereidError('MODEL_LOAD_FAILED', `load failed for model '${name}': ${reason}`);
    }
    return found[0]!;
  }

  /**
   * Loads `name` with its dependencies first. The override directory (file overrides) is made
   * here and released when the load ends; versions loaded from it hold it on.
   */
  async #loadModel(name: string, request: LoadRequest, context: LoadContext): Promise<void> {
    checkModelName(name, this.#options.limits?.['name-length']);
    if (context.chain.includes(name)) {
      throw new NereidError('MODEL_LOAD_FAILED', `circular dependency between ensembles: ${describeCycle(context.chain, name)}`);
    }
    const override = request.files !== undefined && request.files.size > 0 ? await OverrideDirectory.create(name, request.files) : undefined;
    try {
      // What the model depends on, from a first reading of its configuration.
      const location = override?.location ?? (await this.#locate(name));
      const first = await this.#pool
        .run(() => prepareModelConfig(location, this.#options, request.config))
        .catch(() => undefined);
      const dependencies = first ? dependenciesOf(first.config) : [];
      if (dependencies.length > 0) {
        try {
          await this.#loadDependencies(name, dependencies, context);
        } catch (err) {
          // A cycle: the model fails with it (§1.11).
          return await this.#inTurn(name, () => Promise.reject(this.#modelFailed(this.#entry(name), err)));
        }
      }
      await this.#inTurn(name, () => this.#loadInTurn(name, request, context, override));
    } finally {
      await override?.release();
    }
  }

  /** Loads what `name` depends on (§1.11); a failure here is reported by `#loadInTurn`'s check. */
  async #loadDependencies(name: string, dependencies: readonly Dependency[], context: LoadContext): Promise<void> {
    const chain = [...context.chain, name];
    for (const model of new Set(dependencies.map((d) => d.model))) {
      if (chain.includes(model)) {
        throw new NereidError('MODEL_LOAD_FAILED', `circular dependency between ensembles: ${describeCycle(chain, model)}`);
      }
      const entry = this.#models.get(model);
      const serving = entry !== undefined && this.readyVersions(model).length > 0;
      // Explicit mode loads composing models that are not loaded or changed; the other modes load
      // every model anyway and only need one that is not there yet.
      if (serving && this.#mode !== 'explicit') continue;
      try {
        // In mode explicit only the requested model was synced from an S3 repository: its
        // composing models are brought up to date here, each before its own load.
        if (this.#mode === 'explicit') await this.#mirrors?.sync(new Set([model]), this.#turn, { wait: true });
        await this.#loadModel(model, {}, { explicit: false, chain });
      } catch (err) {
        // Any other failure shows in the check of `#loadInTurn`; a cycle fails every model on it.
        for (let cause: unknown = err; cause instanceof Error; cause = cause.cause) {
          if (cause.message.startsWith('circular dependency')) throw cause;
        }
      }
    }
  }

  /** Missing or unready dependencies of a model, described; empty when every one serves. */
  #unmetDependencies(dependencies: readonly Dependency[]): string[] {
    const unmet: string[] = [];
    for (const d of dependencies) {
      const ready = this.readyVersions(d.model);
      if (d.version === -1 ? ready.length === 0 : !ready.includes(d.version)) {
        // A pinned step (model_version ≥ 0) needs that very version; say which ones serve.
        const serving = ready.length === 0 ? 'none is ready' : `ready: ${ready.join(', ')}`;
        unmet.push(d.version === -1 ? d.model : `${d.model} version ${d.version} (the step's model_version; ${serving})`);
      }
    }
    return unmet;
  }

  async #loadInTurn(name: string, request: LoadRequest, context: LoadContext, override: OverrideDirectory | undefined): Promise<void> {
    this.#checkOpen();
    const logger = this.#options.logger;
    const location = override?.location ?? (await this.#locate(name));
    const entry = this.#entry(name);
    const stamp = override ? undefined : await directoryStamp(location.directory);

    let prepared: PreparedModel;
    let selected: number[];
    let fingerprints: Map<number, Fingerprint>;
    try {
      ({ prepared, selected, fingerprints } = await this.#pool.run(async () => {
        const prepared = await prepareModelConfig(location, this.#options, request.config).catch((err: unknown) => {
          throw new PollFailure(toNereidError(err, 'CONFIG_INVALID'));
        });
        if (request.versionPolicy !== undefined) prepared.config.version_policy = structuredClone(request.versionPolicy);
        const available = await listVersions(location.directory, logger);
        const selected = selectVersions(name, prepared.config.version_policy, available, logger);
        return { prepared, selected, fingerprints: await versionFingerprints(prepared, selected) };
      }));
    } catch (err) {
      throw this.#modelFailed(entry, err);
    }
    if (request.versionWeights !== undefined) checkWeightedVersions(name, request.versionWeights, selected);
    const dependencies = dependenciesOf(prepared.config);
    const unmet = this.#unmetDependencies(dependencies);
    if (unmet.length > 0) {
      throw this.#modelFailed(entry, new NereidError('MODEL_LOAD_FAILED', `ensemble '${name}' contains models that are not available or ambiguous: ${unmet.join(', ')}`));
    }

    // Versions whose serving copy was made from the same configuration and files stay as they are;
    // those whose configuration differs in instance groups only are updated in place when the
    // factory can (§1.10); the others get a new copy. A load with a `config` parameter loads every
    // version again (unless only instance groups change), and so does the next one without it,
    // which undoes the override (§1.10). A load with version weights (a Nereid addition) reloads
    // only what changed, so that new weights for the same configuration reload nothing.
    const force = request.versionWeights === undefined && (request.config !== undefined || entry.overrideConfig !== undefined);
    const fresh: number[] = [];
    const kept: number[] = [];
    const inPlace: number[] = [];
    for (const v of selected) {
      const slot = entry.versions.get(v);
      const fingerprint = fingerprints.get(v)!;
      const serving = slot?.state === 'READY' && slot.servable !== undefined;
      if (serving && !force && slot.fingerprint === fingerprint.full) kept.push(v);
      else if (serving && slot.fingerprint !== fingerprint.full && slot.shape === fingerprint.shape && this.#factory.updateInPlace) inPlace.push(v);
      else fresh.push(v);
    }
    if (fresh.length === 0 && inPlace.length === 0) {
      // Nothing to load: what serves is what the files say (a failed reload's reason goes).
      for (const v of kept) this.#keep(entry.versions.get(v)!, prepared.config);
      this.#settleUnselected(entry, selected);
      patch(entry, { reason: '', stamp, dependencies });
      // Unforced: the configuration in use is the one this load named (or the files' when none).
      if (request.versionWeights !== undefined) entry.overrideConfig = request.config;
      entry.overridePolicy = request.versionPolicy;
      entry.explicit ||= context.explicit;
      this.#setWeights(entry, request, selected);
      return;
    }

    // In-place updates are prepared first: one the factory declines becomes a new copy.
    const updates = new Map<number, PendingUpdate>();
    const failures = new Map<number, string>();
    if (inPlace.length > 0) {
      const results = await this.#pool.run(() =>
        Promise.allSettled(
          inPlace.map((v) => this.#attempts(name, v, () => this.#factory.updateInPlace!(entry.versions.get(v)!.servable!, prepared, v))),
        ),
      );
      inPlace.forEach((v, i) => {
        const r = results[i]!;
        if (r.status === 'rejected') failures.set(v, toNereidError(r.reason, 'MODEL_LOAD_FAILED').message);
        else if (r.value === undefined) fresh.push(v);
        else updates.set(v, r.value);
      });
    }

    for (const v of failures.size > 0 ? [] : fresh) {
      const slot = entry.versions.get(v);
      if (slot === undefined) entry.versions.set(v, newSlot('LOADING'));
      else if (slot.state !== 'READY') patch(slot, { state: 'LOADING', reason: '', draining: undefined, failed: false, wanted: true });
    }
    if (failures.size === 0 && fresh.length > 0 && (kept.length > 0 || updates.size > 0 || fresh.some((v) => entry.versions.get(v)!.state === 'READY'))) {
      logger.info(`reloading model '${name}': new copies of version(s) ${fresh.join(', ')} load beside the serving ones`);
    }

    // `loading: <model>:<version>` when a version's load starts (on the pool), as Triton logs it,
    // whichever path asked for the load: start-up, a poll, or the repository API.
    const results =
      failures.size > 0
        ? []
        : await this.#pool.run(() =>
            Promise.allSettled(
              fresh.map((v) => {
                logger.info(`loading: ${name}:${v}`);
                return this.#attempts(name, v, () => this.#factory.load(prepared, v));
              }),
            ),
          );
    const made = results.flatMap((r) => (r.status === 'fulfilled' ? [r.value] : []));
    results.forEach((r, i) => {
      if (r.status === 'rejected') failures.set(fresh[i]!, toNereidError(r.reason, 'MODEL_LOAD_FAILED').message);
    });
    const attempted = failures.size > 0 && results.length === 0 ? inPlace : [...updates.keys(), ...fresh];
    let failure: NereidError | undefined;
    if (this.#closed) {
      failure = new NereidError('SERVER_STOPPING', `load of model '${name}' abandoned: the server is stopping`);
      for (const v of fresh) {
        const slot = entry.versions.get(v)!;
        if (slot.state === 'LOADING') patch(slot, { state: 'UNAVAILABLE', reason: 'unloaded' });
      }
    } else if (failures.size > 0) {
      const parts: string[] = [];
      for (const v of new Set([...attempted, ...failures.keys()])) {
        const slot = entry.versions.get(v)!;
        const own = failures.get(v);
        const reason = own ?? 'another version of the same load failed';
        if (own !== undefined) {
          parts.push(`version ${v} is at UNAVAILABLE state: ${own};`);
        }
        this.#versionFailed(name, v, slot, reason);
      }
      failure = new NereidError('MODEL_LOAD_FAILED', `load failed for model '${name}': ${parts.join(' ')}`);
    } else {
      const unmetNow = this.#unmetDependencies(dependencies);
      if (unmetNow.length > 0) {
        failure = new NereidError('MODEL_LOAD_FAILED', `ensemble '${name}' contains models that are not available or ambiguous: ${unmetNow.join(', ')}`);
        for (const v of fresh) this.#versionFailed(name, v, entry.versions.get(v)!, failure.message);
      }
    }
    if (failure !== undefined) {
      for (const s of made) this.#discard(s);
      for (const u of updates.values()) void this.#track(u.discard());
      entry.stamp = undefined;
      throw failure;
    }

    // The switch: every new copy in, every retired one out, every update committed, in one
    // synchronous step.
    fresh.forEach((v, i) => {
      const slot = entry.versions.get(v)!;
      const old = slot.servable;
      const oldOverride = slot.override;
      override?.retain();
      patch(slot, {
        state: 'READY',
        reason: '',
        servable: made[i]!,
        fingerprint: fingerprints.get(v)!.full,
        shape: fingerprints.get(v)!.shape,
        override,
        draining: undefined,
        failed: false,
        wanted: true,
      });
      if (old !== undefined) this.#release(old, oldOverride);
    });
    for (const [v, update] of updates) {
      update.commit();
      patch(entry.versions.get(v)!, { reason: '', fingerprint: fingerprints.get(v)!.full, shape: fingerprints.get(v)!.shape, wanted: true });
    }
    for (const v of kept) this.#keep(entry.versions.get(v)!, prepared.config);
    this.#settleUnselected(entry, selected);
    patch(entry, {
      location,
      reason: '',
      stamp,
      overrideConfig: request.config,
      overridePolicy: request.versionPolicy,
      fileOverride: override !== undefined,
      dependencies,
    });
    entry.explicit ||= context.explicit;
    this.#setWeights(entry, request, selected);
    for (const v of fresh) logger.info(`successfully loaded '${name}' version ${v}`);
    for (const v of updates.keys()) logger.info(`successfully updated '${name}' version ${v} in place`);
  }

  /**
   * After a successful load: the request's weights, or without them the current ones less the
   * versions no longer served. Logged when they change.
   */
  #setWeights(entry: ModelEntry<S>, request: LoadRequest, selected: readonly number[]): void {
    const before = entry.weights;
    if (request.versionWeights !== undefined) {
      entry.weights = request.versionWeights.size > 0 ? new VersionWeights(request.versionWeights) : undefined;
    } else {
      entry.weights = before?.restrictedTo(new Set(selected));
    }
    if (entry.weights === before) return;
    const now = entry.weights?.toString();
    if (now === before?.toString()) {
      // The same weights again: routing goes on where it was.
      entry.weights = before;
      return;
    }
    this.#options.logger.info(
      now === undefined
        ? `model '${entry.name}': version weights cleared; requests that name no version go to the highest ready version`
        : `model '${entry.name}': version weights ${now} for requests that name no version`,
    );
  }

  /**
   * Runs a version load (or in-place update) with `--model-load-retry-count` extra attempts
   * (§1.10 item 5), logging each failure that is retried; rejects with the last attempt's error.
   * No retry once the server is stopping.
   */
  async #attempts<T>(name: string, version: number, attempt: () => Promise<T>): Promise<T> {
    const retries = Math.max(0, this.#options.loadRetryCount ?? 0);
    for (let n = 0; ; n++) {
      try {
        return await attempt();
      } catch (err) {
        if (n >= retries || this.#closed) throw err;
        this.#options.logger.warning(
          `failed to load '${name}' version ${version} (attempt ${n + 1} of ${retries + 1}): ${toNereidError(err, 'MODEL_LOAD_FAILED').message}; retrying`,
        );
      }
    }
  }

  /**
   * A serving copy a load keeps as it is: a failed reload's reason goes, and its configuration
   * takes the load's version policy, which selects versions but shapes none (so that the
   * configuration it reports names the policy in effect).
   */
  #keep(slot: VersionSlot<S>, config: ModelConfig): void {
    patch(slot, { reason: '', wanted: true });
    if (slot.servable !== undefined && config.version_policy !== undefined) slot.servable.config.version_policy = structuredClone(config.version_policy);
  }

  /** Versions no longer selected: serving ones are unloaded, the others stop counting (§1.10 item 4). */
  #settleUnselected(entry: ModelEntry<S>, selected: readonly number[]): void {
    for (const [v, slot] of entry.versions) {
      if (selected.includes(v)) continue;
      slot.wanted = false;
      if (slot.state === 'READY') {
        this.#options.logger.info(`unloading '${entry.name}' version ${v}: no longer selected by its version policy`);
        this.#retire(slot, 'unloaded');
      }
    }
  }

  /** Records a model-level load failure and returns the error for the caller. */
  #modelFailed(entry: ModelEntry<S>, err: unknown): NereidError {
    const cause = toNereidError(err, 'MODEL_LOAD_FAILED');
    const logger = this.#options.logger;
    entry.stamp = undefined;
    if (this.#hasVersionsInService(entry)) {
      for (const slot of entry.versions.values()) {
        if (slot.state === 'READY') slot.reason = `reload failed, this version keeps serving its previous copy: ${cause.message}`;
      }
    } else {
      // No version could be tried: the model-level reason is what the index shows.
      for (const [v, slot] of entry.versions) if (slot.draining === undefined) entry.versions.delete(v);
      entry.reason = cause.message;
    }
    logger.error(`failed to load model '${entry.name}': ${cause.message}`);
    return new NereidError('MODEL_LOAD_FAILED', `load failed for model '${entry.name}': ${cause.message}`, { cause });
  }

  /** Records one version's failure: a READY one keeps serving its previous copy. */
  #versionFailed(name: string, version: number, slot: VersionSlot<S>, reason: string): void {
    if (slot.state === 'READY') {
      slot.reason = `reload failed, this version keeps serving its previous copy: ${reason}`;
    } else {
      patch(slot, { state: 'UNAVAILABLE', reason, servable: undefined, draining: undefined, failed: true, wanted: true });
    }
    this.#options.logger.error(`failed to load '${name}' version ${version}: ${reason}`);
  }

  // ---------------------------------------------------------------- unloading

  /** Unloads `name`, what depends on it, and with `cascade` what it depended on (§1.11). */
  async #unloadCascade(name: string, reason: string, cascade: boolean, done: Set<string>): Promise<void> {
    if (done.has(name)) return;
    done.add(name);
    const dependencies = this.#models.get(name)?.dependencies ?? [];
    await this.#unloadModel(name, reason);
    for (const other of [...this.#models.values()]) {
      if (done.has(other.name) || !other.dependencies.some((d) => d.model === name) || !this.#hasVersionsInService(other)) continue;
      await this.#unloadCascade(other.name, `unloaded: composing model '${name}' was unloaded`, false, done);
    }
    if (!cascade) return;
    for (const model of new Set(dependencies.map((d) => d.model))) {
      const dep = this.#models.get(model);
      if (dep === undefined || dep.explicit || done.has(model)) continue;
      const needed = [...this.#models.values()].some(
        (m) => m.name !== model && this.#hasVersionsInService(m) && m.dependencies.some((d) => d.model === model),
      );
      if (!needed) await this.#unloadCascade(model, 'unloaded', true, done);
    }
  }

  /** In `name`'s turn: every version stops taking requests now; the model's repository information is forgotten. */
  #unloadModel(name: string, reason: string): Promise<void> {
    return this.#inTurn(name, async () => {
      const entry = this.#models.get(name);
      if (entry === undefined) return;
      if (this.#isActive(entry)) this.#options.logger.info(`unloading model '${name}'`);
      for (const slot of entry.versions.values()) {
        if (slot.servable !== undefined) this.#retire(slot, reason);
        else if (slot.state === 'UNAVAILABLE' || slot.state === 'UNKNOWN') patch(slot, { state: 'UNAVAILABLE', reason, failed: false });
      }
      if (entry.weights !== undefined) this.#options.logger.info(`model '${name}': version weights cleared by the unload`);
      patch(entry, {
        location: undefined,
        reason: '',
        stamp: undefined,
        explicit: false,
        overrideConfig: undefined,
        overridePolicy: undefined,
        fileOverride: false,
        weights: undefined,
      });
    });
  }

  /**
   * Takes `servable` out of service at once, outside the model's turn (it may happen while a load
   * of the model runs): UNLOADING, then UNAVAILABLE with `reason` once it drained. A no-op when
   * it no longer serves. A later load request loads the model again; a repository poll does only
   * once its files change.
   */
  stopServing(name: string, servable: S, reason: string): void {
    const entry = this.#models.get(name);
    if (entry === undefined) return;
    for (const slot of entry.versions.values()) {
      if (slot.servable !== servable) continue;
      this.#retire(slot, reason);
      return;
    }
  }

  /** Serving, or failed in a way that counts: something an unload changes. */
  #isActive(entry: ModelEntry<S>): boolean {
    if (entry.reason !== '') return true;
    for (const slot of entry.versions.values()) if (slot.servable !== undefined || slot.failed) return true;
    return false;
  }

  #hasVersionsInService(entry: ModelEntry<S>): boolean {
    for (const slot of entry.versions.values()) if (slot.servable !== undefined) return true;
    return false;
  }

  /** A serving copy leaves its slot: UNLOADING now, UNAVAILABLE with `reason` once drained. */
  #retire(slot: VersionSlot<S>, reason: string): void {
    const servable = slot.servable;
    if (servable === undefined) return;
    const override = slot.override;
    patch(slot, { state: 'UNLOADING', reason: '', servable: undefined, override: undefined, draining: servable, failed: false });
    void this.#release(servable, override).then(() => {
      if (slot.draining === servable) patch(slot, { state: 'UNAVAILABLE', reason, draining: undefined });
    });
  }

  /** Unloads a copy in the background (it drains first), then lets go of its override directory. */
  #release(servable: S, override: OverrideDirectory | undefined): Promise<void> {
    return this.#track(
      servable
        .unload()
        .catch((err: unknown) => this.#options.logger.error(`unloading '${servable.config.name}' failed: ${toNereidError(err).message}`))
        .finally(() => override?.release()),
    );
  }

  /** A copy made by a load that failed: never served, unloaded at once. */
  #discard(servable: S): void {
    void this.#release(servable, undefined);
  }
}

/** `Object.assign` that checks the fields against the target's type. */
function patch<T extends object>(target: T, fields: Partial<T>): void {
  Object.assign(target, fields);
}

function newSlot<S>(state: VersionState): VersionSlot<S> {
  return { state, reason: '', servable: undefined, fingerprint: '', shape: '', override: undefined, draining: undefined, failed: false, wanted: true };
}

function duplicateReason(repositories: readonly string[]): string {
  return `model appears in two or more repositories: ${repositories.join(', ')}`;
}

function compareNames(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

interface Fingerprint {
  /** Everything the copy is made from. */
  readonly full: string;
  /** The same with the instance groups left out (§1.10: what an in-place update may not change). */
  readonly shape: string;
}

/**
 * What each version's copy would be made from: the model-level configuration (less the version
 * policy, which selects versions but does not shape them), the version directory, and the other
 * files of the model directory (labels, warmup data; not the configuration files, which the
 * configuration covers, nor other versions).
 */
async function versionFingerprints(prepared: PreparedModel, versions: readonly number[]): Promise<Map<number, Fingerprint>> {
  const dir = prepared.location.directory;
  const { version_policy: _policy, ...rest } = prepared.config;
  const { instance_group: _groups, ...shape } = rest;
  const config = JSON.stringify(rest);
  const shapeConfig = JSON.stringify(shape);
  const shared = await directoryStamp(dir, (name, isDirectory) => name === 'config.pbtxt' || (isDirectory && (name === 'configs' || /^[0-9]+$/.test(name))));
  const out = new Map<number, Fingerprint>();
  const hash = (text: string) => createHash('sha1').update(text).digest('hex');
  for (const v of versions) {
    const own = await directoryStamp(join(dir, String(v)));
    out.set(v, { full: hash(`${dir}\n${config}\n${shared}\n${own}`), shape: hash(`${dir}\n${shapeConfig}\n${shared}\n${own}`) });
  }
  return out;
}

/** Refuses weights for versions the load will not serve (after its version policy). */
function checkWeightedVersions(model: string, weights: ReadonlyMap<number, number>, selected: readonly number[]): void {
  const unknown = [...weights.keys()].filter((v) => !selected.includes(v));
  if (unknown.length === 0) return;
  const served = selected.length > 0 ? `it serves version${selected.length > 1 ? 's' : ''} ${[...selected].sort((a, b) => a - b).join(', ')}` : 'it serves no version';
  throw new NereidError(
    'LOAD_PARAMETER',
    `load parameter 'version_weights' of model '${model}' names version${unknown.length > 1 ? 's' : ''} ${unknown.join(', ')}, ` +
      `which this load does not serve (${served}, per the version policy in effect after the load); ` +
      `weight only served versions, or widen the load's version_policy (its parameter, or the one in its config)`,
  );
}

function parseVersion(model: string, text: string): number {
  if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(Number(text))) throw invalidVersion(model, text);
  return Number(text);
}

/** Triton's message for a version string that names no version, with the model after it. */
function invalidVersion(model: string, text: string): NereidError {
  const start = /^-[0-9]+$/.test(text) ? `invalid model version specified '${text}'` : `failed to get model version from specified version string '${text}'`;
  return new NereidError('MODEL_VERSION_INVALID', `${start} for model '${model}': the version should be an integral value > 0`);
}
