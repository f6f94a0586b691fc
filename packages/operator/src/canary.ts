/**
 * Canary rollouts of a model version (NereidModel.spec.canary): the steps' state machine, the
 * versions and `version_weights` each phase loads, and the Prometheus analysis of a step.
 *
 * A canary runs through phases (types.ts CanaryPhase). While Progressing, every pod serves the
 * stable and the canary version, with the canary getting `steps[step]` percent of unversioned
 * requests. A step's clock starts once every ready pod serves its weights; after
 * `intervalSeconds` the step is analysed over that window: too few canary requests extend the
 * step, a passing analysis moves to the next step (after the last one, 100, to Promoting), a
 * failing one to RollingBack. RollingBack sets the canary's weight to 0 on every pod, then
 * RolledBack loads the stable version alone; Promoting loads the canary version alone. The
 * server drains a version a load drops before releasing it, so no request in flight is lost.
 *
 * Everything here is pure (time is an argument) except `analyseStep`, which queries Prometheus.
 */
import type { PrometheusClient } from './prometheus.js';
import type { CanaryAnalysis, CanaryPhase, CanarySpec, CanaryStatus, CanaryTransition } from './types.js';

export const DEFAULT_STEPS = [10, 50, 100];
export const DEFAULT_INTERVAL_SECONDS = 30;
export const DEFAULT_MAX_ERROR_RATE = 0.01;
export const DEFAULT_MIN_REQUESTS = 20;
/** An extended step (too few canary requests) is analysed again after at most this long. */
export const RECHECK_MS = 5_000;
const MAX_TRANSITIONS = 20;

/** spec.canary with its defaults. */
export interface CanaryPlan {
  version: number;
  steps: number[];
  intervalSeconds: number;
  maxErrorRate: number;
  maxLatencyRatio?: number;
  minRequests: number;
}

export function canaryPlan(spec: CanarySpec): CanaryPlan {
  return {
    version: spec.version,
    steps: spec.steps && spec.steps.length > 0 ? spec.steps : DEFAULT_STEPS,
    intervalSeconds: spec.intervalSeconds ?? DEFAULT_INTERVAL_SECONDS,
    maxErrorRate: spec.analysis?.maxErrorRate ?? DEFAULT_MAX_ERROR_RATE,
    ...(spec.analysis?.maxLatencyRatio !== undefined ? { maxLatencyRatio: spec.analysis.maxLatencyRatio } : {}),
    minRequests: spec.analysis?.minRequests ?? DEFAULT_MIN_REQUESTS,
  };
}

/**
 * Why `plan` cannot run (the CRD's validation says the same for objects it admits), or undefined.
 * `stable`: the stable version.
 */
export function canaryPlanError(plan: CanaryPlan, stable: number): string | undefined {
  if (plan.version === stable) return `canary.version ${plan.version} is the stable version: name a new version`;
  const { steps } = plan;
  for (let i = 0; i < steps.length; i++) {
    if (!Number.isInteger(steps[i]) || steps[i] < 1 || steps[i] > 100) return `canary.steps[${i}] is ${steps[i]}: a step is a whole percentage from 1 to 100`;
    if (i > 0 && steps[i] <= steps[i - 1]) return `canary.steps must ascend: steps[${i}] = ${steps[i]} follows ${steps[i - 1]}`;
  }
  if (steps[steps.length - 1] !== 100) return `canary.steps must end with 100 (the last step serves every unversioned request on the canary); it ends with ${steps[steps.length - 1]}`;
  return undefined;
}

/** What a phase loads on every pod: the versions to serve and their `version_weights`. */
export interface Serving {
  versions: number[];
  weights: Record<string, number>;
}

export function servingOf(status: Pick<CanaryStatus, 'phase' | 'version' | 'stableVersion' | 'weight'>): Serving {
  const { version: canary, stableVersion: stable } = status;
  switch (status.phase) {
    case 'Progressing':
      return { versions: [stable, canary], weights: { [stable]: 100 - status.weight, [canary]: status.weight } };
    case 'RollingBack':
      return { versions: [stable, canary], weights: { [stable]: 100, [canary]: 0 } };
    case 'RolledBack':
      return { versions: [stable], weights: { [stable]: 100 } };
    case 'Promoting':
    case 'Promoted':
      return { versions: [canary], weights: { [canary]: 100 } };
  }
}

/** The canary status of a run that starts now: Progressing at the first step, its clock not started. */
export function startCanary(plan: CanaryPlan, stable: number, now: Date): CanaryStatus {
  const weight = plan.steps[0];
  const message = `canary version ${plan.version} starts at ${weight}% of unversioned requests (stable version ${stable})`;
  return {
    version: plan.version,
    stableVersion: stable,
    phase: 'Progressing',
    step: 0,
    weight,
    message,
    transitions: [transition(now, 'Progressing', 0, weight, 'CanaryStarted', message)],
  };
}

/** Whether `status` is a run of `plan` against `stable` (otherwise a new run starts). */
export const sameRun = (status: CanaryStatus | undefined, plan: CanaryPlan, stable: number | undefined): status is CanaryStatus =>
  status !== undefined && status.version === plan.version && (stable === undefined || status.stableVersion === stable);

export interface CanaryEvent {
  type: 'Normal' | 'Warning';
  reason: string;
  message: string;
}

export interface CanaryInput {
  now: Date;
  /** Every ready pod (at least one) serves servingOf(status) and reports the served versions READY. */
  applied: boolean;
  /** A load of this phase's serving set failed on a pod: its error. */
  loadError?: string;
  /** The analysis made for this call (when analysisDue said so). */
  analysis?: CanaryAnalysis;
}

export interface CanaryDecision {
  status: CanaryStatus;
  events: CanaryEvent[];
  /** When to look again (ms); 0: at once (the next phase has something to load); -1: the run is over (the regular resync). */
  requeueAfterMs: number;
}

const iso = (d: Date): string => d.toISOString().replace(/\.\d{3}Z$/, 'Z');

function transition(now: Date, phase: CanaryPhase, step: number, weight: number, reason: string, message: string): CanaryTransition {
  return { time: iso(now), phase, step, weight, reason, message };
}

/** Whether a Progressing step has run its interval: its analysis is due. */
export function analysisDue(plan: CanaryPlan, status: CanaryStatus, now: Date): boolean {
  if (status.phase !== 'Progressing' || status.stepStartTime === undefined) return false;
  return now.getTime() - Date.parse(status.stepStartTime) >= plan.intervalSeconds * 1000;
}

/**
 * The next state of a canary. `input.analysis` is used only when analysisDue; the caller makes
 * it. Returns the status to write, the Events of its transitions and when to look again.
 */
export function advanceCanary(plan: CanaryPlan, status: CanaryStatus, input: CanaryInput): CanaryDecision {
  const { now } = input;
  const events: CanaryEvent[] = [];
  let next: CanaryStatus = { ...status, transitions: [...status.transitions] };
  const move = (phase: CanaryPhase, step: number, weight: number, reason: string, message: string, type: 'Normal' | 'Warning' = 'Normal') => {
    next = { ...next, phase, step, weight, message };
    delete next.stepStartTime;
    next.transitions = [...next.transitions, transition(now, phase, step, weight, reason, message)].slice(-MAX_TRANSITIONS);
    events.push({ type, reason, message });
  };
  const rollBack = (reason: string, why: string) =>
    move('RollingBack', next.step, 0, reason, `rolling back canary version ${plan.version} at ${status.weight}%: ${why}`, 'Warning');

  switch (status.phase) {
    case 'Progressing': {
      if (input.loadError !== undefined) {
        rollBack('LoadFailed', `loading it failed: ${input.loadError}`);
        return { status: next, events, requeueAfterMs: 0 };
      }
      if (status.stepStartTime === undefined) {
        if (!input.applied) return { status: next, events, requeueAfterMs: 1_000 };
        const message = `step ${status.step + 1}/${plan.steps.length}: canary version ${plan.version} serves ${status.weight}% of unversioned requests`;
        next = { ...next, stepStartTime: iso(now), message };
        events.push({ type: 'Normal', reason: 'CanaryStep', message });
        return { status: next, events, requeueAfterMs: plan.intervalSeconds * 1000 };
      }
      const elapsed = now.getTime() - Date.parse(status.stepStartTime);
      if (elapsed < plan.intervalSeconds * 1000 || input.analysis === undefined) {
        return { status: next, events, requeueAfterMs: Math.max(100, plan.intervalSeconds * 1000 - elapsed) };
      }
      const a = input.analysis;
      next.analysis = a;
      if (a.stableP99Us !== undefined && a.stableRequests > 0) next.stableP99Us = a.stableP99Us;
      if (a.result === 'Inconclusive') {
        if (status.analysis?.result !== 'Inconclusive' || status.analysis.step !== status.step) {
          events.push({ type: 'Normal', reason: 'AnalysisInconclusive', message: `step ${status.step + 1} extended: ${a.message}` });
        }
        next.message = `step ${status.step + 1}/${plan.steps.length} at ${status.weight}% extended: ${a.message}`;
        return { status: next, events, requeueAfterMs: Math.min(RECHECK_MS, plan.intervalSeconds * 1000) };
      }
      if (a.result === 'Failed') {
        rollBack('AnalysisFailed', a.message);
        return { status: next, events, requeueAfterMs: 0 };
      }
      events.push({ type: 'Normal', reason: 'AnalysisPassed', message: `step ${status.step + 1} at ${status.weight}%: ${a.message}` });
      if (status.step + 1 >= plan.steps.length) {
        move('Promoting', status.step, 100, 'Promoting', `promoting canary version ${plan.version}: the stable version ${status.stableVersion} is unloaded once its requests in flight finish`);
        return { status: next, events, requeueAfterMs: 0 };
      }
      const step = status.step + 1;
      move('Progressing', step, plan.steps[step], 'StepAdvanced', `advancing canary version ${plan.version} to ${plan.steps[step]}% (step ${step + 1}/${plan.steps.length})`);
      return { status: next, events, requeueAfterMs: 0 };
    }
    case 'RollingBack':
      if (!input.applied) return { status: next, events, requeueAfterMs: 1_000 };
      move('RolledBack', status.step, 0, 'RolledBack', `rolled back: stable version ${status.stableVersion} serves every unversioned request; canary version ${plan.version} is unloaded once its requests in flight finish`, 'Warning');
      return { status: next, events, requeueAfterMs: 0 };
    case 'Promoting':
      if (!input.applied) return { status: next, events, requeueAfterMs: 1_000 };
      move('Promoted', status.step, 100, 'Promoted', `promoted: version ${plan.version} serves every request; version ${status.stableVersion} is unloaded`);
      return { status: next, events, requeueAfterMs: 0 };
    case 'RolledBack':
    case 'Promoted':
      return { status: next, events, requeueAfterMs: -1 };
  }
}

/** The Canary condition for a status. */
export function canaryCondition(status: CanaryStatus): { type: string; status: 'True' | 'False'; reason: string; message: string } {
  const ok = status.phase === 'Progressing' || status.phase === 'Promoting' || status.phase === 'Promoted';
  return { type: 'Canary', status: ok ? 'True' : 'False', reason: status.phase, message: status.message };
}

// ---- Analysis -----------------------------------------------------------------------------------

/** A PromQL string literal (double quotes, backslash escapes). */
const promString = (s: string): string => JSON.stringify(s);
/** An RE2 pattern that matches exactly `s`. */
const reQuote = (s: string): string => s.replace(/[\\.+*?()|[\]{}^$]/g, '\\$&');

export interface AnalysisScope {
  namespace: string;
  /** The server's pods (their `pod` label). */
  pods: string[];
  model: string;
  stable: number;
  canary: number;
}

/** The label matchers of a scope's series: namespace, pods, model, the two versions. */
export function seriesSelector(scope: AnalysisScope): string {
  const pods = scope.pods.length > 0 ? scope.pods.map(reQuote).join('|') : '$^';
  return [
    `namespace=${promString(scope.namespace)}`,
    `pod=~${promString(pods)}`,
    `model=${promString(scope.model)}`,
    `version=~${promString(`${scope.stable}|${scope.canary}`)}`,
  ].join(',');
}

/** The three queries of a step's analysis over the last `windowSeconds`, each by version. */
export function analysisQueries(scope: AnalysisScope, windowSeconds: number): { success: string; failure: string; p99: string } {
  const sel = seriesSelector(scope);
  const w = `${Math.max(1, Math.ceil(windowSeconds))}s`;
  return {
    success: `sum by (version) (increase(nv_inference_request_success{${sel}}[${w}]))`,
    failure: `sum by (version) (increase(nv_inference_request_failure{${sel}}[${w}]))`,
    p99: `histogram_quantile(0.99, sum by (version, le) (rate(nv_inference_request_histogram_us_bucket{${sel}}[${w}])))`,
  };
}

/** What the queries found, per version (absent: no series). */
export interface AnalysisSamples {
  success: Map<string, number>;
  failure: Map<string, number>;
  p99: Map<string, number>;
}

/**
 * Judges a step from its samples. Inconclusive: fewer than minRequests canary requests. Failed:
 * the canary's error rate above maxErrorRate, or (with maxLatencyRatio) its p99 above that many
 * times the stable p99 (this window's, or `baselineP99Us` when the stable version had no
 * requests in it, as at 100%). Counts are rounded: increase() extrapolates to the window's edges.
 */
export function judgeStep(
  plan: CanaryPlan,
  status: Pick<CanaryStatus, 'step' | 'weight' | 'stableVersion' | 'version'>,
  samples: AnalysisSamples,
  meta: { now: Date; windowSeconds: number; baselineP99Us?: number },
): CanaryAnalysis {
  const c = String(status.version);
  const s = String(status.stableVersion);
  const count = (m: Map<string, number>, v: string) => {
    const x = m.get(v);
    return x === undefined || !Number.isFinite(x) ? 0 : Math.round(x);
  };
  const quantile = (v: string) => {
    const x = samples.p99.get(v);
    return x === undefined || !Number.isFinite(x) ? undefined : x;
  };
  const canaryFailures = count(samples.failure, c);
  const canaryRequests = count(samples.success, c) + canaryFailures;
  const stableFailures = count(samples.failure, s);
  const stableRequests = count(samples.success, s) + stableFailures;
  const canaryP99Us = quantile(c);
  const windowP99 = stableRequests > 0 ? quantile(s) : undefined;
  const stableP99Us = windowP99 ?? meta.baselineP99Us;
  const base = {
    time: iso(meta.now),
    step: status.step,
    weight: status.weight,
    windowSeconds: Math.round(meta.windowSeconds),
    canaryRequests,
    canaryFailures,
    ...(canaryRequests > 0 ? { errorRate: canaryFailures / canaryRequests } : {}),
    stableRequests,
    stableFailures,
    ...(canaryP99Us !== undefined ? { canaryP99Us } : {}),
    ...(stableP99Us !== undefined ? { stableP99Us } : {}),
  };
  if (canaryRequests < plan.minRequests) {
    return { ...base, result: 'Inconclusive', message: `${canaryRequests} canary requests in ${base.windowSeconds}s, fewer than minRequests ${plan.minRequests}` };
  }
  const errorRate = canaryFailures / canaryRequests;
  const rate = `error rate ${fmt(errorRate)} (${canaryFailures}/${canaryRequests})`;
  if (errorRate > plan.maxErrorRate) {
    return { ...base, result: 'Failed', message: `canary ${rate} exceeds maxErrorRate ${plan.maxErrorRate}` };
  }
  let latency = '';
  let latencyRatio: number | undefined;
  if (plan.maxLatencyRatio !== undefined) {
    if (canaryP99Us === undefined || stableP99Us === undefined || stableP99Us <= 0) {
      latency = '; p99 not compared (no latency histogram for both versions)';
    } else {
      latencyRatio = canaryP99Us / stableP99Us;
      const text = `p99 ${fmt(canaryP99Us)}µs vs stable ${fmt(stableP99Us)}µs (ratio ${fmt(latencyRatio)})`;
      if (latencyRatio > plan.maxLatencyRatio) {
        return { ...base, latencyRatio, result: 'Failed', message: `canary ${text} exceeds maxLatencyRatio ${plan.maxLatencyRatio}` };
      }
      latency = `, ${text}`;
    }
  }
  return { ...base, ...(latencyRatio !== undefined ? { latencyRatio } : {}), result: 'Passed', message: `canary ${rate}${latency}` };
}

const fmt = (x: number): string => String(Number(x.toPrecision(3)));

/** Runs a step's queries against Prometheus; throws PROMETHEUS_QUERY when one fails. */
export async function queryStep(prometheus: PrometheusClient, scope: AnalysisScope, windowSeconds: number, now: Date): Promise<AnalysisSamples> {
  const q = analysisQueries(scope, windowSeconds);
  const byVersion = async (promql: string): Promise<Map<string, number>> => {
    const out = new Map<string, number>();
    for (const s of await prometheus.query(promql, now)) if (s.metric.version !== undefined) out.set(s.metric.version, s.value);
    return out;
  };
  const [success, failure, p99] = await Promise.all([byVersion(q.success), byVersion(q.failure), byVersion(q.p99)]);
  return { success, failure, p99 };
}
