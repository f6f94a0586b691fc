/**
 * A simulated kubelet for the Kubernetes tier: one Node (`nereid-sim-node`) whose pods run as real
 * local processes. It binds unscheduled pods to its node (there is no scheduler), starts each
 * container's command (`nereid` is this repository's server CLI) on a loopback address of the pod's
 * own (the pod IP, 127.0.0.N), runs the pod's readiness and liveness probes against it and writes
 * the pod's status through the API like a kubelet: phase, pod IP, container statuses and the
 * conditions PodScheduled, Initialized, ContainersReady and Ready. Ready also waits for every
 * readinessGate condition, which others (the operator) set; status writes are strategic-merge
 * patches of the kubelet's own condition types, made against the resourceVersion they were computed
 * from and recomputed on a conflict, so conditions set by others are never dropped.
 *
 * Deleting a pod runs its containers' preStop hooks (`sleep N`, as exec or the sleep action, and
 * httpGet), sends SIGTERM, waits out the grace period, sends SIGKILL and then deletes the pod with
 * grace period 0, as a kubelet does.
 *
 * Pod IPs are loopback addresses, which the API server refuses in EndpointSlices: a Service gets
 * no endpoints for these pods. Talk to a pod by its status.podIP.
 *
 * What a container sees: its args with the paths of hostPath, emptyDir, configMap and secret volume
 * mounts rewritten to local directories (there is no mount namespace), and its environment
 * (literal values, $(VAR) references, secretKeyRef, configMapKeyRef, fieldRef, envFrom) over a
 * minimal base (PATH, HOME, HOSTNAME, KUBERNETES_SERVICE_HOST/PORT, and KUBECONFIG: a kubeconfig
 * with a token of the pod's service account, standing in for the mounted token of a real pod).
 */
import { request as httpRequest } from 'node:http';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import type { V1Container, V1Pod, V1Probe, V1Volume } from '@kubernetes/client-node';
import type { Cluster } from './cluster.js';
import { REPO_ROOT, atExit, pidAlive, spawnManaged, type ManagedProcess } from './processes.js';
import { ApiError, Rest, type Watch } from './rest.js';

export const NODE_NAME = 'nereid-sim-node';
const SERVER_BIN = join(REPO_ROOT, 'packages', 'server', 'bin', 'nereid.js');

export interface Kubelet {
  /** Kills every pod process (SIGTERM, then SIGKILL after 3 s) and stops watching; API objects stay. */
  stop(): Promise<void>;
  /** The output of a pod's containers so far (for a failing test's message). */
  logs(namespace: string, name: string): string;
}

export interface KubeletOptions {
  /** Only pods of this namespace (default: all namespaces). */
  namespace?: string;
}

/** RFC 3339 with whole seconds, as the API server writes metav1.Time. */
const now = () => new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
/** RFC 3339 with microseconds, as metav1.MicroTime is written. */
const nowMicro = () => new Date().toISOString().replace(/Z$/, '000Z');

type PodCondition = { type: string; status: string; lastProbeTime?: string | null; lastTransitionTime?: string; reason?: string; message?: string };
type Pod = V1Pod & { metadata: NonNullable<V1Pod['metadata']>; spec: NonNullable<V1Pod['spec']> };

function log(line: string): void {
  if (process.env.NEREID_KUBELET_DEBUG) process.stderr.write(`kubelet: ${line}\n`);
}

export async function startKubelet(cluster: Cluster, options: KubeletOptions = {}): Promise<Kubelet> {
  const api = cluster.kubeConfig.getCurrentCluster();
  const kubelet = new SimKubelet(new Rest(cluster.kubeConfig), options.namespace, { server: cluster.url, caData: api?.caData ?? '' });
  await kubelet.start();
  return { stop: () => kubelet.stop(), logs: (ns, name) => kubelet.logs(ns, name) };
}

class SimKubelet {
  readonly rest: Rest;
  readonly namespace: string | undefined;
  readonly dir = mkdtempSync(join(tmpdir(), 'nereid-kubelet-'));
  readonly #forget = atExit(() => rmSync(this.dir, { recursive: true, force: true }));
  readonly pods = new Map<string, PodRuntime>();
  /** Pod runtimes by namespace/name, kept after deletion for their logs. */
  readonly byName = new Map<string, PodRuntime>();
  stopped = false;
  #nextIp = 2;
  #watch: Watch | undefined;
  #heartbeat: NodeJS.Timeout | undefined;
  #loop: Promise<void> | undefined;

  /** The API server as pods reach it: its URL and CA (base64 PEM). */
  readonly api: { server: string; caData: string };

  constructor(rest: Rest, namespace: string | undefined, api: { server: string; caData: string }) {
    this.rest = rest;
    this.namespace = namespace;
    this.api = api;
  }

  /**
   * The next free pod IP: 127.0.0.2, 127.0.0.3, … then 127.0.1.1, …, never reused within this
   * kubelet, skipping an address that another test process's kubelet holds (lock files) or where
   * one of `ports` is taken already.
   */
  async allocateIp(ports: number[]): Promise<string> {
    for (;;) {
      const n = this.#nextIp++ - 1;
      const ip = `127.0.${Math.floor(n / 254)}.${(n % 254) + 1}`;
      if (!lockIp(ip)) continue;
      if ((await Promise.all(ports.map((port) => portFree(ip, port)))).every(Boolean)) return ip;
      unlockIp(ip);
    }
  }

  async start(): Promise<void> {
    await this.#registerNode();
    this.#heartbeat = setInterval(() => void this.#beat().catch((err) => log(`heartbeat: ${(err as Error).message}`)), 10_000);
    this.#heartbeat.unref();
    const rv = await this.#list();
    this.#loop = this.#run(rv);
  }

  async #registerNode(): Promise<void> {
    try {
      await this.rest.request('POST', '/api/v1/nodes', {
        apiVersion: 'v1',
        kind: 'Node',
        metadata: { name: NODE_NAME, labels: { 'kubernetes.io/hostname': NODE_NAME, 'kubernetes.io/os': 'linux', 'kubernetes.io/arch': process.arch === 'x64' ? 'amd64' : process.arch } },
      });
    } catch (err) {
      if (!(err instanceof ApiError && err.status === 409)) throw err;
    }
    const capacity = { cpu: '16', memory: '64Gi', pods: '110', 'ephemeral-storage': '100Gi' };
    await this.rest.request(
      'PATCH',
      `/api/v1/nodes/${NODE_NAME}/status`,
      {
        status: {
          capacity,
          allocatable: capacity,
          addresses: [
            { type: 'InternalIP', address: '127.0.0.1' },
            { type: 'Hostname', address: NODE_NAME },
          ],
          nodeInfo: {
            machineID: 'nereid-sim',
            systemUUID: 'nereid-sim',
            bootID: 'nereid-sim',
            kernelVersion: '',
            osImage: 'nereid simulated kubelet',
            containerRuntimeVersion: 'nereid-sim://1',
            kubeletVersion: 'v1.37.2',
            kubeProxyVersion: '',
            operatingSystem: 'linux',
            architecture: process.arch === 'x64' ? 'amd64' : process.arch,
          },
        },
      },
      'application/merge-patch+json',
    );
    await this.#beat();
  }

  /** Node Ready with a fresh heartbeat, and the node's Lease renewed (the node lifecycle controller reads both). */
  async #beat(): Promise<void> {
    const t = now();
    await this.rest.request(
      'PATCH',
      `/api/v1/nodes/${NODE_NAME}/status`,
      { status: { conditions: [{ type: 'Ready', status: 'True', reason: 'KubeletReady', message: 'nereid simulated kubelet is posting ready status', lastHeartbeatTime: t, lastTransitionTime: t }] } },
      'application/strategic-merge-patch+json',
    );
    const lease = `/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/${NODE_NAME}`;
    const body = { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', metadata: { name: NODE_NAME, namespace: 'kube-node-lease' }, spec: { holderIdentity: NODE_NAME, leaseDurationSeconds: 40, renewTime: nowMicro() } };
    try {
      await this.rest.request('PATCH', `${lease}?fieldManager=nereid-sim-kubelet&force=true`, body, 'application/apply-patch+yaml');
    } catch (err) {
      // kube-node-lease is made by the API server shortly after it starts.
      if (!(err instanceof ApiError && err.status === 404)) throw err;
    }
  }

  #podsPath(): string {
    return this.namespace ? `/api/v1/namespaces/${this.namespace}/pods` : '/api/v1/pods';
  }

  async #list(): Promise<string> {
    const list = await this.rest.request<{ metadata: { resourceVersion: string }; items: Pod[] }>('GET', this.#podsPath());
    const seen = new Set<string>();
    for (const pod of list.items) {
      seen.add(pod.metadata.uid!);
      this.handle(pod, false);
    }
    // Pods deleted while no watch ran.
    for (const [uid, runtime] of this.pods) if (!seen.has(uid)) runtime.gone();
    return list.metadata.resourceVersion;
  }

  /** Watches from `rv`, re-listing when the watch ends or its resourceVersion is too old (410 Gone). */
  async #run(rv: string): Promise<void> {
    while (!this.stopped) {
      try {
        let expired = false;
        this.#watch = await this.rest.watch<Pod | { code?: number; message?: string }>(this.#podsPath(), rv, (event) => {
          if (event.type === 'ERROR') {
            const status = event.object as { code?: number };
            if (status.code === 410) expired = true;
            this.#watch?.stop();
            return;
          }
          const pod = event.object as Pod;
          if (pod.metadata?.resourceVersion) rv = pod.metadata.resourceVersion;
          if (event.type === 'BOOKMARK') return;
          this.handle(pod, event.type === 'DELETED');
        });
        await this.#watch.done;
        if (expired && !this.stopped) rv = await this.#list();
      } catch (err) {
        if (this.stopped) break;
        log(`watch: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 500).unref());
        try {
          rv = await this.#list();
        } catch (e) {
          log(`list: ${(e as Error).message}`);
        }
      }
    }
  }

  handle(pod: Pod, deleted: boolean): void {
    if (this.stopped) return;
    const uid = pod.metadata.uid!;
    const runtime = this.pods.get(uid);
    if (deleted) {
      runtime?.gone();
      return;
    }
    if (!pod.spec.nodeName) {
      if (!pod.metadata.deletionTimestamp) void this.#bind(pod);
      return;
    }
    if (pod.spec.nodeName !== NODE_NAME) return;
    if (runtime) {
      runtime.update(pod);
      return;
    }
    if (pod.metadata.deletionTimestamp) {
      // Bound here but not run by this kubelet (it started after the pod ended): nothing to stop.
      void this.rest
        .request('DELETE', `/api/v1/namespaces/${pod.metadata.namespace}/pods/${pod.metadata.name}`, { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0, preconditions: { uid } })
        .catch((err: Error) => log(`delete ${pod.metadata.namespace}/${pod.metadata.name}: ${err.message}`));
      return;
    }
    if (pod.status?.phase === 'Succeeded' || pod.status?.phase === 'Failed') return;
    const created = new PodRuntime(this, pod);
    this.pods.set(uid, created);
    this.byName.set(`${pod.metadata.namespace}/${pod.metadata.name}`, created);
    void created.begin();
  }

  async #bind(pod: Pod): Promise<void> {
    const { namespace, name } = pod.metadata;
    try {
      await this.rest.request('POST', `/api/v1/namespaces/${namespace}/pods/${name}/binding`, {
        apiVersion: 'v1',
        kind: 'Binding',
        metadata: { name, uid: pod.metadata.uid },
        target: { apiVersion: 'v1', kind: 'Node', name: NODE_NAME },
      });
    } catch (err) {
      // Already bound (a repeated event) or deleted meanwhile.
      if (!(err instanceof ApiError && (err.status === 409 || err.status === 404))) log(`bind ${namespace}/${name}: ${(err as Error).message}`);
    }
  }

  logs(namespace: string, name: string): string {
    const runtime = this.byName.get(`${namespace}/${name}`);
    return runtime ? runtime.logs() : `(no pod ${namespace}/${name} ran on ${NODE_NAME})`;
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.#heartbeat);
    this.#watch?.stop();
    await this.#loop?.catch(() => undefined);
    await Promise.all([...this.pods.values()].map((p) => p.kill(3000)));
    rmSync(this.dir, { recursive: true, force: true });
    this.#forget();
  }
}

// ---- one pod ----------------------------------------------------------------------------------

class PodRuntime {
  readonly kubelet: SimKubelet;
  pod: Pod;
  ip = '';
  readonly dir: string;
  readonly containers: ContainerRuntime[];
  readonly startTime = now();
  terminating = false;
  finished = false;
  #syncing = false;
  #dirty = false;

  constructor(kubelet: SimKubelet, pod: Pod) {
    this.kubelet = kubelet;
    this.pod = pod;
    this.dir = join(kubelet.dir, `${pod.metadata.namespace}_${pod.metadata.name}_${pod.metadata.uid!.slice(0, 8)}`);
    mkdirSync(this.dir, { recursive: true });
    this.containers = pod.spec.containers.map((c) => new ContainerRuntime(this, c));
  }

  get rest(): Rest {
    return this.kubelet.rest;
  }

  get path(): string {
    return `/api/v1/namespaces/${this.pod.metadata.namespace}/pods/${this.pod.metadata.name}`;
  }

  get name(): string {
    return `${this.pod.metadata.namespace}/${this.pod.metadata.name}`;
  }

  async begin(): Promise<void> {
    if (this.pod.metadata.deletionTimestamp) {
      await this.terminate();
      return;
    }
    const ports = this.pod.spec.containers.flatMap((c) => (c.ports ?? []).map((p) => p.containerPort));
    this.ip = await this.kubelet.allocateIp(ports);
    if (this.finished || this.terminating) {
      unlockIp(this.ip);
      return;
    }
    for (const c of this.containers) void c.launch();
    this.sync();
  }

  update(pod: Pod): void {
    if (pod.metadata.resourceVersion && this.pod.metadata.resourceVersion && BigInt(pod.metadata.resourceVersion) < BigInt(this.pod.metadata.resourceVersion)) return;
    this.pod = pod;
    if (pod.metadata.deletionTimestamp && !this.terminating) void this.terminate();
    else this.sync();
  }

  /** The pod was removed from the API (force-deleted, or after our own delete): its processes go now. */
  gone(): void {
    this.finished = true;
    void this.kill(0);
  }

  async kill(graceMs: number): Promise<void> {
    this.finished = true;
    await Promise.all(this.containers.map((c) => c.kill(graceMs)));
    if (this.ip) unlockIp(this.ip);
  }

  async terminate(): Promise<void> {
    this.terminating = true;
    const graceSeconds = this.pod.metadata.deletionGracePeriodSeconds ?? this.pod.spec.terminationGracePeriodSeconds ?? 30;
    const deadline = Date.now() + graceSeconds * 1000;
    log(`${this.name}: terminating (grace ${graceSeconds} s)`);
    await Promise.all(this.containers.map((c) => c.preStop(deadline)));
    await Promise.all(this.containers.map((c) => c.kill(Math.max(0, deadline - Date.now()))));
    this.finished = true;
    if (this.ip) unlockIp(this.ip);
    try {
      await this.rest.request('DELETE', this.path, { apiVersion: 'v1', kind: 'DeleteOptions', gracePeriodSeconds: 0, preconditions: { uid: this.pod.metadata.uid } });
    } catch (err) {
      if (!(err instanceof ApiError && (err.status === 404 || err.status === 409))) log(`${this.name}: delete: ${(err as Error).message}`);
    }
  }

  /** Writes the pod's status if it differs from what the API holds (coalesced; one write at a time). */
  sync(): void {
    if (this.kubelet.stopped || this.ip === '') return;
    this.#dirty = true;
    if (this.#syncing) return;
    this.#syncing = true;
    void (async () => {
      try {
        while (this.#dirty && !this.kubelet.stopped) {
          this.#dirty = false;
          await this.#syncOnce();
        }
      } finally {
        this.#syncing = false;
      }
    })();
  }

  async #syncOnce(): Promise<void> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const status = this.desiredStatus(this.pod);
      if (signature(status) === signature(this.pod.status)) return;
      try {
        const updated = await this.rest.request<Pod>(
          'PATCH',
          `${this.path}/status`,
          { metadata: { resourceVersion: this.pod.metadata.resourceVersion }, status },
          'application/strategic-merge-patch+json',
        );
        this.update(updated);
        return;
      } catch (err) {
        if (err instanceof ApiError && err.status === 409) {
          try {
            this.update(await this.rest.request<Pod>('GET', this.path));
          } catch (e) {
            if (e instanceof ApiError && e.status === 404) return;
          }
          continue;
        }
        if (err instanceof ApiError && err.status === 404) return;
        log(`${this.name}: status: ${(err as Error).message}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    }
  }

  /** The status this kubelet wants, given the pod as the API holds it (for others' conditions). */
  desiredStatus(pod: Pod): Record<string, unknown> {
    const current = (pod.status?.conditions ?? []) as unknown as PodCondition[];
    const containersReady = this.containers.every((c) => c.ready);
    const gates = pod.spec.readinessGates ?? [];
    const gatesTrue = gates.every((g) => current.some((c) => c.type === g.conditionType && c.status === 'True'));
    const cond = (type: string, ok: boolean, reason?: string, message?: string): PodCondition => {
      const prev = current.find((c) => c.type === type);
      const status = ok ? 'True' : 'False';
      return {
        type,
        status,
        lastProbeTime: null,
        lastTransitionTime: prev && prev.status === status && prev.lastTransitionTime ? prev.lastTransitionTime : now(),
        ...(ok ? {} : { reason, message }),
      };
    };
    const notReady = this.containers.filter((c) => !c.ready).map((c) => c.spec.name);
    const missingGates = gates.filter((g) => !current.some((c) => c.type === g.conditionType && c.status === 'True')).map((g) => g.conditionType);
    const readyReason = !containersReady ? 'ContainersNotReady' : 'ReadinessGatesNotReady';
    const readyMessage = !containersReady ? `containers with unready status: [${notReady.join(' ')}]` : `corresponding condition of pod readiness gate "${missingGates.join('", "')}" does not exist or is False`;
    const terminated = this.containers.every((c) => c.state === 'terminated' && !c.willRestart());
    const phase = terminated ? (this.containers.every((c) => c.exitCode === 0) ? 'Succeeded' : 'Failed') : 'Running';
    return {
      phase,
      hostIP: '127.0.0.1',
      hostIPs: [{ ip: '127.0.0.1' }],
      podIP: this.ip,
      podIPs: [{ ip: this.ip }],
      startTime: this.startTime,
      conditions: [
        cond('PodReadyToStartContainers', true),
        cond('Initialized', true),
        cond('ContainersReady', containersReady, 'ContainersNotReady', `containers with unready status: [${notReady.join(' ')}]`),
        cond('Ready', containersReady && gatesTrue, readyReason, readyMessage),
        cond('PodScheduled', true),
      ],
      containerStatuses: this.containers.map((c) => c.status()),
    };
  }

  #serviceAccount: Promise<string | undefined> | undefined;

  /**
   * A kubeconfig file with a token of the pod's service account (the TokenRequest API), which a
   * client's default loading (KUBECONFIG) finds where a real pod's client would use its mounted
   * token: what the process may do is what RBAC grants that service account. Undefined when the pod
   * opts out (automountServiceAccountToken: false) or the service account does not exist.
   */
  serviceAccountKubeconfig(): Promise<string | undefined> {
    this.#serviceAccount ??= (async () => {
      const spec = this.pod.spec;
      if (spec.automountServiceAccountToken === false) return undefined;
      const ns = this.pod.metadata.namespace!;
      const sa = spec.serviceAccountName || 'default';
      let token: string;
      try {
        const answer = await this.rest.request<{ status: { token: string } }>('POST', `/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, {
          apiVersion: 'authentication.k8s.io/v1',
          kind: 'TokenRequest',
          spec: { expirationSeconds: 86_400, boundObjectRef: { apiVersion: 'v1', kind: 'Pod', name: this.pod.metadata.name, uid: this.pod.metadata.uid } },
        });
        token = answer.status.token;
      } catch (err) {
        log(`${this.name}: no token for service account ${ns}/${sa}: ${(err as Error).message}`);
        return undefined;
      }
      const path = join(this.dir, 'serviceaccount.kubeconfig');
      const { server, caData } = this.kubelet.api;
      writeFileSync(
        path,
        [
          'apiVersion: v1',
          'kind: Config',
          `clusters: [{name: in-cluster, cluster: {server: "${server}", certificate-authority-data: ${caData}}}]`,
          `users: [{name: "system:serviceaccount:${ns}:${sa}", user: {token: ${token}}}]`,
          `contexts: [{name: in-cluster, context: {cluster: in-cluster, user: "system:serviceaccount:${ns}:${sa}", namespace: ${ns}}}]`,
          'current-context: in-cluster',
          '',
        ].join('\n'),
        { mode: 0o600 },
      );
      return path;
    })();
    return this.#serviceAccount;
  }

  logs(): string {
    return this.containers.map((c) => `--- ${this.name} container ${c.spec.name} ---\n${c.logTail(200)}`).join('\n');
  }
}

/** What the kubelet compares to decide whether to write: its own fields, without timestamps. */
function signature(status: Record<string, unknown> | V1Pod['status'] | undefined): string {
  if (!status) return '';
  const s = status as Record<string, unknown> & { conditions?: PodCondition[]; containerStatuses?: Record<string, unknown>[] };
  const own = new Set(['PodReadyToStartContainers', 'Initialized', 'ContainersReady', 'Ready', 'PodScheduled']);
  return JSON.stringify({
    phase: s.phase,
    podIP: s.podIP,
    hostIP: s.hostIP,
    conditions: (s.conditions ?? [])
      .filter((c) => own.has(c.type))
      .map((c) => `${c.type}=${c.status}`)
      .sort(),
    containers: (s.containerStatuses ?? []).map((c) => {
      const x = c as { name: string; ready: boolean; started?: boolean; restartCount: number; containerID?: string; state?: Record<string, { reason?: string; exitCode?: number }> };
      const stateKey = Object.keys(x.state ?? {})[0] ?? '';
      const st = x.state?.[stateKey];
      return `${x.name}:${x.ready}:${x.started ?? false}:${x.restartCount}:${x.containerID ?? ''}:${stateKey}:${st?.reason ?? ''}:${st?.exitCode ?? ''}`;
    }),
  });
}

// ---- one container ----------------------------------------------------------------------------

type ProbeState = { successes: number; failures: number; timer?: NodeJS.Timeout; done?: boolean };

class ContainerRuntime {
  readonly pod: PodRuntime;
  readonly spec: V1Container;
  readonly logPath: string;
  process: ManagedProcess | undefined;
  state: 'waiting' | 'running' | 'terminated' = 'waiting';
  waitingReason = 'ContainerCreating';
  waitingMessage: string | undefined;
  startedAt: string | undefined;
  finishedAt: string | undefined;
  exitCode: number | undefined;
  lastTerminated: Record<string, unknown> | undefined;
  restartCount = 0;
  ready = false;
  #stopping = false;
  #backoffMs = 1000;
  #readiness: ProbeState = { successes: 0, failures: 0 };
  #liveness: ProbeState = { successes: 0, failures: 0 };
  #startup: ProbeState = { successes: 0, failures: 0 };
  /** The startup probe has passed (or there is none). */
  started = false;
  #restartTimer: NodeJS.Timeout | undefined;

  constructor(pod: PodRuntime, spec: V1Container) {
    this.pod = pod;
    this.spec = spec;
    this.logPath = join(pod.dir, `${spec.name}.log`);
  }

  /** Resolves the command, environment and mounts, then starts the process (retrying a missing Secret or ConfigMap). */
  async launch(): Promise<void> {
    if (this.#stopping || this.pod.finished) return;
    let prepared: { command: string; args: string[]; env: NodeJS.ProcessEnv; cwd: string };
    try {
      prepared = await this.#prepare();
    } catch (err) {
      this.state = 'waiting';
      this.waitingReason = 'CreateContainerConfigError';
      this.waitingMessage = (err as Error).message;
      this.pod.sync();
      this.#restartTimer = setTimeout(() => void this.launch(), 1000).unref();
      return;
    }
    if (this.#stopping || this.pod.finished) return;
    writeFileSync(this.logPath, `# ${prepared.command} ${prepared.args.join(' ')}\n`, { flag: 'a' });
    const proc = spawnManaged(`${this.pod.name}/${this.spec.name}`, prepared.command, prepared.args, this.logPath, { env: prepared.env, cwd: prepared.cwd });
    this.process = proc;
    this.state = 'running';
    this.startedAt = now();
    this.exitCode = undefined;
    this.ready = false;
    this.#readiness = { successes: 0, failures: 0 };
    this.#liveness = { successes: 0, failures: 0 };
    this.#startup = { successes: 0, failures: 0 };
    this.started = false;
    log(`${this.pod.name}/${this.spec.name}: started pid ${proc.pid} on ${this.pod.ip}`);
    this.#startProbes(proc);
    this.pod.sync();
    const startedMs = Date.now();
    void proc.exited.then(({ code, signal }) => {
      if (this.process !== proc) return;
      this.#stopProbes();
      this.state = 'terminated';
      this.ready = false;
      this.finishedAt = now();
      this.exitCode = code ?? 128 + (signal === 'SIGKILL' ? 9 : signal === 'SIGTERM' ? 15 : 1);
      log(`${this.pod.name}/${this.spec.name}: pid ${proc.pid} exited ${this.exitCode}`);
      if (this.#stopping || this.pod.finished) return;
      if (this.willRestart()) {
        this.lastTerminated = { terminated: this.#terminatedState() };
        if (Date.now() - startedMs > 10_000) this.#backoffMs = 1000;
        this.state = 'waiting';
        this.waitingReason = 'CrashLoopBackOff';
        this.waitingMessage = `back-off ${this.#backoffMs / 1000}s restarting failed container=${this.spec.name}`;
        this.pod.sync();
        this.#restartTimer = setTimeout(() => {
          this.restartCount++;
          void this.launch();
        }, this.#backoffMs).unref();
        this.#backoffMs = Math.min(this.#backoffMs * 2, 10_000);
      } else {
        this.pod.sync();
      }
    });
  }

  willRestart(): boolean {
    if (this.#stopping || this.pod.terminating || this.pod.finished) return false;
    const policy = this.pod.pod.spec.restartPolicy ?? 'Always';
    return policy === 'Always' || (policy === 'OnFailure' && this.exitCode !== 0);
  }

  #terminatedState(): Record<string, unknown> {
    return {
      exitCode: this.exitCode ?? 0,
      reason: this.exitCode === 0 ? 'Completed' : 'Error',
      startedAt: this.startedAt,
      finishedAt: this.finishedAt,
      containerID: this.process ? `nereid-sim://${this.process.pid}` : undefined,
    };
  }

  status(): Record<string, unknown> {
    const state =
      this.state === 'running'
        ? { running: { startedAt: this.startedAt } }
        : this.state === 'terminated'
          ? { terminated: this.#terminatedState() }
          : { waiting: { reason: this.waitingReason, ...(this.waitingMessage ? { message: this.waitingMessage } : {}) } };
    return {
      name: this.spec.name,
      image: this.spec.image ?? 'nereid',
      imageID: '',
      ...(this.process ? { containerID: `nereid-sim://${this.process.pid}` } : {}),
      ready: this.ready,
      started: this.state === 'running' && this.started,
      restartCount: this.restartCount,
      state,
      lastState: this.lastTerminated ?? {},
    };
  }

  // -- what the process runs with --

  async #prepare(): Promise<{ command: string; args: string[]; env: NodeJS.ProcessEnv; cwd: string }> {
    const mounts = await this.#mounts();
    const rewrite = (value: string): string => {
      const eq = value.indexOf('=');
      if (value.startsWith('-') && eq > 0) return value.slice(0, eq + 1) + rewrite(value.slice(eq + 1));
      for (const [mountPath, local] of mounts) {
        if (value === mountPath) return local;
        if (value.startsWith(mountPath.endsWith('/') ? mountPath : `${mountPath}/`)) return join(local, value.slice(mountPath.length));
      }
      return value;
    };
    const vars = await this.#environment();
    const expand = (s: string) =>
      s.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (m, name: string | undefined) => (m === '$$' ? '$' : name !== undefined && name in vars ? vars[name]! : m));
    const command = (this.spec.command ?? ['nereid']).map(expand).map(rewrite);
    const args = (this.spec.args ?? []).map(expand).map(rewrite);
    const kubeconfig = await this.pod.serviceAccountKubeconfig();
    const api = new URL(this.pod.kubelet.api.server);
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      HOSTNAME: this.pod.pod.metadata.name,
      KUBERNETES_SERVICE_HOST: api.hostname,
      KUBERNETES_SERVICE_PORT: api.port,
      ...(kubeconfig ? { KUBECONFIG: kubeconfig } : {}),
      ...Object.fromEntries(Object.entries(vars).map(([k, v]) => [k, rewrite(v)])),
    };
    const cwd = this.spec.workingDir ? rewrite(this.spec.workingDir) : REPO_ROOT;
    if (basename(command[0]!) === 'nereid') {
      const cli = [...command.slice(1), ...args];
      if (cli[0] === 'serve') {
        // The pod's own address; the ports stay as the pod spec gives them.
        for (const flag of ['--http-address', '--grpc-address', '--metrics-address']) {
          if (!cli.some((a) => a === flag || a.startsWith(`${flag}=`))) cli.push(`${flag}=${this.pod.ip}`);
        }
      }
      return { command: process.execPath, args: [SERVER_BIN, ...cli], env, cwd };
    }
    return { command: command[0]!, args: [...command.slice(1), ...args], env, cwd };
  }

  /** [mountPath, local directory or file] pairs, longest mountPath first. */
  async #mounts(): Promise<[string, string][]> {
    const out: [string, string][] = [];
    for (const m of this.spec.volumeMounts ?? []) {
      const volume = (this.pod.pod.spec.volumes ?? []).find((v) => v.name === m.name);
      if (!volume) throw new Error(`volume ${m.name} of mount ${m.mountPath} is not in the pod spec`);
      const base = await this.#volume(volume);
      out.push([m.mountPath.replace(/\/+$/, '') || '/', m.subPath ? join(base, m.subPath) : base]);
    }
    return out.sort((a, b) => b[0].length - a[0].length);
  }

  async #volume(v: V1Volume): Promise<string> {
    if (v.hostPath) return v.hostPath.path;
    const dir = join(this.pod.dir, 'volumes', v.name);
    mkdirSync(dir, { recursive: true });
    const ns = this.pod.pod.metadata.namespace;
    const write = (files: Record<string, Buffer>, items: { key: string; path: string }[] | undefined) => {
      const selected = items ?? Object.keys(files).map((key) => ({ key, path: key }));
      for (const { key, path } of selected) {
        if (!(key in files)) throw new Error(`key ${key} not found for volume ${v.name}`);
        mkdirSync(dirname(join(dir, path)), { recursive: true });
        writeFileSync(join(dir, path), files[key]!);
      }
    };
    if (v.configMap) {
      const cm = await this.#read<{ data?: Record<string, string>; binaryData?: Record<string, string> }>(`/api/v1/namespaces/${ns}/configmaps/${v.configMap.name}`, v.configMap.optional);
      const files: Record<string, Buffer> = {};
      for (const [k, s] of Object.entries(cm?.data ?? {})) files[k] = Buffer.from(s);
      for (const [k, s] of Object.entries(cm?.binaryData ?? {})) files[k] = Buffer.from(s, 'base64');
      write(files, v.configMap.items);
    } else if (v.secret) {
      const secret = await this.#read<{ data?: Record<string, string> }>(`/api/v1/namespaces/${ns}/secrets/${v.secret.secretName}`, v.secret.optional);
      const files: Record<string, Buffer> = {};
      for (const [k, s] of Object.entries(secret?.data ?? {})) files[k] = Buffer.from(s, 'base64');
      write(files, v.secret.items);
    } else if (!v.emptyDir) {
      log(`${this.pod.name}: volume ${v.name}: only hostPath, emptyDir, configMap and secret are simulated; it is an empty directory`);
    }
    return dir;
  }

  async #read<T>(path: string, optional: boolean | undefined): Promise<T | undefined> {
    try {
      return await this.pod.rest.request<T>('GET', path);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404) {
        if (optional) return undefined;
        throw new Error(`${path.split('/').slice(-2).join(' ')} not found`);
      }
      throw err;
    }
  }

  /** The container's environment variables, in the order Kubernetes resolves them. */
  async #environment(): Promise<Record<string, string>> {
    const pod = this.pod.pod;
    const ns = pod.metadata.namespace;
    const vars: Record<string, string> = {};
    for (const from of this.spec.envFrom ?? []) {
      const prefix = from.prefix ?? '';
      if (from.configMapRef) {
        const cm = await this.#read<{ data?: Record<string, string> }>(`/api/v1/namespaces/${ns}/configmaps/${from.configMapRef.name}`, from.configMapRef.optional);
        for (const [k, v] of Object.entries(cm?.data ?? {})) vars[prefix + k] = v;
      }
      if (from.secretRef) {
        const s = await this.#read<{ data?: Record<string, string> }>(`/api/v1/namespaces/${ns}/secrets/${from.secretRef.name}`, from.secretRef.optional);
        for (const [k, v] of Object.entries(s?.data ?? {})) vars[prefix + k] = Buffer.from(v, 'base64').toString();
      }
    }
    const expand = (s: string) => s.replace(/\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)/g, (m, name: string | undefined) => (m === '$$' ? '$' : name !== undefined && name in vars ? vars[name]! : m));
    for (const e of this.spec.env ?? []) {
      if (e.value !== undefined) vars[e.name] = expand(e.value);
      else if (e.valueFrom?.secretKeyRef) {
        const ref = e.valueFrom.secretKeyRef;
        const s = await this.#read<{ data?: Record<string, string> }>(`/api/v1/namespaces/${ns}/secrets/${ref.name}`, ref.optional);
        const value = s?.data?.[ref.key];
        if (value !== undefined) vars[e.name] = Buffer.from(value, 'base64').toString();
        else if (!ref.optional) throw new Error(`couldn't find key ${ref.key} in Secret ${ns}/${ref.name}`);
      } else if (e.valueFrom?.configMapKeyRef) {
        const ref = e.valueFrom.configMapKeyRef;
        const cm = await this.#read<{ data?: Record<string, string> }>(`/api/v1/namespaces/${ns}/configmaps/${ref.name}`, ref.optional);
        const value = cm?.data?.[ref.key];
        if (value !== undefined) vars[e.name] = value;
        else if (!ref.optional) throw new Error(`couldn't find key ${ref.key} in ConfigMap ${ns}/${ref.name}`);
      } else if (e.valueFrom?.fieldRef) {
        vars[e.name] = fieldValue(pod, e.valueFrom.fieldRef.fieldPath, this.pod.ip);
      } else {
        vars[e.name] = '';
      }
    }
    return vars;
  }

  // -- probes --

  #port(port: number | string): number {
    if (typeof port === 'number') return port;
    if (/^\d+$/.test(port)) return Number(port);
    for (const c of this.pod.pod.spec.containers) {
      const p = (c.ports ?? []).find((x) => x.name === port);
      if (p) return p.containerPort;
    }
    throw new Error(`no container port named ${port}`);
  }

  /** One probe attempt: true when it succeeded. */
  async #probeOnce(probe: V1Probe): Promise<boolean> {
    const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000;
    try {
      if (probe.httpGet) {
        const port = this.#port(probe.httpGet.port);
        const host = probe.httpGet.host || this.pod.ip;
        const status = await httpGet(host, port, probe.httpGet.path ?? '/', timeoutMs, Object.fromEntries((probe.httpGet.httpHeaders ?? []).map((h) => [h.name, h.value])));
        return status >= 200 && status < 400;
      }
      if (probe.tcpSocket) {
        const port = this.#port(probe.tcpSocket.port);
        return await new Promise<boolean>((resolve) => {
          const socket = connect({ host: probe.tcpSocket!.host || this.pod.ip, port, timeout: timeoutMs });
          socket.once('connect', () => {
            socket.destroy();
            resolve(true);
          });
          socket.once('timeout', () => {
            socket.destroy();
            resolve(false);
          });
          socket.once('error', () => resolve(false));
        });
      }
      log(`${this.pod.name}/${this.spec.name}: only httpGet and tcpSocket probes are simulated; counted as passing`);
      return true;
    } catch {
      return false;
    }
  }

  #schedule(state: ProbeState, probe: V1Probe, proc: ManagedProcess, onResult: (ok: boolean) => void, first: boolean): void {
    const delay = first ? (probe.initialDelaySeconds ?? 0) * 1000 : (probe.periodSeconds ?? 10) * 1000;
    state.timer = setTimeout(async () => {
      if (this.process !== proc || !proc.running) return;
      const ok = await this.#probeOnce(probe);
      if (this.process !== proc || !proc.running) return;
      onResult(ok);
      if (!state.done) this.#schedule(state, probe, proc, onResult, false);
    }, delay).unref();
  }

  /** The startup probe first, when there is one; readiness and liveness probes once it passes. */
  #startProbes(proc: ManagedProcess): void {
    const startup = this.spec.startupProbe;
    if (!startup) {
      this.started = true;
      this.#startOtherProbes(proc);
      return;
    }
    this.#schedule(this.#startup, startup, proc, (ok) => {
      const s = this.#startup;
      if (this.started) return;
      if (ok) {
        this.started = true;
        s.done = true;
        this.#startOtherProbes(proc);
        this.pod.sync();
        return;
      }
      s.failures++;
      if (s.failures >= (startup.failureThreshold ?? 3) && !this.pod.terminating) {
        log(`${this.pod.name}/${this.spec.name}: startup probe failed ${s.failures} times: restarting`);
        this.#stopProbes();
        void proc.stop((startup.terminationGracePeriodSeconds ?? this.pod.pod.spec.terminationGracePeriodSeconds ?? 30) * 1000);
      }
    }, true);
  }

  #startOtherProbes(proc: ManagedProcess): void {
    const readiness = this.spec.readinessProbe;
    if (readiness) {
      this.#schedule(this.#readiness, readiness, proc, (ok) => {
        const s = this.#readiness;
        if (ok) {
          s.failures = 0;
          s.successes++;
          if (!this.ready && s.successes >= (readiness.successThreshold ?? 1)) {
            this.ready = true;
            this.pod.sync();
          }
        } else {
          s.successes = 0;
          s.failures++;
          if (this.ready && s.failures >= (readiness.failureThreshold ?? 3)) {
            this.ready = false;
            this.pod.sync();
          }
        }
      }, true);
    } else {
      this.ready = true;
    }
    const liveness = this.spec.livenessProbe;
    if (liveness) {
      this.#schedule(this.#liveness, liveness, proc, (ok) => {
        const s = this.#liveness;
        if (ok) {
          s.failures = 0;
          return;
        }
        s.failures++;
        if (s.failures >= (liveness.failureThreshold ?? 3) && !this.pod.terminating) {
          log(`${this.pod.name}/${this.spec.name}: liveness probe failed ${s.failures} times: restarting`);
          this.#stopProbes();
          const grace = (liveness.terminationGracePeriodSeconds ?? this.pod.pod.spec.terminationGracePeriodSeconds ?? 30) * 1000;
          void proc.stop(grace);
        }
      }, true);
    }
  }

  #stopProbes(): void {
    clearTimeout(this.#readiness.timer);
    clearTimeout(this.#liveness.timer);
    clearTimeout(this.#startup.timer);
  }

  // -- stopping --

  /** Runs the preStop hook, bounded by `deadline` (ms since the epoch). */
  async preStop(deadline: number): Promise<void> {
    const hook = this.spec.lifecycle?.preStop;
    if (!hook || !this.process?.running) return;
    const left = () => Math.max(0, deadline - Date.now());
    const sleep = (seconds: number) => new Promise((r) => setTimeout(r, Math.min(seconds * 1000, left())));
    const hookWithSleep = hook as typeof hook & { sleep?: { seconds: number } };
    if (hookWithSleep.sleep) {
      await sleep(hookWithSleep.sleep.seconds);
    } else if (hook.exec?.command) {
      const cmd = hook.exec.command;
      // `sleep N`, directly or through a shell.
      const shell = cmd.length === 3 && /(^|\/)(ba|da)?sh$/.test(cmd[0]!) && cmd[1] === '-c';
      const script = shell ? cmd[2]! : basename(cmd[0] ?? '') === 'sleep' ? ['sleep', ...cmd.slice(1)].join(' ') : undefined;
      const m = script === undefined ? null : /^\s*sleep\s+(\d+(?:\.\d+)?)\s*;?\s*$/.exec(script);
      if (m) await sleep(Number(m[1]));
      else log(`${this.pod.name}/${this.spec.name}: preStop exec ${JSON.stringify(cmd)} is not simulated (only sleep N); skipped`);
    } else if (hook.httpGet) {
      try {
        await httpGet(hook.httpGet.host || this.pod.ip, this.#port(hook.httpGet.port), hook.httpGet.path ?? '/', left(), {});
      } catch (err) {
        log(`${this.pod.name}/${this.spec.name}: preStop httpGet: ${(err as Error).message}`);
      }
    } else {
      log(`${this.pod.name}/${this.spec.name}: preStop hook kind not simulated; skipped`);
    }
  }

  /** SIGTERM, SIGKILL after `graceMs`; no restart afterwards. */
  async kill(graceMs: number): Promise<void> {
    this.#stopping = true;
    clearTimeout(this.#restartTimer);
    this.#stopProbes();
    if (this.process) await this.process.stop(graceMs);
  }

  logTail(lines: number): string {
    return this.process?.tail(lines) ?? '(not started)';
  }
}

function fieldValue(pod: Pod, path: string, ip: string): string {
  const label = /^metadata\.(labels|annotations)\['(.+)'\]$/.exec(path);
  if (label) return (pod.metadata[label[1] as 'labels' | 'annotations'] ?? {})[label[2]!] ?? '';
  switch (path) {
    case 'metadata.name':
      return pod.metadata.name ?? '';
    case 'metadata.namespace':
      return pod.metadata.namespace ?? '';
    case 'metadata.uid':
      return pod.metadata.uid ?? '';
    case 'spec.nodeName':
      return NODE_NAME;
    case 'spec.serviceAccountName':
      return pod.spec.serviceAccountName ?? 'default';
    case 'status.podIP':
      return ip;
    case 'status.podIPs':
      return ip;
    case 'status.hostIP':
    case 'status.hostIPs':
      return '127.0.0.1';
    default:
      return '';
  }
}

/**
 * Pod IPs held by this test process. A lock file per address (in the temporary directory, holding
 * the owner's pid) keeps the simulated kubelets of test processes running side by side from
 * giving two pods one address; a file whose owner is gone is taken over.
 */
const IP_LOCKS = join(tmpdir(), 'nereid-pod-ips');
const heldIps = new Set<string>();
let ipLocksHooked = false;

function lockIp(ip: string): boolean {
  mkdirSync(IP_LOCKS, { recursive: true });
  if (!ipLocksHooked) {
    ipLocksHooked = true;
    atExit(() => {
      for (const held of heldIps) rmSync(join(IP_LOCKS, held), { force: true });
    });
  }
  const path = join(IP_LOCKS, ip);
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      writeFileSync(path, String(process.pid), { flag: 'wx' });
      heldIps.add(ip);
      return true;
    } catch {
      let owner = 0;
      try {
        owner = Number(readFileSync(path, 'utf8'));
      } catch {
        continue;
      }
      if (owner > 0 && pidAlive(owner)) return false;
      rmSync(path, { force: true });
    }
  }
  return false;
}

function unlockIp(ip: string): void {
  if (heldIps.delete(ip)) rmSync(join(IP_LOCKS, ip), { force: true });
}

/** True when nothing listens on ip:port (a listen there succeeds). */
function portFree(ip: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, ip, () => server.close(() => resolve(true)));
  });
}

function httpGet(host: string, port: number, path: string, timeoutMs: number, headers: Record<string, string>): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host, port, path, method: 'GET', headers: { 'User-Agent': 'kube-probe/1.37', ...headers } }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
      res.on('error', reject);
    });
    req.setTimeout(Math.max(1, timeoutMs), () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}
