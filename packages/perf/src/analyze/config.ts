/**
 * `nereid analyze` configuration: Model Analyzer's YAML keys and their kebab-case flags
 * (perf-and-analyzer.md §2.3–§2.6), read into an AnalyzeConfig.
 *
 * - `loadAnalyzeConfig(argv, env)` returns `{ config, warnings }`: `warnings` holds one line per
 *   key that Model Analyzer has and Nereid accepts without effect (`"gpus: accepted and ignored:
 *   …"`), for the command to print before it starts.
 * - `parseAnalyzeArgs(argv, env)` is the same without the warnings.
 *
 * The argument list is what follows `analyze`; a leading `profile` (Model Analyzer's subcommand) is
 * skipped. `-f FILE` names the YAML file; flags override the file's keys. Paths are resolved against
 * `env.cwd`. Every problem is a NereidError ANALYZE_CONFIG that names the key (with its path in the
 * file, or the flag), what is wrong and the fix, thrown before anything runs. `-h` throws
 * HelpRequested (the command prints ANALYZE_USAGE).
 */
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { resolve } from 'node:path';
import { parse as parseYaml, YAMLParseError } from 'yaml';
import { NereidError } from '@nereid/protocol';
import { HelpRequested } from '../options.js';
import { METRIC_TAGS } from './types.js';
import type { AnalyzeConfig, AnalyzeMode, Constraints, LaunchMode, MetricTag, Objectives, ProfileModel, SearchLimits, SearchMode } from './types.js';

export { HelpRequested };

export interface AnalyzeEnv {
  /** The directory relative paths are resolved against. */
  cwd: string;
  /** `progress: auto` becomes a bar on a TTY and plain lines otherwise. */
  stdoutIsTty: boolean;
}

export interface LoadedAnalyzeConfig {
  config: AnalyzeConfig;
  /** One line per accepted-but-ignored key: `<key path>: accepted and ignored: <why>`. */
  warnings: string[];
}

function fail(message: string): never {
  throw new NereidError('ANALYZE_CONFIG', message);
}

// ---------------------------------------------------------------------------------------------
// The keys

type Kind =
  | 'path'
  | 'string'
  | 'int'
  | 'number'
  | 'bool'
  | 'values'
  | 'models'
  | 'objectives'
  | 'constraints'
  | 'map'
  | 'flags'
  | 'duration';

interface KeySpec {
  kind: Kind;
  /** Shown in ANALYZE_USAGE. */
  default: string;
  meaning: string;
  short?: string;
}

/** Every supported key, in the order ANALYZE_USAGE and docs/analyze.md list them. */
export const ANALYZE_KEYS: Readonly<Record<string, KeySpec>> = {
  model_repository: { kind: 'path', default: 'required', meaning: 'the source model repository', short: '-m' },
  profile_models: { kind: 'models', default: 'required', meaning: 'the models to profile (list, comma string, or map with per-model settings)' },
  run_config_search_mode: { kind: 'string', default: 'brute', meaning: 'brute or quick' },
  run_config_search_min_concurrency: { kind: 'int', default: '1', meaning: 'lowest searched client concurrency' },
  run_config_search_max_concurrency: { kind: 'int', default: '1024', meaning: 'highest searched client concurrency' },
  run_config_search_min_model_batch_size: { kind: 'int', default: '1', meaning: 'lowest searched max_batch_size' },
  run_config_search_max_model_batch_size: { kind: 'int', default: '128', meaning: 'highest searched max_batch_size' },
  run_config_search_min_instance_count: { kind: 'int', default: '1', meaning: 'lowest searched instance count' },
  run_config_search_max_instance_count: { kind: 'int', default: '5', meaning: 'highest searched instance count' },
  run_config_search_min_request_rate: { kind: 'number', default: '16', meaning: 'lowest searched request rate' },
  run_config_search_max_request_rate: { kind: 'number', default: '8192', meaning: 'highest searched request rate' },
  request_rate_search_enable: { kind: 'bool', default: 'false', meaning: 'search request rates instead of concurrencies' },
  run_config_search_disable: { kind: 'bool', default: 'false', meaning: 'profile only the manual space and the default config' },
  run_config_search_max_binary_search_steps: { kind: 'int', default: '5', meaning: 'bisection steps toward a constraint' },
  concurrency_sweep_disable: { kind: 'bool', default: 'false', meaning: 'quick mode: no concurrency re-sweep of the top configs' },
  run_config_profile_models_concurrently_enable: { kind: 'bool', default: 'false', meaning: 'profile the models side by side on one server' },
  concurrency: { kind: 'values', default: 'searched', meaning: 'fixed client concurrencies for every model' },
  batch_sizes: { kind: 'values', default: '1', meaning: 'client batch sizes for every model' },
  request_rate: { kind: 'values', default: 'searched', meaning: 'fixed request rates for every model' },
  objectives: { kind: 'objectives', default: 'perf_throughput', meaning: 'what to optimize: a list (equal weights) or a map of weights' },
  constraints: { kind: 'constraints', default: 'none', meaning: '{metric: {min, max}} every reported config must meet' },
  latency_budget: { kind: 'number', default: 'none', meaning: 'shorthand for constraints.perf_latency_p99.max (ms)' },
  min_throughput: { kind: 'number', default: 'none', meaning: 'shorthand for constraints.perf_throughput.min (infer/sec)' },
  triton_launch_mode: { kind: 'string', default: 'local', meaning: 'local (start nereid serve) or remote (use a running server)' },
  triton_http_endpoint: { kind: 'string', default: 'localhost:8000', meaning: 'the server\'s HTTP endpoint' },
  triton_grpc_endpoint: { kind: 'string', default: 'localhost:8001', meaning: 'the server\'s gRPC endpoint' },
  triton_metrics_url: { kind: 'string', default: 'http://localhost:8002/metrics', meaning: 'the server\'s metrics URL' },
  triton_server_path: { kind: 'string', default: 'nereid serve', meaning: 'local mode: the server command' },
  triton_server_flags: { kind: 'map', default: 'none', meaning: 'local mode: extra server flags {flag: value}' },
  triton_server_environment: { kind: 'map', default: 'none', meaning: 'local mode: extra environment {NAME: value}' },
  client_protocol: { kind: 'string', default: 'grpc', meaning: 'grpc or http, for the load' },
  output_model_repository_path: { kind: 'path', default: './output_model_repository', meaning: 'where the variants are written' },
  override_output_model_repository: { kind: 'bool', default: 'false', meaning: 'allow reusing that directory' },
  checkpoint_directory: { kind: 'path', default: './checkpoints', meaning: 'where measurements are checkpointed' },
  export_path: { kind: 'path', default: '.', meaning: 'where results, plots and reports go', short: '-e' },
  num_configs_per_model: { kind: 'int', default: '3', meaning: 'top configs reported per model' },
  num_top_model_configs: { kind: 'int', default: '0', meaning: 'configs in the cross-model ranking (0: none)' },
  perf_analyzer_flags: { kind: 'flags', default: 'none', meaning: 'load-generator flags {flag: value} (shape, input-data may be lists)' },
  perf_analyzer_timeout: { kind: 'number', default: '600', meaning: 'seconds before a measurement is abandoned' },
  perf_analyzer_max_auto_adjusts: { kind: 'int', default: '10', meaning: 'retries with a longer window when unstable' },
  mode: { kind: 'string', default: 'online', meaning: 'online or offline' },
  time_budget: { kind: 'duration', default: '0', meaning: 'stop searching after this long (seconds, or 90s/15m/2h; 0: no limit)' },
  progress: { kind: 'string', default: 'auto', meaning: 'auto, bar, lines or none' },
  skip_summary_reports: { kind: 'bool', default: 'false', meaning: 'write no summary reports' },
  skip_detailed_reports: { kind: 'bool', default: 'false', meaning: 'write no detailed reports' },
};

const NO_GPU = 'Nereid serves on CPU only, so no GPU is used or measured';
const DOCKER_ONLY = 'it applies only to triton_launch_mode docker, which Nereid does not use';
const OPTUNA_ONLY = 'it applies only to the optuna search mode, which Nereid does not have';
const FIXED_COLUMNS = "Nereid's tables and CSV files have fixed columns";

/** Model Analyzer keys accepted without effect: whether the flag takes a value, and why. */
export const IGNORED_KEYS: Readonly<Record<string, { bool: boolean; why: string }>> = {
  gpus: { bool: false, why: NO_GPU },
  dcgm_disable: { bool: true, why: 'Nereid collects no GPU metrics, so DCGM is never used' },
  collect_cpu_metrics: { bool: true, why: 'CPU memory (cpu_used_ram) is always collected' },
  always_report_gpu_metrics: { bool: true, why: NO_GPU },
  cpu_only: { bool: true, why: 'every model is profiled with KIND_CPU instance groups already' },
  cpu_only_composing_models: { bool: false, why: 'every model is profiled with KIND_CPU instance groups already' },
  duration_seconds: { bool: false, why: 'no server-only GPU metrics are recorded' },
  monitoring_interval: { bool: false, why: 'no GPU metrics are polled; CPU memory is sampled during each measurement' },
  perf_output: { bool: true, why: 'the load generator runs inside nereid analyze; its results are in the checkpoints and reports' },
  perf_output_path: { bool: false, why: 'the load generator runs inside nereid analyze; its results are in the checkpoints and reports' },
  perf_analyzer_path: { bool: false, why: "Nereid's own load generator (nereid perf) is used, not a perf_analyzer binary" },
  perf_analyzer_cpu_util: { bool: false, why: 'the load generator runs in process, not as a perf_analyzer subprocess to watch' },
  triton_output_path: { bool: false, why: 'a local server writes its output to <export_path>/nereid-server.log' },
  triton_docker_image: { bool: false, why: DOCKER_ONLY },
  triton_docker_labels: { bool: false, why: DOCKER_ONLY },
  triton_docker_shm_size: { bool: false, why: DOCKER_ONLY },
  triton_docker_mounts: { bool: false, why: DOCKER_ONLY },
  triton_docker_args: { bool: false, why: DOCKER_ONLY },
  triton_install_path: { bool: false, why: 'it applies only to triton_launch_mode c_api, which Nereid does not use' },
  optuna_min_trials: { bool: false, why: OPTUNA_ONLY },
  optuna_max_trials: { bool: false, why: OPTUNA_ONLY },
  optuna_early_exit_threshold: { bool: false, why: OPTUNA_ONLY },
  min_percentage_of_search_space: { bool: false, why: OPTUNA_ONLY },
  max_percentage_of_search_space: { bool: false, why: OPTUNA_ONLY },
  use_concurrency_formula: { bool: true, why: OPTUNA_ONLY },
  inference_output_fields: { bool: false, why: FIXED_COLUMNS },
  gpu_output_fields: { bool: false, why: FIXED_COLUMNS },
  server_output_fields: { bool: false, why: FIXED_COLUMNS },
  filename_model_inference: { bool: false, why: FIXED_COLUMNS + ' and names' },
  filename_model_gpu: { bool: false, why: FIXED_COLUMNS + ' and names' },
  filename_server_only: { bool: false, why: FIXED_COLUMNS + ' and names' },
  plots: { bool: false, why: 'it belongs to model-analyzer report; nereid analyze writes its plots during the profile run' },
  report_model_configs: { bool: false, why: 'it belongs to model-analyzer report; nereid analyze reports the top num_configs_per_model configs' },
};

/** Keys of one `profile_models` entry. */
const MODEL_KEYS = ['parameters', 'model_config_parameters', 'perf_analyzer_flags', 'objectives', 'constraints', 'cpu_only', 'weighting', 'triton_server_flags', 'triton_server_environment'];
const PARAMETER_KEYS = ['concurrency', 'batch_sizes', 'request_rate'];

/** ModelConfig's top-level fields (model_config.proto), what model_config_parameters may sweep. */
const MODEL_CONFIG_FIELDS = [
  'platform', 'backend', 'runtime', 'version_policy', 'max_batch_size', 'input', 'output', 'batch_input', 'batch_output',
  'optimization', 'dynamic_batching', 'sequence_batching', 'ensemble_scheduling', 'instance_group', 'default_model_filename',
  'cc_model_filenames', 'metric_tags', 'parameters', 'model_warmup', 'model_operations', 'model_transaction_policy',
  'model_repository_agents', 'response_cache', 'model_metrics',
];

/** ModelConfig's repeated fields, at any depth: a list value is one value, a list of lists a sweep. */
const LIST_FIELDS = new Set([
  'agents', 'batch_input', 'batch_output', 'bool_false_true', 'buckets', 'control', 'control_input', 'cpu_execution_accelerator',
  'dim', 'dims', 'fp32_false_true', 'gpu_execution_accelerator', 'gpus', 'graph_spec', 'initial_state', 'input', 'instance_group',
  'int32_false_true', 'metric_control', 'model_warmup', 'op_library_filename', 'output', 'preferred_batch_size', 'profile',
  'resources', 'secondary_devices', 'shape', 'source_input', 'state', 'step', 'target_name', 'versions',
]);

/** Load-generator flags nereid analyze sets itself for every measurement. */
const MANAGED_PA_FLAGS = new Set([
  'm', 'model-name', 'b', 'batch-size', 'concurrency-range', 'request-rate-range', 'i', 'protocol', 'u', 'url', 'f', 'filename',
  'verbose-csv', 'collect-metrics', 'metrics-url', 'metrics-interval', 'service-kind', 'model-repository', 'triton-server-directory',
]);
const PA_LIST_FLAGS = new Set(['shape', 'input-data']);

const kebab = (key: string) => key.replace(/_/g, '-');

// ---------------------------------------------------------------------------------------------
// Messages

/** Levenshtein distance. */
function distance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
    prev = cur;
  }
  return prev[b.length];
}

/** The known name nearest to `name`, when it is near enough to be a misspelling. */
export function closest(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const k of known) {
    const d = distance(name.toLowerCase(), k.toLowerCase());
    if (d < bestD) {
      best = k;
      bestD = d;
    }
  }
  if (best !== undefined && bestD <= Math.max(2, Math.floor(name.length / 3))) return best;
  // A shortened name: `max_batch` for `max_batch_size`.
  const lower = name.toLowerCase();
  return lower.length >= 4 ? [...known].find((k) => k.toLowerCase().startsWith(lower)) : undefined;
}

function unknownKey(path: string, key: string, known: readonly string[], what = 'key', listed = `docs/analyze.md lists the ${what}s`): never {
  const near = closest(key, known);
  const where = path === '' ? '' : ` in ${path}`;
  const fix = near !== undefined ? `did you mean '${near}'?` : `remove it (${listed})`;
  fail(`unknown ${what} '${key}'${where}: ${fix}`);
}

function describe(v: unknown): string {
  if (v === null || v === undefined) return 'nothing';
  if (typeof v === 'string') return `the string '${v}'`;
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a map';
  return `${typeof v} ${String(v)}`;
}

function isMap(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function needMap(path: string, v: unknown, example: string): Record<string, unknown> {
  if (!isMap(v)) fail(`${path}: needs a map, got ${describe(v)}; write it as ${example}`);
  return v;
}

// ---------------------------------------------------------------------------------------------
// Values

interface NumberRule {
  integer?: boolean;
  min?: number;
  /** Zero is refused (a count or limit of 0 means nothing). */
  positive?: boolean;
}

function num(path: string, v: unknown, rule: NumberRule = {}): number {
  const what = `${rule.integer ? 'a whole number' : 'a number'}${rule.positive ? ' above 0' : rule.min !== undefined ? ` of at least ${rule.min}` : ''}`;
  let n = NaN;
  if (typeof v === 'number') n = v;
  else if (typeof v === 'string' && v.trim() !== '') n = Number(v.trim());
  if (!Number.isFinite(n) || (rule.integer && !Number.isInteger(n))) fail(`${path}: needs ${what}, got ${describe(v)}; set it to ${what}`);
  if (rule.positive && n <= 0) fail(`${path}: needs ${what}, got ${n}; set it to ${what}`);
  if (rule.min !== undefined && n < rule.min) fail(`${path}: needs ${what}, got ${n}; set it to ${what}`);
  return n;
}

function bool(path: string, v: unknown): boolean {
  if (typeof v === 'boolean') return v;
  if (v === 'true' || v === 'false') return v === 'true';
  fail(`${path}: needs true or false, got ${describe(v)}; set it to true or false`);
}

function str(path: string, v: unknown): string {
  if (typeof v === 'number') return String(v);
  if (typeof v !== 'string' || v.trim() === '') fail(`${path}: needs a non-empty string, got ${describe(v)}; set it to a string`);
  return v;
}

function choice<T extends string>(path: string, v: unknown, allowed: readonly T[], refused: Record<string, string> = {}): T {
  const s = str(path, v);
  const why = refused[s];
  if (why !== undefined) fail(`${path}: '${s}' is not supported: ${why}`);
  if (!(allowed as readonly string[]).includes(s)) {
    const near = closest(s, allowed);
    fail(`${path}: unknown value '${s}'; use one of ${allowed.join(', ')}${near !== undefined ? ` (did you mean '${near}'?)` : ''}`);
  }
  return s as T;
}

const MAX_VALUES = 10000;

/** A client sweep: a number, a list, a comma string, or `{start, stop, step}`. */
function values(path: string, v: unknown, integer: boolean): number[] {
  const rule: NumberRule = { integer, positive: true };
  let out: number[];
  if (typeof v === 'number') out = [num(path, v, rule)];
  else if (typeof v === 'string') {
    const parts = v.split(',').map((p) => p.trim());
    out = parts.map((p, i) => num(`${path}[${i}]`, p, rule));
  } else if (Array.isArray(v)) {
    out = v.map((x, i) => num(`${path}[${i}]`, x, rule));
  } else if (isMap(v)) {
    for (const k of Object.keys(v)) if (!['start', 'stop', 'step'].includes(k)) unknownKey(path, k, ['start', 'stop', 'step']);
    if (v.start === undefined || v.stop === undefined) fail(`${path}: a range needs start and stop; write it as {start: 1, stop: 16, step: 1}`);
    const start = num(`${path}.start`, v.start, rule);
    const stop = num(`${path}.stop`, v.stop, rule);
    const step = v.step === undefined ? 1 : num(`${path}.step`, v.step, rule);
    if (stop < start) fail(`${path}: stop ${stop} is below start ${start}; make stop at least start`);
    if ((stop - start) / step >= MAX_VALUES) fail(`${path}: the range gives more than ${MAX_VALUES} values; raise step or narrow start..stop`);
    out = [];
    for (let x = start; x <= stop + 1e-9; x += step) out.push(integer ? Math.round(x) : Number(x.toPrecision(12)));
  } else {
    fail(`${path}: needs a list, a comma-separated string or {start, stop, step}, got ${describe(v)}; write e.g. [1, 2, 4]`);
  }
  if (out.length === 0) fail(`${path}: the list is empty; give at least one value or leave the key out`);
  return [...new Set(out)];
}

function metricTag(path: string, tag: string): MetricTag {
  if (!(METRIC_TAGS as readonly string[]).includes(tag)) unknownKey(path, tag, METRIC_TAGS, 'metric');
  return tag as MetricTag;
}

/** A list (equal weights), a comma string, or a map of weights; normalized to sum 1. */
function objectives(path: string, v: unknown): Objectives {
  const weights: [MetricTag, number][] = [];
  if (typeof v === 'string' || Array.isArray(v)) {
    const tags = typeof v === 'string' ? v.split(',').map((t) => t.trim()) : v;
    tags.forEach((t, i) => weights.push([metricTag(path, str(`${path}[${i}]`, t)), 1]));
  } else if (isMap(v)) {
    for (const [t, w] of Object.entries(v)) weights.push([metricTag(path, t), num(`${path}.${t}`, w, { min: 0 })]);
  } else {
    fail(`${path}: needs a list of metrics or a map of weights, got ${describe(v)}; write e.g. [perf_throughput] or {perf_throughput: 2, perf_latency_p99: 3}`);
  }
  if (weights.length === 0) fail(`${path}: names no metric; give at least one, e.g. [perf_throughput]`);
  const total = weights.reduce((s, [, w]) => s + w, 0);
  if (total <= 0) fail(`${path}: the weights sum to 0; give at least one weight above 0`);
  const out: Objectives = {};
  for (const [t, w] of weights) out[t] = (out[t] ?? 0) + w / total;
  return out;
}

function constraints(path: string, v: unknown): Constraints {
  const map = needMap(path, v, '{perf_latency_p99: {max: 10}, perf_throughput: {min: 100}}');
  const out: Constraints = {};
  for (const [t, bounds] of Object.entries(map)) {
    const tag = metricTag(path, t);
    const p = `${path}.${t}`;
    const b = needMap(p, bounds, '{min: N} or {max: N}');
    const c: { min?: number; max?: number } = {};
    for (const [k, x] of Object.entries(b)) {
      if (k !== 'min' && k !== 'max') unknownKey(p, k, ['min', 'max'], 'bound');
      c[k] = k === 'max' ? num(`${p}.max`, x, { positive: true }) : num(`${p}.min`, x, { min: 0 });
    }
    if (c.min === undefined && c.max === undefined) fail(`${p}: gives no bound; write {min: N} or {max: N}`);
    if (c.min !== undefined && c.max !== undefined && c.min > c.max) fail(`${p}: min ${c.min} is above max ${c.max}; lower min or raise max`);
    out[tag] = c;
  }
  return out;
}

function stringMap(path: string, v: unknown): Record<string, string> {
  const map = needMap(path, v, '{name: value}');
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(map)) {
    if (typeof x === 'string' || typeof x === 'number' || typeof x === 'boolean') out[k] = String(x);
    else fail(`${path}.${k}: needs a string, number or true/false, got ${describe(x)}; set one value`);
  }
  return out;
}

function paFlags(path: string, v: unknown, warnings: string[]): Record<string, string | string[]> {
  const map = needMap(path, v, '{percentile: 95, measurement-interval: 1000}');
  const out: Record<string, string | string[]> = {};
  for (const [rawKey, x] of Object.entries(map)) {
    const key = kebab(rawKey.replace(/^-+/, ''));
    const p = `${path}.${rawKey}`;
    if (MANAGED_PA_FLAGS.has(key)) {
      warnings.push(`${p}: accepted and ignored: nereid analyze sets ${key.length === 1 ? '-' : '--'}${key} itself for every measurement`);
      continue;
    }
    const scalar = (y: unknown, q: string): string => {
      if (typeof y === 'string' || typeof y === 'number' || typeof y === 'boolean') return String(y);
      fail(`${q}: needs a string, number or true/false, got ${describe(y)}; set one value`);
    };
    if (Array.isArray(x)) {
      if (!PA_LIST_FLAGS.has(key)) fail(`${p}: only shape and input-data take a list, got a list; give one value`);
      out[key] = x.map((y, i) => scalar(y, `${p}[${i}]`));
    } else out[key] = scalar(x, p);
  }
  return out;
}

function duration(path: string, v: unknown): number {
  if (typeof v === 'string') {
    const m = /^\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*$/.exec(v);
    if (m === null) fail(`${path}: needs seconds or a duration such as 90s, 15m or 2h, got ${describe(v)}; set it to e.g. 30m`);
    return Number(m[1]) * ({ s: 1, m: 60, h: 3600 } as Record<string, number>)[m[2] ?? 's'];
  }
  return num(path, v, { min: 0 });
}

// ---------------------------------------------------------------------------------------------
// model_config_parameters

const MAX_CANDIDATES = 10000;

function product(lists: unknown[][], path: string): unknown[][] {
  let out: unknown[][] = [[]];
  for (const l of lists) {
    const next: unknown[][] = [];
    for (const prefix of out) for (const x of l) next.push([...prefix, x]);
    if (next.length > MAX_CANDIDATES) fail(`${path}: sweeps more than ${MAX_CANDIDATES} values; list fewer candidates`);
    out = next;
  }
  return out;
}

/**
 * The complete candidate values of one field. A map expands to the product of its fields; a list is
 * a sweep of candidates, except for a repeated (list-valued) field, where a list is one value and a
 * list of lists is the sweep.
 */
function candidates(path: string, field: string, v: unknown): unknown[] {
  if (v === null || v === undefined) fail(`${path}: has no value; give a value or a list of candidates`);
  if (isMap(v)) {
    const keys = Object.keys(v);
    const combos = product(keys.map((k) => candidates(`${path}.${k}`, k, v[k])), path);
    return combos.map((c) => Object.fromEntries(keys.map((k, i) => [k, c[i]])));
  }
  if (!Array.isArray(v)) return [v];
  if (v.length === 0) fail(`${path}: the list is empty; give at least one candidate or leave the key out`);
  if (LIST_FIELDS.has(field)) {
    if (v.every((x) => Array.isArray(x))) return v.flatMap((x, i) => listValue(`${path}[${i}]`, x as unknown[]));
    if (v.some((x) => Array.isArray(x))) fail(`${path}: mixes lists and single values; ${field} is a list field, so give one list (one value) or a list of lists (candidates)`);
    return listValue(path, v);
  }
  return v.flatMap((x, i) => {
    if (Array.isArray(x)) fail(`${path}[${i}]: ${field} takes a single value, got a list; list the candidates directly, e.g. [1, 2]`);
    return candidates(`${path}[${i}]`, field, x);
  });
}

/** One value of a repeated field: its elements may hold sweeps (e.g. `count: [1, 2]`). */
function listValue(path: string, v: unknown[]): unknown[] {
  const elements = v.map((x, i) => (isMap(x) ? candidates(`${path}[${i}]`, '', x) : [x]));
  return product(elements, path);
}

function modelConfigParameters(path: string, v: unknown): Record<string, unknown[]> {
  const map = needMap(path, v, '{max_batch_size: [8, 16], dynamic_batching: {max_queue_delay_microseconds: [100, 200]}}');
  const out: Record<string, unknown[]> = {};
  for (const [field, x] of Object.entries(map)) {
    if (field === 'name') fail(`${path}.name: cannot be swept (nereid analyze names the variants); remove it`);
    if (!MODEL_CONFIG_FIELDS.includes(field)) unknownKey(path, field, MODEL_CONFIG_FIELDS, 'model configuration field', "model_config.proto's ModelConfig lists them");
    out[field] = candidates(`${path}.${field}`, field, x);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// The command line

type Source = 'file' | 'cli';
interface Entry {
  value: unknown;
  source: Source;
}

export const ANALYZE_USAGE = (() => {
  const lines = [
    'Usage: nereid analyze [profile] -f CONFIG.yaml | -m REPOSITORY --profile-models A,B [options]',
    "  Model Analyzer's keys: in the YAML file as key: value, on the command line as --key-with-dashes VALUE",
    '  (flags override the file; map-valued keys are file-only; docs/analyze.md).',
    '  -f, --config-file FILE   the YAML configuration',
    '  -h, --help               this text',
  ];
  for (const [key, spec] of Object.entries(ANALYZE_KEYS)) {
    const fileOnly = spec.kind === 'constraints' || spec.kind === 'map' || spec.kind === 'flags';
    const flag = fileOnly ? `${key}: {…}  (file only)` : `${spec.short !== undefined ? `${spec.short}, ` : ''}--${kebab(key)}${spec.kind === 'bool' ? '' : ' V'}`;
    lines.push(`  ${flag.padEnd(52)} ${spec.meaning} [${spec.default}]`);
  }
  return lines.join('\n') + '\n';
})();

const FILE_ONLY_HINT: Record<string, string> = {
  constraints: 'use --latency-budget / --min-throughput, or put constraints in the -f file',
};

function parseArgv(argv: readonly string[]): { configFile?: string; cli: Map<string, string> } {
  const cli = new Map<string, string>();
  let configFile: string | undefined;
  const args = argv[0] === 'profile' ? argv.slice(1) : argv;
  const flagToKey = new Map<string, string>();
  for (const key of [...Object.keys(ANALYZE_KEYS), ...Object.keys(IGNORED_KEYS)]) flagToKey.set(`--${kebab(key)}`, key);
  for (const [key, spec] of Object.entries(ANALYZE_KEYS)) if (spec.short !== undefined) flagToKey.set(spec.short, key);
  const isBool = (key: string) => ANALYZE_KEYS[key]?.kind === 'bool' || IGNORED_KEYS[key]?.bool === true;
  let help = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === '-h' || arg === '--help') {
      help = true;
      continue;
    }
    if (!arg.startsWith('-')) {
      const hint = i === 0 && argv[0] !== 'profile' && ['report', 'validate'].includes(arg) ? `; nereid analyze has only the profile subcommand` : '; flags start with --';
      fail(`unexpected argument '${arg}'${hint} (nereid analyze -h lists the flags)`);
    }
    const eq = arg.startsWith('--') ? arg.indexOf('=') : -1;
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    let inline = eq < 0 ? undefined : arg.slice(eq + 1);
    if (flag === '-f' || flag === '--config-file') {
      if (inline === undefined) {
        if (i + 1 >= args.length) fail(`${flag} needs a value: the YAML configuration file`);
        inline = args[++i];
      }
      configFile = inline;
      continue;
    }
    const key = flagToKey.get(flag);
    if (key === undefined) {
      const near = closest(flag, [...flagToKey.keys(), '--config-file']);
      fail(`unknown option '${flag}': ${near !== undefined ? `did you mean '${near}'?` : 'nereid analyze -h lists the flags'}`);
    }
    const kind = ANALYZE_KEYS[key]?.kind;
    if (kind === 'constraints' || kind === 'map' || kind === 'flags') {
      fail(`${flag}: ${key} is a map, given in the YAML file only; ${FILE_ONLY_HINT[key] ?? `put ${key}: {…} in the -f file`}`);
    }
    if (isBool(key) && inline === undefined) {
      cli.set(key, 'true');
      continue;
    }
    if (inline === undefined) {
      if (i + 1 >= args.length) fail(`${flag} needs a value (nereid analyze -h lists the flags)`);
      inline = args[++i];
    }
    cli.set(key, inline);
  }
  if (help) throw new HelpRequested();
  return { configFile, cli };
}

function readConfigFile(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    fail(`--config-file ${path}: cannot read the file (${code}); check the path`);
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    if (err instanceof YAMLParseError) {
      const pos = err.linePos?.[0];
      const where = pos !== undefined ? ` at line ${pos.line}, column ${pos.col}` : '';
      const first = err.message.split('\n')[0].replace(/ at line \d+, column \d+:?$/, '');
      fail(`${path}: YAML syntax error${where}: ${first}; fix the file's syntax there`);
    }
    throw err;
  }
  if (doc === null || doc === undefined) return {};
  if (!isMap(doc)) fail(`${path}: the file must be a map of keys (key: value), got ${describe(doc)}; start each line with a key such as model_repository:`);
  return doc;
}

// ---------------------------------------------------------------------------------------------
// Loading

/** Parses the command line (and its -f file) into a checked AnalyzeConfig plus warnings. */
export function loadAnalyzeConfig(argv: readonly string[], env?: AnalyzeEnv): LoadedAnalyzeConfig {
  const e: AnalyzeEnv = env ?? { cwd: process.cwd(), stdoutIsTty: Boolean(process.stdout.isTTY) };
  const { configFile, cli } = parseArgv(argv);
  const warnings: string[] = [];
  const raw = new Map<string, Entry>();
  let fileModels: unknown;
  if (configFile !== undefined) {
    const file = readConfigFile(resolve(e.cwd, configFile));
    fileModels = file.profile_models;
    for (const [key, value] of Object.entries(file)) {
      if (ANALYZE_KEYS[key] === undefined && IGNORED_KEYS[key] === undefined) {
        if (key === 'model_type' && value === 'generic') continue;
        if (key === 'model_type') fail(`model_type: '${String(value)}' is not supported: nereid analyze profiles generic models; remove model_type`);
        unknownKey('', key, [...Object.keys(ANALYZE_KEYS), ...Object.keys(IGNORED_KEYS)]);
      }
      raw.set(key, { value, source: 'file' });
    }
  }
  for (const [key, value] of cli) raw.set(key, { value, source: 'cli' });

  const label = (key: string) => (raw.get(key)?.source === 'cli' ? `--${kebab(key)}` : key);
  for (const key of raw.keys()) {
    const ignored = IGNORED_KEYS[key];
    if (ignored !== undefined) warnings.push(`${label(key)}: accepted and ignored: ${ignored.why}`);
  }
  const has = (key: string) => raw.has(key) && raw.get(key)!.value !== null;
  const get = <T>(key: string, read: (path: string, v: unknown) => T, fallback: T): T => (has(key) ? read(label(key), raw.get(key)!.value) : fallback);
  const int = (key: string, fallback: number, positive = true) => get(key, (p, v) => num(p, v, positive ? { integer: true, positive: true } : { integer: true, min: 0 }), fallback);
  const flag = (key: string) => get(key, bool, false);
  const path = (key: string, fallback: string) => resolve(e.cwd, get(key, str, fallback));

  // The search
  const searchMode = get<SearchMode>('run_config_search_mode', (p, v) => choice(p, v, ['brute', 'quick'], {
    optuna: 'Nereid has no optuna search; use brute (exhaustive) or quick (hill climbing)',
  }), 'brute');
  const search: SearchLimits = {
    minConcurrency: int('run_config_search_min_concurrency', 1),
    maxConcurrency: int('run_config_search_max_concurrency', 1024),
    minModelBatchSize: int('run_config_search_min_model_batch_size', 1),
    maxModelBatchSize: int('run_config_search_max_model_batch_size', 128),
    minInstanceCount: int('run_config_search_min_instance_count', 1),
    maxInstanceCount: int('run_config_search_max_instance_count', 5),
    minRequestRate: get('run_config_search_min_request_rate', (p, v) => num(p, v, { positive: true }), 16),
    maxRequestRate: get('run_config_search_max_request_rate', (p, v) => num(p, v, { positive: true }), 8192),
    requestRateSearchEnable: flag('request_rate_search_enable'),
    disable: flag('run_config_search_disable'),
    maxBinarySearchSteps: int('run_config_search_max_binary_search_steps', 5, false),
    concurrencySweepDisable: flag('concurrency_sweep_disable'),
  };
  const pairs: [string, number, number][] = [
    ['concurrency', search.minConcurrency, search.maxConcurrency],
    ['model_batch_size', search.minModelBatchSize, search.maxModelBatchSize],
    ['instance_count', search.minInstanceCount, search.maxInstanceCount],
    ['request_rate', search.minRequestRate, search.maxRequestRate],
  ];
  for (const [what, min, max] of pairs) {
    const lo = `run_config_search_min_${what}`;
    const hi = `run_config_search_max_${what}`;
    const side = (key: string, v: number) => (has(key) ? `${label(key)} (${v})` : `the default ${key} (${v})`);
    if (min > max) fail(`${side(lo, min)} is above ${side(hi, max)}; lower the min or raise the max`);
  }

  // Objectives and constraints
  const globalObjectives = get('objectives', objectives, { perf_throughput: 1 } as Objectives);
  const globalConstraints = get('constraints', constraints, {} as Constraints);
  if (has('latency_budget')) {
    const max = num(label('latency_budget'), raw.get('latency_budget')!.value, { positive: true });
    globalConstraints.perf_latency_p99 = { ...globalConstraints.perf_latency_p99, max };
  }
  if (has('min_throughput')) {
    const min = num(label('min_throughput'), raw.get('min_throughput')!.value, { positive: true });
    globalConstraints.perf_throughput = { ...globalConstraints.perf_throughput, min };
  }
  for (const [tag, c] of Object.entries(globalConstraints)) {
    if (c.min !== undefined && c.max !== undefined && c.min > c.max) {
      fail(`constraints.${tag}: min ${c.min} is above max ${c.max} (after latency_budget/min_throughput); lower min or raise max`);
    }
  }

  // Client sweeps for every model
  const globalConcurrency = get<number[] | undefined>('concurrency', (p, v) => values(p, v, true), undefined);
  const globalRequestRate = get<number[] | undefined>('request_rate', (p, v) => values(p, v, false), undefined);
  const globalBatchSizes = get('batch_sizes', (p, v) => values(p, v, true), [1]);
  if (globalConcurrency !== undefined && globalRequestRate !== undefined) {
    fail(`${label('concurrency')} and ${label('request_rate')} are both given; give one of them (a sweep is over concurrency or over request rate)`);
  }
  const globalPaFlags = get('perf_analyzer_flags', (p, v) => paFlags(p, v, warnings), {});

  // The models
  if (!has('model_repository')) fail('model_repository is required: give -m DIR (--model-repository) or model_repository: DIR in the -f file');
  const modelRepository = path('model_repository', '.');
  let repoStat;
  try {
    repoStat = statSync(modelRepository);
  } catch {
    fail(`${label('model_repository')}: ${modelRepository} does not exist; give the directory that holds the models`);
  }
  if (!repoStat.isDirectory()) fail(`${label('model_repository')}: ${modelRepository} is not a directory; give the directory that holds the models`);
  if (!has('profile_models')) fail('profile_models is required: give --profile-models A,B or profile_models: [A, B] in the -f file');
  const entries = modelEntries(raw, fileModels, label);
  const available = readdirSync(modelRepository, { withFileTypes: true }).filter((d) => d.isDirectory()).map((d) => d.name).sort();
  const models: ProfileModel[] = entries.map(({ name, settings, path: mp }) => {
    if (!available.includes(name)) {
      const near = closest(name, available);
      fail(`${mp}: the model repository ${modelRepository} has no directory '${name}'; ${near !== undefined ? `did you mean '${near}'?` : `profile one of its models (${available.join(', ') || 'it has none'})`}`);
    }
    return profileModel(mp, name, settings, {
      objectives: globalObjectives,
      constraints: globalConstraints,
      concurrency: globalConcurrency,
      requestRate: globalRequestRate,
      batchSizes: globalBatchSizes,
      perfAnalyzerFlags: globalPaFlags,
    }, warnings);
  });

  // The server
  const launchMode = get<LaunchMode>('triton_launch_mode', (p, v) => choice(p, v, ['local', 'remote'], {
    docker: 'Nereid needs no container: use local (nereid analyze starts nereid serve itself) or remote (start the server with --model-control-mode explicit and give its endpoints)',
    c_api: 'Nereid has no in-process C API mode and needs none: use local (nereid analyze starts nereid serve itself) or remote (give a running server\'s endpoints)',
  }), 'local');

  const outputModelRepositoryPath = path('output_model_repository_path', './output_model_repository');
  if (outputModelRepositoryPath === modelRepository) {
    fail(`${label('output_model_repository_path')}: is the model repository itself; variants must be written elsewhere, e.g. ./output_model_repository`);
  }
  const progress = get<AnalyzeConfig['progress']>('progress', (p, v) => choice(p, v, ['auto', 'bar', 'lines', 'none']), 'auto');

  const config: AnalyzeConfig = {
    modelRepository,
    models,
    mode: get<AnalyzeMode>('mode', (p, v) => choice(p, v, ['online', 'offline']), 'online'),
    searchMode,
    launchMode,
    profileModelsConcurrently: flag('run_config_profile_models_concurrently_enable'),
    search,
    clientProtocol: get<'grpc' | 'http'>('client_protocol', (p, v) => choice(p, v, ['grpc', 'http']), 'grpc'),
    httpEndpoint: get('triton_http_endpoint', str, 'localhost:8000'),
    grpcEndpoint: get('triton_grpc_endpoint', str, 'localhost:8001'),
    metricsUrl: get('triton_metrics_url', str, 'http://localhost:8002/metrics'),
    serverPath: get<string | undefined>('triton_server_path', str, undefined),
    serverFlags: get('triton_server_flags', stringMap, {}),
    serverEnvironment: get('triton_server_environment', stringMap, {}),
    outputModelRepositoryPath,
    overrideOutputModelRepository: flag('override_output_model_repository'),
    checkpointDirectory: path('checkpoint_directory', './checkpoints'),
    exportPath: path('export_path', '.'),
    numConfigsPerModel: int('num_configs_per_model', 3),
    numTopModelConfigs: int('num_top_model_configs', 0, false),
    perfAnalyzerFlags: globalPaFlags,
    perfAnalyzerTimeout: get('perf_analyzer_timeout', (p, v) => num(p, v, { positive: true }), 600),
    perfAnalyzerMaxAutoAdjusts: int('perf_analyzer_max_auto_adjusts', 10, false),
    timeBudgetSeconds: get('time_budget', duration, 0),
    skipSummaryReports: flag('skip_summary_reports'),
    skipDetailedReports: flag('skip_detailed_reports'),
    progress: progress === 'auto' ? (e.stdoutIsTty ? 'bar' : 'lines') : progress,
  };
  return { config, warnings };
}

/** Parses the command line (and its -f file) into a checked AnalyzeConfig; warnings are dropped. */
export function parseAnalyzeArgs(argv: readonly string[], env?: AnalyzeEnv): AnalyzeConfig {
  return loadAnalyzeConfig(argv, env).config;
}

interface ModelEntry {
  name: string;
  path: string;
  settings: Record<string, unknown>;
}

/**
 * `profile_models` as name → settings. On the command line it is a comma list; the file's settings
 * for a model it names are kept.
 */
function modelEntries(raw: Map<string, Entry>, fileModels: unknown, label: (key: string) => string): ModelEntry[] {
  const entry = raw.get('profile_models')!;
  const models = parseModelList(entry.value, label('profile_models'));
  if (entry.source === 'file' || fileModels === undefined || fileModels === null) return models;
  const inFile = parseModelList(fileModels, 'profile_models');
  return models.map((m) => inFile.find((f) => f.name === m.name) ?? m);
}

function parseModelList(v: unknown, base: string): ModelEntry[] {
  const out: ModelEntry[] = [];
  const add = (name: unknown, settings: unknown, p: string) => {
    const n = str(p, name).trim();
    if (!/^[^/\\\s]+$/.test(n) || n === '.' || n === '..') fail(`${p}: '${n}' is not a model name (a directory name in the repository); fix the name`);
    if (out.some((m) => m.name === n)) fail(`${p}: model '${n}' is listed twice; list it once`);
    const s = settings === null || settings === undefined ? {} : needMap(`${base}.${n}`, settings, '{parameters: {concurrency: [1, 2]}, constraints: {…}}');
    out.push({ name: n, path: base.startsWith('--') ? `${base} ${n}` : `${base}.${n}`, settings: s });
  };
  if (typeof v === 'string') v.split(',').forEach((n, i) => add(n, undefined, `${base}[${i}]`));
  else if (Array.isArray(v)) {
    v.forEach((x, i) => {
      if (isMap(x) && Object.keys(x).length === 1) add(Object.keys(x)[0], Object.values(x)[0], `${base}[${i}]`);
      else add(x, undefined, `${base}[${i}]`);
    });
  } else if (isMap(v)) for (const [n, s] of Object.entries(v)) add(n, s, `${base}.${n}`);
  else fail(`${base}: needs a list of model names or a map of name → settings, got ${describe(v)}; write e.g. [model_a, model_b]`);
  if (out.length === 0) fail(`${base}: names no model; give at least one`);
  return out;
}

function profileModel(
  mp: string,
  name: string,
  settings: Record<string, unknown>,
  global: { objectives: Objectives; constraints: Constraints; concurrency?: number[]; requestRate?: number[]; batchSizes: number[]; perfAnalyzerFlags: Record<string, string | string[]> },
  warnings: string[],
): ProfileModel {
  for (const key of Object.keys(settings)) if (!MODEL_KEYS.includes(key)) unknownKey(mp, key, MODEL_KEYS);
  const at = (key: string) => (settings[key] === null ? undefined : settings[key]);
  const model: ProfileModel = {
    name,
    objectives: at('objectives') !== undefined ? objectives(`${mp}.objectives`, at('objectives')) : { ...global.objectives },
    constraints: at('constraints') !== undefined ? constraints(`${mp}.constraints`, at('constraints')) : structuredClone(global.constraints),
    batchSizes: global.batchSizes,
    perfAnalyzerFlags: { ...global.perfAnalyzerFlags },
    cpuOnly: true,
    weighting: at('weighting') !== undefined ? num(`${mp}.weighting`, at('weighting'), { integer: true, positive: true }) : 1,
  };
  let concurrency = global.concurrency;
  let requestRate = global.requestRate;
  if (at('parameters') !== undefined) {
    const pp = `${mp}.parameters`;
    const params = needMap(pp, at('parameters'), '{concurrency: [1, 2, 4], batch_sizes: [1, 8]}');
    for (const key of Object.keys(params)) if (!PARAMETER_KEYS.includes(key)) unknownKey(pp, key, PARAMETER_KEYS);
    const c = params.concurrency ?? undefined;
    const r = params.request_rate ?? undefined;
    if (c !== undefined && r !== undefined) fail(`${pp}: concurrency and request_rate are both given; give one of them`);
    if (c !== undefined || r !== undefined) {
      concurrency = c !== undefined ? values(`${pp}.concurrency`, c, true) : undefined;
      requestRate = r !== undefined ? values(`${pp}.request_rate`, r, false) : undefined;
    }
    if (params.batch_sizes !== undefined && params.batch_sizes !== null) model.batchSizes = values(`${pp}.batch_sizes`, params.batch_sizes, true);
  }
  if (concurrency !== undefined) model.concurrency = concurrency;
  if (requestRate !== undefined) model.requestRate = requestRate;
  if (at('model_config_parameters') !== undefined) model.modelConfigParameters = modelConfigParameters(`${mp}.model_config_parameters`, at('model_config_parameters'));
  if (at('perf_analyzer_flags') !== undefined) Object.assign(model.perfAnalyzerFlags, paFlags(`${mp}.perf_analyzer_flags`, at('perf_analyzer_flags'), warnings));
  if (at('cpu_only') !== undefined) {
    const cpuOnly = bool(`${mp}.cpu_only`, at('cpu_only'));
    if (!cpuOnly) warnings.push(`${mp}.cpu_only: accepted and ignored: ${NO_GPU}; the model is profiled with KIND_CPU instance groups`);
  }
  for (const key of ['triton_server_flags', 'triton_server_environment']) {
    if (at(key) !== undefined) {
      stringMap(`${mp}.${key}`, at(key));
      warnings.push(`${mp}.${key}: accepted and ignored: one server runs every variant; give ${key} at the top level`);
    }
  }
  return model;
}
