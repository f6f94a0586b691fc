/** The nereid.dev/v1alpha1 resources as the operator reads them (the CRDs' schemas are in deploy/helm/nereid/crds). */
import type { BehaviorSpec, MetricName } from './autoscaler.js';
import type { KubeObject } from './kube-client.js';

export const API_GROUP = 'nereid.dev';
export const API_VERSION = 'v1alpha1';
export const GROUP_VERSION = `${API_GROUP}/${API_VERSION}`;

export interface Condition {
  type: string;
  status: 'True' | 'False' | 'Unknown';
  reason: string;
  message: string;
  lastTransitionTime: string;
  observedGeneration?: number;
}

export interface NereidServerSpec {
  image?: string;
  imagePullPolicy?: string;
  replicas?: number;
  minReplicas?: number;
  maxReplicas?: number;
  resources?: Record<string, unknown>;
  ports?: { http?: number; grpc?: number; metrics?: number };
  serverArgs?: string[];
  modelRepository: {
    uri?: string;
    s3?: { endpoint?: string; region?: string; credentialsSecret?: string };
    volume?: Record<string, unknown>;
  };
  pollSeconds?: number;
  drainSeconds?: number;
  terminationGracePeriodSeconds?: number;
  podDisruptionBudget?: { minAvailable?: number | string; maxUnavailable?: number | string };
  podTemplate?: { metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }; spec?: Record<string, unknown> };
  serviceType?: string;
  autoscaling?: AutoscalingSpec;
}

/** spec.autoscaling: replicas between minReplicas and maxReplicas from a per-replica metric. */
export interface AutoscalingSpec {
  /** operator: the operator queries Prometheus and scales; hpa: an autoscaling/v2 HorizontalPodAutoscaler does. */
  mode: 'operator' | 'hpa';
  metric: MetricName;
  /** The average per replica aimed at (a quantity). */
  target: string | number;
  /** Mode operator: seconds between decisions (default 15). */
  intervalSeconds?: number;
  /** Mode operator: the rate window of the queries in seconds (default 60). */
  windowSeconds?: number;
  /** Relative deviation from the target that changes nothing (default 0.1). */
  tolerance?: number;
  behavior?: BehaviorSpec;
}

/** One pod's sample in a recorded decision. */
export interface AutoscalingPodSample {
  pod: string;
  ready: boolean;
  pending?: boolean;
  /** Absent when Prometheus had no sample for the pod. */
  value?: number;
}

/** A decision of mode operator as status.autoscaling.lastDecision records it (its inputs and outcome). */
export interface AutoscalingDecision {
  /** Sequence number: the decisions made so far for this NereidServer. */
  number: number;
  /** RFC 3339 with milliseconds: the `now` of the decision. */
  time: string;
  currentReplicas: number;
  pods?: AutoscalingPodSample[];
  average?: number;
  ratio?: number;
  /** The replica calculation's count, before stabilisation and rate limits. */
  recommendation?: number;
  stabilizedReplicas?: number;
  desiredReplicas: number;
  reason: string;
  ableToScale?: string;
  limitedBy?: string;
}

export interface NereidServerAutoscalingStatus {
  mode: 'operator' | 'hpa';
  metric: MetricName;
  target: string;
  currentReplicas?: number;
  desiredReplicas?: number;
  /** The metric's current average per replica. */
  currentAverage?: number;
  lastScaleTime?: string;
  /** Mode hpa: the HorizontalPodAutoscaler's name. */
  hpa?: string;
  lastDecision?: AutoscalingDecision;
  /** Mode operator: the history later decisions use (HPA's recommendations and scale events). */
  recommendations?: { time: string; replicas: number }[];
  scaleUpEvents?: { time: string; change: number }[];
  scaleDownEvents?: { time: string; change: number }[];
  /** AbleToScale, ScalingActive and ScalingLimited, as an HPA reports them. */
  conditions?: Condition[];
}

export interface NereidServerStatus {
  observedGeneration?: number;
  replicas?: number;
  readyReplicas?: number;
  conditions?: Condition[];
  models?: { name: string; readyReplicas: number }[];
  autoscaling?: NereidServerAutoscalingStatus;
}

export interface NereidServer extends KubeObject {
  spec: NereidServerSpec;
  status?: NereidServerStatus;
}

export interface NereidModelSpec {
  server: string;
  modelName?: string;
  source: {
    repository?: { path?: string };
    configMap?: { name: string };
    uri?: string;
  };
  /** Versions to serve: the config's version_policy with `config`, else the load parameter version_policy. */
  versions?: number[];
  config?: Record<string, unknown>;
  canary?: CanarySpec;
}

/** A canary rollout of a new version of the model (docs/kubernetes.md, Canary rollouts). */
export interface CanarySpec {
  /** The new version. The stable one is versions[0] or, without versions, the highest served before. */
  version: number;
  /** The canary's share of unversioned requests at each step, in percent: ascending, the last 100. */
  steps?: number[];
  /** Seconds at a step, once every pod serves its weights, before the step's analysis. */
  intervalSeconds?: number;
  analysis?: {
    /** Largest failed/all ratio of the canary's requests in a step that passes. */
    maxErrorRate?: number;
    /** Largest canary p99 / stable p99 that passes; unset: latency is not judged. */
    maxLatencyRatio?: number;
    /** Canary requests a step needs before it is judged; with fewer the step is extended. */
    minRequests?: number;
  };
}

/**
 * Where a canary stands. Progressing: at `step`, serving `weight` percent of unversioned requests
 * on the canary. RollingBack: the canary's weight is 0, then RolledBack: only the stable version
 * is served. Promoting, then Promoted: only the canary version is served.
 */
export type CanaryPhase = 'Progressing' | 'RollingBack' | 'RolledBack' | 'Promoting' | 'Promoted';

/** One analysis of a step, from Prometheus. */
export interface CanaryAnalysis {
  time: string;
  step: number;
  weight: number;
  /** The analysed window: from the step's start to `time`. */
  windowSeconds: number;
  canaryRequests: number;
  canaryFailures: number;
  /** canaryFailures / canaryRequests; absent without canary requests. */
  errorRate?: number;
  stableRequests: number;
  stableFailures: number;
  canaryP99Us?: number;
  stableP99Us?: number;
  latencyRatio?: number;
  result: 'Passed' | 'Failed' | 'Inconclusive';
  message: string;
}

export interface CanaryTransition {
  time: string;
  phase: CanaryPhase;
  step: number;
  weight: number;
  reason: string;
  message: string;
}

export interface CanaryStatus {
  version: number;
  stableVersion: number;
  phase: CanaryPhase;
  /** Index into spec.canary.steps. */
  step: number;
  /** The canary's current weight in percent (0 while rolling back). */
  weight: number;
  /** When every ready pod served this step's weights; the step's interval counts from here. */
  stepStartTime?: string;
  /** The last analysis. */
  analysis?: CanaryAnalysis;
  /** The stable p99 (µs) of the last analysis that had stable requests: the baseline of steps without. */
  stableP99Us?: number;
  message: string;
  /** The transitions so far, oldest first (at most 20). */
  transitions: CanaryTransition[];
}

/** What the operator applied to one pod, and what the pod's repository index says. */
export interface ModelPodStatus {
  pod: string;
  uid: string;
  /** The NereidModel generation (and ConfigMap resourceVersion) last loaded on this pod. */
  generation: number;
  sourceVersion?: string;
  state: string;
  reason?: string;
  /** The error of the last load on this pod, when it failed (the pod may still serve an earlier copy). */
  loadError?: string;
  lastLoadTime?: string;
  /** During a canary: the versions loaded on the pod and their weights (version_weights). */
  versions?: number[];
  versionWeights?: Record<string, number>;
}

export interface NereidModelStatus {
  observedGeneration?: number;
  replicas?: number;
  readyReplicas?: number;
  /** `readyReplicas/replicas`, for kubectl's Ready column. */
  ready?: string;
  conditions?: Condition[];
  pods?: ModelPodStatus[];
  canary?: CanaryStatus;
}

export interface NereidModel extends KubeObject {
  spec: NereidModelSpec;
  status?: NereidModelStatus;
}

export const LABELS = {
  name: 'app.kubernetes.io/name',
  instance: 'app.kubernetes.io/instance',
  managedBy: 'app.kubernetes.io/managed-by',
  component: 'app.kubernetes.io/component',
} as const;

export const MANAGED_BY = 'nereid-operator';
export const MODELS_READY_CONDITION = 'nereid.dev/models-ready';
/** The NereidModel condition that reports a canary rollout. */
export const CANARY_CONDITION = 'Canary';
export const MODEL_FINALIZER = 'nereid.dev/unload';
/** The server image when neither the NereidServer nor the operator's --server-image names one. */
export const DEFAULT_IMAGE = 'localhost/nereid:0.1.0';

/**
 * Sets (or replaces) the condition of `type` in `conditions`, keeping lastTransitionTime when the
 * status does not change. Returns true when the status changed (a transition worth an Event).
 */
export function setCondition(
  conditions: Condition[],
  next: Omit<Condition, 'lastTransitionTime'>,
  now: Date = new Date(),
): boolean {
  const index = conditions.findIndex((c) => c.type === next.type);
  const old = index >= 0 ? conditions[index] : undefined;
  const changed = old?.status !== next.status;
  const condition: Condition = {
    ...next,
    lastTransitionTime: changed || !old ? now.toISOString().replace(/\.\d{3}Z$/, 'Z') : old.lastTransitionTime,
  };
  if (index >= 0) conditions[index] = condition;
  else conditions.push(condition);
  return changed;
}

export const getCondition = (conditions: Condition[] | undefined, type: string): Condition | undefined =>
  conditions?.find((c) => c.type === type);
