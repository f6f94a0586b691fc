import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  RECHECK_MS,
  advanceCanary,
  analysisDue,
  analysisQueries,
  canaryCondition,
  canaryPlan,
  canaryPlanError,
  judgeStep,
  queryStep,
  sameRun,
  servingOf,
  startCanary,
  type AnalysisSamples,
  type CanaryPlan,
} from './canary.js';
import type { ControllerContext } from './context.js';
import { canaryRequest, canaryRun, resolveSource } from './model-controller.js';
import { PrometheusClient } from './prometheus.js';
import type { CanaryAnalysis, CanaryStatus, NereidModel, NereidServer } from './types.js';

const T0 = new Date('2026-01-01T00:00:00Z');
const at = (seconds: number): Date => new Date(T0.getTime() + seconds * 1000);
const plan = canaryPlan({ version: 2, steps: [10, 50, 100], intervalSeconds: 30, analysis: { maxErrorRate: 0.01, minRequests: 20, maxLatencyRatio: 1.5 } });

const samples = (byVersion: Record<string, { ok?: number; failed?: number; p99?: number }>): AnalysisSamples => {
  const out: AnalysisSamples = { success: new Map(), failure: new Map(), p99: new Map() };
  for (const [v, s] of Object.entries(byVersion)) {
    if (s.ok !== undefined) out.success.set(v, s.ok);
    if (s.failed !== undefined) out.failure.set(v, s.failed);
    if (s.p99 !== undefined) out.p99.set(v, s.p99);
  }
  return out;
};

/** Runs a status to its next step's start: applied, then the analysis at the interval's end. */
function stepThrough(p: CanaryPlan, status: CanaryStatus, start: number, analysis: (s: CanaryStatus) => CanaryAnalysis) {
  const started = advanceCanary(p, status, { now: at(start), applied: true });
  assert.equal(started.status.stepStartTime, at(start).toISOString().replace('.000', ''));
  assert.deepEqual(started.events.map((e) => e.reason), ['CanaryStep']);
  assert.equal(started.requeueAfterMs, p.intervalSeconds * 1000);
  const end = start + p.intervalSeconds;
  assert.ok(analysisDue(p, started.status, at(end)));
  assert.ok(!analysisDue(p, started.status, at(end - 1)));
  return advanceCanary(p, started.status, { now: at(end), applied: true, analysis: analysis(started.status) });
}

const healthy = (s: CanaryStatus, now: Date): CanaryAnalysis =>
  judgeStep(plan, s, samples({ '1': { ok: 900, failed: 0, p99: 1000 }, '2': { ok: 100, failed: 0, p99: 1200 } }), { now, windowSeconds: 30 });

describe('canary plan', () => {
  it('fills in the defaults', () => {
    assert.deepEqual(canaryPlan({ version: 3 }), { version: 3, steps: [10, 50, 100], intervalSeconds: 30, maxErrorRate: 0.01, minRequests: 20 });
  });

  it('rejects a canary equal to the stable version, steps that do not ascend, or do not end with 100', () => {
    assert.equal(canaryPlanError(plan, 1), undefined);
    assert.match(canaryPlanError(plan, 2)!, /canary.version 2 is the stable version/);
    assert.match(canaryPlanError(canaryPlan({ version: 2, steps: [50, 10, 100] }), 1)!, /must ascend: steps\[1\] = 10 follows 50/);
    assert.match(canaryPlanError(canaryPlan({ version: 2, steps: [10, 50] }), 1)!, /must end with 100/);
    assert.match(canaryPlanError(canaryPlan({ version: 2, steps: [0, 100] }), 1)!, /steps\[0\] is 0/);
  });
});

describe('canary state machine', () => {
  it('serves [stable, canary] with the step weights, 0 while rolling back, one version at the end', () => {
    const s = startCanary(plan, 1, T0);
    assert.deepEqual(servingOf(s), { versions: [1, 2], weights: { 1: 90, 2: 10 } });
    assert.deepEqual(servingOf({ ...s, weight: 50 }), { versions: [1, 2], weights: { 1: 50, 2: 50 } });
    assert.deepEqual(servingOf({ ...s, phase: 'RollingBack', weight: 0 }), { versions: [1, 2], weights: { 1: 100, 2: 0 } });
    assert.deepEqual(servingOf({ ...s, phase: 'RolledBack' }), { versions: [1], weights: { 1: 100 } });
    assert.deepEqual(servingOf({ ...s, phase: 'Promoting' }), { versions: [2], weights: { 2: 100 } });
    assert.deepEqual(servingOf({ ...s, phase: 'Promoted' }), { versions: [2], weights: { 2: 100 } });
  });

  it('waits until every pod serves the step before its clock starts', () => {
    const s = startCanary(plan, 1, T0);
    assert.equal(s.phase, 'Progressing');
    assert.equal(s.transitions[0].reason, 'CanaryStarted');
    const waiting = advanceCanary(plan, s, { now: at(5), applied: false });
    assert.equal(waiting.status.stepStartTime, undefined);
    assert.deepEqual(waiting.events, []);
    assert.ok(!analysisDue(plan, waiting.status, at(500)));
  });

  it('promotes a healthy canary through every step, recording each transition', () => {
    let s = startCanary(plan, 1, T0);
    const reasons: string[] = [];
    for (const [i, weight] of [10, 50, 100].entries()) {
      assert.equal(s.weight, weight);
      assert.equal(s.step, i);
      const d = stepThrough(plan, s, i * 100, (st) => healthy(st, at(i * 100 + 30)));
      reasons.push(...d.events.map((e) => e.reason));
      assert.equal(d.requeueAfterMs, 0, 'the next weights are loaded at once');
      s = d.status;
    }
    assert.equal(s.phase, 'Promoting');
    assert.deepEqual(reasons, ['AnalysisPassed', 'StepAdvanced', 'AnalysisPassed', 'StepAdvanced', 'AnalysisPassed', 'Promoting']);
    assert.equal(advanceCanary(plan, s, { now: at(400), applied: false }).status.phase, 'Promoting');
    const done = advanceCanary(plan, s, { now: at(401), applied: true });
    assert.equal(done.status.phase, 'Promoted');
    assert.deepEqual(done.events.map((e) => e.reason), ['Promoted']);
    assert.deepEqual(
      done.status.transitions.map((t) => `${t.reason}:${t.weight}`),
      ['CanaryStarted:10', 'StepAdvanced:50', 'StepAdvanced:100', 'Promoting:100', 'Promoted:100'],
    );
    assert.deepEqual(canaryCondition(done.status), { type: 'Canary', status: 'True', reason: 'Promoted', message: done.status.message });
    assert.equal(advanceCanary(plan, done.status, { now: at(500), applied: true }).requeueAfterMs, -1);
  });

  it('rolls back at the first failing analysis: weight 0 first, then the canary unloaded', () => {
    const s = startCanary(plan, 1, T0);
    const d = stepThrough(plan, s, 0, (st) =>
      judgeStep(plan, st, samples({ '1': { ok: 900, failed: 0 }, '2': { ok: 80, failed: 20 } }), { now: at(30), windowSeconds: 30 }),
    );
    assert.equal(d.status.phase, 'RollingBack');
    assert.equal(d.status.weight, 0);
    assert.equal(d.status.analysis?.result, 'Failed');
    assert.deepEqual(d.events.map((e) => [e.type, e.reason]), [['Warning', 'AnalysisFailed']]);
    assert.match(d.events[0].message, /rolling back canary version 2 at 10%: canary error rate 0.2 \(20\/100\) exceeds maxErrorRate 0.01/);
    const back = advanceCanary(plan, d.status, { now: at(31), applied: true });
    assert.equal(back.status.phase, 'RolledBack');
    assert.deepEqual(servingOf(back.status).versions, [1]);
    assert.deepEqual(canaryCondition(back.status).status, 'False');
  });

  it('rolls back when loading the canary fails', () => {
    const d = advanceCanary(plan, startCanary(plan, 1, T0), { now: at(1), applied: false, loadError: 'version 2 has no model file' });
    assert.equal(d.status.phase, 'RollingBack');
    assert.deepEqual(d.events.map((e) => e.reason), ['LoadFailed']);
    assert.match(d.status.message, /version 2 has no model file/);
  });

  it('extends a step with too few canary requests, with one Event, and judges it once there are enough', () => {
    let s = advanceCanary(plan, startCanary(plan, 1, T0), { now: at(0), applied: true }).status;
    const few = judgeStep(plan, s, samples({ '1': { ok: 90, failed: 0 }, '2': { ok: 5, failed: 0 } }), { now: at(30), windowSeconds: 30 });
    assert.equal(few.result, 'Inconclusive');
    assert.match(few.message, /5 canary requests in 30s, fewer than minRequests 20/);
    let d = advanceCanary(plan, s, { now: at(30), applied: true, analysis: few });
    assert.equal(d.status.phase, 'Progressing');
    assert.equal(d.status.step, 0);
    assert.equal(d.requeueAfterMs, RECHECK_MS);
    assert.deepEqual(d.events.map((e) => e.reason), ['AnalysisInconclusive']);
    d = advanceCanary(plan, d.status, { now: at(35), applied: true, analysis: { ...few, time: at(35).toISOString() } });
    assert.deepEqual(d.events, [], 'the same extension is not reported again');
    s = d.status;
    d = advanceCanary(plan, s, { now: at(40), applied: true, analysis: healthy(s, at(40)) });
    assert.equal(d.status.step, 1);
  });

  it('fails a canary whose p99 exceeds maxLatencyRatio times the stable p99, and uses the last stable p99 at 100%', () => {
    const s = { ...startCanary(plan, 1, T0), step: 2, weight: 100 };
    const slow = judgeStep(plan, s, samples({ '1': { ok: 500, p99: 1000 }, '2': { ok: 500, p99: 2000 } }), { now: at(30), windowSeconds: 30 });
    assert.equal(slow.result, 'Failed');
    assert.equal(slow.latencyRatio, 2);
    assert.match(slow.message, /p99 2000µs vs stable 1000µs \(ratio 2\) exceeds maxLatencyRatio 1.5/);
    const alone = samples({ '1': { ok: 0, p99: NaN }, '2': { ok: 1000, p99: 1400 } });
    const baseline = judgeStep(plan, s, alone, { now: at(30), windowSeconds: 30, baselineP99Us: 1000 });
    assert.equal(baseline.result, 'Passed');
    assert.equal(baseline.stableP99Us, 1000);
    const none = judgeStep(plan, s, alone, { now: at(30), windowSeconds: 30 });
    assert.equal(none.result, 'Passed');
    assert.match(none.message, /p99 not compared/);
  });

  it('keeps the stable p99 of the last analysis with stable requests as the baseline', () => {
    const s = advanceCanary(plan, startCanary(plan, 1, T0), { now: at(0), applied: true }).status;
    const d = advanceCanary(plan, s, { now: at(30), applied: true, analysis: healthy(s, at(30)) });
    assert.equal(d.status.stableP99Us, 1000);
  });

  it('continues a run only for the same canary and stable version', () => {
    const s = startCanary(plan, 1, T0);
    assert.ok(sameRun(s, plan, 1));
    assert.ok(sameRun(s, plan, undefined));
    assert.ok(!sameRun(s, plan, 3));
    assert.ok(!sameRun(s, canaryPlan({ version: 4 }), 1));
    assert.ok(!sameRun(undefined, plan, 1));
  });
});

describe('canary analysis queries', () => {
  const scope = { namespace: 'prod', pods: ['fleet-7d9f-abc', 'fleet-7d9f-x.y'], model: 'resnet"50', stable: 1, canary: 2 };

  it('select the server pods, model and both versions, over the window', () => {
    const q = analysisQueries(scope, 29.2);
    const sel = 'namespace="prod",pod=~"fleet-7d9f-abc|fleet-7d9f-x\\\\.y",model="resnet\\"50",version=~"1|2"';
    assert.equal(q.success, `sum by (version) (increase(nv_inference_request_success{${sel}}[30s]))`);
    assert.equal(q.failure, `sum by (version) (increase(nv_inference_request_failure{${sel}}[30s]))`);
    assert.equal(q.p99, `histogram_quantile(0.99, sum by (version, le) (rate(nv_inference_request_histogram_us_bucket{${sel}}[30s])))`);
    assert.match(analysisQueries({ ...scope, pods: [] }, 5).success, /pod=~"\$\^"/);
  });

  it('read Prometheus answers by version, and fail with PROMETHEUS_QUERY when it cannot be reached', async () => {
    const { createServer } = await import('node:http');
    const seen: string[] = [];
    const server = createServer((req, res) => {
      const query = new URL(req.url ?? '', 'http://x').searchParams.get('query') ?? '';
      seen.push(query);
      const value = query.startsWith('histogram_quantile') ? ['1200', 'NaN'] : query.includes('failure') ? ['0', '3'] : ['97', '900'];
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ status: 'success', data: { resultType: 'vector', result: [
        { metric: { version: '2' }, value: [1, value[0]] },
        { metric: { version: '1' }, value: [1, value[1]] },
      ] } }));
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
      const got = await queryStep(new PrometheusClient(url), scope, 30, T0);
      assert.equal(seen.length, 3);
      assert.deepEqual([...got.success], [['2', 97], ['1', 900]]);
      assert.deepEqual([...got.failure], [['2', 0], ['1', 3]]);
      assert.equal(got.p99.get('2'), 1200);
      assert.ok(Number.isNaN(got.p99.get('1')));
      const a = judgeStep(plan, { step: 0, weight: 10, stableVersion: 1, version: 2 }, got, { now: T0, windowSeconds: 30 });
      assert.equal(a.result, 'Passed');
      assert.equal(a.canaryRequests, 97);
      assert.equal(a.stableRequests, 903);
      assert.match(a.message, /p99 not compared/, 'a NaN stable p99 is no baseline');
    } finally {
      server.close();
    }
    await assert.rejects(queryStep(new PrometheusClient('http://127.0.0.1:1', { timeoutMs: 2000 }), scope, 30, T0), { code: 'PROMETHEUS_QUERY' });
  });
});

describe('the canary of a NereidModel', () => {
  const ctx = (prometheus: boolean) => ({ prometheus: prometheus ? new PrometheusClient('http://127.0.0.1:1') : undefined }) as unknown as ControllerContext;
  const nm = (spec: Partial<NereidModel['spec']>): NereidModel => ({
    apiVersion: 'nereid.dev/v1alpha1',
    kind: 'NereidModel',
    metadata: { name: 'm', namespace: 'prod' },
    spec: { server: 'fleet', source: { repository: {} }, canary: { version: 2 }, ...spec },
  });
  const idx = (...entries: [string, string, string][]) => entries.map(([name, version, state]) => ({ name, version, state }));

  it('waits without Prometheus, without a served stable version, and refuses a canary equal to the stable one', () => {
    assert.deepEqual(canaryRun(ctx(false), nm({}), undefined, [idx(['m', '1', 'READY'])], 'm', T0).condition?.reason, 'PrometheusNotConfigured');
    const waiting = canaryRun(ctx(true), nm({}), undefined, [idx(['m', '1', 'UNAVAILABLE']), new Error('refused')], 'm', T0);
    assert.equal(waiting.run, undefined);
    assert.equal(waiting.condition?.reason, 'WaitingForStable');
    const same = canaryRun(ctx(true), nm({ versions: [2] }), undefined, [], 'm', T0);
    assert.equal(same.condition?.reason, 'InvalidCanary');
    assert.match(same.condition!.message, /canary.version 2 is the stable version/);
  });

  it('starts a run against versions[0], or the highest READY version other than the canary', () => {
    const fromVersions = canaryRun(ctx(true), nm({ versions: [3], canary: { version: 4 } }), undefined, [], 'm', T0);
    assert.equal(fromVersions.started, true);
    assert.equal(fromVersions.run?.status.stableVersion, 3);
    const fromIndex = canaryRun(ctx(true), nm({}), undefined, [idx(['m', '1', 'READY'], ['m', '3', 'UNAVAILABLE'], ['m', '2', 'READY'], ['other', '7', 'READY'])], 'm', T0);
    assert.equal(fromIndex.run?.status.stableVersion, 1);
    assert.equal(fromIndex.run?.status.phase, 'Progressing');
  });

  it('continues the stored run, also once only the canary is served (promoted)', () => {
    const promoted: CanaryStatus = { ...startCanary(plan, 1, T0), phase: 'Promoted', step: 2, weight: 100 };
    const r = canaryRun(ctx(true), nm({}), promoted, [idx(['m', '2', 'READY'])], 'm', at(600));
    assert.equal(r.started, undefined);
    assert.equal(r.run?.status, promoted);
    const next = canaryRun(ctx(true), nm({ canary: { version: 3 } }), promoted, [idx(['m', '2', 'READY'])], 'm', at(600));
    assert.equal(next.started, true, 'a new canary version is a new run');
    assert.equal(next.run?.status.stableVersion, 2);
  });
});

describe('the load a NereidModel sends', () => {
  const ctx = {} as unknown as ControllerContext;
  const server = { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidServer', metadata: { name: 'fleet', namespace: 'prod' }, spec: { modelRepository: { uri: 's3://bucket/models' } } } as unknown as NereidServer;
  const nm = (spec: Partial<NereidModel['spec']>): NereidModel => ({
    apiVersion: 'nereid.dev/v1alpha1',
    kind: 'NereidModel',
    metadata: { name: 'm', namespace: 'prod' },
    spec: { server: 'fleet', source: { repository: {} }, ...spec },
  });
  const serving = { versions: [1, 2], weights: { '1': 90, '2': 10 } };

  it('versions without spec.config go as the version_policy parameter, leaving config.pbtxt in force', async () => {
    assert.deepEqual((await resolveSource(ctx, nm({ versions: [3, 2] }), server)).request, { versionPolicy: { specific: { versions: [3, 2] } } });
    assert.deepEqual((await resolveSource(ctx, nm({ versions: [3], source: { uri: 's3://bucket/models/m' } }), server)).request, { versionPolicy: { specific: { versions: [3] } } });
    assert.deepEqual((await resolveSource(ctx, nm({}), server)).request, {});
    assert.deepEqual(canaryRequest({ versionPolicy: { specific: { versions: [1] } } }, serving), { versionPolicy: { specific: { versions: [1, 2] } }, versionWeights: serving.weights });
    assert.deepEqual(canaryRequest({}, serving), { versionPolicy: { specific: { versions: [1, 2] } }, versionWeights: serving.weights });
  });

  it('with spec.config the versions stay in the config it sends', async () => {
    const config = { max_batch_size: 4 };
    const request = (await resolveSource(ctx, nm({ versions: [1], config }), server)).request;
    assert.deepEqual(request, { config: { max_batch_size: 4, version_policy: { specific: { versions: [1] } } } });
    assert.deepEqual(canaryRequest(request, serving), {
      config: { max_batch_size: 4, version_policy: { specific: { versions: [1, 2] } } },
      versionWeights: serving.weights,
    });
  });
});
