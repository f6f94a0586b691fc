/**
 * The whole path, on real components: kube-apiserver and kube-controller-manager, the chart's
 * CRDs, the operator (as the chart's RBAC user), the simulated kubelet's real Nereid pods, and a
 * real S3-compatible store (SeaweedFS). A NereidServer reading s3://fleet-models/prod with
 * credentials from a Secret and two NereidModels: the Deployment, Service and PodDisruptionBudget
 * appear with the right fields, the statuses report readiness, a model changed in the bucket
 * reaches every running pod (the servers re-sync on their own) while clients send requests
 * without pause, with no failed request, and deleting the resources removes everything.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RESOURCES, objectPath, type KubeClient, type NereidModel } from '@nereid/operator';
import { TAGGED_WIDTH, taggedFiles } from '../../helpers/lifecycle.js';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { startS3, type S3Store } from '../helpers/s3.js';
import { putModel } from '../helpers/s3-models.js';
import { adminClient, applyRaw, getObject, installCrds, operatorUser, serverPods, startOperator, type InProcessOperator, type Json } from './setup.js';

const NS = 'default';
const BUCKET = 'fleet-models';
const PREFIX = 'prod/';
const cond = (o: Json | undefined, type: string): Json | undefined => o?.status?.conditions?.find((c: Json) => c.type === type);

async function answer(ip: string, model: string): Promise<number> {
  const res = await fetch(`http://${ip}:8000/v2/models/${model}/infer`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: [0, 0, 0, 0] }] }),
  });
  const text = await res.text();
  if (res.status !== 200) throw new Error(`${ip} ${model}: ${res.status} ${text}`);
  return (JSON.parse(text) as Json).outputs[0].data[0] as number;
}

describe('nereid operator with an S3 model repository (SeaweedFS)', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let s3: S3Store;
  let op: InProcessOperator;
  let admin: KubeClient;

  const get = (type: (typeof RESOURCES)[keyof typeof RESOURCES], name: string): Promise<Json | undefined> => getObject(admin, type, NS, name);
  const pods = (): Promise<Json[]> => serverPods(admin, NS, 'fleet');

  before(async () => {
    [cluster, s3] = await Promise.all([startCluster(), startS3()]);
    await s3.createBucket(BUCKET);
    await putModel(s3.client, BUCKET, PREFIX, 'alpha', taggedFiles('alpha', { 1: 1 }), { manifest: true });
    await putModel(s3.client, BUCKET, PREFIX, 'beta', taggedFiles('beta', { 1: 100 }), { manifest: true });
    await installCrds(cluster);
    admin = adminClient(cluster);
    kubelet = await startKubelet(cluster, { namespace: NS });
    op = await startOperator(await operatorUser(cluster));
  });
  after(async () => {
    await op?.stop();
    await kubelet?.stop();
    admin?.close();
    await Promise.all([cluster?.stop(), s3?.stop()]);
  });

  it('creates the fleet from a NereidServer on S3 and two NereidModels', async () => {
    await applyRaw(cluster, [
      {
        apiVersion: 'v1',
        kind: 'Secret',
        metadata: { name: 'model-store', namespace: NS },
        stringData: { AWS_ACCESS_KEY_ID: s3.accessKeyId, AWS_SECRET_ACCESS_KEY: s3.secretAccessKey },
      },
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: 'fleet', namespace: NS },
        spec: {
          replicas: 2,
          modelRepository: { uri: `s3://${BUCKET}/prod`, s3: { endpoint: s3.endpoint, region: s3.region, credentialsSecret: 'model-store' } },
          pollSeconds: 1,
          drainSeconds: 0,
        },
      },
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'alpha', namespace: NS }, spec: { server: 'fleet', source: { repository: {} } } },
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'beta', namespace: NS }, spec: { server: 'fleet', source: { uri: `s3://${BUCKET}/prod/beta` } } },
    ]);
    const d = await waitFor('the Deployment', () => get(RESOURCES.deployment, 'fleet'));
    const c = d.spec.template.spec.containers[0];
    assert.ok(c.args.includes(`--model-repository=s3://${BUCKET}/prod`));
    assert.ok(c.args.includes('--repository-poll-secs=1'));
    const env = Object.fromEntries(c.env.map((e: Json) => [e.name, e]));
    assert.deepEqual(env.AWS_ACCESS_KEY_ID.valueFrom.secretKeyRef, { name: 'model-store', key: 'AWS_ACCESS_KEY_ID' });
    assert.equal(env.AWS_ENDPOINT_URL_S3.value, s3.endpoint);
    assert.ok(await waitFor('the Service', () => get(RESOURCES.service, 'fleet')));
    assert.ok(await waitFor('the PodDisruptionBudget', () => get(RESOURCES.pdb, 'fleet')));

    for (const name of ['alpha', 'beta']) {
      await waitFor(
        `NereidModel ${name} Ready 2/2`,
        async () => {
          const m = await get(RESOURCES.nereidModel, name);
          return cond(m, 'Ready')?.status === 'True' && m!.status.ready === '2/2';
        },
        120_000,
      );
    }
    const server = await waitFor('NereidServer fleet Ready with both models on both pods', async () => {
      const s = await get(RESOURCES.nereidServer, 'fleet');
      return cond(s, 'Ready')?.status === 'True' && s!.status.readyReplicas === 2 && s!.status.models?.every((m: Json) => m.readyReplicas === 2) ? s : undefined;
    }, 60_000);
    assert.deepEqual(server.status.models.map((m: Json) => m.name), ['alpha', 'beta']);
    for (const pod of await pods()) {
      assert.equal(await answer(pod.status.podIP, 'alpha'), 1);
      assert.equal(await answer(pod.status.podIP, 'beta'), 100);
    }
  });

  it('a model changed in the bucket reaches every pod with no failed request under load', async () => {
    const ips = (await pods()).map((p) => p.status.podIP as string);
    assert.equal(ips.length, 2);
    let stop = false;
    let ok = 0;
    const failures: string[] = [];
    const seen = new Map<string, Set<number>>(ips.map((ip) => [ip, new Set<number>()]));
    const client = async (ip: string): Promise<void> => {
      while (!stop) {
        try {
          seen.get(ip)!.add(await answer(ip, 'alpha'));
          ok++;
        } catch (err) {
          failures.push((err as Error).message);
        }
      }
    };
    const clients = ips.flatMap((ip) => [client(ip), client(ip)]);
    await new Promise((r) => setTimeout(r, 500));
    await putModel(s3.client, BUCKET, PREFIX, 'alpha', taggedFiles('alpha', { 1: 2 }), { manifest: true });
    try {
      await waitFor('every pod answering with the new model', async () => {
        const answers = await Promise.all(ips.map((ip) => answer(ip, 'alpha')));
        return answers.every((a) => a === 2);
      }, 60_000);
      await new Promise((r) => setTimeout(r, 500));
    } finally {
      stop = true;
      await Promise.all(clients);
    }
    assert.deepEqual(failures.slice(0, 5), [], `${failures.length} failed of ${ok + failures.length}`);
    assert.ok(ok > 20, `requests answered: ${ok}`);
    for (const ip of ips) assert.deepEqual([...seen.get(ip)!].sort(), [1, 2], `answers seen on ${ip}`);
    // Neither pod restarted: the change came through the server's own re-sync.
    for (const pod of await pods()) assert.equal(pod.status.containerStatuses[0].restartCount, 0);
    const alpha = (await get(RESOURCES.nereidModel, 'alpha'))!;
    assert.equal(alpha.status.ready, '2/2');
  });

  it('removes everything when the resources are deleted', async () => {
    const ips = (await pods()).map((p) => p.status.podIP as string);
    await admin.delete(objectPath(RESOURCES.nereidModel, NS, 'beta'));
    await waitFor('beta gone after its unload', async () => (await get(RESOURCES.nereidModel, 'beta')) === undefined);
    for (const ip of ips) {
      const index = (await (await fetch(`http://${ip}:8000/v2/repository/index`, { method: 'POST', body: '{}' })).json()) as Json[];
      assert.ok(!index.some((e) => e.name === 'beta' && e.state === 'READY'), JSON.stringify(index));
    }
    await admin.delete(objectPath(RESOURCES.nereidModel, NS, 'alpha'));
    await admin.delete(objectPath(RESOURCES.nereidServer, NS, 'fleet'));
    await waitFor(
      'the Deployment, Service, PodDisruptionBudget, pods and NereidModels gone',
      async () => {
        const left = await Promise.all([RESOURCES.deployment, RESOURCES.service, RESOURCES.pdb].map((t) => get(t, 'fleet')));
        const models = await admin.list<NereidModel>(`/apis/nereid.dev/v1alpha1/namespaces/${NS}/nereidmodels`);
        return left.every((o) => o === undefined) && models.items.length === 0 && (await pods()).length === 0;
      },
      90_000,
    );
  });
});
