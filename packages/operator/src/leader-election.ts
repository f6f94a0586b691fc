/**
 * Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection package does
 * it: a candidate takes the Lease when it is free or expired (renewTime + leaseDurationSeconds
 * in the past), the leader renews it every retry period, and every write carries the Lease's
 * resourceVersion so two candidates never both win (the loser gets 409 Conflict).
 *
 * Losing: a leader that has not renewed within the renew deadline (a watchdog checks, however
 * long a request hangs), or finds another holder, calls `onStoppedLeading` at once and stops
 * campaigning (the operator process exits and is restarted, as client-go operators do). A clean `stop()` releases the
 * Lease (holder cleared) so a standby takes over without waiting for expiry.
 */
import { hostname } from 'node:os';
import { randomBytes } from 'node:crypto';
import type { KubeClient, KubeObject } from './kube-client.js';
import { RESOURCES, collectionPath, isConflict, isNotFound, objectPath } from './kube-client.js';
import { sleep } from './work-queue.js';

export interface LeaderElectionOptions {
  namespace: string;
  name: string;
  identity?: string;
  leaseDurationSeconds?: number;
  renewDeadlineSeconds?: number;
  retryPeriodSeconds?: number;
  onStartedLeading: () => void;
  onStoppedLeading: () => void;
  onError?: (err: unknown) => void;
}

interface LeaseSpec {
  holderIdentity?: string | null;
  leaseDurationSeconds?: number;
  acquireTime?: string | null;
  renewTime?: string | null;
  leaseTransitions?: number;
}
interface Lease extends KubeObject {
  spec?: LeaseSpec;
}

/** MicroTime as the API accepts it (RFC 3339 with microseconds). */
const microTime = (date: Date): string => date.toISOString().replace(/\.(\d{3})Z$/, '.$1000Z');

export const defaultIdentity = (): string => `${hostname()}_${randomBytes(4).toString('hex')}`;

export class LeaderElector {
  readonly identity: string;
  #client: KubeClient;
  #options: Required<Omit<LeaderElectionOptions, 'onError'>> & Pick<LeaderElectionOptions, 'onError'>;
  #leading = false;
  #abort = new AbortController();
  #running: Promise<void> | undefined;
  #lastRenew = 0;
  #lease: Lease | undefined;
  #watchdog: NodeJS.Timeout | undefined;

  constructor(client: KubeClient, options: LeaderElectionOptions) {
    this.#client = client;
    this.identity = options.identity ?? defaultIdentity();
    this.#options = {
      leaseDurationSeconds: 15,
      renewDeadlineSeconds: 10,
      retryPeriodSeconds: 2,
      identity: this.identity,
      ...options,
    };
  }

  get isLeader(): boolean {
    return this.#leading;
  }

  start(): void {
    this.#running ??= this.#loop();
  }

  /**
   * Stops campaigning; a leader releases the Lease (onStoppedLeading is not called: the caller
   * stopped acting before asking).
   */
  async stop(): Promise<void> {
    this.#abort.abort();
    await this.#running;
    clearInterval(this.#watchdog);
    if (this.#leading) {
      this.#leading = false;
      await this.#release().catch((err: unknown) => this.#options.onError?.(err));
    }
  }

  async #loop(): Promise<void> {
    const signal = this.#abort.signal;
    const { retryPeriodSeconds, renewDeadlineSeconds } = this.#options;
    while (!signal.aborted) {
      let ok = false;
      try {
        ok = await this.#tryAcquireOrRenew();
      } catch (err) {
        this.#options.onError?.(err);
      }
      if (signal.aborted) break;
      if (ok) {
        this.#lastRenew = Date.now();
        if (!this.#leading) this.#setLeading(true);
      } else if (this.#leading && (this.#heldByOther() || Date.now() - this.#lastRenew > renewDeadlineSeconds * 1000)) {
        this.#setLeading(false);
      }
      await sleep(retryPeriodSeconds * 1000, signal);
    }
  }

  #heldByOther(): boolean {
    const holder = this.#lease?.spec?.holderIdentity;
    return Boolean(holder) && holder !== this.identity;
  }

  #setLeading(leading: boolean): void {
    this.#leading = leading;
    clearInterval(this.#watchdog);
    if (leading) {
      // However long a renewal request hangs, a leader stops once the renew deadline has passed.
      this.#watchdog = setInterval(() => {
        if (this.#leading && Date.now() - this.#lastRenew > this.#options.renewDeadlineSeconds * 1000) this.#setLeading(false);
      }, 250);
      this.#watchdog.unref();
      this.#options.onStartedLeading();
    } else {
      // Leadership is not taken up again by this elector: the process exits and starts afresh.
      this.#abort.abort();
      this.#options.onStoppedLeading();
    }
  }

  async #tryAcquireOrRenew(): Promise<boolean> {
    const { namespace, name, leaseDurationSeconds } = this.#options;
    const now = new Date();
    const path = objectPath(RESOURCES.lease, namespace, name);
    // No request may outlast the renew deadline: a leader must know in time that it failed to renew.
    const timeoutMs = this.#options.renewDeadlineSeconds * 1000;
    let lease: Lease | undefined;
    try {
      lease = await this.#client.get<Lease>(path, { timeoutMs });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    if (!lease) {
      try {
        this.#lease = await this.#client.create<Lease>(collectionPath(RESOURCES.lease, namespace), {
          apiVersion: 'coordination.k8s.io/v1',
          kind: 'Lease',
          metadata: { name, namespace },
          spec: { holderIdentity: this.identity, leaseDurationSeconds, acquireTime: microTime(now), renewTime: microTime(now), leaseTransitions: 0 },
        }, { timeoutMs });
        return true;
      } catch (err) {
        if (isConflict(err)) return false;
        throw err;
      }
    }
    this.#lease = lease;
    const spec = lease.spec ?? {};
    const holder = spec.holderIdentity ?? '';
    const renewed = spec.renewTime ? Date.parse(spec.renewTime) : 0;
    const expired = renewed + (spec.leaseDurationSeconds ?? leaseDurationSeconds) * 1000 < now.getTime();
    if (holder !== '' && holder !== this.identity && !expired) return false;
    const takingOver = holder !== this.identity;
    const next: Lease = {
      ...lease,
      spec: {
        ...spec,
        holderIdentity: this.identity,
        leaseDurationSeconds,
        renewTime: microTime(now),
        acquireTime: takingOver ? microTime(now) : spec.acquireTime,
        leaseTransitions: (spec.leaseTransitions ?? 0) + (takingOver && holder !== '' ? 1 : 0),
      },
    };
    try {
      this.#lease = await this.#client.replace<Lease>(path, next, { timeoutMs });
      return true;
    } catch (err) {
      if (isConflict(err)) return false;
      throw err;
    }
  }

  async #release(): Promise<void> {
    const path = objectPath(RESOURCES.lease, this.#options.namespace, this.#options.name);
    const lease = await this.#client.get<Lease>(path);
    if (lease.spec?.holderIdentity !== this.identity) return;
    await this.#client.replace(path, {
      ...lease,
      spec: { ...lease.spec, holderIdentity: null, leaseDurationSeconds: 1, renewTime: microTime(new Date()), acquireTime: null },
    });
  }
}
