/**
 * Maps `backend` names to implementations (models-and-scheduling.md §1.3). Built-in backends are
 * registered at construction; embedders may register their own; any other name is looked up as
 * a custom backend module (custom/custom-backends.ts), and names of Triton backends Nereid cannot
 * run are refused with an error that says so (unsupported.ts).
 */
import { readFileSync } from 'node:fs';
import { NereidError } from '@nereid/protocol';
import { CustomBackendLoader, type BackendLookup, type CustomBackendOptions } from './custom/custom-backends.js';
import type { ModuleOrigin } from './custom/module-resolution.js';
import { onnxRuntimeVersion } from './onnxruntime/native-session.js';
import { onnxRuntimeBackend } from './onnxruntime/onnxruntime-backend.js';
import { openvinoBackend, tensorflowBackend } from './python/framework-backends.js';
import { pythonBackend, pytorchBackend } from './python/python-backend.js';
import { BACKEND_SPI_VERSION, type Backend } from './spi.js';
import { unsupportedBackendMessage } from './unsupported.js';

/** A backend as the start-up backend table shows it. */
export interface BackendSource {
  readonly name: string;
  /** What it is and where it comes from, for people. */
  readonly source: string;
}

/** What each built-in backend is; a backend registered by an embedder is described by `register`. */
function builtInSource(name: string): string {
  switch (name) {
    case 'onnxruntime':
      try {
        return `built in: ONNX Runtime ${onnxRuntimeVersion()} (onnxruntime-node), on CPU`;
      } catch (err) {
        return `built in, unavailable: ${(err as Error).message}`;
      }
    case 'python':
      return 'built in: model.py, one Python stub process per instance';
    case 'pytorch':
      return 'built in: TorchScript model.pt, one Python stub process per instance';
    case 'openvino':
      return 'built in: OpenVINO model.xml or model.onnx on CPU, one Python stub process per instance';
    case 'tensorflow':
      return `built in: TensorFlow SavedModel/GraphDef (${pinnedRuntime('tensorflow-cpu')}), one Python stub per instance`;
    default:
      return 'built in';
  }
}

/** `<package> <version>` as packages/server/python/runtimes-requirements.txt pins it (what `node scripts/setup.mjs runtimes` installs). */
function pinnedRuntime(pkg: string): string {
  try {
    const text = readFileSync(new URL('../../python/runtimes-requirements.txt', import.meta.url), 'utf8');
    const pin = new RegExp(`^${pkg}==(\\S+)`, 'm').exec(text);
    return pin ? `${pkg} ${pin[1]!}` : pkg;
  } catch {
    return pkg;
  }
}

/** Where a custom backend module was found, as the backend table says it. */
const ORIGINS: Readonly<Record<ModuleOrigin, string>> = {
  'version directory': "in the model's version directory",
  'model directory': 'in the model directory',
  'backend directory': 'in --backend-directory',
  package: 'a package or --backend-config module',
};

export class BackendRegistry {
  readonly #backends = new Map<string, Backend>();
  readonly #sources = new Map<string, string>();
  readonly #custom: CustomBackendLoader;

  constructor(builtIn: readonly Backend[] = [onnxRuntimeBackend, pythonBackend, pytorchBackend, openvinoBackend, tensorflowBackend], custom: CustomBackendOptions = {}) {
    for (const b of builtIn) this.register(b, builtInSource(b.name));
    this.#custom = new CustomBackendLoader(custom);
  }

  /** Registers `backend` under its name; `source` says what it is in the start-up backend table. */
  register(backend: Backend, source = 'registered by the program that embeds Nereid'): void {
    if (backend.spiVersion !== BACKEND_SPI_VERSION) {
      throw new NereidError(
        'CONFIG_UNSUPPORTED',
        `backend '${backend.name}' implements SPI version ${String(backend.spiVersion)}, this server implements version ${BACKEND_SPI_VERSION}`,
      );
    }
    this.#backends.set(backend.name, backend);
    this.#sources.set(backend.name, source);
  }

  /**
   * The backends for the start-up table: every registered one, by name, then every custom
   * backend module a model load has used so far (one row per module file).
   */
  describe(): BackendSource[] {
    return [
      ...this.names().map((name) => ({ name, source: this.#sources.get(name)! })),
      ...this.#custom.loaded().map((m) => ({ name: m.name, source: `custom: JavaScript module ${m.path} (${ORIGINS[m.origin]})` })),
    ];
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
