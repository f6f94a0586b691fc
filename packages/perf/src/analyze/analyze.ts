/**
 * `nereid analyze`: Model Analyzer's `profile` on one running server (docs/analyze.md). Reads the
 * configuration (config.ts), starts the server once (local) or connects to it (remote), searches
 * each model's configuration space (search.ts) applying every variant through the model
 * repository API (engine.ts), ranks the measurements (rank.ts) and writes the output repository,
 * CSVs, checkpoint and the HTML report. Exit codes: 0 done (also when cut short by the time
 * budget or an interrupt: the results then cover what was measured), 3 configuration error
 * (before anything runs), 99 any other failure.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { NereidError } from '@nereid/protocol';
import { HelpRequested } from '../options.js';
import { ANALYZE_USAGE, loadAnalyzeConfig } from './config.js';
import { Engine } from './engine.js';
import { Checkpoints, loadConfigText, prepareOutputRepository, writeCsvs, type ConfigText } from './outputs.js';
import { Progress } from './progress.js';
import { constraintText, loadText, modelResult, satisfies } from './rank.js';
import { renderReport } from './report-html.js';
import { bruteSearch, quickConcurrency, quickSearch, type Level, type SearchContext } from './search.js';
import { connectRemote, launchLocal, type ServerHandle } from './server.js';
import { VariantBook, knobsOf } from './space.js';
import type { AnalysisResult, AnalyzeConfig, Measurement, ModelResult, Variant } from './types.js';

export interface AnalyzeIO {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  stderrIsTty: boolean;
  cwd: string;
  /** Called with the interrupt hook while the run measures (the command wires SIGINT to it). */
  onInterrupt?: (interrupt: () => void) => () => void;
}

const processIO: AnalyzeIO = {
  stdout: (t) => void process.stdout.write(t),
  stderr: (t) => void process.stderr.write(t),
  stderrIsTty: process.stderr.isTTY === true,
  cwd: process.cwd(),
  onInterrupt: (interrupt) => {
    let count = 0;
    const handler = () => {
      count++;
      if (count === 1) {
        process.stderr.write('\nnereid analyze: finishing the current measurement, then writing the results (Ctrl-C again to stop at once; the checkpoint is saved)\n');
        interrupt();
      } else {
        process.exit(130);
      }
    };
    process.on('SIGINT', handler);
    return () => process.off('SIGINT', handler);
  },
};

export const EXIT_ANALYZE_CONFIG = 3;
export const EXIT_ANALYZE_FAILED = 99;

/** The model's own configuration as JSON: its config.pbtxt, or (none on disk) what the server completes. */
async function baseConfig(config: AnalyzeConfig, model: string, server: ServerHandle, text: ConfigText): Promise<Record<string, unknown>> {
  const file = join(config.modelRepository, model, 'config.pbtxt');
  let body: string | undefined;
  try {
    body = await readFile(file, 'utf8');
  } catch {
    body = undefined;
  }
  if (body !== undefined) {
    try {
      return { ...text.fromText(body, file), name: model };
    } catch (err) {
      throw new NereidError('ANALYZE_CONFIG', `profile_models: ${file} does not parse: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
  // No config.pbtxt: the server's auto-completed configuration is the default.
  const wasReady = await server.client.isModelReady(model).catch(() => false);
  if (!wasReady) await server.client.loadModel(model);
  try {
    return { ...(await server.client.modelConfig(model)), name: model };
  } finally {
    if (!wasReady) await server.client.unloadModel(model).catch(() => undefined);
  }
}

const fmt = (v: number | undefined, digits = 2): string => (v === undefined ? '-' : v >= 1000 ? v.toFixed(0) : v.toFixed(digits));

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r) => r.map((c, i) => c.padEnd(widths[i])).join('  ').trimEnd()).join('\n') + '\n';
}

function describe(v: Variant | undefined): string {
  if (!v) return '';
  const s = v.summary;
  return `${s.instanceCount}×${s.instanceKind.replace('KIND_', '')}, max batch ${s.maxBatchSize}, dynamic batching ${s.dynamicBatching ? 'on' : 'off'}${s.maxQueueDelayUs > 0 ? ` (delay ${s.maxQueueDelayUs} µs)` : ''}`;
}

function consoleSummary(result: AnalysisResult, config: AnalyzeConfig, reportPath: string | undefined, csvs: string[]): string {
  const byName = new Map(result.variants.map((v) => [v.name, v]));
  let out = '';
  for (const r of result.models) {
    out += `\nModel '${r.model}'${Object.keys(r.constraints).length ? ` (constraints: ${constraintText(r.constraints)})` : ''}\n${r.sentence}\n`;
    if (r.unmet) out += `${r.unmet}\n`;
    const rows = [['Rank', 'Model Config Name', 'Instances', 'Max Batch', 'Dynamic Batching', 'Best at', 'p99 Latency (ms)', 'Throughput (infer/sec)', 'Satisfies Constraints']];
    r.ranking.slice(0, Math.max(config.numConfigsPerModel, 1)).forEach((x, i) => {
      const v = byName.get(x.variant);
      rows.push([
        String(i + 1),
        x.variant,
        v ? `${v.summary.instanceCount}:${v.summary.instanceKind.replace('KIND_', '')}` : '',
        String(v?.summary.maxBatchSize ?? ''),
        v?.summary.dynamicBatching ? 'yes' : 'no',
        loadText(x.best) + (x.best.screening ? ' (screening)' : ''),
        fmt(x.best.perf_latency_p99),
        fmt(x.best.perf_throughput, 1),
        x.passes ? 'yes' : 'no',
      ]);
    });
    const def = r.ranking.find((x) => byName.get(x.variant)?.isDefault);
    if (def && !rows.some((row) => row[1] === def.variant)) {
      const v = byName.get(def.variant);
      rows.push(['-', def.variant, `${v?.summary.instanceCount}:${v?.summary.instanceKind.replace('KIND_', '')}`, String(v?.summary.maxBatchSize), v?.summary.dynamicBatching ? 'yes' : 'no', loadText(def.best), fmt(def.best.perf_latency_p99), fmt(def.best.perf_throughput, 1), def.passes ? 'yes' : 'no']);
    }
    out += table(rows);
    for (const [label, m] of [
      ['Throughput-optimized', r.throughputOptimized],
      ['Latency-optimized', r.latencyOptimized],
    ] as const) {
      if (!m) continue;
      out += `${label}: ${m.variant} (${describe(byName.get(m.variant))}) at ${loadText(m)}: ${fmt(m.perf_throughput, 1)} infer/sec, p99 ${fmt(m.perf_latency_p99)} ms -> ${join(config.outputModelRepositoryPath, m.variant, 'config.pbtxt')}\n`;
    }
  }
  if (result.interference) {
    out += '\nModels profiled together:\n';
    for (const i of result.interference) out += `  ${i.model}: ${i.note}\n`;
  }
  if (result.skipped.length > 0) {
    out += '\nSkipped:\n';
    for (const s of result.skipped) out += `  ${s.variant}: ${s.reason}\n`;
  }
  if (result.partial) out += `\nPartial results: ${result.partial}\n`;
  const count = new Set(result.measurements.map((m) => m.variant)).size;
  out += `\n${result.measurements.length} measurements of ${count} configurations in ${result.wallSeconds.toFixed(0)} s.\n`;
  out += `Output model repository: ${config.outputModelRepositoryPath}\n`;
  for (const f of csvs) out += `Results: ${f}\n`;
  if (reportPath) out += `Report: ${reportPath}\n`;
  return out;
}

/**
 * Multi-model mode: each model's throughput-optimized variant is loaded beside the others' and
 * measured at the same time, at the level of its recommendation; the change from its throughput
 * alone is the interference the report shows.
 */
async function profileTogether(engine: Engine, results: ModelResult[], variants: Map<string, Variant>): Promise<{ measured: Measurement[]; interference: NonNullable<AnalysisResult['interference']> }> {
  const picks = results.filter((r) => r.throughputOptimized !== undefined).map((r) => r.throughputOptimized!);
  const entries = picks.map((m) => ({ variant: variants.get(m.variant)!, level: { batchSize: m.batchSize, concurrency: m.concurrency, requestRate: m.requestRate } as Level }));
  const measured = await engine.measureTogether(entries);
  const interference = picks.map((alone) => {
    const together = measured.find((m) => m.model === alone.model);
    if (!together) return { model: alone.model, alone: alone.perf_throughput, note: 'could not be measured together with the other models' };
    const change = (together.perf_throughput - alone.perf_throughput) / alone.perf_throughput;
    return {
      model: alone.model,
      alone: alone.perf_throughput,
      together: together.perf_throughput,
      change,
      note:
        `${alone.variant} at ${loadText(alone)}: ${fmt(alone.perf_throughput, 1)} infer/sec alone, ${fmt(together.perf_throughput, 1)} beside ${together.alongside?.join(', ')} ` +
        `(${change >= 0 ? '+' : ''}${(change * 100).toFixed(1)}%); p99 ${fmt(alone.perf_latency_p99)} -> ${fmt(together.perf_latency_p99)} ms`,
    };
  });
  return { measured, interference };
}

/**
 * Objectives and constraints on metrics this run cannot measure (GPU metrics: Nereid serves on
 * CPU; CPU memory: not visible on a remote server) are dropped, each with a warning, rather than
 * failing every configuration or deciding nothing.
 */
function unmeasurable(config: AnalyzeConfig, server: ServerHandle): string[] {
  const warnings: string[] = [];
  const missing = (tag: string): string | undefined =>
    tag.startsWith('gpu_')
      ? 'no GPU metrics: the server runs models on CPU'
      : tag.startsWith('cpu_') && server.launchMode === 'remote'
        ? "the memory of a remote server's processes is not visible; use local launch mode to measure it"
        : undefined;
  for (const model of config.models) {
    for (const tag of Object.keys(model.constraints) as (keyof typeof model.constraints)[]) {
      const why = missing(tag);
      if (why === undefined) continue;
      delete model.constraints[tag];
      warnings.push(`profile_models.${model.name}.constraints.${tag} cannot be checked (${why}); it is ignored`);
    }
    const objectives = Object.keys(model.objectives) as (keyof typeof model.objectives)[];
    const kept = objectives.filter((tag) => missing(tag) === undefined);
    if (kept.length === objectives.length) continue;
    for (const tag of objectives.filter((t) => !kept.includes(t))) warnings.push(`profile_models.${model.name}.objectives.${tag} cannot be measured (${missing(tag)}); it is ignored`);
    const total = kept.reduce((a, t) => a + (model.objectives[t] ?? 0), 0);
    model.objectives = total > 0 ? Object.fromEntries(kept.map((t) => [t, (model.objectives[t] ?? 0) / total])) : { perf_throughput: 1 };
  }
  return warnings;
}

/** Runs `nereid analyze ARGS`; resolves with the exit code. */
export async function runAnalyze(argv: readonly string[], io: AnalyzeIO = processIO): Promise<number> {
  let config: AnalyzeConfig;
  let warnings: string[];
  try {
    ({ config, warnings } = await loadAnalyzeConfig(argv, { cwd: io.cwd, stdoutIsTty: io.stderrIsTty }));
  } catch (err) {
    if (err instanceof HelpRequested) {
      io.stdout(ANALYZE_USAGE);
      return 0;
    }
    io.stderr(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    return err instanceof NereidError && err.code === 'ANALYZE_CONFIG' ? EXIT_ANALYZE_CONFIG : EXIT_ANALYZE_FAILED;
  }
  for (const w of warnings) io.stderr(`warning: ${w}\n`);
  const started = Date.now();
  let server: ServerHandle | undefined;
  let engine: Engine | undefined;
  let release: (() => void) | undefined;
  const progress = new Progress(config.progress === 'auto' ? (io.stderrIsTty ? 'bar' : 'lines') : config.progress, io.stderr);
  try {
    const text = await loadConfigText();
    await prepareOutputRepository(config.outputModelRepositoryPath, config.overrideOutputModelRepository);
    await mkdir(config.exportPath, { recursive: true });
    const checkpoints = new Checkpoints(config.checkpointDirectory);
    await checkpoints.open();
    if (checkpoints.notice) io.stderr(`warning: ${checkpoints.notice}\n`);
    server =
      config.launchMode === 'local'
        ? await launchLocal(config, [config.modelRepository, config.outputModelRepositoryPath], join(config.exportPath, 'nereid-server.log'))
        : await connectRemote(config);
    const meta = await server.client.serverMetadata();
    for (const w of unmeasurable(config, server)) io.stderr(`warning: ${w}\n`);

    const books = new Map<string, VariantBook>();
    const restoredVariants = new Map<string, Variant>();
    for (const model of config.models) {
      const base = await baseConfig(config, model.name, server, text);
      let restored = (checkpoints.restored?.variants ?? []).filter((v) => v.model === model.name);
      const oldDefault = restored.find((v) => v.isDefault);
      if (oldDefault && JSON.stringify({ ...oldDefault.config, name: model.name }) !== JSON.stringify(base)) {
        io.stderr(`warning: ${model.name}'s configuration changed since the checkpoint; its measurements there are not reused\n`);
        restored = [];
      }
      for (const v of restored) restoredVariants.set(v.name, v);
      books.set(model.name, new VariantBook(model.name, base, restored));
    }
    const variantsNow = () => [...books.values()].flatMap((b) => b.variants);
    let save = async (): Promise<void> => {};
    engine = new Engine(
      config,
      server,
      text,
      { notice: (t) => progress.notice(t), progress },
      () => save(),
      {
        measurements: (checkpoints.restored?.measurements ?? []).filter((m) => restoredVariants.has(m.variant)),
        variants: restoredVariants,
      },
    );
    const e = engine;
    save = () => checkpoints.save({ variants: variantsNow(), measurements: e.measurements, skipped: e.skipped });
    release = io.onInterrupt?.(() => e.interrupt());
    progress.start();
    for (const model of config.models) {
      const book = books.get(model.name)!;
      if (config.launchMode === 'local' && !e.stopped) {
        const k = knobsOf(book.base);
        await e.warmUp(book.defaultVariant, { batchSize: 1, concurrency: quickConcurrency(k, config.search) });
      }
    }
    for (const model of config.models) {
      const ctx: SearchContext = { model, limits: config.search, book: books.get(model.name)!, prober: e, topN: Math.max(1, config.numConfigsPerModel) };
      if (config.searchMode === 'quick') await quickSearch(ctx);
      else await bruteSearch(ctx);
      if (e.stopped) break;
    }
    const variants = new Map(variantsNow().map((v) => [v.name, v]));
    const rank = (): ModelResult[] =>
      config.models.map((m) => modelResult(m.name, e.measurements, m.objectives, m.constraints, books.get(m.name)!.defaultVariant.name));
    let results = rank();
    let interference: AnalysisResult['interference'];
    if (config.profileModelsConcurrently && config.models.length > 1 && !e.stopped) {
      progress.notice('measuring the models together');
      interference = (await profileTogether(e, results, variants)).interference;
      results = rank();
    }
    await e.close();
    progress.stop();
    await save();
    const result: AnalysisResult = {
      server: { name: String(meta.name), version: String(meta.version), endpoint: server.httpUrl, launchMode: server.launchMode },
      mode: config.mode,
      searchMode: config.searchMode,
      startedAt: new Date(started).toISOString(),
      wallSeconds: (Date.now() - started) / 1000,
      variants: [...variants.values()].filter((v) => e.measurements.some((m) => m.variant === v.name) || e.skipped.some((s) => s.variant === v.name)),
      measurements: e.measurements,
      skipped: e.skipped,
      models: results,
      interference,
      partial: e.stopReason,
    };
    const constraintsOf = new Map(config.models.map((m) => [m.name, m.constraints]));
    const csvs = await writeCsvs(config.exportPath, results, e.measurements, result.variants, (m) => satisfies(m, constraintsOf.get(m.model) ?? {}));
    let reportPath: string | undefined;
    if (!config.skipSummaryReports) {
      const variantConfigText: Record<string, string> = {};
      for (const v of result.variants) variantConfigText[v.name] = text.toText(v.config);
      const defaultConfigText: Record<string, string> = {};
      for (const [name, book] of books) defaultConfigText[name] = text.toText(book.defaultVariant.config);
      const html = await renderReport(result, { defaultConfigText, variantConfigText, skipDetailed: config.skipDetailedReports === true });
      await mkdir(join(config.exportPath, 'reports'), { recursive: true });
      reportPath = join(config.exportPath, 'reports', 'analysis.html');
      await writeFile(reportPath, html);
    }
    await writeFile(join(config.exportPath, 'results', 'analysis.json'), JSON.stringify(result, null, 2));
    io.stdout(consoleSummary(result, config, reportPath, [...csvs, join(config.exportPath, 'results', 'analysis.json')]));
    io.stdout(`Measured ${e.taken} levels in this run${e.measurements.length > e.taken ? `, ${e.measurements.length - e.taken} reused from the checkpoint` : ''}; checkpoint: ${checkpoints.path}\n`);
    return 0;
  } catch (err) {
    progress.stop();
    io.stderr(`error: ${err instanceof Error ? err.message : String(err)}\n`);
    return err instanceof NereidError && err.code === 'ANALYZE_CONFIG' ? EXIT_ANALYZE_CONFIG : EXIT_ANALYZE_FAILED;
  } finally {
    release?.();
    await engine?.close().catch(() => undefined);
    await server?.stop();
  }
}
