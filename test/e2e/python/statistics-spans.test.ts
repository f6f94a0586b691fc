/**
 * What the statistics' spans cover for a Python model (models-and-scheduling.md §9.1,
 * docs/protocol.md's statistics notes), as Triton's Python backend splits them: compute_infer is
 * the stub's execute with its hand-offs, compute_input and compute_output the staging of the
 * inputs and the delivery of the responses around it; and a request's duration starts once its
 * body has arrived, so a client that sends its body slowly is not charged for it.
 *
 * Needs /usr/bin/python3 with numpy (npm test installs it); fails naming what is missing otherwise.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, it } from 'node:test';
import type { ModelStatisticsReport } from '@nereid/server';
import { makeRepository, removeDir, startServer, type RunningServer } from '../../helpers/harness.js';
import { IDENTITY_PY, identityConfig, requirePython } from '../../helpers/python.js';

/** An identity that sleeps 50 ms in execute. */
const SLEEP_PY = String.raw`
import time
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(0.05)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
`;

const MS = 1_000_000;

type Field = keyof ModelStatisticsReport['inference_stats'];

/** The average of `field` in ms, over the requests counted since `since` (if given). */
function averageMs(stats: ModelStatisticsReport, field: Field, since?: ModelStatisticsReport): number {
  const d = stats.inference_stats[field];
  const count = d.count - (since?.inference_stats[field].count ?? 0);
  assert.ok(count > 0, `${field} has no samples`);
  return Number(d.ns - (since?.inference_stats[field].ns ?? 0n)) / count / MS;
}

describe('statistics: the spans of a Python model', () => {
  before(() => requirePython(['numpy']));
  let repo: string;
  let srv: RunningServer;

  before(async () => {
    repo = await makeRepository({
      sleep_50ms: { 'config.pbtxt': identityConfig('sleep_50ms', 'TYPE_FP32'), '1/model.py': SLEEP_PY },
      slow_body: { 'config.pbtxt': identityConfig('slow_body', 'TYPE_FP32'), '1/model.py': IDENTITY_PY },
    });
    srv = await startServer({ modelRepositories: [repo] });
    assert.deepEqual(srv.server.startReport.failures, []);
  });

  after(async () => {
    await srv?.stop();
    await removeDir(repo);
  });

  it('counts a 50 ms execute as compute_infer, with small compute input and output', async () => {
    const infer1 = async () => {
      const res = await fetch(`${srv.url}/v2/models/sleep_50ms/infer`, {
        method: 'POST',
        body: JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 4], data: [1, 2, 3, 4] }] }),
      });
      assert.equal(res.status, 200, await res.text());
    };
    // The first execute of a stub pays its one-time costs; the spans are read over the next ones.
    await infer1();
    const [first] = srv.server.modelStatistics('sleep_50ms');
    for (let i = 0; i < 4; i++) await infer1();
    const [stats] = srv.server.modelStatistics('sleep_50ms');
    const average = (field: Field) => averageMs(stats!, field, first);
    const infer = average('compute_infer');
    const input = average('compute_input');
    const output = average('compute_output');
    const request = average('success');
    // Inputs ready is read just after the stub was told to execute: a server thread descheduled
    // in between (a busy machine) shortens compute_infer by that much, hence the lower margin.
    assert.ok(infer >= 45 && infer < 200, `compute_infer ${infer} ms covers the 50 ms execute`);
    assert.ok(input < 10, `compute_input ${input} ms is small`);
    assert.ok(output < 10, `compute_output ${output} ms is small`);
    const spans = average('queue') + input + infer + output;
    // The request ends with its final response, handed over just before its batch's compute ends.
    assert.ok(request > spans - 0.5, `the request (${request} ms) covers queue and compute (${spans} ms)`);
    assert.ok(request < spans + 20, `the request (${request} ms) adds little to queue and compute (${spans} ms)`);
    const [batch] = stats!.batch_stats;
    assert.ok(Number(batch!.compute_infer.ns) / batch!.compute_infer.count / MS >= 45, 'the batch statistics split the same way');
  });

  it("starts a request's clock once its body has arrived, not at its first byte", async () => {
    const body = Buffer.from(JSON.stringify({ inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, 2], data: [5, 6] }] }));
    const half = body.byteLength >> 1;
    const status = await new Promise<number>((resolve, reject) => {
      const req = httpRequest(
        `${srv.url}/v2/models/slow_body/infer`,
        { method: 'POST', headers: { 'Content-Type': 'application/json', 'Content-Length': body.byteLength } },
        (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
        },
      );
      req.on('error', reject);
      req.flushHeaders();
      req.write(body.subarray(0, half));
      setTimeout(() => req.end(body.subarray(half)), 300);
    });
    assert.equal(status, 200);
    const [stats] = srv.server.modelStatistics('slow_body');
    const request = averageMs(stats!, 'success');
    const spans = averageMs(stats!, 'queue') + averageMs(stats!, 'compute_input') + averageMs(stats!, 'compute_infer') + averageMs(stats!, 'compute_output');
    assert.ok(request < 100, `the request (${request} ms) leaves out the 300 ms the body took to arrive`);
    assert.ok(request > spans - 0.5, `the request (${request} ms) covers its decoding, queue and compute (${spans} ms)`);
  });
});
