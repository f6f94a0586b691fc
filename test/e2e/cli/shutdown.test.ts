/**
 * Graceful shutdown of `nereid serve` (protocol.md §6.1 `--exit-timeout-secs`): on SIGTERM the
 * requests already accepted complete with 200, then the process exits 0.
 */
import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { Prng, mlpModel } from '@nereid/testkit';
import { inferJson, jsonBody, outputNamed, type HttpReply, type JsonInferResponse } from '../../helpers/harness.js';
import { EXAMPLE_REPOSITORY, LOCAL_ENDPOINTS, NereidProcess, startNereidServe, stopAllNereid } from '../../helpers/cli.js';

after(stopAllNereid);

const BATCH = 32;
const REQUESTS = 12;
const reference = mlpModel();

/** A request the server refused because it was already stopping: it never got to the model. */
type Refused = { refused: string };

describe('SIGTERM', () => {
  it('lets in-flight requests complete with 200, then exits 0', async () => {
    const server = await startNereidServe([`--model-repository=${EXAMPLE_REPOSITORY}`]);
    try {
      // The example mlp has one instance, so the requests execute one after the other: when the
      // first answer arrives the others are queued or executing, and SIGTERM goes out then.
      const inputs = Array.from({ length: REQUESTS }, (_, i) => new Prng(100 + i).float32Array(BATCH * 256));
      let answered = 0;
      let answeredAfterSignal = 0;
      let signalled = false;
      const pending = inputs.map((input) =>
        inferJson(server.url, 'mlp', [{ name: 'INPUT0', datatype: 'FP32', shape: [BATCH, 256], data: Array.from(input) }]).then(
          (reply: HttpReply): HttpReply | Refused => {
            answered++;
            if (signalled) answeredAfterSignal++;
            else {
              signalled = true;
              server.process.child.kill('SIGTERM');
            }
            // A request that reached the server after the signal is refused, not dropped.
            if (reply.status === 503 && /Server not ready|stopping/.test(reply.text)) return { refused: reply.text };
            return reply;
          },
          (err: unknown): Refused => ({ refused: String(err) }),
        ),
      );
      const replies = await Promise.all(pending);
      const exit = await server.process.waitForExit();

      assert.deepEqual(exit, { code: 0, signal: null }, server.process.output);
      assert.equal(answered, REQUESTS);
      const served = replies.filter((r): r is HttpReply => !('refused' in r));
      for (const reply of served) assert.equal(reply.status, 200, reply.text);
      // Requests were in flight when the signal went out, and they completed.
      assert.ok(answeredAfterSignal >= 1 && served.length >= 2, `${served.length} served, ${answeredAfterSignal} after the signal`);
      assert.match(server.process.stdout, /received SIGTERM: no longer ready/);
      assert.match(server.process.stdout, /all models unloaded; exiting/);

      // Every served answer is the right one.
      replies.forEach((reply, i) => {
        if ('refused' in reply) return;
        const out = outputNamed(jsonBody(reply) as JsonInferResponse, 'OUTPUT0');
        assert.deepEqual(out.shape, [BATCH, 16]);
        if (i % 4 !== 0) return; // the JS reference is slow; check a few
        const want = reference.compute(inputs[i]!, BATCH);
        const got = out.data as number[];
        for (let j = 0; j < want.length; j++) {
          assert.ok(Math.abs(got[j]! - want[j]!) <= 1e-4 + 1e-4 * Math.abs(want[j]!), `request ${i} element ${j}: ${got[j]} vs ${want[j]}`);
        }
      });
    } finally {
      await server.process.stop('SIGKILL');
    }
  });
});

describe('SIGTERM while the endpoints open', () => {
  it('is held until every endpoint is open, then answered with the graceful shutdown (exit 0), not a kill', async () => {
    const p = new NereidProcess(['serve', `--model-repository=${EXAMPLE_REPOSITORY}`, ...LOCAL_ENDPOINTS]);
    try {
      // The gRPC endpoint opens first; HTTP and metrics are still to come when the signal goes out.
      await p.waitFor(/Started GRPCInferenceService at/);
      p.child.kill('SIGTERM');
      const exit = await p.waitForExit();
      assert.deepEqual(exit, { code: 0, signal: null }, p.output);
      assert.match(p.stdout, /received SIGTERM: no longer ready/);
      assert.match(p.stdout, /all models unloaded; exiting/);
    } finally {
      await p.stop('SIGKILL');
    }
  });
});
