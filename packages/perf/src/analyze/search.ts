/**
 * The two searches of `nereid analyze` over one model's space (perf-and-analyzer.md §2.3, §2.4).
 *
 * Brute: the default config, then every instance count × max batch size (powers of two) with
 * dynamic batching on, or the cartesian product of `model_config_parameters` (manual). Each
 * variant's load walks up in powers of two and stops when throughput stops growing (the best of
 * the last four steps at most 5 % above the first of them) or a latency constraint is crossed,
 * then bisects between the last passing and first failing level. The max-batch-size walk stops by
 * the same throughput rule.
 *
 * Quick: hill climbing from the default configuration over instance count, max batch size,
 * dynamic batching on/off, max queue delay, preferred batch sizes and ONNX Runtime's thread
 * counts. Each point is screened once (a short window after a warm-up one), at concurrency 2 × max batch size ×
 * instances; the search moves to the first neighbour that beats the current point by more than
 * 2 %, and stops when none does. The best points and the default are then measured in full at that
 * level, and the best of them is swept over the load range like brute's.
 */
import { applyFields, applyKnobs, isOnnxRuntime, knobsOf, type Knobs, type VariantBook } from './space.js';
import { compare, satisfies } from './rank.js';
import type { Measurement, ProfileModel, SearchLimits, Variant } from './types.js';

/** One load level of one variant. */
export interface Level {
  batchSize: number;
  concurrency?: number;
  requestRate?: number;
  /**
   * A screening measurement (quick search's climb): two windows of half the measurement interval,
   * the second one kept, no stability gate; enough to rank neighbouring configs, never a result on
   * its own (marked `screening`; ranking, frontier and recommendations use full measurements).
   */
  screen?: boolean;
}

/** What the searches need from the engine. */
export interface Prober {
  /** Measures (or returns the checkpointed measurement of) `variant` at `level`; undefined when it failed (recorded as skipped). */
  measure(variant: Variant, level: Level): Promise<Measurement | undefined>;
  /** True once the time budget is spent or the run was interrupted: the searches return at once. */
  readonly stopped: boolean;
  /** `variant` cannot be profiled (an illegal combination): recorded with the reason, not measured. */
  skip(variant: Variant, reason: string): void;
  /** The search expects `n` more configurations (negative: fewer; a hint for the progress display). */
  plan(model: string, configurations: number): void;
  /** A configuration is finished. */
  done(variant: Variant): void;
}

export interface SearchContext {
  model: ProfileModel;
  limits: SearchLimits;
  book: VariantBook;
  prober: Prober;
  /** Configs the quick search re-sweeps over the concurrency range. */
  topN: number;
}

/** Powers of two from `min` to `max` (min itself first when it is not one). */
export function powersOfTwo(min: number, max: number): number[] {
  const out: number[] = [];
  if (min > max) return out;
  out.push(min);
  let p = 1;
  while (p <= min) p *= 2;
  for (; p <= max; p *= 2) out.push(p);
  return out;
}

/** Model Analyzer's early exit: the best of the last four values is at most 5 % above the first of them. */
export function stoppedGrowing(values: readonly number[]): boolean {
  if (values.length < 4) return false;
  const last = values.slice(-4);
  return Math.max(...last) <= last[0] * 1.05;
}

const latencyMax = (m: ProfileModel): number | undefined => m.constraints.perf_latency_p99?.max;

/**
 * Measures `variant` over the load range: the user's fixed list, or the power-of-two walk with
 * its early exit and the bisection under a latency constraint. Returns every measurement taken.
 */
export async function sweepLoad(ctx: SearchContext, variant: Variant, maxBatchSize: number): Promise<Measurement[]> {
  const { model, limits, prober } = ctx;
  const out: Measurement[] = [];
  const batches = model.batchSizes.filter((b) => (maxBatchSize > 0 ? b <= maxBatchSize : b === 1));
  const rate = model.requestRate !== undefined || (limits.requestRateSearchEnable && model.concurrency === undefined);
  for (const batchSize of batches) {
    const level = (v: number): Level => (rate ? { batchSize, requestRate: v } : { batchSize, concurrency: v });
    const fixed = rate ? model.requestRate : model.concurrency;
    if (fixed !== undefined) {
      for (const v of fixed) {
        if (prober.stopped) return out;
        const m = await prober.measure(variant, level(v));
        if (m) out.push(m);
      }
      continue;
    }
    const values = rate ? powersOfTwo(limits.minRequestRate, limits.maxRequestRate) : powersOfTwo(limits.minConcurrency, limits.maxConcurrency);
    const throughputs: number[] = [];
    let lastPass: number | undefined;
    let firstFail: number | undefined;
    const budget = latencyMax(model);
    for (const v of values) {
      if (prober.stopped) return out;
      const m = await prober.measure(variant, level(v));
      if (!m) break;
      out.push(m);
      throughputs.push(m.perf_throughput);
      if (budget !== undefined && m.perf_latency_p99 > budget) {
        firstFail = v;
        break;
      }
      lastPass = v;
      if (m.errors > 0 || stoppedGrowing(throughputs)) break;
    }
    // Bisection between the last level within the latency budget and the first beyond it.
    if (budget !== undefined && firstFail !== undefined && lastPass !== undefined) {
      let lo = lastPass;
      let hi = firstFail;
      for (let step = 0; step < limits.maxBinarySearchSteps && hi - lo > (rate ? 1 : 1); step++) {
        if (prober.stopped) return out;
        const mid = Math.floor((lo + hi) / 2);
        if (mid === lo) break;
        const m = await prober.measure(variant, level(mid));
        if (!m) break;
        out.push(m);
        if (m.perf_latency_p99 > budget) hi = mid;
        else lo = mid;
      }
    }
  }
  return out;
}

/** The cartesian product of the manual space's fields. */
export function manualCandidates(space: Record<string, unknown[]>): Record<string, unknown>[] {
  let combos: Record<string, unknown>[] = [{}];
  for (const [field, values] of Object.entries(space)) {
    const next: Record<string, unknown>[] = [];
    for (const c of combos) for (const v of values) next.push({ ...c, [field]: v });
    combos = next;
  }
  return combos;
}

const bestThroughput = (ms: readonly Measurement[]): number => Math.max(0, ...ms.map((m) => m.perf_throughput));

/** Brute force over the model's space; returns when done or stopped. */
export async function bruteSearch(ctx: SearchContext): Promise<void> {
  const { model, limits, book, prober } = ctx;
  const base = book.base;
  const defaults = knobsOf(base);
  const batching = defaults.maxBatchSize > 0;
  const instanceCounts = Array.from({ length: limits.maxInstanceCount - limits.minInstanceCount + 1 }, (_, i) => limits.minInstanceCount + i);
  const batchSizes = batching ? powersOfTwo(limits.minModelBatchSize, limits.maxModelBatchSize) : [0];
  const manual = model.modelConfigParameters !== undefined ? manualCandidates(model.modelConfigParameters) : undefined;
  const automatic = manual === undefined && !limits.disable;
  prober.plan(model.name, 1 + (manual?.length ?? (automatic ? instanceCounts.length * batchSizes.length : 0)));

  const def = book.defaultVariant;
  await sweepLoad(ctx, def, defaults.maxBatchSize);
  prober.done(def);
  if (manual !== undefined) {
    for (const fields of manual) {
      if (prober.stopped) return;
      const variant = book.variantFor((name) => applyFields(base, fields, name));
      const mbs = knobsOf(variant.config).maxBatchSize;
      // A preferred batch size above the max batch size would not load: skipped with its reason.
      const preferred = knobsOf(variant.config).preferredBatchSizes.filter((p) => p > mbs && mbs > 0);
      if (preferred.length > 0) {
        prober.skip(variant, `preferred_batch_size ${preferred.join(', ')} is above max_batch_size ${mbs}: the config would not load`);
        prober.done(variant);
        continue;
      }
      await sweepLoad(ctx, variant, mbs);
      prober.done(variant);
    }
    return;
  }
  if (!automatic) return;
  for (const instances of instanceCounts) {
    const perBatch: number[] = [];
    for (let i = 0; i < batchSizes.length; i++) {
      if (prober.stopped) return;
      const mbs = batchSizes[i];
      const knobs: Knobs = { ...defaults, instances, maxBatchSize: mbs, dynamicBatching: batching, maxQueueDelayUs: 0, preferredBatchSizes: [] };
      const variant = book.variantFor((name) => applyKnobs(base, knobs, name, model.cpuOnly));
      const ms = await sweepLoad(ctx, variant, mbs);
      prober.done(variant);
      perBatch.push(bestThroughput(ms));
      if (stoppedGrowing(perBatch)) {
        prober.plan(model.name, -(batchSizes.length - i - 1));
        break;
      }
    }
  }
}

/** The axes of the quick search: each a list of values, the default's value among them. */
interface Axis {
  key: keyof Knobs | 'preferred';
  values: number[];
}

function withValue(values: number[], v: number): number[] {
  return [...new Set([...values, v])].sort((a, b) => a - b);
}

function parameterValue(config: Record<string, unknown>, key: string): string | undefined {
  const p = (config.parameters as Record<string, { string_value?: unknown }> | undefined)?.[key];
  return typeof p?.string_value === 'string' ? p.string_value : undefined;
}

/** The preferred-batch-size choices: none, the max batch size, half of it and it. */
function preferredFor(choice: number, mbs: number): number[] {
  if (choice === 0 || mbs <= 1) return [];
  return choice === 1 ? [mbs] : [Math.max(1, mbs / 2), mbs];
}

export function quickAxes(base: Record<string, unknown>, limits: SearchLimits): { axes: Axis[]; start: number[] } {
  const d = knobsOf(base);
  const axes: Axis[] = [];
  const instances = Array.from({ length: limits.maxInstanceCount - limits.minInstanceCount + 1 }, (_, i) => limits.minInstanceCount + i);
  axes.push({ key: 'instances', values: withValue(instances, d.instances) });
  if (d.maxBatchSize > 0) {
    axes.push({ key: 'maxBatchSize', values: withValue(powersOfTwo(limits.minModelBatchSize, limits.maxModelBatchSize), d.maxBatchSize) });
    axes.push({ key: 'dynamicBatching', values: [0, 1] });
    axes.push({ key: 'maxQueueDelayUs', values: withValue([0, 100, 500, 2000], d.maxQueueDelayUs) });
    const pref = d.preferredBatchSizes.length === 0 ? 0 : d.preferredBatchSizes.length === 1 ? 1 : 2;
    axes.push({ key: 'preferred', values: withValue([0, 1, 2], pref) });
  }
  if (isOnnxRuntime(base)) {
    axes.push({ key: 'intraOpThreads', values: withValue([0, 1, 2, 4], d.intraOpThreads) });
    // ONNX Runtime uses inter-op threads only in its parallel execution mode.
    if (parameterValue(base, 'execution_mode') === '1') axes.push({ key: 'interOpThreads', values: withValue([0, 1, 2], d.interOpThreads) });
  }
  const startValue = (a: Axis): number => {
    if (a.key === 'preferred') return d.preferredBatchSizes.length === 0 ? 0 : d.preferredBatchSizes.length === 1 ? 1 : 2;
    const v = d[a.key];
    return typeof v === 'boolean' ? Number(v) : (v as number);
  };
  return { axes, start: axes.map((a) => a.values.indexOf(startValue(a))) };
}

function knobsAt(base: Record<string, unknown>, axes: Axis[], point: number[]): Knobs {
  const k: Knobs = { ...knobsOf(base) };
  let preferred = -1;
  axes.forEach((a, i) => {
    const v = a.values[point[i]];
    if (a.key === 'preferred') preferred = v;
    else if (a.key === 'dynamicBatching') k.dynamicBatching = v === 1;
    else if (a.key !== 'preferredBatchSizes') (k[a.key] as number) = v;
  });
  if (preferred >= 0) k.preferredBatchSizes = preferredFor(preferred, k.maxBatchSize);
  return k;
}

/** The concurrency quick mode measures a point at: 2 × max batch size × instances, within the limits. */
export function quickConcurrency(k: Knobs, limits: SearchLimits): number {
  const c = 2 * Math.max(1, k.maxBatchSize) * k.instances;
  return Math.min(limits.maxConcurrency, Math.max(limits.minConcurrency, c));
}

/** a better than b: passing beats failing, then the objectives (by more than `margin`). */
function better(a: Measurement, b: Measurement, ctx: SearchContext, margin: number): boolean {
  const pa = satisfies(a, ctx.model.constraints);
  const pb = satisfies(b, ctx.model.constraints);
  if (pa !== pb) return pa;
  return compare(a, b, ctx.model.objectives) > margin;
}

/**
 * Hill climbing from the default configuration on screening measurements (one short window each),
 * then full measurements of the best points and the default at their climbing level, then the load
 * sweep of the best of those.
 */
export async function quickSearch(ctx: SearchContext): Promise<void> {
  const { model, limits, book, prober } = ctx;
  const base = book.base;
  const { axes, start } = quickAxes(base, limits);
  type Entry = { variant: Variant; level: Level; m?: Measurement };
  const seen = new Map<string, Entry>();
  const levelOf = (knobs: Knobs): Level => {
    const batchSize = model.batchSizes.find((b) => b <= Math.max(1, knobs.maxBatchSize)) ?? 1;
    return model.requestRate !== undefined ? { batchSize, requestRate: model.requestRate[0] } : { batchSize, concurrency: quickConcurrency(knobs, limits) };
  };
  const probe = async (point: number[]): Promise<Entry> => {
    const key = point.join(',');
    const known = seen.get(key);
    if (known) return known;
    const knobs = knobsAt(base, axes, point);
    const isStart = key === start.join(',');
    const variant = isStart ? book.defaultVariant : book.variantFor((name) => applyKnobs(base, knobs, name, model.cpuOnly));
    const level = levelOf(knobs);
    // Points that make the same config (queue delay with batching off, say) share one measurement.
    const twin = [...seen.values()].find((e) => e.variant === variant);
    if (twin) {
      seen.set(key, twin);
      return twin;
    }
    prober.plan(model.name, 1);
    const entry: Entry = { variant, level, m: await prober.measure(variant, { ...level, screen: true }) };
    prober.done(variant);
    seen.set(key, entry);
    return entry;
  };
  let current = start;
  let here = await probe(current);
  for (let round = 0; round < 50 && !prober.stopped; round++) {
    // First improvement: the climb moves as soon as a neighbour beats the current point.
    let moved = false;
    for (let i = 0; i < axes.length && !moved; i++) {
      for (const step of [1, -1]) {
        const j = current[i] + step;
        if (j < 0 || j >= axes[i].values.length || prober.stopped) continue;
        const point = current.slice();
        point[i] = j;
        const there = await probe(point);
        if (there.m && (!here.m || better(there.m, here.m, ctx, 0.02))) {
          current = point;
          here = there;
          moved = true;
          break;
        }
      }
    }
    if (!moved) break;
  }
  // Full measurements, at their climbing level, of the best points and the default.
  const unique = new Map<string, Entry & { m: Measurement }>();
  for (const e of seen.values()) {
    if (e.m === undefined) continue;
    const known = unique.get(e.variant.name);
    if (!known || better(e.m, known.m, ctx, 0)) unique.set(e.variant.name, e as Entry & { m: Measurement });
  }
  const ranked = [...unique.values()].sort((a, b) => (better(a.m, b.m, ctx, 0) ? -1 : better(b.m, a.m, ctx, 0) ? 1 : 0));
  const finalists = ranked.slice(0, Math.max(1, Math.min(ctx.topN, 2)));
  const def = seen.get(start.join(','));
  if (def && !finalists.includes(def as Entry & { m: Measurement })) finalists.push(def as Entry & { m: Measurement });
  prober.plan(model.name, finalists.length);
  const confirmed: { variant: Variant; m: Measurement }[] = [];
  for (const f of finalists) {
    if (prober.stopped) return;
    const m = await prober.measure(f.variant, f.level);
    prober.done(f.variant);
    if (m) confirmed.push({ variant: f.variant, m });
  }
  if (limits.concurrencySweepDisable || confirmed.length === 0) return;
  const best = confirmed.reduce((a, c) => (better(c.m, a.m, ctx, 0) ? c : a));
  prober.plan(model.name, 1);
  await sweepLoad(ctx, best.variant, knobsOf(best.variant.config).maxBatchSize);
  prober.done(best.variant);
}
