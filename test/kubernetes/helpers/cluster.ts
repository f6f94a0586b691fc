/**
 * A real Kubernetes control plane for tests, envtest style: etcd, kube-apiserver and (by default)
 * kube-controller-manager as local processes on loopback, built from the Go module proxy by
 * `node scripts/fleet-infra.mjs build` and cached outside the repository. Each cluster has its own
 * temporary directory (certificates, etcd data, logs) and its own free ports; its processes run in
 * process groups of their own and are killed by `stop()` or when the test process exits.
 *
 * Authentication is by client certificates signed by the cluster's CA (CN = user, O = groups), so
 * `kubeconfigFor` makes users at any time without restarting the API server; authorization is RBAC.
 *
 * The simulated kubelet, which makes pods run real Nereid processes, is in kubelet.ts.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inspect } from 'node:util';
import { KubeConfig, KubernetesObjectApi, PatchStrategy, type KubernetesObject } from '@kubernetes/client-node';
import { parseAllDocuments } from 'yaml';
import { REPO_ROOT, atExit, freePort, spawnManaged, type ManagedProcess } from './processes.js';
import { Rest } from './rest.js';

export { KubeConfig, REPO_ROOT };
export { startKubelet, NODE_NAME, type Kubelet, type KubeletOptions } from './kubelet.js';

export interface Cluster {
  /** `https://127.0.0.1:<port>` */
  readonly url: string;
  /** An admin (system:masters) kubeconfig file. */
  readonly kubeconfigPath: string;
  /** Loaded from `kubeconfigPath`. */
  readonly kubeConfig: KubeConfig;
  /**
   * A kubeconfig file for `user` in `groups` (a client certificate signed by the cluster's CA):
   * what that user may do is what RBAC grants it, nothing by default.
   */
  kubeconfigFor(user: string, groups?: string[]): Promise<string>;
  /**
   * Server-side apply (field manager `nereid-tests`, forced) of every object, in order: a YAML
   * string (documents separated by `---`) or objects. `namespace` fills in namespaced objects that
   * have none; `dryRun` applies with `dryRun=All` (validated and admitted, not stored). A
   * CustomResourceDefinition is waited for until Established before the objects after it, and when
   * one was new, kube-controller-manager is restarted at the end (a second or two) so that its
   * garbage collector knows the new kinds at once (it would otherwise find them within 30–40 s).
   * Returns the objects as the API server answered them.
   */
  apply(manifests: string | object[], options?: { namespace?: string; dryRun?: boolean }): Promise<object[]>;
  /** Stops every process of the cluster and removes its directory. */
  stop(): Promise<void>;
}

export interface ClusterOptions {
  /** Start kube-controller-manager too (Deployments → ReplicaSets → Pods, garbage collection, …). Default true. */
  controllerManager?: boolean;
}

/** The path of a Go-built test server from the fleet cache; throws with the build command if absent. */
export function fleetBinary(name: string): string {
  try {
    return execFileSync(process.execPath, [join(REPO_ROOT, 'scripts', 'fleet-infra.mjs'), 'path', name], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
  } catch {
    throw new Error(`${name} is not built: run \`node scripts/fleet-infra.mjs build\` (or \`npm run test:kubernetes\`, which does)`);
  }
}

/**
 * Polls `probe` until it returns a value other than undefined or false, and returns it. A probe
 * that throws is retried (the error is remembered as the last value). On timeout it throws an error
 * naming `what` and the last value seen.
 */
export async function waitFor<T>(what: string, probe: () => Promise<T | undefined | false>, timeoutMs = 30_000): Promise<T> {
  const start = Date.now();
  let last: unknown = undefined;
  let delay = 50;
  for (;;) {
    try {
      const value = await probe();
      if (value !== undefined && value !== false) return value;
      last = value;
    } catch (err) {
      last = err;
    }
    if (Date.now() - start >= timeoutMs) {
      const shown = last instanceof Error ? `${last.name}: ${last.message}` : inspect(last, { depth: 4, breakLength: 120 });
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}; last value: ${shown}`);
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
    delay = Math.min(delay * 2, 250);
  }
}

// ---- certificates ---------------------------------------------------------------------------

/** A minimal openssl config, so the system's defaults add no extensions of their own. */
const OPENSSL_CONFIG = '[req]\ndistinguished_name = dn\nprompt = no\n[dn]\n';

function openssl(dir: string, args: string[]): void {
  try {
    execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as { stderr?: Buffer; message: string };
    throw new Error(`openssl ${args.join(' ')} failed: ${e.stderr?.toString() ?? e.message}`);
  }
}

/** An escaped `-subj` value: CN = user, one O per group. */
function subject(cn: string, groups: readonly string[]): string {
  const esc = (s: string) => s.replace(/[\\/+=,]/g, (c) => `\\${c}`);
  return `/CN=${esc(cn)}${groups.map((g) => `/O=${esc(g)}`).join('')}`;
}

class Certificates {
  readonly dir: string;
  readonly caCert: string;
  readonly caKey: string;
  #serial = 1;

  constructor(dir: string) {
    this.dir = dir;
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, 'openssl.cnf'), OPENSSL_CONFIG);
    this.caCert = join(dir, 'ca.crt');
    this.caKey = join(dir, 'ca.key');
    openssl(dir, [
      'req', '-config', 'openssl.cnf', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '3650', '-subj', '/CN=nereid-test-ca',
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
    ]);
  }

  /** Issues a certificate and key signed by the CA; returns their paths. */
  issue(name: string, subj: string, extensions: string[]): { cert: string; key: string } {
    const cert = `${name}.crt`;
    const key = `${name}.key`;
    openssl(this.dir, [
      'req', '-config', 'openssl.cnf', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', key, '-out', cert, '-days', '3650', '-subj', subj, '-CA', 'ca.crt', '-CAkey', 'ca.key',
      '-set_serial', String(++this.#serial),
      '-addext', 'basicConstraints=critical,CA:FALSE', '-addext', 'keyUsage=critical,digitalSignature,keyEncipherment',
      ...extensions.flatMap((e) => ['-addext', e]),
    ]);
    return { cert: join(this.dir, cert), key: join(this.dir, key) };
  }

  client(name: string, user: string, groups: readonly string[]): { cert: string; key: string } {
    return this.issue(name, subject(user, groups), ['extendedKeyUsage=clientAuth']);
  }

  /** A CA certificate of its own (no certificates are issued from it); returns its path. */
  otherCa(name: string): string {
    openssl(this.dir, [
      'req', '-config', 'openssl.cnf', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', `${name}.key`, '-out', `${name}.crt`, '-days', '3650', '-subj', `/CN=${name}`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
    ]);
    return join(this.dir, `${name}.crt`);
  }

  /** An EC key pair for service-account tokens: [private key, public key]. */
  serviceAccountKeys(): [string, string] {
    openssl(this.dir, ['ecparam', '-name', 'prime256v1', '-genkey', '-noout', '-out', 'sa.key']);
    openssl(this.dir, ['ec', '-in', 'sa.key', '-pubout', '-out', 'sa.pub']);
    return [join(this.dir, 'sa.key'), join(this.dir, 'sa.pub')];
  }
}

function kubeconfigYaml(server: string, caCert: string, user: string, cert: string, key: string): string {
  const b64 = (path: string) => readFileSync(path).toString('base64');
  return [
    'apiVersion: v1',
    'kind: Config',
    'clusters:',
    '- name: nereid-test',
    '  cluster:',
    `    server: ${server}`,
    `    certificate-authority-data: ${b64(caCert)}`,
    'users:',
    `- name: ${JSON.stringify(user)}`,
    '  user:',
    `    client-certificate-data: ${b64(cert)}`,
    `    client-key-data: ${b64(key)}`,
    'contexts:',
    '- name: nereid-test',
    '  context:',
    '    cluster: nereid-test',
    `    user: ${JSON.stringify(user)}`,
    'current-context: nereid-test',
    '',
  ].join('\n');
}

// ---- startup --------------------------------------------------------------------------------

/** GET `url` over TLS with the cluster's CA and a client certificate; resolves to status and body. */
function httpsGet(url: string, tls: { ca?: string; cert?: string; key?: string; insecure?: boolean }): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(
      url,
      {
        ca: tls.ca ? readFileSync(tls.ca) : undefined,
        cert: tls.cert ? readFileSync(tls.cert) : undefined,
        key: tls.key ? readFileSync(tls.key) : undefined,
        rejectUnauthorized: !tls.insecure,
        timeout: 2000,
      },
      (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        res.on('error', reject);
      },
    );
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

/** Waits for `probe`, failing at once (with the log's tail) if one of `processes` exits meanwhile. */
async function waitWhileRunning<T>(what: string, processes: ManagedProcess[], probe: () => Promise<T | undefined | false>, timeoutMs: number): Promise<T> {
  return waitFor(
    what,
    async () => {
      for (const p of processes) {
        if (!p.running) throw new StartupError(`${p.name} exited while waiting for ${what}`, p);
      }
      return probe();
    },
    timeoutMs,
  ).catch((err: unknown) => {
    if (err instanceof StartupError) throw err;
    const cause = processes.map((p) => `--- ${p.name} (${p.logPath}) ---\n${p.tail(30)}`).join('\n');
    throw new Error(`${(err as Error).message}\n${cause}`);
  });
}

class StartupError extends Error {
  constructor(message: string, p: ManagedProcess) {
    super(`${message}\n--- ${p.name} log (${p.logPath}) ---\n${p.tail(40)}`);
  }
}

/**
 * Starts etcd, kube-apiserver and (unless `controllerManager: false`) kube-controller-manager, and
 * resolves once the API server is ready, the default namespace exists and the controller manager
 * answers its health check. On failure everything started is stopped and the error carries the
 * tail of the failing process's log.
 */
export async function startCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const etcdBin = fleetBinary('etcd');
  const apiserverBin = fleetBinary('kube-apiserver');
  const kcmBin = options.controllerManager === false ? undefined : fleetBinary('kube-controller-manager');

  const dir = mkdtempSync(join(tmpdir(), 'nereid-cluster-'));
  const processes: ManagedProcess[] = [];
  let stopped = false;
  // etcd's data (its write-ahead log alone is 64 MB) goes even if the test process dies; the logs stay.
  const etcdData = join(dir, 'etcd');
  const forget = atExit(() => rmSync(etcdData, { recursive: true, force: true }));
  const stopAll = async () => {
    if (stopped) return;
    stopped = true;
    // The controller manager and API server first, etcd (their store) last.
    for (const p of [...processes].reverse()) await p.stop(5000);
    rmSync(etcdData, { recursive: true, force: true });
    forget();
  };
  try {
    const certs = new Certificates(join(dir, 'pki'));
    const serving = certs.issue('apiserver', '/CN=kube-apiserver', ['subjectAltName=IP:127.0.0.1,DNS:localhost', 'extendedKeyUsage=serverAuth']);
    const admin = certs.client('admin', 'nereid-admin', ['system:masters']);
    const [saKey, saPub] = certs.serviceAccountKeys();
    const frontProxyCa = certs.otherCa('front-proxy-ca');

    const [etcdClient, etcdPeer, apiPort, kcmPort] = await Promise.all([freePort(), freePort(), freePort(), freePort()]);
    const etcd = spawnManaged('etcd', etcdBin, [
      '--name=default',
      `--data-dir=${etcdData}`,
      `--listen-client-urls=http://127.0.0.1:${etcdClient}`,
      `--advertise-client-urls=http://127.0.0.1:${etcdClient}`,
      `--listen-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-advertise-peer-urls=http://127.0.0.1:${etcdPeer}`,
      `--initial-cluster=default=http://127.0.0.1:${etcdPeer}`,
      '--unsafe-no-fsync',
      '--log-level=warn',
    ], join(dir, 'etcd.log'));
    processes.push(etcd);

    const url = `https://127.0.0.1:${apiPort}`;
    // The API server retries etcd until it answers, so both start at once.
    const apiserver = spawnManaged('kube-apiserver', apiserverBin, [
      `--etcd-servers=http://127.0.0.1:${etcdClient}`,
      '--advertise-address=127.0.0.1',
      '--bind-address=127.0.0.1',
      `--secure-port=${apiPort}`,
      '--endpoint-reconciler-type=none',
      `--tls-cert-file=${serving.cert}`,
      `--tls-private-key-file=${serving.key}`,
      `--client-ca-file=${certs.caCert}`,
      // Set so that components reading extension-apiserver-authentication find a CA there.
      `--requestheader-client-ca-file=${frontProxyCa}`,
      '--requestheader-allowed-names=front-proxy-client',
      '--requestheader-username-headers=X-Remote-User',
      '--requestheader-group-headers=X-Remote-Group',
      '--requestheader-extra-headers-prefix=X-Remote-Extra-',
      '--authorization-mode=RBAC',
      `--service-account-issuer=${url}`,
      `--service-account-key-file=${saPub}`,
      `--service-account-signing-key-file=${saKey}`,
      '--service-cluster-ip-range=10.0.0.0/24',
      '--allow-privileged=true',
      '--disable-admission-plugins=ServiceAccount',
      `--cert-dir=${join(dir, 'apiserver-certs')}`,
      '--profiling=false',
      '--v=1',
    ], join(dir, 'kube-apiserver.log'));
    processes.push(apiserver);

    const kubeconfigPath = join(dir, 'admin.kubeconfig');
    writeFileSync(kubeconfigPath, kubeconfigYaml(url, certs.caCert, 'nereid-admin', admin.cert, admin.key), { mode: 0o600 });
    const tls = { ca: certs.caCert, cert: admin.cert, key: admin.key };
    await waitWhileRunning('kube-apiserver /readyz', [etcd, apiserver], async () => (await httpsGet(`${url}/readyz`, tls)).status === 200, 60_000);

    const waits: Promise<unknown>[] = [waitWhileRunning('the default namespace', processes, async () => (await httpsGet(`${url}/api/v1/namespaces/default`, tls)).status === 200, 30_000)];
    /** Starts kube-controller-manager and resolves once it answers its health check. */
    const startControllerManager = (bin: string): Promise<unknown> => {
      const kcm = spawnManaged('kube-controller-manager', bin, [
        `--kubeconfig=${kubeconfigPath}`,
        `--authentication-kubeconfig=${kubeconfigPath}`,
        `--authorization-kubeconfig=${kubeconfigPath}`,
        '--bind-address=127.0.0.1',
        `--secure-port=${kcmPort}`,
        `--cert-dir=${join(dir, 'kcm-certs')}`,
        '--leader-elect=false',
        `--service-account-private-key-file=${saKey}`,
        `--root-ca-file=${certs.caCert}`,
        '--service-cluster-ip-range=10.0.0.0/24',
        '--controllers=*',
        '--profiling=false',
        '--v=1',
      ], join(dir, 'kube-controller-manager.log'));
      processes.push(kcm);
      return waitWhileRunning('kube-controller-manager /healthz', [etcd, apiserver, kcm], async () => (await httpsGet(`https://127.0.0.1:${kcmPort}/healthz`, { insecure: true })).status === 200, 60_000);
    };
    if (kcmBin !== undefined) waits.push(startControllerManager(kcmBin));
    await Promise.all(waits);

    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromFile(kubeconfigPath);
    let users = 0;

    const cluster: Cluster = {
      url,
      kubeconfigPath,
      kubeConfig,
      async kubeconfigFor(user, groups = []) {
        const name = `user-${++users}`;
        const { cert, key } = certs.client(name, user, groups);
        const path = join(dir, `${name}.kubeconfig`);
        writeFileSync(path, kubeconfigYaml(url, certs.caCert, user, cert, key), { mode: 0o600 });
        return path;
      },
      async apply(manifests, applyOptions = {}) {
        const { results, newKinds } = await applyManifests(kubeConfig, manifests, applyOptions);
        // The garbage collector finds new kinds only on its next discovery sync, every 30 s: until
        // then, objects owned by a new custom resource would outlive their owner for up to 40 s.
        // A restarted controller manager starts with them.
        if (newKinds && kcmBin !== undefined && !stopped) {
          const old = processes.findIndex((p) => p.name === 'kube-controller-manager');
          if (old >= 0) await processes.splice(old, 1)[0]!.stop(5000);
          await startControllerManager(kcmBin);
        }
        return results;
      },
      async stop() {
        await stopAll();
        rmSync(dir, { recursive: true, force: true });
      },
    };
    return cluster;
  } catch (err) {
    await stopAll();
    // The logs stay for a look; the error names them.
    throw err;
  }
}

// ---- apply ----------------------------------------------------------------------------------

/** The objects of a YAML multi-document string (empty documents left out). */
export function parseManifests(text: string): KubernetesObject[] {
  const out: KubernetesObject[] = [];
  for (const doc of parseAllDocuments(text)) {
    if (doc.errors.length > 0) throw new Error(`invalid YAML: ${doc.errors[0]!.message}`);
    const value: unknown = doc.toJS();
    if (value === null || value === undefined) continue;
    if (typeof value !== 'object' || Array.isArray(value)) throw new Error(`a manifest must be an object, got ${inspect(value)}`);
    const obj = value as KubernetesObject & { kind?: string; items?: KubernetesObject[] };
    if (obj.kind?.endsWith('List') && Array.isArray(obj.items)) out.push(...obj.items);
    else out.push(obj);
  }
  return out;
}

function clientFor(kc: KubeConfig, namespace: string | undefined): KubernetesObjectApi {
  if (namespace === undefined) return KubernetesObjectApi.makeApiClient(kc);
  const scoped = new KubeConfig();
  scoped.loadFromOptions({
    clusters: kc.clusters,
    users: kc.users,
    contexts: kc.contexts.map((c) => (c.name === kc.currentContext ? { ...c, namespace } : c)),
    currentContext: kc.currentContext,
  });
  return KubernetesObjectApi.makeApiClient(scoped);
}

/** Applies `manifests` in order; `newKinds` says whether a CustomResourceDefinition was created. */
async function applyManifests(kc: KubeConfig, manifests: string | object[], options: { namespace?: string; dryRun?: boolean }): Promise<{ results: object[]; newKinds: boolean }> {
  const objects = typeof manifests === 'string' ? parseManifests(manifests) : (structuredClone(manifests) as KubernetesObject[]);
  let client = clientFor(kc, options.namespace);
  const results: object[] = [];
  let newKinds = false;
  for (const obj of objects) {
    const isCrd = obj.kind === 'CustomResourceDefinition' && obj.apiVersion?.startsWith('apiextensions.k8s.io/') === true;
    if (isCrd && !options.dryRun) {
      try {
        await client.read({ apiVersion: obj.apiVersion!, kind: obj.kind!, metadata: { name: obj.metadata!.name! } });
      } catch (err) {
        if ((err as { code?: number }).code === 404) newKinds = true;
      }
    }
    const what = `${obj.kind ?? '?'} ${obj.metadata?.namespace ? `${obj.metadata.namespace}/` : ''}${obj.metadata?.name ?? '?'}`;
    let applied: KubernetesObject | undefined;
    // A kind whose CRD was just established may be missing from discovery for a moment.
    for (let attempt = 0; ; attempt++) {
      try {
        if (isCrd) {
          // A CRD goes as the JSON it is: client-node's typed serializer knows JSONSchemaProps'
          // x-kubernetes-* keys only by their camelCase names and drops them from YAML-parsed
          // objects (int-or-string fields become invalid, CEL rules vanish).
          const query = `?fieldManager=nereid-tests&force=true${options.dryRun ? '&dryRun=All' : ''}`;
          applied = await new Rest(kc).request<KubernetesObject>(
            'PATCH',
            `/apis/${obj.apiVersion}/customresourcedefinitions/${encodeURIComponent(obj.metadata!.name!)}${query}`,
            obj,
            'application/apply-patch+yaml',
          );
        } else {
          applied = await client.patch(structuredClone(obj), undefined, options.dryRun ? 'All' : undefined, 'nereid-tests', true, PatchStrategy.ServerSideApply);
        }
        break;
      } catch (err) {
        const message = (err as Error).message ?? String(err);
        if (attempt < 20 && /Unrecognized API version and kind|Failed to fetch resource metadata/.test(message)) {
          await new Promise((resolve) => setTimeout(resolve, 250));
          client = clientFor(kc, options.namespace);
          continue;
        }
        throw new Error(`server-side apply of ${what} failed: ${describeApiError(err)}`);
      }
    }
    results.push(applied);
    if (!options.dryRun && isCrd) {
      const name = obj.metadata!.name!;
      await waitFor(`CustomResourceDefinition ${name} to be Established`, async () => {
        const crd = (await client.read({ apiVersion: obj.apiVersion!, kind: obj.kind!, metadata: { name } })) as KubernetesObject & {
          status?: { conditions?: { type: string; status: string }[] };
        };
        return crd.status?.conditions?.some((c) => c.type === 'Established' && c.status === 'True') ? true : undefined;
      });
      client = clientFor(kc, options.namespace);
    }
  }
  return { results, newKinds };
}

/** The API server's message of a client-node error (its Status body), else the error's message. */
export function describeApiError(err: unknown): string {
  const e = err as { code?: number; body?: unknown; message?: string };
  if (e && typeof e === 'object' && 'body' in e && e.body !== undefined) {
    let body = e.body;
    if (typeof body === 'string') {
      try {
        body = JSON.parse(body);
      } catch {
        // not JSON
      }
    }
    const message = typeof body === 'object' && body !== null && 'message' in body ? String((body as { message: unknown }).message) : String(body);
    return `HTTP ${e.code ?? '?'}: ${message}`;
  }
  return e?.message ?? String(err);
}
