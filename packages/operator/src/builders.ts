/**
 * Pure builders: the objects a NereidServer owns (Deployment, Service, PodDisruptionBudget,
 * ServiceMonitor, HorizontalPodAutoscaler), as server-side apply bodies. Same input, same output: the operator applies
 * them on every reconcile and the API server reports no change when nothing drifted.
 */
import type { KubeObject, OwnerReference } from './kube-client.js';
import type { NereidServer } from './types.js';
import { DEFAULT_IMAGE, GROUP_VERSION, LABELS, MANAGED_BY, MODELS_READY_CONDITION } from './types.js';

export const DEFAULT_PORTS = { http: 8000, grpc: 8001, metrics: 8002 } as const;
export const MODELS_MOUNT = '/models';
export const DEFAULT_DRAIN_SECONDS = 5;

/** Labels that select a server's pods: stable across every update of the NereidServer. */
export function selectorLabels(server: NereidServer): Record<string, string> {
  return { [LABELS.name]: 'nereid', [LABELS.instance]: server.metadata.name ?? '', [LABELS.component]: 'server' };
}

export function commonLabels(server: NereidServer): Record<string, string> {
  return { ...selectorLabels(server), [LABELS.managedBy]: MANAGED_BY };
}

export function ownerReference(server: NereidServer): OwnerReference {
  return {
    apiVersion: GROUP_VERSION,
    kind: 'NereidServer',
    name: server.metadata.name ?? '',
    uid: server.metadata.uid ?? '',
    controller: true,
    blockOwnerDeletion: true,
  };
}

function meta(server: NereidServer, annotations?: Record<string, string>): KubeObject['metadata'] {
  return {
    name: server.metadata.name,
    namespace: server.metadata.namespace,
    labels: commonLabels(server),
    ...(annotations ? { annotations } : {}),
    ownerReferences: [ownerReference(server)],
  };
}

export function portsOf(server: NereidServer): { http: number; grpc: number; metrics: number } {
  return { ...DEFAULT_PORTS, ...server.spec.ports };
}

/** The repository URI the server is started with: the spec's, or /models for a volume. */
export function repositoryUri(server: NereidServer): string {
  const { uri, volume } = server.spec.modelRepository;
  if (uri) return uri;
  return volume ? MODELS_MOUNT : '';
}

/** The store poll interval: the spec's, else 10 s for an s3:// repository and 0 (off) otherwise. */
export function pollSeconds(server: NereidServer): number {
  return server.spec.pollSeconds ?? (repositoryUri(server).startsWith('s3://') ? 10 : 0);
}

/** `nereid serve` arguments of a server's pods (the contract's pod shape). */
export function serverArgs(server: NereidServer): string[] {
  const ports = portsOf(server);
  const args = [
    'serve',
    `--model-repository=${repositoryUri(server)}`,
    '--model-control-mode=explicit',
    `--repository-poll-secs=${pollSeconds(server)}`,
    `--http-port=${ports.http}`,
    `--grpc-port=${ports.grpc}`,
    `--metrics-port=${ports.metrics}`,
    // Latency histograms by model and version: the canary analysis's p99 (serverArgs may turn them off).
    '--metrics-config=histogram_latencies=true',
  ];
  return [...args, ...(server.spec.serverArgs ?? [])];
}

export function prometheusAnnotations(server: NereidServer): Record<string, string> {
  return { 'prometheus.io/scrape': 'true', 'prometheus.io/port': String(portsOf(server).metrics), 'prometheus.io/path': '/metrics' };
}

type Json = Record<string, unknown>;

function s3Env(server: NereidServer): Json[] {
  const s3 = server.spec.modelRepository.s3;
  if (!s3) return [];
  const env: Json[] = [];
  if (s3.credentialsSecret) {
    for (const [key, optional] of [
      ['AWS_ACCESS_KEY_ID', false],
      ['AWS_SECRET_ACCESS_KEY', false],
      ['AWS_SESSION_TOKEN', true],
    ] as const) {
      env.push({ name: key, valueFrom: { secretKeyRef: { name: s3.credentialsSecret, key, ...(optional ? { optional: true } : {}) } } });
    }
  }
  if (s3.region) env.push({ name: 'AWS_REGION', value: s3.region });
  if (s3.endpoint) env.push({ name: 'AWS_ENDPOINT_URL_S3', value: s3.endpoint });
  return env;
}

/** The generated pod spec, before the user's podTemplate.spec is merged over it. */
export function basePodSpec(server: NereidServer, defaultImage: string = DEFAULT_IMAGE): Json {
  const ports = portsOf(server);
  const drain = server.spec.drainSeconds ?? DEFAULT_DRAIN_SECONDS;
  const volume = server.spec.modelRepository.volume;
  const container: Json = {
    name: 'nereid',
    image: server.spec.image ?? defaultImage,
    ...(server.spec.imagePullPolicy ? { imagePullPolicy: server.spec.imagePullPolicy } : {}),
    command: ['nereid'],
    args: serverArgs(server),
    ports: [
      { name: 'http', containerPort: ports.http, protocol: 'TCP' },
      { name: 'grpc', containerPort: ports.grpc, protocol: 'TCP' },
      { name: 'metrics', containerPort: ports.metrics, protocol: 'TCP' },
    ],
    env: s3Env(server),
    ...(server.spec.resources ? { resources: server.spec.resources } : {}),
    readinessProbe: { httpGet: { path: '/v2/health/ready', port: 'http' }, periodSeconds: 2, failureThreshold: 2, timeoutSeconds: 2 },
    livenessProbe: { httpGet: { path: '/v2/health/live', port: 'http' }, periodSeconds: 10, failureThreshold: 3, timeoutSeconds: 2 },
    // Endpoints drop a terminating pod while it still serves; SIGTERM comes after the drain.
    lifecycle: { preStop: { sleep: { seconds: drain } } },
    ...(volume ? { volumeMounts: [{ name: 'model-repository', mountPath: MODELS_MOUNT, readOnly: true }] } : {}),
  };
  return {
    containers: [container],
    readinessGates: [{ conditionType: MODELS_READY_CONDITION }],
    terminationGracePeriodSeconds: server.spec.terminationGracePeriodSeconds ?? drain + 30,
    ...(volume ? { volumes: [{ name: 'model-repository', ...volume }] } : {}),
  };
}

const isObject = (value: unknown): value is Json => typeof value === 'object' && value !== null && !Array.isArray(value);
const named = (value: unknown): value is Json & { name: string } => isObject(value) && typeof value.name === 'string';

/**
 * Merges `over` onto `base` the way users expect of a pod template override: objects merge
 * field by field, lists of named items (containers, env, volumes, volumeMounts, ports) merge by
 * name (a new name is appended), other lists and scalars are replaced.
 */
export function mergeOver(base: unknown, over: unknown): unknown {
  if (over === undefined) return base;
  if (isObject(base) && isObject(over)) {
    const out: Json = { ...base };
    for (const [key, value] of Object.entries(over)) out[key] = mergeOver(base[key], value);
    return out;
  }
  if (Array.isArray(base) && Array.isArray(over) && over.every(named) && base.every(named)) {
    const out = base.map((item) => {
      const match = over.find((o) => o.name === item.name);
      return match ? mergeOver(item, match) : item;
    });
    for (const item of over) if (!base.some((b) => b.name === item.name)) out.push(item);
    return out;
  }
  return over;
}

/**
 * The Deployment; `defaultImage` is used when the spec names no image (the operator's --server-image).
 * With spec.autoscaling the body has no replicas: the autoscaler (the operator's, or the HPA)
 * owns that field, and an apply that carried it would take it back.
 */
export function buildDeployment(server: NereidServer, defaultImage: string = DEFAULT_IMAGE): KubeObject {
  const template = server.spec.podTemplate ?? {};
  const podLabels = { ...template.metadata?.labels, ...commonLabels(server) };
  const podAnnotations = { ...prometheusAnnotations(server), ...template.metadata?.annotations };
  return {
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: meta(server),
    spec: {
      ...(server.spec.autoscaling ? {} : { replicas: server.spec.replicas ?? 1 }),
      selector: { matchLabels: selectorLabels(server) },
      strategy: { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } },
      template: {
        metadata: { labels: podLabels, annotations: podAnnotations },
        spec: mergeOver(basePodSpec(server, defaultImage), template.spec),
      },
    },
  };
}

export function buildService(server: NereidServer): KubeObject {
  const ports = portsOf(server);
  return {
    apiVersion: 'v1',
    kind: 'Service',
    metadata: meta(server, prometheusAnnotations(server)),
    spec: {
      type: server.spec.serviceType ?? 'ClusterIP',
      selector: selectorLabels(server),
      ports: [
        { name: 'http', port: ports.http, targetPort: 'http', protocol: 'TCP' },
        { name: 'grpc', port: ports.grpc, targetPort: 'grpc', protocol: 'TCP', appProtocol: 'grpc' },
        { name: 'metrics', port: ports.metrics, targetPort: 'metrics', protocol: 'TCP' },
      ],
    },
  };
}

export function buildPodDisruptionBudget(server: NereidServer): KubeObject {
  const pdb = server.spec.podDisruptionBudget;
  const budget = pdb?.minAvailable !== undefined ? { minAvailable: pdb.minAvailable } : { maxUnavailable: pdb?.maxUnavailable ?? 1 };
  return {
    apiVersion: 'policy/v1',
    kind: 'PodDisruptionBudget',
    metadata: meta(server),
    spec: { ...budget, selector: { matchLabels: selectorLabels(server) } },
  };
}

export function buildServiceMonitor(server: NereidServer): KubeObject {
  return {
    apiVersion: 'monitoring.coreos.com/v1',
    kind: 'ServiceMonitor',
    metadata: meta(server),
    spec: {
      selector: { matchLabels: selectorLabels(server) },
      endpoints: [{ port: 'metrics', path: '/metrics', interval: '15s' }],
    },
  };
}

/** The replica count an autoscaled Deployment starts with: spec.replicas within [minReplicas, maxReplicas]. */
export function initialReplicas(server: NereidServer): number {
  const { replicas = 1, minReplicas = 1, maxReplicas } = server.spec;
  return Math.min(Math.max(replicas, minReplicas), maxReplicas ?? Number.MAX_SAFE_INTEGER);
}

/** The Pods metric names a prometheus-adapter serves for each autoscaling metric (deploy/helm/nereid/files/prometheus-adapter-rules.yaml). */
export const HPA_METRIC_NAMES = {
  inferenceRate: 'nereid_inference_rate',
  queueTime: 'nereid_queue_time_us',
  pendingRequests: 'nereid_pending_requests',
} as const;

/**
 * The autoscaling/v2 HorizontalPodAutoscaler of mode hpa: the Deployment between minReplicas and
 * maxReplicas on one Pods metric with an AverageValue target, behavior as given (the API server
 * fills in HPA's defaults), tolerance as both directions' tolerance when set.
 */
export function buildHorizontalPodAutoscaler(server: NereidServer): KubeObject {
  const autoscaling = server.spec.autoscaling;
  if (!autoscaling) throw new Error('buildHorizontalPodAutoscaler: the NereidServer has no spec.autoscaling');
  const behavior: Record<string, unknown> = {};
  for (const direction of ['scaleUp', 'scaleDown'] as const) {
    const rules = { ...autoscaling.behavior?.[direction], ...(autoscaling.tolerance !== undefined ? { tolerance: String(autoscaling.tolerance) } : {}) };
    if (Object.keys(rules).length > 0) behavior[direction] = rules;
  }
  return {
    apiVersion: 'autoscaling/v2',
    kind: 'HorizontalPodAutoscaler',
    metadata: meta(server),
    spec: {
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: server.metadata.name },
      minReplicas: server.spec.minReplicas ?? 1,
      maxReplicas: server.spec.maxReplicas,
      metrics: [
        {
          type: 'Pods',
          pods: { metric: { name: HPA_METRIC_NAMES[autoscaling.metric] }, target: { type: 'AverageValue', averageValue: String(autoscaling.target) } },
        },
      ],
      ...(Object.keys(behavior).length > 0 ? { behavior } : {}),
    },
  };
}
