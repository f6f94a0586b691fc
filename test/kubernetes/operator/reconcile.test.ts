/**
 * The operator against a real kube-apiserver and kube-controller-manager, with the simulated
 * kubelet running every server pod as a real Nereid process. The operator runs as a user bound to
 * exactly deploy/helm/nereid/files/operator-rules.yaml, so every step also proves the rules
 * suffice.
 *
 * One NereidServer (the example repository through a hostPath volume): its Deployment, Service and
 * PodDisruptionBudget with the right fields and ownerReferences; status conditions and
 * observedGeneration; NereidModels reaching Ready n/n on the real pods and the pods' readiness gate;
 * a bad model's load error; a config change reloading; drift corrected; a status write that meets a
 * 409 Conflict and retries; a NereidModel waiting for its server; deletion unloading through the
 * finalizer; deleting the NereidServer removing everything it owns.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RESOURCES, objectPath, updateStatus, type KubeClient, type NereidModel, type NereidServer } from '@nereid/operator';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { nereidPidsOn } from '../helpers/processes.js';
import { EXAMPLES, adminClient, applyRaw, getObject, installCrds, metricValue, operatorUser, serverPods, startOperator, type InProcessOperator, type Json } from './setup.js';

const NS = 'default';

const cond = (o: Json | undefined, type: string): Json | undefined => o?.status?.conditions?.find((c: Json) => c.type === type);

describe('nereid operator: NereidServer and NereidModel reconciliation', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let op: InProcessOperator;
  let admin: KubeClient;

  const get = (type: (typeof RESOURCES)[keyof typeof RESOURCES], name: string): Promise<Json | undefined> => getObject(admin, type, NS, name);
  const fleetPods = (name: string): Promise<Json[]> => serverPods(admin, NS, name);
  const index = async (pod: Json): Promise<Json[]> => {
    const res = await fetch(`http://${pod.status.podIP}:8000/v2/repository/index`, { method: 'POST', body: '{}' });
    return (await res.json()) as Json[];
  };

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

  it('creates the Deployment, Service and PodDisruptionBudget with the contract fields, owned by the NereidServer', async () => {
    await applyRaw(cluster, [
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: 'fleet', namespace: NS },
        spec: {
          replicas: 2,
          modelRepository: { volume: { hostPath: { path: EXAMPLES, type: 'Directory' } } },
          drainSeconds: 1,
          podDisruptionBudget: { minAvailable: 1 },
          podTemplate: { metadata: { labels: { team: 'ml' } } },
        },
      },
    ]);
    const server = (await get(RESOURCES.nereidServer, 'fleet'))!;
    const d = await waitFor('the Deployment', () => get(RESOURCES.deployment, 'fleet'));
    const s = await waitFor('the Service', () => get(RESOURCES.service, 'fleet'));
    const pdb = await waitFor('the PodDisruptionBudget', () => get(RESOURCES.pdb, 'fleet'));
    for (const o of [d, s, pdb]) {
      assert.deepEqual(o.metadata.ownerReferences, [
        { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidServer', name: 'fleet', uid: server.metadata.uid, controller: true, blockOwnerDeletion: true },
      ]);
      assert.equal(o.metadata.labels['app.kubernetes.io/managed-by'], 'nereid-operator');
      assert.equal(o.metadata.labels['app.kubernetes.io/instance'], 'fleet');
    }
    assert.equal(d.spec.replicas, 2);
    assert.deepEqual(d.spec.strategy.rollingUpdate, { maxUnavailable: 0, maxSurge: 1 });
    assert.deepEqual(d.spec.selector.matchLabels, {
      'app.kubernetes.io/name': 'nereid',
      'app.kubernetes.io/instance': 'fleet',
      'app.kubernetes.io/component': 'server',
    });
    const pod = d.spec.template.spec;
    assert.equal(d.spec.template.metadata.labels.team, 'ml');
    assert.equal(d.spec.template.metadata.annotations['prometheus.io/scrape'], 'true');
    assert.deepEqual(pod.readinessGates, [{ conditionType: 'nereid.dev/models-ready' }]);
    assert.equal(pod.containers[0].name, 'nereid');
    assert.deepEqual(pod.containers[0].args.slice(0, 4), ['serve', '--model-repository=/models', '--model-control-mode=explicit', '--repository-poll-secs=0']);
    assert.equal(pod.containers[0].readinessProbe.httpGet.path, '/v2/health/ready');
    assert.equal(pod.containers[0].livenessProbe.httpGet.path, '/v2/health/live');
    assert.deepEqual(pod.containers[0].lifecycle.preStop, { sleep: { seconds: 1 } });
    assert.equal(pod.terminationGracePeriodSeconds, 31);
    assert.deepEqual(
      s.spec.ports.map((p: Json) => `${p.name}:${p.port}`),
      ['http:8000', 'grpc:8001', 'metrics:8002'],
    );
    assert.equal(pdb.spec.minAvailable, 1);
  });

  it('reports Ready with observedGeneration once the pods run (no models: the gate is open)', async () => {
    const server = await waitFor(
      'NereidServer fleet Ready',
      async () => {
        const s = await get(RESOURCES.nereidServer, 'fleet');
        return cond(s, 'Ready')?.status === 'True' ? s : undefined;
      },
      90_000,
    );
    assert.equal(server.status.observedGeneration, server.metadata.generation);
    assert.equal(server.status.readyReplicas, 2);
    assert.equal(cond(server, 'Progressing')?.status, 'False');
    assert.equal(cond(server, 'Degraded')?.status, 'False');
    for (const c of server.status.conditions) assert.equal(c.observedGeneration, server.metadata.generation);
    for (const pod of await fleetPods('fleet')) {
      assert.equal(cond(pod, 'nereid.dev/models-ready')?.status, 'True');
      assert.equal(cond(pod, 'Ready')?.status, 'True');
    }
  });

  it('loads NereidModels on every pod: Ready n/n, per-pod status, the readiness gate', async () => {
    await applyRaw(cluster, [
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'simple', namespace: NS }, spec: { server: 'fleet', source: { repository: {} } } },
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidModel',
        metadata: { name: 'identity', namespace: NS },
        spec: { server: 'fleet', modelName: 'simple_identity', source: { repository: { path: 'simple_identity' } } },
      },
    ]);
    for (const name of ['simple', 'identity']) {
      const model = await waitFor(
        `NereidModel ${name} Ready 2/2`,
        async () => {
          const m = await get(RESOURCES.nereidModel, name);
          return cond(m, 'Ready')?.status === 'True' && m!.status.ready === '2/2' ? m : undefined;
        },
        60_000,
      );
      assert.equal(model.status.readyReplicas, 2);
      assert.equal(model.status.replicas, 2);
      assert.equal(model.status.ready, '2/2');
      assert.equal(model.status.observedGeneration, model.metadata.generation);
      assert.deepEqual(model.metadata.finalizers, ['nereid.dev/unload']);
      assert.equal(model.status.pods.length, 2);
      for (const p of model.status.pods) assert.equal(p.state, 'READY');
    }
    for (const pod of await fleetPods('fleet')) {
      const entries = await index(pod);
      assert.ok(entries.some((e) => e.name === 'simple' && e.state === 'READY'), JSON.stringify(entries));
      assert.ok(entries.some((e) => e.name === 'simple_identity' && e.state === 'READY'), JSON.stringify(entries));
      const ready = await fetch(`http://${pod.status.podIP}:8000/v2/models/simple/ready`);
      assert.equal(ready.status, 200);
    }
    const server = await waitFor('the server status listing both models', async () => {
      const s = await get(RESOURCES.nereidServer, 'fleet');
      return s?.status?.models?.length === 2 && s.status.models.every((m: Json) => m.readyReplicas === 2) ? s : undefined;
    });
    assert.deepEqual(server.status.models.map((m: Json) => m.name), ['simple', 'simple_identity']);
  });

  it('reports a bad model with its load error, and closes the gate of its pods', async () => {
    // A model the repository does not have: every pod's load fails.
    await applyRaw(cluster, [
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'missing', namespace: NS }, spec: { server: 'fleet', source: { repository: {} } } },
    ]);
    const model = await waitFor(
      'NereidModel missing to report its load error',
      async () => {
        const m = await get(RESOURCES.nereidModel, 'missing');
        const ready = cond(m, 'Ready');
        return ready?.status === 'False' && ready.reason === 'LoadFailed' && m!.status.replicas === 2 ? m : undefined;
      },
      60_000,
    );
    const ready = cond(model, 'Ready')!;
    assert.match(ready.message, /READY on 0\/2 pods; fleet-.*: UNAVAILABLE: .+/);
    assert.equal(model.status.readyReplicas, 0);
    for (const p of model.status.pods) assert.equal(p.state, 'UNAVAILABLE');
    for (const pod of await fleetPods('fleet')) {
      const p = await waitFor('the gate to close', async () => {
        const fresh = await get(RESOURCES.pod, pod.metadata.name);
        return cond(fresh, 'nereid.dev/models-ready')?.status === 'False' ? fresh : undefined;
      });
      assert.match(cond(p, 'nereid.dev/models-ready')!.message, /missing/);
    }
    await admin.delete(objectPath(RESOURCES.nereidModel, NS, 'missing'));
    await waitFor('the gates to open again', async () => {
      const pods = await fleetPods('fleet');
      return pods.length === 2 && pods.every((p) => cond(p, 'nereid.dev/models-ready')?.status === 'True');
    });
  });

  it('reloads a model on every pod when its spec changes', async () => {
    const before = (await get(RESOURCES.nereidModel, 'simple'))!;
    await applyRaw(cluster, [
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidModel',
        metadata: { name: 'simple', namespace: NS },
        spec: { server: 'fleet', source: { repository: {} }, versions: [1] },
      },
    ]);
    const after = await waitFor('the reload at the new generation', async () => {
      const m = await get(RESOURCES.nereidModel, 'simple');
      return m && m.metadata.generation > before.metadata.generation && m.status.observedGeneration === m.metadata.generation && cond(m, 'Ready')?.status === 'True' ? m : undefined;
    }, 60_000);
    for (const p of after.status.pods) {
      assert.equal(p.generation, after.metadata.generation);
      assert.notEqual(p.lastLoadTime, undefined);
    }
    // versions without config: the pods serve config.pbtxt (max_batch_size 8) with the policy over it.
    for (const pod of await fleetPods('fleet')) {
      const config = (await (await fetch(`http://${pod.status.podIP}:8000/v2/models/simple/config`)).json()) as Json;
      assert.equal(config.max_batch_size, 8, `${pod.metadata.name}: ${JSON.stringify(config)}`);
      assert.deepEqual(config.version_policy, { specific: { versions: [1] } });
    }
  });

  it('reports a config change that fails to load, and recovers when it is fixed', async () => {
    const model = (config?: Json): Json => ({
      apiVersion: 'nereid.dev/v1alpha1',
      kind: 'NereidModel',
      metadata: { name: 'identity', namespace: NS },
      spec: { server: 'fleet', modelName: 'simple_identity', source: { repository: { path: 'simple_identity' } }, ...(config ? { config } : {}) },
    });
    await applyRaw(cluster, [model({ name: 'simple_identity', backend: 'no_such_backend' })]);
    const failed = await waitFor('identity to report the failed reload', async () => {
      const m = await get(RESOURCES.nereidModel, 'identity');
      return m?.status.observedGeneration === m?.metadata.generation && cond(m, 'Ready')?.reason === 'LoadFailed' ? m : undefined;
    }, 60_000);
    assert.match(cond(failed, 'Ready')!.message, /no_such_backend/);
    assert.equal(failed.status.readyReplicas, 0);
    for (const p of failed.status.pods) assert.match(p.loadError, /no_such_backend/);
    // It stays reported as failed on later re-checks (the pods may still serve the earlier copy).
    await new Promise((r) => setTimeout(r, 6000));
    assert.equal(cond(await get(RESOURCES.nereidModel, 'identity'), 'Ready')?.reason, 'LoadFailed');
    await applyRaw(cluster, [model()]);
    await waitFor('identity Ready 2/2 again', async () => {
      const m = await get(RESOURCES.nereidModel, 'identity');
      return cond(m, 'Ready')?.status === 'True' && m!.status.ready === '2/2' && m!.status.pods.every((p: Json) => p.loadError === undefined);
    }, 60_000);
  });

  it('loads the models again on a pod whose server process restarted, holding the gate closed until then', async () => {
    const [pod] = await fleetPods('fleet');
    const pids = nereidPidsOn(pod.status.podIP, process.pid);
    assert.equal(pids.length, 1, `one server process on ${pod.status.podIP}`);
    process.kill(pids[0], 'SIGKILL');
    await waitFor('the gate closed while the containers are not ready', async () => {
      const p = await get(RESOURCES.pod, pod.metadata.name);
      return cond(p, 'nereid.dev/models-ready')?.status === 'False';
    }, 30_000);
    await waitFor(
      'the restarted pod Ready again with its models',
      async () => {
        const p = await get(RESOURCES.pod, pod.metadata.name);
        if (cond(p, 'Ready')?.status !== 'True' || p!.status.containerStatuses[0].restartCount < 1) return undefined;
        const entries = await index(p!);
        return entries.some((e) => e.name === 'simple' && e.state === 'READY') && entries.some((e) => e.name === 'simple_identity' && e.state === 'READY');
      },
      60_000,
    );
    await waitFor('simple Ready 2/2 again', async () => (await get(RESOURCES.nereidModel, 'simple'))?.status.ready === '2/2');
  });

  it('refuses a second NereidModel deploying the same model name on a server, and leaves the first loaded when it goes', async () => {
    await applyRaw(cluster, [
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'simple-again', namespace: NS }, spec: { server: 'fleet', modelName: 'simple', source: { repository: {} } } },
    ]);
    const dup = await waitFor('NameConflict', async () => {
      const m = await get(RESOURCES.nereidModel, 'simple-again');
      return cond(m, 'Ready')?.reason === 'NameConflict' ? m : undefined;
    });
    assert.match(cond(dup, 'Ready')!.message, /NereidModel simple already deploys model simple on NereidServer fleet/);
    await admin.delete(objectPath(RESOURCES.nereidModel, NS, 'simple-again'));
    await waitFor('simple-again gone', async () => (await get(RESOURCES.nereidModel, 'simple-again')) === undefined);
    for (const pod of await fleetPods('fleet')) assert.ok((await index(pod)).some((e) => e.name === 'simple' && e.state === 'READY'));
  });

  it('records Events for condition transitions', async () => {
    const events = (await admin.list(`/api/v1/namespaces/${NS}/events`)).items as Json[];
    const about = (kind: string, name: string) => events.filter((e) => e.involvedObject.kind === kind && e.involvedObject.name === name);
    assert.ok(about('NereidModel', 'missing').some((e) => e.type === 'Warning' && e.reason === 'LoadFailed'), JSON.stringify(events.map((e) => [e.involvedObject.name, e.reason])));
    assert.ok(about('NereidModel', 'simple').some((e) => e.type === 'Normal' && e.reason === 'Loaded'));
    assert.ok(about('NereidServer', 'fleet').some((e) => e.reason === 'AllReplicasReady'));
    for (const e of events.filter((x) => x.source?.component === 'nereid-operator')) assert.equal(e.reportingComponent, 'nereid-operator');
  });

  it('rolls a spec change out one pod at a time, each new pod Ready only with its models loaded', async () => {
    const oldPods = new Set((await fleetPods('fleet')).map((p) => p.metadata.uid as string));
    let minReady = Infinity;
    let watching = true;
    const sampler = (async () => {
      while (watching) {
        const ready = (await fleetPods('fleet')).filter((p) => cond(p, 'Ready')?.status === 'True').length;
        minReady = Math.min(minReady, ready);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    try {
      await applyRaw(cluster, [
        {
          apiVersion: 'nereid.dev/v1alpha1',
          kind: 'NereidServer',
          metadata: { name: 'fleet', namespace: NS },
          spec: {
            replicas: 2,
            modelRepository: { volume: { hostPath: { path: EXAMPLES, type: 'Directory' } } },
            drainSeconds: 1,
            podDisruptionBudget: { minAvailable: 1 },
            podTemplate: { metadata: { labels: { team: 'ml' } } },
            serverArgs: ['--log-verbose=1'],
          },
        },
      ]);
      await waitFor(
        'two new pods Ready with both models and the old ones gone',
        async () => {
          const pods = await fleetPods('fleet');
          if (pods.length !== 2 || pods.some((p) => oldPods.has(p.metadata.uid) || cond(p, 'Ready')?.status !== 'True')) return false;
          for (const p of pods) {
            const entries = await index(p);
            if (!['simple', 'simple_identity'].every((n) => entries.some((e) => e.name === n && e.state === 'READY'))) return false;
          }
          return true;
        },
        120_000,
      );
    } finally {
      watching = false;
      await sampler;
    }
    assert.ok(minReady >= 2, `ready pods never fell below 2 during the rollout (lowest: ${minReady})`);
    const server = await waitFor('the server rolled out', async () => {
      const s = await get(RESOURCES.nereidServer, 'fleet');
      return cond(s, 'Ready')?.status === 'True' && cond(s, 'Progressing')?.status === 'False' && s!.status.observedGeneration === s!.metadata.generation ? s : undefined;
    }, 30_000);
    assert.equal(server.status.readyReplicas, 2);
  });

  it('corrects drift in an owned object', async () => {
    // Someone edits fields the operator manages: the Service's type and a port's target, the
    // Deployment's replicas and rollout strategy.
    await admin.patch(objectPath(RESOURCES.service, NS, 'fleet'), 'strategic', {
      spec: { type: 'NodePort', ports: [{ port: 8000, protocol: 'TCP', targetPort: 9000 }] },
    });
    await admin.patch(objectPath(RESOURCES.deployment, NS, 'fleet'), 'merge', { spec: { replicas: 3, strategy: { rollingUpdate: { maxUnavailable: 1 } } } });
    await waitFor('the Service restored', async () => {
      const s = await get(RESOURCES.service, 'fleet');
      return s?.spec.type === 'ClusterIP' && s.spec.ports.find((p: Json) => p.port === 8000)?.targetPort === 'http';
    });
    await waitFor('the Deployment restored', async () => {
      const d = await get(RESOURCES.deployment, 'fleet');
      return d?.spec.replicas === 2 && d.spec.strategy.rollingUpdate.maxUnavailable === 0;
    });
    await waitFor('the fleet back to 2 ready pods', async () => (await get(RESOURCES.nereidServer, 'fleet'))?.status?.readyReplicas === 2 && (await fleetPods('fleet')).length === 2, 60_000);
  });

  it('retries a status write that meets a 409 Conflict with the fresh object', async () => {
    let interfered = false;
    const result = await updateStatus<NereidServer>(admin, RESOURCES.nereidServer, NS, 'fleet', async (latest, attempt) => {
      if (attempt === 0) {
        // Someone else writes between this read and the status write: the write must conflict.
        await admin.patch(objectPath(RESOURCES.nereidServer, NS, 'fleet'), 'merge', { metadata: { annotations: { touched: String(Date.now()) } } });
        interfered = true;
      }
      return { ...latest.status, conditions: latest.status?.conditions ?? [], replicas: latest.status?.replicas ?? 0 };
    });
    assert.ok(interfered);
    assert.equal(result.conflicts, 0, 'an unchanged status is not written, so no conflict yet');
    const forced = await updateStatus<NereidServer>(admin, RESOURCES.nereidServer, NS, 'fleet', async (latest, attempt) => {
      if (attempt === 0) await admin.patch(objectPath(RESOURCES.nereidServer, NS, 'fleet'), 'merge', { metadata: { annotations: { touched: 'again' } } });
      return { ...latest.status, models: [...(latest.status?.models ?? []), { name: `probe-${attempt}`, readyReplicas: 0 }] };
    });
    // At least the interference conflicts (the operator, writing the same status, may add more).
    assert.ok(forced.conflicts >= 1, `conflicts: ${forced.conflicts}`);
    assert.ok(forced.written);
    assert.ok(forced.object?.status?.models?.some((m) => m.name === `probe-${forced.conflicts}`));
    // The operator puts its own view back.
    await waitFor('the operator to rewrite the models list', async () => {
      const s = await get(RESOURCES.nereidServer, 'fleet');
      return s && !s.status.models.some((m: Json) => m.name.startsWith('probe-'));
    }, 90_000);
  });

  it('says so when a NereidModel names a server that does not exist, and reconciles it once the server appears', async () => {
    await applyRaw(cluster, [
      { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name: 'later', namespace: NS }, spec: { server: 'second', modelName: 'simple', source: { repository: {} } } },
    ]);
    const waiting = await waitFor('ServerNotFound', async () => {
      const m = await get(RESOURCES.nereidModel, 'later');
      return cond(m, 'Ready')?.reason === 'ServerNotFound' ? m : undefined;
    });
    assert.match(cond(waiting, 'Ready')!.message, /NereidServer second does not exist in namespace default/);
    await applyRaw(cluster, [
      {
        apiVersion: 'nereid.dev/v1alpha1',
        kind: 'NereidServer',
        metadata: { name: 'second', namespace: NS },
        spec: { replicas: 1, modelRepository: { volume: { hostPath: { path: EXAMPLES, type: 'Directory' } } }, drainSeconds: 0 },
      },
    ]);
    await waitFor(
      'NereidModel later Ready 1/1 on the new server',
      async () => {
        const m = await get(RESOURCES.nereidModel, 'later');
        return cond(m, 'Ready')?.status === 'True' && m!.status.ready === '1/1';
      },
      90_000,
    );
  });

  it('unloads a deleted NereidModel from every pod before its finalizer goes', async () => {
    const pods = await fleetPods('second');
    assert.equal(pods.length, 1);
    assert.ok((await index(pods[0])).some((e) => e.name === 'simple' && e.state === 'READY'));
    await admin.delete(objectPath(RESOURCES.nereidModel, NS, 'later'));
    await waitFor('the NereidModel gone', async () => (await get(RESOURCES.nereidModel, 'later')) === undefined);
    const entries = await index(pods[0]);
    assert.ok(!entries.some((e) => e.name === 'simple' && e.state === 'READY'), JSON.stringify(entries));
  });

  it('counts reconciles in its metrics and answers health checks', async () => {
    const text = await (await fetch(`${op.metricsUrl}/metrics`)).text();
    assert.ok((metricValue(text, 'nereid_operator_reconcile_total', { kind: 'NereidServer', result: 'requeue' }) ?? 0) > 0, text.slice(0, 2000));
    assert.ok((metricValue(text, 'nereid_operator_reconcile_total', { kind: 'NereidModel' }) ?? 0) > 0);
    assert.equal(metricValue(text, 'nereid_operator_leader'), 1);
    assert.ok(metricValue(text, 'nereid_operator_reconcile_duration_seconds_count', { kind: 'NereidServer' })! > 0);
    assert.notEqual(metricValue(text, 'nereid_operator_workqueue_depth', { kind: 'NereidModel' }), undefined);
    assert.equal((await fetch(`${op.metricsUrl}/healthz`)).status, 200);
    // Everything above ran as a user bound to exactly the chart's rules: nothing was forbidden.
    assert.deepEqual(op.logs.filter((l) => /Forbidden|forbidden/.test(l)), []);
    assert.equal((await fetch(`${op.metricsUrl}/readyz`)).status, 200);
  });

  it('deleting the NereidServer removes everything it owns', async () => {
    await admin.delete(objectPath(RESOURCES.nereidServer, NS, 'second'));
    await admin.delete(objectPath(RESOURCES.nereidServer, NS, 'fleet'));
    for (const name of ['fleet', 'second']) {
      await waitFor(
        `the objects of ${name} garbage-collected`,
        async () => {
          const left = await Promise.all([RESOURCES.deployment, RESOURCES.service, RESOURCES.pdb].map((t) => get(t, name)));
          return left.every((o) => o === undefined) && (await fleetPods(name)).length === 0;
        },
        90_000,
      );
    }
    // The NereidModels of a deleted server say so.
    await waitFor('NereidModel simple: ServerNotFound', async () => cond(await get(RESOURCES.nereidModel, 'simple'), 'Ready')?.reason === 'ServerNotFound');
    await admin.delete(objectPath(RESOURCES.nereidModel, NS, 'simple'));
    await admin.delete(objectPath(RESOURCES.nereidModel, NS, 'identity'));
    await waitFor('the NereidModels gone (finalizers removed)', async () => {
      const list = await admin.list<NereidModel>(`/apis/nereid.dev/v1alpha1/namespaces/${NS}/nereidmodels`);
      return list.items.length === 0;
    });
  });
});
