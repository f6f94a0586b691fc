import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { historyOf, podLabelMatchers, podMetricQuery } from './autoscaling-controller.js';

describe('autoscaling queries', () => {
  it("selects the pods by name as prometheus-adapter's LabelMatchers do, regex characters escaped", () => {
    assert.equal(podLabelMatchers('ml', ['fleet-7c9-abc', 'fleet-7c9-def']), 'namespace="ml",pod=~"fleet-7c9-abc|fleet-7c9-def"');
    assert.equal(podLabelMatchers('ml', ['a.b']), 'namespace="ml",pod=~"a\\\\.b"');
  });

  it('reads each metric per pod over the window', () => {
    const m = 'namespace="ml",pod=~"p"';
    assert.equal(
      podMetricQuery('inferenceRate', m, 'pod', 60),
      'sum by (pod) (rate({__name__=~"nv_inference_request_success|nv_inference_request_failure",namespace="ml",pod=~"p"}[60s]))',
    );
    assert.equal(
      podMetricQuery('queueTime', m, 'pod', 10),
      'sum by (pod) (rate(nv_inference_queue_duration_us{namespace="ml",pod=~"p"}[10s])) / clamp_min(sum by (pod) (rate(nv_inference_request_success{namespace="ml",pod=~"p"}[10s])), 0.001)',
    );
    assert.equal(podMetricQuery('pendingRequests', m, 'pod', 30), 'sum by (pod) (avg_over_time(nv_inference_pending_request_count{namespace="ml",pod=~"p"}[30s]))');
  });

  it('reads the history back from status', () => {
    assert.deepEqual(historyOf(undefined), { recommendations: [], scaleUpEvents: [], scaleDownEvents: [] });
    assert.deepEqual(
      historyOf({
        mode: 'operator',
        metric: 'inferenceRate',
        target: '10',
        recommendations: [{ time: '2026-01-01T00:00:01.250Z', replicas: 3 }],
        scaleUpEvents: [{ time: '2026-01-01T00:00:02.000Z', change: 2 }],
      }),
      { recommendations: [{ time: Date.parse('2026-01-01T00:00:01.250Z'), replicas: 3 }], scaleUpEvents: [{ time: Date.parse('2026-01-01T00:00:02Z'), change: 2 }], scaleDownEvents: [] },
    );
  });
});
