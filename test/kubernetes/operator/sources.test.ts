/**
 * NereidModel sources other than a repository directory, and the ServiceMonitor, against a real
 * kube-apiserver and kube-controller-manager with the simulated kubelet's real Nereid pods:
 * - a ConfigMap holding a small ONNX model (binaryData, `1__model.onnx` = `1/model.onnx`) loads on
 *   every pod with its config and answers inference; changing the ConfigMap reloads it;
 * - a `uri` source under the server's repository loads that directory;
 * - where monitoring.coreos.com/v1 ServiceMonitor is served, the operator creates one, owned by
 *   the NereidServer.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { RESOURCES, type KubeClient } from '@nereid/operator';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { EXAMPLES, adminClient, applyRaw, getObject, installCrds, operatorUser, serverPods, startOperator, type InProcessOperator, type Json } from './setup.js';

const NS = 'default';
const cond = (o: Json | undefined, type: string): Json | undefined => o?.status?.conditions?.find((c: Json) => c.type === type);

const SIMPLE_CONFIG = {
  name: 'cm_simple',
  platform: 'onnxruntime_onnx',
  max_batch_size: 8,
  input: [
    { name: 'INPUT0', data_type: 'TYPE_INT32', dims: [16] },
    { name: 'INPUT1', data_type: 'TYPE_INT32', dims: [16] },
  ],
  output: [
    { name: 'OUTPUT0', data_type: 'TYPE_INT32', dims: [16] },
    { name: 'OUTPUT1', data_type: 'TYPE_INT32', dims: [16] },
  ],
};

/** A minimal ServiceMonitor CRD (the Prometheus operator's group, kind and plural). */
const SERVICE_MONITOR_CRD = {
  apiVersion: 'apiextensions.k8s.io/v1',
  kind: 'CustomResourceDefinition',
  metadata: { name: 'servicemonitors.monitoring.coreos.com' },
  spec: {
    group: 'monitoring.coreos.com',
    scope: 'Namespaced',
    names: { kind: 'ServiceMonitor', listKind: 'ServiceMonitorList', plural: 'servicemonitors', singular: 'servicemonitor' },
    versions: [
      {
        name: 'v1',
        served: true,
        storage: true,
        schema: { openAPIV3Schema: { type: 'object', properties: { spec: { type: 'object', 'x-kubernetes-preserve-unknown-fields': true } } } },
      },
    ],
  },
};

describe('nereid operator: ConfigMap and uri model sources, ServiceMonitor', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let op: InProcessOperator;
  let admin: KubeClient;

  const get = (type: (typeof RESOURCES)[keyof typeof RESOURCES], name: string): Promise<Json | undefined> => getObject(admin, type, NS, name);
  const pods = (): Promise<Json[]> => serverPods(admin, NS, 'fleet');
  const readyModel = (name: string, pred: (m: Json) => boolean = () => true) =>
    waitFor(
      `NereidModel ${name} Ready 2/2`,
      async () => {
        const m = await get(RESOURCES.nereidModel, name);
        return cond(m, 'Ready')?.status === 'True' && m!.status.ready === '2/2' && pred(m!) ? m : undefined;
      },
      90_000,
    );

  before(async () => {
    cluster = await startCluster();
    await installCrds(cluster);
    admin = adminClient(cluster);
    await admin.apply(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${SERVICE_MONITOR_CRD.metadata.name}`, SERVICE_MONITOR_CRD);
    await waitFor('the ServiceMonitor API served', async () => admin.getOptional('/apis/monitoring.coreos.com/v1'));
    // The operator may write ServiceMonitors: the chart's rules already name them.
    kubelet = await startKubelet(cluster, { namespace: NS });
    op = await startOperator(await operatorUser(cluster));
    await applyRaw(cluster, [
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: 'fleet', namespace: NS },
        spec: { replicas: 2, modelRepository: { volume: { hostPath: { path: EXAMPLES, type: 'Directory' } } }, drainSeconds: 0 },
      },
    ]);
  });
  after(async () => {
    await op?.stop();
    await kubelet?.stop();
    admin?.close();
    await cluster?.stop();
  });

  it('creates a ServiceMonitor owned by the NereidServer where that API is served', async () => {
    const sm = await waitFor('the ServiceMonitor', () => get(RESOURCES.serviceMonitor, 'fleet'), 30_000);
    const server = (await get(RESOURCES.nereidServer, 'fleet'))!;
    assert.equal(sm.metadata.ownerReferences[0].uid, server.metadata.uid);
    assert.deepEqual(sm.spec.endpoints, [{ port: 'metrics', path: '/metrics', interval: '15s' }]);
    assert.deepEqual(sm.spec.selector.matchLabels['app.kubernetes.io/instance'], 'fleet');
  });

  it('loads a model from a ConfigMap on every pod, and it answers inference', async () => {
    const onnx = readFileSync(join(EXAMPLES, 'simple', '1', 'model.onnx'));
    await applyRaw(cluster, [
      { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'cm-simple', namespace: NS }, binaryData: { '1__model.onnx': onnx.toString('base64') } },
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidModel',
        metadata: { name: 'cm-simple', namespace: NS },
        spec: { server: 'fleet', modelName: 'cm_simple', source: { configMap: { name: 'cm-simple' } }, config: SIMPLE_CONFIG },
      },
    ]);
    const model = await readyModel('cm-simple');
    const cm = (await get(RESOURCES.configMap, 'cm-simple'))!;
    for (const p of model.status.pods) assert.equal(p.sourceVersion, cm.metadata.resourceVersion);
    const input = Array.from({ length: 16 }, (_, i) => i);
    for (const pod of await pods()) {
      const res = await fetch(`http://${pod.status.podIP}:8000/v2/models/cm_simple/infer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          inputs: [
            { name: 'INPUT0', datatype: 'INT32', shape: [1, 16], data: input },
            { name: 'INPUT1', datatype: 'INT32', shape: [1, 16], data: input },
          ],
        }),
      });
      assert.equal(res.status, 200, await res.clone().text());
      const body = (await res.json()) as Json;
      const sum = body.outputs.find((o: Json) => o.name === 'OUTPUT0');
      assert.deepEqual(sum.data, input.map((v) => v * 2));
    }
  });

  it('reloads a ConfigMap model when the ConfigMap changes', async () => {
    const before = (await get(RESOURCES.nereidModel, 'cm-simple'))!;
    const onnx = readFileSync(join(EXAMPLES, 'simple', '1', 'model.onnx'));
    await applyRaw(cluster, [
      {
        apiVersion: 'v1',
        kind: 'ConfigMap',
        metadata: { name: 'cm-simple', namespace: NS },
        binaryData: { '1__model.onnx': onnx.toString('base64') },
        data: { 'labels.txt': 'a\nb\n' },
      },
    ]);
    const cm = (await get(RESOURCES.configMap, 'cm-simple'))!;
    assert.notEqual(cm.metadata.resourceVersion, before.status.pods[0].sourceVersion);
    // The operator does not watch ConfigMaps (its rules only read them): the periodic re-check picks the change up.
    await waitFor(
      'the reload with the new ConfigMap version',
      async () => {
        const m = await get(RESOURCES.nereidModel, 'cm-simple');
        return m?.status.pods.every((p: Json) => p.sourceVersion === cm.metadata.resourceVersion && p.state === 'READY');
      },
      90_000,
    );
  });

  it('loads a uri source that lies under the server repository, and refuses one that does not', async () => {
    await applyRaw(cluster, [
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'int8', namespace: NS }, spec: { server: 'fleet', modelName: 'simple_int8', source: { uri: '/models/simple_int8' } } },
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'elsewhere', namespace: NS }, spec: { server: 'fleet', modelName: 'simple', source: { uri: '/elsewhere/simple' } } },
    ]);
    await readyModel('int8');
    const bad = await waitFor('InvalidSource', async () => {
      const m = await get(RESOURCES.nereidModel, 'elsewhere');
      return cond(m, 'Ready')?.reason === 'InvalidSource' ? m : undefined;
    });
    assert.match(cond(bad, 'Ready')!.message, /does not lie under the server's model repository \/models/);
  });
});
