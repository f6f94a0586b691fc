/**
 * @nereid/operator: the Kubernetes controller for NereidServer and NereidModel resources
 * (nereid.dev/v1alpha1). `runOperator(argv)` is the command line (`nereid operator`,
 * `nereid-operator`); the rest is exported for tests and embedding.
 */
export { API_GROUP, API_VERSION, GROUP_VERSION, LABELS, MANAGED_BY, MODELS_READY_CONDITION, MODEL_FINALIZER, setCondition, getCondition } from './types.js';
export type {
  AutoscalingDecision,
  AutoscalingPodSample,
  AutoscalingSpec,
  Condition,
  NereidModel,
  NereidModelSpec,
  NereidModelStatus,
  NereidServer,
  NereidServerAutoscalingStatus,
  NereidServerSpec,
  NereidServerStatus,
  ModelPodStatus,
} from './types.js';
export { DEFAULT_BEHAVIOR, DEFAULT_TOLERANCE, decide, emptyHistory, metricReplicas, parseQuantity, resolveBehavior, scaleDownLimit, scaleUpLimit } from './autoscaler.js';
export type { AutoscalerHistory, Behavior, BehaviorSpec, Decision, DecisionInput, MetricName, PodSample, ScaleEvent, ScalingPolicy, ScalingRules, TimedRecommendation } from './autoscaler.js';
export { DEFAULT_INTERVAL_SECONDS, DEFAULT_WINDOW_SECONDS, historyOf, podLabelMatchers, podMetricQuery } from './autoscaling-controller.js';
export { REPLICAS_HANDOVER_MANAGER } from './server-controller.js';
export { PrometheusClient } from './prometheus.js';
export type { CanaryAnalysis, CanaryPhase, CanarySpec, CanaryStatus, CanaryTransition } from './types.js';
export { canaryPlan, analysisQueries, judgeStep, servingOf } from './canary.js';
export type { CanaryPlan, Serving } from './canary.js';
export { runOperator, parseOperatorArgs, loadKubeConfig, OPERATOR_HELP } from './cli.js';
export type { ParsedOperatorArgs } from './cli.js';
export { Operator } from './operator.js';
export type { OperatorOptions, StopReason } from './operator.js';
export { KubeClient, KubeApiError, RESOURCES, collectionPath, objectPath, isConflict, isGone, isNotFound, FIELD_MANAGER } from './kube-client.js';
export type { KubeObject, KubeList, ObjectMeta, OwnerReference, ResourceType, WatchEvent } from './kube-client.js';
export { Informer } from './informer.js';
export type { InformerOptions, InformerEvent } from './informer.js';
export { WorkQueue, Backoff, sleep } from './work-queue.js';
export type { ReconcileResult, WorkQueueOptions } from './work-queue.js';
export { LeaderElector } from './leader-election.js';
export type { LeaderElectionOptions } from './leader-election.js';
export { updateStatus, setFinalizers, EventRecorder } from './status.js';
export type { StatusUpdateResult } from './status.js';
export * from './builders.js';
export { RepositoryApi, modelState } from './repository-api.js';
export { configMapKeyToPath } from './model-controller.js';
export { createLogger } from './log.js';
export type { Logger, LogLevel } from './log.js';
