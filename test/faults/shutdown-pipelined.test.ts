/**
 * A client that pipelines HTTP requests and hangs up after the first answer: the requests it left
 * behind are finished or dropped and counted out, so a SIGTERM that follows drains at once and
 * `nereid serve` exits 0 instead of waiting out `--exit-timeout-secs`.
 */
import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, describe, it } from 'node:test';
import { simpleCase } from '../helpers/harness.js';
import { EXAMPLE_REPOSITORY, startNereidServe, stopAllNereid } from '../helpers/cli.js';

after(stopAllNereid);

const PIPELINED = 10;

/** Writes `count` pipelined infer requests on one connection and destroys it once the first full response is in. */
function pipelineAndHangUp(port: number, count: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    let received = '';
    socket.setEncoding('latin1');
    socket.on('connect', () => {
      let bytes = '';
      for (let i = 0; i < count; i++) {
        const body = JSON.stringify({ inputs: simpleCase(1, i).inputs });
        bytes += `POST /v2/models/simple/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`;
      }
      socket.write(bytes);
    });
    socket.on('data', (chunk: string) => {
      received += chunk;
      const head = received.indexOf('\r\n\r\n');
      if (head === -1) return;
      const length = Number(/content-length: (\d+)/i.exec(received.slice(0, head))?.[1] ?? NaN);
      if (received.length - head - 4 >= length) {
        socket.destroy();
        resolve(received);
      }
    });
    socket.on('error', reject);
  });
}

describe('pipelined requests of a client that hangs up', () => {
  it('are counted out: SIGTERM then drains at once and exits 0', async () => {
    const server = await startNereidServe([`--model-repository=${EXAMPLE_REPOSITORY}`, '--exit-timeout-secs=15']);
    try {
      for (let round = 0; round < 3; round++) {
        const first = await pipelineAndHangUp(server.port, PIPELINED);
        assert.match(first, /^HTTP\/1\.1 200 /);
      }
      // The server still answers, and has nothing in flight.
      const reply = await fetch(`${server.url}/v2/health/live`);
      assert.equal(reply.status, 200);
      server.process.child.kill('SIGTERM');
      const exit = await server.process.waitForExit();
      assert.deepEqual(exit, { code: 0, signal: null }, server.process.output);
      assert.doesNotMatch(server.process.stdout + server.process.stderr, /did not finish within --exit-timeout-secs/);
      assert.match(server.process.stdout, /all models unloaded; exiting/);
    } finally {
      await server.process.stop('SIGKILL');
    }
  });
});
