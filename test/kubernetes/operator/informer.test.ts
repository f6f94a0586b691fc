/**
 * The operator's informer against a real kube-apiserver: a watch from a resourceVersion the API
 * server no longer keeps answers 410 Gone (as an ERROR event), and the informer lists again and
 * keeps watching; a watch the server ends (timeoutSeconds) resumes from the last
 * resourceVersion without a new list; pagination reads every object.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Informer, RESOURCES, collectionPath, type KubeClient, type NereidServer } from '@nereid/operator';
import { startCluster, waitFor, type Cluster } from '../helpers/cluster.js';
import { adminClient, applyRaw, installCrds } from './setup.js';

const server = (name: string) => ({
  apiVersion: 'nereid.dev/v1alpha1',
  kind: 'NereidServer',
  metadata: { name, namespace: 'default' },
  spec: { modelRepository: { uri: '/models' } },
});

describe('Informer (list+watch) on kube-apiserver', () => {
  let cluster: Cluster;
  let client: KubeClient;
  before(async () => {
    cluster = await startCluster({ controllerManager: false });
    await installCrds(cluster);
    client = adminClient(cluster);
    await applyRaw(cluster, ['a', 'b', 'c', 'd', 'e'].map(server));
  });
  after(async () => {
    client?.close();
    await cluster?.stop();
  });

  it('lists again after 410 Gone and keeps watching', async () => {
    const relists: string[] = [];
    const events: string[] = [];
    const informer = new Informer<NereidServer>(client, collectionPath(RESOURCES.nereidServer), {
      initialResourceVersion: '1',
      onRelist: (reason) => relists.push(reason),
    });
    informer.on((event, o) => events.push(`${event}:${o.metadata.name}`));
    informer.start();
    try {
      await waitFor('the informer to re-list after 410 Gone', async () => relists.includes('gone') && informer.list().length === 5);
      assert.deepEqual(relists, ['gone']);
      assert.deepEqual(informer.list().map((s) => s.metadata.name).sort(), ['a', 'b', 'c', 'd', 'e']);
      await applyRaw(cluster, [server('f')]);
      await waitFor('the watch after the re-list to see f', async () => informer.get('default', 'f'));
      assert.ok(events.includes('add:f'));
    } finally {
      await informer.stop();
    }
  });

  it('resumes a watch the server ends from its resourceVersion, and pages the list', async () => {
    const relists: string[] = [];
    const informer = new Informer<NereidServer>(client, collectionPath(RESOURCES.nereidServer, 'default'), {
      pageSize: 2,
      watchTimeoutSeconds: 1,
      onRelist: (reason) => relists.push(reason),
    });
    informer.start();
    try {
      await informer.synced();
      assert.equal(informer.list().length, 6, 'three pages of two');
      await new Promise((r) => setTimeout(r, 2500)); // at least two server-ended watches
      await applyRaw(cluster, [server('g')]);
      await waitFor('g seen after the resumed watches', async () => informer.get('default', 'g'));
      await client.delete(`${collectionPath(RESOURCES.nereidServer, 'default')}/a`);
      await waitFor('a gone from the cache', async () => informer.get('default', 'a') === undefined);
      assert.deepEqual(relists, ['start'], 'no re-list: the watches resumed');
    } finally {
      await informer.stop();
    }
  });
});
