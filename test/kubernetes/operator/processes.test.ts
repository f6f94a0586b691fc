/**
 * The operator as separate `nereid-operator` processes against a real kube-apiserver and
 * kube-controller-manager, with the simulated kubelet:
 * - leader election on a coordination.k8s.io Lease: of two processes only the holder acts; when it
 *   is killed (SIGKILL, no release) the other takes the Lease once it expires and converges the
 *   fleet; a clean stop releases the Lease at once;
 * - an operator killed in the middle of reconciling (finalizers set, models loading) is restarted
 *   and the fleet converges to Ready.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RESOURCES, objectPath, type KubeClient, type KubeObject } from '@nereid/operator';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { EXAMPLES, adminClient, applyRaw, getObject, installCrds, metricValue, operatorUser, spawnOperator, type Json, type OperatorProcess } from './setup.js';

const NS = 'default';
const LEASE = ['--lease-duration-seconds=4', '--renew-deadline-seconds=3', '--retry-period-seconds=1'];
const cond = (o: Json | undefined, type: string): Json | undefined => o?.status?.conditions?.find((c: Json) => c.type === type);

const serverObject = (name: string, replicas = 1): Json => ({
  apiVersion: 'nereid.dev/v1alpha1',
  kind: 'NereidServer',
  metadata: { name, namespace: NS },
  spec: { replicas, modelRepository: { volume: { hostPath: { path: EXAMPLES, type: 'Directory' } } }, drainSeconds: 0 },
});
const modelObject = (name: string, server: string, modelName = name): Json => ({
  apiVersion: 'nereid.dev/v1alpha1',
  kind: 'NereidModel',
  metadata: { name, namespace: NS },
  spec: { server, modelName, source: { repository: {} } },
});

/**
 * The exit of an operator process. Managed children are unref'd, so a timer keeps this process's
 * event loop alive while it waits (at most `ms`).
 */
async function exitOf(op: OperatorProcess, ms = 15_000): Promise<{ code: number | null; signal: NodeJS.Signals | null } | undefined> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<undefined>((resolve) => (timer = setTimeout(() => resolve(undefined), ms)));
  try {
    return await Promise.race([op.process.exited, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

async function leaderMetric(op: OperatorProcess): Promise<number | undefined> {
  try {
    return metricValue(await (await fetch(`${op.metricsUrl}/metrics`)).text(), 'nereid_operator_leader');
  } catch {
    return undefined;
  }
}

describe('nereid-operator processes: leader election and restarts', () => {
  let cluster: Cluster;
  let kubelet: Kubelet;
  let admin: KubeClient;
  let kubeconfig: string;
  const processes: OperatorProcess[] = [];

  const get = (type: (typeof RESOURCES)[keyof typeof RESOURCES], name: string): Promise<Json | undefined> => getObject(admin, type, NS, name);
  const lease = (): Promise<Json | undefined> => admin.getOptional<KubeObject>(objectPath(RESOURCES.lease, NS, 'nereid-operator')) as Promise<Json | undefined>;
  const spawn = async (identity: string, via: 'nereid-operator' | 'nereid' = 'nereid-operator'): Promise<OperatorProcess> => {
    const op = await spawnOperator(kubeconfig, identity, LEASE, via);
    processes.push(op);
    return op;
  };

  before(async () => {
    cluster = await startCluster();
    await installCrds(cluster);
    admin = adminClient(cluster);
    kubelet = await startKubelet(cluster, { namespace: NS });
    kubeconfig = await operatorUser(cluster);
  });
  after(async () => {
    await Promise.all(processes.map((p) => p.process.stop(2000)));
    await kubelet?.stop();
    admin?.close();
    await cluster?.stop();
  });

  it('lets only the Lease holder act, and the standby take over when the leader is killed', async () => {
    const first = await spawn('operator-a');
    await waitFor('operator-a to hold the Lease', async () => (await lease())?.spec.holderIdentity === 'operator-a', 30_000);
    const second = await spawn('operator-b');
    await waitFor('operator-b to serve its metrics as a standby', async () => (await leaderMetric(second)) === 0, 30_000);
    assert.equal(await leaderMetric(first), 1);

    await applyRaw(cluster, [serverObject('alpha')]);
    await waitFor('alpha Ready under operator-a', async () => cond(await get(RESOURCES.nereidServer, 'alpha'), 'Ready')?.status === 'True', 90_000);
    // Only the leader wrote: every write of the operator's field manager came from operator-a's
    // process, and the standby never reconciled.
    const standbyText = await (await fetch(`${second.metricsUrl}/metrics`)).text();
    assert.equal(metricValue(standbyText, 'nereid_operator_reconcile_total'), undefined, 'the standby reconciled nothing');
    assert.match(second.process.tail(200), /waiting for the leader Lease/);
    assert.doesNotMatch(second.process.tail(200), /became leader/);

    first.process.signal('SIGKILL');
    assert.ok(await exitOf(first), 'operator-a ended');
    const killedAt = Date.now();
    await waitFor('operator-b to take the Lease', async () => (await lease())?.spec.holderIdentity === 'operator-b', 30_000);
    const tookMs = Date.now() - killedAt;
    assert.ok(tookMs >= 1000, `the Lease is taken only after it expires (${tookMs} ms)`);
    assert.equal((await lease())!.spec.leaseTransitions, 1);
    await waitFor('operator-b to report leading', async () => (await leaderMetric(second)) === 1, 10_000);

    // The new leader acts: a new server and a model converge.
    await applyRaw(cluster, [serverObject('beta'), modelObject('simple', 'beta')]);
    await waitFor(
      'NereidModel simple Ready 1/1 under operator-b',
      async () => {
        const m = await get(RESOURCES.nereidModel, 'simple');
        return cond(m, 'Ready')?.status === 'True' && m!.status.ready === '1/1';
      },
      90_000,
    );
  });

  it('releases the Lease on a clean stop, so a standby leads at once', async () => {
    const leader = processes.find((p) => p.identity === 'operator-b')!;
    const standby = await spawn('operator-c', 'nereid'); // `nereid operator`, the server CLI's command
    await waitFor('operator-c standing by', async () => (await leaderMetric(standby)) === 0, 30_000);
    await leader.process.stop(5000);
    assert.equal((await exitOf(leader))?.code, 0);
    await waitFor('operator-c to take the released Lease', async () => (await lease())?.spec.holderIdentity === 'operator-c', 10_000);
  });

  it('converges after the operator is killed in the middle of reconciling', async () => {
    const current = processes.find((p) => p.identity === 'operator-c')!;
    await applyRaw(cluster, [serverObject('gamma', 2), modelObject('g1', 'gamma', 'simple'), modelObject('g2', 'gamma', 'simple_identity')]);
    // Kill it as soon as it has started on the new objects (the Deployment exists), before they converge.
    await waitFor('the Deployment of gamma', () => get(RESOURCES.deployment, 'gamma'), 30_000);
    current.process.signal('SIGKILL');
    assert.ok(await exitOf(current), 'operator-c ended');
    const model = await get(RESOURCES.nereidModel, 'g1');
    assert.notEqual(cond(model, 'Ready')?.status, 'True', 'killed before the models converged');

    await spawn('operator-d');
    for (const name of ['g1', 'g2']) {
      await waitFor(
        `NereidModel ${name} Ready 2/2 after the restart`,
        async () => {
          const m = await get(RESOURCES.nereidModel, name);
          return cond(m, 'Ready')?.status === 'True' && m!.status.ready === '2/2';
        },
        120_000,
      );
    }
    await waitFor('gamma Ready with both models', async () => {
      const s = await get(RESOURCES.nereidServer, 'gamma');
      return cond(s, 'Ready')?.status === 'True' && s!.status.models?.length === 2 && s!.status.models.every((m: Json) => m.readyReplicas === 2);
    }, 60_000);
  });

  it('stops acting at once when another holder takes the Lease, and exits non-zero', async () => {
    const leader = processes.find((p) => p.identity === 'operator-d')!;
    await waitFor('operator-d to hold the Lease', async () => (await lease())?.spec.holderIdentity === 'operator-d', 30_000);
    const current = (await lease())!;
    const now = new Date().toISOString().replace(/Z$/, '000Z');
    await admin.replace(objectPath(RESOURCES.lease, NS, 'nereid-operator'), {
      ...current,
      spec: { ...current.spec, holderIdentity: 'intruder', renewTime: now, acquireTime: now, leaseDurationSeconds: 30 },
    } as unknown as KubeObject);
    const exit = await exitOf(leader, 10_000);
    assert.deepEqual(exit, { code: 1, signal: null }, leader.process.tail(20));
    assert.match(leader.process.tail(50), /lost the leader Lease/);
  });
});
