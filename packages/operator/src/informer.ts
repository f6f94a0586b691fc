/**
 * List+watch cache of one resource type (an informer).
 *
 * It lists (paginated), then watches from the list's resourceVersion with bookmarks, advancing
 * the resourceVersion with every event. When the API server answers 410 Gone (the version fell
 * out of its watch window: an ERROR event or an error answer) it lists again and reports the
 * difference as add/update/delete events; any other failure (a broken connection, a 5xx) is
 * retried with backoff from the last resourceVersion. A stream the server ends
 * (timeoutSeconds) is resumed from the last resourceVersion.
 *
 * client-node 1.4's ListWatch was not used: it re-lists on 410, but on any other error it calls
 * its error callbacks and stops for good (the caller must restart it and gets no backoff), and
 * its list is not paginated.
 *
 * Handlers run synchronously in event order; they only enqueue keys (work happens in the queue).
 */
import type { KubeClient, KubeList, KubeObject, RequestOptions } from './kube-client.js';
import { isGone } from './kube-client.js';
import { Backoff, sleep } from './work-queue.js';

export type InformerEvent = 'add' | 'update' | 'delete';
export type InformerHandler<T extends KubeObject> = (event: InformerEvent, object: T, previous?: T) => void;

export interface InformerOptions {
  labelSelector?: string;
  /** Page size of the list (default 500). */
  pageSize?: number;
  /** Server-side watch timeout in seconds (default 300); the watch is then resumed. */
  watchTimeoutSeconds?: number;
  /** Start watching from this resourceVersion without a first list (resuming a known version). */
  initialResourceVersion?: string;
  onRelist?: (reason: 'start' | 'gone') => void;
  onError?: (err: unknown) => void;
}

const keyOf = (object: KubeObject): string => `${object.metadata.namespace ?? ''}/${object.metadata.name ?? ''}`;

export class Informer<T extends KubeObject> {
  readonly path: string;
  #client: KubeClient;
  #options: InformerOptions;
  #cache = new Map<string, T>();
  #handlers: InformerHandler<T>[] = [];
  #resourceVersion = '';
  #abort = new AbortController();
  #synced: Promise<void>;
  #resolveSynced!: () => void;
  #hasSynced = false;
  #running: Promise<void> | undefined;

  constructor(client: KubeClient, path: string, options: InformerOptions = {}) {
    this.#client = client;
    this.path = path;
    this.#options = options;
    this.#synced = new Promise((resolve) => (this.#resolveSynced = resolve));
    if (options.initialResourceVersion) this.#resourceVersion = options.initialResourceVersion;
  }

  on(handler: InformerHandler<T>): void {
    this.#handlers.push(handler);
  }

  get resourceVersion(): string {
    return this.#resourceVersion;
  }

  get hasSynced(): boolean {
    return this.#hasSynced;
  }

  /** Resolves once the first list (or the first watch when resuming) has filled the cache. */
  synced(): Promise<void> {
    return this.#synced;
  }

  get(namespace: string | undefined, name: string): T | undefined {
    return this.#cache.get(`${namespace ?? ''}/${name}`);
  }

  list(filter?: (object: T) => boolean): T[] {
    const all = [...this.#cache.values()];
    return filter ? all.filter(filter) : all;
  }

  start(): void {
    this.#running ??= this.#run();
  }

  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#running;
  }

  async #run(): Promise<void> {
    const signal = this.#abort.signal;
    const backoff = new Backoff(200, 30_000);
    while (!signal.aborted) {
      try {
        if (this.#resourceVersion === '') await this.#relist(this.#hasSynced ? 'gone' : 'start');
        else if (!this.#hasSynced && this.#options.initialResourceVersion) {
          this.#hasSynced = true;
          this.#resolveSynced();
        }
        await this.#client.watch<T>(
          this.path,
          {
            resourceVersion: this.#resourceVersion,
            allowWatchBookmarks: true,
            timeoutSeconds: this.#options.watchTimeoutSeconds ?? 300,
            labelSelector: this.#options.labelSelector,
          },
          (event) => {
            backoff.reset();
            this.#apply(event.type, event.object);
          },
          signal,
        );
      } catch (err) {
        if (signal.aborted) return;
        if (isGone(err)) {
          this.#resourceVersion = '';
          continue;
        }
        this.#options.onError?.(err);
        await sleep(backoff.next(), signal);
      }
    }
  }

  async #relist(reason: 'start' | 'gone'): Promise<void> {
    this.#options.onRelist?.(reason);
    const items: T[] = [];
    let continueToken: string | undefined;
    let resourceVersion = '';
    do {
      const query: RequestOptions['query'] = {
        limit: this.#options.pageSize ?? 500,
        labelSelector: this.#options.labelSelector,
        continue: continueToken,
      };
      const page: KubeList<T> = await this.#client.list<T>(this.path, query, this.#abort.signal);
      items.push(...page.items);
      continueToken = page.metadata.continue || undefined;
      resourceVersion = page.metadata.resourceVersion ?? '';
    } while (continueToken);
    const fresh = new Map(items.map((item) => [keyOf(item), item]));
    for (const [key, old] of this.#cache) {
      if (!fresh.has(key)) {
        this.#cache.delete(key);
        this.#emit('delete', old);
      }
    }
    for (const [key, item] of fresh) {
      const old = this.#cache.get(key);
      this.#cache.set(key, item);
      if (!old) this.#emit('add', item);
      else if (old.metadata.resourceVersion !== item.metadata.resourceVersion) this.#emit('update', item, old);
    }
    this.#resourceVersion = resourceVersion;
    if (!this.#hasSynced) {
      this.#hasSynced = true;
      this.#resolveSynced();
    }
  }

  #apply(type: string, object: T): void {
    if (object.metadata.resourceVersion) this.#resourceVersion = object.metadata.resourceVersion;
    if (type === 'BOOKMARK') return;
    const key = keyOf(object);
    const old = this.#cache.get(key);
    if (type === 'DELETED') {
      this.#cache.delete(key);
      this.#emit('delete', object);
      return;
    }
    this.#cache.set(key, object);
    this.#emit(old ? 'update' : 'add', object, old);
  }

  #emit(event: InformerEvent, object: T, previous?: T): void {
    for (const handler of this.#handlers) handler(event, object, previous);
  }
}
