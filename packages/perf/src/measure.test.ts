/**
 * The measurement rules of perf-and-analyzer.md §1.2 on hand-made windows: nearest-rank
 * percentiles, the stability band over the last three windows, and the merge of windows.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { mergeWindows, percentile, stability, type MeasureSettings, type Window } from './measure.js';

function win(completed: number, latencyUs: number, durationMs = 1000): Window {
  return {
    durationMs,
    completed,
    errors: 0,
    responses: completed,
    sent: completed,
    delayed: 0,
    latenciesUs: new Array<number>(completed).fill(latencyUs),
    sendUs: 0,
    recvUs: 0,
    clientBusy: 0.2,
    sequences: 0,
  };
}

const settings: MeasureSettings = {
  mode: 'time_windows',
  intervalMs: 1000,
  requestCount: 50,
  stabilityPercentage: 10,
  maxTrials: 10,
  async: false,
  batchSize: 1,
};

describe('percentile', () => {
  it('takes the nearest rank round(p/100 × (n−1)) of sorted values', () => {
    const values = Array.from({ length: 11 }, (_, i) => i * 10); // 0, 10, … 100
    assert.equal(percentile(values, 50), 50);
    assert.equal(percentile(values, 90), 90);
    assert.equal(percentile(values, 95), 100); // round(9.5) = 10
    assert.equal(percentile(values, 94), 90); // round(9.4) = 9
    assert.equal(percentile([], 99), 0);
  });
});

describe('stability', () => {
  it('needs three windows', () => {
    assert.deepEqual(stability([win(100, 1000), win(100, 1000)], settings), { throughput: false, latency: false });
  });

  it('accepts max/min within 1 + s/100 for throughput and latency', () => {
    assert.deepEqual(stability([win(1, 1), win(100, 1000), win(109, 1000), win(100, 1090)], settings), { throughput: true, latency: true });
  });

  it('refuses a spread beyond the band, and a window without throughput', () => {
    assert.equal(stability([win(100, 1000), win(112, 1000), win(100, 1000)], settings).throughput, false);
    assert.equal(stability([win(100, 1000), win(100, 1200), win(100, 1000)], settings).latency, false);
    assert.equal(stability([win(0, 0), win(100, 1000), win(100, 1000)], { ...settings, stabilityPercentage: 1000 }).throughput, false);
  });

  it('stabilizes on the --percentile latency when given', () => {
    const spiky = (): Window => ({ ...win(100, 1000), latenciesUs: [...new Array<number>(99).fill(1000), 1_000_000] });
    const windows = [win(100, 1000), spiky(), win(100, 1000)];
    assert.equal(stability(windows, settings).latency, false, 'the average moves with the spike');
    assert.equal(stability(windows, { ...settings, percentile: 90 }).latency, true, 'p90 does not');
  });
});

describe('mergeWindows', () => {
  it('adds counts and durations and keeps every latency', () => {
    const m = mergeWindows([win(10, 100, 500), win(30, 300, 1500)]);
    assert.equal(m.completed, 40);
    assert.equal(m.durationMs, 2000);
    assert.equal(m.latenciesUs.length, 40);
    assert.equal(m.clientBusy, 0.2);
  });
});
