/**
 * The operator as a pod: a Deployment running `nereid operator --leader-elect` under a
 * ServiceAccount bound to exactly the chart's operator rules (the simulated kubelet gives the
 * process that ServiceAccount's token), elects itself through the Lease in its namespace and
 * brings a NereidServer and a NereidModel to Ready.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { parse } from 'yaml';
import { RESOURCES, objectPath, type KubeClient, type KubeObject } from '@nereid/operator';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { freePort } from '../helpers/processes.js';
import { CHART, EXAMPLES, adminClient, applyRaw, installCrds, type Json } from './setup.js';

const NS = 'nereid-system';
const cond = (o: Json | undefined, type: string): Json | undefined => o?.status?.conditions?.find((c: Json) => c.type === type);

describe('nereid operator running as a pod with its ServiceAccount', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let admin: KubeClient;

  before(async () => {
    cluster = await startCluster();
    await installCrds(cluster);
    admin = adminClient(cluster);
    await admin.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    kubelet = await startKubelet(cluster);
  });
  after(async () => {
    await kubelet?.stop();
    admin?.close();
    await cluster?.stop();
  });

  it('runs in the cluster, leads, and reconciles', async () => {
    const rules = parse(readFileSync(join(CHART, 'files', 'operator-rules.yaml'), 'utf8')) as object[];
    const metricsPort = await freePort();
    await cluster.apply([
      { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'nereid-operator', namespace: NS } },
      { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name: 'nereid-operator' }, rules },
      {
        apiVersion: 'rbac.authorization.k8s.io/v1',
        kind: 'ClusterRoleBinding',
        metadata: { name: 'nereid-operator' },
        roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name: 'nereid-operator' },
        subjects: [{ kind: 'ServiceAccount', name: 'nereid-operator', namespace: NS }],
      },
      {
        apiVersion: 'apps/v1',
        kind: 'Deployment',
        metadata: { name: 'nereid-operator', namespace: NS },
        spec: {
          replicas: 1,
          selector: { matchLabels: { app: 'nereid-operator' } },
          template: {
            metadata: { labels: { app: 'nereid-operator' } },
            spec: {
              serviceAccountName: 'nereid-operator',
              containers: [
                {
                  name: 'operator',
                  image: 'localhost/nereid:0.1.0',
                  args: ['operator', '--leader-elect', '--metrics-address=$(POD_IP)', `--metrics-port=${metricsPort}`, '--resync-seconds=5'],
                  env: [
                    { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
                    { name: 'POD_NAMESPACE', valueFrom: { fieldRef: { fieldPath: 'metadata.namespace' } } },
                    { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
                  ],
                  ports: [{ name: 'metrics', containerPort: metricsPort }],
                  readinessProbe: { httpGet: { path: '/readyz', port: 'metrics' }, periodSeconds: 1 },
                  livenessProbe: { httpGet: { path: '/healthz', port: 'metrics' }, periodSeconds: 5 },
                },
              ],
            },
          },
        },
      },
    ]);
    const pod = await waitFor(
      'the operator pod Ready',
      async () => {
        const pods = (await admin.list(`/api/v1/namespaces/${NS}/pods`, { labelSelector: 'app=nereid-operator' })).items as Json[];
        return pods.find((p) => cond(p, 'Ready')?.status === 'True');
      },
      60_000,
    );
    const lease = await waitFor('the Lease in the pod namespace, held by the pod', async () => {
      const l = (await admin.getOptional<KubeObject>(objectPath(RESOURCES.lease, NS, 'nereid-operator'))) as Json | undefined;
      return l?.spec.holderIdentity === pod.metadata.name ? l : undefined;
    }, 30_000);
    assert.equal(lease.metadata.namespace, NS);

    await applyRaw(cluster, [
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: 'fleet', namespace: 'default' },
        spec: { replicas: 1, modelRepository: { volume: { hostPath: { path: EXAMPLES, type: 'Directory' } } }, drainSeconds: 0 },
      },
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'simple', namespace: 'default' }, spec: { server: 'fleet', source: { repository: {} } } },
    ]);
    await waitFor(
      'NereidModel simple Ready 1/1 through the in-cluster operator',
      async () => {
        const m = (await admin.getOptional<KubeObject>(objectPath(RESOURCES.nereidModel, 'default', 'simple'))) as Json | undefined;
        return cond(m, 'Ready')?.status === 'True' && m!.status.ready === '1/1';
      },
      90_000,
    );
    const metrics = await (await fetch(`http://${pod.status.podIP}:${metricsPort}/metrics`)).text();
    assert.match(metrics, /nereid_operator_leader 1/);
    assert.doesNotMatch(kubelet.logs(NS, pod.metadata.name), /Forbidden/);
  });
});
