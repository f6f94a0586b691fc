/**
 * Ranking as Model Analyzer does it (perf-and-analyzer.md §2.5, §2.7): two measurements compare
 * by the weighted sum of their relative differences over the objectives; a config is represented
 * by its best measurement among those that satisfy the constraints (all of them when none do);
 * configs with a passing measurement rank above those without, which are ordered by how far they
 * miss. Beyond Model Analyzer: the true Pareto frontier of p99 latency against throughput over
 * every measurement, and a throughput-optimized and a latency-optimized recommendation.
 */
import { HIGHER_IS_BETTER, type Constraints, type Measurement, type MetricTag, type ModelResult, type Objectives, type RankedVariant } from './types.js';

export function metric(m: Measurement, tag: MetricTag): number | undefined {
  const v = m[tag];
  return typeof v === 'number' && Number.isFinite(v) ? v : undefined;
}

/** Whether `m` satisfies every constraint (a constraint on a metric not measured is not met). */
export function satisfies(m: Measurement, constraints: Constraints): boolean {
  return miss(m, constraints) === 0;
}

/** How far `m` misses the constraints: the sum of the relative misses (0 when it meets them all). */
export function miss(m: Measurement, constraints: Constraints): number {
  let total = 0;
  for (const [tag, bound] of Object.entries(constraints) as [MetricTag, { min?: number; max?: number }][]) {
    const v = metric(m, tag);
    if (v === undefined) {
      total += 1;
      continue;
    }
    if (bound.max !== undefined && v > bound.max) total += (v - bound.max) / Math.max(Math.abs(bound.max), 1e-9);
    if (bound.min !== undefined && v < bound.min) total += (bound.min - v) / Math.max(Math.abs(bound.min), 1e-9);
  }
  return total;
}

/**
 * Σ wᵢ·(aᵢ − bᵢ)/mean(aᵢ, bᵢ), the sign flipped for lower-is-better metrics: > 0 when `a` is
 * better. Objectives that either measurement lacks are left out.
 */
export function compare(a: Measurement, b: Measurement, objectives: Objectives): number {
  let score = 0;
  for (const [tag, weight] of Object.entries(objectives) as [MetricTag, number][]) {
    const x = metric(a, tag);
    const y = metric(b, tag);
    if (x === undefined || y === undefined) continue;
    const mid = (x + y) / 2;
    if (mid === 0) continue;
    const rel = (x - y) / mid;
    score += weight * (HIGHER_IS_BETTER[tag] ? rel : -rel);
  }
  return score;
}

/** A full, stable measurement (not a screening one). */
const solid = (m: Measurement): boolean => m.stable && m.screening !== true;

/** The best of `ms` by the objectives (full, stable measurements before the others). */
function bestBy(ms: readonly Measurement[], objectives: Objectives): Measurement {
  return ms.reduce((best, m) => {
    if (solid(m) !== solid(best)) return solid(m) ? m : best;
    return compare(m, best, objectives) > 0 ? m : best;
  });
}

/**
 * A variant's representative measurement: the best passing one, else the best of all; among its
 * full measurements when it has any (a screening measurement speaks for a variant only when
 * nothing else does).
 */
export function representative(all: readonly Measurement[], objectives: Objectives, constraints: Constraints): { best: Measurement; passes: boolean } {
  const full = all.filter((m) => m.screening !== true);
  const ms = full.length > 0 ? full : all;
  const passing = ms.filter((m) => satisfies(m, constraints));
  if (passing.length > 0) return { best: bestBy(passing, objectives), passes: true };
  const closest = Math.min(...ms.map((m) => miss(m, constraints)));
  return { best: bestBy(ms.filter((m) => miss(m, constraints) === closest), objectives), passes: false };
}

/** Every variant with a measurement, best first. */
export function rankVariants(measurements: readonly Measurement[], objectives: Objectives, constraints: Constraints): RankedVariant[] {
  const byVariant = new Map<string, Measurement[]>();
  for (const m of measurements) {
    const list = byVariant.get(m.variant) ?? [];
    list.push(m);
    byVariant.set(m.variant, list);
  }
  const ranked: RankedVariant[] = [...byVariant].map(([variant, ms]) => {
    const { best, passes } = representative(ms, objectives, constraints);
    return { variant, best, passes, miss: passes ? 0 : miss(best, constraints) };
  });
  return ranked.sort((a, b) => {
    if (a.passes !== b.passes) return a.passes ? -1 : 1;
    if (!a.passes && a.miss !== b.miss) return a.miss - b.miss;
    const c = compare(b.best, a.best, objectives);
    return c !== 0 ? c : a.variant.localeCompare(b.variant);
  });
}

/**
 * The measurements no other measurement beats on both p99 latency (lower) and throughput
 * (higher), ordered by latency: the frontier of what this model can do on this server. Screening
 * measurements (one short window) are left out while full ones exist.
 */
export function paretoFrontier(all: readonly Measurement[]): Measurement[] {
  const full = all.filter((m) => m.screening !== true);
  const measurements = full.length > 0 ? full : all;
  const sorted = [...measurements].sort((a, b) => a.perf_latency_p99 - b.perf_latency_p99 || b.perf_throughput - a.perf_throughput);
  const frontier: Measurement[] = [];
  let best = -Infinity;
  for (const m of sorted) {
    if (m.perf_throughput > best) {
      frontier.push(m);
      best = m.perf_throughput;
    }
  }
  return frontier;
}

/** The highest-throughput and the lowest-latency measurements within the constraints. */
export function recommend(measurements: readonly Measurement[], constraints: Constraints): { throughputOptimized?: Measurement; latencyOptimized?: Measurement; met: boolean } {
  const stable = measurements.filter((m) => solid(m) && m.errors === 0);
  const pool = stable.length > 0 ? stable : [...measurements];
  if (pool.length === 0) return { met: false };
  const passing = pool.filter((m) => satisfies(m, constraints));
  const from = passing.length > 0 ? passing : pool;
  const throughputOptimized = from.reduce((a, m) => (m.perf_throughput > a.perf_throughput ? m : a));
  // The latency pick keeps most of the throughput that latency allows: among the fastest 1 % it
  // takes the one with the highest throughput, so noise between near-equal points does not decide.
  const fastest = Math.min(...from.map((m) => m.perf_latency_p99));
  const near = from.filter((m) => m.perf_latency_p99 <= fastest * 1.01);
  const latencyOptimized = near.reduce((a, m) => (m.perf_throughput > a.perf_throughput ? m : a));
  return { throughputOptimized, latencyOptimized, met: passing.length > 0 };
}

const NAMES: Record<MetricTag, [string, string]> = {
  perf_throughput: ['throughput', 'infer/sec'],
  perf_latency_avg: ['average latency', 'ms'],
  perf_latency_p90: ['p90 latency', 'ms'],
  perf_latency_p95: ['p95 latency', 'ms'],
  perf_latency_p99: ['p99 latency', 'ms'],
  gpu_used_memory: ['GPU memory used', 'MB'],
  gpu_free_memory: ['GPU memory free', 'MB'],
  gpu_utilization: ['GPU utilization', '%'],
  cpu_used_ram: ['CPU memory used', 'MB'],
  cpu_free_ram: ['CPU memory free', 'MB'],
};

/** `p99 latency ≤ 10 ms, throughput ≥ 100 infer/sec`. */
export function constraintText(constraints: Constraints): string {
  const parts: string[] = [];
  for (const [tag, bound] of Object.entries(constraints) as [MetricTag, { min?: number; max?: number }][]) {
    const [name, unit] = NAMES[tag];
    if (bound.max !== undefined) parts.push(`${name} ≤ ${bound.max} ${unit}`);
    if (bound.min !== undefined) parts.push(`${name} ≥ ${bound.min} ${unit}`);
  }
  return parts.join(', ');
}

function objectiveText(objectives: Objectives): string {
  const tags = Object.keys(objectives) as MetricTag[];
  if (tags.length === 1 && tags[0] === 'perf_throughput') return 'maximizing throughput';
  if (tags.length === 1 && tags[0].startsWith('perf_latency')) return 'minimizing latency';
  return 'meeting the objectives';
}

/** The weighted percentage gain of `a` over `b`: (new − old)/old for higher-is-better, (old − new)/new otherwise. */
export function gainPercent(a: Measurement, b: Measurement, objectives: Objectives): number {
  let gain = 0;
  for (const [tag, weight] of Object.entries(objectives) as [MetricTag, number][]) {
    const x = metric(a, tag);
    const y = metric(b, tag);
    if (x === undefined || y === undefined || x === 0 || y === 0) continue;
    gain += weight * (HIGHER_IS_BETTER[tag] ? (x - y) / y : (y - x) / x);
  }
  return gain * 100;
}

export function loadText(m: Measurement): string {
  return m.concurrency !== undefined ? `concurrency ${m.concurrency}` : `request rate ${m.requestRate}`;
}

const fmt = (v: number) => (v >= 100 ? v.toFixed(0) : v >= 1 ? v.toFixed(2) : v.toPrecision(2));

/** The ranked result of one model. */
export function modelResult(model: string, measurements: readonly Measurement[], objectives: Objectives, constraints: Constraints, defaultVariant: string): ModelResult {
  const mine = measurements.filter((m) => m.model === model);
  const ranking = rankVariants(mine, objectives, constraints);
  const frontier = paretoFrontier(mine.filter((m) => m.errors === 0));
  const { throughputOptimized, latencyOptimized, met } = recommend(mine, constraints);
  const configs = new Set(mine.map((m) => m.variant)).size;
  const goal = objectiveText(objectives);
  const under = Object.keys(constraints).length > 0 ? ', under the given constraints' : '';
  let sentence: string;
  if (ranking.length === 0) {
    sentence = `No configuration of '${model}' was measured.`;
  } else {
    const best = ranking[0];
    const def = ranking.find((r) => r.variant === defaultVariant);
    if (def === undefined || best.variant === defaultVariant) {
      sentence = `In ${mine.length} measurements across ${configs} configurations, ${best.variant} ${def ? 'is the best: the other configurations provide no gain over the default configuration' : 'is the best'} at ${goal}${under}.`;
    } else {
      const gain = gainPercent(best.best, def.best, objectives);
      sentence =
        gain > 0
          ? `In ${mine.length} measurements across ${configs} configurations, ${best.variant} is ${fmt(gain)}% better than the default configuration at ${goal}${under}.`
          : `In ${mine.length} measurements across ${configs} configurations, ${best.variant} ranks first${def.passes ? '' : ' (the default configuration does not meet the constraints)'}, and provides no gain over the default configuration at ${goal}${under}.`;
    }
  }
  let unmet: string | undefined;
  if (!met && mine.length > 0 && Object.keys(constraints).length > 0) {
    const closest = ranking[0]?.best;
    unmet =
      `No measurement of '${model}' meets the constraints (${constraintText(constraints)}).` +
      (closest
        ? ` The closest is ${closest.variant} at ${loadText(closest)}: p99 latency ${fmt(closest.perf_latency_p99)} ms, throughput ${fmt(closest.perf_throughput)} infer/sec.`
        : '') +
      ' The frontier, ranking and recommendations below are best effort; relax the constraints, or widen the search space.';
  }
  return { model, objectives, constraints, ranking, frontier, throughputOptimized, latencyOptimized, unmet, sentence };
}
