/**
 * NereidServer reconciliation: server-side apply of the owned Deployment, Service,
 * PodDisruptionBudget (and ServiceMonitor where that API is served), then status from the
 * Deployment. Owned objects carry a controller ownerReference, so deleting the NereidServer
 * lets the garbage collector delete them; a change to one of them (drift) re-queues its owner and
 * the next apply takes the operator's fields back.
 */
import type { KubeObject } from './kube-client.js';
import { RESOURCES, objectPath } from './kube-client.js';
import { buildDeployment, buildPodDisruptionBudget, buildService, buildServiceMonitor } from './builders.js';
import type { ControllerContext } from './context.js';
import { updateStatus } from './status.js';
import type { ReconcileResult } from './work-queue.js';
import type { Condition, NereidServer, NereidServerStatus } from './types.js';
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

  const deployment = await ctx.client.apply<KubeObject & { spec: { replicas: number }; status?: DeploymentStatus }>(
    objectPath(RESOURCES.deployment, namespace, name),
    buildDeployment(server, ctx.serverImage),
  );
  await ctx.client.apply(objectPath(RESOURCES.service, namespace, name), buildService(server));
  await ctx.client.apply(objectPath(RESOURCES.pdb, namespace, name), buildPodDisruptionBudget(server));
  if (await ctx.serviceMonitorsServed()) {
    await ctx.client.apply(objectPath(RESOURCES.serviceMonitor, namespace, name), buildServiceMonitor(server));
  }

  const transitions: Condition[] = [];
  const result = await updateStatus<NereidServer>(ctx.client, RESOURCES.nereidServer, namespace, name, (latest) => {
    transitions.length = 0;
    return serverStatus(ctx, latest, deployment, transitions);
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

function serverStatus(
  ctx: ControllerContext,
  server: NereidServer,
  deployment: KubeObject & { spec: { replicas: number }; status?: DeploymentStatus },
  transitions: Condition[],
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
  return { observedGeneration: generation, replicas: total, readyReplicas: ready, conditions, models };
}
