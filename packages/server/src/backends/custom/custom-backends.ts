/**
 * Custom backends from JavaScript modules: finds the module for a model (module-resolution.ts),
 * imports it (or, with the model parameter `execution_thread: "worker"`, has each instance's
 * worker import it) and checks it against the SPI (module-loader.ts).
 *
 * Backends are cached by module file, content and mode: models that use the same unchanged
 * module share one backend object (as Triton shares a backend library), and a module whose file
 * changed is imported afresh on the next load. Failed imports are not cached.
 */
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from '../../config/model-config.js';
import type { Logger } from '../../observability/logger.js';
import type { Backend } from '../spi.js';
import { backendFromModule, describeModule, importBackendModule, versionedModuleUrl } from './module-loader.js';
import { findBackendModule, type ModuleOrigin } from './module-resolution.js';
import { runInWorkers } from './worker-backend.js';

/** What the registry knows of the model whose backend it resolves. */
export interface BackendLookup {
  readonly model: string;
  readonly modelDirectory: string;
  readonly versionDirectory: string;
  readonly config: Readonly<ModelConfig>;
  /** `--backend-config` settings for the backend (global ones included). */
  readonly backendConfig: Readonly<Record<string, string>>;
  readonly logger: Logger;
}

export interface CustomBackendOptions {
  /** `--backend-directory`: `<dir>/<backend>/` holds a backend package. */
  readonly backendDirectory?: string | undefined;
}

/** The model parameter that runs a custom backend's instances in worker threads. */
export const EXECUTION_THREAD_PARAMETER = 'execution_thread';

export interface LoadedCustomBackend {
  readonly backend: Backend;
  readonly path: string;
  readonly origin: ModuleOrigin;
}

/** A custom backend module found (and, unless run on worker threads, imported) for a model load. */
export interface CustomBackendModule {
  readonly name: string;
  readonly path: string;
  readonly origin: ModuleOrigin;
}

export class CustomBackendLoader {
  readonly #options: CustomBackendOptions;
  readonly #cache = new Map<string, Promise<Backend>>();
  /** Modules `load` returned, by name and file, in the order they first were. */
  readonly #loaded = new Map<string, CustomBackendModule>();

  constructor(options: CustomBackendOptions = {}) {
    this.#options = options;
  }

  /**
   * The custom backend `name` for a model, or `searched` (every place looked at) when there is no
   * module for it. Rejects with BACKEND_MODULE_INVALID (or the module's own error) for a module
   * that cannot be imported or does not implement the SPI, and with CONFIG_INVALID for an
   * `execution_thread` value other than "main" or "worker".
   */
  async load(name: string, lookup: BackendLookup): Promise<LoadedCustomBackend | { searched: readonly string[] }> {
    const { found, searched } = findBackendModule({
      backend: name,
      modelDirectory: lookup.modelDirectory,
      versionDirectory: lookup.versionDirectory,
      runtime: lookup.config.runtime,
      backendDirectory: this.#options.backendDirectory,
      moduleSpecifier: lookup.backendConfig['module'],
    });
    if (found === undefined) return { searched };
    const where = describeModule(lookup.model, name, found.path);
    const thread = lookup.config.parameters[EXECUTION_THREAD_PARAMETER]?.string_value ?? 'main';
    if (thread !== 'main' && thread !== 'worker') {
      throw new NereidError('CONFIG_INVALID', `model '${lookup.model}': parameter '${EXECUTION_THREAD_PARAMETER}' must be "main" or "worker", got "${thread}"`);
    }
    const url = await versionedModuleUrl(found.path);
    const key = `${thread}\0${name}\0${url}`;
    let backend = this.#cache.get(key);
    if (backend === undefined) {
      backend =
        thread === 'worker'
          ? Promise.resolve(runInWorkers(url, { name }))
          : importBackendModule(url, found.path, where).then((ns) =>
              backendFromModule(ns, { name, spiVersion: 1, backendConfig: lookup.backendConfig, logger: lookup.logger }, where),
            );
      this.#cache.set(key, backend);
      backend.catch(() => this.#cache.delete(key));
    }
    lookup.logger.verbose(1, `model '${lookup.model}': backend '${name}' from ${found.path} (${found.origin}, ${thread} thread)`);
    const loaded = await backend;
    const id = `${name}\0${found.path}`;
    if (!this.#loaded.has(id)) this.#loaded.set(id, { name, path: found.path, origin: found.origin });
    return { backend: loaded, path: found.path, origin: found.origin };
  }

  /**
   * The modules `load` has returned so far, once each by name and file: a module that failed to
   * import is not one; the model load that asked for it may still have failed later.
   */
  loaded(): CustomBackendModule[] {
    return [...this.#loaded.values()];
  }
}
