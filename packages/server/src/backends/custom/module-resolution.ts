/**
 * Where the JavaScript module of a custom backend is found (docs/backends.md, mirroring Triton's
 * library search of models-and-scheduling.md §1.3). For backend `B` of model `M`, version `V`:
 *
 *   1. `<repo>/M/V/<file>`, then `<repo>/M/<file>`, where `<file>` is the config's `runtime` when
 *      it names a `.mjs`/`.js`/`.cjs` file, else the first of `model.mjs`, `model.js`, `model.cjs`;
 *   2. `<backend-directory>/B/`: with a JS `runtime`, that file in it; else the directory as a
 *      package (`package.json` `exports`/`main`, else `index.mjs`/`index.js`/`index.cjs`);
 *   3. the module named by `--backend-config=B,module=<specifier>`, else the npm package
 *      `nereid-backend-B`: a path (relative to the working directory) or a package found in
 *      `node_modules` above the working directory, then above Nereid's own installation.
 *
 * The first that exists wins; the search does not import anything.
 */
import { existsSync, readFileSync, statSync } from 'node:fs';
import { dirname, isAbsolute, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

export type ModuleOrigin = 'version directory' | 'model directory' | 'backend directory' | 'package';

export interface ModuleSearch {
  /** The config's `backend`. */
  readonly backend: string;
  readonly modelDirectory: string;
  readonly versionDirectory: string;
  /** The config's `runtime` ('' when unset). */
  readonly runtime: string;
  /** `--backend-directory`, when given. */
  readonly backendDirectory?: string | undefined;
  /** `--backend-config=<backend>,module=<specifier>`, when given. */
  readonly moduleSpecifier?: string | undefined;
  /** Where relative specifiers and the `node_modules` walk start; default the working directory. */
  readonly cwd?: string;
}

export interface ResolvedModule {
  /** Absolute path of the module file. */
  readonly path: string;
  readonly origin: ModuleOrigin;
}

export interface ModuleSearchResult {
  readonly found: ResolvedModule | undefined;
  /** Every place looked at, in order, for the error that says nothing was found. */
  readonly searched: readonly string[];
}

const MODEL_FILES = ['model.mjs', 'model.js', 'model.cjs'];
const INDEX_FILES = ['index.mjs', 'index.js', 'index.cjs'];
const JS_FILE = /\.(mjs|cjs|js)$/;
/** Export conditions honoured in `package.json` `exports`, in order of preference. */
const CONDITIONS = ['import', 'node', 'default', 'require'];
/** Nereid's own installation: packages installed beside it are found from here. */
const SERVER_DIRECTORY = dirname(fileURLToPath(import.meta.url));

export function packageNameFor(backend: string): string {
  return `nereid-backend-${backend}`;
}

function isFile(path: string): boolean {
  try {
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

function isDirectory(path: string): boolean {
  try {
    return statSync(path).isDirectory();
  } catch {
    return false;
  }
}

export function findBackendModule(search: ModuleSearch): ModuleSearchResult {
  const searched: string[] = [];
  const files = JS_FILE.test(search.runtime) ? [search.runtime] : MODEL_FILES;
  for (const [dir, origin] of [
    [search.versionDirectory, 'version directory'],
    [search.modelDirectory, 'model directory'],
  ] as const) {
    for (const file of files) {
      const path = join(dir, file);
      searched.push(path);
      if (isFile(path)) return { found: { path, origin }, searched };
    }
  }
  if (search.backendDirectory !== undefined && search.backendDirectory !== '') {
    const dir = resolve(search.cwd ?? process.cwd(), search.backendDirectory, search.backend);
    searched.push(`${dir}/`);
    const path = JS_FILE.test(search.runtime) ? (isFile(join(dir, search.runtime)) ? join(dir, search.runtime) : undefined) : packageEntry(dir);
    if (path !== undefined) return { found: { path, origin: 'backend directory' }, searched };
  }
  const specifier = search.moduleSpecifier ?? packageNameFor(search.backend);
  searched.push(`module '${specifier}'`);
  const path = resolveSpecifier(specifier, search.cwd ?? process.cwd());
  return { found: path === undefined ? undefined : { path, origin: 'package' }, searched };
}

/** A path (file or package directory) or a bare package specifier, to the module file. */
function resolveSpecifier(specifier: string, cwd: string): string | undefined {
  if (specifier.startsWith('.') || isAbsolute(specifier)) {
    const path = resolve(cwd, specifier);
    return isFile(path) ? path : isDirectory(path) ? packageEntry(path) : undefined;
  }
  const parts = specifier.split('/');
  const nameLength = specifier.startsWith('@') ? 2 : 1;
  const name = parts.slice(0, nameLength).join('/');
  const subpath = parts.slice(nameLength).join('/');
  for (const base of [cwd, SERVER_DIRECTORY]) {
    for (let dir = base; ; dir = dirname(dir)) {
      const pkg = join(dir, 'node_modules', name);
      if (isDirectory(pkg)) {
        if (subpath === '') return packageEntry(pkg);
        const path = join(pkg, subpath);
        return isFile(path) ? path : isDirectory(path) ? packageEntry(path) : undefined;
      }
      if (dirname(dir) === dir) break;
    }
  }
  return undefined;
}

/** The main module of a package directory, or undefined. */
function packageEntry(dir: string): string | undefined {
  if (!isDirectory(dir)) return undefined;
  const manifest = join(dir, 'package.json');
  if (existsSync(manifest)) {
    let pkg: { exports?: unknown; main?: unknown };
    try {
      pkg = JSON.parse(readFileSync(manifest, 'utf8')) as { exports?: unknown; main?: unknown };
    } catch {
      return undefined;
    }
    const target = exportTarget(pkg.exports) ?? (typeof pkg.main === 'string' ? pkg.main : undefined);
    if (target !== undefined) {
      for (const candidate of [target, `${target}.js`, join(target, 'index.js')]) {
        const path = resolve(dir, candidate);
        if (isFile(path)) return path;
      }
      return undefined;
    }
  }
  for (const file of INDEX_FILES) {
    if (isFile(join(dir, file))) return join(dir, file);
  }
  return undefined;
}

/** The `.` entry of a `package.json` `exports` field. */
function exportTarget(exports: unknown): string | undefined {
  if (typeof exports === 'string') return exports;
  if (exports === null || typeof exports !== 'object' || Array.isArray(exports)) return undefined;
  const map = exports as Record<string, unknown>;
  if ('.' in map) return exportTarget(map['.']);
  for (const condition of CONDITIONS) {
    if (condition in map) {
      const target = exportTarget(map[condition]);
      if (target !== undefined) return target;
    }
  }
  return undefined;
}
