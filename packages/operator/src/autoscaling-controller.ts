/**
 * Autoscaling mode `operator`: every intervalSeconds the operator reads the chosen metric per
 * server pod from Prometheus, runs HPA's algorithm (autoscaler.ts) and sets the Deployment's
 * replicas through its scale subresource, as the horizontal controller does. Each decision, with
 * its inputs, goes into status.autoscaling (lastDecision, and the recommendation and scale-event
 * history the next decision needs, so that a restarted or newly elected operator continues the
 * windows); each rescale and each change of ScalingActive is an Event.
 *
 * The queries are the ones deploy/helm/nereid/files/prometheus-adapter-rules.yaml gives a
 * prometheus-adapter for mode hpa (`podMetricQuery` with the adapter's templates filled in), so
 * both modes see the same numbers.
 */
import type { ControllerContext, Pod } from './context.js';
import type { AutoscalerHistory, Decision, MetricName, PodSample } from './autoscaler.js';
import { DEFAULT_TOLERANCE, decide, parseQuantity, resolveBehavior } from './autoscaler.js';
import type { KubeObject } from './kube-client.js';
import { RESOURCES, isNotFound, objectPath } from './kube-client.js';
import { serverPods } from './model-controller.js';
import { updateStatus } from './status.js';
import type { Condition, NereidServer, NereidServerAutoscalingStatus } from './types.js';
import { setCondition } from './types.js';
import type { ReconcileResult } from './work-queue.js';

export const DEFAULT_INTERVAL_SECONDS = 15;
export const DEFAULT_WINDOW_SECONDS = 60;

/**
 * The PromQL of a metric per pod, in prometheus-adapter's terms: `labelMatchers` selects the
 * series (`namespace="ns",pod=~"a|b"`), `groupBy` is the label that names the pod.
 * - inferenceRate: inference requests per second (successes and failures, every model);
 * - queueTime: microseconds queued per successful request (0 without requests);
 * - pendingRequests: requests waiting for an instance, averaged over the window.
 */
export function podMetricQuery(metric: MetricName, labelMatchers: string, groupBy: string, windowSeconds: number): string {
  const w = `${windowSeconds}s`;
  switch (metric) {
    case 'inferenceRate':
      return `sum by (${groupBy}) (rate({__name__=~"nv_inference_request_success|nv_inference_request_failure",${labelMatchers}}[${w}]))`;
    case 'queueTime':
      return (
        `sum by (${groupBy}) (rate(nv_inference_queue_duration_us{${labelMatchers}}[${w}]))` +
        ` / clamp_min(sum by (${groupBy}) (rate(nv_inference_request_success{${labelMatchers}}[${w}])), 0.001)`
      );
    case 'pendingRequests':
      return `sum by (${groupBy}) (avg_over_time(nv_inference_pending_request_count{${labelMatchers}}[${w}]))`;
  }
}

/** prometheus-adapter's LabelMatchers for pods of a namespace: `namespace="ns",pod=~"a|b"`. */
export function podLabelMatchers(namespace: string, pods: string[]): string {
  const alternatives = pods.map((p) => p.replace(/[.\\]/g, (c) => `\\\\${c}`)).join('|');
  return `namespace=${JSON.stringify(namespace)},pod=~"${alternatives}"`;
}

const isoMs = (ms: number): string => new Date(ms).toISOString();
const isoS = (ms: number): string => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** The history of status.autoscaling as the algorithm takes it. */
export function historyOf(status: NereidServerAutoscalingStatus | undefined): AutoscalerHistory {
  return {
    recommendations: (status?.recommendations ?? []).map((r) => ({ time: Date.parse(r.time), replicas: r.replicas })),
    scaleUpEvents: (status?.scaleUpEvents ?? []).map((e) => ({ time: Date.parse(e.time), change: e.change })),
    scaleDownEvents: (status?.scaleDownEvents ?? []).map((e) => ({ time: Date.parse(e.time), change: e.change })),
  };
}

const podReady = (p: Pod): boolean => p.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') === true;

interface Scale extends KubeObject {
  spec: { replicas?: number };
}

export async function reconcileAutoscaling(ctx: ControllerContext, key: string): Promise<ReconcileResult> {
  const [namespace, name] = key.split('/');
  const cached = ctx.servers.get(namespace, name);
  if (!cached || cached.metadata.deletionTimestamp || cached.spec.autoscaling?.mode !== 'operator') return;
  // The informer may lag the last status write: decisions build on the stored history.
  const server = await ctx.client.getOptional<NereidServer>(objectPath(RESOURCES.nereidServer, namespace, name));
  const autoscaling = server?.spec.autoscaling;
  if (!server || server.metadata.deletionTimestamp || autoscaling?.mode !== 'operator') return;
  const intervalMs = (autoscaling.intervalSeconds ?? DEFAULT_INTERVAL_SECONDS) * 1000;
  const previous = server.status?.autoscaling?.mode === 'operator' ? server.status.autoscaling : undefined;
  const now = Date.now();
  const last = previous?.lastDecision ? Date.parse(previous.lastDecision.time) : undefined;
  // Spec and pod events also queue the key: decisions stay intervalSeconds apart.
  if (last !== undefined && now - last < intervalMs - 20 && now >= last) return { requeueAfterMs: intervalMs - (now - last) };

  const scalePath = objectPath(RESOURCES.deployment, namespace, name, 'scale');
  let scale: Scale;
  try {
    scale = await ctx.client.get<Scale>(scalePath);
  } catch (err) {
    if (isNotFound(err)) return { requeueAfterMs: 1000 }; // the server reconcile creates the Deployment
    throw err;
  }
  const currentReplicas = scale.spec.replicas ?? 0;
  const target = parseQuantity(autoscaling.target);
  const pods = serverPods(ctx, namespace, name).filter((p) => p.status?.phase !== 'Failed' && p.status?.phase !== 'Succeeded');

  let samples: PodSample[] | undefined;
  let failure: { reason: string; message: string } | undefined;
  if (target === undefined) {
    failure = { reason: 'InvalidTarget', message: `spec.autoscaling.target ${JSON.stringify(autoscaling.target)} is not a positive quantity (e.g. "20" or "500m")` };
  } else if (!ctx.prometheus) {
    failure = { reason: 'NoPrometheus', message: 'autoscaling mode operator reads Prometheus: start the operator with --prometheus-url' };
  } else if (pods.length > 0) {
    const query = podMetricQuery(
      autoscaling.metric,
      podLabelMatchers(namespace, pods.map((p) => p.metadata.name ?? '')),
      'pod',
      autoscaling.windowSeconds ?? DEFAULT_WINDOW_SECONDS,
    );
    try {
      const values = new Map((await ctx.prometheus.query(query)).map((s) => [s.metric.pod, s.value]));
      samples = pods.map((p) => {
        const value = values.get(p.metadata.name ?? '');
        const pending = p.status?.phase === 'Pending' || !p.status?.podIP;
        return { pod: p.metadata.name ?? '', ready: podReady(p), ...(pending ? { pending } : {}), ...(value !== undefined && Number.isFinite(value) ? { value } : {}) };
      });
    } catch (err) {
      failure = { reason: 'FailedGetPodsMetric', message: (err as Error).message };
    }
  } else {
    samples = [];
  }

  const decision = decide(
    {
      now,
      currentReplicas,
      minReplicas: server.spec.minReplicas ?? 1,
      maxReplicas: server.spec.maxReplicas ?? Math.max(currentReplicas, 1),
      target: target ?? 1,
      tolerance: autoscaling.tolerance ?? DEFAULT_TOLERANCE,
      behavior: resolveBehavior(autoscaling.behavior),
      pods: failure ? undefined : samples,
      metric: autoscaling.metric,
    },
    historyOf(previous),
  );

  if (decision.rescale) {
    await ctx.client.patch(scalePath, 'merge', { spec: { replicas: decision.desiredReplicas } });
    ctx.log.info('autoscaled', { server: key, from: currentReplicas, to: decision.desiredReplicas, reason: decision.reason });
  }

  const transitions: Condition[] = [];
  const result = await updateStatus<NereidServer>(ctx.client, RESOURCES.nereidServer, namespace, name, (latest) => {
    transitions.length = 0;
    const before = latest.status?.autoscaling?.mode === 'operator' ? latest.status.autoscaling : undefined;
    return { ...latest.status, autoscaling: nextStatus(server, before, decision, currentReplicas, samples, now, failure, transitions) };
  });
  if (result.object) {
    if (decision.rescale) {
      ctx.events.record(result.object, 'Normal', 'SuccessfulRescale', `New size: ${decision.desiredReplicas}; reason: ${decision.reason}`);
    } else if (decision.metricReplicas !== undefined && decision.metricReplicas !== currentReplicas) {
      // The metric asked for another size and a stabilisation window or a rate policy held it.
      const heldBy = decision.ableToScale && decision.ableToScale !== 'ReadyForNewScale' ? decision.ableToScale : (decision.limitedBy ?? 'policy');
      ctx.events.record(
        result.object,
        'Normal',
        'RescaleHeld',
        `Size stays ${currentReplicas} (the metric asks for ${decision.metricReplicas}); held by ${heldBy}: ${decision.reason}`,
      );
    }
    for (const c of transitions) {
      if (c.type === 'ScalingActive') ctx.events.record(result.object, c.status === 'True' ? 'Normal' : 'Warning', c.reason, c.message);
    }
  }
  return { requeueAfterMs: intervalMs };
}

function nextStatus(
  server: NereidServer,
  before: NereidServerAutoscalingStatus | undefined,
  decision: Decision,
  currentReplicas: number,
  samples: PodSample[] | undefined,
  now: number,
  failure: { reason: string; message: string } | undefined,
  transitions: Condition[],
): NereidServerAutoscalingStatus {
  const autoscaling = server.spec.autoscaling!;
  const generation = server.metadata.generation ?? 0;
  const conditions = structuredClone(before?.conditions ?? []);
  const set = (c: Omit<Condition, 'lastTransitionTime'>): void => {
    if (setCondition(conditions, c, new Date(now))) transitions.push({ ...c, lastTransitionTime: '' });
  };
  set(
    decision.scalingActive
      ? { type: 'ScalingActive', status: 'True', reason: 'ValidMetricFound', message: `the HPA algorithm computed a replica count from ${autoscaling.metric}` }
      : { type: 'ScalingActive', status: 'False', reason: failure?.reason ?? 'FailedGetPodsMetric', message: failure?.message ?? decision.reason },
  );
  set({
    type: 'AbleToScale',
    status: 'True',
    reason: decision.ableToScale ?? (decision.rescale ? 'SucceededRescale' : 'ReadyForNewScale'),
    message: decision.rescale ? `the operator set the Deployment's replicas to ${decision.desiredReplicas}` : 'the replica count was left as it was',
  });
  const limited = decision.limitedBy !== undefined && decision.limitedBy !== 'DesiredWithinRange';
  set({
    type: 'ScalingLimited',
    status: limited ? 'True' : 'False',
    reason: decision.limitedBy ?? 'DesiredWithinRange',
    message: limited ? `recommendation ${decision.stabilizedReplicas} limited to ${decision.desiredReplicas}` : 'the desired count is within the acceptable range',
  });
  for (const c of conditions) c.observedGeneration = generation;
  const definedOnly = <T extends object>(o: T): T => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as T;
  return definedOnly({
    mode: 'operator',
    metric: autoscaling.metric,
    target: String(autoscaling.target),
    currentReplicas,
    desiredReplicas: decision.desiredReplicas,
    currentAverage: decision.average,
    lastScaleTime: decision.rescale ? isoS(now) : before?.lastScaleTime,
    lastDecision: definedOnly({
      number: (before?.lastDecision?.number ?? 0) + 1,
      time: isoMs(now),
      currentReplicas,
      pods: samples?.map((s) => definedOnly({ ...s })),
      average: decision.average,
      ratio: decision.ratio,
      recommendation: decision.metricReplicas,
      stabilizedReplicas: decision.stabilizedReplicas,
      desiredReplicas: decision.desiredReplicas,
      reason: decision.reason,
      ableToScale: decision.ableToScale,
      limitedBy: decision.limitedBy,
    }),
    recommendations: decision.history.recommendations.map((r) => ({ time: isoMs(r.time), replicas: r.replicas })),
    scaleUpEvents: decision.history.scaleUpEvents.map((e) => ({ time: isoMs(e.time), change: e.change })),
    scaleDownEvents: decision.history.scaleDownEvents.map((e) => ({ time: isoMs(e.time), change: e.change })),
    conditions,
  });
}
