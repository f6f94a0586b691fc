import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import { InlineChoice, parseExecutionThread, type InlineLimits } from './execution-thread.js';

const LIMITS: InlineLimits = { sampleRuns: 10, maxRunNs: 50_000, maxLoadNs: 50_000_000, recheckRuns: 4, maxSingleRunNs: 1_000_000 };

describe('parseExecutionThread', () => {
  it('reads auto, inline and worker, any case; absent or empty is auto', () => {
    assert.equal(parseExecutionThread('m', undefined), 'auto');
    assert.equal(parseExecutionThread('m', ''), 'auto');
    assert.equal(parseExecutionThread('m', 'INLINE'), 'inline');
    assert.equal(parseExecutionThread('m', ' worker '), 'worker');
    assert.equal(parseExecutionThread('m', 'auto'), 'auto');
  });

  it('refuses anything else with a CONFIG_INVALID error naming the model and the choices', () => {
    assert.throws(
      () => parseExecutionThread('tiny', 'main'),
      (err: unknown) => err instanceof NereidError && err.code === 'CONFIG_INVALID' && /model 'tiny'.*execution_thread.*"auto", "inline" or "worker".*'main'/.test(err.message),
    );
  });
});

describe('InlineChoice', () => {
  it('goes inline after a window of short runs, for batches up to the largest input sampled', () => {
    const choice = new InlineChoice(1_000_000, LIMITS);
    for (let i = 0; i < 9; i++) assert.equal(choice.recordWorkerRun(20_000, 128), false);
    assert.equal(choice.inline, false);
    assert.equal(choice.recordWorkerRun(20_000, 256), true);
    assert.equal(choice.inline, true);
    assert.equal(choice.fits(256), true);
    assert.equal(choice.fits(257), false);
  });

  it('tolerates the slowest tenth of a window (preemption, cold caches) but not a slow tail or majority', () => {
    const tolerant = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 9; i++) tolerant.recordWorkerRun(20_000, 64);
    assert.equal(tolerant.recordWorkerRun(5_000_000, 64), true);

    const tail = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 30; i++) assert.equal(tail.recordWorkerRun(i % 10 < 7 ? 20_000 : 300_000, 64), false);
    assert.equal(tail.inline, false);

    const slow = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 30; i++) assert.equal(slow.recordWorkerRun(i % 2 ? 20_000_000 : 20_000, 64), false);
    assert.equal(slow.inline, false);
  });

  it('measures runs against the hop when the hop is longer, up to four times the bound', () => {
    const hopLonger = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 9; i++) assert.equal(hopLonger.recordWorkerRun(120_000, 64, 300_000), false);
    assert.equal(hopLonger.recordWorkerRun(120_000, 64, 300_000), true);
    // Admitted at a 200 µs bound: runs of 300 µs (a busier machine) do not send it back.
    for (let i = 0; i < 4; i++) assert.equal(hopLonger.recordInlineRun(300_000), true);

    const hopShort = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 30; i++) assert.equal(hopShort.recordWorkerRun(120_000, 64, 30_000), false);

    const capped = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 30; i++) assert.equal(capped.recordWorkerRun(250_000, 64, 5_000_000), false);
  });

  it('never goes inline for a model that loaded slowly', () => {
    const choice = new InlineChoice(LIMITS.maxLoadNs + 1, LIMITS);
    for (let i = 0; i < 30; i++) assert.equal(choice.recordWorkerRun(1_000, 64), false);
    assert.equal(choice.inline, false);
  });

  it('goes back to the worker when inline runs become slow, and samples again', () => {
    const choice = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 10; i++) choice.recordWorkerRun(20_000, 64);
    assert.equal(choice.inline, true);
    for (let i = 0; i < 8; i++) assert.equal(choice.recordInlineRun(i === 3 ? 900_000 : 20_000), true);
    // Somewhat longer runs (a busier machine) are not enough: up to twice the bound stays.
    for (let i = 0; i < 8; i++) assert.equal(choice.recordInlineRun(90_000), true);
    assert.equal(choice.recordInlineRun(200_000), true);
    assert.equal(choice.recordInlineRun(200_000), true);
    assert.equal(choice.recordInlineRun(200_000), true);
    assert.equal(choice.recordInlineRun(200_000), false);
    assert.equal(choice.inline, false);
    for (let i = 0; i < 9; i++) assert.equal(choice.recordWorkerRun(20_000, 64), false);
    assert.equal(choice.recordWorkerRun(20_000, 64), true);
  });

  it('goes back at once after one run beyond the single-run bound', () => {
    const choice = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 10; i++) choice.recordWorkerRun(20_000, 64);
    assert.equal(choice.recordInlineRun(LIMITS.maxSingleRunNs + 1), false);
    assert.equal(choice.inline, false);
  });

  it('stays on the worker for good once disabled', () => {
    const choice = new InlineChoice(0, LIMITS);
    for (let i = 0; i < 10; i++) choice.recordWorkerRun(20_000, 64);
    choice.disable();
    assert.equal(choice.inline, false);
    for (let i = 0; i < 30; i++) assert.equal(choice.recordWorkerRun(1_000, 64), false);
  });
});
