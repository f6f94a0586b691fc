/**
 * The rate limiter (`--rate-limit=execution_count`, models-and-scheduling.md §7.3): instances of
 * every model compete for named resources; an instance executes only when the units it requires
 * are free.
 *
 * - Resources are pooled per device (CPU and MODEL instances use device 0) or, when `global`,
 *   server-wide. A pool holds, by default, the largest count any registered instance requires, so
 *   every instance can run alone; `--rate-limit-resource=<name>:<count>[:<device>]` sets it.
 * - An instance's key is (executions completed × priority); lower keys go first. Instances
 *   waiting for resources sit in one queue ordered by key, and only its head is considered
 *   (strict head-of-line): nothing is allocated past a head that cannot run.
 * - Instances without a `rate_limiter` section require nothing and never wait.
 */
import { NereidError } from '@nereid/protocol';

export interface ResourceRequirement {
  name: string;
  global: boolean;
  count: number;
}

/** An explicit pool size from `--rate-limit-resource`. */
export interface ResourceLimit {
  name: string;
  count: number;
  /** Device id; undefined: every device (and the global pool). */
  device?: number;
}

/** An instance's registration: what it needs and how it is weighed. */
export interface RateLimitedInstance {
  readonly name: string;
  readonly device: number;
  readonly resources: readonly ResourceRequirement[];
  /** Instance priority, ≥ 1 (0 is treated as 1). */
  readonly priority: number;
  /** Executions completed (the key is executions × priority). */
  executions: number;
}

interface Waiter {
  instance: RateLimitedInstance;
  key: number;
  order: number;
  grant: () => void;
}

/** Parses `<name>:<count>[:<device>]`. */
export function parseResourceLimit(text: string): ResourceLimit {
  const parts = text.split(':');
  const count = Number(parts[1]);
  const device = parts[2] === undefined ? undefined : Number(parts[2]);
  if (parts.length < 2 || parts.length > 3 || parts[0] === '' || !Number.isInteger(count) || count < 0 || (device !== undefined && (!Number.isInteger(device) || device < 0))) {
    throw new NereidError('REQUEST_PARAMETER', `--rate-limit-resource expects <name>:<count>[:<device>], got '${text}'`);
  }
  const limit: ResourceLimit = { name: parts[0]!, count };
  if (device !== undefined) limit.device = device;
  return limit;
}

function poolKey(r: ResourceRequirement, device: number): string {
  return r.global ? `global:${r.name}` : `device${device}:${r.name}`;
}

export class RateLimiter {
  readonly #limits: readonly ResourceLimit[];
  /** Pool capacities and what is in use. */
  readonly #capacity = new Map<string, number>();
  readonly #inUse = new Map<string, number>();
  /** Resource name → whether it is global (a name must not be both, §3.6). */
  readonly #scope = new Map<string, boolean>();
  readonly #instances = new Set<RateLimitedInstance>();
  #waiting: Waiter[] = [];
  #order = 0;
  #allocateScheduled = false;

  constructor(limits: readonly ResourceLimit[] = []) {
    this.#limits = limits;
  }

  /** Explicit pool size for a resource on a device, if one was given (§7.3). */
  #explicit(r: ResourceRequirement, device: number): number | undefined {
    let found: number | undefined;
    for (const l of this.#limits) {
      if (l.name !== r.name) continue;
      if (r.global) found = Math.max(found ?? 0, l.count);
      else if (l.device === device) return l.count;
      else if (l.device === undefined) found = l.count;
    }
    return found;
  }

  /** Adds an instance's requirements to the pools; throws for conflicts or pools too small. */
  register(instance: RateLimitedInstance, model: string): void {
    for (const r of instance.resources) {
      const scope = this.#scope.get(r.name);
      if (scope !== undefined && scope !== r.global) {
        throw new NereidError(
          'CONFIG_INVALID',
          `model '${model}': rate limiter resource '${r.name}' is ${r.global ? 'global' : 'per-device'} here but ${scope ? 'global' : 'per-device'} for another loaded model`,
        );
      }
      const explicit = this.#explicit(r, instance.device);
      if (explicit !== undefined && explicit < r.count) {
        throw new NereidError(
          'CONFIG_INVALID',
          `model '${model}': instance '${instance.name}' requires ${r.count} units of resource '${r.name}' but --rate-limit-resource makes only ${explicit} available`,
        );
      }
    }
    for (const r of instance.resources) {
      this.#scope.set(r.name, r.global);
      const key = poolKey(r, instance.device);
      const explicit = this.#explicit(r, instance.device);
      this.#capacity.set(key, explicit ?? Math.max(this.#capacity.get(key) ?? 0, r.count));
    }
    this.#instances.add(instance);
  }

  unregister(instance: RateLimitedInstance): void {
    this.#instances.delete(instance);
    this.#waiting = this.#waiting.filter((w) => w.instance !== instance);
    this.#scope.clear();
    for (const i of this.#instances) for (const r of i.resources) this.#scope.set(r.name, r.global);
  }

  /** Resolves once the instance may execute; its units are then taken until `release`. */
  acquire(instance: RateLimitedInstance): Promise<void> {
    if (instance.resources.length === 0) return Promise.resolve();
    return new Promise((grant) => {
      const key = instance.executions * Math.max(1, instance.priority);
      this.#waiting.push({ instance, key, order: this.#order++, grant });
      this.#waiting.sort((a, b) => a.key - b.key || a.order - b.order);
      this.#allocate();
    });
  }

  /**
   * Returns the instance's units (after its execution) and counts the execution. Allocation is
   * retried at the end of this event-loop turn, once the instance that finished had the chance to
   * queue its next batch: then the lowest key wins, not whoever was waiting (§7.3 step 4).
   */
  release(instance: RateLimitedInstance): void {
    instance.executions++;
    if (instance.resources.length === 0) return;
    for (const r of instance.resources) {
      const key = poolKey(r, instance.device);
      this.#inUse.set(key, (this.#inUse.get(key) ?? 0) - r.count);
    }
    if (this.#allocateScheduled) return;
    this.#allocateScheduled = true;
    setImmediate(() => {
      this.#allocateScheduled = false;
      this.#allocate();
    });
  }

  #allocate(): void {
    while (this.#waiting.length > 0) {
      const head = this.#waiting[0]!;
      const fits = head.instance.resources.every((r) => {
        const key = poolKey(r, head.instance.device);
        return (this.#inUse.get(key) ?? 0) + r.count <= (this.#capacity.get(key) ?? 0);
      });
      if (!fits) return;
      this.#waiting.shift();
      for (const r of head.instance.resources) {
        const key = poolKey(r, head.instance.device);
        this.#inUse.set(key, (this.#inUse.get(key) ?? 0) + r.count);
      }
      head.grant();
    }
  }

  /** Pool capacities and use, for diagnostics and tests. */
  pools(): { pool: string; capacity: number; inUse: number }[] {
    return [...this.#capacity].map(([pool, capacity]) => ({ pool, capacity, inUse: this.#inUse.get(pool) ?? 0 }));
  }
}
