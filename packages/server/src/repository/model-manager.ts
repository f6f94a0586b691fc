/**
 * The model manager: which models exist, which of their versions are loaded, in what state, and
 * the lookup every request goes through (protocol.md §2.1, models-and-scheduling.md §1.7–§1.8).
 *
 * It does not know how a version is made servable: the core gives it a `VersionFactory`.
 */
import { NereidError, toNereidError } from '@nereid/protocol';
import type { ModelConfig } from '../config/model-config.js';
import type { Logger } from '../observability/logger.js';
import { prepareModelConfig, type ConfigLoadOptions, type PreparedModel } from './config-loader.js';
import { checkRepositories, listVersions, scanRepositories, type ModelLocation } from './repository-scanner.js';
import { selectVersions } from './version-policy.js';

export type VersionState = 'UNKNOWN' | 'READY' | 'UNAVAILABLE' | 'LOADING' | 'UNLOADING';

/** A loaded model version, as the manager sees it. */
export interface Servable {
  readonly config: ModelConfig;
  /** Stops accepting requests, waits for in-flight ones, releases everything. */
  unload(): Promise<void>;
}

/** Makes one version of a prepared model servable (models-and-scheduling.md §3.1 steps 6–11). */
export interface VersionFactory<S extends Servable> {
  load(model: PreparedModel, version: number): Promise<S>;
}

interface VersionSlot<S> {
  state: VersionState;
  reason: string;
  servable: S | undefined;
}

interface ModelEntry<S> {
  name: string;
  location: ModelLocation | undefined;
  /** Reason the model as a whole is unavailable (duplicate, unreadable config) when it has no versions. */
  reason: string;
  versions: Map<number, VersionSlot<S>>;
}

export interface ModelManagerOptions extends ConfigLoadOptions {
  repositories: readonly string[];
  /** Models loaded concurrently (--model-load-thread-count). */
  loadThreadCount: number;
  logger: Logger;
}

export interface VersionStatus {
  name: string;
  version: number | undefined;
  state: VersionState;
  reason: string;
}

export class ModelManager<S extends Servable> {
  readonly #options: ModelManagerOptions;
  readonly #factory: VersionFactory<S>;
  readonly #models = new Map<string, ModelEntry<S>>();

  constructor(options: ModelManagerOptions, factory: VersionFactory<S>) {
    this.#options = options;
    this.#factory = factory;
  }

  /**
   * Loads every model of every repository (control mode `none`). Failures are recorded per model
   * and version; the returned list holds them (empty when everything loaded).
   */
  async loadAll(): Promise<VersionStatus[]> {
    await checkRepositories(this.#options.repositories);
    const scan = await scanRepositories(this.#options.repositories);
    for (const [name, repos] of scan.duplicates) {
      this.#models.set(name, {
        name,
        location: undefined,
        reason: `model appears in two or more repositories: ${repos.join(', ')}`,
        versions: new Map(),
      });
    }
    const queue = [...scan.models.values()];
    const workers = Array.from({ length: Math.max(1, Math.min(this.#options.loadThreadCount, queue.length)) }, async () => {
      for (let loc = queue.shift(); loc !== undefined; loc = queue.shift()) await this.#loadModel(loc);
    });
    await Promise.all(workers);
    return this.statuses().filter((s) => s.state !== 'READY');
  }

  async #loadModel(location: ModelLocation): Promise<void> {
    const logger = this.#options.logger;
    const entry: ModelEntry<S> = { name: location.name, location, reason: '', versions: new Map() };
    this.#models.set(location.name, entry);
    let prepared: PreparedModel;
    let versions: number[];
    try {
      prepared = await prepareModelConfig(location, this.#options);
      versions = selectVersions(location.name, prepared.config.version_policy, await listVersions(location.directory, logger), logger);
    } catch (err) {
      entry.reason = toNereidError(err, 'MODEL_LOAD_FAILED').message;
      logger.error(`failed to load model '${location.name}': ${entry.reason}`);
      return;
    }
    for (const v of versions) entry.versions.set(v, { state: 'LOADING', reason: '', servable: undefined });
    const results = await Promise.allSettled(versions.map((v) => this.#factory.load(prepared, v)));
    const failed = results.some((r) => r.status === 'rejected');
    for (let i = 0; i < versions.length; i++) {
      const slot = entry.versions.get(versions[i]!)!;
      const result = results[i]!;
      if (result.status === 'fulfilled' && !failed) {
        slot.state = 'READY';
        slot.servable = result.value;
        logger.info(`successfully loaded '${location.name}' version ${versions[i]}`);
      } else if (result.status === 'fulfilled') {
        // All or nothing across the versions of one load (models-and-scheduling.md §1.10).
        await result.value.unload().catch(() => undefined);
        slot.state = 'UNAVAILABLE';
        slot.reason = 'unloaded: another version of the same load failed';
      } else {
        slot.state = 'UNAVAILABLE';
        slot.reason = toNereidError(result.reason, 'MODEL_LOAD_FAILED').message;
        logger.error(`failed to load '${location.name}' version ${versions[i]}: ${slot.reason}`);
      }
    }
  }

  /**
   * The servable for a request (protocol.md §2.1). `version` empty or absent: the highest READY
   * version.
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
      const ready = this.readyVersions(name);
      const hint = ready.length ? `; ready versions: ${ready.join(', ')}` : '';
      throw new NereidError(
        'MODEL_VERSION_NOT_READY',
        `Request for unknown model: '${name}' version ${v} is not at ready state${hint}`,
      );
    }
    return { servable: slot.servable!, version: v };
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
    const names = name === undefined ? [...this.#models.keys()].sort() : [name];
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
    for (const name of [...this.#models.keys()].sort()) {
      const entry = this.#models.get(name)!;
      if (entry.versions.size === 0) {
        out.push({ name, version: undefined, state: entry.reason ? 'UNAVAILABLE' : 'UNKNOWN', reason: entry.reason });
        continue;
      }
      for (const v of [...entry.versions.keys()].sort((a, b) => a - b)) {
        const slot = entry.versions.get(v)!;
        out.push({ name, version: v, state: slot.state, reason: slot.reason });
      }
    }
    return out;
  }

  /** Every known model has all its versions READY (unloaded ones excepted) — strict readiness. */
  allReady(): boolean {
    for (const entry of this.#models.values()) {
      if (entry.versions.size === 0) {
        if (entry.reason) return false;
        continue;
      }
      for (const slot of entry.versions.values()) {
        if (slot.state === 'READY') continue;
        if (slot.state === 'UNAVAILABLE' && slot.reason.startsWith('unloaded')) continue;
        return false;
      }
    }
    return true;
  }

  /** Unloads every version (shutdown): each drains its in-flight requests first. */
  async unloadAll(): Promise<void> {
    const jobs: Promise<void>[] = [];
    for (const entry of this.#models.values()) {
      for (const slot of entry.versions.values()) {
        const servable = slot.servable;
        if (servable === undefined) continue;
        slot.state = 'UNLOADING';
        jobs.push(
          servable.unload().then(
            () => {
              slot.state = 'UNAVAILABLE';
              slot.reason = 'unloaded';
              slot.servable = undefined;
            },
            (err: unknown) => {
              slot.state = 'UNAVAILABLE';
              slot.reason = `unloaded with error: ${toNereidError(err).message}`;
              slot.servable = undefined;
            },
          ),
        );
      }
    }
    await Promise.all(jobs);
  }
}

function parseVersion(model: string, text: string): number {
  if (!/^[0-9]+$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw new NereidError(
      'MODEL_VERSION_INVALID',
      `failed to parse version '${text}' requested for model '${model}': the version should be an integral value > 0`,
    );
  }
  return Number(text);
}
