import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { bruteSearch, powersOfTwo, quickAxes, quickSearch, stoppedGrowing, sweepLoad, type Level, type Prober, type SearchContext } from './search.js';
import { VariantBook, knobsOf } from './space.js';
import { compare } from './rank.js';
import type { Measurement, ProfileModel, SearchLimits, Variant } from './types.js';

const LIMITS: SearchLimits = {
  minConcurrency: 1,
  maxConcurrency: 1024,
  minModelBatchSize: 1,
  maxModelBatchSize: 128,
  minInstanceCount: 1,
  maxInstanceCount: 5,
  minRequestRate: 16,
  maxRequestRate: 8192,
  requestRateSearchEnable: false,
  disable: false,
  maxBinarySearchSteps: 5,
  concurrencySweepDisable: false,
};

const MODEL: ProfileModel = { name: 'm', objectives: { perf_throughput: 1 }, constraints: {}, batchSizes: [1], perfAnalyzerFlags: {}, cpuOnly: true, weighting: 1 };

const BASE = { name: 'm', platform: 'onnxruntime_onnx', max_batch_size: 8, instance_group: [{ kind: 'KIND_CPU', count: 1 }] };

/**
 * A deterministic server: throughput saturates at a capacity that grows with instances (up to
 * two cores) and with batching (up to batch 16, past which larger batches cost), latency is
 * Little's law over it. Every call is recorded.
 */
class SyntheticProber implements Prober {
  readonly calls: { variant: string; level: Level }[] = [];
  stopped = false;
  readonly planned: number[] = [];
  readonly skips: string[] = [];

  capacity(v: Variant): number {
    const k = knobsOf(v.config);
    const inst = Math.min(k.instances, 2) + 0.1 * Math.max(0, k.instances - 2);
    const b = k.dynamicBatching ? Math.min(k.maxBatchSize, 16) * (k.maxBatchSize > 16 ? 16 / k.maxBatchSize : 1) : 1;
    return 1000 * inst * (1 + Math.log2(Math.max(1, b)));
  }

  async measure(variant: Variant, level: Level): Promise<Measurement | undefined> {
    this.calls.push({ variant: variant.name, level });
    const c = level.concurrency ?? 1;
    const cap = this.capacity(variant);
    const tp = Math.min(cap, c * 2000);
    const lat = (c / tp) * 1000;
    return {
      variant: variant.name,
      model: variant.model,
      batchSize: level.batchSize,
      concurrency: level.concurrency,
      perf_throughput: tp,
      perf_latency_avg: lat,
      perf_latency_p90: lat,
      perf_latency_p95: lat,
      perf_latency_p99: lat * 1.2,
      perf_client_send_recv: 0,
      perf_client_response_wait: lat,
      perf_server_queue: 0,
      perf_server_compute_input: 0,
      perf_server_compute_infer: lat,
      perf_server_compute_output: 0,
      stable: true,
      errors: 0,
      wallMs: 1,
      at: '',
    };
  }

  skip(_variant: Variant, reason: string): void {
    this.skips.push(reason);
  }

  plan(_model: string, n: number): void {
    this.planned.push(n);
  }

  done(): void {}
}

function context(prober: SyntheticProber, model: Partial<ProfileModel> = {}, limits: Partial<SearchLimits> = {}): SearchContext {
  return { model: { ...MODEL, ...model }, limits: { ...LIMITS, ...limits }, book: new VariantBook('m', BASE), prober, topN: 3 };
}

describe('analyze search', () => {
  it('powers of two within the limits, the minimum first', () => {
    assert.deepEqual(powersOfTwo(1, 1024), [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]);
    assert.deepEqual(powersOfTwo(3, 20), [3, 4, 8, 16]);
    assert.deepEqual(powersOfTwo(5, 4), []);
  });

  it("stops when the best of the last four is at most 5 % above the first of them (Model Analyzer's rule)", () => {
    assert.equal(stoppedGrowing([100, 200, 300]), false);
    assert.equal(stoppedGrowing([100, 200, 400, 800]), false);
    assert.equal(stoppedGrowing([100, 1000, 1020, 1040, 1049]), true);
    assert.equal(stoppedGrowing([1000, 1020, 1040, 1051]), false);
  });

  it('walks the concurrency up in powers of two and stops once throughput stops growing', async () => {
    const p = new SyntheticProber();
    const ctx = context(p);
    const ms = await sweepLoad(ctx, ctx.book.defaultVariant, 8);
    // the default has no dynamic batching, capacity 1000: 1000 at every level, so it stops after four
    assert.deepEqual(
      ms.map((m) => m.concurrency),
      [1, 2, 4, 8],
    );
  });

  it('with a latency budget, stops at the first level beyond it and bisects towards it', async () => {
    const p = new SyntheticProber();
    const ctx = context(p, { constraints: { perf_latency_p99: { max: 3 } } });
    const variant = ctx.book.variantFor((name) => ({ ...BASE, name, dynamic_batching: {} }));
    const ms = await sweepLoad(ctx, variant, 8);
    const levels = ms.map((m) => m.concurrency);
    // capacity 4000, p99 = 1.2 × c / 4 ms from concurrency 2: 2.4 at 8, 4.8 at 16 (beyond); then 12 (3.6), 10 (3.0), 11 (3.3)
    assert.deepEqual(levels, [1, 2, 4, 8, 16, 12, 10, 11]);
  });

  it('brute force measures the default and every instance count × max batch size, stopping each batch walk by the rule', async () => {
    const p = new SyntheticProber();
    const ctx = context(p, {}, { maxInstanceCount: 2, maxModelBatchSize: 1024, maxConcurrency: 8 });
    await bruteSearch(ctx);
    const variants = [...new Set(p.calls.map((c) => c.variant))];
    assert.equal(variants[0], 'm_config_default');
    const configs = ctx.book.variants.filter((v) => !v.isDefault).map((v) => `${v.summary.instanceCount}/${v.summary.maxBatchSize}/${v.summary.dynamicBatching}`);
    // max batch grows throughput up to 16, then falls: the walk stops at 128, four steps on
    assert.ok(configs.includes('1/1/true') && configs.includes('2/16/true') && configs.includes('2/128/true'), configs.join(' '));
    assert.ok(configs.every((c) => c.endsWith('/true')), 'dynamic batching is on for every non-default variant');
    assert.ok(!configs.includes('1/256/true') && !configs.includes('2/256/true'), `the max batch size walk exits early: ${configs.join(' ')}`);
    assert.equal(configs.length, 16);
  });

  it('manual model_config_parameters: the cartesian product, and an illegal preferred size skipped with its reason', async () => {
    const p = new SyntheticProber();
    const ctx = context(p, {
      modelConfigParameters: {
        max_batch_size: [4, 8],
        dynamic_batching: [{ preferred_batch_size: [8] }],
      },
    }, { maxConcurrency: 2 });
    await bruteSearch(ctx);
    assert.equal(ctx.book.variants.length, 3);
    assert.equal(p.skips.length, 1);
    assert.match(p.skips[0], /preferred_batch_size 8 is above max_batch_size 4/);
  });

  it('quick search climbs from the default to the brute-force optimum with far fewer measurements', async () => {
    const tp = (p: SyntheticProber, book: VariantBook) => Math.max(...p.calls.map((c) => Math.min(p.capacity(book.byName(c.variant)!), c.level.concurrency! * 2000)));
    const bruteCtx = context(new SyntheticProber(), {}, { maxConcurrency: 256 });
    const bruteProber = bruteCtx.prober as SyntheticProber;
    await bruteSearch(bruteCtx);
    const quickCtx = context(new SyntheticProber(), {}, { maxConcurrency: 256 });
    const quickProber = quickCtx.prober as SyntheticProber;
    await quickSearch(quickCtx);
    const bruteTop = tp(bruteProber, bruteCtx.book);
    const quickTop = tp(quickProber, quickCtx.book);
    assert.ok(quickTop >= bruteTop * 0.95, `quick ${quickTop} vs brute ${bruteTop}`);
    assert.ok(quickProber.calls.length * 2 < bruteProber.calls.length, `quick ${quickProber.calls.length} measurements, brute ${bruteProber.calls.length}`);
    // The climb screens; the finalists and the final sweep are full measurements.
    const screened = quickProber.calls.filter((c) => c.level.screen === true);
    const full = quickProber.calls.filter((c) => c.level.screen !== true);
    assert.ok(screened.length >= 3 && full.length >= 3, `${screened.length} screened, ${full.length} full`);
    assert.equal(quickProber.calls.findIndex((c) => c.level.screen !== true), screened.length, 'every screening comes before the full measurements');
    assert.ok(full.some((c) => c.variant === 'm_config_default'), 'the default is measured in full');
  });

  it('quick search axes include the default value of each knob and start at the default', () => {
    const { axes, start } = quickAxes({ ...BASE, max_batch_size: 24, dynamic_batching: { max_queue_delay_microseconds: 300 } }, LIMITS);
    const byKey = Object.fromEntries(axes.map((a, i) => [a.key, a.values[start[i]]]));
    assert.equal(byKey.maxBatchSize, 24);
    assert.equal(byKey.maxQueueDelayUs, 300);
    assert.equal(byKey.dynamicBatching, 1);
    assert.equal(byKey.instances, 1);
    assert.ok(axes.some((a) => a.key === 'intraOpThreads'), 'ONNX Runtime models get the thread axes');
  });

  it('stops at once when the prober is stopped', async () => {
    const p = new SyntheticProber();
    p.stopped = true;
    await bruteSearch(context(p));
    assert.equal(p.calls.length, 0);
  });

  it('objective comparison is the weighted relative difference', () => {
    const a = { perf_throughput: 200, perf_latency_p99: 10 } as Measurement;
    const b = { perf_throughput: 100, perf_latency_p99: 5 } as Measurement;
    assert.ok(compare(a, b, { perf_throughput: 1 }) > 0);
    assert.ok(compare(a, b, { perf_latency_p99: 1 }) < 0);
    assert.equal(compare(a, b, { perf_throughput: 0.5, perf_latency_p99: 0.5 }), 0);
  });
});
