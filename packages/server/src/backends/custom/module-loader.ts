/**
 * Imports a custom backend module and checks that it implements the SPI (docs/backends.md).
 *
 * A module exports a `Backend` as its default export or as `backend`, or a `BackendFactory`
 * (a function receiving `BackendFactoryOptions` and returning a `Backend`, possibly async).
 *
 * Reloads: a module is imported under a URL that carries a hash of its file's content, so a
 * changed file is imported afresh while an unchanged one is shared. Node keeps every imported
 * version in memory, and modules the entry file imports are cached by Node under their own URLs:
 * only the entry file is re-read.
 */
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';
import { ERROR_CODES, NereidError, type ErrorCode } from '@nereid/protocol';
import type { Logger } from '../../observability/logger.js';
import { BACKEND_SPI_VERSION, type Backend, type BackendInstance, type BackendModel } from '../spi.js';

/** What a factory export receives. */
export interface BackendFactoryOptions {
  /** The backend name the model's config asked for. */
  readonly name: string;
  /** The SPI version of this server. */
  readonly spiVersion: typeof BACKEND_SPI_VERSION;
  /** `--backend-config` settings for this backend, plus global ones. */
  readonly backendConfig: Readonly<Record<string, string>>;
  readonly logger: Logger;
}

/** A module's factory export. */
export type BackendFactory = (options: BackendFactoryOptions) => Backend | Promise<Backend>;

const require = createRequire(import.meta.url);

/** The module URL with a hash of its content as query: a changed file gets a new URL. */
export async function versionedModuleUrl(path: string): Promise<string> {
  let content: Buffer;
  try {
    content = await readFile(path);
  } catch (err) {
    throw new NereidError('BACKEND_MODULE_INVALID', `cannot read custom backend module '${path}': ${(err as Error).message}`, { cause: err });
  }
  const hash = createHash('sha256').update(content).digest('hex').slice(0, 16);
  return `${pathToFileURL(path).href}?content=${hash}`;
}

/** `model 'm': custom backend 'b' (/path/model.mjs)`: how load errors name a module. */
export function describeModule(model: string, backend: string, path: string): string {
  return `model '${model}': custom backend '${backend}' (${path})`;
}

/**
 * A NereidError for anything a backend threw: NereidErrors (also from another copy of
 * `@nereid/protocol`, recognised by name and registered code) keep code and message.
 */
export function backendError(err: unknown, code: ErrorCode, context: string): NereidError {
  if (err instanceof NereidError) return err;
  if (err instanceof Error && err.name === 'NereidError') {
    const c = (err as { code?: unknown }).code;
    if (typeof c === 'string' && c in ERROR_CODES) return new NereidError(c as ErrorCode, err.message, { cause: err });
  }
  const text = err instanceof Error ? `${err.name === 'Error' ? '' : `${err.name}: `}${err.message}` : String(err);
  return new NereidError(code, `${context}: ${text}`, { cause: err });
}

/**
 * Where a syntax error is (`/path/model.mjs:3`, with the offending line): Node's ES module loader
 * does not say, so the file is checked by `node --check` (on this error path only).
 */
function syntaxErrorLocation(err: unknown, path: string): string {
  if (!(err instanceof SyntaxError)) return '';
  const check = spawnSync(process.execPath, ['--check', path], { encoding: 'utf8', timeout: 5_000 });
  const lines = (check.stderr ?? '').split('\n');
  const at = lines.findIndex((l) => l.startsWith(`${path}:`));
  if (at < 0) return '';
  const code = lines[at + 1]?.trim();
  return ` at ${lines[at]}${code ? ` (\`${code}\`)` : ''}`;
}

/**
 * Imports the module at `url` (from `versionedModuleUrl`) and returns its namespace. Import
 * failures become BACKEND_MODULE_INVALID errors naming the model and the file.
 */
export async function importBackendModule(url: string, path: string, where: string): Promise<Record<string, unknown>> {
  // A CommonJS module is cached by file name in require.cache whatever the URL's query.
  delete require.cache[path];
  try {
    return (await import(url)) as Record<string, unknown>;
  } catch (err) {
    let hint = '';
    const message = err instanceof Error ? err.message : String(err);
    if (/Cannot use import statement outside a module|Unexpected token 'export'/.test(message)) {
      hint = '; the file was loaded as CommonJS: name it model.mjs, or put a package.json with "type": "module" beside it';
    }
    throw new NereidError(
      'BACKEND_MODULE_INVALID',
      `${where} failed to import${syntaxErrorLocation(err, path)}: ${err instanceof Error ? err.name : 'Error'}: ${message}${hint}`,
      { cause: err },
    );
  }
}

/** The export that holds the backend: `default`, else `backend` (unwrapping CommonJS exports). */
function backendExport(ns: Record<string, unknown>): unknown {
  let candidate = ns['default'] ?? ns['backend'];
  // `module.exports = { backend }` or a transpiled `exports.default = …`, seen through `default`.
  if (candidate !== null && typeof candidate === 'object' && !('createModel' in candidate)) {
    const inner = (candidate as Record<string, unknown>)['backend'] ?? (candidate as Record<string, unknown>)['default'];
    if (inner !== undefined) candidate = inner;
  }
  return candidate;
}

/**
 * The `Backend` a module namespace provides, checked against the SPI and guarded so that its
 * failures become load errors naming the model and the module (`where`).
 */
export async function backendFromModule(ns: Record<string, unknown>, options: BackendFactoryOptions, where: string): Promise<Backend> {
  let candidate = backendExport(ns);
  if (candidate === undefined) {
    throw new NereidError(
      'BACKEND_MODULE_INVALID',
      `${where} exports no backend: export the Backend object as the default export or as 'backend', or export a factory function returning one (exports found: ${Object.keys(ns).join(', ') || 'none'})`,
    );
  }
  if (typeof candidate === 'function') {
    try {
      candidate = await (candidate as BackendFactory)(options);
    } catch (err) {
      throw backendError(err, 'BACKEND_MODULE_INVALID', `${where}: the backend factory failed`);
    }
  }
  return guardBackend(checkBackend(candidate, options.name, where), options.name, where);
}

function checkBackend(candidate: unknown, name: string, where: string): Backend {
  const fail = (what: string) => new NereidError('BACKEND_MODULE_INVALID', `${where} ${what}`);
  if (candidate === null || typeof candidate !== 'object') throw fail(`exports ${candidate === null ? 'null' : typeof candidate} where a Backend object was expected`);
  const b = candidate as Partial<Record<keyof Backend, unknown>>;
  if (b.spiVersion !== BACKEND_SPI_VERSION) {
    throw fail(
      b.spiVersion === undefined
        ? `does not declare its SPI version: set spiVersion: ${BACKEND_SPI_VERSION} on the backend`
        : `implements backend SPI version ${String(b.spiVersion)}, this server implements version ${BACKEND_SPI_VERSION}`,
    );
  }
  if (typeof b.createModel !== 'function') throw fail('has no createModel function: a backend must implement createModel(ctx)');
  if (b.autoCompleteConfig !== undefined && typeof b.autoCompleteConfig !== 'function') throw fail('has an autoCompleteConfig that is not a function');
  if (b.defaultCpuInstanceCount !== undefined && !(Number.isInteger(b.defaultCpuInstanceCount) && (b.defaultCpuInstanceCount as number) > 0)) {
    throw fail(`has defaultCpuInstanceCount ${String(b.defaultCpuInstanceCount)}; it must be a positive integer`);
  }
  if (b.name !== undefined && b.name !== name) {
    throw fail(`declares backend name '${String(b.name)}' but the model's config asks for backend '${name}'; make them equal`);
  }
  return candidate as Backend;
}

/** A backend whose model, instance and auto-complete failures name the model and module. */
function guardBackend(backend: Backend, name: string, where: string): Backend {
  const guarded: Backend = {
    name,
    spiVersion: BACKEND_SPI_VERSION,
    ...(backend.defaultCpuInstanceCount !== undefined ? { defaultCpuInstanceCount: backend.defaultCpuInstanceCount } : {}),
    async createModel(ctx) {
      let model: BackendModel;
      try {
        model = await backend.createModel(ctx);
      } catch (err) {
        throw backendError(err, 'MODEL_LOAD_FAILED', `${where}: createModel failed`);
      }
      if (model === null || typeof model !== 'object' || typeof model.createInstance !== 'function' || typeof model.unload !== 'function') {
        throw new NereidError('BACKEND_MODULE_INVALID', `${where}: createModel must return an object with createInstance(spec) and unload() functions`);
      }
      return {
        async createInstance(spec) {
          let instance: BackendInstance;
          try {
            instance = await model.createInstance(spec);
          } catch (err) {
            throw backendError(err, 'MODEL_LOAD_FAILED', `${where}: createInstance failed for instance '${spec.name}'`);
          }
          if (instance === null || typeof instance !== 'object' || typeof instance.execute !== 'function' || typeof instance.unload !== 'function') {
            throw new NereidError('BACKEND_MODULE_INVALID', `${where}: createInstance must return an object with execute(requests, timing) and unload() functions`);
          }
          return instance;
        },
        unload: () => model.unload(),
      };
    },
  };
  if (backend.autoCompleteConfig) {
    const autoComplete = backend.autoCompleteConfig.bind(backend);
    guarded.autoCompleteConfig = async (ctx) => {
      let config;
      try {
        config = await autoComplete(ctx);
      } catch (err) {
        throw backendError(err, 'MODEL_LOAD_FAILED', `${where}: autoCompleteConfig failed`);
      }
      if (config === null || typeof config !== 'object') {
        throw new NereidError('BACKEND_MODULE_INVALID', `${where}: autoCompleteConfig must return the completed configuration`);
      }
      return config;
    };
  }
  return guarded;
}
