/**
 * Memory accounting and budgets (docs/resources.md, "Memory accounting and budgets").
 *
 * What each loaded version holds is reported by its backend instances (`BackendInstance
 * .memoryUsage`: a stub-hosted instance reads its process's memory from /proc) or, for backends
 * that report nothing (in-process runtimes), measured once at load (`LoadMeasure`). The
 * `MemoryAccounting` of a server keeps the figures of every loaded version, refreshes the live
 * ones on a timer (never on the request path), refuses loads that would pass a model's limit or
 * the server-wide budget, and stops a version whose live figure outgrows its limit.
 *
 * Concurrency: everything runs on the event loop; loads run in parallel, so a load reserves its
 * estimate in the budget before it starts (`reserve`) and settles it with the measured figure.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { NereidError } from '@nereid/protocol';
import type { MemoryUsageEntry } from '../backends/spi.js';
import type { Logger } from '../observability/logger.js';

/** The model configuration parameter that sets a model's memory limit. */
export const MEMORY_LIMIT_PARAMETER = 'memory_limit';

/** Default interval of the live samples (`--memory-sample-interval-ms`). */
export const DEFAULT_MEMORY_SAMPLE_INTERVAL_MS = 1000;

const UNITS: Readonly<Record<string, number>> = {
  '': 1,
  b: 1,
  k: 1e3,
  kb: 1e3,
  m: 1e6,
  mb: 1e6,
  g: 1e9,
  gb: 1e9,
  t: 1e12,
  tb: 1e12,
  ki: 2 ** 10,
  kib: 2 ** 10,
  mi: 2 ** 20,
  mib: 2 ** 20,
  gi: 2 ** 30,
  gib: 2 ** 30,
  ti: 2 ** 40,
  tib: 2 ** 40,
};

/**
 * A byte size: a number with an optional unit, decimal (`k`, `KB`, `M`, `MB`, `G`, `GB`, `T`,
 * `TB`: powers of 1000) or binary (`Ki`, `KiB`, `Mi`, `MiB`, `Gi`, `GiB`, `Ti`, `TiB`: powers of
 * 1024), any case, as in `512MiB`, `1.5G`, `1000000`. Returns whole bytes (rounded down), or
 * undefined when `text` is not one.
 */
export function parseByteSize(text: string): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(text);
  if (m === null) return undefined;
  const unit = UNITS[m[2]!.toLowerCase()];
  if (unit === undefined) return undefined;
  const bytes = Math.floor(Number(m[1]) * unit);
  return Number.isSafeInteger(bytes) ? bytes : undefined;
}

/** `512 MiB`, `1.5 GiB`, `800 B`: sizes in messages. */
export function formatBytes(bytes: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes;
  let u = 0;
  while (value >= 1024 && u < units.length - 1) {
    value /= 1024;
    u++;
  }
  return u === 0 ? `${bytes} B` : `${Number.isInteger(value) ? value : value.toFixed(1)} ${units[u]}`;
}

/**
 * A model's memory limit in bytes: its `memory_limit` parameter, else `serverDefault`; 0 means no
 * limit (also the parameter's `0` or `none`). Throws CONFIG_INVALID naming the model and the fix.
 */
export function modelMemoryLimit(model: string, parameters: Readonly<Record<string, { string_value: string }>>, serverDefault = 0): number {
  const text = parameters[MEMORY_LIMIT_PARAMETER]?.string_value;
  if (text === undefined || text.trim() === '') return serverDefault;
  if (text.trim().toLowerCase() === 'none') return 0;
  const bytes = parseByteSize(text);
  if (bytes === undefined) {
    throw new NereidError(
      'CONFIG_INVALID',
      `model '${model}': parameter '${MEMORY_LIMIT_PARAMETER}' must be a byte size such as "512MiB", "2GiB" or "1000000" (or "none"), got '${text}'`,
    );
  }
  return bytes;
}

/**
 * A process's own memory in bytes: its resident anonymous memory (`RssAnon` of
 * /proc/<pid>/status: heap, arrays, tensors, model weights it read), leaving out resident pages
 * of files (shared libraries such as libtorch, which every stub maps) and of shared memory (the
 * stub's tensor rings). A read costs about 15 µs; PSS (smaps_rollup) would split shared pages
 * fairly but costs milliseconds for a process with libtorch loaded. Undefined when the process
 * is gone (or the kernel reports no RssAnon, before Linux 4.5).
 */
export function processMemoryBytes(pid: number): number | undefined {
  try {
    const m = /^RssAnon:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, 'latin1'));
    return m === null ? undefined : Number(m[1]) * 1024;
  } catch {
    return undefined;
  }
}

/** The bytes of every file under `dir` (recursively, links not followed); 0 for a missing directory. */
export function directoryBytes(dir: string): number {
  let total = 0;
  let entries;
  try {
    entries = readdirSync(dir, { withFileTypes: true });
  } catch {
    return 0;
  }
  for (const e of entries) {
    const path = join(dir, e.name);
    if (e.isDirectory()) total += directoryBytes(path);
    else if (e.isFile()) total += statSync(path, { throwIfNoEntry: false })?.size ?? 0;
  }
  return total;
}

/** Entries of the same type and device summed, in first-seen order. */
export function sumEntries(entries: Iterable<MemoryUsageEntry>): MemoryUsageEntry[] {
  const out: MemoryUsageEntry[] = [];
  for (const e of entries) {
    const same = out.find((o) => o.type === e.type && o.id === e.id);
    if (same === undefined) out.push({ type: e.type, id: e.id, byte_size: e.byte_size });
    else (same as { byte_size: number }).byte_size += e.byte_size;
  }
  return out;
}

/**
 * The total host bytes of `entries` (CPU and CPU_PINNED): limits and budgets are of host memory;
 * GPU entries (a stub's memory on its GPU) are reported, not counted against them.
 */
export function totalBytes(entries: readonly MemoryUsageEntry[]): number {
  let n = 0;
  for (const e of entries) if (e.type !== 'GPU') n += e.byte_size;
  return n;
}

/**
 * The Nereid process's RSS growth across the creation of a version's instances, for backends that
 * report no figure of their own (in-process runtimes). Loads run in parallel: a measure that
 * overlapped another one is not kept (`growth` is then undefined) and the caller falls back to the
 * model files' bytes.
 */
export class LoadMeasure {
  static #open = 0;
  /** Measures started so far: one started after this one shows in a different count. */
  static #started = 0;
  readonly #start: number;
  readonly #startedAs: number;

  constructor() {
    LoadMeasure.#open++;
    this.#startedAs = ++LoadMeasure.#started;
    this.#start = process.memoryUsage.rss();
  }

  /** The RSS growth in bytes, once ended, when no other measure overlapped and it grew. */
  growth: number | undefined;

  /** Ends the measure (once): sets `growth`. */
  end(): number | undefined {
    LoadMeasure.#open--;
    // Another measure open now, or one that started (and maybe ended) after this one: overlapped.
    const alone = LoadMeasure.#started === this.#startedAs && LoadMeasure.#open === 0;
    const growth = process.memoryUsage.rss() - this.#start;
    this.growth = alone && growth > 0 ? growth : undefined;
    return this.growth;
  }
}

/** A loaded version as the accounting sees it (`ModelVersion` is one). */
export interface AccountedVersion {
  readonly name: string;
  readonly version: number;
  /** Its limit in bytes; 0: none. */
  readonly memoryLimitBytes: number;
  /** Whether its figure is live (sampled from its backend instances) rather than measured at load. */
  readonly memoryLive: boolean;
  /** Takes a new sample (live versions) and returns the figure; cheap for the others. */
  sampleMemory(): readonly MemoryUsageEntry[];
  /** The last figure (no sampling). */
  readonly memory: readonly MemoryUsageEntry[];
  /** Stops the version for `error` (its requests fail with it); called at most once. */
  stopForMemory(error: NereidError): void;
}

export interface MemoryAccountingOptions {
  /** `--memory-budget`: bytes all models together may hold; 0: none. */
  budgetBytes?: number;
  /** `--model-memory-limit`: the limit of a model that sets none; 0: none. */
  defaultLimitBytes?: number;
  /** `--memory-sample-interval-ms`: live samples every this many ms; 0: no live samples. */
  sampleIntervalMs?: number;
  logger: Logger;
}

/** A load's share of the budget while it runs (`MemoryAccounting.reserve`). */
export interface MemoryReservation {
  /** The estimate the load reserved, bytes. */
  readonly estimate: number;
  /** Checks the measured figure against the limit and the budget (throws the load error); keeps it reserved. */
  settle(measured: number): void;
  /** Gives the reservation back (the load failed, or its version is now accounted). */
  release(): void;
}

/** How the estimate before a load was made, for its error message. */
type EstimateSource = 'last measured' | 'model files';

export class MemoryAccounting {
  readonly budgetBytes: number;
  readonly defaultLimitBytes: number;
  readonly sampleIntervalMs: number;
  readonly #logger: Logger;
  readonly #versions = new Set<AccountedVersion>();
  /** Bytes reserved by loads under way. */
  readonly #reserved = new Set<{ bytes: number }>();
  /**
   * The figure of each model version's last load (right after initialize), by `<model>\0<version>`:
   * the estimate of its next load. Not what it grew to later: a model stopped for outgrowing its
   * limit must be able to load again.
   */
  readonly #lastMeasured = new Map<string, number>();
  /** Versions stopped for passing their limit, by model (`nereid_model_memory_limit_stops_total`). */
  readonly #stops = new Map<string, number>();
  #timer: NodeJS.Timeout | undefined;
  #sampledAt = 0;

  constructor(options: MemoryAccountingOptions) {
    this.budgetBytes = options.budgetBytes ?? 0;
    this.defaultLimitBytes = options.defaultLimitBytes ?? 0;
    this.sampleIntervalMs = options.sampleIntervalMs ?? DEFAULT_MEMORY_SAMPLE_INTERVAL_MS;
    this.#logger = options.logger;
  }

  /** Starts the live samples (no-op with an interval of 0 or when running). The timer is unref'd. */
  start(): void {
    if (this.sampleIntervalMs <= 0 || this.#timer !== undefined) return;
    this.#timer = setInterval(() => this.sample(), this.sampleIntervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /**
   * Samples every live version now and stops those over their limit. Statistics requests call it
   * through `refreshIfStale` when the last sample is older than the interval.
   */
  sample(): void {
    this.#sampledAt = Date.now();
    for (const v of [...this.#versions]) {
      if (!v.memoryLive) continue;
      const bytes = totalBytes(v.sampleMemory());
      if (v.memoryLimitBytes > 0 && bytes > v.memoryLimitBytes) this.#overLimit(v, bytes);
    }
  }

  /** Samples now when live samples are on and the last one is older than the interval. */
  refreshIfStale(): void {
    if (this.sampleIntervalMs > 0 && Date.now() - this.#sampledAt >= this.sampleIntervalMs) this.sample();
  }

  #overLimit(v: AccountedVersion, bytes: number): void {
    this.#versions.delete(v);
    this.#stops.set(v.name, (this.#stops.get(v.name) ?? 0) + 1);
    const error = new NereidError(
      'MODEL_MEMORY_LIMIT',
      `model '${v.name}' version ${v.version} was stopped: it used ${formatBytes(bytes)}, over its memory limit of ` +
        `${formatBytes(v.memoryLimitBytes)}; raise parameter '${MEMORY_LIMIT_PARAMETER}' in its config.pbtxt (or --model-memory-limit) ` +
        `or make it use less, then load it again`,
    );
    this.#logger.error(error.message);
    v.stopForMemory(error);
  }

  /** The limit of a model: its `memory_limit` parameter, else the server's default. */
  limitOf(model: string, parameters: Readonly<Record<string, { string_value: string }>>): number {
    return modelMemoryLimit(model, parameters, this.defaultLimitBytes);
  }

  /** Bytes held by the loaded versions plus those reserved by loads under way. */
  get usedBytes(): number {
    let n = 0;
    for (const v of this.#versions) n += totalBytes(v.memory);
    for (const r of this.#reserved) n += r.bytes;
    return n;
  }

  /** Versions stopped for passing their limit since the server started, by model. */
  get stops(): ReadonlyMap<string, number> {
    return this.#stops;
  }

  /**
   * Reserves a load's estimate (the last figure measured of the same model version, else
   * `fileBytes`, the model files' bytes) and checks it against `limit` and the budget; throws
   * MEMORY_BUDGET with the model, the estimate and the limit or budget.
   */
  reserve(model: string, version: number, limit: number, fileBytes: number): MemoryReservation {
    const last = this.#lastMeasured.get(`${model}\0${version}`);
    const source: EstimateSource = last !== undefined ? 'last measured' : 'model files';
    const estimate = last ?? fileBytes;
    this.#check(model, version, limit, estimate, `an estimated ${formatBytes(estimate)} (${source === 'last measured' ? 'as measured at its last load' : 'the size of its model files'})`);
    const share = { bytes: estimate };
    this.#reserved.add(share);
    return {
      estimate,
      settle: (measured: number) => {
        this.#lastMeasured.set(`${model}\0${version}`, measured);
        this.#reserved.delete(share);
        try {
          this.#check(model, version, limit, measured, `${formatBytes(measured)} measured after initialize`);
        } finally {
          share.bytes = measured;
          this.#reserved.add(share);
        }
      },
      release: () => void this.#reserved.delete(share),
    };
  }

  /**
   * Checks instances added in place to a loaded version (`current` bytes) that bring `extra`
   * bytes: against its limit and the budget; throws MEMORY_BUDGET.
   */
  checkGrowth(model: string, version: number, limit: number, current: number, extra: number, instances: number): void {
    const what = `${formatBytes(current + extra)} with its ${instances} new instance(s) (${formatBytes(extra)} of them)`;
    if (limit > 0 && current + extra > limit) this.#check(model, version, limit, current + extra, what);
    this.#check(model, version, 0, extra, what);
  }

  #check(model: string, version: number, limit: number, need: number, what: string): void {
    if (limit > 0 && need > limit) {
      throw new NereidError(
        'MEMORY_BUDGET',
        `model '${model}' version ${version} needs ${what}, over its memory limit of ${formatBytes(limit)}; ` +
          `raise parameter '${MEMORY_LIMIT_PARAMETER}' in its config.pbtxt (or --model-memory-limit)`,
      );
    }
    const used = this.usedBytes;
    if (this.budgetBytes > 0 && used + need > this.budgetBytes) {
      throw new NereidError(
        'MEMORY_BUDGET',
        `model '${model}' version ${version} needs ${what}, but the models loaded hold ${formatBytes(used)} of the server's ` +
          `memory budget of ${formatBytes(this.budgetBytes)} (--memory-budget); unload a model or raise --memory-budget`,
      );
    }
  }

  /** A version that now serves: accounted until `remove`. */
  add(v: AccountedVersion): void {
    this.#versions.add(v);
  }

  remove(v: AccountedVersion): void {
    this.#versions.delete(v);
  }
}

