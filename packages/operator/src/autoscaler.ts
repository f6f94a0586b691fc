/**
 * The HorizontalPodAutoscaler's algorithm (autoscaling/v2, as kube-controller-manager's
 * horizontal controller runs it) as a pure function: one decision from the current replica
 * count, the per-pod metric samples and the history of earlier decisions, with the history to
 * keep for the next one. Mode `operator` of NereidServer autoscaling runs it every
 * intervalSeconds; it keeps the history in the NereidServer's status, so that a restarted
 * operator continues where it stopped, and tests replay recorded decisions through it.
 *
 * Steps, in HPA's order:
 * 1. Current replicas above max or below min: the bound, at once (no metrics read).
 * 2. Replica calculation for a Pods metric with an AverageValue target: ratio = average / target
 *    over the pods with samples; within tolerance → the current count; pods without a sample
 *    count as 0 on a scale-up and as the target on a scale-down; pods that are not ready (HPA
 *    treats starting pods this way for CPU) count as 0 on a scale-up and are left out otherwise;
 *    no change when filling them in brings the ratio into tolerance or flips its direction.
 * 3. Stabilisation: the recommendation is held between the lowest recommendation of the scale-up
 *    window and the highest of the scale-down window (current replicas in between stay).
 * 4. Rate policies: the change allowed within each policy's period (counting the scale events of
 *    that period), Max or Min of the policies per selectPolicy, Disabled: no change that way;
 *    then maxReplicas / minReplicas.
 */

export type MetricName = 'inferenceRate' | 'queueTime' | 'pendingRequests';

export interface ScalingPolicy {
  type: 'Pods' | 'Percent';
  value: number;
  periodSeconds: number;
}

export interface ScalingRules {
  stabilizationWindowSeconds: number;
  selectPolicy: 'Max' | 'Min' | 'Disabled';
  policies: ScalingPolicy[];
}

export interface Behavior {
  scaleUp: ScalingRules;
  scaleDown: ScalingRules;
}

/** behavior as the NereidServer (and the HPA) spell it: every field optional. */
export interface BehaviorSpec {
  scaleUp?: Partial<ScalingRules>;
  scaleDown?: Partial<ScalingRules>;
}

/** autoscaling/v2's defaults (kube-controller-manager's --horizontal-pod-autoscaler-downscale-stabilization is 5 min). */
export const DEFAULT_BEHAVIOR: Behavior = {
  scaleUp: {
    stabilizationWindowSeconds: 0,
    selectPolicy: 'Max',
    policies: [
      { type: 'Percent', value: 100, periodSeconds: 15 },
      { type: 'Pods', value: 4, periodSeconds: 15 },
    ],
  },
  scaleDown: { stabilizationWindowSeconds: 300, selectPolicy: 'Max', policies: [{ type: 'Percent', value: 100, periodSeconds: 15 }] },
};

export const DEFAULT_TOLERANCE = 0.1;

/** The behavior with HPA's defaults filled in per direction and per field. */
export function resolveBehavior(spec: BehaviorSpec | undefined): Behavior {
  const rules = (given: Partial<ScalingRules> | undefined, defaults: ScalingRules): ScalingRules => ({
    stabilizationWindowSeconds: given?.stabilizationWindowSeconds ?? defaults.stabilizationWindowSeconds,
    selectPolicy: given?.selectPolicy ?? defaults.selectPolicy,
    policies: given?.policies && given.policies.length > 0 ? given.policies.map((p) => ({ ...p })) : defaults.policies.map((p) => ({ ...p })),
  });
  return { scaleUp: rules(spec?.scaleUp, DEFAULT_BEHAVIOR.scaleUp), scaleDown: rules(spec?.scaleDown, DEFAULT_BEHAVIOR.scaleDown) };
}

const QUANTITY = /^\+?([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+))?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/;
const SUFFIX: Record<string, number> = {
  m: 1e-3, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18,
  Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60,
};

/** A Kubernetes quantity ("20", "500m", "1.5k", 20) as a number; undefined when it is not one or not positive. */
export function parseQuantity(value: string | number): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) && value > 0 ? value : undefined;
  const m = QUANTITY.exec(value.trim());
  if (!m) return undefined;
  const n = Number(m[1]) * 10 ** Number(m[2] ?? 0) * (m[3] ? SUFFIX[m[3]] : 1);
  return Number.isFinite(n) && n > 0 ? n : undefined;
}

/** One pod of the scaled Deployment as the decision sees it. */
export interface PodSample {
  pod: string;
  /** The pod's Ready condition is True. */
  ready: boolean;
  /** Pending (not yet running): counted as not ready whether or not it has a sample. */
  pending?: boolean;
  /** The metric's value for the pod; undefined when Prometheus has none. */
  value?: number;
}

export interface TimedRecommendation {
  /** Milliseconds since the epoch. */
  time: number;
  replicas: number;
}

export interface ScaleEvent {
  time: number;
  /** Replicas added (scale-up events) or removed (scale-down events), positive. */
  change: number;
}

/** What a decision leaves for the next one (HPA keeps the same three lists per autoscaler). */
export interface AutoscalerHistory {
  recommendations: TimedRecommendation[];
  scaleUpEvents: ScaleEvent[];
  scaleDownEvents: ScaleEvent[];
}

export const emptyHistory = (): AutoscalerHistory => ({ recommendations: [], scaleUpEvents: [], scaleDownEvents: [] });

export interface DecisionInput {
  /** Milliseconds since the epoch. */
  now: number;
  /** The Deployment's spec.replicas. */
  currentReplicas: number;
  minReplicas: number;
  maxReplicas: number;
  /** The average per pod aimed at. */
  target: number;
  tolerance: number;
  behavior: Behavior;
  /** The pods and their samples; undefined when the metric could not be read. */
  pods: PodSample[] | undefined;
  /** The metric's name for messages (default "metric"). */
  metric?: string;
}

export interface Decision {
  /** The replica count to set. */
  desiredReplicas: number;
  /** Whether desiredReplicas differs from currentReplicas. */
  rescale: boolean;
  /** The replica calculation's count before stabilisation and rate limits (undefined: no metrics were used). */
  metricReplicas?: number;
  /** Average of the samples used (after missing and unready pods were filled in, as HPA reports it: of the ready pods with samples). */
  average?: number;
  /** average / target. */
  ratio?: number;
  /** The recommendation after stabilisation. */
  stabilizedReplicas?: number;
  /** HPA's rescale reason ("inferenceRate above target", "All metrics below target", …) or why nothing changed. */
  reason: string;
  /** HPA's AbleToScale reason: ReadyForNewScale, ScaleUpStabilized, ScaleDownStabilized. */
  ableToScale?: string;
  /** HPA's ScalingLimited reason: DesiredWithinRange, ScaleUpLimit, ScaleDownLimit, TooManyReplicas, TooFewReplicas. */
  limitedBy?: string;
  /** HPA's ScalingActive: false when no metric could be used (reason in `reason`). */
  scalingActive: boolean;
  /** The history to pass to the next decision. */
  history: AutoscalerHistory;
}

/** The replica count a Pods metric asks for (HPA's calcPlainMetricReplicas), or an error message when no pod has a usable sample. */
export function metricReplicas(
  pods: PodSample[],
  currentReplicas: number,
  target: number,
  tolerance: number,
): { replicas: number; average: number; ratio: number; heldByUnsampled?: true } | { error: string } {
  const used = new Map<string, number>();
  const unready: string[] = [];
  const missing: string[] = [];
  for (const p of pods) {
    if (p.pending || !p.ready) unready.push(p.pod);
    else if (p.value === undefined || !Number.isFinite(p.value)) missing.push(p.pod);
    else used.set(p.pod, p.value);
  }
  if (used.size === 0) return { error: 'no metrics for the pods (they may not be ready, or Prometheus has not scraped them yet)' };
  const averageOf = (m: Map<string, number>): number => [...m.values()].reduce((s, v) => s + v, 0) / m.size;
  const average = averageOf(used);
  const ratio = average / target;
  const readyCount = used.size;
  const scaleUpWithUnready = unready.length > 0 && ratio > 1;
  if (!scaleUpWithUnready && missing.length === 0) {
    if (Math.abs(1 - ratio) <= tolerance) return { replicas: currentReplicas, average, ratio };
    return { replicas: Math.ceil(ratio * readyCount), average, ratio };
  }
  const filled = new Map(used);
  for (const pod of missing) filled.set(pod, ratio < 1 ? target : 0);
  if (scaleUpWithUnready) for (const pod of unready) filled.set(pod, 0);
  const newRatio = averageOf(filled) / target;
  if (Math.abs(1 - newRatio) <= tolerance || (ratio < 1 && newRatio > 1) || (ratio > 1 && newRatio < 1)) {
    return { replicas: currentReplicas, average, ratio, heldByUnsampled: true };
  }
  const replicas = Math.ceil(newRatio * filled.size);
  if ((newRatio < 1 && replicas > currentReplicas) || (newRatio > 1 && replicas < currentReplicas)) {
    return { replicas: currentReplicas, average, ratio, heldByUnsampled: true };
  }
  return { replicas, average, ratio };
}

const changeWithin = (events: ScaleEvent[], now: number, periodSeconds: number): number =>
  events.filter((e) => e.time > now - periodSeconds * 1000).reduce((s, e) => s + e.change, 0);

/** The most replicas the scale-up policies allow now (HPA's calculateScaleUpLimitWithScalingRules). */
export function scaleUpLimit(currentReplicas: number, history: AutoscalerHistory, rules: ScalingRules, now: number): number {
  if (rules.selectPolicy === 'Disabled') return currentReplicas;
  const pick = rules.selectPolicy === 'Min' ? Math.min : Math.max;
  let result = rules.selectPolicy === 'Min' ? Infinity : -Infinity;
  for (const policy of rules.policies) {
    const start = currentReplicas - changeWithin(history.scaleUpEvents, now, policy.periodSeconds) + changeWithin(history.scaleDownEvents, now, policy.periodSeconds);
    const proposed = policy.type === 'Pods' ? start + policy.value : Math.ceil(start * (1 + policy.value / 100));
    result = pick(result, proposed);
  }
  return result;
}

/** The fewest replicas the scale-down policies allow now (HPA's calculateScaleDownLimitWithBehaviors). */
export function scaleDownLimit(currentReplicas: number, history: AutoscalerHistory, rules: ScalingRules, now: number): number {
  if (rules.selectPolicy === 'Disabled') return currentReplicas;
  const pick = rules.selectPolicy === 'Min' ? Math.max : Math.min;
  let result = rules.selectPolicy === 'Min' ? -Infinity : Infinity;
  for (const policy of rules.policies) {
    const start = currentReplicas - changeWithin(history.scaleUpEvents, now, policy.periodSeconds) + changeWithin(history.scaleDownEvents, now, policy.periodSeconds);
    const proposed = policy.type === 'Pods' ? start - policy.value : Math.trunc(start * (1 - policy.value / 100));
    result = pick(result, proposed);
  }
  return result;
}

/** Drops history that no later decision can use: recommendations older than both windows, scale events older than the longest policy period. */
function prune(history: AutoscalerHistory, behavior: Behavior, now: number): AutoscalerHistory {
  const keepRec = Math.max(behavior.scaleUp.stabilizationWindowSeconds, behavior.scaleDown.stabilizationWindowSeconds) * 1000;
  const longest = (rules: ScalingRules): number => Math.max(0, ...rules.policies.map((p) => p.periodSeconds)) * 1000;
  return {
    recommendations: history.recommendations.filter((r) => r.time > now - keepRec),
    scaleUpEvents: history.scaleUpEvents.filter((e) => e.time > now - longest(behavior.scaleUp)),
    scaleDownEvents: history.scaleDownEvents.filter((e) => e.time > now - longest(behavior.scaleDown)),
  };
}

/** One autoscaling decision (HPA's reconcileAutoscaler for one Pods metric with behavior). */
export function decide(input: DecisionInput, history: AutoscalerHistory): Decision {
  const { now, currentReplicas, minReplicas, maxReplicas, behavior } = input;
  const metric = input.metric ?? 'metric';
  const kept = prune(history, behavior, now);
  const withEvent = (desired: number): AutoscalerHistory => {
    if (desired > currentReplicas) return { ...kept, scaleUpEvents: [...kept.scaleUpEvents, { time: now, change: desired - currentReplicas }] };
    if (desired < currentReplicas) return { ...kept, scaleDownEvents: [...kept.scaleDownEvents, { time: now, change: currentReplicas - desired }] };
    return kept;
  };
  if (currentReplicas === 0 && minReplicas !== 0) {
    return { desiredReplicas: 0, rescale: false, reason: 'scaling is disabled since the replica count of the target is zero', scalingActive: false, history: kept };
  }
  if (currentReplicas > maxReplicas) {
    return { desiredReplicas: maxReplicas, rescale: true, reason: 'Current number of replicas above Spec.MaxReplicas', scalingActive: true, history: withEvent(maxReplicas) };
  }
  if (currentReplicas < minReplicas) {
    return { desiredReplicas: minReplicas, rescale: true, reason: 'Current number of replicas below Spec.MinReplicas', scalingActive: true, history: withEvent(minReplicas) };
  }
  if (!input.pods) {
    return { desiredReplicas: currentReplicas, rescale: false, reason: `the metric ${metric} could not be read`, scalingActive: false, history: kept };
  }
  const calc = metricReplicas(input.pods, currentReplicas, input.target, input.tolerance);
  if ('error' in calc) return { desiredReplicas: currentReplicas, rescale: false, reason: calc.error, scalingActive: false, history: kept };
  const recommended = calc.replicas;

  // Stabilisation (HPA's stabilizeRecommendationWithBehaviors).
  const upCutoff = now - behavior.scaleUp.stabilizationWindowSeconds * 1000;
  const downCutoff = now - behavior.scaleDown.stabilizationWindowSeconds * 1000;
  let upRecommendation = recommended;
  let downRecommendation = recommended;
  for (const r of kept.recommendations) {
    if (r.time > upCutoff) upRecommendation = Math.min(r.replicas, upRecommendation);
    if (r.time > downCutoff) downRecommendation = Math.max(r.replicas, downRecommendation);
  }
  let stabilized = currentReplicas;
  if (stabilized < upRecommendation) stabilized = upRecommendation;
  if (stabilized > downRecommendation) stabilized = downRecommendation;
  const ableToScale = stabilized === recommended ? 'ReadyForNewScale' : recommended >= currentReplicas ? 'ScaleUpStabilized' : 'ScaleDownStabilized';
  const recorded: AutoscalerHistory = { ...kept, recommendations: [...kept.recommendations, { time: now, replicas: recommended }] };

  // Rate limits and bounds (HPA's convertDesiredReplicasWithBehaviorRate).
  let desired = stabilized;
  let limitedBy = 'DesiredWithinRange';
  if (stabilized > currentReplicas) {
    const limit = Math.max(scaleUpLimit(currentReplicas, kept, behavior.scaleUp, now), currentReplicas);
    const allowed = Math.min(maxReplicas, limit);
    if (stabilized > allowed) {
      desired = allowed;
      limitedBy = limit < maxReplicas ? 'ScaleUpLimit' : 'TooManyReplicas';
    }
  } else if (stabilized < currentReplicas) {
    const limit = Math.min(scaleDownLimit(currentReplicas, kept, behavior.scaleDown, now), currentReplicas);
    const allowed = Math.max(minReplicas, limit);
    if (stabilized < allowed) {
      desired = allowed;
      limitedBy = limit > minReplicas ? 'ScaleDownLimit' : 'TooFewReplicas';
    }
  }
  const reason =
    desired > currentReplicas
      ? `${metric} above target`
      : desired < currentReplicas
        ? 'All metrics below target'
        : recommended === currentReplicas
          ? calc.heldByUnsampled
            ? 'the pods without samples or not ready hold the count'
            : Math.abs(1 - calc.ratio) <= input.tolerance
              ? 'within tolerance'
              : 'the recommendation is the current count'
          : ableToScale !== 'ReadyForNewScale'
            ? `${ableToScale}: recommendation ${recommended} held at ${stabilized}`
            : `${limitedBy}: recommendation ${recommended} held at ${desired}`;
  const next = { ...recorded, scaleUpEvents: withEvent(desired).scaleUpEvents, scaleDownEvents: withEvent(desired).scaleDownEvents };
  return {
    desiredReplicas: desired,
    rescale: desired !== currentReplicas,
    metricReplicas: recommended,
    average: calc.average,
    ratio: calc.ratio,
    stabilizedReplicas: stabilized,
    reason,
    ableToScale,
    limitedBy,
    scalingActive: true,
    history: next,
  };
}
