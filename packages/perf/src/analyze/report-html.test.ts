/**
 * The HTML report of `nereid analyze` (`renderReport`): a self-contained document (no script, no
 * external reference), every user-given name escaped, the ranking in order, the recommended
 * configs diffed against the default, and charts that a browser really draws (a headless Chromium
 * screenshot whose pixels are checked).
 */
import assert from 'node:assert/strict';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { colorRegion, screenshot } from '@nereid/testkit';
import { escapeHtml, FRONTIER_COLOR, lineDiff, renderReport, VARIANT_COLORS } from './report-html.js';
import type { AnalysisResult, Measurement, ModelResult, RankedVariant, Variant } from './types.js';

const MODEL = 'resnet50';
const HOSTILE = '<img src=x onerror=alert(1)>';
const P99_MAX = 10;

interface Shape {
  name: string;
  isDefault: boolean;
  instances: number;
  maxBatch: number;
  dynamic: boolean;
  /** Throughput at concurrency 1, and how it saturates. */
  base: number;
  knee: number;
  /** p99 at concurrency 1, ms. */
  latency: number;
}

const SHAPES: Shape[] = [
  { name: `${MODEL}_config_default`, isDefault: true, instances: 1, maxBatch: 8, dynamic: false, base: 150, knee: 2, latency: 6.5 },
  { name: `${MODEL}_config_0`, isDefault: false, instances: 2, maxBatch: 8, dynamic: true, base: 160, knee: 6, latency: 6.2 },
  { name: `${MODEL}_config_1`, isDefault: false, instances: 4, maxBatch: 16, dynamic: true, base: 155, knee: 12, latency: 6.4 },
  { name: HOSTILE, isDefault: false, instances: 1, maxBatch: 1, dynamic: false, base: 60, knee: 16, latency: 12 },
];
const CONCURRENCIES = [1, 2, 4, 8, 16];

function variant(s: Shape): Variant {
  return {
    name: s.name,
    model: MODEL,
    isDefault: s.isDefault,
    config: { name: s.name, max_batch_size: s.maxBatch },
    summary: {
      instanceCount: s.instances,
      instanceKind: 'KIND_CPU',
      maxBatchSize: s.maxBatch,
      dynamicBatching: s.dynamic,
      preferredBatchSizes: s.dynamic ? [4, 8] : [],
      maxQueueDelayUs: s.dynamic ? 100 : 0,
      other: [],
    },
  };
}

function measurement(s: Shape, c: number, i: number): Measurement {
  const throughput = (s.base * c) / (1 + (c - 1) / s.knee);
  const p99 = s.latency * (1 + (c - 1) / s.knee) * 1.05;
  const avg = p99 / 1.3;
  return {
    variant: s.name,
    model: MODEL,
    batchSize: 1,
    concurrency: c,
    perf_throughput: throughput,
    perf_latency_avg: avg,
    perf_latency_p90: p99 * 0.9,
    perf_latency_p95: p99 * 0.95,
    perf_latency_p99: p99,
    perf_client_send_recv: 0.1,
    perf_client_response_wait: avg - 0.1,
    perf_server_queue: avg * 0.3,
    perf_server_compute_input: avg * 0.05,
    perf_server_compute_infer: avg * 0.55,
    perf_server_compute_output: avg * 0.05,
    cpu_used_ram: 900 + 150 * s.instances,
    stable: true,
    errors: 0,
    wallMs: 4200,
    at: new Date(Date.UTC(2025, 0, 15, 9, 0, i * 5)).toISOString(),
  };
}

/** A run of one model over four variants (the last with a hostile name), p99 ≤ 10 ms. */
function fixture(): AnalysisResult {
  const variants = SHAPES.map(variant);
  const measurements = SHAPES.flatMap((s, v) => CONCURRENCIES.map((c, i) => measurement(s, c, v * 10 + i)));
  const passes = (m: Measurement): boolean => m.perf_latency_p99 <= P99_MAX;
  const ranking: RankedVariant[] = SHAPES.map((s) => {
    const own = measurements.filter((m) => m.variant === s.name);
    const passing = own.filter(passes);
    const pool = passing.length > 0 ? passing : own;
    const best = pool.reduce((a, b) => (b.perf_throughput > a.perf_throughput ? b : a));
    return { variant: s.name, best, passes: passing.length > 0, miss: passing.length > 0 ? 0 : best.perf_latency_p99 - P99_MAX };
  }).sort((a, b) => Number(b.passes) - Number(a.passes) || b.best.perf_throughput - a.best.perf_throughput || a.miss - b.miss);
  const frontier = measurements
    .filter((m) => !measurements.some((o) => o !== m && o.perf_latency_p99 <= m.perf_latency_p99 && o.perf_throughput >= m.perf_throughput && (o.perf_latency_p99 < m.perf_latency_p99 || o.perf_throughput > m.perf_throughput)))
    .sort((a, b) => a.perf_latency_p99 - b.perf_latency_p99);
  const passing = measurements.filter(passes);
  const model: ModelResult = {
    model: MODEL,
    objectives: { perf_throughput: 1 },
    constraints: { perf_latency_p99: { max: P99_MAX } },
    ranking,
    frontier,
    throughputOptimized: passing.reduce((a, b) => (b.perf_throughput > a.perf_throughput ? b : a)),
    latencyOptimized: passing.reduce((a, b) => (b.perf_latency_p99 < a.perf_latency_p99 ? b : a)),
    sentence: `In ${measurements.length} measurements across 4 configurations, ${ranking[0].variant} is 120% better than the default configuration at maximizing throughput, under the given constraints, on CPU.`,
  };
  return {
    server: { name: 'nereid', version: '0.1.0', endpoint: 'localhost:8001', launchMode: 'local' },
    mode: 'online',
    searchMode: 'brute',
    startedAt: '2025-01-15T09:00:00.000Z',
    wallSeconds: 754,
    variants,
    measurements,
    skipped: [{ variant: `${MODEL}_config_2`, model: MODEL, reason: 'failed to load: instance_group count 64 exceeds the CPU count & more' }],
    models: [model],
    interference: [
      { model: MODEL, alone: 412.5, together: 301.2, change: -0.27, note: 'measured alongside bert_config_1' },
      { model: 'bert', alone: 88, together: 80.1, change: -0.09, note: 'measured alongside resnet50_config_1' },
    ],
    partial: 'the time budget of 900 s ran out: 2 configurations were not measured',
  };
}

function pbtxt(s: Shape): string {
  const lines = [`name: "${MODEL}"`, 'backend: "onnxruntime"', `max_batch_size: ${s.maxBatch}`, 'instance_group [', '  {', `    count: ${s.instances}`, '    kind: KIND_CPU', '  }', ']'];
  if (s.dynamic) lines.push('dynamic_batching {', '  preferred_batch_size: [ 4, 8 ]', '  max_queue_delay_microseconds: 100', '}');
  return lines.join('\n') + '\n';
}

const OPTIONS = {
  defaultConfigText: { [MODEL]: pbtxt(SHAPES[0]) },
  variantConfigText: Object.fromEntries(SHAPES.map((s) => [s.name, pbtxt(s)])),
};

describe('renderReport', () => {
  it('is one self-contained document: no script, no external reference', async () => {
    const html = await renderReport(fixture(), OPTIONS);
    assert.match(html, /^<!DOCTYPE html>/);
    assert.doesNotMatch(html, /<script/i);
    // The tags, their attribute values blanked: no handler, nothing loaded.
    const tags = html.replace(/"[^"]*"/g, '""');
    assert.doesNotMatch(tags, /<[a-z][^>]*\son[a-z]+\s*=/i, 'no event handler attribute');
    assert.doesNotMatch(tags, /<[a-z][^>]*\s(src|href|xlink:href)\s*=/i, 'nothing is loaded');
    const urls = html.replace(/xmlns="http:\/\/www\.w3\.org\/2000\/svg"/g, '').match(/(https?:)?\/\/[a-z0-9.-]+\.[a-z]{2,}/gi) ?? [];
    assert.deepEqual(urls, []);
    assert.ok((html.match(/<svg /g) ?? []).length >= 5, 'frontier, curves, and a breakdown per detailed config');
  });

  it('names the model and the run, its constraint in words, and the notices', async () => {
    const html = await renderReport(fixture(), OPTIONS);
    assert.ok(html.includes(`<h1>Nereid analyze: ${MODEL}</h1>`));
    assert.ok(html.includes('Max p99 latency: 10 ms'));
    assert.ok(html.includes('Maximize throughput'));
    assert.ok(html.includes('Online mode'));
    assert.ok(html.includes('brute search'));
    assert.ok(html.includes('wall time 12 min 34 s'));
    assert.ok(html.includes('20 measurements of 4 configurations'));
    assert.ok(html.includes('Partial results.'));
    assert.ok(html.includes('the time budget of 900 s ran out'));
    assert.ok(html.includes('120% better than the default'));
    const unmet = fixture();
    unmet.models[0].unmet = 'p99 latency ≤ 1 ms was asked; the closest reached 6.5 ms';
    assert.ok((await renderReport(unmet, OPTIONS)).includes('Constraints not met.</strong> p99 latency ≤ 1 ms was asked'));
  });

  it('escapes every variant name, a hostile one included', async () => {
    const result = fixture();
    const html = await renderReport(result, OPTIONS);
    assert.ok(!html.includes(HOSTILE), 'the raw name never appears');
    assert.ok(!html.includes('<img'), 'no image element');
    assert.ok(html.includes('&lt;img src=x onerror=alert(1)&gt;'));
    for (const v of result.variants) assert.ok(html.includes(escapeHtml(v.name)), v.name);
    assert.ok(html.includes('exceeds the CPU count &amp; more'), 'the skip reason is escaped');
    assert.ok(html.includes(`${MODEL}_config_2`), 'the skipped variant is listed');
  });

  it('has detailed sections for the top configurations, unless skip_detailed_reports', async () => {
    const html = await renderReport(fixture(), OPTIONS);
    assert.ok(html.includes('<h2>Detailed reports</h2>'));
    const without = await renderReport(fixture(), { ...OPTIONS, skipDetailed: true });
    assert.ok(!without.includes('<h2>Detailed reports</h2>'));
    assert.ok(without.includes('<table class="ranking">'), 'the rest of the report stays');
  });

  it('lists the ranking in order, the default marked', async () => {
    const result = fixture();
    const html = await renderReport(result, OPTIONS);
    const table = html.slice(html.indexOf('<table class="ranking">'), html.indexOf('</table>', html.indexOf('<table class="ranking">')));
    const rows = [...table.matchAll(/<tr( class="default")?><td>(\d+)<\/td><td>(.*?)(?: <span class="badge">default<\/span>)?<\/td>/g)];
    assert.deepEqual(
      rows.map((r) => r[3]),
      result.models[0].ranking.map((r) => escapeHtml(r.variant)),
    );
    assert.deepEqual(rows.map((r) => r[2]), ['1', '2', '3', '4']);
    const defaultRow = rows.find((r) => r[1] !== undefined);
    assert.equal(defaultRow?.[3], `${MODEL}_config_default`);
    assert.equal(result.models[0].ranking[0].variant, `${MODEL}_config_1`, 'the fixture ranks config_1 first');
    for (const header of ['Model Config Name', 'Max Batch Size', 'Dynamic Batching', 'Total Instance Count', 'Concurrency', 'p99 Latency (ms)', 'Throughput (infer/sec)', 'CPU Memory (MB)', 'Satisfies Constraints']) {
      assert.ok(table.includes(`<th>${header}</th>`), header);
    }
    assert.equal((table.match(/class="yes"/g) ?? []).length, 3);
    assert.equal((table.match(/class="no"/g) ?? []).length, 1);
  });

  it("diffs the recommended configs' config.pbtxt against the default's", async () => {
    const result = fixture();
    const html = await renderReport(result, OPTIONS);
    assert.equal(result.models[0].throughputOptimized?.variant, `${MODEL}_config_1`);
    assert.ok(html.includes('Throughput-optimized: resnet50_config_1'));
    assert.ok(html.includes('Latency-optimized: '));
    assert.ok(html.includes('<span class="del">-     count: 1</span>'));
    assert.ok(html.includes('<span class="add">+     count: 4</span>'));
    assert.ok(html.includes('<span class="del">- max_batch_size: 8</span>'));
    assert.ok(html.includes('<span class="add">+ max_batch_size: 16</span>'));
    assert.ok(html.includes('<span class="add">+ dynamic_batching {</span>'));
    assert.ok(html.includes('<span class="same">  backend: &quot;onnxruntime&quot;</span>'));
  });

  it('has a detailed section for the top three and the default, sorted by decreasing latency', async () => {
    const result = fixture();
    const html = await renderReport(result, OPTIONS);
    const details = [...html.matchAll(/<h3>Model Config: (.*?)(?: <span|<\/h3>)/g)].map((m) => m[1]);
    assert.deepEqual(details, [...result.models[0].ranking.slice(0, 3).map((r) => escapeHtml(r.variant))].concat(details.length === 4 ? [details[3]] : []));
    assert.ok(details.includes(`${MODEL}_config_default`));
    const section = html.slice(html.indexOf(`<h3>Model Config: ${MODEL}_config_1`));
    const table = section.slice(section.indexOf('<table>'), section.indexOf('</table>'));
    assert.ok(table.includes('<th>Request Concurrency</th><th>p99 Latency (ms)</th><th>Client Response Wait (ms)</th><th>Server Queue (ms)</th>'));
    const loads = [...table.matchAll(/<tr><td>(\d+)<\/td>/g)].map((m) => Number(m[1]));
    assert.deepEqual(loads, [16, 8, 4, 2, 1]);
    assert.ok(section.includes('Concurrent Client Requests'), 'the breakdown chart has its axis title');
    assert.ok(section.includes('Compute Infer'));
  });

  it('shows the interference table', async () => {
    const html = await renderReport(fixture(), OPTIONS);
    assert.ok(html.includes('Models profiled together'));
    assert.ok(html.includes('measured alongside bert_config_1'));
    assert.ok(html.includes('-27.0 %'));
  });

  it('renders a model with no measurement and a result with no model', async () => {
    const result = fixture();
    result.measurements = [];
    result.models[0] = { ...result.models[0], ranking: [], frontier: [], throughputOptimized: undefined, latencyOptimized: undefined };
    const html = await renderReport(result);
    assert.ok(html.includes('No measurement of this model was taken.'));
    const none = await renderReport({ ...fixture(), models: [] });
    assert.ok(none.includes('No model was analyzed.'));
  });
});

describe('lineDiff', () => {
  it('keeps common lines and marks the changed ones', () => {
    assert.deepEqual(lineDiff('a\nb\nc\n', 'a\nx\nc\nd\n'), [
      { op: ' ', line: 'a' },
      { op: '-', line: 'b' },
      { op: '+', line: 'x' },
      { op: ' ', line: 'c' },
      { op: '+', line: 'd' },
    ]);
    assert.deepEqual(lineDiff('', 'a'), [{ op: '+', line: 'a' }]);
    assert.deepEqual(lineDiff('a', 'a'), [{ op: ' ', line: 'a' }]);
  });
});

describe('renderReport in a browser', () => {
  it('draws the frontier plot: the frontier line, the variant points and the axes', { timeout: 120_000 }, async (t) => {
    const html = await renderReport(fixture(), OPTIONS);
    const { png, ms, file, shot } = await screenshot(html);
    try {
      assert.equal(png.width, 1280);
      const at = (x: number, y: number): [number, number, number] => {
        const i = (y * png.width + x) * 4;
        return [png.data[i], png.data[i + 1], png.data[i + 2]];
      };
      const { count, minX, maxX, minY, maxY } = colorRegion(png, FRONTIER_COLOR);
      assert.ok(count > 200, `only ${count} pixels of the frontier's color (${file}, ${shot})`);
      // The frontier rises over several levels: its pixels span a region, not a dot or a legend swatch.
      assert.ok(maxX - minX > 150 && maxY - minY > 100, `frontier spans ${maxX - minX}×${maxY - minY} px`);
      // Around it the plot is drawn: the variants' points in their colors and dark axis and text pixels.
      const x0 = Math.max(0, minX - 120);
      const x1 = Math.min(png.width - 1, maxX + 120);
      const y0 = Math.max(0, minY - 60);
      const y1 = Math.min(png.height - 1, maxY + 80);
      const seen = new Map<string, number>();
      let dark = 0;
      let nonWhite = 0;
      for (let y = y0; y <= y1; y++) {
        for (let x = x0; x <= x1; x++) {
          const [r, g, b] = at(x, y);
          if (r < 250 || g < 250 || b < 250) nonWhite++;
          if (r < 90 && g < 90 && b < 90) dark++;
          const hex = `#${[r, g, b].map((c) => c.toString(16).padStart(2, '0')).join('')}`;
          seen.set(hex, (seen.get(hex) ?? 0) + 1);
        }
      }
      const area = (x1 - x0 + 1) * (y1 - y0 + 1);
      assert.ok(nonWhite > area * 0.02, `the plot area is nearly blank: ${nonWhite} of ${area} pixels drawn`);
      assert.ok(dark > 300, `no axes or labels: ${dark} dark pixels`);
      const drawnVariants = VARIANT_COLORS.slice(0, 4).filter((c) => (seen.get(c) ?? 0) > 20);
      assert.equal(drawnVariants.length, 4, `variant colors drawn: ${drawnVariants.join(', ')}`);
      t.diagnostic(`chromium screenshot took ${ms} ms`);
    } finally {
      if (process.env.NEREID_KEEP_REPORT === undefined) rmSync(join(file, '..'), { recursive: true, force: true });
    }
  });
});
