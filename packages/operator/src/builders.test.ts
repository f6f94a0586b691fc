/**
 * The objects a NereidServer owns: the contract's pod shape (container `nereid`, `serve`
 * arguments, named ports, probes, readiness gate, preStop drain), the rollout strategy, stable
 * selector labels, controller ownerReferences, S3 credentials from a Secret, and podTemplate
 * overrides merged by name.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  buildDeployment,
  buildHorizontalPodAutoscaler,
  buildPodDisruptionBudget,
  initialReplicas,
  buildService,
  buildServiceMonitor,
  mergeOver,
  selectorLabels,
  serverArgs,
} from './builders.js';
import type { NereidServer } from './types.js';

type Json = Record<string, any>;

const server = (spec: Partial<NereidServer['spec']> = {}): NereidServer => ({
  apiVersion: 'nereid.dev/v1alpha1',
  kind: 'NereidServer',
  metadata: { name: 'fleet', namespace: 'ml', uid: 'uid-1', generation: 3 },
  spec: { modelRepository: { uri: 's3://models/prod' }, ...spec },
});

describe('buildDeployment', () => {
  it('starts nereid serve with the repository, explicit control, polling and the ports', () => {
    const d = buildDeployment(server({ ports: { http: 9000, grpc: 9001, metrics: 9002 }, serverArgs: ['--log-verbose=1'] })) as Json;
    const c = d.spec.template.spec.containers[0];
    assert.equal(c.name, 'nereid');
    assert.deepEqual(c.command, ['nereid']);
    assert.deepEqual(c.args, [
      'serve',
      '--model-repository=s3://models/prod',
      '--model-control-mode=explicit',
      '--repository-poll-secs=10',
      '--http-port=9000',
      '--grpc-port=9001',
      '--metrics-port=9002',
      '--metrics-config=histogram_latencies=true',
      '--log-verbose=1',
    ]);
    assert.deepEqual(
      c.ports.map((p: Json) => [p.name, p.containerPort]),
      [
        ['http', 9000],
        ['grpc', 9001],
        ['metrics', 9002],
      ],
    );
    assert.deepEqual(c.readinessProbe.httpGet, { path: '/v2/health/ready', port: 'http' });
    assert.deepEqual(c.livenessProbe.httpGet, { path: '/v2/health/live', port: 'http' });
    assert.deepEqual(c.lifecycle.preStop, { sleep: { seconds: 5 } });
    assert.deepEqual(d.spec.template.spec.readinessGates, [{ conditionType: 'nereid.dev/models-ready' }]);
    assert.equal(d.spec.template.spec.terminationGracePeriodSeconds, 35);
    assert.deepEqual(d.spec.strategy, { type: 'RollingUpdate', rollingUpdate: { maxUnavailable: 0, maxSurge: 1 } });
  });

  it("runs the spec's image, else the operator's default image", () => {
    const image = (d: unknown): string => (d as Json).spec.template.spec.containers[0].image;
    assert.equal(image(buildDeployment(server())), 'localhost/nereid:0.1.0');
    assert.equal(image(buildDeployment(server(), 'registry.example/nereid:2')), 'registry.example/nereid:2');
    assert.equal(image(buildDeployment(server({ image: 'mine:1' }), 'registry.example/nereid:2')), 'mine:1');
  });

  it('polls only s3 repositories by default, and as often as pollSeconds says', () => {
    assert.ok(serverArgs(server({ modelRepository: { uri: '/srv/models' } })).includes('--repository-poll-secs=0'));
    assert.ok(serverArgs(server({ pollSeconds: 3 })).includes('--repository-poll-secs=3'));
  });

  it('keeps the selector stable across spec changes and labels everything', () => {
    const a = buildDeployment(server()) as Json;
    const b = buildDeployment(server({ replicas: 5, image: 'nereid:next', podTemplate: { metadata: { labels: { team: 'a' } } } })) as Json;
    assert.deepEqual(a.spec.selector, b.spec.selector);
    assert.deepEqual(a.spec.selector.matchLabels, selectorLabels(server()));
    assert.equal(b.spec.template.metadata.labels.team, 'a');
    for (const labels of [a.metadata.labels, a.spec.template.metadata.labels]) {
      assert.equal(labels['app.kubernetes.io/name'], 'nereid');
      assert.equal(labels['app.kubernetes.io/instance'], 'fleet');
      assert.equal(labels['app.kubernetes.io/managed-by'], 'nereid-operator');
      assert.equal(labels['app.kubernetes.io/component'], 'server');
    }
    assert.equal(b.spec.replicas, 5);
  });

  it('does not let podTemplate labels replace the selector labels', () => {
    const d = buildDeployment(server({ podTemplate: { metadata: { labels: { 'app.kubernetes.io/instance': 'other' } } } })) as Json;
    assert.equal(d.spec.template.metadata.labels['app.kubernetes.io/instance'], 'fleet');
  });

  it('makes the NereidServer the controller owner', () => {
    for (const o of [buildDeployment(server()), buildService(server()), buildPodDisruptionBudget(server()), buildServiceMonitor(server())]) {
      assert.deepEqual(o.metadata.ownerReferences, [
        { apiVersion: 'nereid.dev/v1alpha1', kind: 'NereidServer', name: 'fleet', uid: 'uid-1', controller: true, blockOwnerDeletion: true },
      ]);
      assert.equal(o.metadata.namespace, 'ml');
      assert.equal(o.metadata.name, 'fleet');
    }
  });

  it('takes S3 credentials from the Secret and sets region and endpoint', () => {
    const d = buildDeployment(
      server({ modelRepository: { uri: 's3://m/p', s3: { credentialsSecret: 'creds', region: 'eu-west-1', endpoint: 'http://s3:8333' } } }),
    ) as Json;
    const env = d.spec.template.spec.containers[0].env as Json[];
    assert.deepEqual(env.find((e) => e.name === 'AWS_ACCESS_KEY_ID')!.valueFrom, { secretKeyRef: { name: 'creds', key: 'AWS_ACCESS_KEY_ID' } });
    assert.deepEqual(env.find((e) => e.name === 'AWS_SESSION_TOKEN')!.valueFrom, {
      secretKeyRef: { name: 'creds', key: 'AWS_SESSION_TOKEN', optional: true },
    });
    assert.equal(env.find((e) => e.name === 'AWS_REGION')!.value, 'eu-west-1');
    assert.equal(env.find((e) => e.name === 'AWS_ENDPOINT_URL_S3')!.value, 'http://s3:8333');
  });

  it('mounts a volume repository read-only at /models', () => {
    const d = buildDeployment(server({ modelRepository: { volume: { hostPath: { path: '/data/models' } } } })) as Json;
    const spec = d.spec.template.spec;
    assert.deepEqual(spec.volumes, [{ name: 'model-repository', hostPath: { path: '/data/models' } }]);
    assert.deepEqual(spec.containers[0].volumeMounts, [{ name: 'model-repository', mountPath: '/models', readOnly: true }]);
    assert.ok(spec.containers[0].args.includes('--model-repository=/models'));
  });

  it('merges podTemplate.spec over the generated spec by name', () => {
    const d = buildDeployment(
      server({
        podTemplate: {
          spec: {
            nodeSelector: { gpu: 'yes' },
            containers: [{ name: 'nereid', env: [{ name: 'EXTRA', value: '1' }] }, { name: 'sidecar', image: 'busybox' }],
          },
        },
      }),
    ) as Json;
    const spec = d.spec.template.spec;
    assert.deepEqual(spec.nodeSelector, { gpu: 'yes' });
    assert.equal(spec.containers.length, 2);
    assert.equal(spec.containers[0].name, 'nereid');
    assert.ok(spec.containers[0].readinessProbe, 'the generated fields survive');
    assert.deepEqual(spec.containers[0].env, [{ name: 'EXTRA', value: '1' }]);
    assert.equal(spec.containers[1].image, 'busybox');
  });

  it('merges lists of named items and replaces other lists', () => {
    assert.deepEqual(mergeOver({ a: [{ name: 'x', v: 1 }] }, { a: [{ name: 'x', w: 2 }, { name: 'y' }] }), {
      a: [{ name: 'x', v: 1, w: 2 }, { name: 'y' }],
    });
    assert.deepEqual(mergeOver({ a: [1, 2] }, { a: [3] }), { a: [3] });
    assert.deepEqual(mergeOver({ a: 1, b: { c: 1 } }, { b: { d: 2 } }), { a: 1, b: { c: 1, d: 2 } });
  });
});

describe('buildService, buildPodDisruptionBudget, buildServiceMonitor', () => {
  it('exposes the three named ports and Prometheus annotations', () => {
    const s = buildService(server({ serviceType: 'NodePort' })) as Json;
    assert.equal(s.spec.type, 'NodePort');
    assert.deepEqual(
      s.spec.ports.map((p: Json) => [p.name, p.port, p.targetPort]),
      [
        ['http', 8000, 'http'],
        ['grpc', 8001, 'grpc'],
        ['metrics', 8002, 'metrics'],
      ],
    );
    assert.deepEqual(s.spec.selector, selectorLabels(server()));
    assert.equal(s.metadata.annotations['prometheus.io/scrape'], 'true');
    assert.equal(s.metadata.annotations['prometheus.io/port'], '8002');
  });

  it('defaults the budget to maxUnavailable 1 and takes either form', () => {
    assert.equal((buildPodDisruptionBudget(server()) as Json).spec.maxUnavailable, 1);
    assert.deepEqual((buildPodDisruptionBudget(server({ podDisruptionBudget: { minAvailable: '50%' } })) as Json).spec.minAvailable, '50%');
    assert.equal((buildPodDisruptionBudget(server({ podDisruptionBudget: { minAvailable: 2 } })) as Json).spec.maxUnavailable, undefined);
  });

  it('scrapes the metrics port', () => {
    assert.deepEqual((buildServiceMonitor(server()) as Json).spec.endpoints, [{ port: 'metrics', path: '/metrics', interval: '15s' }]);
  });
});

describe('autoscaling', () => {
  const autoscaling = { mode: 'hpa' as const, metric: 'inferenceRate' as const, target: 20 };

  it('leaves replicas out of an autoscaled Deployment (the autoscaler owns the field)', () => {
    assert.equal((buildDeployment(server({ replicas: 3 })) as Json).spec.replicas, 3);
    assert.equal('replicas' in (buildDeployment(server({ replicas: 3, maxReplicas: 5, autoscaling })) as Json).spec, false);
  });

  it('starts an autoscaled Deployment at spec.replicas within the bounds', () => {
    assert.equal(initialReplicas(server({ replicas: 3, minReplicas: 2, maxReplicas: 5 })), 3);
    assert.equal(initialReplicas(server({ minReplicas: 2, maxReplicas: 5 })), 2);
    assert.equal(initialReplicas(server({ replicas: 9, maxReplicas: 5 })), 5);
  });

  it('builds an autoscaling/v2 HPA on the Pods metric with behavior and tolerance', () => {
    const hpa = buildHorizontalPodAutoscaler(
      server({
        minReplicas: 2,
        maxReplicas: 6,
        autoscaling: { ...autoscaling, metric: 'pendingRequests', target: '500m', tolerance: 0.05, behavior: { scaleDown: { stabilizationWindowSeconds: 30 } } },
      }),
    ) as Json;
    assert.equal(hpa.apiVersion, 'autoscaling/v2');
    assert.equal(hpa.kind, 'HorizontalPodAutoscaler');
    assert.equal(hpa.metadata.name, 'fleet');
    assert.equal(hpa.metadata.ownerReferences[0].controller, true);
    assert.deepEqual(hpa.spec, {
      scaleTargetRef: { apiVersion: 'apps/v1', kind: 'Deployment', name: 'fleet' },
      minReplicas: 2,
      maxReplicas: 6,
      metrics: [{ type: 'Pods', pods: { metric: { name: 'nereid_pending_requests' }, target: { type: 'AverageValue', averageValue: '500m' } } }],
      behavior: { scaleUp: { tolerance: '0.05' }, scaleDown: { stabilizationWindowSeconds: 30, tolerance: '0.05' } },
    });
    const plain = buildHorizontalPodAutoscaler(server({ maxReplicas: 3, autoscaling })) as Json;
    assert.equal(plain.spec.minReplicas, 1);
    assert.equal(plain.spec.metrics[0].pods.target.averageValue, '20');
    assert.equal('behavior' in plain.spec, false);
  });
});
