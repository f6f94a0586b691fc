import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import { performance } from 'node:perf_hooks';
import { describe, it } from 'node:test';
import { nativeAddon } from '../../core/native.js';
import { LoopPoller, loopSaturated, pollYields, pollingFor } from './loop-poll.js';

/** The event loop's utilization over `ms` of waiting: near 1 while it polls, near 0 while it sleeps. */
async function utilization(ms: number): Promise<number> {
  const start = performance.eventLoopUtilization();
  await sleep(ms);
  return performance.eventLoopUtilization(start).utilization;
}

describe('LoopPoller (busy polling of the event loop for a stub answer)', () => {
  it('keeps the loop polling while an execution is answered within the window, and stops when it is answered', async () => {
    const poller = new LoopPoller(200_000, 2);
    poller.sent(1, 1);
    assert.equal(pollingFor(), 1);
    const yieldsBefore = pollYields();
    const busy = await utilization(40);
    assert.ok(busy > 0.6, `the loop slept while polling (utilization ${busy.toFixed(2)})`);
    // Each poll gives the CPU to any thread waiting for it (the native addon's sched_yield).
    assert.ok(nativeAddon() !== undefined, 'the native addon is built');
    assert.ok(pollYields() - yieldsBefore > 10, `the polling loop yielded ${pollYields() - yieldsBefore} times`);
    poller.answered(1);
    assert.equal(pollingFor(), 0);
    await sleep(5); // the chain sees the answer and ends
    const yieldsAfter = pollYields();
    const idle = await utilization(40);
    assert.equal(pollYields(), yieldsAfter, 'no yielding once the loop stopped polling');
    assert.ok(idle < 0.3, `the loop kept polling after the answer (utilization ${idle.toFixed(2)})`);
  });

  it('stops at the end of the window, and then polls for the next execution only once one is answered within it again', async () => {
    const poller = new LoopPoller(20_000, 2);
    poller.sent(10, 1);
    assert.equal(pollingFor(), 1);
    await sleep(40);
    const after = await utilization(40);
    assert.ok(after < 0.3, `the loop kept polling past the window (utilization ${after.toFixed(2)})`);
    poller.answered(10); // answered after the window
    poller.sent(11, 1);
    assert.equal(pollingFor(), 0, 'polled for an execution after one that outlasted the window');
    poller.answered(11); // answered within the window
    poller.sent(12, 1);
    assert.equal(pollingFor(), 1);
    poller.answered(12);
    assert.equal(pollingFor(), 0);
  });

  it('does not poll under load: for an execution of several requests, or while another is in flight', () => {
    const one = new LoopPoller(500, 2);
    const other = new LoopPoller(500, 2);
    one.sent(1, 4);
    assert.equal(pollingFor(), 0);
    one.answered(1);
    one.sent(2, 1);
    assert.equal(pollingFor(), 1);
    other.sent(1, 1);
    assert.equal(pollingFor(), 1, 'polled for a second execution in flight');
    other.answered(1);
    one.answered(2);
    assert.equal(pollingFor(), 0);
  });

  it('never polls with a window of 0 or on one CPU, and forgets what a stub that died had in flight', () => {
    const off = new LoopPoller(0);
    off.sent(1, 1);
    assert.equal(pollingFor(), 0);
    off.answered(1);
    const single = new LoopPoller(500, 1);
    single.sent(1, 1);
    assert.equal(pollingFor(), 0);
    single.answered(1);
    const dying = new LoopPoller(500, 2);
    dying.sent(1, 1);
    assert.equal(pollingFor(), 1);
    dying.clear();
    assert.equal(pollingFor(), 0);
    // Nothing in flight is left counted: another stub's execution is polled for.
    const next = new LoopPoller(500, 2);
    next.sent(1, 1);
    assert.equal(pollingFor(), 1);
    next.answered(1);
  });
});

describe('loopSaturated (whether the Python backend releases an instance early)', () => {
  it('says true after a stretch the loop spent busy, false after one it spent waiting', async () => {
    await sleep(60);
    loopSaturated();
    // Busy for 80 ms without a turn of the loop: utilisation 1 over the stretch.
    const until = performance.now() + 80;
    while (performance.now() < until);
    assert.equal(loopSaturated(), true);
    // Within the same 50 ms stretch the answer stands, without measuring again.
    assert.equal(loopSaturated(), true);
    await sleep(80);
    assert.equal(loopSaturated(), false);
  });
});
