/**
 * The console block of one load level (`levelText`): perf_analyzer's lines, and the bottleneck
 * warning, which names this tool.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { Window } from './measure.js';
import { levelText, summarize } from './report.js';

function win(clientBusy: number): Window {
  return {
    durationMs: 1000,
    completed: 200,
    errors: 0,
    responses: 200,
    sent: 200,
    delayed: 0,
    latenciesUs: new Array<number>(200).fill(5000),
    sendUs: 200 * 40,
    recvUs: 200 * 60,
    clientBusy,
    sequences: 0,
  };
}

const WARNING = '[WARNING] nereid perf is not able to keep up with the desired load. The results may not be accurate.';

describe('levelText', () => {
  it("prints perf_analyzer's lines for a level", () => {
    const text = levelText(summarize('concurrency', 1, win(0.1), 1, undefined, true, false), 'HTTP', false, false, undefined);
    assert.match(text, /^Request concurrency: 1\n/);
    assert.match(text, /\n {4}Throughput: 200 infer\/sec\n/);
    assert.match(text, /\n {4}Avg latency: 5000 usec \(standard deviation 0 usec\)\n/);
    assert.match(text, /\n {4}Avg HTTP time: 5000 usec \(send\/recv 100 usec \+ response wait 4900 usec\)\n/);
  });

  it('warns, naming nereid perf, when the client was busy more than half of the time', () => {
    const busy = levelText(summarize('concurrency', 4, win(0.75), 1, undefined, true, false), 'gRPC', false, false, undefined);
    assert.ok(busy.includes(`\n${WARNING}\n`), busy);
    assert.doesNotMatch(busy, /Perf Analyzer/);
    const idle = levelText(summarize('concurrency', 4, win(0.25), 1, undefined, true, false), 'gRPC', false, false, undefined);
    assert.ok(!idle.includes('not able to keep up'), idle);
  });

  it('does not warn in process, where the server shares the event loop', () => {
    const text = levelText(summarize('concurrency', 4, win(0.9), 1, undefined, true, false), 'in-process', false, false, undefined);
    assert.ok(!text.includes('not able to keep up'), text);
  });
});
