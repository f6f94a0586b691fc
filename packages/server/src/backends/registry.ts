/**
 * Maps `backend` names to implementations (models-and-scheduling.md §1.3). Built-in backends are
 * registered at construction; embedders may register their own; any other name is looked up as
 * a custom backend module (custom/custom-backends.ts), and names of Triton backends Nereid cannot
 * run are refused with an error that says so (unsupported.ts).
 */
import { NereidError } from '@nereid/protocol';
import { CustomBackendLoader, type BackendLookup, type CustomBackendOptions } from './custom/custom-backends.js';
import { onnxRuntimeBackend } from './onnxruntime/onnxruntime-backend.js';
import { pythonBackend, pytorchBackend } from './python/python-backend.js';
import { BACKEND_SPI_VERSION, type Backend } from './spi.js';
import { unsupportedBackendMessage } from './unsupported.js';

export class BackendRegistry {
  readonly #backends = new Map<string, Backend>();
  readonly #custom: CustomBackendLoader;

  constructor(builtIn: readonly Backend[] = [onnxRuntimeBackend, pythonBackend, pytorchBackend], custom: CustomBackendOptions = {}) {
    for (const b of builtIn) this.register(b);
    this.#custom = new CustomBackendLoader(custom);
  }

  register(backend: Backend): void {
    if (backend.spiVersion !== BACKEND_SPI_VERSION) {
      throw new NereidError(
        'CONFIG_UNSUPPORTED',
        `backend '${backend.name}' implements SPI version ${String(backend.spiVersion)}, this server implements version ${BACKEND_SPI_VERSION}`,
      );
    }
    this.#backends.set(backend.name, backend);
  }

  names(): string[] {
    return [...this.#backends.keys()].sort();
  }

  /** A registered backend, or a load error naming what is available. */
  get(name: string, model: string): Backend {
    const backend = this.#backends.get(name);
    if (backend === undefined) throw this.#notFound(name, model, []);
    return backend;
  }

  /**
   * The backend for a model: a registered one, else a custom backend module found for the model
   * (docs/backends.md), else a load error: BACKEND_UNSUPPORTED for a Triton backend Nereid cannot
   * run, BACKEND_NOT_FOUND naming every place looked at otherwise.
   */
  async resolve(name: string, lookup: BackendLookup): Promise<Backend> {
    const registered = this.#backends.get(name);
    if (registered !== undefined) return registered;
    const custom = await this.#custom.load(name, lookup);
    if ('backend' in custom) return custom.backend;
    throw this.#notFound(name, lookup.model, custom.searched);
  }

  #notFound(name: string, model: string, searched: readonly string[]): NereidError {
    const unsupported = unsupportedBackendMessage(name, model, this.names());
    if (unsupported !== undefined) return new NereidError('BACKEND_UNSUPPORTED', unsupported);
    const looked = searched.length > 0 ? `; no custom backend module was found (looked for ${searched.join(', ')})` : '';
    return new NereidError(
      'BACKEND_NOT_FOUND',
      `unable to find backend '${name}' for model '${model}'; available backends: ${this.names().join(', ')}${looked}`,
    );
  }
}
