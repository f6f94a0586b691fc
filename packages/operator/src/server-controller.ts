/**
 * NereidServer reconciliation: server-side apply of the owned Deployment, Service,
 * PodDisruptionBudget (and ServiceMonitor where that API is served, and the
 * HorizontalPodAutoscaler of autoscaling mode hpa), then status from the Deployment. Owned
 * objects carry a controller ownerReference, so deleting the NereidServer lets the garbage
 * collector delete them; a change to one of them (drift) re-queues its owner and
 * the next apply takes the operator's fields back.
 */
import type { KubeObject } from './kube-client.js';
import { FIELD_MANAGER, RESOURCES, isNotFound, objectPath } from './kube-client.js';
import {
  buildDeployment,
  buildHorizontalPodAutoscaler,
  buildPodDisruptionBudget,
  buildService,
  buildServiceMonitor,
  initialReplicas,
} from './builders.js';
import type { ControllerContext } from './context.js';
import { parseQuantity } from './autoscaler.js';
import { updateStatus } from './status.js';
import type { ReconcileResult } from './work-queue.js';
import type { Condition, NereidServer, NereidServerAutoscalingStatus, NereidServerStatus } from './types.js';
import { setCondition } from './types.js';

interface DeploymentStatus {
  observedGeneration?: number;
  replicas?: number;
  updatedReplicas?: number;
  readyReplicas?: number;
  availableReplicas?: number;
  conditions?: { type: string; status: string; reason?: string; message?: string }[];
}

export async function reconcileServer(ctx: ControllerContext, key: string): Promise<ReconcileResult> {
  const [namespace, name] = key.split('/');
  const server = ctx.servers.get(namespace, name);
  if (!server || server.metadata.deletionTimestamp) return;

  const deploymentPath = objectPath(RESOURCES.deployment, namespace, name);
  const body = buildDeployment(server, ctx.serverImage);
  if (server.spec.autoscaling) await handOverReplicas(ctx, server, deploymentPath, body);
  const deployment = await ctx.client.apply<DeploymentObject>(deploymentPath, body);
  await ctx.client.apply(objectPath(RESOURCES.service, namespace, name), buildService(server));
  await ctx.client.apply(objectPath(RESOURCES.pdb, namespace, name), buildPodDisruptionBudget(server));
  if (await ctx.serviceMonitorsServed()) {
    await ctx.client.apply(objectPath(RESOURCES.serviceMonitor, namespace, name), buildServiceMonitor(server));
  }
  const hpaPath = objectPath(RESOURCES.hpa, namespace, name);
  let hpa: HpaObject | undefined;
  if (server.spec.autoscaling?.mode === 'hpa') {
    hpa = await ctx.client.apply<HpaObject>(hpaPath, buildHorizontalPodAutoscaler(server));
  } else if (ctx.hpas.get(namespace, name)) {
    try {
      await ctx.client.delete(hpaPath);
    } catch (err) {
      if (!isNotFound(err)) throw err;
    }
  }

  const transitions: Condition[] = [];
  const result = await updateStatus<NereidServer>(ctx.client, RESOURCES.nereidServer, namespace, name, (latest) => {
    transitions.length = 0;
    return serverStatus(ctx, latest, deployment, transitions, hpa);
  });
  if (result.object) {
    for (const c of transitions) {
      const warning = (c.type === 'Degraded' && c.status === 'True') || (c.type === 'Ready' && c.status === 'False');
      ctx.events.record(result.object, warning ? 'Warning' : 'Normal', c.reason, c.message);
    }
  }
  const ready = result.object?.status?.conditions?.find((c) => c.type === 'Ready')?.status === 'True';
  return { requeueAfterMs: ready ? ctx.resyncMs : Math.min(10_000, ctx.resyncMs) };
}

type DeploymentObject = KubeObject & { spec: { replicas: number }; status?: DeploymentStatus };

interface HpaObject extends KubeObject {
  status?: {
    currentReplicas?: number;
    desiredReplicas?: number;
    lastScaleTime?: string;
    currentMetrics?: { type: string; pods?: { current?: { averageValue?: string } } }[];
    conditions?: { type: string; status: 'True' | 'False' | 'Unknown'; reason?: string; message?: string; lastTransitionTime?: string }[];
  };
}

/** The field manager that holds spec.replicas while ownership moves from the operator's apply to an autoscaler. */
export const REPLICAS_HANDOVER_MANAGER = 'nereid-operator-autoscaling';

const ownsReplicas = (deployment: KubeObject): boolean =>
  ((deployment.metadata.managedFields ?? []) as { manager?: string; operation?: string; fieldsV1?: { 'f:spec'?: Record<string, unknown> } }[]).some(
    (f) => f.manager === FIELD_MANAGER && f.operation === 'Apply' && f.fieldsV1?.['f:spec']?.['f:replicas'] !== undefined,
  );

/**
 * Hands spec.replicas of an autoscaled Deployment from the operator's apply to the autoscaler
 * without a dip: a Deployment that does not exist yet is created with the initial count; while
 * the operator's apply still owns the field, a second manager applies the current count first,
 * so that the apply without replicas that follows leaves the value in place (an apply that drops
 * a field it alone owns resets it: replicas would fall to 1). The autoscaler's writes through the
 * scale subresource then take the field from that manager.
 */
async function handOverReplicas(ctx: ControllerContext, server: NereidServer, path: string, body: KubeObject): Promise<void> {
  let existing = await ctx.client.getOptional<DeploymentObject>(path);
  if (!existing) {
    existing = await ctx.client.apply<DeploymentObject>(path, { ...body, spec: { ...(body.spec as object), replicas: initialReplicas(server) } });
  }
  if (!ownsReplicas(existing)) return;
  const { minReplicas = 1, maxReplicas = Number.MAX_SAFE_INTEGER } = server.spec;
  const replicas = Math.min(Math.max(existing.spec.replicas, minReplicas), maxReplicas);
  await ctx.client.apply(
    path,
    { apiVersion: 'apps/v1', kind: 'Deployment', metadata: { name: server.metadata.name, namespace: server.metadata.namespace }, spec: { replicas } },
    REPLICAS_HANDOVER_MANAGER,
  );
}

/** status.autoscaling of mode hpa: the HorizontalPodAutoscaler's own status. */
function hpaStatus(server: NereidServer, hpa: HpaObject): NereidServerAutoscalingStatus {
  const autoscaling = server.spec.autoscaling!;
  const hs = hpa.status ?? {};
  const average = hs.currentMetrics?.find((m) => m.type === 'Pods')?.pods?.current?.averageValue;
  const parsed = average === undefined ? undefined : parseQuantity(average);
  return {
    mode: 'hpa',
    metric: autoscaling.metric,
    target: String(autoscaling.target),
    hpa: hpa.metadata.name,
    ...(hs.currentReplicas !== undefined ? { currentReplicas: hs.currentReplicas } : {}),
    ...(hs.desiredReplicas !== undefined ? { desiredReplicas: hs.desiredReplicas } : {}),
    ...(parsed !== undefined ? { currentAverage: parsed } : {}),
    ...(hs.lastScaleTime ? { lastScaleTime: hs.lastScaleTime } : {}),
    conditions: (hs.conditions ?? []).map((c) => ({
      type: c.type,
      status: c.status,
      reason: c.reason ?? '',
      message: c.message ?? '',
      lastTransitionTime: c.lastTransitionTime ?? new Date().toISOString().replace(/\.\d{3}Z$/, 'Z'),
    })),
  };
}

function serverStatus(
  ctx: ControllerContext,
  server: NereidServer,
  deployment: DeploymentObject,
  transitions: Condition[],
  hpa: HpaObject | undefined,
): NereidServerStatus {
  const generation = server.metadata.generation ?? 0;
  const desired = deployment.spec.replicas;
  const ds = deployment.status ?? {};
  const ready = ds.readyReplicas ?? 0;
  const updated = ds.updatedReplicas ?? 0;
  const total = ds.replicas ?? 0;
  const rolledOut = (ds.observedGeneration ?? 0) >= (deployment.metadata.generation ?? 0) && updated >= desired && total <= desired;
  const failure = ds.conditions?.find(
    (c) => (c.type === 'ReplicaFailure' && c.status === 'True') || (c.type === 'Progressing' && c.status === 'False'),
  );
  const conditions = structuredClone(server.status?.conditions ?? []);
  const set = (c: Omit<Condition, 'lastTransitionTime'>): void => {
    const copy = { ...c, observedGeneration: generation };
    if (setCondition(conditions, copy)) transitions.push({ ...copy, lastTransitionTime: '' });
  };
  set(
    ready >= desired && rolledOut
      ? { type: 'Ready', status: 'True', reason: 'AllReplicasReady', message: `${ready}/${desired} replicas ready` }
      : { type: 'Ready', status: 'False', reason: 'ReplicasNotReady', message: `${ready}/${desired} replicas ready` },
  );
  set(
    rolledOut
      ? { type: 'Progressing', status: 'False', reason: 'RolloutComplete', message: `${updated} replicas up to date` }
      : { type: 'Progressing', status: 'True', reason: 'RollingOut', message: `${updated}/${desired} replicas updated, ${total} running` },
  );
  set(
    failure
      ? { type: 'Degraded', status: 'True', reason: failure.reason ?? failure.type, message: failure.message ?? '' }
      : { type: 'Degraded', status: 'False', reason: 'AsExpected', message: 'the Deployment reports no failure' },
  );
  const models = ctx.models
    .list((m) => m.metadata.namespace === server.metadata.namespace && m.spec.server === server.metadata.name && !m.metadata.deletionTimestamp)
    .map((m) => ({ name: m.spec.modelName ?? m.metadata.name ?? '', readyReplicas: m.status?.readyReplicas ?? 0 }))
    .sort((a, b) => a.name.localeCompare(b.name));
  // Mode operator: the autoscaler writes status.autoscaling itself; it is kept as it is.
  const mode = server.spec.autoscaling?.mode;
  const autoscaling =
    mode === 'hpa' && hpa ? hpaStatus(server, hpa) : mode === 'operator' && server.status?.autoscaling?.mode === 'operator' ? server.status.autoscaling : undefined;
  return { observedGeneration: generation, replicas: total, readyReplicas: ready, conditions, models, ...(autoscaling ? { autoscaling } : {}) };
}
