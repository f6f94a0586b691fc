/**
 * Periodic samples of the GPUs (utilization, memory, power) and of the GPU memory each process
 * uses, from nvidia-smi, for the `nv_gpu_*` metric families and the Python backend's
 * `memoryUsage`. One nvidia-smi call of each kind at a time; a call that fails or hangs (bounded
 * by the timeout) logs one line per kind of failure and leaves the previous sample in place.
 */
import type { Logger } from '../observability/logger.js';
import type { DeviceList } from './discovery.js';
import { DEFAULT_NVIDIA_SMI_TIMEOUT_MS } from './discovery.js';
import { QUERY_COMPUTE_APPS, QUERY_METRICS, parseComputeApps, parseGpuSamples, runNvidiaSmi, type ComputeApp, type GpuSample } from './nvidia-smi.js';

export interface GpuSamplerOptions {
  readonly command?: string;
  readonly timeoutMs?: number;
  /** How often to sample (Triton's `--metrics-interval-ms`, default 2000). */
  readonly intervalMs?: number;
  /** Also sample the processes' GPU memory (`--query-compute-apps`). */
  readonly processes?: boolean;
  readonly logger?: Logger;
}

export class GpuSampler {
  readonly #devices: DeviceList;
  readonly #command: string;
  readonly #timeoutMs: number;
  readonly #intervalMs: number;
  readonly #processes: boolean;
  readonly #logger: Logger | undefined;
  #timer: NodeJS.Timeout | undefined;
  #inFlight: Promise<void> | undefined;
  /** The last sample of each visible GPU, by UUID. */
  #samples = new Map<string, GpuSample>();
  #apps: readonly ComputeApp[] = [];
  /** Joules since start, by GPU UUID: power integrated over the sample intervals. */
  readonly #energy = new Map<string, number>();
  #lastAt: number | undefined;
  readonly #warned = new Set<string>();

  constructor(devices: DeviceList, options: GpuSamplerOptions = {}) {
    this.#devices = devices;
    this.#command = options.command ?? 'nvidia-smi';
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_NVIDIA_SMI_TIMEOUT_MS;
    this.#intervalMs = options.intervalMs ?? 2000;
    this.#processes = options.processes ?? false;
    this.#logger = options.logger;
  }

  /** Samples now, then every interval (the timer is unref'd). Idempotent. */
  start(): void {
    if (this.#timer !== undefined || !this.#devices.hasGpu) return;
    void this.sample();
    this.#timer = setInterval(() => void this.sample(), this.#intervalMs);
    this.#timer.unref();
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  /** Takes one sample (or waits for the one in flight). Never rejects. */
  sample(): Promise<void> {
    this.#inFlight ??= this.#take().finally(() => (this.#inFlight = undefined));
    return this.#inFlight;
  }

  async #take(): Promise<void> {
    const [gpus, apps] = await Promise.all([
      runNvidiaSmi(this.#command, QUERY_METRICS, this.#timeoutMs),
      this.#processes ? runNvidiaSmi(this.#command, QUERY_COMPUTE_APPS, this.#timeoutMs) : Promise.resolve(undefined),
    ]);
    const now = performance.now();
    if (gpus.ok) {
      try {
        const visible = new Set(this.#devices.gpus.map((g) => g.uuid));
        const samples = new Map(parseGpuSamples(gpus.stdout).filter((s) => visible.has(s.uuid)).map((s) => [s.uuid, s] as const));
        const seconds = this.#lastAt === undefined ? 0 : (now - this.#lastAt) / 1000;
        for (const [uuid, s] of samples) {
          const before = this.#samples.get(uuid)?.powerWatts ?? s.powerWatts;
          if (s.powerWatts !== undefined && before !== undefined) this.#energy.set(uuid, (this.#energy.get(uuid) ?? 0) + ((before + s.powerWatts) / 2) * seconds);
          else if (!this.#energy.has(uuid)) this.#energy.set(uuid, 0);
        }
        this.#samples = samples;
        this.#lastAt = now;
      } catch (err) {
        this.#warnOnce('parse-gpus', `GPU metrics: ${(err as Error).message}`);
      }
    } else {
      this.#warnOnce('gpus', `GPU metrics: ${gpus.reason}; the GPU families keep their last values`);
    }
    if (apps !== undefined) {
      if (apps.ok) this.#apps = parseComputeApps(apps.stdout);
      else this.#warnOnce('apps', `GPU memory per process: ${apps.reason}`);
    }
  }

  #warnOnce(kind: string, message: string): void {
    if (this.#warned.has(kind)) return;
    this.#warned.add(kind);
    this.#logger?.warning(message);
  }

  /** The last sample of each GPU, in the server's device order. */
  get samples(): GpuSample[] {
    return this.#devices.gpus.map((g) => this.#samples.get(g.uuid)).filter((s): s is GpuSample => s !== undefined);
  }

  /** Energy since start in joules, by GPU UUID. */
  energyJoules(uuid: string): number | undefined {
    return this.#energy.get(uuid);
  }

  /** GPU memory `pid` uses on each GPU (index → bytes), from the last sample; empty if none. */
  processMemory(pid: number): Map<number, number> {
    const out = new Map<number, number>();
    for (const app of this.#apps) {
      if (app.pid !== pid || app.usedBytes === undefined) continue;
      const gpu = this.#devices.gpus.find((g) => g.uuid === app.gpuUuid);
      if (gpu !== undefined) out.set(gpu.index, (out.get(gpu.index) ?? 0) + app.usedBytes);
    }
    return out;
  }
}
