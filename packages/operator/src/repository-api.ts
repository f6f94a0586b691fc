/**
 * The model repository API of one Nereid pod (Triton's repository extension over HTTP):
 * load with a `config` override and `file:` contents, unload, and the index.
 */
import { NereidError } from '@nereid/protocol';

export interface IndexEntry {
  name: string;
  version?: string;
  state?: string;
  reason?: string;
}

export interface LoadRequest {
  /** The repository API's `config` parameter (ModelConfig JSON), sent as a JSON string. */
  config?: Record<string, unknown>;
  /** `file:<path>` overrides: path within the model directory → contents. */
  files?: Record<string, Buffer>;
}

export interface RepositoryApiOptions {
  timeoutMs?: number;
}

/**
 * HTTP calls to `http://<podIP>:<port>`. Failures throw NereidError: UNAVAILABLE when the pod
 * cannot be reached, MODEL_LOAD_FAILED / MODEL_UNLOAD_FAILED with the server's error text.
 */
export class RepositoryApi {
  readonly base: string;
  #timeoutMs: number;

  constructor(host: string, port: number, options: RepositoryApiOptions = {}) {
    this.base = `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
    this.#timeoutMs = options.timeoutMs ?? 120_000;
  }

  /** Loads (or reloads) `name`; throws MODEL_LOAD_FAILED with the server's error text. */
  async load(name: string, request: LoadRequest = {}): Promise<void> {
    const parameters: Record<string, string> = {};
    if (request.config) parameters.config = JSON.stringify(request.config);
    for (const [path, content] of Object.entries(request.files ?? {})) parameters[`file:${path}`] = content.toString('base64');
    const body = Object.keys(parameters).length > 0 ? { parameters } : {};
    await this.#post(`/v2/repository/models/${encodeURIComponent(name)}/load`, body, 'MODEL_LOAD_FAILED');
  }

  async unload(name: string): Promise<void> {
    await this.#post(`/v2/repository/models/${encodeURIComponent(name)}/unload`, {}, 'MODEL_UNLOAD_FAILED');
  }

  async index(): Promise<IndexEntry[]> {
    const text = await this.#post('/v2/repository/index', {}, 'UNAVAILABLE');
    return JSON.parse(text) as IndexEntry[];
  }

  async #post(path: string, body: unknown, code: 'MODEL_LOAD_FAILED' | 'MODEL_UNLOAD_FAILED' | 'UNAVAILABLE'): Promise<string> {
    let res: Response;
    try {
      res = await fetch(this.base + path, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
    } catch (err) {
      throw new NereidError('UNAVAILABLE', `${this.base}${path}: ${(err as Error).message}`, { cause: err });
    }
    const text = await res.text();
    if (!res.ok) {
      let message = text;
      try {
        message = (JSON.parse(text) as { error?: string }).error ?? text;
      } catch {
        // plain text error
      }
      throw new NereidError(code, message);
    }
    return text;
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
