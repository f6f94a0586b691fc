import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { gainPercent, miss, modelResult, paretoFrontier, rankVariants, recommend, representative } from './rank.js';
import type { Measurement } from './types.js';

function m(variant: string, concurrency: number, throughput: number, p99: number, extra: Partial<Measurement> = {}): Measurement {
  return {
    variant,
    model: 'mlp',
    batchSize: 1,
    concurrency,
    perf_throughput: throughput,
    perf_latency_avg: p99 / 2,
    perf_latency_p90: p99 * 0.8,
    perf_latency_p95: p99 * 0.9,
    perf_latency_p99: p99,
    perf_client_send_recv: 0,
    perf_client_response_wait: 0,
    perf_server_queue: 0,
    perf_server_compute_input: 0,
    perf_server_compute_infer: 0,
    perf_server_compute_output: 0,
    stable: true,
    errors: 0,
    wallMs: 0,
    at: '',
    ...extra,
  };
}

const points = [
  m('mlp_config_default', 1, 1000, 1.0),
  m('mlp_config_default', 2, 1500, 1.5),
  m('mlp_config_default', 4, 1600, 2.6),
  m('mlp_config_0', 1, 900, 1.2), // dominated by default@1
  m('mlp_config_0', 4, 3000, 1.4),
  m('mlp_config_0', 8, 5000, 1.8),
  m('mlp_config_0', 16, 5200, 3.3),
  m('mlp_config_1', 1, 1100, 0.9),
  m('mlp_config_1', 8, 4000, 2.0), // dominated by config_0@8
];

describe('analyze ranking', () => {
  it('the Pareto frontier holds exactly the points no other beats on both latency and throughput', () => {
    const frontier = paretoFrontier(points).map((p) => `${p.variant}@${p.concurrency}`);
    assert.deepEqual(frontier, ['mlp_config_1@1', 'mlp_config_0@4', 'mlp_config_0@8', 'mlp_config_0@16']);
    for (const p of points) {
      const dominated = points.some((q) => q !== p && q.perf_latency_p99 <= p.perf_latency_p99 && q.perf_throughput >= p.perf_throughput && (q.perf_latency_p99 < p.perf_latency_p99 || q.perf_throughput > p.perf_throughput));
      assert.equal(frontier.includes(`${p.variant}@${p.concurrency}`), !dominated, `${p.variant}@${p.concurrency}`);
    }
  });

  it('a config is represented by its best passing measurement, and passing configs rank first', () => {
    const constraints = { perf_latency_p99: { max: 2 } };
    const r = representative(points.filter((p) => p.variant === 'mlp_config_0'), { perf_throughput: 1 }, constraints);
    assert.equal(r.best.concurrency, 8);
    assert.equal(r.passes, true);
    const ranking = rankVariants(points, { perf_throughput: 1 }, { perf_latency_p99: { max: 0.95 } });
    assert.deepEqual(
      ranking.map((x) => [x.variant, x.passes]),
      [
        ['mlp_config_1', true],
        ['mlp_config_default', false],
        ['mlp_config_0', false],
      ],
    );
    assert.ok(ranking[1].miss < ranking[2].miss, 'failing configs are ordered by how far they miss');
  });

  it('without constraints the score is the peak throughput; with several objectives, their weights', () => {
    assert.deepEqual(rankVariants(points, { perf_throughput: 1 }, {}).map((x) => x.variant), ['mlp_config_0', 'mlp_config_1', 'mlp_config_default']);
    const latencyFirst = rankVariants(points, { perf_latency_p99: 1 }, {});
    assert.equal(latencyFirst[0].variant, 'mlp_config_1');
  });

  it('recommends the highest throughput and the lowest latency within the constraints', () => {
    const r = recommend(points, { perf_latency_p99: { max: 2 } });
    assert.equal(`${r.throughputOptimized?.variant}@${r.throughputOptimized?.concurrency}`, 'mlp_config_0@8');
    assert.equal(`${r.latencyOptimized?.variant}@${r.latencyOptimized?.concurrency}`, 'mlp_config_1@1');
    assert.equal(r.met, true);
    const floor = recommend(points, { perf_throughput: { min: 2000 } });
    assert.equal(`${floor.latencyOptimized?.variant}@${floor.latencyOptimized?.concurrency}`, 'mlp_config_0@4');
  });

  it('unstable or failing measurements are not recommended while stable ones exist', () => {
    const r = recommend([...points, m('mlp_config_2', 8, 9000, 1.0, { stable: false })], {});
    assert.equal(r.throughputOptimized?.variant, 'mlp_config_0');
  });

  it('screening measurements speak for a variant only when it has no full one, and stay off the frontier', () => {
    const screened = [...points, m('mlp_config_0', 64, 9000, 1.0, { screening: true }), m('mlp_config_3', 64, 800, 5, { screening: true })];
    assert.deepEqual(paretoFrontier(screened).map((p) => `${p.variant}@${p.concurrency}`), ['mlp_config_1@1', 'mlp_config_0@4', 'mlp_config_0@8', 'mlp_config_0@16']);
    const ranking = rankVariants(screened, { perf_throughput: 1 }, {});
    assert.equal(ranking.find((r) => r.variant === 'mlp_config_0')?.best.perf_throughput, 5200);
    assert.equal(ranking.find((r) => r.variant === 'mlp_config_3')?.best.screening, true);
    assert.notEqual(recommend(screened, {}).throughputOptimized?.screening, true);
  });

  it("Model Analyzer's gain: (new − old)/old for throughput, (old − new)/new for latency", () => {
    assert.equal(gainPercent(m('a', 1, 150, 1), m('b', 1, 100, 1), { perf_throughput: 1 }), 50);
    assert.equal(gainPercent(m('a', 1, 1, 1), m('b', 1, 1, 2), { perf_latency_p99: 1 }), 100);
  });

  it('the summary sentence, and the message when no measurement meets the constraints', () => {
    const ok = modelResult('mlp', points, { perf_throughput: 1 }, {}, 'mlp_config_default');
    assert.equal(ok.sentence, 'In 9 measurements across 3 configurations, mlp_config_0 is 225% better than the default configuration at maximizing throughput.');
    assert.equal(ok.unmet, undefined);
    const none = modelResult('mlp', points, { perf_throughput: 1 }, { perf_latency_p99: { max: 0.1 } }, 'mlp_config_default');
    assert.match(none.unmet!, /^No measurement of 'mlp' meets the constraints \(p99 latency ≤ 0\.1 ms\)\. The closest is mlp_config_1 at concurrency 1: p99 latency 0\.90 ms/);
    assert.equal(none.frontier.length, 4, 'the frontier is still drawn');
    assert.ok(none.throughputOptimized && none.latencyOptimized, 'best-effort recommendations');
    assert.ok(miss(points[0], { perf_latency_p99: { max: 0.5 } }) > 0);
  });
});
