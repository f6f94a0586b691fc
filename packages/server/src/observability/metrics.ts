/**
 * Prometheus metrics (protocol.md §5): the registry a `Server` owns, Triton's per-model families,
 * Nereid's latency and batch-size histograms, and the CPU families.
 *
 * Per-model counters and gauges are not counted here: they are read from each loaded version's
 * `ModelStatistics` (models-and-scheduling.md §9.1) and its scheduler when a scrape asks for them,
 * so nothing is counted twice and the request path pays nothing for them. Their series are exactly
 * the loaded versions' (they appear with zeros at load and disappear at unload, §5.2). Histograms
 * need every observation, so a version gets a `VersionHistograms` at load, fed by the statistics
 * listener, and only when a histogram family is enabled.
 *
 * Counter samples are written under the bare family name (no `_total`, §5.1): prom-client does so
 * in the Prometheus text format, the only format served.
 */
import { readFileSync } from 'node:fs';
import { cpus, freemem, totalmem } from 'node:os';
import { NereidError } from '@nereid/protocol';
import { Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { GpuSample, GpuSampler } from '../devices/index.js';
import type { ModelConfig } from '../config/model-config.js';
import type { Logger } from './logger.js';
import { PREEMPTION_KINDS } from '../scheduling/preemption.js';
import { FAILURE_REASONS, type ModelStatistics, type StatDuration, type StatisticsListener } from './model-statistics.js';

/** Histogram families beyond Triton's (docs/operations.md), all per model. */
export const REQUEST_HISTOGRAM = 'nv_inference_request_histogram_us';
export const QUEUE_HISTOGRAM = 'nv_inference_queue_histogram_us';
export const COMPUTE_HISTOGRAM = 'nv_inference_compute_histogram_us';
export const BATCH_SIZE_HISTOGRAM = 'nv_inference_batch_size_histogram';
/** Triton's (protocol.md §5.3). */
export const FIRST_RESPONSE_HISTOGRAM = 'nv_inference_first_response_histogram_ms';

/** Nereid's load and unload timing families (docs/operations.md), per model version and phase. */
export const LOAD_PHASE_FAMILY = 'nv_model_load_phase_duration_secs';
export const UNLOAD_PHASE_FAMILY = 'nv_model_unload_phase_duration_secs';

/**
 * The phases of loading a version, in order: `read` the config file; `parse` it (with derivation,
 * normalisation and model-level validation); `auto_complete` (instance groups, backend
 * auto-complete, full validation, label files); `backend_init` (backend model, instances — ONNX
 * Runtime sessions —, scheduler); `warmup` (reading the samples and running them).
 */
export const LOAD_PHASES = ['read', 'parse', 'auto_complete', 'backend_init', 'warmup'] as const;
export type LoadPhase = (typeof LOAD_PHASES)[number];

/** The phases of unloading a version: `drain` in-flight requests, `release` instances and model. */
export const UNLOAD_PHASES = ['drain', 'release'] as const;
export type UnloadPhase = (typeof UNLOAD_PHASES)[number];

/** Seconds per phase. */
export type PhaseDurations<P extends string> = Readonly<Record<P, number>>;

/** The last unload of a model version (`ServerMetrics.recordUnload`). */
export interface UnloadRecord {
  readonly name: string;
  readonly version: number;
  readonly phases: PhaseDurations<UnloadPhase>;
  /** Seconds from the start of the unload to its end. */
  readonly totalSecs: number;
  /** Monotonic time it ended (process.hrtime.bigint()). */
  readonly at: bigint;
}

/** Default buckets of the µs latency histograms: 100 µs to 10 s in 1-2.5-5 steps. */
export const DEFAULT_LATENCY_BUCKETS_US: readonly number[] = [
  100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000, 1_000_000, 2_500_000, 5_000_000,
  10_000_000,
];
/** Triton's defaults for `nv_inference_first_response_histogram_ms` (protocol.md §5.3). */
export const DEFAULT_FIRST_RESPONSE_BUCKETS_MS: readonly number[] = [100, 500, 2000, 5000];

/** Every histogram family, with what enables it. */
const HISTOGRAM_FAMILIES: Readonly<Record<string, { help: string; latency: boolean }>> = {
  [REQUEST_HISTOGRAM]: { help: 'Duration of successful inference requests, end to end, in microseconds', latency: true },
  [QUEUE_HISTOGRAM]: { help: 'Time successful inference requests waited in the queue, in microseconds', latency: true },
  [COMPUTE_HISTOGRAM]: {
    help: 'Compute time (input, inference and output) of successful inference requests, in microseconds',
    latency: true,
  },
  [FIRST_RESPONSE_HISTOGRAM]: { help: 'Duration from inference request to first response sent, in milliseconds', latency: true },
  [BATCH_SIZE_HISTOGRAM]: { help: 'Total batch size of each model execution', latency: false },
};

/** Server-wide metrics settings (protocol.md §6.2: `--metrics-config`, `--allow-cpu-metrics`, …). */
export interface MetricsOptions {
  /** `--metrics-config counter_latencies` (default true): the five cumulative µs counters. */
  counterLatencies?: boolean;
  /**
   * `--metrics-config histogram_latencies` (default false, as Triton's): the request, queue and
   * compute histograms and Triton's first-response histogram.
   */
  histogramLatencies?: boolean;
  /** `--metrics-config histogram_batch_size` (default false): the execution batch-size histogram. */
  histogramBatchSize?: boolean;
  /**
   * Server-wide bucket bounds by histogram family (`--metrics-config
   * histogram_buckets=<family>:<b1>,<b2>,…`). A model's `model_metrics` overrides them.
   */
  buckets?: Readonly<Record<string, readonly number[]>>;
  /** `--allow-cpu-metrics` (default true): `nv_cpu_utilization` and the CPU memory families. */
  cpu?: boolean;
  /** `--allow-gpu-metrics` (default true): the `nv_gpu_*` families, where the server has GPUs. */
  gpu?: boolean;
  /** `--metrics-interval-ms` (default 2000): how often the CPU and GPU families are sampled. */
  intervalMs?: number;
}

/** A loaded model version as the metrics see it (`ModelVersion` is one). */
export interface MeteredVersion {
  readonly name: string;
  readonly version: number;
  readonly config: Pick<ModelConfig, 'metric_tags'>;
  readonly stats: ModelStatistics;
  readonly scheduler: { readonly queuedCount: number };
  /** How long the load of this version took, in seconds (`nv_model_load_duration_secs`). */
  readonly loadDurationSecs: number;
  /** The load's duration per phase (`nv_model_load_phase_duration_secs`); absent: not reported. */
  readonly loadPhases?: PhaseDurations<LoadPhase>;
  /** Present when a histogram family is enabled. */
  readonly histograms: VersionHistograms | undefined;
  /** The memory it holds (`nereid_model_memory_bytes`); absent: not reported. */
  readonly memory?: readonly { readonly type: string; readonly id: number; readonly byte_size: number }[];
  /** Its memory limit in bytes, 0 for none (`nereid_model_memory_limit_bytes`). */
  readonly memoryLimitBytes?: number;
  /** Set when the version uses the response cache: its `nv_cache_*_per_model` series are written. */
  readonly responseCache?: unknown;
}

/** What the server-wide `nv_cache_*` families read (cache/response-cache.ts `ResponseCache`). */
export interface MeteredCache {
  readonly capacityBytes: number;
  readonly counters: {
    readonly entries: number;
    readonly bytes: number;
    readonly hits: number;
    readonly misses: number;
    readonly lookups: number;
    readonly evictions: number;
    readonly lookupNs: number;
    readonly insertNs: number;
  };
}

/** The server-wide memory figures (`ServerMetrics.setMemorySource`; core/memory.ts). */
export interface MemorySource {
  /** `--memory-budget` in bytes; 0: none. */
  readonly budgetBytes: number;
  /** Bytes the loaded models hold, with loads under way's reservations. */
  readonly usedBytes: number;
  /** Versions stopped for passing their memory limit, by model. */
  readonly stops: ReadonlyMap<string, number>;
}

/** One weighted version of a model (`nereid_model_version_weight`). */
export interface VersionWeightSample {
  readonly model: string;
  readonly version: number;
  readonly weight: number;
}

/** Nereid's per-version memory gauge (docs/resources.md). */
export const MODEL_MEMORY_FAMILY = 'nereid_model_memory_bytes';

/** Nereid's gauge of the weights set by the `version_weights` load parameter (docs/operations.md). */
export const VERSION_WEIGHT_FAMILY = 'nereid_model_version_weight';

/** Preemption by priority (docs/resources.md): requests preempted, per model version and kind. */
export const PREEMPTION_FAMILY = 'nereid_inference_preemptions_total';

type Labels = Record<string, string>;

interface Sample {
  labels: Labels;
  value: number;
  /** For histogram series: `<family>_bucket`, `_sum`, `_count`. */
  metricName?: string;
}

type MetricKind = 'counter' | 'gauge' | 'histogram';
type MetricObject = Awaited<ReturnType<Counter['get']>>;

/**
 * prom-client's custom-collector pattern: a metric whose samples are produced at scrape time.
 * Per-model series carry labels that differ between models (`_<tag>`, §5.2), which prom-client's
 * own label bookkeeping cannot express; its registry and text writer are used as they are. The
 * registry reads a metric through `getForPromString` where present (histograms), else `get`.
 */
function scraped<M extends Counter | Gauge | Histogram>(metric: M, kind: MetricKind, help: string, produce: () => Sample[]): M {
  const name = (metric as unknown as { name: string }).name;
  const get = async (): Promise<MetricObject> =>
    ({ name, help, type: kind, values: produce(), aggregator: 'sum' }) as unknown as MetricObject;
  Object.assign(metric, { get, getForPromString: get });
  return metric;
}

/** Sorted, finite, distinct bucket bounds (`+Inf` is implicit). */
export function normalizeBuckets(buckets: readonly number[]): number[] {
  return [...new Set(buckets.filter((b) => Number.isFinite(b)))].sort((a, b) => a - b);
}

/**
 * The observations of one histogram series. Event-loop confined: observed by the statistics
 * listener, read by scrapes.
 */
export class HistogramSeries {
  readonly bounds: readonly number[];
  /** Per-bucket (not cumulative) counts; the last one is the `+Inf` overflow. */
  readonly #counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(bounds: readonly number[]) {
    this.bounds = normalizeBuckets(bounds);
    this.#counts = new Float64Array(this.bounds.length + 1);
  }

  observe(value: number): void {
    const bounds = this.bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    this.#counts[i]!++;
    this.sum += value;
    this.count++;
  }

  /** Cumulative counts per bound, then for `+Inf` (equal to `count`). */
  cumulative(): number[] {
    const out: number[] = [];
    let total = 0;
    for (const c of this.#counts) out.push((total += c));
    return out;
  }
}

/**
 * The histogram series of one loaded version, by family; installed as its statistics listener.
 */
export class VersionHistograms implements StatisticsListener {
  readonly series: ReadonlyMap<string, HistogramSeries>;
  readonly #request: HistogramSeries | undefined;
  readonly #queue: HistogramSeries | undefined;
  readonly #compute: HistogramSeries | undefined;
  readonly #firstResponse: HistogramSeries | undefined;
  readonly #batch: HistogramSeries | undefined;

  constructor(series: ReadonlyMap<string, HistogramSeries>) {
    this.series = series;
    this.#request = series.get(REQUEST_HISTOGRAM);
    this.#queue = series.get(QUEUE_HISTOGRAM);
    this.#compute = series.get(COMPUTE_HISTOGRAM);
    this.#firstResponse = series.get(FIRST_RESPONSE_HISTOGRAM);
    this.#batch = series.get(BATCH_SIZE_HISTOGRAM);
  }

  request(requestNs: bigint, queueNs: bigint, computeNs: bigint): void {
    const request = Number(requestNs);
    this.#request?.observe(request / 1e3);
    this.#queue?.observe(Number(queueNs) / 1e3);
    this.#compute?.observe(Number(computeNs) / 1e3);
    // A request has exactly one data response in this version, so the first response is the
    // request's end.
    this.#firstResponse?.observe(request / 1e6);
  }

  batch(size: number): void {
    this.#batch?.observe(size);
  }
}

/** Cumulative nanoseconds as microseconds, keeping the sub-microsecond part. */
function micros(d: StatDuration): number {
  return Number(d.ns / 1000n) + Number(d.ns % 1000n) / 1000;
}

/** A Prometheus label name from a `metric_tags` key: `_` + the key, invalid characters as `_`. */
function tagLabel(key: string): string {
  return `_${key.replace(/[^a-zA-Z0-9_]/g, '_')}`;
}

/** `model`, `version` and `_<tag>` labels in name order, as Triton writes them. */
function versionLabels(v: MeteredVersion, extra?: Labels): Labels {
  const all: Labels = { model: v.name, version: String(v.version), ...extra };
  for (const [key, value] of Object.entries(v.config.metric_tags)) all[tagLabel(key)] = value;
  const sorted: Labels = {};
  for (const k of Object.keys(all).sort()) sorted[k] = all[k]!;
  return sorted;
}

/** One usage sample of the machine's CPUs (cumulative ticks since boot). */
interface CpuTimes {
  idle: number;
  total: number;
}

function readCpuTimes(): CpuTimes {
  try {
    // /proc/stat's first line: cpu user nice system idle iowait irq softirq steal guest guest_nice.
    const line = readFileSync('/proc/stat', 'latin1').split('\n', 1)[0]!;
    const t = line.trim().split(/\s+/).slice(1, 9).map(Number);
    if (t.length === 8 && t.every((x) => Number.isFinite(x))) {
      return { idle: t[3]! + t[4]!, total: t.reduce((a, b) => a + b, 0) };
    }
  } catch {
    // Not Linux: os.cpus() below.
  }
  let idle = 0;
  let total = 0;
  for (const c of cpus()) {
    idle += c.times.idle;
    total += c.times.user + c.times.nice + c.times.sys + c.times.idle + c.times.irq;
  }
  return { idle, total };
}

function readMemory(): { total: number; used: number } {
  try {
    const text = readFileSync('/proc/meminfo', 'latin1');
    const kb = (key: string) => {
      const m = new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text);
      return m ? Number(m[1]) * 1024 : undefined;
    };
    const total = kb('MemTotal');
    const available = kb('MemAvailable');
    if (total !== undefined && available !== undefined) return { total, used: Math.max(0, total - available) };
  } catch {
    // Not Linux: os.totalmem()/freemem() below.
  }
  const total = totalmem();
  return { total, used: Math.max(0, total - freemem()) };
}

/**
 * The metrics of one server. `versions` lists the loaded versions at the time of a scrape (the
 * server passes its READY versions). `start()`/`stop()` run the CPU sampler (timer unref'd, so it
 * never keeps a process alive). Everything runs on the event loop: scrapes may overlap, each reads
 * a consistent snapshot because producing the samples never awaits.
 */
export class ServerMetrics {
  /** The registry `GET /metrics` serves; embedders may register their own metrics in it. */
  readonly registry = new Registry();
  /** The Content-Type of `text()` (protocol.md §5.1). */
  readonly contentType = 'text/plain; charset=utf-8';
  readonly #versions: () => Iterable<MeteredVersion>;
  readonly #weights: () => Iterable<VersionWeightSample>;
  readonly #options: Required<Omit<MetricsOptions, 'buckets'>> & { buckets: Readonly<Record<string, readonly number[]>> };
  readonly #logger: Logger | undefined;
  readonly #histogramFamilies: readonly string[];
  /** The last unload of each model version, by `<model>\0<version>`. */
  readonly #unloads = new Map<string, UnloadRecord>();
  #timer: NodeJS.Timeout | undefined;
  #cpuPrevious: CpuTimes | undefined;
  #cpuUtilization: Gauge | undefined;
  #cpuMemoryTotal: Gauge | undefined;
  #cpuMemoryUsed: Gauge | undefined;
  #memorySource: MemorySource | undefined;
  #gpuSampler: GpuSampler | undefined;

  /** `weights`: the version weights in effect at the time of a scrape (the server passes its model manager's). */
  constructor(versions: () => Iterable<MeteredVersion>, options: MetricsOptions = {}, logger?: Logger, weights: () => Iterable<VersionWeightSample> = () => []) {
    this.#versions = versions;
    this.#weights = weights;
    this.#logger = logger;
    this.#options = {
      counterLatencies: options.counterLatencies ?? true,
      histogramLatencies: options.histogramLatencies ?? false,
      histogramBatchSize: options.histogramBatchSize ?? false,
      buckets: options.buckets ?? {},
      cpu: options.cpu ?? true,
      gpu: options.gpu ?? true,
      intervalMs: options.intervalMs ?? 2000,
    };
    for (const family of Object.keys(this.#options.buckets)) {
      if (HISTOGRAM_FAMILIES[family] === undefined) {
        throw new NereidError(
          'CONFIG_INVALID',
          `'${family}' is not a histogram family; histogram families are ${Object.keys(HISTOGRAM_FAMILIES).join(', ')}`,
        );
      }
    }
    this.#histogramFamilies = Object.entries(HISTOGRAM_FAMILIES)
      .filter(([, f]) => (f.latency ? this.#options.histogramLatencies : this.#options.histogramBatchSize))
      .map(([name]) => name);
    this.#registerModelFamilies();
    if (this.#options.cpu) this.#registerCpuFamilies();
  }

  /**
   * Registers the response cache families (Triton's, models-and-scheduling.md §8.2): per model
   * version that uses the cache, its hits and misses and their durations (µs) from its
   * statistics; server-wide, the cache's own counters. Called once, when the server has a cache.
   */
  useCache(cache: MeteredCache): void {
    const counter = (name: string, help: string, produce: () => Sample[]) =>
      this.registry.registerMetric(scraped(new Counter({ name, help, registers: [] }), 'counter', help, produce));
    const gauge = (name: string, help: string, value: () => number) =>
      this.registry.registerMetric(scraped(new Gauge({ name, help, registers: [] }), 'gauge', help, () => [{ labels: {}, value: value() }]));
    const each = (value: (v: MeteredVersion) => number) => () => {
      const out: Sample[] = [];
      for (const v of this.#versions()) if (v.responseCache !== undefined) out.push({ labels: versionLabels(v), value: value(v) });
      return out;
    };
    counter('nv_cache_num_hits_per_model', 'Number of cache hits per model', each((v) => v.stats.cacheHit.count));
    counter('nv_cache_hit_duration_per_model', 'Total cache hit duration per model, in microseconds', each((v) => micros(v.stats.cacheHit)));
    counter('nv_cache_num_misses_per_model', 'Number of cache misses per model', each((v) => v.stats.cacheMiss.count));
    counter(
      'nv_cache_miss_duration_per_model',
      'Total cache miss (insert+lookup) duration per model, in microseconds',
      each((v) => micros(v.stats.cacheMiss)),
    );
    const c = cache.counters;
    gauge('nv_cache_util', 'Cache utilization [0.0 - 1.0]', () => (cache.capacityBytes > 0 ? c.bytes / cache.capacityBytes : 0));
    gauge('nv_cache_num_entries', 'Number of responses stored in response cache', () => c.entries);
    gauge('nv_cache_num_hits', 'Number of cache hits in response cache', () => c.hits);
    gauge('nv_cache_num_misses', 'Number of cache misses in response cache', () => c.misses);
    gauge('nv_cache_num_lookups', 'Number of cache lookups in response cache', () => c.lookups);
    gauge('nv_cache_num_evictions', 'Number of cache evictions in response cache', () => c.evictions);
    gauge('nv_cache_lookup_duration', 'Total cache lookup duration (hit and miss), in microseconds', () => Math.floor(c.lookupNs / 1000));
    gauge('nv_cache_insertion_duration', 'Total cache insertion duration, in microseconds', () => Math.floor(c.insertNs / 1000));
  }

  /** Where the server-wide memory families read their figures (the server's `MemoryAccounting`). */
  setMemorySource(source: MemorySource): void {
    this.#memorySource = source;
  }

  /** The exposition text (Prometheus text format 0.0.4) of every registered family. */
  text(): Promise<string> {
    return this.registry.metrics();
  }

  /**
   * The histograms of a version being loaded, installed as `stats`' listener; `undefined` (and no
   * listener) when no histogram family is enabled. Bucket bounds: the model's `model_metrics`
   * control for the family, else the server-wide setting, else the default (for the batch-size
   * histogram, powers of two up to `max_batch_size`).
   */
  histogramsFor(config: Pick<ModelConfig, 'name' | 'max_batch_size' | 'model_metrics'>, stats: ModelStatistics): VersionHistograms | undefined {
    const overrides = new Map<string, readonly number[]>();
    for (const control of config.model_metrics?.metric_control ?? []) {
      const family = control.metric_identifier?.family ?? '';
      if (HISTOGRAM_FAMILIES[family] === undefined) {
        this.#logger?.warning(
          `model '${config.name}': model_metrics names '${family}', which is not a histogram family of this server; ignored`,
        );
        continue;
      }
      if (control.histogram_options !== undefined) overrides.set(family, control.histogram_options.buckets);
    }
    if (this.#histogramFamilies.length === 0) return undefined;
    const series = new Map<string, HistogramSeries>();
    for (const family of this.#histogramFamilies) {
      const bounds = overrides.get(family) ?? this.#options.buckets[family] ?? defaultBuckets(family, config.max_batch_size);
      series.set(family, new HistogramSeries(bounds));
    }
    const histograms = new VersionHistograms(series);
    stats.setListener(histograms);
    return histograms;
  }

  /**
   * Records the unload of a version: its phases stay in `nv_model_unload_phase_duration_secs`
   * (the last unload of each model version, so that it can be read after the version is gone)
   * until `stop()`.
   */
  recordUnload(record: UnloadRecord): void {
    const key = `${record.name}\0${record.version}`;
    this.#unloads.delete(key);
    this.#unloads.set(key, record);
  }

  /** The last unload of each model version, oldest first. */
  unloads(): UnloadRecord[] {
    return [...this.#unloads.values()];
  }

  /** Starts sampling the CPU families every `intervalMs` (no-op without them or when running). */
  start(): void {
    if (!this.#options.cpu || this.#timer !== undefined) return;
    this.#cpuPrevious = readCpuTimes();
    this.#sampleMemory();
    this.#timer = setInterval(() => this.#sample(), this.#options.intervalMs);
    this.#timer.unref();
  }

  /**
   * Stops the CPU sampler and forgets the recorded unloads: once the server has stopped, no
   * per-model series remain.
   */
  stop(): void {
    this.#unloads.clear();
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  #sample(): void {
    const now = readCpuTimes();
    const previous = this.#cpuPrevious;
    this.#cpuPrevious = now;
    if (previous !== undefined) {
      const total = now.total - previous.total;
      const busy = total - (now.idle - previous.idle);
      if (total > 0) this.#cpuUtilization?.set(Math.min(1, Math.max(0, busy / total)));
    }
    this.#sampleMemory();
  }

  #sampleMemory(): void {
    const memory = readMemory();
    this.#cpuMemoryTotal?.set(memory.total);
    this.#cpuMemoryUsed?.set(memory.used);
  }

  #registerModelFamilies(): void {
    const each = (value: (v: MeteredVersion) => number) => () => {
      const out: Sample[] = [];
      for (const v of this.#versions()) out.push({ labels: versionLabels(v), value: value(v) });
      return out;
    };
    const counter = (name: string, help: string, produce: () => Sample[]) =>
      this.registry.registerMetric(scraped(new Counter({ name, help, registers: [] }), 'counter', help, produce));
    const gauge = (name: string, help: string, produce: () => Sample[]) =>
      this.registry.registerMetric(scraped(new Gauge({ name, help, registers: [] }), 'gauge', help, produce));

    counter('nv_inference_request_success', 'Number of successful inference requests, all batch sizes', each((v) => v.stats.success.count));
    counter('nv_inference_request_failure', 'Number of failed inference requests, all batch sizes', () => {
      const out: Sample[] = [];
      for (const v of this.#versions()) {
        for (const reason of FAILURE_REASONS) out.push({ labels: versionLabels(v, { reason }), value: v.stats.failures[reason] });
      }
      return out;
    });
    counter('nv_inference_count', 'Number of inferences performed (does not include cached requests)', each((v) => v.stats.inferenceCount));
    counter(
      'nv_inference_exec_count',
      'Number of model executions performed (does not include cached requests)',
      each((v) => v.stats.executionCount),
    );
    gauge(
      'nv_inference_pending_request_count',
      'Instantaneous number of pending requests awaiting execution per-model.',
      each((v) => v.scheduler.queuedCount),
    );
    gauge(VERSION_WEIGHT_FAMILY, 'Weight of a model version for requests that name no version (load parameter version_weights)', () => {
      const out: Sample[] = [];
      for (const w of this.#weights()) out.push({ labels: { model: w.model, version: String(w.version) }, value: w.weight });
      return out;
    });
    // Preemption by priority (scheduling/preemption.ts).
    counter(PREEMPTION_FAMILY, 'Number of inference requests preempted by higher-priority ones, by kind (queued, running)', () => {
      const out: Sample[] = [];
      for (const v of this.#versions()) {
        for (const kind of PREEMPTION_KINDS) out.push({ labels: versionLabels(v, { kind }), value: v.stats.preemptions[kind] });
      }
      return out;
    });
    gauge('nv_model_load_duration_secs', 'Model load time in seconds', each((v) => v.loadDurationSecs));
    gauge(LOAD_PHASE_FAMILY, 'Model load time per phase (read, parse, auto_complete, backend_init, warmup), in seconds', () => {
      const out: Sample[] = [];
      for (const v of this.#versions()) {
        const phases = v.loadPhases;
        if (phases === undefined) continue;
        for (const phase of LOAD_PHASES) out.push({ labels: versionLabels(v, { phase }), value: phases[phase] });
      }
      return out;
    });
    gauge(UNLOAD_PHASE_FAMILY, 'Time of the last unload of a model version per phase (drain, release), in seconds', () => {
      const out: Sample[] = [];
      for (const u of this.#unloads.values()) {
        for (const phase of UNLOAD_PHASES) {
          out.push({ labels: { model: u.name, phase, version: String(u.version) }, value: u.phases[phase] });
        }
      }
      return out;
    });
    if (this.#options.counterLatencies) {
      counter(
        'nv_inference_request_duration_us',
        'Cumulative inference request duration in microseconds (includes cached requests)',
        each((v) => micros(v.stats.success)),
      );
      counter(
        'nv_inference_queue_duration_us',
        'Cumulative inference queuing duration in microseconds (includes cached requests)',
        each((v) => micros(v.stats.queue)),
      );
      counter(
        'nv_inference_compute_input_duration_us',
        'Cumulative compute input duration in microseconds (does not include cached requests)',
        each((v) => micros(v.stats.computeInput)),
      );
      counter(
        'nv_inference_compute_infer_duration_us',
        'Cumulative compute inference duration in microseconds (does not include cached requests)',
        each((v) => micros(v.stats.computeInfer)),
      );
      counter(
        'nv_inference_compute_output_duration_us',
        'Cumulative inference compute output duration in microseconds (does not include cached requests)',
        each((v) => micros(v.stats.computeOutput)),
      );
    }
    this.#registerMemoryFamilies(gauge, counter);
    for (const family of this.#histogramFamilies) {
      const help = HISTOGRAM_FAMILIES[family]!.help;
      const produce = () => {
        const out: Sample[] = [];
        for (const v of this.#versions()) {
          const series = v.histograms?.series.get(family);
          if (series === undefined) continue;
          const labels = versionLabels(v);
          const cumulative = series.cumulative();
          series.bounds.forEach((bound, i) => {
            out.push({ metricName: `${family}_bucket`, labels: { ...labels, le: String(bound) }, value: cumulative[i]! });
          });
          out.push({ metricName: `${family}_bucket`, labels: { ...labels, le: '+Inf' }, value: series.count });
          // Rounded to 1e-6 of the unit (a nanosecond for µs): no float noise like 3909.3630000000003.
          out.push({ metricName: `${family}_sum`, labels, value: Math.round(series.sum * 1e6) / 1e6 });
          out.push({ metricName: `${family}_count`, labels, value: series.count });
        }
        return out;
      };
      // prom-client requires at least one bucket to construct a histogram; the buckets written are
      // each series' own.
      this.registry.registerMetric(scraped(new Histogram({ name: family, help, registers: [], buckets: [1] }), 'histogram', help, produce));
    }
  }

  /**
   * Memory accounting and budgets (docs/resources.md): per-version memory and limits, the
   * server-wide budget and what is accounted against it, and versions stopped for passing their
   * limit. Read at scrape time like the other per-model families.
   */
  #registerMemoryFamilies(
    gauge: (name: string, help: string, produce: () => Sample[]) => void,
    counter: (name: string, help: string, produce: () => Sample[]) => void,
  ): void {
    gauge(MODEL_MEMORY_FAMILY, 'Memory a model version holds, in bytes, by memory type and device (the statistics extension\'s memory_usage)', () => {
      const out: Sample[] = [];
      for (const v of this.#versions()) {
        for (const m of v.memory ?? []) out.push({ labels: versionLabels(v, { id: String(m.id), type: m.type }), value: m.byte_size });
      }
      return out;
    });
    gauge('nereid_model_memory_limit_bytes', 'Memory limit of a model version, in bytes (parameter memory_limit or --model-memory-limit)', () => {
      const out: Sample[] = [];
      for (const v of this.#versions()) if (v.memoryLimitBytes) out.push({ labels: versionLabels(v), value: v.memoryLimitBytes });
      return out;
    });
    gauge('nereid_memory_budget_bytes', 'Memory all models together may hold, in bytes (--memory-budget); absent without one', () => {
      const budget = this.#memorySource?.budgetBytes ?? 0;
      return budget > 0 ? [{ labels: {}, value: budget }] : [];
    });
    gauge('nereid_memory_used_bytes', 'Memory accounted to the loaded models (and loads under way), in bytes', () =>
      this.#memorySource === undefined ? [] : [{ labels: {}, value: this.#memorySource.usedBytes }],
    );
    counter('nereid_model_memory_limit_stops_total', 'Model versions stopped because they outgrew their memory limit', () => {
      const out: Sample[] = [];
      for (const [model, n] of this.#memorySource?.stops ?? []) out.push({ labels: { model }, value: n });
      return out;
    });
  }

  // --- GPU metrics (GPU and MIG placement): Triton's nv_gpu_* families, from nvidia-smi samples.

  /**
   * Reports the GPUs `sampler` samples in the `nv_gpu_*` families (labelled `gpu_uuid`), unless
   * `--allow-gpu-metrics=false`; without GPUs there are none, as in Triton. Call once; the
   * caller runs the sampler.
   */
  useGpuSampler(sampler: GpuSampler): void {
    if (!this.#options.gpu || this.#gpuSampler !== undefined) return;
    this.#gpuSampler = sampler;
    const gauge = (name: string, help: string, value: (s: GpuSample) => number | undefined) =>
      this.registry.registerMetric(
        scraped(new Gauge({ name, help, registers: [] }), 'gauge', help, () =>
          sampler.samples.flatMap((s) => {
            const v = value(s);
            return v === undefined ? [] : [{ labels: { gpu_uuid: s.uuid }, value: v }];
          }),
        ),
      );
    gauge('nv_gpu_utilization', 'GPU utilization rate [0.0 - 1.0)', (s) => s.utilization);
    gauge('nv_gpu_memory_total_bytes', 'GPU total memory, in bytes', (s) => s.memoryTotalBytes);
    gauge('nv_gpu_memory_used_bytes', 'GPU used memory, in bytes', (s) => s.memoryUsedBytes);
    gauge('nv_gpu_power_usage', 'GPU power usage in watts', (s) => s.powerWatts);
    gauge('nv_gpu_power_limit', 'GPU power management limit in watts', (s) => s.powerLimitWatts);
    const energyHelp = 'GPU energy consumption in joules since the Triton Server started';
    this.registry.registerMetric(
      scraped(new Counter({ name: 'nv_energy_consumption', help: energyHelp, registers: [] }), 'counter', energyHelp, () =>
        sampler.samples.flatMap((s) => {
          const joules = sampler.energyJoules(s.uuid);
          return joules === undefined ? [] : [{ labels: { gpu_uuid: s.uuid }, value: Math.round(joules * 1000) / 1000 }];
        }),
      ),
    );
  }

  /** `--metrics-interval-ms`: how often per-interval families are sampled. */
  get intervalMs(): number {
    return this.#options.intervalMs;
  }

  #registerCpuFamilies(): void {
    const gauge = (name: string, help: string) => new Gauge({ name, help, registers: [this.registry] });
    this.#cpuUtilization = gauge('nv_cpu_utilization', 'CPU utilization rate [0.0 - 1.0]');
    this.#cpuMemoryTotal = gauge('nv_cpu_memory_total_bytes', 'CPU total memory (RAM), in bytes');
    this.#cpuMemoryUsed = gauge('nv_cpu_memory_used_bytes', 'CPU used memory (RAM), in bytes');
  }
}

function defaultBuckets(family: string, maxBatchSize: number): readonly number[] {
  if (family === FIRST_RESPONSE_HISTOGRAM) return DEFAULT_FIRST_RESPONSE_BUCKETS_MS;
  if (family === BATCH_SIZE_HISTOGRAM) {
    const out: number[] = [];
    for (let b = 1; b <= Math.max(1, maxBatchSize); b *= 2) out.push(b);
    return out;
  }
  return DEFAULT_LATENCY_BUCKETS_US;
}

/** Every histogram family name (for option validation and docs). */
export function histogramFamilies(): string[] {
  return Object.keys(HISTOGRAM_FAMILIES);
}
