/**
 * `@nereid/client` against decoupled models: `GrpcClient.stream()` reads many results per request
 * with their final flags and the opted-in empty final result; leaving the loop cancels the
 * requests in flight on the server.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { GrpcClient, type GrpcStreamInferOptions, type StreamResult } from '@nereid/client';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { DecoupledBackend, repeatConfig } from './decoupled-backend.js';

let repo: string;
let srv: RunningGrpcServer;
let client: GrpcClient;
let backend: DecoupledBackend;

before(async () => {
  backend = new DecoupledBackend();
  repo = await makeRepository({ repeat: { 'config.pbtxt': repeatConfig('repeat'), '1/.keep': '' } });
  srv = await startServer({ modelRepositories: [repo], grpc: true, backends: [backend.backend] });
  client = new GrpcClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

function repeat(id: string, values: number[], parameters: Record<string, string | number> = {}): GrpcStreamInferOptions {
  return { model: 'repeat', id, inputs: [{ name: 'IN', datatype: 'INT32', shape: [values.length], data: Int32Array.from(values) }], parameters };
}

describe('GrpcClient streams with a decoupled model', () => {
  it('many results per request, each with its final flag; the empty final result only on opt-in', async () => {
    const stream = client.stream();
    stream.send({ ...repeat('a', [1, 2, 3], { delay_ms: 2 }) });
    stream.send({ ...repeat('b', [4], { mode: 'empty_final' }), enableEmptyFinalResponse: true });
    stream.send(repeat('c', [5], { mode: 'empty_final' }));
    stream.end();
    const results: StreamResult[] = [];
    for await (const r of stream) results.push(r);
    const summary = (id: string) =>
      results.filter((r) => r.id === id).map((r) => [r.result === undefined ? null : Array.from(r.result.typed('OUT') as Int32Array), r.final]);
    assert.deepEqual(summary('a'), [
      [[1], false],
      [[2], false],
      [[3], true],
    ]);
    assert.deepEqual(summary('b'), [
      [[4], false],
      [null, true],
    ]);
    assert.deepEqual(summary('c'), [[[5], false]]);
    for (const r of results) assert.equal(r.error, undefined);
  });

  it('leaving the loop early cancels the stream, and the backend sees the request cancelled', async () => {
    const stream = client.stream();
    stream.send(repeat('w', [9], { mode: 'wait_cancel' }));
    for await (const r of stream) {
      assert.equal(r.final, false);
      break;
    }
    await backend.whenFinished('w');
    assert.ok(backend.cancelled.includes('w'));
  });
});
