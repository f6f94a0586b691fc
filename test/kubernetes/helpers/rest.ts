/**
 * A small REST client of the Kubernetes API for the test harness: JSON requests with any patch
 * content type, and watches as a stream of events. Credentials and TLS come from a KubeConfig.
 */
import { request, type RequestOptions } from 'node:https';
import type { IncomingMessage } from 'node:http';
import type { KubeConfig } from '@kubernetes/client-node';

/** An answer of the API server with a status outside 2xx. */
export class ApiError extends Error {
  readonly status: number;
  readonly body: unknown;
  constructor(method: string, path: string, status: number, body: unknown) {
    const message = typeof body === 'object' && body !== null && 'message' in body ? String((body as { message: unknown }).message) : String(body);
    super(`${method} ${path}: HTTP ${status}: ${message}`);
    this.status = status;
    this.body = body;
  }
}

export interface WatchEvent<T> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

export interface Watch {
  /** Ends the watch; `done` then resolves. */
  stop(): void;
  /** Resolves when the server ends the stream or `stop()` is called; rejects on a transport error. */
  readonly done: Promise<void>;
}

export class Rest {
  readonly #kc: KubeConfig;
  readonly #server: URL;

  constructor(kc: KubeConfig) {
    this.#kc = kc;
    const cluster = kc.getCurrentCluster();
    if (!cluster) throw new Error('the kubeconfig has no current cluster');
    this.#server = new URL(cluster.server);
  }

  async #options(method: string, path: string, headers: Record<string, string>): Promise<RequestOptions> {
    const options: RequestOptions = {
      method,
      host: this.#server.hostname,
      port: this.#server.port,
      path,
      headers: { Accept: 'application/json', ...headers },
    };
    await this.#kc.applyToHTTPSOptions(options);
    return options;
  }

  /**
   * A JSON request; resolves to the parsed body, throws ApiError on a non-2xx status. `accept`
   * asks for another representation (for example a meta.k8s.io Table, as kubectl get does).
   */
  async request<T = unknown>(method: string, path: string, body?: unknown, contentType = 'application/json', accept?: string): Promise<T> {
    const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
    const headers: Record<string, string> = payload ? { 'Content-Type': contentType, 'Content-Length': String(payload.length) } : {};
    if (accept !== undefined) headers.Accept = accept;
    const options = await this.#options(method, path, headers);
    const res = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request(options, (r) => {
        let text = '';
        r.setEncoding('utf8');
        r.on('data', (chunk: string) => (text += chunk));
        r.on('end', () => resolve({ status: r.statusCode ?? 0, text }));
        r.on('error', reject);
      });
      req.setTimeout(30_000, () => req.destroy(new Error(`${method} ${path}: no answer in 30 s`)));
      req.on('error', reject);
      req.end(payload);
    });
    let parsed: unknown = res.text;
    try {
      parsed = res.text === '' ? undefined : JSON.parse(res.text);
    } catch {
      // not JSON: kept as text
    }
    if (res.status < 200 || res.status > 299) throw new ApiError(method, path, res.status, parsed);
    return parsed as T;
  }

  /** Watches `path` (a collection) from `resourceVersion`; `onEvent` gets each event in order. */
  async watch<T>(path: string, resourceVersion: string, onEvent: (event: WatchEvent<T>) => void): Promise<Watch> {
    const sep = path.includes('?') ? '&' : '?';
    const full = `${path}${sep}watch=1&allowWatchBookmarks=true&resourceVersion=${encodeURIComponent(resourceVersion)}`;
    const options = await this.#options('GET', full, {});
    let req: ReturnType<typeof request> | undefined;
    let stopped = false;
    const done = new Promise<void>((resolve, reject) => {
      req = request(options, (res: IncomingMessage) => {
        if ((res.statusCode ?? 0) !== 200) {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => reject(new ApiError('GET', full, res.statusCode ?? 0, text)));
          return;
        }
        let buffer = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          buffer += chunk;
          let nl: number;
          while ((nl = buffer.indexOf('\n')) >= 0) {
            const line = buffer.slice(0, nl).trim();
            buffer = buffer.slice(nl + 1);
            if (line === '' || stopped) continue;
            onEvent(JSON.parse(line) as WatchEvent<T>);
          }
        });
        res.on('end', () => resolve());
        res.on('close', () => resolve());
        res.on('error', (err) => (stopped ? resolve() : reject(err)));
      });
      req.on('error', (err) => (stopped ? resolve() : reject(err)));
      // A watch alone does not keep the test process alive (a forgotten stop() must not hang it).
      req.on('socket', (socket) => socket.unref());
      req.end();
    });
    return {
      stop() {
        stopped = true;
        req?.destroy();
      },
      done,
    };
  }
}
