import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AutoscalerHistory, Behavior, DecisionInput, PodSample } from './autoscaler.js';
import { DEFAULT_BEHAVIOR, decide, emptyHistory, metricReplicas, parseQuantity, resolveBehavior } from './autoscaler.js';

const T0 = Date.parse('2026-01-01T00:00:00Z');
const s = (seconds: number): number => T0 + seconds * 1000;
const ready = (...values: number[]): PodSample[] => values.map((value, i) => ({ pod: `p${i}`, ready: true, value }));

function input(over: Partial<DecisionInput>): DecisionInput {
  return {
    now: T0,
    currentReplicas: 1,
    minReplicas: 1,
    maxReplicas: 100,
    target: 10,
    tolerance: 0.1,
    behavior: resolveBehavior(undefined),
    pods: ready(10),
    metric: 'inferenceRate',
    ...over,
  };
}

/** No stabilisation either way and no rate limits: the replica calculation alone. */
const free: Behavior = resolveBehavior({
  scaleUp: { stabilizationWindowSeconds: 0, policies: [{ type: 'Percent', value: 10000, periodSeconds: 1 }] },
  scaleDown: { stabilizationWindowSeconds: 0, policies: [{ type: 'Percent', value: 100, periodSeconds: 1 }] },
});

describe('parseQuantity', () => {
  it('reads Kubernetes quantities and rejects what is not one', () => {
    assert.equal(parseQuantity('20'), 20);
    assert.equal(parseQuantity(20), 20);
    assert.equal(parseQuantity('500m'), 0.5);
    assert.equal(parseQuantity('1.5k'), 1500);
    assert.equal(parseQuantity('2Ki'), 2048);
    assert.equal(parseQuantity('1e3'), 1000);
    assert.equal(parseQuantity('0'), undefined);
    assert.equal(parseQuantity('-3'), undefined);
    assert.equal(parseQuantity('ten'), undefined);
    assert.equal(parseQuantity('5 rps'), undefined);
  });
});

describe('HPA replica calculation (Pods metric, AverageValue target)', () => {
  it("doubles and halves as the Kubernetes docs' example says (200m and 50m against 100m)", () => {
    assert.deepEqual(metricReplicas(ready(0.2, 0.2, 0.2, 0.2), 4, 0.1, 0.1), { replicas: 8, average: 0.2, ratio: 2 });
    assert.deepEqual(metricReplicas(ready(0.05, 0.05, 0.05, 0.05), 4, 0.1, 0.1), { replicas: 2, average: 0.05, ratio: 0.5 });
  });

  it('keeps the count within tolerance and scales at its edge', () => {
    assert.equal((metricReplicas(ready(11, 10.9), 2, 10, 0.1) as { replicas: number }).replicas, 2);
    assert.equal((metricReplicas(ready(9, 9), 2, 10, 0.1) as { replicas: number }).replicas, 2);
    assert.equal((metricReplicas(ready(12, 12), 2, 10, 0.1) as { replicas: number }).replicas, 3);
    assert.equal((metricReplicas(ready(11, 11), 2, 10, 0.05) as { replicas: number }).replicas, 3);
  });

  it('counts a pod without a sample as 0 on a scale-up and as the target on a scale-down', () => {
    const up = [...ready(30, 30), { pod: 'new', ready: true }];
    // ratio 3 over the two with samples; with the third at 0: average 20, ratio 2 → ceil(2·3) = 6.
    assert.deepEqual(metricReplicas(up, 3, 10, 0.1), { replicas: 6, average: 30, ratio: 3 });
    const down = [...ready(2, 2), { pod: 'new', ready: true }];
    // ratio 0.2; with the third at the target: average 14/3, ratio 0.467 → ceil(1.4) = 2.
    assert.deepEqual(metricReplicas(down, 3, 10, 0.1), { replicas: 2, average: 2, ratio: 0.2 });
  });

  it('counts pods that are not ready as 0 on a scale-up and leaves them out on a scale-down', () => {
    const starting = [...ready(30, 30), { pod: 's1', ready: false, value: 0 }, { pod: 's2', ready: false, pending: true }];
    // average of 30, 30, 0, 0 = 15 → ratio 1.5 → ceil(1.5·4) = 6.
    assert.equal((metricReplicas(starting, 4, 10, 0.1) as { replicas: number }).replicas, 6);
    const idle = [...ready(2, 2), { pod: 's1', ready: false, value: 9 }];
    // ratio 0.2 over the two ready pods → ceil(0.2·2) = 1.
    assert.equal((metricReplicas(idle, 3, 10, 0.1) as { replicas: number }).replicas, 1);
  });

  it('changes nothing when filling in the missing pods flips the direction or lands in tolerance', () => {
    const flip = [...ready(12), { pod: 'a', ready: true }, { pod: 'b', ready: true }, { pod: 'c', ready: true }];
    assert.deepEqual(metricReplicas(flip, 4, 10, 0.1), { replicas: 4, average: 12, ratio: 1.2, heldByUnsampled: true });
    const tolerance = [...ready(21), { pod: 'a', ready: true }];
    // 21 and 0: average 10.5, ratio 1.05 → within tolerance.
    assert.deepEqual(metricReplicas(tolerance, 2, 10, 0.1), { replicas: 2, average: 21, ratio: 2.1, heldByUnsampled: true });
    const d = decide(input({ currentReplicas: 2, pods: tolerance }), emptyHistory());
    assert.equal(d.reason, 'the pods without samples or not ready hold the count');
  });

  it('reports an error when no pod has a usable sample', () => {
    assert.ok('error' in metricReplicas([{ pod: 'a', ready: true }, { pod: 'b', ready: false, value: 3 }], 2, 10, 0.1));
    assert.ok('error' in metricReplicas([], 2, 10, 0.1));
  });
});

describe('HPA decisions with behavior', () => {
  it('scales up by the default policies: double or 4 pods per 15 s, whichever is more', () => {
    const d = decide(input({ currentReplicas: 2, pods: ready(100, 100) }), emptyHistory());
    assert.equal(d.metricReplicas, 20);
    assert.equal(d.desiredReplicas, 6);
    assert.equal(d.limitedBy, 'ScaleUpLimit');
    assert.equal(d.reason, 'inferenceRate above target');
    assert.deepEqual(d.history.scaleUpEvents, [{ time: T0, change: 4 }]);
    assert.deepEqual(d.history.recommendations, [{ time: T0, replicas: 20 }]);

    // Within the same 15 s period the 4 pods just added count: the period started at 2, so 6 is the limit.
    const held = decide(input({ now: s(5), currentReplicas: 6, pods: ready(...Array(6).fill(100)) }), d.history);
    assert.equal(held.metricReplicas, 60);
    assert.equal(held.desiredReplicas, 6);
    assert.equal(held.rescale, false);
    assert.equal(held.limitedBy, 'ScaleUpLimit');

    // After the period: double (12) beats +4 (10).
    const next = decide(input({ now: s(16), currentReplicas: 6, pods: ready(...Array(6).fill(100)) }), held.history);
    assert.equal(next.desiredReplicas, 12);
    assert.deepEqual(next.history.scaleUpEvents, [{ time: s(16), change: 6 }]);
  });

  it('holds a scale-down for the stabilisation window, taking the highest recommendation in it', () => {
    const behavior = resolveBehavior({ scaleDown: { stabilizationWindowSeconds: 300 } });
    const history: AutoscalerHistory = {
      recommendations: [
        { time: s(-200), replicas: 5 },
        { time: s(-100), replicas: 4 },
      ],
      scaleUpEvents: [],
      scaleDownEvents: [],
    };
    const d = decide(input({ currentReplicas: 5, behavior, pods: ready(4, 4, 4, 4, 4) }), history);
    assert.equal(d.metricReplicas, 2);
    assert.equal(d.stabilizedReplicas, 5);
    assert.equal(d.desiredReplicas, 5);
    assert.equal(d.ableToScale, 'ScaleDownStabilized');
    // At +101 s the 5 of -200 s has left the window: the highest left is 4.
    const later = decide(input({ now: s(101), currentReplicas: 5, behavior, pods: ready(4, 4, 4, 4, 4) }), d.history);
    assert.equal(later.stabilizedReplicas, 4);
    assert.equal(later.desiredReplicas, 4);
    assert.equal(later.reason, 'All metrics below target');
    assert.deepEqual(later.history.recommendations.map((r) => r.replicas), [4, 2, 2]);
    assert.deepEqual(later.history.scaleDownEvents, [{ time: s(101), change: 1 }]);
  });

  it('holds a scale-up by the lowest recommendation of its window', () => {
    const behavior = resolveBehavior({ scaleUp: { stabilizationWindowSeconds: 60 } });
    const history: AutoscalerHistory = { recommendations: [{ time: s(-30), replicas: 3 }], scaleUpEvents: [], scaleDownEvents: [] };
    const d = decide(input({ currentReplicas: 2, behavior, pods: ready(50, 50) }), history);
    assert.equal(d.metricReplicas, 10);
    assert.equal(d.desiredReplicas, 3);
    assert.equal(d.ableToScale, 'ScaleUpStabilized');
  });

  it("removes pods per the docs' policy example: 10% or 4 pods per minute, whichever removes more", () => {
    const behavior = resolveBehavior({
      scaleDown: {
        stabilizationWindowSeconds: 0,
        policies: [
          { type: 'Pods', value: 4, periodSeconds: 60 },
          { type: 'Percent', value: 10, periodSeconds: 60 },
        ],
      },
    });
    let history = emptyHistory();
    const steps: number[] = [];
    let current = 80;
    for (let i = 0; i < 5; i++) {
      const d = decide(input({ now: s(61 * i), currentReplicas: current, minReplicas: 1, behavior, pods: ready(...Array(current).fill(1)) }), history);
      history = d.history;
      current = d.desiredReplicas;
      steps.push(current);
    }
    // 80 → 72 (10%: 8), 72 → 64 (72·0.9 = 64.8, truncated), 64 → 57, 57 → 51, 51 → 45.
    assert.deepEqual(steps, [72, 64, 57, 51, 45]);
    const below40 = decide(input({ now: s(1000), currentReplicas: 30, behavior, pods: ready(...Array(30).fill(1)) }), emptyHistory());
    assert.equal(below40.desiredReplicas, 26); // 4 pods beat 10% (3)
    assert.equal(below40.limitedBy, 'ScaleDownLimit');
  });

  it('applies selectPolicy Min and Disabled', () => {
    const min = resolveBehavior({ scaleUp: { selectPolicy: 'Min' } });
    assert.equal(decide(input({ currentReplicas: 10, behavior: min, pods: ready(...Array(10).fill(100)) }), emptyHistory()).desiredReplicas, 14);
    const noDown = resolveBehavior({ scaleDown: { stabilizationWindowSeconds: 0, selectPolicy: 'Disabled' } });
    const d = decide(input({ currentReplicas: 4, behavior: noDown, pods: ready(1, 1, 1, 1) }), emptyHistory());
    assert.equal(d.metricReplicas, 1);
    assert.equal(d.desiredReplicas, 4);
    assert.equal(d.rescale, false);
  });

  it("scales as fast as the docs' 900% policy allows", () => {
    const fast = resolveBehavior({ scaleUp: { policies: [{ type: 'Percent', value: 900, periodSeconds: 60 }] } });
    const d = decide(input({ currentReplicas: 1, behavior: fast, pods: ready(300) }), emptyHistory());
    assert.equal(d.desiredReplicas, 10);
    assert.equal(d.limitedBy, 'ScaleUpLimit');
  });

  it('clamps to maxReplicas and minReplicas, and brings an out-of-range count back at once', () => {
    const up = decide(input({ currentReplicas: 3, maxReplicas: 4, behavior: free, pods: ready(100, 100, 100) }), emptyHistory());
    assert.equal(up.desiredReplicas, 4);
    assert.equal(up.limitedBy, 'TooManyReplicas');
    const down = decide(input({ currentReplicas: 3, minReplicas: 2, behavior: free, pods: ready(0, 0, 0) }), emptyHistory());
    assert.equal(down.desiredReplicas, 2);
    assert.equal(down.limitedBy, 'TooFewReplicas');
    const above = decide(input({ currentReplicas: 7, maxReplicas: 5, pods: undefined }), emptyHistory());
    assert.deepEqual([above.desiredReplicas, above.reason], [5, 'Current number of replicas above Spec.MaxReplicas']);
    const below = decide(input({ currentReplicas: 1, minReplicas: 2, pods: undefined }), emptyHistory());
    assert.deepEqual([below.desiredReplicas, below.reason], [2, 'Current number of replicas below Spec.MinReplicas']);
    assert.deepEqual(below.history.scaleUpEvents, [{ time: T0, change: 1 }]);
  });

  it('does nothing without metrics, and nothing at zero replicas', () => {
    const none = decide(input({ currentReplicas: 3, pods: undefined }), emptyHistory());
    assert.deepEqual([none.desiredReplicas, none.rescale, none.scalingActive], [3, false, false]);
    const zero = decide(input({ currentReplicas: 0, pods: [] }), emptyHistory());
    assert.deepEqual([zero.desiredReplicas, zero.rescale, zero.scalingActive], [0, false, false]);
  });

  it('forgets history that no later decision can use', () => {
    const history: AutoscalerHistory = {
      recommendations: [{ time: s(-301), replicas: 9 }, { time: s(-10), replicas: 3 }],
      scaleUpEvents: [{ time: s(-16), change: 2 }],
      scaleDownEvents: [{ time: s(-14), change: 1 }],
    };
    const d = decide(input({ currentReplicas: 3, behavior: DEFAULT_BEHAVIOR, pods: ready(10, 10, 10) }), history);
    assert.equal(d.reason, 'within tolerance');
    // 7.85 per pod on 4 pods: ceil(0.785 · 4) = 4, outside the tolerance but no change.
    assert.equal(decide(input({ currentReplicas: 4, pods: ready(7.85, 7.85, 7.85, 7.85) }), emptyHistory()).reason, 'the recommendation is the current count');
    assert.deepEqual(d.history, {
      recommendations: [{ time: s(-10), replicas: 3 }, { time: T0, replicas: 3 }],
      scaleUpEvents: [],
      scaleDownEvents: [{ time: s(-14), change: 1 }],
    });
  });
});
