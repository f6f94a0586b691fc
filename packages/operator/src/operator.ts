/**
 * The operator process: informers for NereidServers, NereidModels, the server pods and the owned
 * objects, four work queues (servers, models, readiness gates, and the autoscaler of
 * NereidServers in autoscaling mode operator, which runs each key every intervalSeconds), leader
 * election and the metrics endpoint.
 *
 * Lifecycle: `start()` serves /metrics and campaigns for the Lease (or, without leader
 * election, leads at once). Only a leader starts informers and queues. A leader that loses the
 * Lease stops its queues at once and `done` resolves with `lost-lease` (the process exits
 * non-zero and is restarted, as client-go operators do). `stop()` ends everything and releases
 * the Lease.
 */
import type http from 'node:http';
import type { KubeConfig } from '@kubernetes/client-node';
import type { ControllerContext, Pod } from './context.js';
import { Informer } from './informer.js';
import type { KubeObject, ResourceType } from './kube-client.js';
import { KubeClient, RESOURCES, collectionPath, isNotFound } from './kube-client.js';
import { LeaderElector } from './leader-election.js';
import type { Logger } from './log.js';
import { OperatorMetrics, serveMetrics } from './metrics.js';
import { PrometheusClient } from './prometheus.js';
import { reconcileGate, reconcileModel } from './model-controller.js';
import { reconcileServer } from './server-controller.js';
import { reconcileAutoscaling } from './autoscaling-controller.js';
import { EventRecorder } from './status.js';
import type { NereidModel, NereidServer } from './types.js';
import { DEFAULT_IMAGE, LABELS, MANAGED_BY } from './types.js';
import { WorkQueue } from './work-queue.js';
import type { ReconcileResult } from './work-queue.js';

export interface OperatorOptions {
  kubeConfig: KubeConfig;
  log: Logger;
  /** Watch one namespace; undefined: all. */
  namespace?: string;
  leaderElect: boolean;
  leaseNamespace: string;
  leaseName: string;
  identity?: string;
  leaseDurationSeconds: number;
  renewDeadlineSeconds: number;
  retryPeriodSeconds: number;
  metricsAddress: string;
  /** 0: the OS picks a port. */
  metricsPort: number;
  concurrency: number;
  /** Seconds between re-checks of settled objects (default 60). */
  resyncSeconds?: number;
  /** The image of NereidServers that name none (default localhost/nereid:0.1.0). */
  serverImage?: string;
  /** Prometheus's base URL (`--prometheus-url`) for autoscaling in mode operator and canary analysis. */
  prometheusUrl?: string;
}

export type StopReason = 'stopped' | 'lost-lease';

interface Controllers {
  informers: Informer<KubeObject>[];
  queues: WorkQueue[];
}

const keyOf = (o: KubeObject): string => `${o.metadata.namespace ?? ''}/${o.metadata.name ?? ''}`;
/**
 * Whether an update is more than the operator's own status write (which needs no reconcile of
 * the object itself): generation, deletion, finalizers, labels or annotations changed.
 */
const specChanged = (a: KubeObject, b: KubeObject): boolean =>
  a.metadata.generation !== b.metadata.generation ||
  a.metadata.deletionTimestamp !== b.metadata.deletionTimestamp ||
  JSON.stringify(a.metadata.finalizers) !== JSON.stringify(b.metadata.finalizers) ||
  JSON.stringify(a.metadata.labels) !== JSON.stringify(b.metadata.labels) ||
  JSON.stringify(a.metadata.annotations) !== JSON.stringify(b.metadata.annotations);
const containersReady = (p: Pod): boolean => p.status?.conditions?.some((c) => c.type === 'ContainersReady' && c.status === 'True') === true;

export class Operator {
  readonly metrics = new OperatorMetrics();
  readonly client: KubeClient;
  readonly done: Promise<StopReason>;
  #options: OperatorOptions;
  #log: Logger;
  #elector: LeaderElector | undefined;
  #controllers: Controllers | undefined;
  #metricsServer: http.Server | undefined;
  #finish!: (reason: StopReason) => void;
  #synced = false;
  #stopping = false;
  #monitorCheck: { at: number; served: boolean } | undefined;

  constructor(options: OperatorOptions) {
    this.#options = options;
    this.#log = options.log;
    this.client = new KubeClient(options.kubeConfig);
    this.done = new Promise((resolve) => (this.#finish = resolve));
  }

  get metricsServer(): http.Server | undefined {
    return this.#metricsServer;
  }

  get isLeader(): boolean {
    return this.#controllers !== undefined;
  }

  async start(): Promise<void> {
    this.#metricsServer = await serveMetrics(
      this.metrics,
      { live: () => true, ready: () => !this.#controllers || this.#synced },
      this.#options.metricsAddress,
      this.#options.metricsPort,
    );
    const address = this.#metricsServer.address();
    this.#log.info('metrics endpoint listening', { address: typeof address === 'object' && address ? `${address.address}:${address.port}` : address });
    if (!this.#options.leaderElect) {
      this.#startControllers();
      return;
    }
    this.#elector = new LeaderElector(this.client, {
      namespace: this.#options.leaseNamespace,
      name: this.#options.leaseName,
      identity: this.#options.identity,
      leaseDurationSeconds: this.#options.leaseDurationSeconds,
      renewDeadlineSeconds: this.#options.renewDeadlineSeconds,
      retryPeriodSeconds: this.#options.retryPeriodSeconds,
      onStartedLeading: () => {
        this.#log.info('became leader', { lease: `${this.#options.leaseNamespace}/${this.#options.leaseName}`, identity: this.#elector?.identity });
        this.#startControllers();
      },
      onStoppedLeading: () => {
        this.#log.warn('lost the leader Lease: stopping', { identity: this.#elector?.identity });
        if (this.#stopping) return;
        void this.#stopControllers().then(() => this.#finish('lost-lease'));
      },
      onError: (err) => this.#log.warn('leader election', { error: err }),
    });
    this.#log.info('waiting for the leader Lease', { lease: `${this.#options.leaseNamespace}/${this.#options.leaseName}`, identity: this.#elector.identity });
    this.#elector.start();
  }

  async stop(): Promise<void> {
    this.#stopping = true;
    await this.#stopControllers();
    await this.#elector?.stop();
    await new Promise<void>((resolve) => (this.#metricsServer ? this.#metricsServer.close(() => resolve()) : resolve()));
    this.#metricsServer?.closeAllConnections();
    this.client.close();
    this.#finish('stopped');
  }

  #startControllers(): void {
    if (this.#controllers) return;
    this.metrics.leader.set(1);
    const { namespace, concurrency } = this.#options;
    const informer = <T extends KubeObject>(type: ResourceType, labelSelector?: string): Informer<T> =>
      new Informer<T>(this.client, collectionPath(type, namespace), {
        labelSelector,
        onRelist: (reason) => this.metrics.relists.inc({ resource: type.plural, reason }),
        onError: (err) => this.#log.warn('watch failed; retrying', { resource: type.plural, error: err }),
      });
    const owned = `${LABELS.managedBy}=${MANAGED_BY}`;
    const servers = informer<NereidServer>(RESOURCES.nereidServer);
    const models = informer<NereidModel>(RESOURCES.nereidModel);
    const pods = informer<Pod>(RESOURCES.pod, `${owned},${LABELS.component}=server`);
    const hpas = informer<KubeObject>(RESOURCES.hpa, owned);
    const ownedInformers = [...[RESOURCES.deployment, RESOURCES.service, RESOURCES.pdb].map((type) => informer<KubeObject>(type, owned)), hpas];

    const queue = (kind: string, handler: (key: string) => Promise<ReconcileResult>): WorkQueue => {
      const q: WorkQueue = new WorkQueue(handler, {
        concurrency,
        paused: true,
        onResult: (key, result, seconds, error) => {
          this.metrics.reconciles.inc({ kind, result });
          this.metrics.durations.observe({ kind }, seconds);
          if (error) this.#log.warn('reconcile failed; retrying', { kind, key, error });
          else this.#log.debug('reconciled', { kind, key, result });
        },
      });
      this.metrics.depthSources.set(kind, () => q.depth);
      return q;
    };
    const ctx: ControllerContext = {
      client: this.client,
      servers,
      models,
      pods,
      hpas,
      events: new EventRecorder(this.client, this.#elector?.identity ?? 'nereid-operator', (err) => this.#log.warn('event not recorded', { error: err })),
      log: this.#log,
      resyncMs: (this.#options.resyncSeconds ?? 60) * 1000,
      serverImage: this.#options.serverImage ?? DEFAULT_IMAGE,
      prometheus: this.#options.prometheusUrl ? new PrometheusClient(this.#options.prometheusUrl) : undefined,
      serviceMonitorsServed: () => this.#serviceMonitorsServed(),
      enqueueGate: (key) => gateQueue.add(key),
      enqueueServer: (key) => serverQueue.add(key),
    };
    const serverQueue = queue('NereidServer', (key) => reconcileServer(ctx, key));
    const modelQueue = queue('NereidModel', (key) => reconcileModel(ctx, key));
    const gateQueue = queue('ModelsReadyGate', (key) => reconcileGate(ctx, key));
    const autoscalerQueue = queue('Autoscaler', (key) => reconcileAutoscaling(ctx, key));
    const modelsOf = (namespace: string | undefined, server: string): NereidModel[] =>
      models.list((m) => m.metadata.namespace === namespace && m.spec.server === server);

    servers.on((event, server, previous) => {
      if (!previous || specChanged(previous, server)) {
        serverQueue.add(keyOf(server));
        if (server.spec.autoscaling?.mode === 'operator') autoscalerQueue.add(keyOf(server));
      }
      if (event !== 'update') for (const m of modelsOf(server.metadata.namespace, server.metadata.name ?? '')) modelQueue.add(keyOf(m));
    });
    models.on((_event, model, previous) => {
      if (!previous || specChanged(previous, model)) modelQueue.add(keyOf(model));
      for (const m of previous && previous.spec.server !== model.spec.server ? [previous, model] : [model]) {
        const serverKey = `${m.metadata.namespace}/${m.spec.server}`;
        gateQueue.add(serverKey);
        serverQueue.add(serverKey);
      }
    });
    pods.on((event, pod, previous) => {
      const server = pod.metadata.labels?.[LABELS.instance];
      if (!server) return;
      gateQueue.add(`${pod.metadata.namespace}/${server}`);
      const changed =
        event !== 'update' ||
        !previous ||
        containersReady(previous) !== containersReady(pod) ||
        previous.status?.podIP !== pod.status?.podIP ||
        Boolean(previous.metadata.deletionTimestamp) !== Boolean(pod.metadata.deletionTimestamp);
      if (changed) for (const m of modelsOf(pod.metadata.namespace, server)) modelQueue.add(keyOf(m));
    });
    for (const inf of ownedInformers) {
      inf.on((_event, object) => {
        const owner = object.metadata.ownerReferences?.find((r) => r.controller && r.kind === 'NereidServer');
        if (owner) serverQueue.add(`${object.metadata.namespace}/${owner.name}`);
      });
    }
    const informers = [servers, models, pods, ...ownedInformers] as Informer<KubeObject>[];
    this.#controllers = { informers, queues: [serverQueue, modelQueue, gateQueue, autoscalerQueue] };
    for (const inf of informers) inf.start();
    void Promise.all(informers.map((inf) => inf.synced())).then(() => {
      if (this.#controllers?.informers !== informers) return;
      this.#synced = true;
      for (const q of this.#controllers.queues) q.resume();
      this.#log.info('caches synced', { servers: servers.list().length, models: models.list().length, pods: pods.list().length });
    });
  }

  async #stopControllers(): Promise<void> {
    const controllers = this.#controllers;
    if (!controllers) return;
    this.#controllers = undefined;
    this.#synced = false;
    this.metrics.leader.set(0);
    await Promise.all([...controllers.queues.map((q) => q.shutdown()), ...controllers.informers.map((i) => i.stop())]);
  }

  async #serviceMonitorsServed(): Promise<boolean> {
    const now = Date.now();
    if (this.#monitorCheck && now - this.#monitorCheck.at < 60_000) return this.#monitorCheck.served;
    let served = false;
    try {
      const list = await this.client.get<KubeObject & { resources?: { name: string }[] }>('/apis/monitoring.coreos.com/v1');
      served = list.resources?.some((r) => r.name === 'servicemonitors') ?? false;
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    this.#monitorCheck = { at: now, served };
    return served;
  }
}
