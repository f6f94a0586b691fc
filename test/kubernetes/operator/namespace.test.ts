/**
 * `--namespace`: an operator watching one namespace reconciles the NereidServers there and leaves
 * those of other namespaces alone (real kube-apiserver; no pods needed).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { RESOURCES, objectPath, type KubeClient } from '@nereid/operator';
import { startCluster, waitFor, type Cluster } from '../helpers/cluster.js';
import { adminClient, applyRaw, installCrds, operatorUser, startOperator, type InProcessOperator } from './setup.js';

describe('nereid operator --namespace', () => {
  let cluster: Cluster;
  let admin: KubeClient;
  let op: InProcessOperator;
  before(async () => {
    cluster = await startCluster({ controllerManager: false });
    await installCrds(cluster);
    admin = adminClient(cluster);
    for (const ns of ['team-a', 'team-b']) await admin.create('/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
    op = await startOperator(await operatorUser(cluster), { namespace: 'team-a' });
  });
  after(async () => {
    await op?.stop();
    admin?.close();
    await cluster?.stop();
  });

  it('reconciles only its namespace', async () => {
    const server = (ns: string) => ({
      apiVersion: 'nereid.dev/v1alpha1',
      kind: 'NereidServer',
      metadata: { name: 'fleet', namespace: ns },
      spec: { modelRepository: { uri: '/models' } },
    });
    await applyRaw(cluster, [server('team-b'), server('team-a')]);
    await waitFor('the Deployment in team-a', () => admin.getOptional(objectPath(RESOURCES.deployment, 'team-a', 'fleet')));
    await waitFor('the status of team-a/fleet', async () => {
      const s = (await admin.get(objectPath(RESOURCES.nereidServer, 'team-a', 'fleet'))) as { status?: { observedGeneration?: number } };
      return s.status?.observedGeneration === 1;
    });
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(await admin.getOptional(objectPath(RESOURCES.deployment, 'team-b', 'fleet')), undefined);
    const other = (await admin.get(objectPath(RESOURCES.nereidServer, 'team-b', 'fleet'))) as { status?: unknown };
    assert.equal(other.status, undefined);
  });
});
