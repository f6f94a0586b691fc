/**
 * Writes with optimistic concurrency: status through the status subresource, finalizers through
 * merge patches that carry the object's resourceVersion, and Events for transitions.
 */
import { isDeepStrictEqual } from 'node:util';
import type { KubeClient, KubeObject, ResourceType } from './kube-client.js';
import { RESOURCES, collectionPath, isConflict, isNotFound, objectPath } from './kube-client.js';

export interface StatusUpdateResult<T> {
  /** The object as written (or as read, when nothing changed); undefined when it was deleted. */
  object: T | undefined;
  /** Requests that ended in 409 Conflict before the write that succeeded. */
  conflicts: number;
  written: boolean;
}

/**
 * Reads the latest object, lets `compute` derive its status from it, and PUTs the status
 * subresource with the read resourceVersion. On 409 Conflict (someone wrote in between) it reads
 * again and recomputes, up to `attempts` times. Writes nothing when the status is unchanged.
 */
export async function updateStatus<T extends KubeObject & { status?: unknown }>(
  client: KubeClient,
  type: ResourceType,
  namespace: string,
  name: string,
  compute: (latest: T, attempt: number) => T['status'] | Promise<T['status']>,
  attempts = 5,
): Promise<StatusUpdateResult<T>> {
  const path = objectPath(type, namespace, name);
  let conflicts = 0;
  for (let attempt = 0; ; attempt++) {
    const latest = await client.getOptional<T>(path);
    if (!latest) return { object: undefined, conflicts, written: false };
    const status = await compute(latest, attempt);
    if (isDeepStrictEqual(status, latest.status)) return { object: latest, conflicts, written: false };
    try {
      const written = await client.replace<T>(`${path}/status`, { ...latest, status });
      return { object: written, conflicts, written: true };
    } catch (err) {
      if (isNotFound(err)) return { object: undefined, conflicts, written: false };
      if (!isConflict(err) || attempt + 1 >= attempts) throw err;
      conflicts++;
    }
  }
}

/** Sets metadata.finalizers with the object's resourceVersion as precondition (409 when stale). */
export async function setFinalizers<T extends KubeObject>(client: KubeClient, type: ResourceType, object: T, finalizers: string[]): Promise<T> {
  const path = objectPath(type, object.metadata.namespace, object.metadata.name ?? '');
  return client.patch<T>(path, 'merge', { metadata: { finalizers, resourceVersion: object.metadata.resourceVersion } });
}

export type EventType = 'Normal' | 'Warning';

/** Records core/v1 Events about objects; failures are reported to `onError`, never thrown. */
export class EventRecorder {
  #client: KubeClient;
  #instance: string;
  #onError: (err: unknown) => void;

  constructor(client: KubeClient, instance: string, onError: (err: unknown) => void) {
    this.#client = client;
    this.#instance = instance;
    this.#onError = onError;
  }

  /** Events recorded in the last 10 minutes by object, type, reason and message: repeats raise their count. */
  readonly #recent = new Map<string, { namespace: string; name: string; count: number; at: number }>();

  record(object: KubeObject, type: EventType, reason: string, message: string): void {
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    const namespace = object.metadata.namespace ?? 'default';
    const key = JSON.stringify([object.metadata.uid ?? `${namespace}/${object.metadata.name}`, type, reason, message.slice(0, 1024)]);
    const at = Date.now();
    for (const [k, r] of this.#recent) if (at - r.at > 600_000) this.#recent.delete(k);
    const seen = this.#recent.get(key);
    if (seen) {
      // As client-go's event correlator does: one Event, its count and lastTimestamp raised.
      seen.count++;
      seen.at = at;
      this.#client
        .patch(`${collectionPath(RESOURCES.event, seen.namespace)}/${seen.name}`, 'merge', { count: seen.count, lastTimestamp: now })
        .catch(this.#onError);
      return;
    }
    const event: KubeObject = {
      apiVersion: 'v1',
      kind: 'Event',
      metadata: { name: `${object.metadata.name}.${Date.now().toString(16)}${Math.floor(Math.random() * 0xfff).toString(16)}`, namespace },
      involvedObject: {
        apiVersion: object.apiVersion,
        kind: object.kind,
        name: object.metadata.name,
        namespace,
        uid: object.metadata.uid,
        resourceVersion: object.metadata.resourceVersion,
      },
      type,
      reason,
      message: message.slice(0, 1024),
      source: { component: 'nereid-operator' },
      reportingComponent: 'nereid-operator',
      reportingInstance: this.#instance,
      firstTimestamp: now,
      lastTimestamp: now,
      count: 1,
    };
    this.#recent.set(key, { namespace, name: event.metadata.name!, count: 1, at });
    this.#client.create(collectionPath(RESOURCES.event, namespace), event).catch(this.#onError);
  }
}

