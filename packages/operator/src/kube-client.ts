/**
 * A small Kubernetes REST client: JSON requests and streamed watches over node:https, with the
 * credentials and TLS settings of a @kubernetes/client-node KubeConfig (client certificates,
 * bearer tokens, exec plugins, in-cluster service-account tokens).
 *
 * The generated API classes of client-node are not used: the operator needs exact control over
 * resourceVersion preconditions, patch content types (server-side apply, strategic merge, JSON
 * merge), status subresources and watch streams, and one error type carrying the API's Status.
 */
import http from 'node:http';
import https from 'node:https';
import { NereidError } from '@nereid/protocol';
import type { KubeConfig } from '@kubernetes/client-node';

/** A Kubernetes object as the operator handles it: the API's JSON. */
export interface KubeObject {
  apiVersion?: string;
  kind?: string;
  metadata: ObjectMeta;
  [field: string]: unknown;
}

export interface OwnerReference {
  apiVersion: string;
  kind: string;
  name: string;
  uid: string;
  controller?: boolean;
  blockOwnerDeletion?: boolean;
}

export interface ObjectMeta {
  name?: string;
  namespace?: string;
  uid?: string;
  resourceVersion?: string;
  generation?: number;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
  finalizers?: string[];
  ownerReferences?: OwnerReference[];
  deletionTimestamp?: string;
  creationTimestamp?: string;
  [field: string]: unknown;
}

export interface KubeList<T extends KubeObject = KubeObject> {
  items: T[];
  metadata: { resourceVersion?: string; continue?: string };
}

/** An error answered by the API server (its Status object), or a failed connection (status 0). */
export class KubeApiError extends NereidError {
  /** HTTP status; 0 when no answer came. */
  readonly status: number;
  /** The Status reason (NotFound, Conflict, Expired, Invalid, Forbidden, …) when given. */
  readonly reason: string;

  constructor(status: number, reason: string, message: string, options?: { cause?: unknown }) {
    super('KUBERNETES_API', message, options);
    this.status = status;
    this.reason = reason;
  }
}

export const isNotFound = (err: unknown): boolean => err instanceof KubeApiError && err.status === 404;
export const isConflict = (err: unknown): boolean => err instanceof KubeApiError && err.status === 409;
export const isGone = (err: unknown): boolean => err instanceof KubeApiError && err.status === 410;

export type PatchType = 'apply' | 'merge' | 'strategic' | 'json';
const PATCH_CONTENT_TYPES: Record<PatchType, string> = {
  apply: 'application/apply-patch+yaml',
  merge: 'application/merge-patch+json',
  strategic: 'application/strategic-merge-patch+json',
  json: 'application/json-patch+json',
};

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  body?: unknown;
  contentType?: string;
  signal?: AbortSignal;
  /** Milliseconds before the request is abandoned (default 30 s). */
  timeoutMs?: number;
}

/** A watch event as the API server streams it. */
export interface WatchEvent<T extends KubeObject = KubeObject> {
  type: 'ADDED' | 'MODIFIED' | 'DELETED' | 'BOOKMARK' | 'ERROR';
  object: T;
}

/** The fieldManager of every write the operator makes (the default of KubeClient). */
export const FIELD_MANAGER = 'nereid-operator';

/**
 * Requests against one API server. Safe for concurrent use; holds a keep-alive agent that
 * `close()` releases.
 */
export class KubeClient {
  readonly server: URL;
  #kubeConfig: KubeConfig;
  #agent: http.Agent;
  #fieldManager: string;

  constructor(kubeConfig: KubeConfig, options: { fieldManager?: string } = {}) {
    this.#fieldManager = options.fieldManager ?? FIELD_MANAGER;
    const cluster = kubeConfig.getCurrentCluster();
    if (!cluster) throw new NereidError('OPERATOR_OPTION', 'the kubeconfig names no current cluster');
    this.#kubeConfig = kubeConfig;
    this.server = new URL(cluster.server);
    this.#agent =
      this.server.protocol === 'https:'
        ? new https.Agent({ keepAlive: true, maxSockets: 32 })
        : new http.Agent({ keepAlive: true, maxSockets: 32 });
  }

  close(): void {
    this.#agent.destroy();
  }

  async get<T extends KubeObject>(path: string, options: RequestOptions = {}): Promise<T> {
    return this.request<T>('GET', path, options);
  }

  /** GET that answers undefined for 404 NotFound. */
  async getOptional<T extends KubeObject>(path: string, options: RequestOptions = {}): Promise<T | undefined> {
    try {
      return await this.request<T>('GET', path, options);
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  async list<T extends KubeObject>(path: string, query: RequestOptions['query'] = {}, signal?: AbortSignal): Promise<KubeList<T>> {
    return this.request<KubeList<T>>('GET', path, { query, signal });
  }

  async create<T extends KubeObject>(path: string, body: KubeObject, options: { timeoutMs?: number } = {}): Promise<T> {
    return this.request<T>('POST', path, { body, query: { fieldManager: this.#fieldManager }, timeoutMs: options.timeoutMs });
  }

  /** PUT: the body's metadata.resourceVersion makes it conditional (409 Conflict when stale). */
  async replace<T extends KubeObject>(path: string, body: KubeObject, options: { timeoutMs?: number } = {}): Promise<T> {
    return this.request<T>('PUT', path, { body, query: { fieldManager: this.#fieldManager }, timeoutMs: options.timeoutMs });
  }

  async patch<T extends KubeObject>(path: string, type: PatchType, body: unknown, force = false): Promise<T> {
    const query: RequestOptions['query'] = { fieldManager: this.#fieldManager };
    if (type === 'apply' && force) query.force = true;
    return this.request<T>('PATCH', path, { body, contentType: PATCH_CONTENT_TYPES[type], query });
  }

  /**
   * Server-side apply of an object the operator owns, taking over fields others changed (drift).
   * `fieldManager` applies as another manager than the client's (a hand-over of one field).
   */
  async apply<T extends KubeObject>(path: string, body: KubeObject, fieldManager?: string): Promise<T> {
    if (fieldManager === undefined) return this.patch<T>(path, 'apply', body, true);
    return this.request<T>('PATCH', path, { body, contentType: PATCH_CONTENT_TYPES.apply, query: { fieldManager, force: true } });
  }

  async delete(path: string, options: { propagationPolicy?: 'Foreground' | 'Background' | 'Orphan' } = {}): Promise<void> {
    await this.request('DELETE', path, {
      body: options.propagationPolicy ? { kind: 'DeleteOptions', apiVersion: 'v1', propagationPolicy: options.propagationPolicy } : undefined,
    });
  }

  /** One JSON request. Throws KubeApiError for non-2xx answers and failed connections. */
  async request<T>(method: string, path: string, options: RequestOptions = {}): Promise<T> {
    const res = await this.#send(method, path, options);
    const body = await readBody(res);
    if (res.statusCode === undefined || res.statusCode >= 300) throw apiError(res.statusCode ?? 0, body, method, path);
    return (body.length === 0 ? {} : JSON.parse(body)) as T;
  }

  /**
   * Opens a watch stream and calls `onEvent` for every event, in order, awaiting each. Resolves
   * when the server ends the stream (timeoutSeconds), rejects with KubeApiError on an error answer
   * (410 Gone for an expired resourceVersion) or a broken connection. An ERROR event is returned
   * to the caller as a rejection carrying its Status code. `signal` ends the watch (resolves).
   */
  async watch<T extends KubeObject>(
    path: string,
    query: RequestOptions['query'],
    onEvent: (event: WatchEvent<T>) => void | Promise<void>,
    signal: AbortSignal,
  ): Promise<void> {
    let res: http.IncomingMessage;
    try {
      // A connection that goes silent past the server's own timeout is dead: drop it.
      const idleMs = (Number(query?.timeoutSeconds ?? 300) + 30) * 1000;
      res = await this.#send('GET', path, { query: { ...query, watch: true }, signal, timeoutMs: idleMs });
    } catch (err) {
      if (signal.aborted) return;
      throw err;
    }
    if (res.statusCode === undefined || res.statusCode >= 300) {
      throw apiError(res.statusCode ?? 0, await readBody(res), 'WATCH', path);
    }
    let buffered = '';
    try {
      for await (const chunk of res) {
        buffered += (chunk as Buffer).toString('utf8');
        let newline: number;
        while ((newline = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, newline).trim();
          buffered = buffered.slice(newline + 1);
          if (line.length === 0) continue;
          const event = JSON.parse(line) as WatchEvent<T>;
          if (event.type === 'ERROR') {
            const status = event.object as unknown as { code?: number; reason?: string; message?: string };
            throw new KubeApiError(status.code ?? 500, status.reason ?? '', `watch ${path}: ${status.message ?? 'error event'}`);
          }
          await onEvent(event);
        }
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof KubeApiError) throw err;
      throw new KubeApiError(0, '', `watch ${path}: ${(err as Error).message}`, { cause: err });
    } finally {
      res.destroy();
    }
  }

  async #send(method: string, path: string, options: RequestOptions): Promise<http.IncomingMessage> {
    const url = new URL(path, this.server);
    for (const [key, value] of Object.entries(options.query ?? {})) {
      if (value !== undefined) url.searchParams.set(key, String(value));
    }
    const payload =
      options.body === undefined ? undefined : Buffer.from(typeof options.body === 'string' ? options.body : JSON.stringify(options.body));
    const requestOptions: https.RequestOptions = {
      method,
      protocol: url.protocol,
      hostname: url.hostname,
      port: url.port,
      path: url.pathname + url.search,
      agent: this.#agent,
      headers: {
        accept: 'application/json',
        ...(payload ? { 'content-type': options.contentType ?? 'application/json', 'content-length': payload.length } : {}),
      },
    };
    await this.#kubeConfig.applyToHTTPSOptions(requestOptions);
    requestOptions.agent = this.#agent;
    const transport = url.protocol === 'https:' ? https : http;
    const timeoutMs = options.timeoutMs ?? 30_000;
    return new Promise((resolve, reject) => {
      const req = transport.request(requestOptions, resolve);
      const fail = (err: Error): void => reject(new KubeApiError(0, '', `${method} ${url.pathname}: ${err.message}`, { cause: err }));
      req.on('error', fail);
      if (timeoutMs > 0) req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer in ${timeoutMs} ms`)));
      if (options.signal) {
        if (options.signal.aborted) req.destroy(new Error('aborted'));
        else options.signal.addEventListener('abort', () => req.destroy(new Error('aborted')), { once: true });
      }
      req.end(payload);
    });
  }
}

async function readBody(res: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of res) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString('utf8');
}

function apiError(status: number, body: string, method: string, path: string): KubeApiError {
  let reason = '';
  let message = body.slice(0, 500);
  try {
    const parsed = JSON.parse(body) as { reason?: string; message?: string };
    reason = parsed.reason ?? '';
    message = parsed.message ?? message;
  } catch {
    // not a Status object: keep the raw text
  }
  return new KubeApiError(status, reason, `${method} ${path}: ${status} ${reason ? reason + ': ' : ''}${message}`);
}

/** API paths of a resource: `/api/v1` for the core group, `/apis/<group>/<version>` otherwise. */
export interface ResourceType {
  group: string;
  version: string;
  plural: string;
  kind: string;
  namespaced: boolean;
}

export function apiVersionOf(type: ResourceType): string {
  return type.group === '' ? type.version : `${type.group}/${type.version}`;
}

/** The collection path, in one namespace or (undefined) across all of them. */
export function collectionPath(type: ResourceType, namespace?: string): string {
  const base = type.group === '' ? `/api/${type.version}` : `/apis/${type.group}/${type.version}`;
  return namespace && type.namespaced ? `${base}/namespaces/${encodeURIComponent(namespace)}/${type.plural}` : `${base}/${type.plural}`;
}

export function objectPath(type: ResourceType, namespace: string | undefined, name: string, subresource?: string): string {
  return `${collectionPath(type, namespace)}/${encodeURIComponent(name)}${subresource ? '/' + subresource : ''}`;
}

export const RESOURCES = {
  nereidServer: { group: 'nereid.dev', version: 'v1alpha1', plural: 'nereidservers', kind: 'NereidServer', namespaced: true },
  nereidModel: { group: 'nereid.dev', version: 'v1alpha1', plural: 'nereidmodels', kind: 'NereidModel', namespaced: true },
  deployment: { group: 'apps', version: 'v1', plural: 'deployments', kind: 'Deployment', namespaced: true },
  service: { group: '', version: 'v1', plural: 'services', kind: 'Service', namespaced: true },
  pdb: { group: 'policy', version: 'v1', plural: 'poddisruptionbudgets', kind: 'PodDisruptionBudget', namespaced: true },
  hpa: { group: 'autoscaling', version: 'v2', plural: 'horizontalpodautoscalers', kind: 'HorizontalPodAutoscaler', namespaced: true },
  serviceMonitor: { group: 'monitoring.coreos.com', version: 'v1', plural: 'servicemonitors', kind: 'ServiceMonitor', namespaced: true },
  pod: { group: '', version: 'v1', plural: 'pods', kind: 'Pod', namespaced: true },
  configMap: { group: '', version: 'v1', plural: 'configmaps', kind: 'ConfigMap', namespaced: true },
  event: { group: '', version: 'v1', plural: 'events', kind: 'Event', namespaced: true },
  lease: { group: 'coordination.k8s.io', version: 'v1', plural: 'leases', kind: 'Lease', namespaced: true },
} as const satisfies Record<string, ResourceType>;
