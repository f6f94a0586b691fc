/**
 * The Kubernetes tier's harness against itself: a real etcd, kube-apiserver and
 * kube-controller-manager start; RBAC decides for client-certificate users; a Deployment becomes a
 * ReplicaSet and Pods; the simulated kubelet runs each pod as a real Nereid process on the pod's own
 * loopback address, probes it and keeps the pod un-Ready until its readiness gate is set; deleting
 * the Deployment removes the pods and ends the processes.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { AppsV1Api, CoreV1Api, KubeConfig, type V1Pod } from '@kubernetes/client-node';
import { REPO_ROOT, startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { nereidPidsOn, pidAlive } from '../helpers/processes.js';
import { ApiError, Rest } from '../helpers/rest.js';

const GATE = 'nereid.dev/models-ready';


/** Pids of processes with an argument containing `text`. */
function pidsWithArgument(text: string): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry) || Number(entry) === process.pid) continue;
    try {
      if (readFileSync(join('/proc', entry, 'cmdline'), 'utf8').split('\0').some((a) => a.includes(text))) pids.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return pids;
}

async function waitForGone(core: CoreV1Api, name: string, timeoutMs: number): Promise<void> {
  await waitFor(`pod ${name} to be removed`, async () => {
    try {
      await core.readNamespacedPod({ name, namespace: 'default' });
      return undefined;
    } catch (err) {
      return (err as { code?: number }).code === 404 ? true : undefined;
    }
  }, timeoutMs);
}

function condition(pod: V1Pod, type: string): string | undefined {
  return pod.status?.conditions?.find((c) => c.type === type)?.status;
}

describe('Kubernetes test harness', () => {
  let cluster: Cluster;
  let kubelet: Kubelet | undefined;
  let core: CoreV1Api;
  let apps: AppsV1Api;

  before(async () => {
    const started = Date.now();
    cluster = await startCluster();
    console.log(`# cluster (etcd, kube-apiserver, kube-controller-manager) ready in ${Date.now() - started} ms`);
    core = cluster.kubeConfig.makeApiClient(CoreV1Api);
    apps = cluster.kubeConfig.makeApiClient(AppsV1Api);
  });
  const cleanup: string[] = [];
  after(async () => {
    await kubelet?.stop();
    await cluster?.stop();
    for (const dir of cleanup) rmSync(dir, { recursive: true, force: true });
  });

  it('serves the API to the admin kubeconfig over TLS with the cluster CA', async () => {
    assert.match(cluster.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const namespaces = await core.listNamespace();
    const names = namespaces.items.map((n) => n.metadata?.name);
    for (const ns of ['default', 'kube-system']) assert.ok(names.includes(ns), `namespace ${ns} in ${names.join(', ')}`);
    const fromFile = new KubeConfig();
    fromFile.loadFromFile(cluster.kubeconfigPath);
    assert.equal(fromFile.getCurrentCluster()?.server, cluster.url);
  });

  it('applies YAML server-side, with dry runs that store nothing', async () => {
    const manifest = 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: applied\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  a: "1"\n';
    const dry = await cluster.apply(manifest.replace(/applied/g, 'dry'), { namespace: 'default', dryRun: true });
    assert.equal(dry.length, 2);
    await assert.rejects(core.readNamespace({ name: 'dry' }), (err: { code?: number }) => err.code === 404);
    await assert.rejects(core.readNamespacedConfigMap({ name: 'settings', namespace: 'default' }), (err: { code?: number }) => err.code === 404);

    const applied = (await cluster.apply(manifest.replace('name: settings', 'name: settings\n  namespace: applied'))) as { metadata: { managedFields: { manager: string; operation: string }[] } }[];
    assert.ok(applied[1]!.metadata.managedFields.some((f) => f.manager === 'nereid-tests' && f.operation === 'Apply'));
    const cm = await core.readNamespacedConfigMap({ name: 'settings', namespace: 'applied' });
    assert.deepEqual(cm.data, { a: '1' });
    // A second apply with a changed value updates in place (same manager, forced).
    await cluster.apply([{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'settings' }, data: { a: '2' } }], { namespace: 'applied' });
    assert.deepEqual((await core.readNamespacedConfigMap({ name: 'settings', namespace: 'applied' })).data, { a: '2' });
  });

  it('applies a CustomResourceDefinition and a resource of its kind in one go; owned objects are collected', async () => {
    const [, widget] = (await cluster.apply(`
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: { name: widgets.example.nereid.dev }
spec:
  group: example.nereid.dev
  scope: Namespaced
  names: { plural: widgets, singular: widget, kind: Widget }
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: { type: object, properties: { size: { type: integer, minimum: 1 } } }
---
apiVersion: example.nereid.dev/v1
kind: Widget
metadata: { name: w1 }
spec: { size: 3 }
`, { namespace: 'default' })) as [unknown, { spec: { size: number }; metadata: { namespace: string; uid: string } }];
    assert.equal(widget.spec.size, 3);
    assert.equal(widget.metadata.namespace, 'default');

    // The garbage collector knows the new kind at once: an object it owns goes when it goes.
    await cluster.apply(
      [{ apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'owned-by-w1', ownerReferences: [{ apiVersion: 'example.nereid.dev/v1', kind: 'Widget', name: 'w1', uid: widget.metadata.uid }] } }],
      { namespace: 'default' },
    );
    const rest = new Rest(cluster.kubeConfig);
    await rest.request('DELETE', '/apis/example.nereid.dev/v1/namespaces/default/widgets/w1');
    await waitFor('the garbage collector to delete the ConfigMap owned by the deleted Widget', async () => {
      try {
        await core.readNamespacedConfigMap({ name: 'owned-by-w1', namespace: 'default' });
        return undefined;
      } catch (err) {
        return (err as { code?: number }).code === 404 ? true : undefined;
      }
    }, 15_000);
    await assert.rejects(
      cluster.apply([{ apiVersion: 'example.nereid.dev/v1', kind: 'Widget', metadata: { name: 'w2' }, spec: { size: 0 } }], { namespace: 'default' }),
      /spec\.size.*should be greater than or equal to 1|spec\.size in body should be greater than or equal to 1/,
    );
  });

  it('authorizes certificate users by RBAC: nothing without a binding, what a RoleBinding grants with one', async () => {
    const path = await cluster.kubeconfigFor('alice', ['nereid-testers']);
    const kc = new KubeConfig();
    kc.loadFromFile(path);
    const asAlice = kc.makeApiClient(CoreV1Api);
    await assert.rejects(asAlice.listNamespacedPod({ namespace: 'default' }), (err: { code?: number; body?: string }) => {
      assert.equal(err.code, 403);
      assert.match((JSON.parse(String(err.body)) as { message: string }).message, /User "alice" cannot list resource "pods"/);
      return true;
    });

    await cluster.apply(`
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: { name: pod-reader, namespace: default }
rules:
- { apiGroups: [""], resources: [pods], verbs: [get, list, watch] }
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: { name: testers-read-pods, namespace: default }
roleRef: { apiGroup: rbac.authorization.k8s.io, kind: Role, name: pod-reader }
subjects:
- { apiGroup: rbac.authorization.k8s.io, kind: Group, name: nereid-testers }
`);
    // The group from the certificate's O is what the binding names.
    const pods = await waitFor('alice to list pods in default', async () => {
      try {
        return await asAlice.listNamespacedPod({ namespace: 'default' });
      } catch (err) {
        if ((err as { code?: number }).code === 403) return undefined;
        throw err;
      }
    });
    assert.ok(Array.isArray(pods.items));
    // Only what was granted: another namespace, and writes, stay denied.
    await assert.rejects(asAlice.listNamespacedPod({ namespace: 'kube-system' }), (err: { code?: number }) => err.code === 403);
    await assert.rejects(asAlice.deleteCollectionNamespacedPod({ namespace: 'default' }), (err: { code?: number }) => err.code === 403);
  });

  it('runs a Deployment as real Nereid pods: ReplicaSet, Pods, readiness gate, health on the pod IP, deletion ends the processes', async () => {
    kubelet = await startKubelet(cluster);
    const node = await core.readNode({ name: 'nereid-sim-node' });
    assert.equal(node.status?.conditions?.find((c) => c.type === 'Ready')?.status, 'True');

    const repository = join(REPO_ROOT, 'examples', 'model_repository');
    await cluster.apply(
      [
        {
          apiVersion: 'apps/v1',
          kind: 'Deployment',
          metadata: { name: 'nereid', labels: { 'app.kubernetes.io/name': 'nereid' } },
          spec: {
            replicas: 2,
            selector: { matchLabels: { 'app.kubernetes.io/name': 'nereid' } },
            template: {
              metadata: { labels: { 'app.kubernetes.io/name': 'nereid' } },
              spec: {
                terminationGracePeriodSeconds: 10,
                readinessGates: [{ conditionType: GATE }],
                volumes: [{ name: 'models', hostPath: { path: repository, type: 'Directory' } }],
                containers: [
                  {
                    name: 'nereid',
                    image: 'nereid:test',
                    args: ['serve', '--model-repository=/models', '--model-control-mode=explicit', '--load-model=simple', '--http-port=8000', '--grpc-port=8001', '--metrics-port=8002'],
                    env: [{ name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } }],
                    volumeMounts: [{ name: 'models', mountPath: '/models', readOnly: true }],
                    ports: [
                      { name: 'http', containerPort: 8000 },
                      { name: 'grpc', containerPort: 8001 },
                      { name: 'metrics', containerPort: 8002 },
                    ],
                    readinessProbe: { httpGet: { path: '/v2/health/ready', port: 'http' }, periodSeconds: 1 },
                    livenessProbe: { httpGet: { path: '/v2/health/live', port: 'http' }, periodSeconds: 2, failureThreshold: 3 },
                    lifecycle: { preStop: { exec: { command: ['/bin/sh', '-c', 'sleep 1'] } } },
                  },
                ],
              },
            },
          },
        },
      ],
      { namespace: 'default' },
    );

    const selector = 'app.kubernetes.io/name=nereid';
    const replicaSets = await waitFor('a ReplicaSet of the Deployment', async () => {
      const list = await apps.listNamespacedReplicaSet({ namespace: 'default', labelSelector: selector });
      return list.items.length === 1 ? list.items : undefined;
    });
    assert.equal(replicaSets[0]!.metadata?.ownerReferences?.[0]?.kind, 'Deployment');

    const listPods = async () => (await core.listNamespacedPod({ namespace: 'default', labelSelector: selector })).items;
    const pods = await waitFor(
      'two pods with ready containers',
      async () => {
        const items = await listPods();
        return items.length === 2 && items.every((p) => condition(p, 'ContainersReady') === 'True') ? items : undefined;
      },
      60_000,
    ).catch(async (err: Error) => {
      const names = (await listPods()).map((p) => p.metadata!.name!);
      throw new Error(`${err.message}\n${names.map((n) => kubelet!.logs('default', n)).join('\n')}`);
    });

    const ips = new Set<string>();
    const pids: number[] = [];
    for (const pod of pods) {
      assert.equal(pod.spec?.nodeName, 'nereid-sim-node');
      assert.equal(pod.status?.phase, 'Running');
      assert.equal(pod.status?.hostIP, '127.0.0.1');
      assert.match(pod.status?.podIP ?? '', /^127\.0\.\d+\.\d+$/);
      assert.notEqual(pod.status?.podIP, '127.0.0.1');
      ips.add(pod.status!.podIP!);
      const cs = pod.status?.containerStatuses?.[0];
      assert.equal(cs?.name, 'nereid');
      assert.equal(cs?.ready, true);
      assert.equal(cs?.restartCount, 0, `${JSON.stringify(cs)}\n${kubelet.logs('default', pod.metadata!.name!)}`);
      assert.ok(cs?.state?.running, 'container running');
      // The gate is not set: the pod is not Ready although its container is.
      assert.equal(condition(pod, 'Ready'), 'False');
      assert.equal(pod.status?.conditions?.find((c) => c.type === 'Ready')?.reason, 'ReadinessGatesNotReady');
      // A real server answers on the pod's own address, with the model loaded from the hostPath mount.
      const ready = await fetch(`http://${pod.status!.podIP}:8000/v2/health/ready`);
      assert.equal(ready.status, 200);
      const model = await fetch(`http://${pod.status!.podIP}:8000/v2/models/simple/ready`);
      assert.equal(model.status, 200);
      const pid = Number(cs!.containerID!.replace('nereid-sim://', ''));
      assert.ok(nereidPidsOn(pod.status!.podIP!).includes(pid), `process ${pid} serves on ${pod.status!.podIP}`);
      pids.push(pid);
    }
    assert.equal(ips.size, 2, 'each pod has its own IP');

    // Still un-Ready a few probe periods later.
    await new Promise((r) => setTimeout(r, 2500));
    for (const pod of await listPods()) assert.equal(condition(pod, 'Ready'), 'False', `${pod.metadata?.name} Ready before its gate`);

    // What the operator does: set the gate condition on one pod's status.
    const rest = new Rest(cluster.kubeConfig);
    const gated = pods[0]!.metadata!.name!;
    await rest.request(
      'PATCH',
      `/api/v1/namespaces/default/pods/${gated}/status`,
      { status: { conditions: [{ type: GATE, status: 'True', lastTransitionTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z') }] } },
      'application/strategic-merge-patch+json',
    );
    const readyPod = await waitFor(`pod ${gated} Ready once its gate is True`, async () => {
      const pod = await core.readNamespacedPod({ name: gated, namespace: 'default' });
      return condition(pod, 'Ready') === 'True' ? pod : undefined;
    });
    assert.equal(condition(readyPod, GATE), 'True', 'the kubelet kept the condition it does not own');
    const other = (await listPods()).find((p) => p.metadata?.name !== gated)!;
    assert.equal(condition(other, 'Ready'), 'False');
    // The Deployment counts only the Ready pod as available... after its gate, like a real kubelet's pod.
    await waitFor('the Deployment to report one ready replica', async () => {
      const d = await apps.readNamespacedDeployment({ name: 'nereid', namespace: 'default' });
      return d.status?.readyReplicas === 1 ? d : undefined;
    });

    // The disruption controller sees the pods as a real cluster's: a PodDisruptionBudget counts the
    // one Ready pod as healthy.
    await cluster.apply(
      [{ apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata: { name: 'nereid' }, spec: { minAvailable: 1, selector: { matchLabels: { 'app.kubernetes.io/name': 'nereid' } } } }],
      { namespace: 'default' },
    );
    const pdb = await waitFor('the PodDisruptionBudget status', async () => {
      const b = await rest.request<{ status?: { currentHealthy?: number; expectedPods?: number; disruptionsAllowed?: number } }>('GET', '/apis/policy/v1/namespaces/default/poddisruptionbudgets/nereid');
      return b.status?.expectedPods === 2 ? b.status : undefined;
    });
    assert.deepEqual([pdb.currentHealthy, pdb.disruptionsAllowed], [1, 0]);

    // Deleting the Deployment: the garbage collector deletes the ReplicaSet and its pods, the kubelet
    // runs preStop, stops the processes and removes the pods.
    await apps.deleteNamespacedDeployment({ name: 'nereid', namespace: 'default', propagationPolicy: 'Background' });
    await waitFor(
      'the pods of the deleted Deployment to be gone',
      async () => {
        const [items, rs] = await Promise.all([listPods(), apps.listNamespacedReplicaSet({ namespace: 'default', labelSelector: selector })]);
        return items.length === 0 && rs.items.length === 0 ? true : undefined;
      },
      60_000,
    );
    for (const pid of pids) assert.equal(pidAlive(pid), false, `Nereid process ${pid} still running after its pod was deleted`);
  });

  it('restarts a container whose process exits and counts it; without restarts the pod ends Failed or Succeeded', async () => {
    assert.ok(kubelet);
    await cluster.apply(
      [
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'crasher' },
          spec: {
            terminationGracePeriodSeconds: 1,
            containers: [{ name: 'main', image: 'busybox', command: ['/bin/sh', '-c', 'sleep 0.3; exit 3'] }],
          },
        },
      ],
      { namespace: 'default' },
    );
    const pod = await waitFor('the crashing container to be restarted', async () => {
      const p = await core.readNamespacedPod({ name: 'crasher', namespace: 'default' });
      const cs = p.status?.containerStatuses?.[0];
      return cs && cs.restartCount >= 1 && cs.lastState?.terminated ? p : undefined;
    }, 20_000);
    assert.equal(pod.status?.phase, 'Running');
    assert.equal(pod.status?.containerStatuses?.[0]?.lastState?.terminated?.exitCode, 3);

    // restartPolicy Never: the pod ends Failed, or Succeeded when the process exits 0.
    await cluster.apply(
      ['failed:exit 3', 'succeeded:exit 0'].map((x) => {
        const [name, script] = x.split(':');
        return { apiVersion: 'v1', kind: 'Pod', metadata: { name }, spec: { restartPolicy: 'Never', containers: [{ name: 'main', image: 'busybox', command: ['/bin/sh', '-c', script] }] } };
      }),
      { namespace: 'default' },
    );
    for (const [name, phase, code] of [['failed', 'Failed', 3], ['succeeded', 'Succeeded', 0]] as const) {
      const done = await waitFor(`pod ${name} to end ${phase}`, async () => {
        const p = await core.readNamespacedPod({ name, namespace: 'default' });
        return p.status?.phase === phase ? p : undefined;
      }, 20_000);
      assert.equal(done.status?.containerStatuses?.[0]?.state?.terminated?.exitCode, code);
      assert.equal(done.status?.containerStatuses?.[0]?.restartCount, 0);
      await core.deleteNamespacedPod({ name, namespace: 'default' });
      await waitForGone(core, name, 20_000);
    }
    await core.deleteNamespacedPod({ name: 'crasher', namespace: 'default' });
    await waitForGone(core, 'crasher', 20_000);
  });

  it('resolves env from Secrets, ConfigMaps and fields, rewrites mounted paths, runs preStop before SIGTERM', async () => {
    assert.ok(kubelet);
    const out = mkdtempSync(join(tmpdir(), 'nereid-kubelet-test-'));
    cleanup.push(out);
    await cluster.apply(
      [
        { apiVersion: 'v1', kind: 'Secret', metadata: { name: 'creds' }, stringData: { key: 's3cr3t' } },
        { apiVersion: 'v1', kind: 'ConfigMap', metadata: { name: 'conf' }, data: { region: 'eu-test-1' } },
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'stopper' },
          spec: {
            terminationGracePeriodSeconds: 10,
            volumes: [{ name: 'out', hostPath: { path: out } }],
            containers: [
              {
                name: 'main',
                image: 'busybox',
                command: ['/bin/sh', '-c', 'echo "env $SECRET $REGION $POD_NAME $POD_IP" >> "$OUT"; trap \'echo "term $(date +%s%3N)" >> "$OUT"; exit 0\' TERM; while :; do sleep 0.05; done'],
                env: [
                  { name: 'SECRET', valueFrom: { secretKeyRef: { name: 'creds', key: 'key' } } },
                  { name: 'REGION', valueFrom: { configMapKeyRef: { name: 'conf', key: 'region' } } },
                  { name: 'POD_NAME', valueFrom: { fieldRef: { fieldPath: 'metadata.name' } } },
                  { name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } },
                  { name: 'OUT', value: '/var/out/log' },
                ],
                volumeMounts: [{ name: 'out', mountPath: '/var/out' }],
                lifecycle: { preStop: { exec: { command: ['sleep', '2'] } } },
              },
            ],
          },
        },
      ],
      { namespace: 'default' },
    );
    const pod = await waitFor('pod stopper running', async () => {
      const p = await core.readNamespacedPod({ name: 'stopper', namespace: 'default' });
      return condition(p, 'Ready') === 'True' ? p : undefined;
    });
    const log = join(out, 'log');
    await waitFor('the container to write its environment', async () => existsSync(log) && readFileSync(log, 'utf8').includes('env'));
    assert.equal(readFileSync(log, 'utf8').trim(), `env s3cr3t eu-test-1 stopper ${pod.status!.podIP}`);

    const pid = Number(/^nereid-sim:\/\/(\d+)$/.exec(pod.status!.containerStatuses![0]!.containerID!)![1]);
    assert.ok(pidAlive(pid));
    const deleted = Date.now();
    await core.deleteNamespacedPod({ name: 'stopper', namespace: 'default' });
    await waitForGone(core, 'stopper', 20_000);
    const term = /term (\d+)/.exec(readFileSync(log, 'utf8'));
    assert.ok(term, `the container got SIGTERM: ${readFileSync(log, 'utf8')}`);
    // SIGTERM came after the 2 s preStop sleep (a lower bound: this machine may be slow, never fast).
    assert.ok(Number(term[1]) - deleted >= 1900, `SIGTERM ${Number(term[1]) - deleted} ms after the delete`);
    assert.equal(pidAlive(pid), false);
  });

  it("gives a pod's process its service account's identity through KUBECONFIG", async () => {
    assert.ok(kubelet);
    const out = mkdtempSync(join(tmpdir(), 'nereid-kubelet-test-'));
    cleanup.push(out);
    await cluster.apply(
      [
        { apiVersion: 'v1', kind: 'ServiceAccount', metadata: { name: 'reader' } },
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'in-cluster' },
          spec: {
            serviceAccountName: 'reader',
            terminationGracePeriodSeconds: 1,
            volumes: [{ name: 'out', hostPath: { path: out } }],
            containers: [
              {
                name: 'main',
                image: 'busybox',
                command: ['/bin/sh', '-c', 'cp "$KUBECONFIG" "$OUT/kubeconfig" && echo "$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT" > "$OUT/service"; exec sleep 600'],
                env: [{ name: 'OUT', value: '/out' }],
                volumeMounts: [{ name: 'out', mountPath: '/out' }],
              },
            ],
          },
        },
      ],
      { namespace: 'default' },
    );
    const copied = join(out, 'kubeconfig');
    await waitFor('the pod to copy its kubeconfig', async () => existsSync(join(out, 'service'))).catch((err: Error) => {
      throw new Error(`${err.message}\n${kubelet!.logs('default', 'in-cluster')}`);
    });
    assert.equal(readFileSync(join(out, 'service'), 'utf8').trim(), cluster.url.replace('https://', ''));
    const kc = new KubeConfig();
    kc.loadFromFile(copied);
    assert.equal(kc.getContextObject(kc.currentContext)?.namespace, 'default');
    const asPod = kc.makeApiClient(CoreV1Api);
    await assert.rejects(asPod.listNamespacedPod({ namespace: 'default' }), (err: { code?: number; body?: string }) => {
      assert.equal(err.code, 403);
      assert.match((JSON.parse(String(err.body)) as { message: string }).message, /User "system:serviceaccount:default:reader" cannot list resource "pods"/);
      return true;
    });
    await cluster.apply(
      [
        {
          apiVersion: 'rbac.authorization.k8s.io/v1',
          kind: 'RoleBinding',
          metadata: { name: 'reader-reads-pods' },
          roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'Role', name: 'pod-reader' },
          subjects: [{ kind: 'ServiceAccount', name: 'reader', namespace: 'default' }],
        },
      ],
      { namespace: 'default' },
    );
    await waitFor('the service account to list pods', async () => {
      try {
        return (await asPod.listNamespacedPod({ namespace: 'default' })).items.some((p) => p.metadata?.name === 'in-cluster');
      } catch (err) {
        if ((err as { code?: number }).code === 403) return undefined;
        throw err;
      }
    });
    await core.deleteNamespacedPod({ name: 'in-cluster', namespace: 'default' });
    await waitForGone(core, 'in-cluster', 20_000);
  });

  it('kills a container that ignores SIGTERM after the grace period, and restarts one that fails its liveness probe', async () => {
    assert.ok(kubelet);
    const loop = 'while :; do sleep 0.05; done';
    await cluster.apply(
      [
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'stubborn' },
          spec: { terminationGracePeriodSeconds: 1, containers: [{ name: 'main', image: 'busybox', command: ['/bin/sh', '-c', `trap '' TERM; ${loop}`] }] },
        },
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'unhealthy' },
          spec: {
            terminationGracePeriodSeconds: 1,
            containers: [
              {
                name: 'main',
                image: 'busybox',
                command: ['/bin/sh', '-c', loop],
                // Nothing listens on port 1 of the pod's address.
                livenessProbe: { tcpSocket: { port: 1 }, periodSeconds: 1, failureThreshold: 2 },
              },
            ],
          },
        },
      ],
      { namespace: 'default' },
    );
    const stubborn = await waitFor('pod stubborn running', async () => {
      const p = await core.readNamespacedPod({ name: 'stubborn', namespace: 'default' });
      return p.status?.containerStatuses?.[0]?.state?.running ? p : undefined;
    });
    const pid = Number(stubborn.status!.containerStatuses![0]!.containerID!.replace('nereid-sim://', ''));
    const deleted = Date.now();
    await core.deleteNamespacedPod({ name: 'stubborn', namespace: 'default' });
    await waitForGone(core, 'stubborn', 20_000);
    assert.ok(Date.now() - deleted >= 900, 'removed only after the grace period');
    assert.equal(pidAlive(pid), false, 'SIGKILLed');

    const restarted = await waitFor('the unhealthy container to be restarted', async () => {
      const p = await core.readNamespacedPod({ name: 'unhealthy', namespace: 'default' });
      return (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1 ? p : undefined;
    }, 30_000);
    assert.equal(restarted.status?.phase, 'Running');
    await core.deleteNamespacedPod({ name: 'unhealthy', namespace: 'default' });
    await waitForGone(core, 'unhealthy', 20_000);
  });

  it('holds readiness until the startup probe passes, and restarts a container whose startup probe keeps failing', async () => {
    assert.ok(kubelet);
    // A server that listens only after 1.5 s.
    const server = "setTimeout(() => require('node:http').createServer((q, r) => r.end('ok')).listen(8080, process.env.POD_IP), 1500); setInterval(() => {}, 1000);";
    await cluster.apply(
      [
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'slow-start' },
          spec: {
            terminationGracePeriodSeconds: 1,
            containers: [
              {
                name: 'main',
                image: 'node',
                command: [process.execPath, '-e', server],
                env: [{ name: 'POD_IP', valueFrom: { fieldRef: { fieldPath: 'status.podIP' } } }],
                ports: [{ name: 'web', containerPort: 8080 }],
                startupProbe: { httpGet: { path: '/', port: 'web' }, periodSeconds: 1, failureThreshold: 10 },
              },
            ],
          },
        },
        {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { name: 'never-starts' },
          spec: {
            terminationGracePeriodSeconds: 1,
            containers: [{ name: 'main', image: 'busybox', command: ['/bin/sh', '-c', 'while :; do sleep 0.05; done'], startupProbe: { tcpSocket: { port: 1 }, periodSeconds: 1, failureThreshold: 2 } }],
          },
        },
      ],
      { namespace: 'default' },
    );
    const running = await waitFor('pod slow-start running', async () => {
      const p = await core.readNamespacedPod({ name: 'slow-start', namespace: 'default' });
      return p.status?.containerStatuses?.[0]?.state?.running ? p : undefined;
    });
    const startedAt = Date.parse(String(running.status!.containerStatuses![0]!.state!.running!.startedAt));
    const ready = await waitFor('pod slow-start Ready once its startup probe passes', async () => {
      const p = await core.readNamespacedPod({ name: 'slow-start', namespace: 'default' });
      return condition(p, 'Ready') === 'True' ? p : undefined;
    });
    assert.equal(ready.status?.containerStatuses?.[0]?.started, true);
    const readySince = Date.parse(String(ready.status!.conditions!.find((c) => c.type === 'Ready')!.lastTransitionTime));
    // Not before the server listened (whole seconds in the API's timestamps).
    assert.ok(readySince - startedAt >= 1000, `Ready ${readySince - startedAt} ms after the start`);

    const restarted = await waitFor('never-starts to be restarted by its startup probe', async () => {
      const p = await core.readNamespacedPod({ name: 'never-starts', namespace: 'default' });
      return (p.status?.containerStatuses?.[0]?.restartCount ?? 0) >= 1 ? p : undefined;
    }, 20_000);
    assert.equal(restarted.status?.containerStatuses?.[0]?.started, false);
    assert.equal(condition(restarted, 'Ready'), 'False');
    for (const name of ['slow-start', 'never-starts']) {
      await core.deleteNamespacedPod({ name, namespace: 'default' });
      await waitForGone(core, name, 20_000);
    }
  });

  it('kills the cluster and pod processes when the test process is terminated without stopping them', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'nereid-orphans-'));
    cleanup.push(dir);
    const script = join(dir, 'leave.mjs');
    const helpers = pathToFileURL(join(REPO_ROOT, 'dist', 'test', 'kubernetes', 'helpers', 'cluster.js')).href;
    writeFileSync(
      script,
      `import { startCluster, startKubelet, waitFor } from ${JSON.stringify(helpers)};
const cluster = await startCluster({ controllerManager: false });
await startKubelet(cluster);
await cluster.apply([{ apiVersion: 'v1', kind: 'Pod', metadata: { name: 'left' }, spec: { containers: [{ name: 'main', image: 'busybox', command: ['/bin/sh', '-c', 'while :; do sleep 0.05; done'] }] } }], { namespace: 'default' });
const { Rest } = await import(${JSON.stringify(helpers.replace(/cluster\.js$/, 'rest.js'))});
const rest = new Rest(cluster.kubeConfig);
const pod = await waitFor('pod left running', async () => { const p = await rest.request('GET', '/api/v1/namespaces/default/pods/left'); return p.status?.containerStatuses?.[0]?.state?.running ? p : undefined; });
console.log(JSON.stringify({ dir: cluster.kubeconfigPath.slice(0, cluster.kubeconfigPath.lastIndexOf('/')), pod: Number(pod.status.containerStatuses[0].containerID.replace('nereid-sim://', '')) }));
setInterval(() => {}, 1000);
`,
    );
    const child = spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let text = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (chunk: string) => (text += chunk));
    const info = await waitFor('the child to start a cluster and a pod', async () => (text.includes('\n') ? (JSON.parse(text) as { dir: string; pod: number }) : undefined), 60_000);
    cleanup.push(info.dir);
    const pids = [...pidsWithArgument(info.dir), info.pod];
    assert.ok(pids.length >= 3, `etcd, kube-apiserver and the pod's process: ${pids.join(', ')}`);
    for (const pid of pids) assert.ok(pidAlive(pid));
    child.kill('SIGTERM');
    await new Promise((resolve) => child.once('exit', resolve));
    await waitFor('the left processes to be gone', async () => pids.every((pid) => !pidAlive(pid)), 10_000);
    // etcd's data went too; the logs stay for a look.
    assert.equal(existsSync(join(info.dir, 'etcd')), false);
    assert.ok(existsSync(join(info.dir, 'kube-apiserver.log')));
  });

  it('times out waitFor with what it awaited and the last value seen', async () => {
    await assert.rejects(waitFor('the answer', async () => undefined, 200), /timed out after 200 ms waiting for the answer; last value: undefined/);
    let n = 0;
    await assert.rejects(
      waitFor('a value', async () => {
        n++;
        throw new ApiError('GET', '/x', 503, { message: 'not yet' });
      }, 200),
      /waiting for a value; last value: Error: GET \/x: HTTP 503: not yet/,
    );
    assert.ok(n > 1);
  });
});
