/**
 * `--collect-metrics` (perf-and-analyzer.md §1.3, §1.5): the server's Prometheus endpoint scraped
 * every `--metrics-interval` ms while a level runs. perf_analyzer reads the per-GPU families
 * (`nv_gpu_utilization`, `nv_gpu_power_usage`, `nv_gpu_memory_used_bytes`,
 * `nv_gpu_memory_total_bytes`, keyed by `gpu_uuid`) and warns once for each one a scrape lacks;
 * this collector does the same, and also keeps what a CPU server reports: `nv_cpu_utilization`,
 * `nv_cpu_memory_used_bytes` and the measured model's `nv_inference_pending_request_count`.
 */
import { NereidError } from '@nereid/protocol';

/** The per-GPU families (keyed by `gpu_uuid`) and the CPU figures, of one scrape or of several. */
export interface GpuAndCpuFigures {
  gpuUtilization: Record<string, number>;
  gpuPowerUsage: Record<string, number>;
  gpuMemoryUsed: Record<string, number>;
  gpuMemoryTotal: Record<string, number>;
  cpuUtilization?: number;
  cpuMemoryUsed?: number;
}

/** One scrape; absent families are empty maps / undefined. */
export interface MetricsSample extends GpuAndCpuFigures {
  /** `performance.now()` when the reply arrived. */
  at: number;
  /** The measured model's pending requests (summed over its versions). */
  pendingRequests?: number;
}

/**
 * The samples of a level's merged windows, aggregated as perf_analyzer does: utilization and
 * power averaged, used memory the maximum, total memory the first sample (per GPU); beyond it,
 * CPU utilization averaged, CPU memory the maximum, pending requests averaged and the maximum.
 */
export interface MetricsSummary extends GpuAndCpuFigures {
  samples: number;
  avgPendingRequests?: number;
  maxPendingRequests?: number;
}

const GPU_FAMILIES = {
  nv_gpu_utilization: 'gpuUtilization',
  nv_gpu_power_usage: 'gpuPowerUsage',
  nv_gpu_memory_used_bytes: 'gpuMemoryUsed',
  nv_gpu_memory_total_bytes: 'gpuMemoryTotal',
} as const;

function labelsOf(text: string): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const m of text.matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[m[1]] = m[2].replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c));
  return labels;
}

/** Reads the families above from Prometheus text exposition format. */
export function parseMetrics(text: string, model: string, at: number): MetricsSample {
  const sample: MetricsSample = { at, gpuUtilization: {}, gpuPowerUsage: {}, gpuMemoryUsed: {}, gpuMemoryTotal: {} };
  for (const line of text.split('\n')) {
    if (line === '' || line.startsWith('#')) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{.*\})?\s+(\S+)/.exec(line);
    if (m === null) continue;
    const [, name, labelText, valueText] = m;
    const value = Number(valueText);
    if (!Number.isFinite(value)) continue;
    const gpu = GPU_FAMILIES[name as keyof typeof GPU_FAMILIES];
    if (gpu !== undefined) {
      sample[gpu][labelsOf(labelText ?? '').gpu_uuid ?? ''] = value;
    } else if (name === 'nv_cpu_utilization') {
      sample.cpuUtilization = value;
    } else if (name === 'nv_cpu_memory_used_bytes') {
      sample.cpuMemoryUsed = value;
    } else if (name === 'nv_inference_pending_request_count' && labelsOf(labelText ?? '').model === model) {
      sample.pendingRequests = (sample.pendingRequests ?? 0) + value;
    }
  }
  return sample;
}

export function summarizeMetrics(samples: readonly MetricsSample[]): MetricsSummary {
  const perGpu = (key: (typeof GPU_FAMILIES)[keyof typeof GPU_FAMILIES], how: 'avg' | 'max' | 'first') => {
    const out: Record<string, number> = {};
    const seen: Record<string, number[]> = {};
    for (const s of samples) for (const [uuid, v] of Object.entries(s[key])) (seen[uuid] ??= []).push(v);
    for (const [uuid, values] of Object.entries(seen)) {
      out[uuid] = how === 'avg' ? values.reduce((a, b) => a + b, 0) / values.length : how === 'max' ? Math.max(...values) : values[0];
    }
    return out;
  };
  const numbers = (pick: (s: MetricsSample) => number | undefined) => samples.map(pick).filter((v): v is number => v !== undefined);
  const avg = (v: number[]) => (v.length > 0 ? v.reduce((a, b) => a + b, 0) / v.length : undefined);
  const max = (v: number[]) => (v.length > 0 ? Math.max(...v) : undefined);
  const pending = numbers((s) => s.pendingRequests);
  return {
    samples: samples.length,
    gpuUtilization: perGpu('gpuUtilization', 'avg'),
    gpuPowerUsage: perGpu('gpuPowerUsage', 'avg'),
    gpuMemoryUsed: perGpu('gpuMemoryUsed', 'max'),
    gpuMemoryTotal: perGpu('gpuMemoryTotal', 'first'),
    cpuUtilization: avg(numbers((s) => s.cpuUtilization)),
    cpuMemoryUsed: max(numbers((s) => s.cpuMemoryUsed)),
    avgPendingRequests: avg(pending),
    maxPendingRequests: max(pending),
  };
}

/** `--metrics-url` as a fetchable URL (perf_analyzer takes `host:port/path`). */
export function metricsHref(url: string): string {
  return /^https?:\/\//.test(url) ? url : `http://${url}`;
}

/**
 * Scrapes in the background between `start` and `stop`; `between` hands out the samples taken in
 * a window. A failed scrape is skipped; `check` (run once before measuring) turns an unreachable
 * endpoint into an error. `warn` gets perf_analyzer's missing-metric warnings, once per run.
 */
export class MetricsCollector {
  readonly #href: string;
  readonly #model: string;
  readonly #intervalMs: number;
  readonly #warn: (line: string) => void;
  #samples: MetricsSample[] = [];
  #timer: NodeJS.Timeout | undefined;
  #inflight: Promise<void> | undefined;
  #warned = false;

  constructor(url: string, intervalMs: number, model: string, warn: (line: string) => void) {
    this.#href = metricsHref(url);
    this.#intervalMs = intervalMs;
    this.#model = model;
    this.#warn = warn;
  }

  /** One scrape; throws NereidError PERF_SERVER_UNREACHABLE naming the URL when it fails. */
  async check(): Promise<void> {
    let res: Response;
    try {
      res = await fetch(this.#href, { signal: AbortSignal.timeout(10_000) });
    } catch (err) {
      const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err instanceof Error ? err.message : String(err));
      throw new NereidError('PERF_SERVER_UNREACHABLE', `--collect-metrics: cannot reach the metrics endpoint ${this.#href} (${cause}); give the server's metrics address with --metrics-url HOST:PORT/metrics`);
    }
    await res.text();
    if (!res.ok) {
      throw new NereidError('PERF_SERVER_UNREACHABLE', `--collect-metrics: ${this.#href} answered HTTP ${res.status}; give the server's metrics address with --metrics-url HOST:PORT/metrics`);
    }
  }

  start(): void {
    if (this.#timer !== undefined) return;
    const tick = () => {
      this.#inflight ??= this.#scrape().finally(() => (this.#inflight = undefined));
    };
    tick();
    this.#timer = setInterval(tick, this.#intervalMs);
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    this.#timer = undefined;
    await this.#inflight;
  }

  /** The samples that arrived in [start, end), removed from the collector along with older ones. */
  between(start: number, end: number): MetricsSample[] {
    const taken = this.#samples.filter((s) => s.at >= start && s.at < end);
    this.#samples = this.#samples.filter((s) => s.at >= end);
    return taken;
  }

  async #scrape(): Promise<void> {
    try {
      const res = await fetch(this.#href, { signal: AbortSignal.timeout(Math.max(1000, this.#intervalMs * 5)) });
      const text = await res.text();
      if (!res.ok) return;
      const sample = parseMetrics(text, this.#model, performance.now());
      this.#samples.push(sample);
      this.#checkMissing(sample);
    } catch {
      // A scrape that fails leaves a gap; the window keeps the others.
    }
  }

  #checkMissing(s: MetricsSample): void {
    if (this.#warned) return;
    for (const [family, key] of Object.entries(GPU_FAMILIES)) {
      if (Object.keys(s[key]).length === 0) {
        this.#warn(`WARNING: Unable to parse '${family}' metric.\n`);
        this.#warned = true;
      }
    }
  }
}
