/**
 * Nereid's Helm chart (deploy/helm/nereid) rendered by a real Helm (helm.sh/helm/v4, built by
 * scripts/fleet-infra.mjs): lint, the default values (the operator), the plain server mode with
 * Triton's chart's values, an S3 repository, and the values schema's refusals; then against a real
 * kube-apiserver: every rendered manifest in a server-side dry run, and plain-server installs (a
 * volume repository, and an S3 bucket on a real SeaweedFS) whose pods run real Nereid processes
 * under the simulated kubelet until they are Ready and answer inferences.
 */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppsV1Api, CoordinationV1Api, CoreV1Api, type V1Pod } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { startCluster, startKubelet, waitFor, type Cluster, type Kubelet } from '../helpers/cluster.js';
import { startS3, type S3Store } from '../helpers/s3.js';
import { putModel, readModelDirectory } from '../helpers/s3-models.js';

const root = fileURLToPath(new URL('../../../..', import.meta.url));
const chart = join(root, 'deploy', 'helm', 'nereid');

interface Manifest {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [key: string]: unknown;
}
// The shapes the assertions read; rendered objects are plain JSON.
interface Container {
  name: string;
  image: string;
  args: string[];
  env?: { name: string; value?: string; valueFrom?: { secretKeyRef?: { name: string; key: string; optional?: boolean } } }[];
  ports: { name: string; containerPort: number }[];
  readinessProbe: { httpGet: { path: string; port: string } };
  livenessProbe: { httpGet: { path: string; port: string } };
  resources: { limits?: Record<string, unknown>; requests?: Record<string, unknown> };
}
interface Deployment extends Manifest {
  spec: {
    replicas: number;
    selector: { matchLabels: Record<string, string> };
    template: { metadata: { labels: Record<string, string>; annotations?: Record<string, string> }; spec: { serviceAccountName?: string; containers: Container[]; securityContext: { runAsNonRoot?: boolean } } };
  };
}
interface Service extends Manifest {
  spec: { type: string; selector: Record<string, string>; ports: { name: string; port: number; targetPort: string }[] };
}

/** The documents of a YAML stream as plain objects, empty documents left out. */
function parseYaml(text: string): unknown[] {
  return parseAllDocuments(text)
    .map((doc) => {
      assert.equal(doc.errors.length, 0, `YAML: ${doc.errors.map((e) => e.message).join('; ')}`);
      return doc.toJS() as unknown;
    })
    .filter((d) => d !== null && d !== undefined);
}

let helmBinary = '';
const helmEnv = (() => {
  const home = mkdtempSync(join(tmpdir(), 'nereid-helm-'));
  return { ...process.env, HELM_CACHE_HOME: join(home, 'cache'), HELM_CONFIG_HOME: join(home, 'config'), HELM_DATA_HOME: join(home, 'data') };
})();

function exec(file: string, args: string[], env?: NodeJS.ProcessEnv): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { env, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1;
      resolve({ code, stdout, stderr });
    });
  });
}

/** Runs helm; the result whatever the exit status. */
const helm = (...args: string[]) => exec(helmBinary, args, helmEnv);

/** `helm template` of the chart (release demo, namespace inference) with --set values; fails the test when Helm refuses. */
const render = (...sets: string[]) => renderIn('inference', ...sets);

async function renderIn(namespace: string, ...sets: string[]): Promise<Manifest[]> {
  const r = await helm('template', 'demo', chart, '--namespace', namespace, '--include-crds', ...sets.flatMap((s) => ['--set', s]));
  assert.equal(r.code, 0, `helm template failed: ${r.stderr}`);
  return parseYaml(r.stdout) as Manifest[];
}

function find<T extends Manifest>(manifests: Manifest[], kind: string, name: string): T {
  const found = manifests.find((m) => m.kind === kind && m.metadata.name === name);
  assert.ok(found, `no ${kind} ${name} among ${manifests.map((m) => `${m.kind}/${m.metadata.name}`).join(', ')}`);
  return found as T;
}

const kinds = (manifests: Manifest[]) => manifests.map((m) => `${m.kind}/${m.metadata.name}`).sort();

function assertLabels(m: Manifest, component: 'server' | 'operator') {
  const labels = m.metadata.labels ?? {};
  assert.equal(labels['app.kubernetes.io/name'], 'nereid', `${m.kind}/${m.metadata.name}: app.kubernetes.io/name`);
  assert.equal(labels['app.kubernetes.io/instance'], 'demo', `${m.kind}/${m.metadata.name}: app.kubernetes.io/instance`);
  assert.equal(labels['app.kubernetes.io/component'], component, `${m.kind}/${m.metadata.name}: app.kubernetes.io/component`);
  assert.equal(labels['app.kubernetes.io/managed-by'], 'Helm', `${m.kind}/${m.metadata.name}: app.kubernetes.io/managed-by`);
}

before(async () => {
  const r = await exec(process.execPath, [join(root, 'scripts', 'fleet-infra.mjs'), 'path', 'helm']);
  assert.equal(r.code, 0, `Helm is not built: run node scripts/fleet-infra.mjs build helm (${r.stderr.trim()})`);
  helmBinary = r.stdout.trim();
});

describe('Helm chart: rendering', () => {
  test('helm lint --strict passes for the default, plain-server and S3 values', async () => {
    for (const sets of [[], ['operator.enabled=false', 'server.enabled=true'], ['server.enabled=true', 'image.modelRepositoryPath=s3://models/prod', 'secret.id=aWQ=', 'secret.key=a2V5']]) {
      const r = await helm('lint', '--strict', chart, ...sets.flatMap((s) => ['--set', s]));
      assert.equal(r.code, 0, `helm lint ${sets.join(' ')}: ${r.stdout}${r.stderr}`);
      assert.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/);
      assert.doesNotMatch(r.stdout, /\[(WARNING|ERROR)\]/);
    }
  });

  test('default values: the CRDs and the operator with leader election, its RBAC from files/operator-rules.yaml and a metrics Service; no plain server', async () => {
    const manifests = await render();
    assert.deepEqual(kinds(manifests), [
      'ClusterRole/demo-nereid-operator',
      'ClusterRoleBinding/demo-nereid-operator',
      'CustomResourceDefinition/nereidmodels.nereid.dev',
      'CustomResourceDefinition/nereidservers.nereid.dev',
      'Deployment/demo-nereid-operator',
      'Service/demo-nereid-operator-metrics',
      'ServiceAccount/demo-nereid-operator',
    ]);
    for (const m of manifests.filter((m) => m.kind !== 'CustomResourceDefinition')) assertLabels(m, 'operator');

    const deployment = find<Deployment>(manifests, 'Deployment', 'demo-nereid-operator');
    assert.equal(deployment.metadata.namespace, 'inference');
    assert.equal(deployment.spec.replicas, 2);
    const pod = deployment.spec.template;
    assert.equal(pod.spec.serviceAccountName, 'demo-nereid-operator');
    assert.equal(pod.spec.securityContext.runAsNonRoot, true);
    const [container] = pod.spec.containers;
    assert.equal(container!.image, 'localhost/nereid:0.1.0');
    assert.deepEqual(container!.args, ['operator', '--leader-elect', '--metrics-port=8080', '--server-image=localhost/nereid:0.1.0']);
    assert.deepEqual((container as unknown as { ports: unknown }).ports, [{ name: 'metrics', containerPort: 8080, protocol: 'TCP' }]);
    assert.deepEqual(
      [(container as unknown as { readinessProbe: { httpGet: unknown } }).readinessProbe.httpGet, (container as unknown as { livenessProbe: { httpGet: unknown } }).livenessProbe.httpGet],
      [{ path: '/readyz', port: 'metrics' }, { path: '/healthz', port: 'metrics' }],
    );
    for (const [key, value] of Object.entries(deployment.spec.selector.matchLabels)) assert.equal(pod.metadata.labels[key], value);
    assert.equal(pod.metadata.annotations?.['prometheus.io/scrape'], 'true');

    const role = find<Manifest & { rules: unknown[] }>(manifests, 'ClusterRole', 'demo-nereid-operator');
    const rules = parseYaml(readFileSync(join(chart, 'files', 'operator-rules.yaml'), 'utf8'))[0] as unknown[];
    assert.ok(Array.isArray(rules) && rules.length > 0, 'files/operator-rules.yaml is a YAML list of PolicyRules');
    assert.deepEqual(role.rules, rules, "the ClusterRole's rules are exactly files/operator-rules.yaml");
    const binding = find<Manifest & { roleRef: { name: string }; subjects: { kind: string; name: string; namespace: string }[] }>(manifests, 'ClusterRoleBinding', 'demo-nereid-operator');
    assert.equal(binding.roleRef.name, 'demo-nereid-operator');
    assert.deepEqual(binding.subjects, [{ kind: 'ServiceAccount', name: 'demo-nereid-operator', namespace: 'inference' }]);

    const service = find<Service>(manifests, 'Service', 'demo-nereid-operator-metrics');
    assert.deepEqual(service.spec.selector, deployment.spec.selector.matchLabels);
    assert.deepEqual(service.spec.ports.map((p) => p.targetPort), ['metrics']);
  });

  test('plain server mode with the values of Triton\'s chart: Deployment, Service, probes, ports, GPUs, Prometheus annotations', async () => {
    const manifests = await render('operator.enabled=false', 'server.enabled=true', 'replicaCount=3', 'image.imageName=registry.example/nereid:1.2', 'image.pullPolicy=Always', 'image.numGpus=1', 'service.type=LoadBalancer', 'server.extraArgs={--log-verbose=1}');
    assert.deepEqual(kinds(manifests), [
      'CustomResourceDefinition/nereidmodels.nereid.dev',
      'CustomResourceDefinition/nereidservers.nereid.dev',
      'Deployment/demo-nereid-server',
      'Service/demo-nereid-server',
    ]);
    const deployment = find<Deployment>(manifests, 'Deployment', 'demo-nereid-server');
    const service = find<Service>(manifests, 'Service', 'demo-nereid-server');
    assertLabels(deployment, 'server');
    assertLabels(service, 'server');
    assert.equal(deployment.spec.replicas, 3);
    assert.deepEqual((deployment.spec as unknown as { strategy: unknown }).strategy, { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
    const pod = deployment.spec.template;
    assert.deepEqual(pod.metadata.annotations, { 'prometheus.io/scrape': 'true', 'prometheus.io/port': '8002', 'prometheus.io/path': '/metrics' });
    const [container] = pod.spec.containers;
    assert.equal(container!.name, 'nereid');
    assert.equal(container!.image, 'registry.example/nereid:1.2');
    assert.equal((container as unknown as { imagePullPolicy: string }).imagePullPolicy, 'Always');
    assert.deepEqual(container!.args, [
      'serve',
      '--model-repository=/models',
      '--model-control-mode=poll',
      '--repository-poll-secs=5',
      '--http-port=8000',
      '--grpc-port=8001',
      '--metrics-port=8002',
      '--exit-grace-secs=5',
      '--exit-timeout-secs=30',
      '--log-verbose=1',
    ]);
    assert.deepEqual(container!.ports.map((p) => [p.name, p.containerPort]), [['http', 8000], ['grpc', 8001], ['metrics', 8002]]);
    assert.deepEqual(container!.readinessProbe.httpGet, { path: '/v2/health/ready', port: 'http' });
    assert.deepEqual(container!.livenessProbe.httpGet, { path: '/v2/health/live', port: 'http' });
    assert.equal(container!.resources.limits?.['nvidia.com/gpu'], 1);
    assert.equal(container!.env, undefined, 'no S3 settings, no environment');
    assert.equal(service.spec.type, 'LoadBalancer');
    assert.deepEqual(service.spec.selector, deployment.spec.selector.matchLabels);
    assert.deepEqual(service.spec.ports.map((p) => [p.name, p.port, p.targetPort]), [['http', 8000, 'http'], ['grpc', 8001, 'grpc'], ['metrics', 8002, 'metrics']]);
  });

  test('S3 repository: credentials from values make a Secret; an existing Secret is referenced; endpoint and region reach the environment', async () => {
    const fromValues = await render('operator.enabled=false', 'server.enabled=true', 'image.modelRepositoryPath=s3://models/prod', 'secret.region=ZXUtd2VzdC0x', 'secret.id=QUtJRA==', 'secret.key=c2VjcmV0', 's3.endpoint=http://seaweedfs.storage:8333');
    const secret = find<Manifest & { data: Record<string, string> }>(fromValues, 'Secret', 'demo-nereid-aws-credentials');
    assert.deepEqual(secret.data, { AWS_ACCESS_KEY_ID: 'QUtJRA==', AWS_SECRET_ACCESS_KEY: 'c2VjcmV0', AWS_REGION: 'ZXUtd2VzdC0x' });
    const container = find<Deployment>(fromValues, 'Deployment', 'demo-nereid-server').spec.template.spec.containers[0]!;
    assert.equal(container.args[1], '--model-repository=s3://models/prod');
    const env = Object.fromEntries((container.env ?? []).map((e) => [e.name, e]));
    assert.deepEqual(Object.keys(env).sort(), ['AWS_ACCESS_KEY_ID', 'AWS_ENDPOINT_URL_S3', 'AWS_REGION', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN']);
    assert.deepEqual(env['AWS_ACCESS_KEY_ID']!.valueFrom?.secretKeyRef, { name: 'demo-nereid-aws-credentials', key: 'AWS_ACCESS_KEY_ID' });
    assert.deepEqual(env['AWS_SESSION_TOKEN']!.valueFrom?.secretKeyRef, { name: 'demo-nereid-aws-credentials', key: 'AWS_SESSION_TOKEN', optional: true });
    assert.deepEqual(env['AWS_REGION']!.valueFrom?.secretKeyRef, { name: 'demo-nereid-aws-credentials', key: 'AWS_REGION', optional: true });
    assert.equal(env['AWS_ENDPOINT_URL_S3']!.value, 'http://seaweedfs.storage:8333');

    const existing = await render('operator.enabled=false', 'server.enabled=true', 'image.modelRepositoryPath=s3://models/prod', 's3.existingSecret=store-keys', 's3.region=us-east-2');
    assert.equal(existing.filter((m) => m.kind === 'Secret').length, 0, 'an existing Secret: the chart makes none');
    const env2 = find<Deployment>(existing, 'Deployment', 'demo-nereid-server').spec.template.spec.containers[0]!.env ?? [];
    assert.deepEqual(env2.map((e) => e.name), ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_REGION']);
    assert.ok(env2.slice(0, 3).every((e) => e.valueFrom?.secretKeyRef?.name === 'store-keys'));
    assert.deepEqual(env2[3], { name: 'AWS_REGION', value: 'us-east-2' });
  });

  test('the values schema refuses bad values, naming the value and what is allowed', async () => {
    const cases: [string, RegExp][] = [
      ['service.type=Public', /at '\/service\/type': value must be one of 'ClusterIP', 'NodePort', 'LoadBalancer'/],
      ['replicaCount=-1', /at '\/replicaCount': minimum: got -1, want 0/],
      ['image.modelRepositoryPath=models', /at '\/image\/modelRepositoryPath': 'models' does not match pattern/],
      ['image.imagename=typo', /at '\/image': additional properties 'imagename' not allowed/],
      ['server.modelControlMode=sometimes', /at '\/server\/modelControlMode': value must be one of 'none', 'poll', 'explicit'/],
      ['secret.id=not-base64!', /at '\/secret\/id': 'not-base64!' does not match pattern/],
    ];
    for (const [set, message] of cases) {
      const r = await helm('template', 'demo', chart, '--set', set);
      assert.notEqual(r.code, 0, `--set ${set} was accepted`);
      assert.match(r.stderr, /values don't meet the specifications of the schema/, `--set ${set}: ${r.stderr}`);
      assert.match(r.stderr, message, `--set ${set}: ${r.stderr}`);
    }
  });

  test('the install notes render for each mode and say what to run next', async () => {
    const notes = async (...sets: string[]) => {
      const r = await helm('install', 'demo', chart, '--dry-run=client', '--namespace', 'inference', ...sets.flatMap((s) => ['--set', s]));
      assert.equal(r.code, 0, r.stderr);
      return r.stdout.slice(r.stdout.indexOf('NOTES:'));
    };
    const operator = await notes();
    assert.match(operator, /kubectl -n inference get deployment demo-nereid-operator/);
    assert.match(operator, /kubectl explain nereidserver\.spec/);
    assert.doesNotMatch(operator, /plain server/);
    const server = await notes('operator.enabled=false', 'server.enabled=true');
    assert.match(server, /port-forward service\/demo-nereid-server 8000:http 8001:grpc 8002:metrics/);
    assert.match(server, /curl localhost:8000\/v2\/health\/ready/);
    assert.doesNotMatch(server, /The operator/);
    const balancer = await notes('operator.enabled=false', 'server.enabled=true', 'service.type=LoadBalancer');
    assert.match(balancer, /get service demo-nereid-server -o jsonpath='\{\.status\.loadBalancer\.ingress\[0\]\}'/);
  });

  test('two operator replicas without leader election are refused', async () => {
    const r = await helm('template', 'demo', chart, '--set', 'operator.leaderElect=false');
    assert.notEqual(r.code, 0);
    assert.match(r.stderr, /operator\.replicaCount above 1 needs operator\.leaderElect: true/);
    const single = await render('operator.leaderElect=false', 'operator.replicaCount=1');
    const container = find<Deployment>(single, 'Deployment', 'demo-nereid-operator').spec.template.spec.containers[0]!;
    assert.ok(!container.args.includes('--leader-elect'));
  });
});

describe('Helm chart: against a real kube-apiserver', () => {
  let cluster: Cluster | undefined;
  const kubelets: Kubelet[] = [];
  let s3: S3Store | undefined;

  before(async () => {
    cluster = await startCluster();
  });
  after(async () => {
    for (const kubelet of kubelets) await kubelet.stop();
    await s3?.stop();
    await cluster?.stop();
  });

  test('every rendered manifest passes the API server\'s server-side dry run, the CRDs installed first', async () => {
    await cluster!.apply([{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'inference' } }]);
    const variants = [
      [],
      ['operator.enabled=false', 'server.enabled=true', 'image.numGpus=1', 'service.type=LoadBalancer'],
      ['server.enabled=true', 'image.modelRepositoryPath=s3://models/prod', 'secret.region=ZXUtd2VzdC0x', 'secret.id=QUtJRA==', 'secret.key=c2VjcmV0', 's3.endpoint=http://seaweedfs.storage:8333'],
      ['operator.enabled=false', 'server.enabled=true', 's3.existingSecret=store-keys', 's3.region=us-east-2', 'server.modelControlMode=explicit', 'server.loadModels={*}'],
    ];
    for (const sets of variants) {
      const manifests = await render(...sets);
      const crds = manifests.filter((m) => m.kind === 'CustomResourceDefinition');
      assert.equal(crds.length, 2);
      await cluster!.apply(crds);
      const rest = manifests.filter((m) => m.kind !== 'CustomResourceDefinition');
      const answered = (await cluster!.apply(rest, { dryRun: true })) as Manifest[];
      assert.deepEqual(answered.map((m) => `${m.kind}/${m.metadata.name}`), rest.map((m) => `${m.kind}/${m.metadata.name}`), `--set ${sets.join(' ')}`);
    }
    // The dry run validates: a port name Kubernetes refuses is refused here too.
    const broken = structuredClone((await render('operator.enabled=false', 'server.enabled=true')).find((m) => m.kind === 'Deployment')!) as Deployment;
    broken.spec.template.spec.containers[0]!.ports[0]!.name = 'HTTP_PORT';
    await assert.rejects(cluster!.apply([broken], { dryRun: true }), /HTTP_PORT/);
    // The dry run stored nothing.
    const apps = cluster!.kubeConfig.makeApiClient(AppsV1Api);
    assert.equal((await apps.listNamespacedDeployment({ namespace: 'inference' })).items.length, 0);
  });

  /**
   * Applies a plain-server render in `namespace` (a new one) under a kubelet for it, waits for the
   * server pod to be Ready and checks that it answers an inference on `simple`; returns the pod.
   */
  async function installAndInfer(namespace: string, sets: string[], objects: object[] = []): Promise<V1Pod> {
    await cluster!.apply([{ apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } }, ...objects], { namespace });
    kubelets.push(await startKubelet(cluster!, { namespace }));
    const kubelet = kubelets.at(-1)!;
    const manifests = await renderIn(namespace, 'operator.enabled=false', 'server.enabled=true', ...sets);
    await cluster!.apply(manifests.filter((m) => m.kind !== 'CustomResourceDefinition'));

    const core = cluster!.kubeConfig.makeApiClient(CoreV1Api);
    const apps = cluster!.kubeConfig.makeApiClient(AppsV1Api);
    const pod = await waitFor(
      `the plain server pod in ${namespace} to be Ready`,
      async () => {
        const pods = await core.listNamespacedPod({ namespace, labelSelector: 'app.kubernetes.io/instance=demo,app.kubernetes.io/component=server' });
        return pods.items.find((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
      },
      120_000,
    ).catch(async (err: Error) => {
      const pods = await core.listNamespacedPod({ namespace });
      const logs = pods.items.map((p) => `${p.metadata!.name}: ${JSON.stringify(p.status?.conditions)}\n${kubelet.logs(namespace, p.metadata!.name!)}`);
      throw new Error(`${err.message}\n${logs.join('\n')}`);
    });
    const ip = pod.status!.podIP!;
    const response = await fetch(`http://${ip}:8000/v2/models/simple/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        inputs: [
          { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: Array.from({ length: 16 }, (_, i) => i) },
          { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: Array(16).fill(1) },
        ],
      }),
    });
    assert.equal(response.status, 200, await response.clone().text());
    const body = (await response.json()) as { outputs: { name: string; data: number[] }[] };
    assert.deepEqual(body.outputs.find((o) => o.name === 'OUTPUT0')?.data, Array.from({ length: 16 }, (_, i) => i + 1));
    const metrics = await (await fetch(`http://${ip}:8002/metrics`)).text();
    assert.match(metrics, /nv_inference_request_success\{model="simple",version="1"\} 1/);

    const deployment = await waitFor(`the Deployment in ${namespace} to report 1 ready replica`, async () => {
      const d = await apps.readNamespacedDeployment({ name: 'demo-nereid-server', namespace });
      return d.status?.readyReplicas === 1 ? d : undefined;
    });
    assert.equal(deployment.spec?.template.spec?.containers[0]?.name, 'nereid');
    return pod;
  }

  test('a plain-server install with a volume repository: its pod becomes Ready under the simulated kubelet and answers an inference', async () => {
    const repository = join(root, 'examples', 'model_repository');
    await installAndInfer('serving', [
      'server.extraVolumes[0].name=models',
      `server.extraVolumes[0].hostPath.path=${repository}`,
      'server.extraVolumeMounts[0].name=models',
      'server.extraVolumeMounts[0].mountPath=/models',
      'server.extraVolumeMounts[0].readOnly=true',
    ]);
  });

  test("a plain-server install on an S3 bucket with Triton's secret values: the chart's Secret reaches the server, which serves the bucket's model", async () => {
    s3 = await startS3();
    await s3.createBucket('models');
    const files = await readModelDirectory(join(root, 'examples', 'model_repository', 'simple'));
    await putModel(s3.client, 'models', 'prod/', 'simple', files, { manifest: true });
    const b64 = (v: string) => Buffer.from(v).toString('base64');
    const pod = await installAndInfer('serving-s3', [
      'image.modelRepositoryPath=s3://models/prod',
      `s3.endpoint=${s3.endpoint}`,
      `secret.region=${b64(s3.region)}`,
      `secret.id=${b64(s3.accessKeyId)}`,
      `secret.key=${b64(s3.secretAccessKey)}`,
    ]);
    const index = await fetch(`http://${pod.status!.podIP!}:8000/v2/repository/index`, { method: 'POST', body: '{}' });
    assert.deepEqual(((await index.json()) as { name: string; state: string }[]).map((m) => [m.name, m.state]), [['simple', 'READY']]);
  });

  test("an operator install runs: two operator pods under their ServiceAccount and the chart's ClusterRole, one Lease holder, and a NereidServer becomes a Deployment of the chart's image", async () => {
    const namespace = 'operators';
    await cluster!.apply([
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: namespace } },
      { apiVersion: 'v1', kind: 'Namespace', metadata: { name: 'apps' } },
    ]);
    kubelets.push(await startKubelet(cluster!, { namespace }));
    const kubelet = kubelets.at(-1)!;
    // Each simulated pod is a process on this machine: the metrics endpoints listen on the pods' own
    // addresses instead of 0.0.0.0, or the second pod could not bind its port.
    const manifests = await renderIn(namespace, 'operator.env[0].name=POD_IP', 'operator.env[0].valueFrom.fieldRef.fieldPath=status.podIP', 'operator.extraArgs={--metrics-address=$(POD_IP)}');
    const crds = manifests.filter((m) => m.kind === 'CustomResourceDefinition');
    await cluster!.apply(crds);
    await cluster!.apply(manifests.filter((m) => m.kind !== 'CustomResourceDefinition'));

    const core = cluster!.kubeConfig.makeApiClient(CoreV1Api);
    const apps = cluster!.kubeConfig.makeApiClient(AppsV1Api);
    const pods = await waitFor(
      'both operator pods to be Ready',
      async () => {
        const list = await core.listNamespacedPod({ namespace, labelSelector: 'app.kubernetes.io/instance=demo,app.kubernetes.io/component=operator' });
        const ready = list.items.filter((p) => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True'));
        return ready.length === 2 ? ready : undefined;
      },
      120_000,
    ).catch(async (err: Error) => {
      const list = await core.listNamespacedPod({ namespace });
      throw new Error(`${err.message}\n${list.items.map((p) => `${p.metadata!.name}: ${JSON.stringify(p.status?.conditions)}\n${kubelet.logs(namespace, p.metadata!.name!)}`).join('\n')}`);
    });
    const names = pods.map((p) => p.metadata!.name!);
    const coordination = cluster!.kubeConfig.makeApiClient(CoordinationV1Api);
    const lease = await waitFor('the operator Lease to have a holder', async () => {
      const l = await coordination.readNamespacedLease({ name: 'nereid-operator', namespace }).catch(() => undefined);
      return l?.spec?.holderIdentity ? l : undefined;
    });
    assert.ok(names.includes(lease.spec!.holderIdentity!), `the Lease holder ${lease.spec!.holderIdentity} is one of the operator pods ${names.join(', ')}`);

    await cluster!.apply([{ apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidServer', metadata: { name: 'fleet', namespace: 'apps' }, spec: { modelRepository: { uri: 's3://models/prod' } } }]);
    const deployment = await waitFor(
      "the operator to create the NereidServer's Deployment",
      async () => apps.readNamespacedDeployment({ name: 'fleet', namespace: 'apps' }).catch(() => undefined),
      60_000,
    );
    const container = deployment.spec!.template.spec!.containers[0]!;
    assert.equal(container.name, 'nereid');
    assert.equal(container.image, 'localhost/nereid:0.1.0', "a NereidServer that names no image runs the chart's image");
    assert.equal(container.args?.[0], 'serve');
  });
});
