/**
 * The tier's real Prometheus: it discovers a NereidServer's pods through the API server
 * (kubernetes_sd, role pod), scrapes their metrics port, and labels the series with namespace and
 * pod; the load generator's answers show up in Prometheus as Nereid's inference counters.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { KubeClient } from '@nereid/operator';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { startLoad } from '../helpers/load.js';
import { startPrometheus, type Prometheus } from '../helpers/prometheus.js';
import { EXAMPLES, adminClient, installCrds, operatorUser, serverPods, startOperator, type InProcessOperator, type Json } from '../operator/setup.js';

const NS = 'default';

describe('Prometheus in the Kubernetes tier', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let admin: KubeClient;
  let operator: InProcessOperator;
  let prometheus: Prometheus;

  before(async () => {
    cluster = await startCluster();
    await installCrds(cluster);
    admin = adminClient(cluster);
    kubelet = await startKubelet(cluster, { namespace: NS });
    operator = await startOperator(await operatorUser(cluster));
    prometheus = await startPrometheus(cluster, { namespaces: [NS] });
  });
  after(async () => {
    await prometheus?.stop();
    await operator?.stop();
    await kubelet?.stop();
    admin?.close();
    await cluster?.stop();
  });

  it('scrapes each pod of a NereidServer by its pod IP and labels its series with namespace, pod and server', async () => {
    await cluster.apply([
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: 'scraped', namespace: NS },
        spec: { replicas: 2, modelRepository: { volume: { hostPath: { path: EXAMPLES, type: 'Directory' } } }, drainSeconds: 0 },
      },
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'simple', namespace: NS }, spec: { server: 'scraped', source: { repository: {} } } },
    ]);
    const pods = await waitFor(
      'two ready pods',
      async () => {
        const list = await serverPods(admin, NS, 'scraped');
        const ready = list.filter((p: Json) => p.status?.conditions?.some((c: Json) => c.type === 'Ready' && c.status === 'True'));
        return ready.length === 2 ? ready : undefined;
      },
      90_000,
    );
    const ips = pods.map((p: Json) => p.status.podIP as string).sort();
    const targets = await waitFor(
      'both pods scraped',
      async () => {
        const t = (await prometheus.targets()).filter((x) => x.health === 'up');
        return t.length === 2 ? t : undefined;
      },
      60_000,
    );
    assert.deepEqual(targets.map((t) => new URL(t.url).hostname).sort(), ips);
    for (const t of targets) {
      assert.equal(t.labels.namespace, NS);
      assert.equal(t.labels.nereid_server, 'scraped');
      assert.ok(pods.some((p: Json) => p.metadata.name === t.labels.pod));
    }

    let next = 0;
    const load = startLoad({
      target: () => `http://${ips[next++ % ips.length]}:8000`,
      model: 'simple',
      body: {
        inputs: [
          { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
          { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
        ],
      },
      rate: 40,
    });
    await new Promise((r) => setTimeout(r, 2000));
    const sent = await load.stop();
    assert.equal(sent.lost.length, 0, sent.lost.join('\n'));
    assert.equal(sent.ok, sent.sent, sent.errorBodies.join('\n'));
    const counts = await waitFor(
      'the requests counted in Prometheus',
      async () => {
        const r = await prometheus.query(`sum by (pod) (nv_inference_request_success{namespace="${NS}",model="simple",version="1"})`);
        return r.length === 2 && r.reduce((s, x) => s + x.value, 0) === sent.ok ? r : undefined;
      },
      30_000,
    );
    for (const c of counts) assert.equal(c.value, sent.byTarget.get(`http://${pods.find((p: Json) => p.metadata.name === c.metric.pod)!.status.podIP}:8000`));
  });
});
