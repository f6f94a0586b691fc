/**
 * NereidModel reconciliation and the `nereid.dev/models-ready` readiness gate.
 *
 * The operator drives each server pod's repository API: on every pod of the server whose
 * containers are ready it loads the model (with its config override, and a ConfigMap's contents
 * as `file:` overrides) when the pod is new (UID), the NereidModel's generation or the
 * ConfigMap's resourceVersion changed since the last load there, or the pod's index no longer
 * lists the model (the process restarted). What was applied per pod is kept in
 * status.pods, so a restarted operator continues where it stopped. The pod condition
 * `nereid.dev/models-ready` turns True once every NereidModel of the server is READY on the pod;
 * the pod template's readiness gate holds a pod out of its Service until then.
 *
 * Deletion: the finalizer `nereid.dev/unload` holds the object until the model is unloaded from
 * every pod that is still reachable.
 */
import { RESOURCES, isNotFound, objectPath } from './kube-client.js';
import type { KubeObject } from './kube-client.js';
import { repositoryUri } from './builders.js';
import type { ControllerContext, Pod, PodCondition } from './context.js';
import { RepositoryApi, modelState } from './repository-api.js';
import type { IndexEntry, LoadRequest } from './repository-api.js';
import {
  RECHECK_MS,
  advanceCanary,
  analysisDue,
  canaryCondition,
  canaryPlan,
  canaryPlanError,
  judgeStep,
  queryStep,
  sameRun,
  servingOf,
  startCanary,
} from './canary.js';
import type { CanaryDecision, CanaryInput, CanaryPlan } from './canary.js';
import { setFinalizers, updateStatus } from './status.js';
import type { ReconcileResult } from './work-queue.js';
import type { CanaryStatus, Condition, ModelPodStatus, NereidModel, NereidModelStatus, NereidServer } from './types.js';
import { CANARY_CONDITION, LABELS, MODELS_READY_CONDITION, MODEL_FINALIZER, setCondition } from './types.js';

/** A failed load is retried on a pod after this long (a fixed model may have been uploaded). */
export const FAILED_LOAD_RETRY_MS = 30_000;

export const modelNameOf = (model: NereidModel): string => model.spec.modelName ?? model.metadata.name ?? '';

/** Pods of `serverName` that are not terminating. */
export function serverPods(ctx: ControllerContext, namespace: string, serverName: string): Pod[] {
  return ctx.pods
    .list(
      (p) =>
        p.metadata.namespace === namespace &&
        p.metadata.labels?.[LABELS.instance] === serverName &&
        p.metadata.labels?.[LABELS.component] === 'server' &&
        !p.metadata.deletionTimestamp,
    )
    .sort((a, b) => (a.metadata.name ?? '').localeCompare(b.metadata.name ?? ''));
}

export const containersReady = (p: Pod): boolean =>
  Boolean(p.status?.podIP) && p.status?.conditions?.some((c) => c.type === 'ContainersReady' && c.status === 'True') === true;

/** Pods of `serverName` whose containers are ready and that are not terminating. */
export function readyPods(ctx: ControllerContext, namespace: string, serverName: string): Pod[] {
  return serverPods(ctx, namespace, serverName).filter(containersReady);
}

export function httpPortOf(pod: Pod): number {
  for (const container of pod.spec.containers) {
    if (container.name !== 'nereid') continue;
    const port = container.ports?.find((p) => p.name === 'http');
    if (port) return port.containerPort;
  }
  return 8000;
}

const stripSlash = (uri: string): string => uri.replace(/\/+$/, '');

/** Decodes a ConfigMap key into a path in the model directory: `__` stands for `/`. */
export const configMapKeyToPath = (key: string): string => key.split('__').join('/');

interface ResolvedSource {
  /** The name the model is loaded under (its directory name in the repository). */
  loadName: string;
  request: LoadRequest;
  sourceVersion?: string;
}

class SourceError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * The load request for a model: config override, versions, ConfigMap files. `versions` goes into
 * the load's config when there is one (spec.config, or a ConfigMap's minimal config); otherwise it
 * is sent as the `version_policy` parameter, which applies over the repository's config.pbtxt (a
 * config holding only the policy would replace that file, inputs and batching included).
 */
export async function resolveSource(ctx: ControllerContext, model: NereidModel, server: NereidServer): Promise<ResolvedSource> {
  const name = modelNameOf(model);
  const { source } = model.spec;
  let config = model.spec.config ? structuredClone(model.spec.config) : undefined;
  const versions = model.spec.versions && model.spec.versions.length > 0 ? model.spec.versions : undefined;
  if (versions && (config || source.configMap)) {
    config = { ...config, version_policy: { specific: { versions } } };
  }
  if (source.configMap) {
    const cm = await ctx.client.getOptional<KubeObject & { data?: Record<string, string>; binaryData?: Record<string, string> }>(
      objectPath(RESOURCES.configMap, model.metadata.namespace, source.configMap.name),
    );
    if (!cm) throw new SourceError('SourceNotFound', `ConfigMap ${source.configMap.name} does not exist in namespace ${model.metadata.namespace}`);
    const files: Record<string, Buffer> = {};
    for (const [key, value] of Object.entries(cm.data ?? {})) files[configMapKeyToPath(key)] = Buffer.from(value, 'utf8');
    for (const [key, value] of Object.entries(cm.binaryData ?? {})) files[configMapKeyToPath(key)] = Buffer.from(value, 'base64');
    return { loadName: name, request: { config: config ?? { name }, files }, sourceVersion: cm.metadata.resourceVersion };
  }
  let directory = name;
  if (source.uri !== undefined) {
    const root = stripSlash(repositoryUri(server));
    const uri = stripSlash(source.uri);
    if (!uri.startsWith(root + '/')) {
      throw new SourceError('InvalidSource', `source.uri ${source.uri} does not lie under the server's model repository ${root}`);
    }
    directory = uri.slice(root.length + 1);
  } else if (source.repository?.path) {
    directory = stripSlash(source.repository.path).replace(/^\/+/, '');
  }
  if (directory.includes('/')) {
    throw new SourceError('InvalidSource', `model directory ${directory} must be a top-level directory of the repository`);
  }
  if (directory !== name) {
    throw new SourceError('InvalidSource', `a repository model loads under its directory name: directory ${directory} differs from modelName ${name}`);
  }
  if (config) return { loadName: name, request: { config } };
  return { loadName: name, request: versions ? { versionPolicy: { specific: { versions } } } : {} };
}

export async function reconcileModel(ctx: ControllerContext, key: string): Promise<ReconcileResult> {
  const [namespace, name] = key.split('/');
  const model = ctx.models.get(namespace, name);
  if (!model) return;
  const serverKey = `${namespace}/${model.spec.server}`;

  if (model.metadata.deletionTimestamp) {
    if (!model.metadata.finalizers?.includes(MODEL_FINALIZER)) return;
    await unloadEverywhere(ctx, model);
    try {
      await setFinalizers(ctx.client, RESOURCES.nereidModel, model, model.metadata.finalizers.filter((f) => f !== MODEL_FINALIZER));
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
    ctx.enqueueGate(serverKey);
    ctx.enqueueServer(serverKey);
    return;
  }

  if (!model.metadata.finalizers?.includes(MODEL_FINALIZER)) {
    await setFinalizers(ctx.client, RESOURCES.nereidModel, model, [...(model.metadata.finalizers ?? []), MODEL_FINALIZER]);
    return; // the update event brings the object back with the finalizer
  }

  const generation = model.metadata.generation ?? 0;
  const server = ctx.servers.get(namespace, model.spec.server);
  if (!server || server.metadata.deletionTimestamp) {
    await writeModelStatus(ctx, model, { replicas: 0, readyReplicas: 0, pods: [] }, {
      type: 'Ready',
      status: 'False',
      reason: 'ServerNotFound',
      message: `NereidServer ${model.spec.server} does not exist in namespace ${namespace}`,
    });
    return; // a NereidServer add event re-queues the models that name it
  }

  const rival = ctx.models
    .list(
      (m) =>
        m !== model &&
        m.metadata.namespace === namespace &&
        m.spec.server === model.spec.server &&
        !m.metadata.deletionTimestamp &&
        modelNameOf(m) === modelNameOf(model),
    )
    .find((m) => (m.metadata.creationTimestamp ?? '') < (model.metadata.creationTimestamp ?? '') || ((m.metadata.creationTimestamp ?? '') === (model.metadata.creationTimestamp ?? '') && (m.metadata.name ?? '') < (model.metadata.name ?? '')));
  if (rival) {
    await writeModelStatus(ctx, model, { replicas: 0, readyReplicas: 0, pods: [] }, {
      type: 'Ready',
      status: 'False',
      reason: 'NameConflict',
      message: `NereidModel ${rival.metadata.name} already deploys model ${modelNameOf(model)} on NereidServer ${model.spec.server}`,
    });
    return { requeueAfterMs: ctx.resyncMs };
  }

  let source: ResolvedSource;
  try {
    source = await resolveSource(ctx, model, server);
  } catch (err) {
    if (!(err instanceof SourceError)) throw err;
    await writeModelStatus(ctx, model, { replicas: 0, readyReplicas: 0, pods: model.status?.pods ?? [] }, {
      type: 'Ready',
      status: 'False',
      reason: err.reason,
      message: err.message,
    });
    return { requeueAfterMs: 30_000 };
  }

  const pods = readyPods(ctx, namespace, model.spec.server);
  const previous = new Map((model.status?.pods ?? []).map((p) => [p.pod, p]));
  const now = Date.now();
  const indexes = await Promise.all(
    pods.map(async (pod) => {
      try {
        return await new RepositoryApi(pod.status?.podIP ?? '', httpPortOf(pod)).index();
      } catch (err) {
        return err as Error;
      }
    }),
  );
  // The canary continues from the stored status, not the informer's copy, which may not have
  // this controller's last write yet (a step would be analysed or started twice).
  const stored = model.spec.canary
    ? ((await ctx.client.getOptional<NereidModel>(objectPath(RESOURCES.nereidModel, namespace, name)))?.status?.canary ?? undefined)
    : undefined;
  const canary = canaryRun(ctx, model, stored, indexes, source.loadName, new Date(now));
  const serving = canary.run ? servingOf(canary.run.status) : undefined;
  const wantedVersions = serving?.versions ?? model.spec.versions;
  const results = await Promise.all(
    pods.map(async (pod, i): Promise<ModelPodStatus> => {
      const api = new RepositoryApi(pod.status?.podIP ?? '', httpPortOf(pod));
      const prior = previous.get(pod.metadata.name ?? '');
      const base = { pod: pod.metadata.name ?? '', uid: pod.metadata.uid ?? '' };
      const index = indexes[i];
      if (index instanceof Error) {
        return { ...base, generation: prior?.uid === base.uid ? prior.generation : 0, state: 'UNREACHABLE', reason: index.message };
      }
      let state = modelState(index, source.loadName, wantedVersions);
      // Weights left on the pod by a canary are cleared once no canary runs.
      const clearWeights = !serving && prior?.uid === base.uid && prior.versionWeights !== undefined;
      const servingChanged =
        serving !== undefined && (!sameVersions(prior?.versions, serving.versions) || !sameWeights(prior?.versionWeights, serving.weights));
      const stale =
        !prior ||
        prior.uid !== base.uid ||
        prior.generation !== generation ||
        prior.sourceVersion !== source.sourceVersion ||
        servingChanged ||
        clearWeights ||
        state.state === 'NOT_LOADED' ||
        ((prior.loadError !== undefined || state.state !== 'READY') && now - Date.parse(prior.lastLoadTime ?? '0') > FAILED_LOAD_RETRY_MS);
      // A load that failed while an earlier copy still serves keeps reporting the failure until its retry.
      if (!stale && prior.loadError !== undefined) return prior;
      if (!stale) return { ...prior, state: state.state, ...(state.reason ? { reason: state.reason } : { reason: undefined }) };
      const request: LoadRequest = serving
        ? canaryRequest(source.request, serving)
        : clearWeights
          ? { ...source.request, versionWeights: {} }
          : source.request;
      let loadError: string | undefined;
      try {
        await api.load(source.loadName, request);
      } catch (err) {
        loadError = (err as Error).message;
      }
      try {
        state = modelState(await api.index(), source.loadName, wantedVersions);
      } catch (err) {
        state = { state: 'UNREACHABLE', reason: (err as Error).message };
      }
      if (loadError && state.state === 'READY') state = { state: 'UNAVAILABLE', reason: loadError };
      if (loadError && state.state !== 'READY') state = { state: state.state === 'NOT_LOADED' ? 'UNAVAILABLE' : state.state, reason: loadError };
      ctx.log.info('model loaded on pod', { model: key, pod: base.pod, state: state.state, reason: state.reason });
      return {
        ...base,
        generation,
        ...(source.sourceVersion ? { sourceVersion: source.sourceVersion } : {}),
        state: state.state,
        ...(state.reason ? { reason: state.reason } : {}),
        ...(loadError !== undefined ? { loadError } : {}),
        lastLoadTime: new Date(now).toISOString().replace(/\.\d{3}Z$/, 'Z'),
        ...(serving ? { versions: serving.versions, versionWeights: serving.weights } : {}),
        // A failed clear leaves the weights on the pod: keep them recorded so the next pass retries.
        ...(clearWeights && loadError !== undefined ? { versionWeights: prior.versionWeights } : {}),
      };
    }),
  );
  const clean = results.map((r) => Object.fromEntries(Object.entries(r).filter(([, v]) => v !== undefined)) as unknown as ModelPodStatus);
  const readyCount = clean.filter((r) => r.state === 'READY').length;
  const failing = clean.find((r) => r.state !== 'READY');
  const condition: Omit<Condition, 'lastTransitionTime'> =
    pods.length === 0
      ? { type: 'Ready', status: 'False', reason: 'NoReadyPods', message: `no pod of NereidServer ${model.spec.server} has ready containers` }
      : readyCount === pods.length
        ? { type: 'Ready', status: 'True', reason: 'Loaded', message: `READY on ${readyCount}/${pods.length} pods` }
        : {
            type: 'Ready',
            status: 'False',
            reason: failing?.state === 'UNREACHABLE' ? 'PodUnreachable' : 'LoadFailed',
            message: `READY on ${readyCount}/${pods.length} pods; ${failing?.pod}: ${failing?.state}${failing?.reason ? ': ' + failing.reason : ''}`,
          };
  let requeueAfterMs = condition.status === 'True' ? ctx.resyncMs : Math.min(10_000, ctx.resyncMs);
  let canaryFields: CanaryFields = canary.condition ? { condition: canary.condition, status: undefined } : { condition: undefined, status: undefined };
  if (canary.run && serving) {
    const applied =
      pods.length > 0 &&
      clean.every((r) => r.state === 'READY' && r.loadError === undefined && sameVersions(r.versions, serving.versions) && sameWeights(r.versionWeights, serving.weights));
    const loadError = clean.find((r) => r.loadError !== undefined && sameVersions(r.versions, serving.versions))?.loadError;
    if (canary.started) ctx.events.record(model, 'Normal', 'CanaryStarted', canary.run.status.message);
    const decision = await decideCanary(ctx, model, canary.run, { now: new Date(now), applied, loadError }, serverPods(ctx, namespace, model.spec.server));
    for (const e of decision.events) ctx.events.record(model, e.type, e.reason, e.message);
    if (decision.events.length > 0) ctx.log.info('canary', { model: key, phase: decision.status.phase, step: decision.status.step, weight: decision.status.weight, message: decision.status.message });
    canaryFields = { status: decision.status, condition: canaryCondition(decision.status) };
    if (decision.requeueAfterMs >= 0) requeueAfterMs = Math.min(requeueAfterMs, Math.max(50, decision.requeueAfterMs));
  }
  await writeModelStatus(ctx, model, { replicas: pods.length, readyReplicas: readyCount, pods: clean }, condition, canaryFields);
  ctx.enqueueGate(serverKey);
  ctx.enqueueServer(serverKey);
  return { requeueAfterMs };
}

/**
 * The load that serves a canary step: the model's own request with the step's versions and
 * weights. The versions replace the version policy of the load's config when it has one;
 * otherwise they go as the `version_policy` parameter, over the repository's config.pbtxt, so
 * that each reload of the pod's repository keeps both the file's settings and the step's versions.
 */
export function canaryRequest(request: LoadRequest, serving: { versions: number[]; weights: Record<string, number> }): LoadRequest {
  const policy = { specific: { versions: serving.versions } };
  if (request.config !== undefined) return { ...request, config: { ...request.config, version_policy: policy }, versionWeights: serving.weights };
  return { ...request, versionPolicy: policy, versionWeights: serving.weights };
}

const sameVersions = (a: number[] | undefined, b: number[]): boolean => a !== undefined && a.length === b.length && a.every((v, i) => v === b[i]);

function sameWeights(a: Record<string, number> | undefined, b: Record<string, number>): boolean {
  if (a === undefined) return false;
  const keys = Object.keys(b);
  return Object.keys(a).length === keys.length && keys.every((k) => a[k] === b[k]);
}

type CanaryConditionFields = Omit<Condition, 'lastTransitionTime' | 'observedGeneration'>;

/** status.canary and the Canary condition to write; both undefined: the model has no canary (both are removed). */
interface CanaryFields {
  status: CanaryStatus | undefined;
  condition: CanaryConditionFields | undefined;
}

/** A canary to drive this pass, or why spec.canary does not run (as the Canary condition). */
export interface CanaryResolution {
  run?: { plan: CanaryPlan; status: CanaryStatus };
  /** The run starts in this pass. */
  started?: boolean;
  condition?: CanaryConditionFields;
}

/**
 * The canary of spec.canary: its status continued from status.canary when it is the same run
 * (same canary and stable version), else a new run. The stable version is versions[0] or the
 * highest READY version in the pods' indexes other than the canary's.
 */
export function canaryRun(
  ctx: ControllerContext,
  model: NereidModel,
  previous: CanaryStatus | undefined,
  indexes: (IndexEntry[] | Error)[],
  loadName: string,
  now: Date,
): CanaryResolution {
  const spec = model.spec.canary;
  if (!spec) return {};
  const plan = canaryPlan(spec);
  const not = (reason: string, message: string): CanaryResolution => ({ condition: { type: CANARY_CONDITION, status: 'False', reason, message } });
  if (!ctx.prometheus) {
    return not('PrometheusNotConfigured', `canary version ${plan.version} waits: the operator has no Prometheus to analyse it (start it with --prometheus-url)`);
  }
  let stable = model.spec.versions?.[0];
  if (stable === undefined && previous?.version === plan.version) stable = previous.stableVersion;
  if (stable === undefined) {
    const served = indexes.flatMap((ix) => (ix instanceof Error ? [] : ix))
      .filter((e) => e.name === loadName && e.state === 'READY' && Number(e.version) !== plan.version)
      .map((e) => Number(e.version))
      .filter((v) => Number.isInteger(v) && v > 0);
    if (served.length === 0) {
      return not('WaitingForStable', `canary version ${plan.version} waits until a stable version of ${loadName} is READY (set versions to name it)`);
    }
    stable = Math.max(...served);
  }
  const problem = canaryPlanError(plan, stable);
  if (problem) return not('InvalidCanary', problem);
  if (sameRun(previous, plan, stable)) return { run: { plan, status: previous } };
  return { run: { plan, status: startCanary(plan, stable, now) }, started: true };
}

/** advanceCanary, with the step's Prometheus analysis when it is due. */
async function decideCanary(
  ctx: ControllerContext,
  model: NereidModel,
  run: { plan: CanaryPlan; status: CanaryStatus },
  input: CanaryInput,
  pods: Pod[],
): Promise<CanaryDecision> {
  const { plan, status } = run;
  if (!analysisDue(plan, status, input.now) || input.loadError !== undefined) return advanceCanary(plan, status, input);
  const windowSeconds = (input.now.getTime() - Date.parse(status.stepStartTime ?? '')) / 1000;
  const scope = {
    namespace: model.metadata.namespace ?? '',
    pods: pods.map((p) => p.metadata.name ?? ''),
    model: modelNameOf(model),
    stable: status.stableVersion,
    canary: status.version,
  };
  let samples;
  try {
    samples = await queryStep(ctx.prometheus!, scope, windowSeconds, input.now);
  } catch (err) {
    const message = `step ${status.step + 1} at ${status.weight}%: the analysis waits for Prometheus: ${(err as Error).message}`;
    ctx.log.warn('canary analysis failed; retrying', { model: `${scope.namespace}/${model.metadata.name}`, error: err });
    return { status: { ...status, message }, events: status.message === message ? [] : [{ type: 'Warning', reason: 'AnalysisError', message }], requeueAfterMs: RECHECK_MS };
  }
  const analysis = judgeStep(plan, status, samples, { now: input.now, windowSeconds, baselineP99Us: status.stableP99Us });
  return advanceCanary(plan, status, { ...input, analysis });
}

/**
 * Writes the status: `fields`, the Ready condition and, with `canary`, status.canary and the
 * Canary condition (status.canary removed without a run, the condition without a reason to show).
 * Without `canary` both are kept as they are.
 */
async function writeModelStatus(
  ctx: ControllerContext,
  model: NereidModel,
  fields: Pick<NereidModelStatus, 'replicas' | 'readyReplicas' | 'pods'>,
  ready: Omit<Condition, 'lastTransitionTime'>,
  canary?: CanaryFields,
): Promise<void> {
  let transition: Condition | undefined;
  const result = await updateStatus<NereidModel>(ctx.client, RESOURCES.nereidModel, model.metadata.namespace ?? '', model.metadata.name ?? '', (latest) => {
    const generation = latest.metadata.generation ?? 0;
    let conditions = structuredClone(latest.status?.conditions ?? []);
    const next = { ...ready, observedGeneration: generation };
    transition = setCondition(conditions, next) ? { ...next, lastTransitionTime: '' } : undefined;
    let canaryStatus = latest.status?.canary;
    if (canary) {
      canaryStatus = canary.status;
      if (canary.condition) setCondition(conditions, { ...canary.condition, observedGeneration: generation });
      else conditions = conditions.filter((c) => c.type !== CANARY_CONDITION);
    }
    return {
      observedGeneration: generation,
      ...fields,
      ready: `${fields.readyReplicas ?? 0}/${fields.replicas ?? 0}`,
      conditions,
      ...(canaryStatus ? { canary: canaryStatus } : {}),
    };
  });
  if (transition && result.object) {
    ctx.events.record(result.object, transition.status === 'True' ? 'Normal' : 'Warning', transition.reason, transition.message);
  }
}

async function unloadEverywhere(ctx: ControllerContext, model: NereidModel): Promise<void> {
  const name = modelNameOf(model);
  const sameModel = ctx.models.list(
    (m) =>
      m !== model &&
      m.metadata.namespace === model.metadata.namespace &&
      m.spec.server === model.spec.server &&
      !m.metadata.deletionTimestamp &&
      modelNameOf(m) === name,
  );
  if (sameModel.length > 0) return; // another NereidModel deploys this model: it stays loaded
  const pods = readyPods(ctx, model.metadata.namespace ?? '', model.spec.server);
  await Promise.all(
    pods.map(async (pod) => {
      try {
        await new RepositoryApi(pod.status?.podIP ?? '', httpPortOf(pod), { timeoutMs: 30_000 }).unload(name);
      } catch (err) {
        ctx.log.warn('unload failed; the pod keeps the model until it restarts', { model: name, pod: pod.metadata.name, error: err });
      }
    }),
  );
  if (pods.length > 0) ctx.events.record(model, 'Normal', 'Unloaded', `unloaded ${name} from ${pods.length} pods`);
}

/**
 * Sets `nereid.dev/models-ready` on every pod of a server: True when its containers are ready and
 * each NereidModel of the server reports READY at its current generation on that pod, else False
 * naming those that are not (a pod whose containers stopped being ready gets False, so that a
 * restarted server process is not Ready before its models are loaded again). Writes only changed conditions (a strategic merge patch of pods/status keyed by
 * type keeps the kubelet's conditions).
 */
export async function reconcileGate(ctx: ControllerContext, key: string): Promise<ReconcileResult> {
  const [namespace, serverName] = key.split('/');
  const models = ctx.models.list(
    (m) => m.metadata.namespace === namespace && m.spec.server === serverName && !m.metadata.deletionTimestamp,
  );
  for (const pod of serverPods(ctx, namespace, serverName)) {
    const missing: string[] = [];
    if (!containersReady(pod)) missing.push('all models (the containers are not ready: a restarted server loads them again)');
    else for (const model of models) {
      const entry = model.status?.pods?.find((p) => p.uid === pod.metadata.uid);
      const current = entry && entry.generation === (model.metadata.generation ?? 0);
      if (!current || entry.state !== 'READY') missing.push(`${modelNameOf(model)} (${entry?.state ?? 'not loaded yet'})`);
    }
    const wanted: PodCondition =
      missing.length === 0
        ? { type: MODELS_READY_CONDITION, status: 'True', reason: 'ModelsReady', message: `${models.length} models READY` }
        : { type: MODELS_READY_CONDITION, status: 'False', reason: 'ModelsNotReady', message: `not READY: ${missing.join(', ')}` };
    const current = pod.status?.conditions?.find((c) => c.type === MODELS_READY_CONDITION);
    if (current && current.status === wanted.status && current.message === wanted.message) continue;
    const lastTransitionTime =
      current?.status === wanted.status && current.lastTransitionTime ? current.lastTransitionTime : new Date().toISOString().replace(/\.\d{3}Z$/, 'Z');
    try {
      await ctx.client.patch(objectPath(RESOURCES.pod, namespace, pod.metadata.name ?? '', 'status'), 'strategic', {
        status: { conditions: [{ ...wanted, lastTransitionTime }] },
      });
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }
}

