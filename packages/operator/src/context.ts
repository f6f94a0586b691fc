/** What the controllers share: the API client, the informers' caches, Events and logging. */
import type { Informer } from './informer.js';
import type { KubeClient, KubeObject } from './kube-client.js';
import type { Logger } from './log.js';
import type { PrometheusClient } from './prometheus.js';
import type { EventRecorder } from './status.js';
import type { NereidModel, NereidServer } from './types.js';

export interface PodCondition {
  type: string;
  status: string;
  reason?: string;
  message?: string;
  lastTransitionTime?: string;
}

export interface Pod extends KubeObject {
  spec: { containers: { name: string; ports?: { name?: string; containerPort: number }[] }[] };
  status?: { podIP?: string; phase?: string; conditions?: PodCondition[] };
}

export interface ControllerContext {
  client: KubeClient;
  servers: Informer<NereidServer>;
  models: Informer<NereidModel>;
  pods: Informer<Pod>;
  /** HorizontalPodAutoscalers the operator made (autoscaling mode hpa). */
  hpas: Informer<KubeObject>;
  events: EventRecorder;
  log: Logger;
  /** Interval of the periodic re-check of settled objects (ConfigMap sources, restarted pods). */
  resyncMs: number;
  /** The server image of NereidServers that name none. */
  serverImage: string;
  /** The Prometheus of `--prometheus-url`; undefined when none is configured. */
  prometheus: PrometheusClient | undefined;
  /** Whether monitoring.coreos.com/v1 ServiceMonitor is served (discovery, cached briefly). */
  serviceMonitorsServed(): Promise<boolean>;
  /** Re-checks the models-ready readiness gate of a server's pods (key `namespace/server`). */
  enqueueGate(key: string): void;
  /** Re-reconciles a NereidServer (key `namespace/name`), e.g. after its models changed. */
  enqueueServer(key: string): void;
}
