/**
 * NereidServer autoscaling against a real API server, kube-controller-manager and Prometheus,
 * with pods run as real Nereid processes.
 *
 * Mode operator: a rate-driven load moves the replica count up to maxReplicas and, once it drops,
 * back to minReplicas after the scale-down stabilisation window; every decision the operator
 * recorded (watched on the NereidServer, none missed) is replayed through the pure algorithm from
 * its recorded samples and the history before it, and must come out the same; every rescale has
 * its Event. The prometheus-adapter rules of the chart, with the adapter's templates filled in,
 * give the same per-pod values as the operator's own queries.
 *
 * Mode hpa: the operator's HorizontalPodAutoscaler is accepted by the API server, owned by the
 * NereidServer, run by kube-controller-manager's horizontal controller (which reports that no
 * metrics API serves its metric here), and the Deployment's replicas are left to it.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse } from 'yaml';
import {
  HPA_METRIC_NAMES,
  PrometheusClient,
  RESOURCES,
  collectionPath,
  decide,
  historyOf,
  objectPath,
  podLabelMatchers,
  podMetricQuery,
  resolveBehavior,
  type KubeClient,
  type NereidServer,
  type NereidServerAutoscalingStatus,
} from '@nereid/operator';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { startLoad, type LoadRun } from '../helpers/load.js';
import { startPrometheus, type Prometheus } from '../helpers/prometheus.js';
import { CHART, EXAMPLES, adminClient, getObject, installCrds, operatorUser, serverPods, startOperator, type InProcessOperator, type Json } from '../operator/setup.js';

const NS = 'default';
const SIMPLE_BODY = {
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
  ],
};
const volume = { hostPath: { path: EXAMPLES, type: 'Directory' } };
const isReady = (p: Json): boolean => p.status?.conditions?.some((c: Json) => c.type === 'Ready' && c.status === 'True') === true;

/** Every version of one NereidServer the API server reports, from a watch started before it exists. */
function watchServer(admin: KubeClient, name: string): { versions: NereidServer[]; stop(): void } {
  const versions: NereidServer[] = [];
  const abort = new AbortController();
  void (async () => {
    let resourceVersion: string | undefined;
    while (!abort.signal.aborted) {
      try {
        await admin.watch<NereidServer>(
          collectionPath(RESOURCES.nereidServer, NS),
          { fieldSelector: `metadata.name=${name}`, timeoutSeconds: 900, allowWatchBookmarks: false, ...(resourceVersion ? { resourceVersion } : {}) },
          (event) => {
            resourceVersion = event.object.metadata.resourceVersion;
            if (event.type === 'ADDED' || event.type === 'MODIFIED') versions.push(event.object);
          },
          abort.signal,
        );
      } catch {
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  })();
  return { versions, stop: () => abort.abort() };
}

describe('NereidServer autoscaling', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let admin: KubeClient;
  let operator: InProcessOperator;
  let prometheus: Prometheus;
  let kubeconfig: string;

  before(async () => {
    cluster = await startCluster();
    await installCrds(cluster);
    admin = adminClient(cluster);
    kubelet = await startKubelet(cluster, { namespace: NS });
    prometheus = await startPrometheus(cluster, { namespaces: [NS] });
    kubeconfig = await operatorUser(cluster);
    operator = await startOperator(kubeconfig, { prometheusUrl: prometheus.url });
  });
  after(async () => {
    await operator?.stop();
    await prometheus?.stop();
    await kubelet?.stop();
    admin?.close();
    await cluster?.stop();
  });

  it('mode operator: load up scales to maxReplicas, load down back to minReplicas, each decision as HPA decides it', async (t) => {
    const watch = watchServer(admin, 'scaled');
    const autoscaling = {
      mode: 'operator',
      metric: 'inferenceRate',
      target: '10',
      intervalSeconds: 2,
      windowSeconds: 6,
      behavior: { scaleDown: { stabilizationWindowSeconds: 6 } },
    };
    await cluster.apply([
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: 'scaled', namespace: NS },
        // drainSeconds: a pod the scale-down removes serves on until the balancer below has dropped it.
        spec: { replicas: 1, minReplicas: 1, maxReplicas: 4, modelRepository: { volume }, drainSeconds: 2, autoscaling },
      },
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'simple', namespace: NS }, spec: { server: 'scaled', source: { repository: {} } } },
    ]);
    const deploymentReplicas = async (): Promise<number | undefined> => (await getObject(admin, RESOURCES.deployment, NS, 'scaled'))?.spec?.replicas;
    await waitFor('one ready pod', async () => (await serverPods(admin, NS, 'scaled')).filter(isReady).length === 1, 90_000);
    assert.equal(await deploymentReplicas(), 1);

    // A client-side balancer over the ready pods, refreshed twice a second.
    let targets: string[] = [];
    let seen = 0;
    let maxSeen = 1;
    const refresh = setInterval(() => {
      void serverPods(admin, NS, 'scaled')
        .then((pods) => (targets = pods.filter(isReady).map((p) => `http://${p.status.podIP}:8000`)))
        .catch(() => undefined);
      void deploymentReplicas()
        .then((r) => (maxSeen = Math.max(maxSeen, r ?? 0)))
        .catch(() => undefined);
    }, 500);
    let load: LoadRun | undefined;
    try {
      load = startLoad({ target: () => (targets.length ? targets[seen++ % targets.length] : undefined), model: 'simple', body: SIMPLE_BODY, rate: 48 });

      await waitFor('4 ready pods (maxReplicas) under 48 req/s at a target of 10 per replica', async () => (await serverPods(admin, NS, 'scaled')).filter(isReady).length === 4, 180_000);
      // 48 req/s over 4 pods is 12 per pod: HPA asks for 5, maxReplicas holds 4.
      const atMax = await waitFor('the 4 pods sharing the load', async () => {
        const a = watch.versions.at(-1)?.status?.autoscaling;
        return a?.lastDecision?.currentReplicas === 4 && a.lastDecision.pods?.length === 4 && a.lastDecision.pods.every((p) => p.ready && p.value !== undefined) ? a : undefined;
      }, 60_000);
      assert.equal(atMax.lastDecision!.desiredReplicas, 4);
      if (atMax.lastDecision!.recommendation! > 4) assert.equal(atMax.lastDecision!.limitedBy, 'TooManyReplicas');

      // A spec change reconciles the Deployment without its replicas: the autoscaler's count stays.
      await admin.patch(objectPath(RESOURCES.nereidServer, NS, 'scaled'), 'merge', { metadata: { annotations: { 'example.com/touched': 'yes' } } });
      await new Promise((r) => setTimeout(r, 1500));
      assert.equal(await deploymentReplicas(), 4);
      const deployment = (await getObject(admin, RESOURCES.deployment, NS, 'scaled'))!;
      const replicasOwners = (deployment.metadata.managedFields as Json[]).filter((f) => f.fieldsV1?.['f:spec']?.['f:replicas'] !== undefined);
      assert.deepEqual(replicasOwners.map((f) => `${f.manager}/${f.operation}/${f.subresource ?? ''}`), ['nereid-operator/Update/scale']);

      // The chart's prometheus-adapter rules, templates filled in as the adapter does, against the operator's queries.
      const rules = parse(readFileSync(join(CHART, 'files', 'prometheus-adapter-rules.yaml'), 'utf8')) as Json[];
      const pods = (await serverPods(admin, NS, 'scaled')).map((p) => p.metadata.name as string);
      const matchers = podLabelMatchers(NS, pods);
      const client = new PrometheusClient(prometheus.url);
      const at = new Date(Date.now() - 1000);
      const byPod = (samples: { metric: Record<string, string>; value: number }[]) => Object.fromEntries(samples.map((s) => [s.metric.pod, s.value]));
      for (const [metric, name] of Object.entries(HPA_METRIC_NAMES) as [keyof typeof HPA_METRIC_NAMES, string][]) {
        const rule = rules.find((r) => r.name.as === name);
        assert.ok(rule, `a rule serves ${name}`);
        const series = await client.query(`count by (__name__) (${rule.seriesQuery})`, at);
        assert.equal(series.length, 1, `${name}: the seriesQuery finds one series name`);
        assert.match(series[0].metric.__name__, new RegExp(rule.name.matches));
        const query = (rule.metricsQuery as string)
          .replaceAll('<<.Series>>', series[0].metric.__name__)
          .replaceAll('<<.LabelMatchers>>', matchers)
          .replaceAll('<<.GroupBy>>', 'pod');
        const fromRule = byPod(await client.query(query, at));
        const fromOperator = byPod(await client.query(podMetricQuery(metric, matchers, 'pod', 60), at));
        assert.deepEqual(fromRule, fromOperator, `${name}: the adapter rule and the operator agree`);
        assert.deepEqual(Object.keys(fromRule).sort(), [...pods].sort(), `${name}: a value for every pod`);
        if (metric === 'inferenceRate') for (const v of Object.values(fromRule)) assert.ok(v > 0, `${name}: each pod serves part of the load (${v} req/s over the last 60 s)`);
      }

      // An operator without Prometheus decides nothing and says why; a new one with Prometheus
      // continues from the history in status (the replay below checks both).
      const lastNumber = (): number => watch.versions.at(-1)?.status?.autoscaling?.lastDecision?.number ?? 0;
      await operator.stop();
      operator = await startOperator(kubeconfig);
      const blind = await waitFor('a decision without Prometheus', async () => {
        const a = watch.versions.at(-1)?.status?.autoscaling;
        return a?.conditions?.find((c) => c.type === 'ScalingActive' && c.status === 'False' && c.reason === 'NoPrometheus') ? a : undefined;
      });
      assert.equal(blind.lastDecision!.desiredReplicas, 4);
      assert.match(blind.conditions!.find((c) => c.type === 'ScalingActive')!.message, /--prometheus-url/);
      await operator.stop();
      const beforeRestart = lastNumber();
      operator = await startOperator(kubeconfig, { prometheusUrl: prometheus.url });
      await waitFor('a decision by the new operator', async () => lastNumber() > beforeRestart && watch.versions.at(-1)?.status?.autoscaling?.conditions?.some((c) => c.type === 'ScalingActive' && c.status === 'True'));

      // Load down: back to minReplicas once the scale-down window has passed.
      load.setRate(4);
      const downFrom = Date.now();
      await waitFor('back to 1 replica', async () => (await deploymentReplicas()) === 1, 120_000);
      const sent = await load.stop();
      load = undefined;
      assert.equal(sent.lost.length, 0, sent.lost.slice(0, 5).join('\n'));
      assert.ok(maxSeen <= 4, `replicas never above maxReplicas (saw ${maxSeen})`);

      // Every decision, replayed.
      await new Promise((r) => setTimeout(r, 500));
      const decisions = new Map<number, { status: NereidServerAutoscalingStatus }>();
      for (const v of watch.versions) {
        const a = v.status?.autoscaling;
        if (a?.mode === 'operator' && a.lastDecision && !decisions.has(a.lastDecision.number)) decisions.set(a.lastDecision.number, { status: a });
      }
      const numbers = [...decisions.keys()].sort((x, y) => x - y);
      assert.deepEqual(numbers, Array.from({ length: numbers.length }, (_, i) => i + 1), 'every decision seen, in order');
      const behavior = resolveBehavior(autoscaling.behavior as never);
      let previous: NereidServerAutoscalingStatus | undefined;
      const rescales: string[] = [];
      let stabilizedDown = 0;
      for (const n of numbers) {
        const { status } = decisions.get(n)!;
        const d = status.lastDecision!;
        const replay = decide(
          { now: Date.parse(d.time), currentReplicas: d.currentReplicas, minReplicas: 1, maxReplicas: 4, target: 10, tolerance: 0.1, behavior, pods: d.pods, metric: 'inferenceRate' },
          historyOf(previous),
        );
        const what = `decision ${n} (${JSON.stringify(d)})`;
        assert.equal(replay.desiredReplicas, d.desiredReplicas, what);
        assert.equal(replay.metricReplicas, d.recommendation, what);
        assert.equal(replay.stabilizedReplicas, d.stabilizedReplicas, what);
        assert.equal(replay.reason, d.reason, what);
        assert.deepEqual(historyOf(status), replay.history, `${what}: the history it left`);
        assert.ok(d.desiredReplicas >= 1 && d.desiredReplicas <= 4, what);
        t.diagnostic(`decision ${n} at ${d.time}: ${d.currentReplicas} → ${d.desiredReplicas} (average ${d.average?.toFixed(2) ?? '-'}, recommendation ${d.recommendation ?? '-'}, ${d.reason})`);
        if (d.desiredReplicas !== d.currentReplicas) rescales.push(`New size: ${d.desiredReplicas}; reason: ${d.reason}`);
        if (Date.parse(d.time) > downFrom && d.ableToScale === 'ScaleDownStabilized') stabilizedDown++;
        previous = status;
      }
      assert.ok(rescales.some((m) => m.startsWith('New size: 4;')), rescales.join('\n'));
      assert.equal(rescales.at(-1), 'New size: 1; reason: All metrics below target');
      assert.ok(stabilizedDown > 0, 'the scale-down waited for its stabilisation window');

      const events = await waitFor('an Event per rescale', async () => {
        const list = await admin.list(`/api/v1/namespaces/${NS}/events`, { fieldSelector: 'involvedObject.name=scaled,reason=SuccessfulRescale' });
        const items = (list.items as Json[]).sort((a, b) => (a.metadata.creationTimestamp < b.metadata.creationTimestamp ? -1 : 1));
        return items.length >= rescales.length ? items : undefined;
      });
      assert.deepEqual(events.map((e) => e.message).sort(), [...rescales].sort());
      assert.ok(events.every((e) => e.involvedObject.kind === 'NereidServer' && e.type === 'Normal'));
      // A decision whose metric asked for another size that a window held is an Event too.
      const held = (await admin.list(`/api/v1/namespaces/${NS}/events`, { fieldSelector: 'involvedObject.name=scaled,reason=RescaleHeld' })).items as Json[];
      assert.ok(
        held.some((e) => /^Size stays \d+ \(the metric asks for \d+\); held by ScaleDownStabilized: /.test(e.message)),
        held.map((e) => e.message).join('\n'),
      );
      // ScalingActive's transitions: no samples before the first pod was Ready, no Prometheus, and back.
      const active = (await admin.list(`/api/v1/namespaces/${NS}/events`, { fieldSelector: 'involvedObject.name=scaled' })).items as Json[];
      const transitions = active
        .filter((e) => ['FailedGetPodsMetric', 'NoPrometheus', 'ValidMetricFound'].includes(e.reason))
        .sort((a, b) => (a.metadata.creationTimestamp < b.metadata.creationTimestamp ? -1 : a.metadata.creationTimestamp > b.metadata.creationTimestamp ? 1 : 0))
        .map((e) => `${e.type}/${e.reason}`);
      assert.deepEqual(transitions, ['Warning/FailedGetPodsMetric', 'Normal/ValidMetricFound', 'Warning/NoPrometheus', 'Normal/ValidMetricFound']);
    } finally {
      clearInterval(refresh);
      await load?.stop();
      watch.stop();
    }
  });

  it('mode hpa: an autoscaling/v2 HorizontalPodAutoscaler that the API server accepts and the horizontal controller runs; replicas left to it', async () => {
    await cluster.apply([
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: 'hpa-scaled', namespace: NS },
        spec: {
          replicas: 2,
          minReplicas: 2,
          maxReplicas: 5,
          modelRepository: { volume },
          drainSeconds: 0,
          autoscaling: {
            mode: 'hpa',
            metric: 'queueTime',
            target: '2k',
            tolerance: 0.05,
            behavior: { scaleDown: { stabilizationWindowSeconds: 60, policies: [{ type: 'Pods', value: 1, periodSeconds: 30 }] }, scaleUp: { selectPolicy: 'Min' } },
          },
        },
      },
    ]);
    const server = (await getObject(admin, RESOURCES.nereidServer, NS, 'hpa-scaled'))!;
    const hpa = await waitFor('the HorizontalPodAutoscaler', () => getObject(admin, RESOURCES.hpa, NS, 'hpa-scaled'));
    assert.deepEqual(hpa.metadata.ownerReferences, [
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidServer', name: 'hpa-scaled', uid: server.metadata.uid, controller: true, blockOwnerDeletion: true },
    ]);
    assert.deepEqual(hpa.spec.scaleTargetRef, { apiVersion: 'apps/v1', kind: 'Deployment', name: 'hpa-scaled' });
    assert.equal(hpa.spec.minReplicas, 2);
    assert.equal(hpa.spec.maxReplicas, 5);
    assert.deepEqual(hpa.spec.metrics, [{ type: 'Pods', pods: { metric: { name: 'nereid_queue_time_us' }, target: { type: 'AverageValue', averageValue: '2k' } } }]);
    // The API server filled in HPA's defaults around what was given; tolerance is kept (HPAConfigurableTolerance).
    assert.deepEqual(hpa.spec.behavior.scaleDown, { stabilizationWindowSeconds: 60, selectPolicy: 'Max', policies: [{ type: 'Pods', value: 1, periodSeconds: 30 }], tolerance: '50m' });
    assert.deepEqual(hpa.spec.behavior.scaleUp, {
      stabilizationWindowSeconds: 0,
      selectPolicy: 'Min',
      tolerance: '50m',
      policies: [
        { type: 'Pods', value: 4, periodSeconds: 15 },
        { type: 'Percent', value: 100, periodSeconds: 15 },
      ],
    });

    // The Deployment starts at spec.replicas.
    const deployment = async (): Promise<Json> => (await getObject(admin, RESOURCES.deployment, NS, 'hpa-scaled'))!;
    assert.equal((await deployment()).spec.replicas, 2);

    // kube-controller-manager's horizontal controller runs it; no metrics API serves it here.
    const status = await waitFor(
      "the HPA's conditions in status.autoscaling",
      async () => {
        const a = (await getObject(admin, RESOURCES.nereidServer, NS, 'hpa-scaled'))?.status?.autoscaling as NereidServerAutoscalingStatus | undefined;
        return a?.conditions?.some((c) => c.type === 'ScalingActive') ? a : undefined;
      },
      90_000,
    );
    assert.equal(status.mode, 'hpa');
    assert.equal(status.hpa, 'hpa-scaled');
    assert.equal(status.metric, 'queueTime');
    assert.equal(status.target, '2k');
    const active = status.conditions!.find((c) => c.type === 'ScalingActive')!;
    assert.equal(active.status, 'False');
    assert.equal(active.reason, 'FailedGetPodsMetric');
    assert.match(active.message, /nereid_queue_time_us/);

    // What the HPA sets (here: a scale as it writes it) survives the operator's next apply.
    await admin.patch(objectPath(RESOURCES.deployment, NS, 'hpa-scaled', 'scale'), 'merge', { spec: { replicas: 3 } });
    await admin.patch(objectPath(RESOURCES.nereidServer, NS, 'hpa-scaled'), 'merge', { metadata: { annotations: { 'example.com/touched': 'yes' } } });
    await new Promise((r) => setTimeout(r, 1500));
    assert.equal((await deployment()).spec.replicas, 3);

    // Without autoscaling the HPA goes and spec.replicas is the count again.
    await admin.patch(objectPath(RESOURCES.nereidServer, NS, 'hpa-scaled'), 'merge', { spec: { autoscaling: null, replicas: 2 } });
    await waitFor('the HPA deleted', async () => (await getObject(admin, RESOURCES.hpa, NS, 'hpa-scaled')) === undefined);
    await waitFor('replicas back to spec.replicas', async () => (await deployment()).spec.replicas === 2);
    await waitFor('status.autoscaling cleared', async () => (await getObject(admin, RESOURCES.nereidServer, NS, 'hpa-scaled'))?.status?.autoscaling === undefined);
  });

  it('refuses autoscaling without maxReplicas, with minReplicas 0, or with a target that is not a quantity', async () => {
    const attempt = (spec: Json) =>
      cluster.apply(
        [{ apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidServer', metadata: { name: 'bad', namespace: NS }, spec: { modelRepository: { volume }, ...spec } }],
        { dryRun: true },
      );
    const auto = { mode: 'operator', metric: 'inferenceRate', target: '10' };
    await assert.rejects(attempt({ autoscaling: auto }), /autoscaling needs maxReplicas/);
    await assert.rejects(attempt({ replicas: 1, minReplicas: 0, maxReplicas: 3, autoscaling: auto }), /autoscaling needs minReplicas of at least 1/);
    await assert.rejects(attempt({ maxReplicas: 3, autoscaling: { ...auto, target: '10 rps' } }), /autoscaling.target must be a positive quantity/);
    await assert.rejects(attempt({ maxReplicas: 3, autoscaling: { ...auto, metric: 'cpu' } }), /spec.autoscaling.metric: Unsupported value: "cpu"/);
    await attempt({ maxReplicas: 3, autoscaling: { ...auto, target: 20, behavior: { scaleUp: { policies: [{ type: 'Pods', value: 2, periodSeconds: 10 }] } } } });
  });
});
