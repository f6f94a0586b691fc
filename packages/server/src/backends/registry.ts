/**
 * Maps `backend` names to implementations (models-and-scheduling.md §1.3). Built-in backends are
 * registered at construction; embedders may register their own.
 */
import { NereidError } from '@nereid/protocol';
import { onnxRuntimeBackend } from './onnxruntime/onnxruntime-backend.js';
import { pythonBackend, pytorchBackend } from './python/python-backend.js';
import { BACKEND_SPI_VERSION, type Backend } from './spi.js';

export class BackendRegistry {
  readonly #backends = new Map<string, Backend>();

  constructor(builtIn: readonly Backend[] = [onnxRuntimeBackend, pythonBackend, pytorchBackend]) {
    for (const b of builtIn) this.register(b);
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

  /** The backend for a model, or a load error naming what is available. */
  get(name: string, model: string): Backend {
    const backend = this.#backends.get(name);
    if (backend === undefined) {
      throw new NereidError(
        'BACKEND_NOT_FOUND',
        `unable to find backend '${name}' for model '${model}'; available backends: ${this.names().join(', ')}`,
      );
    }
    return backend;
  }
}
