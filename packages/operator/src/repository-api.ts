/**
 * The model repository API of one Nereid pod (Triton's repository extension over HTTP), through
 * `@nereid/client`'s HttpClient: load with a `config` override, `file:` contents, a version policy
 * and version weights, unload, and the index.
 */
import { HttpClient, type RepositoryIndexEntry, type VersionPolicy } from '@nereid/client';
import { NereidError, type ErrorCode } from '@nereid/protocol';

export type IndexEntry = RepositoryIndexEntry;

export interface LoadRequest {
  /** The repository API's `config` parameter (ModelConfig JSON), sent as a JSON string. */
  config?: Record<string, unknown>;
  /** `file:<path>` overrides: path within the model directory → contents. */
  files?: Record<string, Buffer>;
  /** The `version_weights` load parameter: version → weight of unversioned requests; `{}` clears them. */
  versionWeights?: Record<string, number>;
  /**
   * The `version_policy` load parameter: the versions to serve, applied over the configuration
   * the pod reads from its repository (or over `config`), which otherwise stays as it is.
   */
  versionPolicy?: VersionPolicy;
}

export interface RepositoryApiOptions {
  timeoutMs?: number;
}

/**
 * Calls to `http://<podIP>:<port>`. Failures throw NereidError: UNAVAILABLE when the pod cannot
 * be reached or answers the index with an error, MODEL_LOAD_FAILED / MODEL_UNLOAD_FAILED with the
 * server's error text.
 */
export class RepositoryApi {
  readonly base: string;
  readonly #client: HttpClient;

  constructor(host: string, port: number, options: RepositoryApiOptions = {}) {
    this.base = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
    this.#client = new HttpClient(this.base, { timeout: options.timeoutMs ?? 120_000 });
  }

  /** Loads (or reloads) `name`; throws MODEL_LOAD_FAILED with the server's error text. */
  load(name: string, request: LoadRequest = {}): Promise<void> {
    return failingAs('MODEL_LOAD_FAILED', this.#client.loadModel(name, request));
  }

  unload(name: string): Promise<void> {
    return failingAs('MODEL_UNLOAD_FAILED', this.#client.unloadModel(name));
  }

  index(): Promise<IndexEntry[]> {
    return failingAs('UNAVAILABLE', this.#client.repositoryIndex());
  }
}

/** `call`, with its failure as a NereidError of `code`: the server's error text, or why the pod could not be reached. */
async function failingAs<T>(code: ErrorCode, call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (err) {
    throw new NereidError(code, (err as Error).message, { cause: err });
  }
}

/**
 * The state of `name` in an index: READY when every wanted version (or, with none given, some
 * version) is READY; otherwise the first not-ready entry's state and reason.
 */
export function modelState(index: IndexEntry[], name: string, versions?: number[]): { state: string; reason?: string } {
  const entries = index.filter((e) => e.name === name);
  if (entries.length === 0) return { state: 'NOT_LOADED', reason: 'not in the server’s index' };
  if (versions && versions.length > 0) {
    for (const v of versions) {
      const entry = entries.find((e) => e.version === String(v));
      if (!entry) return { state: 'UNAVAILABLE', reason: `version ${v} is not loaded` };
      if (entry.state !== 'READY') return { state: entry.state ?? 'UNKNOWN', reason: entry.reason };
    }
    return { state: 'READY' };
  }
  if (entries.some((e) => e.state === 'READY')) return { state: 'READY' };
  const entry = entries.find((e) => e.reason) ?? entries[0];
  return { state: entry.state ?? 'UNKNOWN', reason: entry.reason };
}
