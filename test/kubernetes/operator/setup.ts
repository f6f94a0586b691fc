/**
 * Shared setup of the operator's Kubernetes tests: the chart's CRDs, an operator user bound to
 * exactly deploy/helm/nereid/files/operator-rules.yaml, and the operator run in this process or
 * as a separate `nereid-operator` process.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { KubeConfig } from '@kubernetes/client-node';
import { parse } from 'yaml';
import { KubeClient, Operator, RESOURCES, createLogger, objectPath, type KubeObject, type OperatorOptions } from '@nereid/operator';
import { REPO_ROOT, waitFor, type Cluster } from '../helpers/cluster.js';
import { freePort, spawnManaged, type ManagedProcess } from '../helpers/processes.js';

export const CHART = join(REPO_ROOT, 'deploy', 'helm', 'nereid');
export const EXAMPLES = join(REPO_ROOT, 'examples', 'model_repository');
export const OPERATOR_BIN = join(REPO_ROOT, 'packages', 'operator', 'bin', 'nereid-operator.js');

/**
 * Installs the chart's CRDs as they are (raw JSON server-side apply: client-node's typed
 * serializer drops keys such as x-kubernetes-int-or-string) and waits until they are Established.
 */
export async function installCrds(cluster: Cluster): Promise<void> {
  const client = adminClient(cluster);
  for (const file of ['nereid.dev_nereidservers.yaml', 'nereid.dev_nereidmodels.yaml']) {
    const crd = parse(readFileSync(join(CHART, 'crds', file), 'utf8')) as KubeObject;
    await client.apply(`/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`, crd);
    await waitFor(`CRD ${crd.metadata.name} Established`, async () => {
      const got = await client.get<KubeObject & { status?: { conditions?: { type: string; status: string }[] } }>(
        `/apis/apiextensions.k8s.io/v1/customresourcedefinitions/${crd.metadata.name}`,
      );
      return got.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True');
    });
  }
  client.close();
}

/** Raw JSON server-side apply of custom resources (bypasses client-node's typed serializer). */
export async function applyRaw(cluster: Cluster, objects: Json[], options: { dryRun?: boolean } = {}): Promise<Json[]> {
  const client = adminClient(cluster);
  try {
    const out: Json[] = [];
    for (const o of objects) {
      const [group, version] = (o.apiVersion as string).includes('/') ? (o.apiVersion as string).split('/') : ['', o.apiVersion as string];
      const plural = PLURALS[o.kind as string];
      if (!plural) throw new Error(`no plural known for ${o.kind}`);
      const base = group === '' ? `/api/${version}` : `/apis/${group}/${version}`;
      const path = `${base}/namespaces/${o.metadata.namespace ?? 'default'}/${plural}/${o.metadata.name}`;
      out.push(
        await client.request<Json>('PATCH', path, {
          body: o,
          contentType: 'application/apply-patch+yaml',
          query: { fieldManager: 'nereid-tests', force: true, dryRun: options.dryRun ? 'All' : undefined },
        }),
      );
    }
    return out;
  } finally {
    client.close();
  }
}

const PLURALS: Record<string, string> = {
  NereidServer: 'nereidservers',
  NereidModel: 'nereidmodels',
  ConfigMap: 'configmaps',
  Secret: 'secrets',
  Deployment: 'deployments',
};

/** A ClusterRole with exactly the chart's operator rules, bound to user `name`; its kubeconfig. */
export async function operatorUser(cluster: Cluster, name = 'nereid-operator'): Promise<string> {
  const rules = parse(readFileSync(join(CHART, 'files', 'operator-rules.yaml'), 'utf8')) as object[];
  await cluster.apply([
    { apiVersion: 'rbac.authorization.k8s.io/v1', kind: 'ClusterRole', metadata: { name }, rules },
    {
      apiVersion: 'rbac.authorization.k8s.io/v1',
      kind: 'ClusterRoleBinding',
      metadata: { name },
      roleRef: { apiGroup: 'rbac.authorization.k8s.io', kind: 'ClusterRole', name },
      subjects: [{ apiGroup: 'rbac.authorization.k8s.io', kind: 'User', name }],
    },
  ]);
  return cluster.kubeconfigFor(name);
}

/** The admin's client of this package (for reads and writes the tests make themselves). */
export function adminClient(cluster: Cluster): KubeClient {
  return new KubeClient(cluster.kubeConfig, { fieldManager: 'nereid-tests' });
}

/** An object of one of the operator's resource types, or undefined when it does not exist. */
export function getObject(client: KubeClient, type: (typeof RESOURCES)[keyof typeof RESOURCES], namespace: string, name: string): Promise<Json | undefined> {
  return client.getOptional<KubeObject>(objectPath(type, namespace, name)) as Promise<Json | undefined>;
}

/** The pods of NereidServer `instance` that are not being deleted. */
export async function serverPods(client: KubeClient, namespace: string, instance: string): Promise<Json[]> {
  const list = await client.list(`/api/v1/namespaces/${namespace}/pods`, { labelSelector: `app.kubernetes.io/instance=${instance}` });
  return (list.items as Json[]).filter((p) => !p.metadata.deletionTimestamp);
}

export interface InProcessOperator {
  operator: Operator;
  logs: string[];
  metricsUrl: string;
  stop(): Promise<void>;
}

/** Runs the operator in this process as the operator user (no leader election unless asked). */
export async function startOperator(kubeconfigPath: string, options: Partial<OperatorOptions> = {}): Promise<InProcessOperator> {
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromFile(kubeconfigPath);
  const logs: string[] = [];
  const operator = new Operator({
    kubeConfig,
    log: createLogger('debug', (line) => {
      logs.push(line);
      if (process.env.NEREID_OPERATOR_DEBUG) process.stderr.write(line);
    }),
    leaderElect: false,
    leaseNamespace: 'default',
    leaseName: 'nereid-operator',
    leaseDurationSeconds: 15,
    renewDeadlineSeconds: 10,
    retryPeriodSeconds: 2,
    metricsAddress: '127.0.0.1',
    metricsPort: 0,
    concurrency: 4,
    resyncSeconds: 5,
    ...options,
  });
  await operator.start();
  const address = operator.metricsServer!.address() as { port: number };
  return { operator, logs, metricsUrl: `http://127.0.0.1:${address.port}`, stop: () => operator.stop() };
}

export interface OperatorProcess {
  process: ManagedProcess;
  metricsUrl: string;
  identity: string;
}

/**
 * Runs the operator as its own process (for kills and leader election): `nereid-operator`, or
 * with `via: 'nereid'` the server CLI's `nereid operator`.
 */
export async function spawnOperator(kubeconfigPath: string, identity: string, extraArgs: string[] = [], via: 'nereid-operator' | 'nereid' = 'nereid-operator'): Promise<OperatorProcess> {
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'nereid-operator-'));
  const entry = via === 'nereid' ? [join(REPO_ROOT, 'packages', 'server', 'bin', 'nereid.js'), 'operator'] : [OPERATOR_BIN];
  const proc = spawnManaged(identity, process.execPath, [
    ...entry,
    `--kubeconfig=${kubeconfigPath}`,
    `--leader-election-id=${identity}`,
    '--leader-election-namespace=default',
    '--metrics-address=127.0.0.1',
    `--metrics-port=${port}`,
    '--log-level=debug',
    ...extraArgs,
  ], join(dir, 'operator.log'));
  return { process: proc, metricsUrl: `http://127.0.0.1:${port}`, identity };
}

/** A metric's value from a Prometheus text exposition (first sample whose labels include `labels`). */
export function metricValue(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue;
    const m = /^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (!m || m[1] !== name) continue;
    const labelText = m[2] ?? '';
    if (Object.entries(labels).every(([k, v]) => labelText.includes(`${k}="${v}"`))) return Number(m[3]);
  }
  return undefined;
}

export type Json = Record<string, any>;
export const asJson = (o: KubeObject | undefined): Json => o as Json;
