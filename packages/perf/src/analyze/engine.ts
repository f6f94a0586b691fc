/**
 * The measuring side of `nereid analyze`: applies a variant to the running server through the
 * model repository API (local mode: the variant's directory in the output repository, loaded by
 * name; remote mode: its config and files sent as load overrides), measures it with `nereid
 * perf`'s engine (`PerfSession`), one load level at a time, and checkpoints every measurement.
 * A measurement already in the checkpoint is returned without measuring again; a variant skipped
 * in an earlier run is tried again (the failure may have been the server's or the machine's).
 *
 * Model Analyzer's guards: a level that does not stabilize is measured again with a window 1000 ms
 * longer (or 50 requests more), up to `perf_analyzer_max_auto_adjusts` times, then kept and marked
 * unstable; a level that takes longer than `perf_analyzer_timeout` is abandoned and recorded as
 * skipped; a variant that fails to load is skipped with the server's reason.
 */
import { join } from 'node:path';
import { PerfSession } from '../perf.js';
import type { LevelSummary } from '../report.js';
import { variantFiles, writeVariant, type ConfigText } from './outputs.js';
import type { Level, Prober } from './search.js';
import type { ServerHandle } from './server.js';
import type { AnalyzeConfig, Measurement, ProfileModel, Skipped, Variant } from './types.js';

/** perf_analyzer flags the analyzer sets itself (Model Analyzer overrides the same ones). */
const OWN_FLAGS = new Set([
  'm', 'model-name', 'b', 'batch-size', 'concurrency-range', 'request-rate-range', 'u', 'url', 'i', 'protocol', 'f', 'filename',
  'service-kind', 'json', 'progress', 'workers', 'latency-report-file', 'collect-metrics', 'metrics-url', 'binary-search', 'l', 'latency-threshold',
]);

/** The measurement settings unless perf_analyzer_flags say otherwise: 1 s windows, perf_analyzer's stability rule. */
const DEFAULT_FLAGS: Record<string, string> = { 'measurement-interval': '1000', 'stability-percentage': '10', 'max-trials': '10' };

export interface EngineEvents {
  /** A measurement was taken (not restored from the checkpoint). */
  measured?(m: Measurement): void;
  /** A notice for the user (a skipped variant, a retry). */
  notice?(text: string): void;
  progress?: { plan(model: string, n: number): void; done(variant: Variant): void; level(variant: Variant, level: Level): void };
}

interface Session {
  perf: PerfSession;
  key: string;
}

function levelKey(variant: Variant, level: Level): string {
  return `${variant.name}|${JSON.stringify(variant.config)}|b${level.batchSize}|${level.concurrency !== undefined ? `c${level.concurrency}` : `r${level.requestRate}`}${level.screen ? '|screen' : ''}`;
}

function measurementKey(m: Measurement, variants: ReadonlyMap<string, Variant>): string | undefined {
  const v = variants.get(m.variant);
  return v ? levelKey(v, { batchSize: m.batchSize, concurrency: m.concurrency, requestRate: m.requestRate, screen: m.screening }) : undefined;
}

export class Engine implements Prober {
  readonly measurements: Measurement[] = [];
  readonly skipped: Skipped[] = [];
  /** Measurements this run took (not restored). */
  taken = 0;
  readonly #config: AnalyzeConfig;
  readonly #server: ServerHandle;
  readonly #text: ConfigText;
  readonly #models: Map<string, ProfileModel>;
  readonly #events: EngineEvents;
  readonly #save: () => Promise<void>;
  readonly #cache = new Map<string, Measurement>();
  readonly #failed = new Map<string, string>();
  /** Per model, the variant loaded now. */
  readonly #loaded = new Map<string, Variant>();
  readonly #written = new Set<string>();
  #session: Session | undefined;
  readonly #deadline: number;
  #interrupted = false;

  constructor(
    config: AnalyzeConfig,
    server: ServerHandle,
    text: ConfigText,
    events: EngineEvents,
    save: () => Promise<void>,
    restored: { measurements: readonly Measurement[]; variants: ReadonlyMap<string, Variant> },
  ) {
    this.#config = config;
    this.#server = server;
    this.#text = text;
    this.#events = events;
    this.#save = save;
    this.#models = new Map(config.models.map((m) => [m.name, m]));
    this.#deadline = config.timeBudgetSeconds > 0 ? Date.now() + config.timeBudgetSeconds * 1000 : Infinity;
    for (const m of restored.measurements) {
      const key = measurementKey(m, restored.variants);
      if (key !== undefined) this.#cache.set(key, m);
    }
  }

  get stopped(): boolean {
    return this.#interrupted || Date.now() > this.#deadline;
  }

  /** Why the run stopped early, if it did. */
  get stopReason(): string | undefined {
    if (this.#interrupted) return 'interrupted: the results cover the measurements taken before the interrupt; run the same command again to resume from the checkpoint';
    if (Date.now() > this.#deadline) return `the time budget (${this.#config.timeBudgetSeconds} s) ran out: the results cover the measurements taken within it; run again with a larger budget to resume from the checkpoint`;
    return undefined;
  }

  interrupt(): void {
    this.#interrupted = true;
  }

  plan(model: string, n: number): void {
    this.#events.progress?.plan(model, n);
  }

  done(variant: Variant): void {
    this.#events.progress?.done(variant);
  }

  skip(variant: Variant, reason: string): void {
    this.#recordSkip(variant, reason);
  }

  #recordSkip(variant: Variant, reason: string): void {
    this.#failed.set(`${variant.name}|${JSON.stringify(variant.config)}`, reason);
    if (!this.skipped.some((s) => s.variant === variant.name)) {
      this.skipped.push({ variant: variant.name, model: variant.model, reason });
      this.#events.notice?.(`skipped ${variant.name}: ${reason}`);
    }
  }

  /** The source directory of `model`. */
  #sourceDir(model: string): string {
    return join(this.#config.modelRepository, model);
  }

  /** Loads `variant` in place of the model's previous variant; false (and skipped) when it does not load. */
  async #apply(variant: Variant): Promise<boolean> {
    const failed = this.#failed.get(`${variant.name}|${JSON.stringify(variant.config)}`);
    if (failed !== undefined) return false;
    if (this.#loaded.get(variant.model)?.name === variant.name) return true;
    await this.#closeSession();
    const previous = this.#loaded.get(variant.model);
    if (previous) {
      this.#loaded.delete(variant.model);
      await this.#server.client.unloadModel(previous.name).catch(() => undefined);
    }
    const dir = join(this.#config.outputModelRepositoryPath, variant.name);
    if (!this.#written.has(variant.name)) {
      await writeVariant(this.#config.outputModelRepositoryPath, this.#sourceDir(variant.model), variant, this.#text);
      this.#written.add(variant.name);
    }
    try {
      if (this.#server.launchMode === 'local') await this.#server.client.loadModel(variant.name, { timeout: 600_000 });
      else await this.#server.client.loadModel(variant.name, { config: variant.config, files: await variantFiles(dir), timeout: 600_000 });
    } catch (err) {
      this.#recordSkip(variant, `the server did not load it: ${err instanceof Error ? err.message : String(err)}`);
      return false;
    }
    this.#loaded.set(variant.model, variant);
    return true;
  }

  async #closeSession(): Promise<void> {
    const s = this.#session;
    this.#session = undefined;
    await s?.perf.close();
  }

  /** perf_analyzer's arguments for `variant` at `level`; `overrides` win over every other flag. */
  #perfArgs(variant: Variant, level: Level, adjust: number, overrides: Record<string, string> = {}): string[] {
    const model = this.#models.get(variant.model);
    const flags: Record<string, string | string[]> = { ...DEFAULT_FLAGS, ...this.#config.perfAnalyzerFlags, ...model?.perfAnalyzerFlags };
    if (level.screen) {
      // Two windows of half the interval; the first warms the load up, the second is the result.
      flags['measurement-mode'] = 'time_windows';
      flags['measurement-interval'] = String(Math.max(250, Math.round(Number(flags['measurement-interval']) / 2)));
      flags['max-trials'] = '2';
    } else if (adjust > 0) {
      if (flags['measurement-mode'] === 'count_windows') flags['measurement-request-count'] = String(Number(flags['measurement-request-count'] ?? 50) + 50 * adjust);
      else flags['measurement-interval'] = String(Number(flags['measurement-interval']) + 1000 * adjust);
    }
    Object.assign(flags, overrides);
    const grpc = this.#config.clientProtocol === 'grpc';
    const args = ['-m', variant.name, '-u', grpc ? this.#server.grpcUrl : this.#server.httpUrl, '-i', this.#config.clientProtocol, '-b', String(level.batchSize)];
    args.push(...(level.concurrency !== undefined ? ['--concurrency-range', String(level.concurrency)] : ['--request-rate-range', String(level.requestRate)]));
    for (const [key, value] of Object.entries(flags)) {
      if (OWN_FLAGS.has(key)) continue;
      for (const v of Array.isArray(value) ? value : [value]) {
        if (v === 'true' && !['measurement-interval', 'stability-percentage', 'max-trials'].includes(key)) args.push(`--${key}`);
        else if (v !== 'false') args.push(`--${key}`, String(v));
      }
    }
    return args;
  }

  async #sessionFor(variant: Variant, level: Level, adjust: number): Promise<PerfSession> {
    const key = `${variant.name}|${level.batchSize}|${level.concurrency !== undefined ? 'c' : 'r'}|${adjust}|${level.screen ? `screen${level.concurrency ?? level.requestRate}` : ''}`;
    if (this.#session?.key === key) return this.#session.perf;
    await this.#closeSession();
    const perf = await PerfSession.open(this.#perfArgs(variant, level, adjust));
    this.#session = { perf, key };
    return perf;
  }

  async measure(variant: Variant, level: Level): Promise<Measurement | undefined> {
    const key = levelKey(variant, level);
    const cached = this.#cache.get(key);
    if (cached) {
      if (!this.measurements.includes(cached)) this.measurements.push(cached);
      return cached;
    }
    if (this.stopped) return undefined;
    if (!(await this.#apply(variant))) return undefined;
    this.#events.progress?.level(variant, level);
    const started = Date.now();
    let summary: LevelSummary | undefined;
    let stable = false;
    let peakRss: number | undefined;
    for (let adjust = 0; ; adjust++) {
      let timer: NodeJS.Timeout | undefined;
      const sampler = setInterval(() => {
        void this.#server.rssMb().then((mb) => {
          if (mb !== undefined) peakRss = Math.max(peakRss ?? 0, mb);
        });
      }, 250);
      try {
        const perf = await this.#sessionFor(variant, level, adjust);
        const timeout = new Promise<'timeout'>((resolve) => {
          timer = setTimeout(() => resolve('timeout'), this.#config.perfAnalyzerTimeout * 1000);
        });
        const value = level.concurrency ?? level.requestRate ?? 1;
        const outcome = await Promise.race([perf.measure(value, { lastWindowOnly: level.screen === true }), timeout]);
        if (outcome === 'timeout') {
          await this.#closeSession();
          this.#recordSkip(variant, `a measurement at ${level.concurrency !== undefined ? `concurrency ${level.concurrency}` : `request rate ${level.requestRate}`} took longer than perf_analyzer_timeout (${this.#config.perfAnalyzerTimeout} s)`);
          return undefined;
        }
        summary = outcome.summary;
        stable = outcome.stable;
      } catch (err) {
        await this.#closeSession();
        this.#recordSkip(variant, `it could not be measured: ${err instanceof Error ? err.message : String(err)}`);
        return undefined;
      } finally {
        clearTimeout(timer);
        clearInterval(sampler);
      }
      if (stable || level.screen || adjust >= this.#config.perfAnalyzerMaxAutoAdjusts || this.stopped) break;
      this.#events.notice?.(`${variant.name}: no stable measurement at ${level.concurrency !== undefined ? `concurrency ${level.concurrency}` : `request rate ${level.requestRate}`}; measuring again with a longer window`);
    }
    const rss = peakRss ?? (await this.#server.rssMb());
    const m = toMeasurement(variant, level, summary, stable, Date.now() - started, rss);
    if (level.screen) m.screening = true;
    this.#cache.set(key, m);
    this.measurements.push(m);
    this.taken++;
    this.#events.measured?.(m);
    await this.#save();
    return m;
  }

  /**
   * Warms a freshly started server up on `variant` (one unrecorded window at `level`), so that the
   * first measurement of the run does not carry the server's and the backend's first-use costs.
   */
  async warmUp(variant: Variant, level: Level): Promise<void> {
    if (!(await this.#apply(variant))) return;
    const args = this.#perfArgs(variant, level, 0, { 'measurement-mode': 'time_windows', 'measurement-interval': '1000', 'max-trials': '1' });
    const perf = await PerfSession.open(args).catch(() => undefined);
    if (perf === undefined) return;
    try {
      await perf.measure(level.concurrency ?? level.requestRate ?? 1).catch(() => undefined);
    } finally {
      await perf.close();
    }
  }

  /** Loads `variants` together (multi-model mode) and measures them at once, each at its level. */
  async measureTogether(entries: { variant: Variant; level: Level }[]): Promise<Measurement[]> {
    for (const e of entries) if (!(await this.#apply(e.variant))) return [];
    await this.#closeSession();
    const started = Date.now();
    const sessions = await Promise.all(entries.map((e) => PerfSession.open(this.#perfArgs(e.variant, e.level, 0))));
    try {
      const outcomes = await Promise.all(sessions.map((s, i) => s.measure(entries[i].level.concurrency ?? entries[i].level.requestRate ?? 1)));
      const rss = await this.#server.rssMb();
      return outcomes.map((o, i) => {
        const m = toMeasurement(entries[i].variant, entries[i].level, o.summary, o.stable, Date.now() - started, rss);
        m.alongside = entries.filter((_, j) => j !== i).map((e) => e.variant.name);
        return m;
      });
    } finally {
      await Promise.all(sessions.map((s) => s.close()));
    }
  }

  async close(): Promise<void> {
    await this.#closeSession();
    for (const v of this.#loaded.values()) await this.#server.client.unloadModel(v.name).catch(() => undefined);
    this.#loaded.clear();
  }
}

const ms = (us: number | undefined): number => (us ?? 0) / 1000;

export function toMeasurement(variant: Variant, level: Level, s: LevelSummary, stable: boolean, wallMs: number, rssMb: number | undefined): Measurement {
  const p = (q: number) => ms(s.percentiles[String(q)]);
  return {
    variant: variant.name,
    model: variant.model,
    batchSize: level.batchSize,
    concurrency: level.concurrency,
    requestRate: level.requestRate,
    perf_throughput: s.throughput,
    perf_latency_avg: ms(s.avgLatencyUs),
    perf_latency_p90: p(90),
    perf_latency_p95: p(95),
    perf_latency_p99: p(99),
    perf_client_send_recv: ms(s.clientSendUs + s.clientRecvUs),
    perf_client_response_wait: ms(s.responseWaitUs),
    perf_server_queue: ms(s.server?.queueUs),
    perf_server_compute_input: ms(s.server?.computeInputUs),
    perf_server_compute_infer: ms(s.server?.computeInferUs),
    perf_server_compute_output: ms(s.server?.computeOutputUs),
    cpu_used_ram: rssMb === undefined ? undefined : Math.round(rssMb * 10) / 10,
    stable,
    errors: s.errorCount,
    wallMs,
    at: new Date().toISOString(),
  };
}
