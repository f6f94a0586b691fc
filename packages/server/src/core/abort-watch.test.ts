import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { describe, it } from 'node:test';
import { scavengeRetention } from './scavenge-retention.test-support.js';
import { AbortControllerPool, abortWatchers, watchAbort } from './abort-watch.js';

describe('watchAbort', () => {
  it('calls each callback once, in the order they were added, when the signal aborts; one that stopped watching is not called', () => {
    const controller = new AbortController();
    const calls: string[] = [];
    watchAbort(controller.signal, () => calls.push('a'));
    const stopB = watchAbort(controller.signal, () => calls.push('b'));
    watchAbort(controller.signal, () => calls.push('c'));
    assert.equal(abortWatchers(controller.signal), 3);
    stopB();
    stopB();
    assert.equal(abortWatchers(controller.signal), 2);
    controller.abort();
    controller.abort();
    assert.deepEqual(calls, ['a', 'c']);
    assert.equal(abortWatchers(controller.signal), 0);
  });

  it('stops watching from the first, the middle and the last place, and watches again after the list emptied', () => {
    const controller = new AbortController();
    const calls: number[] = [];
    const stops = [0, 1, 2, 3].map((n) => watchAbort(controller.signal, () => calls.push(n)));
    stops[0]!();
    stops[3]!();
    stops[1]!();
    stops[2]!();
    assert.equal(abortWatchers(controller.signal), 0);
    watchAbort(controller.signal, () => calls.push(4));
    watchAbort(controller.signal, () => calls.push(5));
    controller.abort();
    assert.deepEqual(calls, [4, 5]);
  });

  it('calls nothing for a signal that had already aborted, as addEventListener; stopping afterwards is harmless', () => {
    const controller = new AbortController();
    controller.abort();
    let called = false;
    const stop = watchAbort(controller.signal, () => (called = true));
    stop();
    assert.equal(called, false);
  });

  it('does not call a callback that an earlier one stopped, nor one added while the signal aborts', () => {
    const controller = new AbortController();
    const calls: string[] = [];
    watchAbort(controller.signal, () => {
      calls.push('a');
      stopB();
      watchAbort(controller.signal, () => calls.push('late'));
    });
    const stopB = watchAbort(controller.signal, () => calls.push('b'));
    watchAbort(controller.signal, () => calls.push('c'));
    controller.abort();
    assert.deepEqual(calls, ['a', 'c']);
    assert.equal(abortWatchers(controller.signal), 0);
  });

  it('runs every callback when one throws, and hands the first error to the signal, which reports it as a listener error', () => {
    const script = `
      import { watchAbort } from ${JSON.stringify(new URL('./abort-watch.js', import.meta.url).href)};
      const controller = new AbortController();
      const calls = [];
      process.on('uncaughtException', (err) => { console.log(JSON.stringify({ calls, error: err.message })); process.exit(0); });
      watchAbort(controller.signal, () => { calls.push(1); throw new Error('first'); });
      watchAbort(controller.signal, () => { calls.push(2); throw new Error('second'); });
      watchAbort(controller.signal, () => calls.push(3));
      controller.abort();
    `;
    const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), { calls: [1, 2, 3], error: 'first' });
  });

  it("keeps nothing alive through young-generation collections after a full one, where Node's own listeners on a long-lived signal chain every request since", () => {
    // Four requests in flight on one long-lived signal, each watching it with a callback that
    // holds half a kilobyte; one full collection while they are in flight moves them to the old
    // generation. What the scavenges after it keep shows whether removed watchers still hold the
    // ones added after them.
    const run = (how: 'watch' | 'listener') =>
      scavengeRetention({
        imports: `import { watchAbort } from ${JSON.stringify(new URL('./abort-watch.js', import.meta.url).href)};`,
        setup: "const signal = new AbortController().signal; signal.addEventListener('abort', () => {}); const inflight = [];",
        request: `const payload = new Array(64).fill(n++); const fn = () => payload.length; ${
          how === 'watch'
            ? 'inflight.push(watchAbort(signal, fn)); if (inflight.length > 4) inflight.shift()();'
            : "signal.addEventListener('abort', fn, { once: true }); inflight.push(fn); if (inflight.length > 4) signal.removeEventListener('abort', inflight.shift());"
        }`,
        requests: 2_000_000,
      });
    const watched = run('watch');
    assert.ok(watched.keptKB < 200, `watchAbort: ${watched.keptKB.toFixed(0)} KB kept per scavenge`);
    // The reason for watchAbort: the same requests with Node's own listeners keep megabytes. If
    // this fails, Node no longer chains removed listeners and watchAbort may be retired.
    const listeners = run('listener');
    assert.ok(listeners.keptKB > 1000, `addEventListener: ${listeners.keptKB.toFixed(0)} KB kept per scavenge`);
  });
});

describe('AbortControllerPool', () => {
  it('hands back a controller given back whose signal did not abort and that nothing watches, and a new one otherwise', () => {
    const pool = new AbortControllerPool(2);
    const a = pool.take();
    pool.give(a);
    assert.equal(pool.take(), a);

    const aborted = pool.take();
    aborted.abort();
    pool.give(aborted);
    assert.notEqual(pool.take(), aborted);

    const watched = pool.take();
    const stop = watchAbort(watched.signal, () => {});
    pool.give(watched);
    assert.notEqual(pool.take(), watched, 'a signal still watched for its last request is not reused');
    stop();
    pool.give(watched);
    assert.equal(pool.take(), watched);
  });

  it('keeps at most its limit of spare controllers', () => {
    const pool = new AbortControllerPool(2);
    const [a, b, c] = [pool.take(), pool.take(), pool.take()];
    pool.give(a);
    pool.give(b);
    pool.give(c);
    const back = new Set([pool.take(), pool.take(), pool.take()]);
    assert.ok(back.has(a) && back.has(b) && !back.has(c));
  });

  it('a reused signal still cancels the request that holds it now', () => {
    const pool = new AbortControllerPool();
    const first = pool.take();
    watchAbort(first.signal, () => assert.fail('the first request is over'))();
    pool.give(first);
    const again = pool.take();
    assert.equal(again, first);
    let cancelled = false;
    watchAbort(again.signal, () => (cancelled = true));
    again.abort();
    assert.equal(cancelled, true);
    pool.give(again);
    assert.notEqual(pool.take(), again);
  });
});
