/**
 * A rolling update of a NereidServer's image under load. The load generator balances over the
 * pods a Service would route to (Ready, not terminating), as the endpoints controller does; the
 * Deployment surges one new pod at a time (maxUnavailable 0), a new pod turns Ready only once its
 * models are loaded (the readiness gate), and an old pod keeps serving through its preStop drain
 * before SIGTERM starts its graceful shutdown. Every request gets a 200 answer and the ready pods
 * never fall below the replica count.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RESOURCES, type KubeClient } from '@nereid/operator';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { startLoad } from '../helpers/load.js';
import { EXAMPLES, adminClient, applyRaw, getObject, installCrds, operatorUser, serverPods, startOperator, type InProcessOperator, type Json } from './setup.js';

const NS = 'default';
const cond = (o: Json | undefined, type: string): Json | undefined => o?.status?.conditions?.find((c: Json) => c.type === type);
const serving = (p: Json): boolean => !p.metadata.deletionTimestamp && cond(p, 'Ready')?.status === 'True' && !!p.status?.podIP;

const server = (image: string): Json => ({
  apiVersion: 'nereid.dev/v1alpha1',
  kind: 'NereidServer',
  metadata: { name: 'rolling', namespace: NS },
  spec: {
    image,
    replicas: 2,
    modelRepository: { volume: { hostPath: { path: EXAMPLES, type: 'Directory' } } },
    drainSeconds: 2,
  },
});

const BODY = {
  inputs: [
    { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, (_, i) => i) },
    { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: Array.from({ length: 16 }, () => 1) },
  ],
};

describe('nereid operator: a rolling update of the server image under load', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let op: InProcessOperator;
  let admin: KubeClient;

  before(async () => {
    cluster = await startCluster();
    await installCrds(cluster);
    admin = adminClient(cluster);
    kubelet = await startKubelet(cluster, { namespace: NS });
    op = await startOperator(await operatorUser(cluster));
  });
  after(async () => {
    await op?.stop();
    await kubelet?.stop();
    admin?.close();
    await cluster?.stop();
  });

  it('answers every request while each pod is replaced, and never runs below the replica count', async () => {
    await applyRaw(cluster, [
      server('localhost/nereid:0.1.0'),
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'simple', namespace: NS }, spec: { server: 'rolling', source: { repository: {} } } },
    ]);
    const first = await waitFor(
      'two serving pods',
      async () => {
        const pods = (await serverPods(admin, NS, 'rolling')).filter(serving);
        return pods.length === 2 ? pods : undefined;
      },
      90_000,
    );
    const oldUids = new Set(first.map((p) => p.metadata.uid as string));

    // The balancer's view: the serving pods, refreshed every 100 ms (an endpoints controller's lag).
    let targets = first.map((p) => `http://${p.status.podIP}:8000`);
    let minServing = Infinity;
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const pods = (await serverPods(admin, NS, 'rolling')).filter(serving);
        minServing = Math.min(minServing, pods.length);
        if (pods.length > 0) targets = pods.map((p) => `http://${p.status.podIP}:8000`);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    let next = 0;
    const load = startLoad({ target: () => targets[next++ % targets.length], model: 'simple', body: BODY, rate: 60 });
    let result;
    try {
      await new Promise((r) => setTimeout(r, 2000));
      await applyRaw(cluster, [server('localhost/nereid:0.1.1')]);
      await waitFor(
        'both pods replaced by serving pods of the new image',
        async () => {
          const pods = await serverPods(admin, NS, 'rolling');
          return (
            pods.length === 2 &&
            pods.every((p) => serving(p) && !oldUids.has(p.metadata.uid) && p.spec.containers[0].image === 'localhost/nereid:0.1.1')
          );
        },
        180_000,
      );
      // Keep the load on the new pods for a while after the last old one left.
      await new Promise((r) => setTimeout(r, 2000));
    } finally {
      result = await load.stop();
      watching = false;
      await watcher;
    }
    assert.deepEqual(result.lost, [], `requests without an answer: ${result.lost.length}`);
    assert.equal(result.ok, result.sent, `answers other than 200: ${result.errorBodies.join('\n')}`);
    assert.ok(result.sent >= 300, `the load ran through the rollout (${result.sent} requests)`);
    assert.ok(minServing >= 2, `serving pods never fell below 2 (lowest: ${minServing})`);
    const answeredBy = [...result.byTarget.keys()];
    assert.ok(answeredBy.length >= 4, `old and new pods all answered: ${answeredBy.join(', ')}`);

    const deployment = await getObject(admin, RESOURCES.deployment, NS, 'rolling');
    assert.deepEqual(deployment!.spec.strategy, { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
    const status = await waitFor('the server rolled out', async () => {
      const s = await getObject(admin, RESOURCES.nereidServer, NS, 'rolling');
      return cond(s, 'Progressing')?.status === 'False' && cond(s, 'Ready')?.status === 'True' ? s : undefined;
    });
    assert.equal(status.status.readyReplicas, 2);
  });
});
