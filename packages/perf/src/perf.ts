/**
 * `nereid perf`: a perf_analyzer-compatible load generator (perf-and-analyzer.md §1). `runPerf`
 * parses the arguments, prepares the requests, sweeps the load levels, prints perf_analyzer's
 * report and returns its exit code: 0 success, 2 no stable measurement, 3 option error,
 * 99 any other error. It never throws for bad input.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { NereidError } from '@nereid/protocol';
import { ConcurrencyLoad, SequenceIds, startLoad, type LoadGenerator, type LoadPlan } from './load.js';
import { WorkerLoad, shares } from './workers.js';
import { diffStats, measureLevel, type MeasureSettings, type Window } from './measure.js';
import { HelpRequested, USAGE, parsePerfArgs, type PerfOptions } from './options.js';
import { dataOptionsOf, prepareRequests, type ModelInfo } from './input-data.js';
import { createTransport, type PerfInput, type Sender, type ServerStats, type Transport } from './transport.js';
import { MetricsCollector } from './metrics.js';
import { setUpSharedMemory, type SharedMemoryRun } from './shared-memory.js';
import { composingCsvFiles, csvText, finalText, headerText, levelText, summarize, type LevelSummary, type LoadMode } from './report.js';

export const EXIT_SUCCESS = 0;
export const EXIT_UNSTABLE = 2;
export const EXIT_OPTION_ERROR = 3;
export const EXIT_GENERIC_ERROR = 99;

/** Where the report goes; the command uses the process's streams. */
export interface PerfIO {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  stderrIsTty?: boolean;
}

const processIO: PerfIO = {
  stdout: (t) => void process.stdout.write(t),
  stderr: (t) => void process.stderr.write(t),
  stderrIsTty: process.stderr.isTTY === true,
};

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

async function readIntervals(path: string): Promise<number[]> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new NereidError('PERF_OPTION', `--request-intervals ${path}: cannot read the file (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
  }
  const gaps = text.split(/\r?\n/).map((l) => l.trim()).filter((l) => l !== '');
  const values = gaps.map((g, i) => {
    if (!/^\d+$/.test(g) || Number(g) === 0) throw new NereidError('PERF_OPTION', `--request-intervals ${path}: line ${i + 1} ('${g}') is not a gap in microseconds above 0`);
    return Number(g);
  });
  if (values.length === 0) throw new NereidError('PERF_OPTION', `--request-intervals ${path} holds no intervals (one gap in microseconds per line)`);
  return values;
}


class Run {
  readonly #o: PerfOptions;
  readonly #io: PerfIO;
  readonly #transport: Transport;
  readonly #model: ModelInfo;
  readonly #requests: PerfInput[][];
  readonly #streams: PerfInput[][][] | undefined;
  readonly #metrics: MetricsCollector | undefined;
  readonly #senders: Sender[] = [];
  readonly #settings: MeasureSettings;
  readonly #intervals: number[];
  readonly #argv: readonly string[];
  readonly results: LevelSummary[] = [];

  constructor(
    o: PerfOptions,
    argv: readonly string[],
    io: PerfIO,
    transport: Transport,
    model: ModelInfo,
    data: { requests: PerfInput[][]; streams?: PerfInput[][][] },
    intervals: number[],
    metrics: MetricsCollector | undefined,
  ) {
    this.#o = o;
    this.#argv = argv;
    this.#io = io;
    this.#transport = transport;
    this.#model = model;
    this.#requests = data.requests;
    this.#streams = data.streams;
    this.#metrics = metrics;
    this.#intervals = intervals;
    this.#settings = {
      mode: o.measurementMode,
      intervalMs: o.measurementIntervalMs,
      requestCount: o.measurementRequestCount,
      stabilityPercentage: o.stabilityPercentage,
      maxTrials: o.maxTrials,
      percentile: o.percentile,
      async: o.async,
      batchSize: o.batchSize,
      metrics,
    };
  }

  get loadMode(): LoadMode {
    return this.#o.concurrency ? 'concurrency' : this.#o.requestRate ? 'request_rate' : 'custom_intervals';
  }

  #plan(value: number, limit: number): LoadPlan {
    return {
      mode: this.loadMode,
      value,
      limit,
      streaming: this.#o.streaming,
      maxThreads: this.#o.maxThreads,
      distribution: this.#o.distribution,
      intervalsUs: this.#intervals,
      drainTimeoutMs: this.#o.drainTimeoutMs,
      sequence: this.#model.sequence
        ? {
            length: this.#o.sequenceLength,
            variation: this.#o.sequenceLengthVariation,
            idStart: this.#o.sequenceIdStart,
            idEnd: this.#o.sequenceIdEnd,
            count: this.#o.numOfSequences,
            serial: this.#o.serialSequences,
          }
        : undefined,
    };
  }

  async #startLoad(value: number, limit = 0): Promise<LoadGenerator & { finished?: Promise<void> }> {
    if (this.#o.workers > 1 && this.loadMode !== 'custom_intervals' && !this.#model.sequence) {
      return WorkerLoad.start(this.#argv, shares(this.loadMode, value, this.#o.workers, limit));
    }
    return startLoad(this.#plan(value, limit), this.#senders, () => this.#transport.sender(), this.#requests, this.#streams);
  }

  #progress(text: string): void {
    if (this.#o.progress) this.#io.stderr(`\r\x1b[2K${text}`);
  }

  async warmUp(): Promise<void> {
    if (this.#o.warmupRequestCount === 0) return;
    if (this.#senders.length === 0) this.#senders.push(this.#transport.sender());
    const sequence = this.#plan(1, 0).sequence;
    const ids = sequence !== undefined ? new SequenceIds(sequence, this.#streams) : undefined;
    const load = new ConcurrencyLoad(this.#senders.slice(0, 1), this.#requests, 1, this.#o.warmupRequestCount, ids, this.#o.drainTimeoutMs);
    await load.finished;
    await load.stop();
  }

  /**
   * Measures one level. Throws NereidError when every request of a window failed. `lastWindowOnly`
   * summarizes the last window alone (the earlier ones were the load's warm-up).
   */
  async level(value: number, lastWindowOnly = false): Promise<MeasuredLevel> {
    const o = this.#o;
    const stats = () => this.#transport.statistics();
    let windows: Window[];
    let stable = true;
    let latencyUnstable = false;
    let merged: Window;
    const counted = o.requestCount > 0 && this.loadMode === 'concurrency';
    // A counted run is one window from before the first send: its statistics are taken first.
    const initial = counted ? await stats() : undefined;
    const load = await this.#startLoad(value, counted ? o.requestCount : 0);
    const metricsFrom = performance.now();
    this.#metrics?.start();
    try {
      if (counted) {
        merged = await this.#countedWindow(load, initial, stats);
        windows = [merged];
      } else {
        const result = await measureLevel(load, this.#settings, stats, (w, i) => this.#onWindow(value, w, i));
        ({ windows, merged, stable, latencyUnstable } = result);
        if (lastWindowOnly) merged = windows[windows.length - 1];
      }
    } finally {
      await load.stop();
      await this.#metrics?.stop();
      this.#progress('');
    }
    if (counted && this.#metrics) merged.metrics = this.#metrics.between(metricsFrom, performance.now());
    const last = windows[windows.length - 1];
    if (last.completed === 0 && last.errors > 0) {
      throw new NereidError(
        'PERF_SERVER_UNREACHABLE',
        `every request to model '${o.model}' failed: ${errorMessage(load.firstError)}`,
        { cause: load.firstError },
      );
    }
    const summary = summarize(this.loadMode, value, merged, o.batchSize, o.percentile, stable, latencyUnstable, this.#model.sequence);
    if (summary.errorCount > 0 && load.firstError !== undefined) {
      this.#io.stderr(`[WARNING] ${summary.errorCount} requests failed; the first: ${errorMessage(load.firstError)}\n`);
    }
    return { summary, stable };
  }

  /** The whole counted run as one window: from `before` (taken before the first send) to after the last response. */
  async #countedWindow(load: LoadGenerator & { finished?: Promise<void> }, before: ServerStats | undefined, stats: Transport['statistics']): Promise<Window> {
    const elu = performance.eventLoopUtilization();
    await load.finished;
    await load.stop();
    const ok = load.records.filter((r) => r.ok);
    // From the first send to the last response (worker processes start sending at their own pace).
    const durationMs =
      load.records.length > 0
        ? Math.max(...load.records.map((r) => r.end)) - Math.min(...load.records.map((r) => r.start))
        : performance.now() - load.startedAt;
    // A server may count a request just after its response left; wait briefly for the counters
    // to cover every request that succeeded here.
    let after = await stats();
    for (let waited = 0; before && after && after.success.count - before.success.count < ok.length && waited < 1000; waited += 10) {
      await new Promise((r) => setTimeout(r, 10));
      after = await stats();
    }
    return {
      durationMs,
      completed: ok.length,
      errors: load.records.length - ok.length,
      responses: ok.reduce((a, r) => a + r.responses, 0),
      sent: load.sent,
      delayed: 0,
      latenciesUs: ok.map((r) => (r.end - r.start) * 1000),
      sendUs: ok.reduce((a, r) => a + r.sendMs * 1000, 0),
      recvUs: ok.reduce((a, r) => a + r.recvMs * 1000, 0),
      server: before && after ? diffStats(before, after) : undefined,
      clientBusy: performance.eventLoopUtilization(elu).utilization,
      sequences: ok.filter((r) => r.sequenceEnd === true).length,
    };
  }

  #onWindow(value: number, w: Window, index: number): void {
    const tp = (w.completed * this.#o.batchSize * 1000) / Math.max(1, w.durationMs);
    const lat = w.latenciesUs.length ? w.latenciesUs.reduce((a, b) => a + b, 0) / w.latenciesUs.length : 0;
    if (this.#o.verbose) {
      const sd = Math.sqrt(w.latenciesUs.reduce((a, v) => a + (v - lat) * (v - lat), 0) / Math.max(1, w.latenciesUs.length));
      this.#io.stdout(`  Pass [${index + 1}] throughput: ${Number(tp.toPrecision(6))} infer/sec. Avg latency: ${Math.trunc(lat)} usec (std ${Math.trunc(sd)} usec). \n`);
    }
    this.#progress(
      `${this.loadMode === 'concurrency' ? 'concurrency' : 'rate'} ${value}: window ${index + 1}/${this.#o.maxTrials}, ${Number(tp.toPrecision(4))} infer/sec, avg ${Math.trunc(lat)} usec`,
    );
  }

  report(s: LevelSummary): void {
    if (!this.#o.json) this.#io.stdout(levelText(s, this.#transport.label, this.#model.decoupled, this.#o.verbose, this.#o.percentile));
    if (s.latencyUnstable) this.#io.stderr('[WARNING] Latency is not stabilizing; the throughput was stable, so the result is accepted.\n');
    if (s.clientBusy > 0.5 && this.#o.json && this.#transport.label !== 'in-process') {
      this.#io.stderr('[WARNING] nereid perf is not able to keep up with the desired load. The results may not be accurate.\n');
    }
  }

  async close(): Promise<void> {
    for (const s of this.#senders) s.close();
  }
}

function unstableMessage(mode: LoadMode, value: number, trials: number): string {
  const what = mode === 'concurrency' ? `concurrency ${value}` : mode === 'request_rate' ? `request rate ${value}` : 'the custom intervals';
  return `Failed to obtain stable measurement within ${trials} measurement windows for ${what}. Please try to increase the --measurement-interval.\n`;
}

/** The load levels to measure: a linear sweep, the bisection of --binary-search, or the one custom-interval run. */
async function sweep(run: Run, o: PerfOptions, io: PerfIO): Promise<number> {
  const range = o.concurrency ?? o.requestRate;
  const threshold = o.latencyThresholdMs * 1000;
  const measure = async (value: number): Promise<LevelSummary | undefined> => {
    const { summary, stable } = await run.level(value);
    if (!stable) {
      io.stderr(unstableMessage(run.loadMode, value, o.maxTrials));
      return undefined;
    }
    run.report(summary);
    run.results.push(summary);
    return summary;
  };
  const exceeds = (s: LevelSummary) => threshold > 0 && s.stabilizingLatencyUs > threshold;
  if (range === undefined) {
    return (await measure(0)) ? EXIT_SUCCESS : EXIT_UNSTABLE;
  }
  const isInt = o.concurrency !== undefined;
  if (o.binarySearch) {
    const low = await measure(range.start);
    if (!low) return EXIT_UNSTABLE;
    if (exceeds(low)) return EXIT_SUCCESS;
    const high = await measure(range.end);
    if (!high) return EXIT_UNSTABLE;
    if (!exceeds(high)) return EXIT_SUCCESS;
    let lo = range.start;
    let hi = range.end;
    while (hi - lo > range.step) {
      const mid = isInt ? Math.floor((lo + hi) / 2) : (lo + hi) / 2;
      const s = await measure(mid);
      if (!s) return EXIT_UNSTABLE;
      if (exceeds(s)) hi = mid;
      else lo = mid;
    }
    return EXIT_SUCCESS;
  }
  for (let v = range.start; range.end === 0 || v <= range.end + 1e-9; v += range.step) {
    const s = await measure(isInt ? v : Number(v.toFixed(6)));
    if (!s) return run.results.length > 0 ? EXIT_SUCCESS : EXIT_UNSTABLE;
    if (exceeds(s)) break;
  }
  return EXIT_SUCCESS;
}

/** Sequence options against the model (perf_analyzer's exit code 3 for each misuse). */
function checkSequenceOptions(o: PerfOptions, model: ModelInfo): void {
  const given = ['sequenceLength', 'sequenceIdEnd', 'serialSequences'] as const;
  if (!model.sequence) {
    if (given.some((k) => o[k] !== undefined && o[k] !== false && o[k] !== 0) || o.sequenceIdStart !== 1) {
      throw new NereidError('PERF_OPTION', `model '${o.model}' has no sequence_batching, so the sequence options (--sequence-length, --sequence-id-range, --serial-sequences) do not apply; drop them`);
    }
    return;
  }
  if (o.sequenceIdEnd === 0) return;
  const ids = o.sequenceIdEnd - o.sequenceIdStart + 1;
  const open = o.concurrency ? Math.max(o.concurrency.start, o.concurrency.end) : o.numOfSequences;
  if (ids < open) {
    throw new NereidError(
      'PERF_OPTION',
      `--sequence-id-range ${o.sequenceIdStart}:${o.sequenceIdEnd} holds ${ids} correlation ids, fewer than the ${open} sequences open at once; widen the range`,
    );
  }
}

function jsonResult(o: PerfOptions, model: ModelInfo, transport: Transport, results: readonly LevelSummary[], code: number): string {
  return (
    JSON.stringify(
      {
        model: o.model,
        version: o.version,
        batch_size: o.batchSize,
        service_kind: o.serviceKind,
        protocol: transport.label,
        decoupled: model.decoupled,
        sequence_model: model.sequence,
        composing_models: model.composing,
        shared_memory: o.sharedMemory,
        exit_code: code,
        levels: results,
      },
      null,
      2,
    ) + '\n'
  );
}

/** What a prepared run holds: released by `closeOpened`. */
interface Opened {
  transport: Transport;
  model: ModelInfo;
  run: Run;
  shm?: SharedMemoryRun;
}

/**
 * Connects, reads the model's metadata, checks the options against it, prepares the requests (and
 * shared-memory regions, metrics scraping) and warms up: everything before the first level.
 * Whatever was set up is released when it throws.
 */
async function openRun(options: PerfOptions, argv: readonly string[], io: PerfIO, beforeWarmUp?: (run: Run, model: ModelInfo, transport: Transport) => void): Promise<Opened> {
  const opened: Partial<Opened> = {};
  try {
    const transport = (opened.transport = createTransport(options));
    const intervals = options.requestIntervals ? await readIntervals(options.requestIntervals) : [];
    const model = (opened.model = await transport.modelInfo());
    if (model.decoupled && options.serviceKind === 'triton' && !options.streaming) {
      throw new NereidError('PERF_OPTION', `model '${options.model}' is decoupled (many responses per request); measure it with -i grpc --streaming`);
    }
    if (model.sequence && options.workers > 1) {
      throw new NereidError('PERF_OPTION', `model '${options.model}' is a sequence model; --workers would deal the same correlation ids from every process: drop --workers`);
    }
    checkSequenceOptions(options, model);
    const prepared = await prepareRequests(model, dataOptionsOf(options));
    let data: { requests: PerfInput[][]; streams?: PerfInput[][][] } = prepared;
    if (options.sharedMemory === 'system') {
      opened.shm = await setUpSharedMemory(transport, model, prepared, options);
      data = opened.shm.data;
    }
    let metrics: MetricsCollector | undefined;
    if (options.collectMetrics) {
      metrics = new MetricsCollector(options.metricsUrl, options.metricsIntervalMs, options.model, (line) => io.stderr(line));
      await metrics.check();
    }
    const run = (opened.run = new Run(options, argv, io, transport, model, data, intervals, metrics));
    beforeWarmUp?.(run, model, transport);
    await run.warmUp();
    return opened as Opened;
  } catch (err) {
    await closeOpened(opened);
    throw err;
  }
}

async function closeOpened(opened: Partial<Opened>): Promise<void> {
  await opened.run?.close();
  await opened.shm?.release();
  await opened.transport?.close();
}

/** One load level measured by a `PerfSession`. */
export interface MeasuredLevel {
  summary: LevelSummary;
  /** The windows stabilized (perf_analyzer's rule); an unstable level is still summarized. */
  stable: boolean;
}

/**
 * The measurement engine for another tool (`nereid analyze`): perf_analyzer's arguments name the
 * model, server and measurement settings (the load range is ignored); `measure(value)` then
 * measures one concurrency or request rate at a time on the same connections.
 */
export class PerfSession {
  readonly #opened: Opened;
  readonly options: PerfOptions;

  private constructor(options: PerfOptions, opened: Opened) {
    this.options = options;
    this.#opened = opened;
  }

  /** Throws NereidError (code PERF_OPTION for bad arguments) when the run cannot be prepared. */
  static async open(argv: readonly string[], io: PerfIO = { stdout: () => {}, stderr: () => {} }): Promise<PerfSession> {
    const options = parsePerfArgs(argv, false);
    return new PerfSession(options, await openRun(options, argv, io));
  }

  get loadMode(): LoadMode {
    return this.#opened.run.loadMode;
  }

  /**
   * Measures one level; throws NereidError when every request of a window failed. With
   * `lastWindowOnly` the result is the last window's alone (a quick screening whose first windows
   * warm the load up).
   */
  measure(value: number, options: { lastWindowOnly?: boolean } = {}): Promise<MeasuredLevel> {
    return this.#opened.run.level(value, options.lastWindowOnly === true);
  }

  close(): Promise<void> {
    return closeOpened(this.#opened);
  }
}

/** Runs `nereid perf ARGS`; resolves with the exit code. */
export async function runPerf(argv: readonly string[], io: PerfIO = processIO): Promise<number> {
  let options: PerfOptions;
  try {
    options = parsePerfArgs(argv, io.stderrIsTty === true);
  } catch (err) {
    if (err instanceof HelpRequested) {
      io.stdout(USAGE);
      return EXIT_SUCCESS;
    }
    io.stderr(`error: ${errorMessage(err)}\n`);
    return err instanceof NereidError && err.code === 'PERF_OPTION' ? EXIT_OPTION_ERROR : EXIT_GENERIC_ERROR;
  }
  let opened: Opened | undefined;
  try {
    opened = await openRun(options, argv, io, (run, model) => {
      if (options.json) return;
      io.stdout(
        headerText({
          batchSize: options.batchSize,
          serviceKind: options.serviceKind === 'in_process' ? 'In-process' : 'Triton',
          mode: options.measurementMode,
          intervalMs: options.measurementIntervalMs,
          requestCount: options.requestCount,
          measurementRequestCount: options.measurementRequestCount,
          warmupRequestCount: options.warmupRequestCount,
          percentile: options.percentile,
          latencyThresholdMs: options.latencyThresholdMs,
          loadMode: run.loadMode,
          distribution: options.distribution,
          binarySearch: options.binarySearch,
          async: options.async,
          decoupled: model.decoupled,
        }) + '\n',
      );
    });
    const { run, model, transport } = opened;
    const code = await sweep(run, options, io);
    if (run.results.length > 0) {
      if (options.json) io.stdout(jsonResult(options, model, transport, run.results, code));
      else io.stdout(finalText(run.results, options.percentile));
      if (options.csvFile) {
        await writeFile(options.csvFile, csvText(run.results, options.percentile, model.decoupled, options.verboseCsv));
        for (const f of composingCsvFiles(run.results, options.csvFile)) await writeFile(f.path, f.text);
      }
    }
    return code;
  } catch (err) {
    io.stderr(`error: ${errorMessage(err)}\n`);
    return err instanceof NereidError && err.code === 'PERF_OPTION' ? EXIT_OPTION_ERROR : EXIT_GENERIC_ERROR;
  } finally {
    if (opened !== undefined) await closeOpened(opened);
  }
}
