/**
 * The HTML report of `nereid analyze`: one self-contained document (inline CSS and SVG, no script,
 * no external reference) per run, with a section per model: the header and summary sentence, the
 * Pareto frontier of p99 latency against throughput, each configuration's curve, the ranking table
 * (Model Analyzer's summary columns), the two recommended configurations with their config.pbtxt
 * diffed against the default's, a detailed section per top configuration (Model Analyzer's detailed
 * report: its measurements and the latency breakdown per load level), the interference of models
 * profiled together, and the variants that were skipped.
 *
 * The charts are Vega-Lite specifications compiled by vega-lite and rendered to static SVG by
 * vega's headless view; every piece of text placed in the HTML is escaped.
 */
import * as vega from 'vega';
import { compile, type TopLevelSpec } from 'vega-lite';
import type { AnalysisResult, Constraints, Measurement, MetricTag, ModelResult, Objectives, Variant } from './types.js';
import { HIGHER_IS_BETTER } from './types.js';

export interface ReportOptions {
  /** A model's name → its default variant's config.pbtxt text. */
  defaultConfigText?: Record<string, string>;
  /** A variant's name → its config.pbtxt text. */
  variantConfigText?: Record<string, string>;
  /** `skip_detailed_reports`: leave out the detailed section of each top configuration. */
  skipDetailed?: boolean;
}

/** The color of the Pareto frontier; no other mark of the report uses it. */
export const FRONTIER_COLOR = '#d62728';
/** The variants' colors, in ranking order (Tableau 10 without its red, which the frontier has). */
export const VARIANT_COLORS = ['#1f77b4', '#ff7f0e', '#2ca02c', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
/** The latency components of the breakdown chart, and their colors. */
const BREAKDOWN: { key: keyof Measurement; label: string; color: string }[] = [
  { key: 'perf_server_queue', label: 'Server Queue', color: '#4c78a8' },
  { key: 'perf_server_compute_input', label: 'Compute Input', color: '#f58518' },
  { key: 'perf_server_compute_infer', label: 'Compute Infer', color: '#54a24b' },
  { key: 'perf_server_compute_output', label: 'Compute Output', color: '#b279a2' },
];
const WIDTH = 640;
const HEIGHT = 360;

/** The document's text, escaped for HTML content and attribute values. */
export function escapeHtml(text: unknown): string {
  return String(text)
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

/** What each metric is called in the report, and its unit. */
const METRIC_WORDS: Record<MetricTag, { label: string; unit: string }> = {
  perf_throughput: { label: 'throughput', unit: 'infer/sec' },
  perf_latency_avg: { label: 'average latency', unit: 'ms' },
  perf_latency_p90: { label: 'p90 latency', unit: 'ms' },
  perf_latency_p95: { label: 'p95 latency', unit: 'ms' },
  perf_latency_p99: { label: 'p99 latency', unit: 'ms' },
  gpu_used_memory: { label: 'GPU memory used', unit: 'MB' },
  gpu_free_memory: { label: 'GPU memory free', unit: 'MB' },
  gpu_utilization: { label: 'GPU utilization', unit: '%' },
  cpu_used_ram: { label: 'CPU memory used', unit: 'MB' },
  cpu_free_ram: { label: 'CPU memory free', unit: 'MB' },
};

function num(value: number | undefined, digits: number): string {
  if (value === undefined || !Number.isFinite(value)) return '–';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** A plain number as the user wrote it (no trailing zeros). */
function plain(value: number): string {
  return String(Number(value.toPrecision(12)));
}

function capitalize(text: string): string {
  return text.charAt(0).toUpperCase() + text.slice(1);
}

/** "Max p99 latency: 10 ms", one line per bound. */
export function constraintWords(constraints: Constraints): string[] {
  const lines: string[] = [];
  for (const [tag, bound] of Object.entries(constraints) as [MetricTag, { min?: number; max?: number }][]) {
    const words = METRIC_WORDS[tag] ?? { label: tag, unit: '' };
    const unit = words.unit === '' ? '' : words.unit === '%' ? '%' : ` ${words.unit}`;
    if (bound?.min !== undefined) lines.push(`Min ${words.label}: ${plain(bound.min)}${unit}`);
    if (bound?.max !== undefined) lines.push(`Max ${words.label}: ${plain(bound.max)}${unit}`);
  }
  return lines;
}

/** "Maximize throughput", or with weights when there are several: "Maximize throughput (70 %)". */
export function objectiveWords(objectives: Objectives): string[] {
  const entries = (Object.entries(objectives) as [MetricTag, number][]).filter(([, w]) => w > 0);
  return entries.map(([tag, weight]) => {
    const verb = HIGHER_IS_BETTER[tag] ? 'Maximize' : 'Minimize';
    const label = METRIC_WORDS[tag]?.label ?? tag;
    return entries.length > 1 ? `${verb} ${label} (${Math.round(weight * 100)} %)` : `${verb} ${label}`;
  });
}

function duration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return '–';
  if (seconds < 60) return `${num(seconds, 1)} s`;
  const h = Math.floor(seconds / 3600);
  const m = Math.floor((seconds % 3600) / 60);
  const s = Math.round(seconds % 60);
  return h > 0 ? `${h} h ${m} min ${s} s` : `${m} min ${s} s`;
}

/** The load level of a measurement: its concurrency or its request rate. */
function load(m: Measurement): number {
  return m.concurrency ?? m.requestRate ?? 0;
}

/** "Concurrency" or "Request Rate", by what the model's measurements swept. */
function loadLabel(measurements: Measurement[]): string {
  return measurements.some((m) => m.requestRate !== undefined && m.concurrency === undefined) ? 'Request Rate' : 'Concurrency';
}

function loadText(m: Measurement): string {
  if (m.concurrency !== undefined) return `concurrency ${plain(m.concurrency)}`;
  if (m.requestRate !== undefined) return `request rate ${plain(m.requestRate)}/s`;
  return '–';
}

/** A line diff of `before` against `after` (longest common subsequence of lines). */
export function lineDiff(before: string, after: string): { op: ' ' | '+' | '-'; line: string }[] {
  const a = before.replace(/\r\n/g, '\n').replace(/\n$/, '').split('\n');
  const b = after.replace(/\r\n/g, '\n').replace(/\n$/, '').split('\n');
  if (before === '') a.length = 0;
  if (after === '') b.length = 0;
  // Common head and tail first: a variant's config differs from the default in a few lines.
  let head = 0;
  while (head < a.length && head < b.length && a[head] === b[head]) head++;
  let tail = 0;
  while (tail < a.length - head && tail < b.length - head && a[a.length - 1 - tail] === b[b.length - 1 - tail]) tail++;
  const x = a.slice(head, a.length - tail);
  const y = b.slice(head, b.length - tail);
  const out: { op: ' ' | '+' | '-'; line: string }[] = a.slice(0, head).map((line) => ({ op: ' ' as const, line }));
  if (x.length * y.length > 4_000_000) {
    // Too large for the table: everything removed, then everything added.
    for (const line of x) out.push({ op: '-', line });
    for (const line of y) out.push({ op: '+', line });
  } else {
    // lcs[i][j]: the common subsequence length of x[i..] and y[j..].
    const lcs = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
    for (let i = x.length - 1; i >= 0; i--) {
      for (let j = y.length - 1; j >= 0; j--) {
        lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    let i = 0;
    let j = 0;
    while (i < x.length || j < y.length) {
      if (i < x.length && j < y.length && x[i] === y[j]) {
        out.push({ op: ' ', line: x[i] });
        i++;
        j++;
      } else if (i < x.length && (j === y.length || lcs[i + 1][j] >= lcs[i][j + 1])) {
        out.push({ op: '-', line: x[i++] });
      } else {
        out.push({ op: '+', line: y[j++] });
      }
    }
  }
  for (const line of a.slice(a.length - tail)) out.push({ op: ' ', line });
  return out;
}

/** Compiles a Vega-Lite specification and renders it to static SVG. */
async function chart(spec: TopLevelSpec, label: string): Promise<string> {
  const compiled = compile({
    ...spec,
    background: 'white',
    config: {
      font: 'sans-serif',
      axis: { labelFontSize: 11, titleFontSize: 12 },
      legend: { labelFontSize: 11, titleFontSize: 12, labelLimit: 260 },
      ...(spec as { config?: object }).config,
    },
  } as TopLevelSpec).spec;
  const view = new vega.View(vega.parse(compiled), { renderer: 'none' });
  try {
    let svg = await view.toSVG();
    // Inline SVG needs no xlink namespace unless it uses it.
    if (!/\sxlink:/.test(svg.replace(/\sxmlns:xlink="[^"]*"/, ''))) svg = svg.replace(/\sxmlns:xlink="[^"]*"/, '');
    return svg.replace(/^<svg /, `<svg role="img" aria-label="${escapeHtml(label)}" `);
  } finally {
    view.finalize();
  }
}

/** The variants of a model in ranking order, then any measured but unranked ones. */
function variantOrder(model: ModelResult, measurements: Measurement[]): string[] {
  const order = model.ranking.map((r) => r.variant);
  for (const m of measurements) if (!order.includes(m.variant)) order.push(m.variant);
  return order;
}

function colorScale(domain: string[]): { domain: string[]; range: string[] } {
  return { domain, range: domain.map((_, i) => VARIANT_COLORS[i % VARIANT_COLORS.length]) };
}

/** The dashed "Target" rules of a p99 latency maximum and a throughput minimum, as layers. */
function targetLayers(constraints: Constraints): object[] {
  const layers: object[] = [];
  const p99 = constraints.perf_latency_p99?.max;
  const tput = constraints.perf_throughput?.min;
  const rule = { type: 'rule', color: '#555', strokeDash: [6, 4], strokeWidth: 1.5 };
  const text = { type: 'text', color: '#333', fontSize: 11, fontWeight: 'bold' };
  if (p99 !== undefined) {
    const values = [{ x: p99, label: `Target: p99 ≤ ${plain(p99)} ms` }];
    layers.push({ data: { values }, mark: rule, encoding: { x: { field: 'x', type: 'quantitative', scale: { type: 'log' } } } });
    layers.push({
      data: { values },
      mark: { ...text, align: 'left', baseline: 'top', dx: 4, y: 4 },
      encoding: { x: { field: 'x', type: 'quantitative', scale: { type: 'log' } }, text: { field: 'label' } },
    });
  }
  if (tput !== undefined) {
    const values = [{ y: tput, label: `Target: throughput ≥ ${plain(tput)} infer/sec` }];
    layers.push({ data: { values }, mark: rule, encoding: { y: { field: 'y', type: 'quantitative' } } });
    layers.push({
      data: { values },
      mark: { ...text, align: 'right', baseline: 'bottom', dy: -3, x: 'width' },
      encoding: { y: { field: 'y', type: 'quantitative' }, text: { field: 'label' } },
    });
  }
  return layers;
}

/** p99 latency on a log scale: a search's slowest points are often 100× its fastest. */
const X_P99 = { field: 'p99', type: 'quantitative', title: 'p99 latency (ms, log scale)', scale: { type: 'log' } };
const Y_TPUT = { field: 'throughput', type: 'quantitative', title: 'Throughput (infer/sec)' };

function point(m: Measurement): Record<string, unknown> {
  return { variant: m.variant, p99: m.perf_latency_p99, throughput: m.perf_throughput, load: load(m) };
}

/** Every measurement as a point, the frontier as a step line, the recommendations marked. */
async function frontierChart(model: ModelResult, measurements: Measurement[], order: string[]): Promise<string> {
  const colors = colorScale(order);
  const frontierLabel = 'Pareto frontier';
  const color = { domain: [...colors.domain, frontierLabel], range: [...colors.range, FRONTIER_COLOR] };
  const frontier = [...model.frontier].sort((a, b) => a.perf_latency_p99 - b.perf_latency_p99).map(point);
  const picks: { m: Measurement; label: string }[] = [];
  for (const [m, label] of [
    [model.throughputOptimized, 'Throughput-optimized'],
    [model.latencyOptimized, 'Latency-optimized'],
  ] as [Measurement | undefined, string][]) {
    if (m === undefined) continue;
    const same = picks.find((p) => p.m === m || (p.m.variant === m.variant && load(p.m) === load(m) && p.m.perf_latency_p99 === m.perf_latency_p99));
    if (same) same.label = 'Throughput- and latency-optimized';
    else picks.push({ m, label });
  }
  const recommended = picks.map((p) => ({ ...point(p.m), label: `${p.label}: ${p.m.variant}` }));
  const layers: object[] = [
    {
      data: { values: measurements.map(point) },
      mark: { type: 'point', filled: true, opacity: 1, size: 60 },
      encoding: {
        x: X_P99,
        y: Y_TPUT,
        color: { field: 'variant', type: 'nominal', title: 'Model config', scale: color, sort: color.domain },
      },
    },
  ];
  if (frontier.length > 0) {
    layers.push({
      data: { values: frontier },
      mark: { type: 'line', interpolate: 'step-after', strokeWidth: 3, color: FRONTIER_COLOR },
      encoding: { x: X_P99, y: Y_TPUT, color: { datum: frontierLabel, type: 'nominal' } },
    });
  }
  if (recommended.length > 0) {
    layers.push({
      data: { values: recommended },
      mark: { type: 'point', shape: 'diamond', size: 260, filled: false, strokeWidth: 2.5, color: '#000', opacity: 1 },
      encoding: { x: X_P99, y: Y_TPUT },
    });
    layers.push({
      data: { values: recommended },
      mark: { type: 'text', align: 'left', dx: 10, dy: -12, fontSize: 11, fontWeight: 'bold', color: '#000' },
      encoding: { x: X_P99, y: Y_TPUT, text: { field: 'label' } },
    });
  }
  layers.push(...targetLayers(model.constraints));
  return chart(
    {
      title: 'Throughput vs p99 latency: every measurement and the Pareto frontier',
      width: WIDTH,
      height: HEIGHT,
      layer: layers,
    } as TopLevelSpec,
    `Pareto frontier of ${model.model}`,
  );
}

/** One line per variant, in ranking order, its points ordered by load level. */
async function curvesChart(model: ModelResult, measurements: Measurement[], order: string[], label: string): Promise<string> {
  const color = colorScale(order);
  const values = [...measurements].sort((a, b) => load(a) - load(b)).map(point);
  return chart(
    {
      title: `Throughput vs p99 latency per configuration (points by ${label.toLowerCase()})`,
      width: WIDTH,
      height: HEIGHT,
      layer: [
        {
          data: { values },
          mark: { type: 'line', point: { filled: true, size: 50 }, strokeWidth: 2 },
          encoding: {
            x: X_P99,
            y: Y_TPUT,
            color: { field: 'variant', type: 'nominal', title: 'Model config', scale: color, sort: color.domain },
            order: { field: 'load', type: 'quantitative' },
          },
        },
        ...targetLayers(model.constraints),
      ],
    } as TopLevelSpec,
    `Throughput against p99 latency per configuration of ${model.model}`,
  );
}

/** Model Analyzer's detailed chart: the latency components stacked per load level, and throughput. */
async function breakdownChart(variant: string, measurements: Measurement[], label: string): Promise<string> {
  const sorted = [...measurements].sort((a, b) => load(a) - load(b));
  const bars = sorted.flatMap((m) => BREAKDOWN.map((c, i) => ({ load: load(m), component: c.label, index: i, ms: m[c.key] as number })));
  const line = sorted.map((m) => ({ load: load(m), throughput: m.perf_throughput }));
  const xTitle = label === 'Request Rate' ? 'Client Request Rate' : 'Concurrent Client Requests';
  const loads = sorted.map((m) => load(m)).filter((v, i, all) => all.indexOf(v) === i);
  const x = { field: 'load', type: 'ordinal', title: xTitle, sort: loads, axis: { labelAngle: 0 } };
  return chart(
    {
      title: `Latency breakdown: ${variant}`,
      width: WIDTH,
      height: 300,
      layer: [
        {
          data: { values: bars },
          mark: { type: 'bar' },
          encoding: {
            x,
            y: { field: 'ms', type: 'quantitative', stack: 'zero', title: 'Latency (ms)' },
            color: {
              field: 'component',
              type: 'nominal',
              title: 'Latency component',
              scale: { domain: BREAKDOWN.map((c) => c.label), range: BREAKDOWN.map((c) => c.color) },
              sort: BREAKDOWN.map((c) => c.label),
            },
            order: { field: 'index', type: 'quantitative' },
          },
        },
        {
          data: { values: line },
          mark: { type: 'line', color: '#222', strokeWidth: 2, point: { color: '#222', filled: true } },
          encoding: { x, y: { field: 'throughput', type: 'quantitative', title: 'Inferences/second', axis: { orient: 'right' } } },
        },
      ],
      resolve: { scale: { y: 'independent' } },
    } as TopLevelSpec,
    `Latency breakdown of ${variant}`,
  );
}

function table(headers: string[], rows: string[][], rowClasses?: (string | undefined)[]): string {
  const head = `<tr>${headers.map((h) => `<th>${escapeHtml(h)}</th>`).join('')}</tr>`;
  const body = rows
    .map((cells, i) => {
      const cls = rowClasses?.[i];
      return `<tr${cls ? ` class="${cls}"` : ''}>${cells.map((c) => `<td>${c}</td>`).join('')}</tr>`;
    })
    .join('\n');
  return `<table>\n<thead>${head}</thead>\n<tbody>\n${body}\n</tbody>\n</table>`;
}

function definitionList(items: [string, string][]): string {
  return `<dl>${items.map(([k, v]) => `<dt>${escapeHtml(k)}</dt><dd>${v}</dd>`).join('')}</dl>`;
}

function summaryItems(variant: Variant | undefined): [string, string][] {
  if (variant === undefined) return [['Configuration', 'not among the run’s variants']];
  const s = variant.summary;
  const items: [string, string][] = [
    ['Instances', escapeHtml(`${s.instanceCount} × ${s.instanceKind}`)],
    ['Max batch size', escapeHtml(s.maxBatchSize)],
    ['Dynamic batching', s.dynamicBatching ? 'enabled' : 'disabled'],
  ];
  if (s.dynamicBatching) {
    items.push(['Max queue delay', escapeHtml(`${plain(s.maxQueueDelayUs)} µs`)]);
    items.push(['Preferred batch sizes', escapeHtml(s.preferredBatchSizes.length > 0 ? s.preferredBatchSizes.join(', ') : 'none')]);
  }
  if (s.other.length > 0) items.push(['Other changes', s.other.map((o) => `<code>${escapeHtml(o)}</code>`).join(' ')]);
  return items;
}

function measuredItems(m: Measurement): [string, string][] {
  const items: [string, string][] = [
    ['Load', escapeHtml(loadText(m) + (m.batchSize !== 1 ? `, batch size ${m.batchSize}` : ''))],
    ['Throughput', `${num(m.perf_throughput, 1)} infer/sec`],
    ['p99 latency', `${num(m.perf_latency_p99, 2)} ms`],
    ['Average latency', `${num(m.perf_latency_avg, 2)} ms`],
  ];
  if (m.cpu_used_ram !== undefined) items.push(['CPU memory', `${num(m.cpu_used_ram, 0)} MB`]);
  if (m.gpu_used_memory !== undefined) items.push(['GPU memory', `${num(m.gpu_used_memory, 0)} MB`]);
  if (m.screening) items.push(['Measurement', 'screening (one short window)']);
  else if (!m.stable) items.push(['Stability', 'did not stabilize']);
  if (m.errors > 0) items.push(['Errors', escapeHtml(m.errors)]);
  return items;
}

function diffBlock(before: string | undefined, after: string | undefined, variant: string, isDefault: boolean): string {
  if (isDefault) return '<p class="note">This is the default configuration: nothing to compare.</p>';
  if (after === undefined) return `<p class="note">The config.pbtxt of ${escapeHtml(variant)} is not available.</p>`;
  if (before === undefined) {
    return `<p class="note">The default config.pbtxt is not available; the configuration in full:</p>\n<pre class="config">${escapeHtml(after)}</pre>`;
  }
  const lines = lineDiff(before, after);
  const changed = lines.filter((l) => l.op !== ' ').length;
  const body = lines
    .map((l) => {
      const cls = l.op === '+' ? 'add' : l.op === '-' ? 'del' : 'same';
      return `<span class="${cls}">${escapeHtml(`${l.op} ${l.line}`)}</span>`;
    })
    // Block spans, one per line: no newline between them (it would show as an empty line).
    .join('');
  const caption = changed === 0 ? 'Identical to the default config.pbtxt.' : `config.pbtxt against the default (${changed} line${changed === 1 ? '' : 's'} changed):`;
  return `<p class="note">${escapeHtml(caption)}</p>\n<pre class="diff">${body}</pre>`;
}

const CSS = `
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; color: #222; margin: 24px auto; max-width: 1100px; padding: 0 16px; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; border-bottom: 1px solid #ccc; padding-bottom: 3px; margin-top: 28px; }
h3 { font-size: 16px; margin: 18px 0 6px; }
.meta { color: #555; margin: 0 0 10px; }
.meta span + span::before { content: " · "; }
.sentence { font-size: 15px; }
.notice { border: 2px solid #b35900; background: #fff4e5; padding: 8px 12px; margin: 10px 0; border-radius: 4px; }
.notice strong { color: #8a4500; }
figure { margin: 12px 0; }
figure svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f0f0f0; }
td:first-child, th:first-child { text-align: left; }
table.ranking td:nth-child(2), table.ranking th:nth-child(2) { text-align: left; }
table.notes td:last-child, table.notes th:last-child { text-align: left; }
tr.default td { background: #eef4fb; }
.badge { display: inline-block; font-size: 11px; padding: 0 5px; border: 1px solid #4a78b0; border-radius: 3px; color: #2a568f; margin-left: 4px; }
.yes { color: #1a7f37; font-weight: 600; }
.no { color: #9a2f00; font-weight: 600; }
dl { display: grid; grid-template-columns: max-content auto; gap: 2px 14px; margin: 6px 0; }
dt { color: #555; }
dd { margin: 0; }
.recs { display: grid; grid-template-columns: repeat(auto-fit, minmax(420px, 1fr)); gap: 16px; }
.rec { border: 1px solid #ccc; border-radius: 4px; padding: 8px 12px; }
pre { font: 12px/1.4 ui-monospace, "DejaVu Sans Mono", monospace; background: #fafafa; border: 1px solid #ddd; padding: 6px 8px; overflow-x: auto; white-space: pre; }
pre.diff span { display: block; }
pre.diff .add { background: #e6ffec; color: #116329; }
pre.diff .del { background: #ffebe9; color: #82071e; }
pre.diff .same { color: #666; }
.note { color: #555; }
footer { color: #777; font-size: 12px; margin-top: 30px; }
@media print {
  body { margin: 0; max-width: none; }
  section.model { break-before: page; }
  section.model:first-of-type { break-before: auto; }
  figure, table, .rec, .notice { break-inside: avoid; }
  pre { white-space: pre-wrap; }
}
`.trim();

async function modelSection(result: AnalysisResult, model: ModelResult, options: ReportOptions): Promise<string> {
  const measurements = result.measurements.filter((m) => m.model === model.model);
  const variants = result.variants.filter((v) => v.model === model.model);
  const byName = new Map(result.variants.map((v) => [v.name, v]));
  const skipped = result.skipped.filter((s) => s.model === model.model);
  const measuredConfigs = new Set(measurements.map((m) => m.variant)).size;
  const order = variantOrder(model, measurements);
  const label = loadLabel(measurements);
  const parts: string[] = [];

  // 1. Header.
  parts.push(`<h1>Nereid analyze: ${escapeHtml(model.model)}</h1>`);
  const server = result.server;
  const meta = [
    `${capitalize(result.mode)} mode`,
    `${result.searchMode} search`,
    `started ${result.startedAt}`,
    `wall time ${duration(result.wallSeconds)}`,
    `${measurements.length} measurement${measurements.length === 1 ? '' : 's'} of ${measuredConfigs} configuration${measuredConfigs === 1 ? '' : 's'}` +
      (variants.length > measuredConfigs ? ` (${variants.length} generated)` : ''),
    `server ${server.name} ${server.version} at ${server.endpoint} (${server.launchMode})`,
  ];
  parts.push(`<p class="meta">${meta.map((m) => `<span>${escapeHtml(m)}</span>`).join('')}</p>`);
  if (result.partial !== undefined) {
    parts.push(`<div class="notice"><strong>Partial results.</strong> ${escapeHtml(result.partial)}</div>`);
  }
  if (model.unmet !== undefined) {
    parts.push(`<div class="notice"><strong>Constraints not met.</strong> ${escapeHtml(model.unmet)}</div>`);
  }
  parts.push(`<p class="sentence">${escapeHtml(model.sentence)}</p>`);
  const objectives = objectiveWords(model.objectives);
  const constraints = constraintWords(model.constraints);
  parts.push(
    definitionList([
      ['Objectives', objectives.length > 0 ? objectives.map(escapeHtml).join('; ') : 'none'],
      ['Constraints', constraints.length > 0 ? constraints.map(escapeHtml).join('; ') : 'none'],
    ]),
  );

  // 2–3. Charts.
  if (measurements.length > 0) {
    parts.push(`<figure class="frontier">${await frontierChart(model, measurements, order)}</figure>`);
    parts.push(
      '<p class="note">Each point is one measurement, colored by configuration. The red step line is the Pareto frontier ' +
        '(no other measurement has both lower p99 latency and higher throughput); the diamonds mark the recommendations; ' +
        'dashed lines are the constraint targets.' +
        (measurements.some((m) => m.screening)
          ? ' Points of the quick search’s climb are screening measurements (one short window each): drawn, but left off the frontier and the recommendations.'
          : '') +
        '</p>',
    );
    parts.push(`<h2>Configurations</h2>`);
    parts.push(`<figure class="curves">${await curvesChart(model, measurements, order, label)}</figure>`);
  } else {
    parts.push('<p class="note">No measurement of this model was taken.</p>');
  }

  // 4. Ranking table.
  if (model.ranking.length > 0) {
    const withCpu = model.ranking.some((r) => r.best.cpu_used_ram !== undefined);
    const headers = ['Rank', 'Model Config Name', 'Max Batch Size', 'Dynamic Batching', 'Total Instance Count', label, 'p99 Latency (ms)', 'Throughput (infer/sec)'];
    if (withCpu) headers.push('CPU Memory (MB)');
    headers.push('Satisfies Constraints');
    const classes: (string | undefined)[] = [];
    const rows = model.ranking.map((r, i) => {
      const v = byName.get(r.variant);
      classes.push(v?.isDefault ? 'default' : undefined);
      const cells = [
        String(i + 1),
        `${escapeHtml(r.variant)}${v?.isDefault ? ' <span class="badge">default</span>' : ''}`,
        v ? escapeHtml(v.summary.maxBatchSize) : '–',
        v ? (v.summary.dynamicBatching ? 'Enabled' : 'Disabled') : '–',
        v ? escapeHtml(v.summary.instanceCount) : '–',
        escapeHtml(plain(load(r.best))),
        num(r.best.perf_latency_p99, 2),
        num(r.best.perf_throughput, 1),
      ];
      if (withCpu) cells.push(num(r.best.cpu_used_ram, 0));
      cells.push(r.passes ? '<span class="yes">Yes</span>' : '<span class="no">No</span>');
      return cells;
    });
    parts.push('<h2>Ranking</h2>');
    parts.push(table(headers, rows, classes).replace('<table>', '<table class="ranking">'));
    parts.push('<p class="note">Each configuration is shown at its best measurement.</p>');
  }

  // 5. Recommendations.
  const recs: [string, Measurement | undefined][] = [
    ['Throughput-optimized', model.throughputOptimized],
    ['Latency-optimized', model.latencyOptimized],
  ];
  if (recs.some(([, m]) => m !== undefined)) {
    parts.push('<h2>Recommended configurations</h2>');
    const blocks: string[] = [];
    for (const [title, m] of recs) {
      if (m === undefined) {
        blocks.push(`<div class="rec"><h3>${escapeHtml(title)}</h3><p class="note">None.</p></div>`);
        continue;
      }
      const v = byName.get(m.variant);
      const isDefault = v?.isDefault ?? false;
      blocks.push(
        `<div class="rec"><h3>${escapeHtml(title)}: ${escapeHtml(m.variant)}${isDefault ? ' <span class="badge">default</span>' : ''}</h3>\n` +
          definitionList([...summaryItems(v), ...measuredItems(m)]) +
          '\n' +
          diffBlock(options.defaultConfigText?.[model.model], options.variantConfigText?.[m.variant], m.variant, isDefault) +
          '</div>',
      );
    }
    parts.push(`<div class="recs">\n${blocks.join('\n')}\n</div>`);
  }

  // 6. Detailed sections: the top three and the default.
  const detailed = options.skipDetailed ? [] : model.ranking.slice(0, 3).map((r) => r.variant);
  const def = variants.find((v) => v.isDefault);
  if (def && !options.skipDetailed && !detailed.includes(def.name) && measurements.some((m) => m.variant === def.name)) detailed.push(def.name);
  if (detailed.length > 0) parts.push('<h2>Detailed reports</h2>');
  for (const name of detailed) {
    const own = measurements.filter((m) => m.variant === name);
    const v = byName.get(name);
    const sorted = [...own].sort((a, b) => (result.mode === 'offline' ? b.perf_throughput - a.perf_throughput : b.perf_latency_p99 - a.perf_latency_p99));
    const withCpu = own.some((m) => m.cpu_used_ram !== undefined);
    const headers = [label === 'Request Rate' ? 'Request Rate' : 'Request Concurrency', 'p99 Latency (ms)', 'Client Response Wait (ms)', 'Server Queue (ms)', 'Server Compute Input (ms)', 'Server Compute Infer (ms)', 'Throughput (infer/sec)'];
    if (withCpu) headers.push('CPU Memory (MB)');
    const rows = sorted.map((m) => {
      const cells = [
        escapeHtml(plain(load(m))) + (m.screening ? ' (screening)' : m.stable ? '' : ' (unstable)'),
        num(m.perf_latency_p99, 2),
        num(m.perf_client_response_wait, 2),
        num(m.perf_server_queue, 2),
        num(m.perf_server_compute_input, 2),
        num(m.perf_server_compute_infer, 2),
        num(m.perf_throughput, 1),
      ];
      if (withCpu) cells.push(num(m.cpu_used_ram, 0));
      return cells;
    });
    const rank = model.ranking.findIndex((r) => r.variant === name);
    parts.push(`<section class="detail"><h3>Model Config: ${escapeHtml(name)}${v?.isDefault ? ' <span class="badge">default</span>' : ''}</h3>`);
    const s = v?.summary;
    const desc = [
      rank >= 0 ? `rank ${rank + 1}` : 'unranked',
      s ? `${s.instanceCount} × ${s.instanceKind} instance${s.instanceCount === 1 ? '' : 's'}` : undefined,
      s ? `max batch size ${s.maxBatchSize}` : undefined,
      s ? `dynamic batching ${s.dynamicBatching ? 'enabled' : 'disabled'}` : undefined,
      `${own.length} measurement${own.length === 1 ? '' : 's'}`,
    ].filter((x): x is string => x !== undefined);
    parts.push(`<p class="meta">${desc.map((d) => `<span>${escapeHtml(d)}</span>`).join('')}</p>`);
    if (own.length > 0) {
      parts.push(`<figure class="breakdown">${await breakdownChart(name, own, label)}</figure>`);
      parts.push(table(headers, rows));
    }
    parts.push('</section>');
  }

  // 7. Interference.
  if (result.interference !== undefined && result.interference.length > 0) {
    parts.push('<h2>Models profiled together</h2>');
    const rows = result.interference.map((i) => [
      escapeHtml(i.model),
      num(i.alone, 1),
      num(i.together, 1),
      i.change === undefined ? '–' : `${i.change > 0 ? '+' : ''}${num(i.change * 100, 1)} %`,
      escapeHtml(i.note),
    ]);
    parts.push(table(['Model', 'Throughput alone (infer/sec)', 'Throughput together (infer/sec)', 'Change', 'Note'], rows).replace('<table>', '<table class="notes">'));
  }

  // 8. Skipped.
  if (skipped.length > 0) {
    parts.push('<h2>Skipped configurations</h2>');
    parts.push(table(['Model Config Name', 'Reason'], skipped.map((s) => [escapeHtml(s.variant), escapeHtml(s.reason)])).replace('<table>', '<table class="notes">'));
  }
  return `<section class="model">\n${parts.join('\n')}\n</section>`;
}

/** The report of an analysis: one self-contained HTML document. */
export async function renderReport(result: AnalysisResult, options: ReportOptions = {}): Promise<string> {
  const sections: string[] = [];
  for (const model of result.models) sections.push(await modelSection(result, model, options));
  if (result.models.length === 0) {
    sections.push(`<h1>Nereid analyze</h1>\n<p class="note">No model was analyzed.</p>`);
    if (result.partial !== undefined) sections.push(`<div class="notice"><strong>Partial results.</strong> ${escapeHtml(result.partial)}</div>`);
  }
  const title = result.models.length > 0 ? `Nereid analyze: ${result.models.map((m) => m.model).join(', ')}` : 'Nereid analyze';
  return [
    '<!DOCTYPE html>',
    '<html lang="en">',
    '<head>',
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>${escapeHtml(title)}</title>`,
    `<style>\n${CSS}\n</style>`,
    '</head>',
    '<body>',
    ...sections,
    `<footer>${escapeHtml(`Nereid analyze report: ${result.measurements.length} measurements, started ${result.startedAt}.`)}</footer>`,
    '</body>',
    '</html>',
    '',
  ].join('\n');
}
