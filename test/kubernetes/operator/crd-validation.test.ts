/**
 * The CRDs against a real kube-apiserver: they install (structural schemas, CEL rules that
 * compile within the cost budget), defaults are filled in, and bad specs are rejected at the API
 * server with the rules' messages.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { startCluster, type Cluster } from '../helpers/cluster.js';
import { Rest } from '../helpers/rest.js';
import { applyRaw, installCrds, type Json } from './setup.js';

const server = (spec: Json, name = 'fleet'): Json => ({ apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidServer', metadata: { name, namespace: 'default' }, spec });
const model = (spec: Json, name = 'm'): Json => ({ apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidModel', metadata: { name, namespace: 'default' }, spec });

describe('NereidServer and NereidModel CRDs on kube-apiserver', () => {
  let cluster: Cluster;
  before(async () => {
    cluster = await startCluster({ controllerManager: false });
    await installCrds(cluster);
  });
  after(async () => cluster?.stop());

  const rejects = async (object: Json, message: RegExp): Promise<void> => {
    await assert.rejects(applyRaw(cluster, [object], { dryRun: true }), (err: Error) => {
      assert.match(err.message, message);
      return true;
    });
  };

  it('fills in the defaults', async () => {
    const [applied] = (await applyRaw(cluster, [server({ modelRepository: { uri: 's3://bucket/models' } })], { dryRun: true })) as Json[];
    assert.equal(applied.spec.image, undefined, 'the operator supplies the image (--server-image)');
    assert.equal(applied.spec.replicas, 1);
    assert.deepEqual(applied.spec.ports, { http: 8000, grpc: 8001, metrics: 8002 });
    assert.equal(applied.spec.serviceType, 'ClusterIP');
    assert.equal(applied.spec.drainSeconds, 5);
  });

  it('accepts a full NereidServer and NereidModels of each source kind', async () => {
    await applyRaw(cluster, 
      [
        server({
          image: 'nereid:0.1.0',
          imagePullPolicy: 'IfNotPresent',
          replicas: 2,
          minReplicas: 1,
          maxReplicas: 4,
          resources: { requests: { cpu: '500m', memory: '1Gi' }, limits: { memory: 2147483648 } },
          ports: { http: 8000, grpc: 8001, metrics: 8002 },
          serverArgs: ['--log-verbose=1'],
          modelRepository: { uri: 's3://bucket/models', s3: { endpoint: 'http://s3:8333', region: 'us-east-1', credentialsSecret: 'creds' } },
          pollSeconds: 5,
          podDisruptionBudget: { minAvailable: '50%' },
          podTemplate: { metadata: { labels: { team: 'ml' } }, spec: { nodeSelector: { gpu: 'true' } } },
          serviceType: 'LoadBalancer',
        }),
        model({ server: 'fleet', source: { repository: {} } }, 'a'),
        model({ server: 'fleet', modelName: 'b_model', source: { configMap: { name: 'b' } }, config: { backend: 'onnxruntime' } }, 'b'),
        model({ server: 'fleet', source: { uri: 's3://bucket/models/c' }, versions: [1, 2] }, 'c'),
      ],
      { dryRun: true },
    );
  });

  it('rejects minReplicas above maxReplicas, and replicas outside them', async () => {
    await rejects(server({ modelRepository: { uri: '/m' }, minReplicas: 3, maxReplicas: 2, replicas: 3 }), /minReplicas must not exceed maxReplicas/);
    await rejects(server({ modelRepository: { uri: '/m' }, minReplicas: 2, replicas: 1 }), /replicas must be at least minReplicas/);
    await rejects(server({ modelRepository: { uri: '/m' }, maxReplicas: 2, replicas: 3 }), /replicas must not exceed maxReplicas/);
  });

  it('rejects ports out of range or shared', async () => {
    await rejects(server({ modelRepository: { uri: '/m' }, ports: { http: 70000 } }), /spec.ports.http: Invalid value: 70000: spec.ports.http in body should be less than or equal to 65535/);
    await rejects(server({ modelRepository: { uri: '/m' }, ports: { http: 8001 } }), /three different ports/);
  });

  it('rejects a repository without a source, a bad uri, s3 settings without s3, and generated flags in serverArgs', async () => {
    await rejects(server({ modelRepository: {} }), /modelRepository needs a uri/);
    await rejects(server({ modelRepository: { uri: 'models' } }), /modelRepository.uri must be an s3:\/\/ URI or an absolute path/);
    await rejects(server({ modelRepository: { uri: '/m', s3: { region: 'x' } } }), /modelRepository.s3 applies only to an s3:\/\/ uri/);
    await rejects(server({ modelRepository: { uri: '/data', volume: { emptyDir: {} } } }), /must be \/models or a path under it/);
    await rejects(server({ modelRepository: { uri: '/m' }, serverArgs: ['--http-port=1'] }), /serverArgs may not set/);
    await rejects(server({ modelRepository: { uri: '/m' }, podDisruptionBudget: { minAvailable: 1, maxUnavailable: 1 } }), /minAvailable or maxUnavailable, not both/);
    await rejects(server({ modelRepository: { uri: '/m' }, serviceType: 'ExternalName' }), /Unsupported value: "ExternalName"/);
  });

  it('rejects a NereidModel with no source, two sources, a bad name or a configMap without config', async () => {
    await rejects(model({ server: 'fleet', source: {} }), /source takes exactly one of repository, configMap or uri/);
    await rejects(model({ server: 'fleet', source: { repository: {}, uri: '/m/x' } }), /source takes exactly one of repository, configMap or uri/);
    await rejects(model({ server: 'fleet', modelName: '../etc', source: { repository: {} } }), /modelName must be a valid model name/);
    await rejects(model({ server: 'Fleet_1', source: { repository: {} } }), /server must be the name of a NereidServer/);
    await rejects(model({ server: 'fleet', source: { configMap: { name: 'c' } } }), /a configMap source needs config/);
    await rejects(model({ server: 'fleet', source: { uri: 'http://x/y' } }), /source.uri must be an s3:\/\/ URI or an absolute path/);
    await rejects(model({ source: { repository: {} } }), /spec.server: Required value/);
  });

  it('accepts a canary and rejects steps that do not ascend or end with 100, a canary equal to the stable version, and several stable versions', async () => {
    const [applied] = (await applyRaw(
      cluster,
      [model({ server: 'fleet', source: { repository: {} }, versions: [1], canary: { version: 2, steps: [5, 25, 100], intervalSeconds: 60, analysis: { maxErrorRate: 0.02, maxLatencyRatio: 1.5, minRequests: 50 } } }, 'canary')],
      { dryRun: true },
    )) as Json[];
    assert.deepEqual(applied.spec.canary.steps, [5, 25, 100]);
    await applyRaw(cluster, [model({ server: 'fleet', source: { repository: {} }, canary: { version: 2 } }, 'canary-defaults')], { dryRun: true });
    const canary = (c: Json, versions?: number[]): Json => model({ server: 'fleet', source: { repository: {} }, ...(versions ? { versions } : {}), canary: c });
    await rejects(canary({ version: 2, steps: [50, 10, 100] }), /canary.steps must ascend/);
    await rejects(canary({ version: 2, steps: [10, 10, 100] }), /canary.steps must ascend, each step above the one before/);
    await rejects(canary({ version: 2, steps: [10, 50] }), /canary.steps must end with 100/);
    await rejects(canary({ version: 2, steps: [0, 100] }), /spec.canary.steps\[0\] in body should be greater than or equal to 1/);
    await rejects(canary({ version: 2 }, [2]), /canary.version must differ from the stable version/);
    await rejects(canary({ version: 3 }, [1, 2]), /with canary, versions names the stable version alone/);
    await rejects(canary({ version: 2, analysis: { maxErrorRate: 2 } }), /spec.canary.analysis.maxErrorRate in body should be less than or equal to 1/);
    await rejects(canary({ steps: [100] }), /spec.canary.version: Required value/);
  });

  it('keeps server and modelName immutable', async () => {
    await applyRaw(cluster, [model({ server: 'fleet', modelName: 'x', source: { repository: {} } }, 'immutable')]);
    await assert.rejects(applyRaw(cluster, [model({ server: 'other', modelName: 'x', source: { repository: {} } }, 'immutable')]), /server is immutable/);
    await assert.rejects(applyRaw(cluster, [model({ server: 'fleet', modelName: 'y', source: { repository: {} } }, 'immutable')]), /modelName is immutable/);
  });

  it('shows the printer columns that kubectl get shows, from spec and status', async () => {
    const ns = '/apis/nereid.dev/v1alpha1/namespaces/default';
    await applyRaw(cluster, [server({ replicas: 3, modelRepository: { uri: 's3://bucket/models' } }, 'columns'), model({ server: 'columns', source: { repository: {} } }, 'columns-model')]);
    const rest = new Rest(cluster.kubeConfig);
    const now = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
    await rest.request('PATCH', `${ns}/nereidservers/columns/status`, {
      status: { readyReplicas: 2, conditions: [{ type: 'Ready', status: 'False', reason: 'Progressing', message: '2 of 3 ready', lastTransitionTime: now }] },
    }, 'application/merge-patch+json');
    const TABLE = 'application/json;as=Table;v=v1;g=meta.k8s.io';
    type Table = { columnDefinitions: { name: string; priority: number }[]; rows: { cells: unknown[] }[] };
    const cells = (t: Table): Record<string, unknown> => Object.fromEntries(t.columnDefinitions.map((c, i) => [c.name, t.rows[0]!.cells[i]]));

    const servers = await rest.request<Table>('GET', `${ns}/nereidservers?fieldSelector=metadata.name%3Dcolumns`, undefined, 'application/json', TABLE);
    assert.deepEqual(servers.columnDefinitions.filter((c) => c.priority === 0).map((c) => c.name), ['Name', 'Ready', 'Replicas', 'ReadyReplicas', 'Age']);
    const s = cells(servers);
    assert.equal(s.Name, 'columns');
    assert.equal(s.Ready, 'False');
    assert.equal(s.Replicas, 3);
    assert.equal(s.ReadyReplicas, 2);
    assert.equal(s.Repository, 's3://bucket/models', 'the wide column (priority 1) names the repository');

    const models = await rest.request<Table>('GET', `${ns}/nereidmodels?fieldSelector=metadata.name%3Dcolumns-model`, undefined, 'application/json', TABLE);
    const m = cells(models);
    assert.equal(m.Name, 'columns-model');
    assert.equal(m.Server, 'columns');
    assert.deepEqual(models.columnDefinitions.filter((c) => c.priority === 0).map((c) => c.name), ['Name', 'Server', 'Ready', 'Status', 'Canary', 'Weight', 'Age']);
  });
});
