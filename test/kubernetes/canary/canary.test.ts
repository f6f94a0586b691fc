/**
 * Canary rollouts of a model version (NereidModel.spec.canary) end to end: the operator in this
 * process with a real Prometheus scraping two real server pods, a load generator sending
 * unversioned requests to both pods, and Python model versions.
 *
 * A healthy canary goes 10% → 50% → 100% and is promoted: at each step the split of 2,000
 * answers is within 3 points of the weight, and no request is lost or fails. A canary version
 * that fails every 5th request is rolled back at the first analysis: no request is lost, only the
 * canary's requests fail, and the stable version serves throughout and after.
 *
 * Needs /usr/bin/python3 with numpy, /usr/bin/prometheus and the Kubernetes tier's servers.
 */
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RESOURCES, type KubeClient } from '@nereid/operator';
import { requirePython } from '../../helpers/python.js';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { startLoad, type LoadResult, type LoadRun } from '../helpers/load.js';
import { startPrometheus, type Prometheus } from '../helpers/prometheus.js';
import { adminClient, getObject, installCrds, operatorUser, serverPods, startOperator, type InProcessOperator, type Json } from '../operator/setup.js';

const NS = 'default';
const SERVER = 'canaries';
const RATE = 140;

/** A model that answers OUT = IN; with `failEvery`, every failEvery-th request of an instance raises. */
const modelPy = (failEvery: number): string => `
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.count = 0

    def execute(self, requests):
        out = []
        for request in requests:
            self.count += 1
            if ${failEvery} and self.count % ${failEvery} == 0:
                raise pb_utils.TritonModelException("canary fault: request %d refused" % self.count)
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", x)]))
        return out
`;

/** Versions 1 and 2 of a Python model; the config serves version 1 (the stable one) only. */
async function writeModel(repo: string, name: string, failEvery2: number): Promise<void> {
  await mkdir(join(repo, name, '1'), { recursive: true });
  await mkdir(join(repo, name, '2'), { recursive: true });
  await writeFile(
    join(repo, name, 'config.pbtxt'),
    `name: "${name}"
backend: "python"
max_batch_size: 0
version_policy: { specific: { versions: [1] } }
input [ { name: "IN", data_type: TYPE_INT32, dims: [ 1 ] } ]
output [ { name: "OUT", data_type: TYPE_INT32, dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU, count: 1 } ]
`,
  );
  await writeFile(join(repo, name, '1', 'model.py'), modelPy(0));
  await writeFile(join(repo, name, '2', 'model.py'), modelPy(failEvery2));
}

const BODY = { inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: [7] }] };

/** What `load` counted since `since` (a stats() snapshot); every answer counts once, in flight or not. */
const since = (load: LoadRun, since: LoadResult): LoadResult => {
  const now = load.stats();
  const minus = <K>(x: Map<K, number>, y: Map<K, number>) => {
    const m = new Map<K, number>();
    for (const [k, v] of x) if (v - (y.get(k) ?? 0) !== 0) m.set(k, v - (y.get(k) ?? 0));
    return m;
  };
  return {
    sent: now.sent - since.sent,
    ok: now.ok - since.ok,
    errors: minus(now.errors, since.errors),
    errorBodies: now.errorBodies.slice(since.errorBodies.length),
    byVersion: minus(now.byVersion, since.byVersion),
    byTarget: minus(now.byTarget, since.byTarget),
    lost: now.lost.slice(since.lost.length),
  };
};
const errorCount = (r: LoadResult): number => [...r.errors.values()].reduce((s, n) => s + n, 0);

describe('canary rollouts of a model version', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let admin: KubeClient;
  let operator: InProcessOperator;
  let prometheus: Prometheus;
  let repo: string;
  let ips: string[];

  const model = (name: string): Promise<Json | undefined> => getObject(admin, RESOURCES.nereidModel, NS, name);
  const canaryOf = async (name: string): Promise<Json | undefined> => (await model(name))?.status?.canary;
  const index = async (ip: string): Promise<Json[]> => (await (await fetch(`http://${ip}:8000/v2/repository/index`, { method: 'POST', body: '{}' })).json()) as Json[];
  const events = async (name: string): Promise<Json[]> => {
    const list = await admin.list(`/api/v1/namespaces/${NS}/events`);
    return (list.items as Json[])
      .filter((e) => e.involvedObject?.kind === 'NereidModel' && e.involvedObject?.name === name)
      .sort((a, b) => String(a.metadata.name).localeCompare(String(b.metadata.name)));
  };
  const startCanary = (name: string, canary: Json) =>
    admin.patch(`/apis/nereid.dev/v1alpha1/namespaces/${NS}/nereidmodels/${name}`, 'merge', { spec: { canary } });
  const loadOn = (name: string): LoadRun => {
    let next = 0;
    return startLoad({ target: () => `http://${ips[next++ % ips.length]}:8000`, model: name, body: BODY, rate: RATE, maxInFlight: 32 });
  };

  before(async () => {
    await requirePython(['numpy']);
    repo = await mkdtemp(join(tmpdir(), 'nereid-canary-'));
    await writeModel(repo, 'healthy', 0);
    await writeModel(repo, 'flaky', 5);
    cluster = await startCluster();
    await installCrds(cluster);
    admin = adminClient(cluster);
    kubelet = await startKubelet(cluster, { namespace: NS });
    prometheus = await startPrometheus(cluster, { namespaces: [NS] });
    operator = await startOperator(await operatorUser(cluster), { prometheusUrl: prometheus.url });
    await cluster.apply([
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: SERVER, namespace: NS },
        spec: { replicas: 2, modelRepository: { volume: { hostPath: { path: repo, type: 'Directory' } } }, drainSeconds: 0 },
      },
      ...['healthy', 'flaky'].map((name) => ({
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidModel',
        metadata: { name, namespace: NS },
        spec: { server: SERVER, source: { repository: {} } },
      })),
    ]);
    const pods = await waitFor(
      'two ready pods serving both models',
      async () => {
        const list = await serverPods(admin, NS, SERVER);
        const ready = list.filter((p: Json) => p.status?.conditions?.some((c: Json) => c.type === 'Ready' && c.status === 'True'));
        return ready.length === 2 ? ready : undefined;
      },
      120_000,
    );
    ips = pods.map((p: Json) => p.status.podIP as string).sort();
    await waitFor('both pods scraped', async () => (await prometheus.targets()).filter((t) => t.health === 'up').length === 2, 60_000);
  });
  after(async () => {
    await operator?.stop();
    await prometheus?.stop();
    await kubelet?.stop();
    admin?.close();
    await cluster?.stop();
    if (repo) await rm(repo, { recursive: true, force: true });
  });

  it('promotes a healthy canary through 10 → 50 → 100 with the split within 3 points at each step and no request lost', async () => {
    const load = loadOn('healthy');
    let total: LoadResult;
    try {
      await new Promise((r) => setTimeout(r, 2000));
      const before = load.stats();
      assert.deepEqual([...before.byVersion.keys()], ['1'], 'before the canary every answer is the stable version');

      await startCanary('healthy', { version: 2, steps: [10, 50, 100], intervalSeconds: 25, analysis: { maxErrorRate: 0.01, maxLatencyRatio: 20, minRequests: 20 } });
      const splits: string[] = [];
      for (const [step, weight] of [10, 50, 100].entries()) {
        const at = await waitFor(
          `step ${step + 1} (${weight}%) serving on every pod`,
          async () => {
            const c = await canaryOf('healthy');
            return c?.phase === 'Progressing' && c.step === step && c.stepStartTime ? c : undefined;
          },
          120_000,
        );
        assert.equal(at.weight, weight);
        const start = load.stats();
        const window = await waitFor(`2,000 answers at ${weight}%`, async () => {
          const w = since(load, start);
          return w.ok + errorCount(w) >= 2000 ? w : undefined;
        }, 60_000);
        const still = await canaryOf('healthy');
        assert.equal(still?.stepStartTime, at.stepStartTime, `the step at ${weight}% lasted until 2,000 answers were counted`);
        assert.equal(still?.weight, weight);
        const canaryShare = ((window.byVersion.get('2') ?? 0) * 100) / window.ok;
        splits.push(`${weight}%: ${canaryShare.toFixed(2)}% of ${window.ok}`);
        assert.ok(Math.abs(canaryShare - weight) <= 3, `at ${weight}% the canary answered ${canaryShare.toFixed(2)}% of ${window.ok} requests`);
        assert.equal((window.byVersion.get('1') ?? 0) + (window.byVersion.get('2') ?? 0), window.ok);
      }
      console.log(`canary split by step: ${splits.join('; ')}`);

      const promoted = await waitFor('Promoted', async () => {
        const c = await canaryOf('healthy');
        return c?.phase === 'Promoted' ? c : undefined;
      }, 120_000);
      for (const ip of ips) {
        const entries = (await index(ip)).filter((e) => e.name === 'healthy');
        assert.deepEqual(entries.filter((e) => e.state === 'READY').map((e) => e.version), ['2'], `${ip}: only the canary version serves`);
      }
      const promotedAt = load.stats();
      await new Promise((r) => setTimeout(r, 2000));
      const after = since(load, promotedAt);
      assert.ok(after.ok > 0);
      assert.deepEqual([...after.byVersion.keys()], ['2'], 'after promotion every answer is the canary version');

      assert.deepEqual(
        promoted.transitions.map((t: Json) => `${t.reason}:${t.phase}:${t.weight}`),
        ['CanaryStarted:Progressing:10', 'StepAdvanced:Progressing:50', 'StepAdvanced:Progressing:100', 'Promoting:Promoting:100', 'Promoted:Promoted:100'],
      );
      assert.equal(promoted.analysis.result, 'Passed');
      assert.equal(promoted.analysis.step, 2);
      assert.equal(promoted.analysis.canaryFailures, 0);
      assert.ok(promoted.analysis.canaryRequests >= 2000, `the last step's analysis counted ${promoted.analysis.canaryRequests} canary requests`);
      assert.equal(typeof promoted.stableP99Us, 'number', 'the stable p99 of the earlier steps is the baseline at 100%');
      assert.equal(typeof promoted.analysis.latencyRatio, 'number');
      const m = (await model('healthy'))!;
      const condition = m.status.conditions.find((c: Json) => c.type === 'Canary');
      assert.equal(condition.status, 'True');
      assert.equal(condition.reason, 'Promoted');
      assert.equal(m.status.conditions.find((c: Json) => c.type === 'Ready').status, 'True');
      for (const p of m.status.pods) assert.deepEqual(p.versions, [2]);
      const reasons = await waitFor('the Promoted Event', async () => {
        const r = (await events('healthy')).map((e) => e.reason);
        return r.includes('Promoted') ? r : undefined;
      });
      for (const reason of ['CanaryStarted', 'CanaryStep', 'AnalysisPassed', 'StepAdvanced', 'Promoting', 'Promoted']) assert.ok(reasons.includes(reason), `Event ${reason} in ${reasons.join(', ')}`);
      assert.equal(reasons.filter((r) => r === 'CanaryStep').length, 3);
      assert.equal(reasons.filter((r) => r === 'AnalysisPassed').length, 3);
    } finally {
      total = await load.stop();
    }
    assert.deepEqual(total.lost, [], 'no request lost');
    assert.equal(errorCount(total), 0, total.errorBodies.join('\n'));
    assert.equal(total.ok, total.sent);
  });

  it('rolls back a canary that fails 20% of its requests at the first analysis, losing no request, with the stable version serving throughout', async () => {
    const load = loadOn('flaky');
    let total: LoadResult;
    try {
      await new Promise((r) => setTimeout(r, 1000));
      await startCanary('flaky', { version: 2, steps: [10, 50, 100], intervalSeconds: 5, analysis: { maxErrorRate: 0.05, minRequests: 20 } });
      const rolledBack = await waitFor('RolledBack', async () => {
        const c = await canaryOf('flaky');
        return c?.phase === 'RolledBack' ? c : undefined;
      }, 120_000);
      const during = load.stats();
      assert.ok((during.byVersion.get('2') ?? 0) > 0, 'the canary served some requests');
      assert.ok((during.byVersion.get('1') ?? 0) > (during.byVersion.get('2') ?? 0) * 5, 'the stable version served the rest');

      assert.deepEqual(
        rolledBack.transitions.map((t: Json) => `${t.reason}:${t.phase}:${t.weight}`),
        ['CanaryStarted:Progressing:10', 'AnalysisFailed:RollingBack:0', 'RolledBack:RolledBack:0'],
      );
      const a = rolledBack.analysis;
      assert.equal(a.result, 'Failed');
      assert.equal(a.step, 0, 'the first analysis failed');
      assert.ok(a.errorRate > 0.1 && a.errorRate < 0.3, `error rate ${a.errorRate}`);
      assert.equal(a.stableFailures, 0);
      assert.match(a.message, /exceeds maxErrorRate 0.05/);

      await waitFor('version 2 unloaded from both pods', async () => {
        for (const ip of ips) {
          const ready = (await index(ip)).filter((e) => e.name === 'flaky' && e.state === 'READY').map((e) => e.version);
          if (ready.join() !== '1') return false;
        }
        return true;
      });
      const unloaded = load.stats();
      await new Promise((r) => setTimeout(r, 2000));
      const after = since(load, unloaded);
      assert.ok(after.ok > 0);
      assert.equal(errorCount(after), 0);
      assert.deepEqual([...after.byVersion.keys()], ['1'], 'after the rollback every answer is the stable version');

      const m = (await model('flaky'))!;
      const condition = m.status.conditions.find((c: Json) => c.type === 'Canary');
      assert.equal(condition.status, 'False');
      assert.equal(condition.reason, 'RolledBack');
      const reasons = await waitFor('the RolledBack Event', async () => {
        const r = (await events('flaky')).map((e) => e.reason);
        return r.includes('RolledBack') ? r : undefined;
      });
      for (const reason of ['CanaryStarted', 'CanaryStep', 'AnalysisFailed', 'RolledBack']) assert.ok(reasons.includes(reason), `Event ${reason} in ${reasons.join(', ')}`);
      assert.ok(!reasons.includes('StepAdvanced'));
    } finally {
      total = await load.stop();
    }
    assert.deepEqual(total.lost, [], 'no request lost');
    assert.equal(total.ok + errorCount(total), total.sent, 'every request answered');
    assert.deepEqual([...total.errors.keys()], [500]);
    const failed = errorCount(total);
    assert.ok(failed > 0);
    for (const body of total.errorBodies) assert.match(body, /canary fault: request \d+ refused/, 'only the canary version fails');
    const stableFailures = await prometheus.query(`sum(max_over_time(nv_inference_request_failure{namespace="${NS}",model="flaky",version="1"}[10m]))`);
    assert.equal(stableFailures[0]?.value, 0, 'the stable version failed no request');
    const canaryAnswers = total.byVersion.get('2') ?? 0;
    assert.ok(Math.abs(failed - (canaryAnswers + failed) / 5) <= 4, `${failed} failures of ${canaryAnswers + failed} canary requests: one in five`);
  });
});
