/**
 * What `nereid analyze` leaves on disk (perf-and-analyzer.md §2.8): the output model repository
 * (`<model>_config_default`, `<model>_config_<n>`: each a loadable model directory, config.pbtxt
 * written from the variant and the model's other files linked or copied from the source), the
 * checkpoints (`<checkpoint_directory>/<n>.ckpt`, JSON, the highest index current), and the CSV
 * files with Model Analyzer's column names.
 */
import { copyFile, link, mkdir, readFile, readdir, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { NereidError } from '@nereid/protocol';
import type { Measurement, ModelResult, Skipped, Variant } from './types.js';

type Json = Record<string, unknown>;

/** The model configuration's text and JSON forms (the server package's printer and parser). */
export interface ConfigText {
  toText(config: Json): string;
  fromText(text: string, fileName: string): Json;
}

export async function loadConfigText(): Promise<ConfigText> {
  let server: {
    parseModelConfigText(text: string, fileName: string): unknown;
    printModelConfigText(config: unknown): string;
    modelConfigFromJson(value: unknown): unknown;
    modelConfigToJson(config: unknown, options: { emitDefaults: boolean; int64AsString: boolean }): Json;
  };
  // A specifier held in a variable: the server package builds after this one (it depends on
  // @nereid/perf for its CLI), so its types are not there when this package is compiled.
  const specifier = '@nereid/server';
  try {
    server = (await import(specifier)) as unknown as typeof server;
  } catch {
    throw new NereidError('ANALYZE_CONFIG', 'nereid analyze needs the @nereid/server package (npm install @nereid/server) to read and write config.pbtxt files');
  }
  return {
    toText: (config) => server.printModelConfigText(server.modelConfigFromJson(config)),
    fromText: (text, fileName) => server.modelConfigToJson(server.parseModelConfigText(text, fileName), { emitDefaults: false, int64AsString: false }),
  };
}

const VARIANT_DIR = /_config_(default|\d+)$/;

/**
 * Makes the output repository ready: created when missing; an existing one with content is an
 * error unless `override`, and even then only variant directories (`*_config_*`) are removed:
 * anything else in it stops the run rather than being deleted.
 */
export async function prepareOutputRepository(path: string, override: boolean): Promise<void> {
  let entries: string[];
  try {
    entries = await readdir(path);
  } catch {
    await mkdir(path, { recursive: true });
    return;
  }
  if (entries.length === 0) return;
  if (!override) {
    throw new NereidError(
      'ANALYZE_CONFIG',
      `output_model_repository_path '${path}' already exists and is not empty; set override_output_model_repository: true (--override-output-model-repository) to replace its variants, or choose another path`,
    );
  }
  const foreign = entries.filter((e) => !VARIANT_DIR.test(e));
  if (foreign.length > 0) {
    throw new NereidError(
      'ANALYZE_CONFIG',
      `output_model_repository_path '${path}' holds ${foreign.slice(0, 3).map((f) => `'${f}'`).join(', ')}${foreign.length > 3 ? ', …' : ''}, which no analysis wrote; nereid analyze only replaces <model>_config_* directories: choose an empty or new path`,
    );
  }
  for (const e of entries) await rm(join(path, e), { recursive: true, force: true });
}

/** Hard-links (or copies, across file systems) every file of `from` into `to`, but the top-level config.pbtxt. */
async function mirrorModelFiles(from: string, to: string, top = true): Promise<void> {
  await mkdir(to, { recursive: true });
  for (const entry of await readdir(from, { withFileTypes: true })) {
    if (top && (entry.name === 'config.pbtxt' || entry.name === 'configs')) continue;
    const a = join(from, entry.name);
    const b = join(to, entry.name);
    const s = await stat(a);
    if (s.isDirectory()) await mirrorModelFiles(a, b, false);
    else if (s.isFile()) await link(a, b).catch(() => copyFile(a, b));
  }
}

/** Writes `variant` as a loadable model directory of the output repository; returns its path. */
export async function writeVariant(outputRepository: string, sourceModelDir: string, variant: Variant, text: ConfigText): Promise<string> {
  const dir = join(outputRepository, variant.name);
  await rm(dir, { recursive: true, force: true });
  await mirrorModelFiles(sourceModelDir, dir);
  await writeFile(join(dir, 'config.pbtxt'), text.toText(variant.config));
  return dir;
}

/** The files of a variant directory but its config, by relative path: the load API's file overrides. */
export async function variantFiles(dir: string): Promise<Map<string, Uint8Array>> {
  const files = new Map<string, Uint8Array>();
  const walk = async (d: string): Promise<void> => {
    for (const entry of await readdir(d, { withFileTypes: true })) {
      const p = join(d, entry.name);
      if (entry.isDirectory()) await walk(p);
      else if (entry.isFile() && !(d === dir && entry.name === 'config.pbtxt')) files.set(relative(dir, p), await readFile(p));
    }
  };
  await walk(dir);
  return files;
}

export const CHECKPOINT_FORMAT = 'nereid-analyze-checkpoint/1';

export interface CheckpointData {
  format: typeof CHECKPOINT_FORMAT;
  savedAt: string;
  variants: Variant[];
  measurements: Measurement[];
  skipped: Skipped[];
}

/** The checkpoint store: reads the newest, writes the next index, replaced atomically after each measurement. */
export class Checkpoints {
  readonly #dir: string;
  #file = '';
  restored: CheckpointData | undefined;
  /** Why an existing checkpoint was not used, when one was not. */
  notice: string | undefined;

  constructor(dir: string) {
    this.#dir = dir;
  }

  async open(): Promise<void> {
    await mkdir(this.#dir, { recursive: true });
    const indices = (await readdir(this.#dir))
      .map((f) => /^(\d+)\.ckpt$/.exec(f))
      .filter((m): m is RegExpExecArray => m !== null)
      .map((m) => Number(m[1]))
      .sort((a, b) => a - b);
    const last = indices.at(-1);
    if (last !== undefined) {
      const path = join(this.#dir, `${last}.ckpt`);
      try {
        const data = JSON.parse(await readFile(path, 'utf8')) as CheckpointData;
        if (data.format === CHECKPOINT_FORMAT && Array.isArray(data.measurements) && Array.isArray(data.variants)) this.restored = data;
        else this.notice = `${path} is not a nereid analyze checkpoint; starting without it`;
      } catch (err) {
        this.notice = `${path} cannot be read (${err instanceof Error ? err.message : String(err)}); starting without it`;
      }
    }
    this.#file = join(this.#dir, `${last === undefined ? 0 : last + 1}.ckpt`);
  }

  get path(): string {
    return this.#file;
  }

  async save(data: Omit<CheckpointData, 'format' | 'savedAt'>): Promise<void> {
    const body: CheckpointData = { format: CHECKPOINT_FORMAT, savedAt: new Date().toISOString(), ...data };
    const tmp = `${this.#file}.tmp`;
    await writeFile(tmp, JSON.stringify(body));
    await rename(tmp, this.#file);
  }
}

function csvCell(v: unknown): string {
  const s = v === undefined ? '' : typeof v === 'number' ? String(Number(v.toFixed(3))) : String(v);
  return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s;
}

const csv = (rows: unknown[][]): string => rows.map((r) => r.map(csvCell).join(',')).join('\n') + '\n';

/**
 * results/metrics-model-inference.csv (Model Analyzer's columns; rows by ranking, then load) and
 * results/measurements.csv (every measured figure of every measurement).
 */
export async function writeCsvs(exportPath: string, results: readonly ModelResult[], measurements: readonly Measurement[], variants: readonly Variant[], satisfiesOf: (m: Measurement) => boolean): Promise<string[]> {
  const dir = join(exportPath, 'results');
  await mkdir(dir, { recursive: true });
  const byName = new Map(variants.map((v) => [v.name, v]));
  const rate = measurements.some((m) => m.requestRate !== undefined);
  const inference: unknown[][] = [
    ['Model', 'Batch', rate ? 'Request Rate' : 'Concurrency', 'Model Config Path', 'Instance Group', 'Max Batch Size', 'Satisfies Constraints', 'Throughput (infer/sec)', 'p99 Latency (ms)'],
  ];
  const load = (m: Measurement) => m.concurrency ?? m.requestRate ?? 0;
  for (const r of results) {
    for (const ranked of r.ranking) {
      const v = byName.get(ranked.variant);
      const ms = measurements.filter((m) => m.variant === ranked.variant).sort((a, b) => a.batchSize - b.batchSize || load(a) - load(b));
      for (const m of ms) {
        inference.push([
          m.model,
          m.batchSize,
          load(m),
          m.variant,
          v ? `${v.summary.instanceCount}:${v.summary.instanceKind.replace('KIND_', '')}` : '',
          v?.summary.maxBatchSize ?? '',
          satisfiesOf(m) ? 'Yes' : 'No',
          m.perf_throughput,
          m.perf_latency_p99,
        ]);
      }
    }
  }
  const columns: (keyof Measurement)[] = [
    'model', 'variant', 'batchSize', 'concurrency', 'requestRate', 'perf_throughput', 'perf_latency_avg', 'perf_latency_p90', 'perf_latency_p95', 'perf_latency_p99',
    'perf_client_send_recv', 'perf_client_response_wait', 'perf_server_queue', 'perf_server_compute_input', 'perf_server_compute_infer', 'perf_server_compute_output',
    'cpu_used_ram', 'stable', 'errors', 'wallMs', 'at',
  ];
  const all: unknown[][] = [columns, ...measurements.map((m) => columns.map((c) => m[c]))];
  const files = [join(dir, 'metrics-model-inference.csv'), join(dir, 'measurements.csv')];
  await writeFile(files[0], csv(inference));
  await writeFile(files[1], csv(all));
  return files;
}
