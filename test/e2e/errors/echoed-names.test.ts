/**
 * Error messages repeat what the request named, but never more than a bounded part of it: a
 * 100 KB model, tensor or shared-memory region name is answered with the status it deserves
 * (a gRPC client would otherwise refuse the oversized `grpc-message` header and report
 * RESOURCE_EXHAUSTED), the name shortened to its start and length.
 */
import assert from 'node:assert/strict';
import { status, type Client } from '@grpc/grpc-js';
import { after, before, describe, it } from 'node:test';
import { MAX_CLIENT_ERROR_MESSAGE, MAX_ECHOED_RUN } from '@nereid/protocol';
import { simpleModel } from '@nereid/testkit';
import { assertStatus, inferenceClient, inferRequest, inputTensor, openStream, collectStream, unaryError } from '../../helpers/grpc.js';
import { makeRepository, removeDir, simpleCase, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

const HUGE = 'm'.repeat(100_000);

let repo: string;
let srv: RunningGrpcServer;
let client: Client;

before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()) });
  srv = await startServer({ modelRepositories: [repo], grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
  client = inferenceClient(srv.grpcTarget);
});

after(async () => {
  client.close();
  await srv.stop();
  await removeDir(repo);
});

/** A deadline, so that a call the client cannot complete fails instead of hanging. */
const deadline = () => ({ options: { deadline: Date.now() + 15_000 } });

/** The message keeps a bounded start of the name and says how long it was. */
function assertShortened(message: string, limit: number, length = HUGE.length): void {
  assert.ok(message.length <= limit, `${message.length} characters`);
  assert.ok(!message.includes('m'.repeat(MAX_ECHOED_RUN + 1)), 'the name is not repeated whole');
  assert.match(message, new RegExp(`m{16,}… \\(${length} characters\\)`));
}

describe('a 100 KB name in a request', () => {
  it('gRPC ModelMetadata / ModelInfer / ModelReady: NOT_FOUND, the name shortened', async () => {
    for (const rpc of ['ModelMetadata', 'ModelConfig'] as const) {
      const err = await unaryError(client, rpc, { name: HUGE, version: '' }, deadline());
      assertStatus(err, status.NOT_FOUND, 'Request for unknown model');
      assertShortened(err.details, MAX_CLIENT_ERROR_MESSAGE.header);
    }
    const err = await unaryError(client, 'ModelInfer', inferRequest({ model_name: HUGE }), deadline());
    assertStatus(err, status.NOT_FOUND, 'Request for unknown model');
    assertShortened(err.details, MAX_CLIENT_ERROR_MESSAGE.header);
  });

  it('gRPC: a huge tensor name and a huge shared-memory region name are refused with their own status', async () => {
    const c = simpleCase(1);
    const request = inferRequest({
      model_name: 'simple',
      inputs: [
        inputTensor(HUGE, 'INT32', [1, 16], { int_contents: c.inputs[0]!.data as number[] }),
        inputTensor('INPUT1', 'INT32', [1, 16], { int_contents: c.inputs[1]!.data as number[] }),
      ],
    });
    const err = await unaryError(client, 'ModelInfer', request, deadline());
    assertStatus(err, status.INVALID_ARGUMENT);
    assertShortened(err.details, MAX_CLIENT_ERROR_MESSAGE.header);
    const shm = await unaryError(client, 'SystemSharedMemoryStatus', { name: HUGE }, deadline());
    assert.notEqual(shm.code, status.RESOURCE_EXHAUSTED, shm.details);
    assertShortened(shm.details, MAX_CLIENT_ERROR_MESSAGE.header);
  });

  it('gRPC stream: the in-band error shortens the name too', async () => {
    const stream = openStream(client, deadline());
    stream.write(inferRequest({ model_name: HUGE, id: 'x' }));
    stream.end();
    const result = await collectStream(stream);
    assert.equal(result.responses.length, 1);
    assertShortened(result.responses[0]!.error_message, MAX_CLIENT_ERROR_MESSAGE.body);
  });

  it('HTTP: 404 for the model, 400 for the tensor, each with the name shortened', async () => {
    // A name in the URL is bounded by the request line (Node's 16 KiB of headers).
    const reply = await fetch(`${srv.url}/v2/models/${HUGE.slice(0, 10_000)}`);
    assert.equal(reply.status, 404);
    const { error } = (await reply.json()) as { error: string };
    assert.match(error, /Request for unknown model/);
    assertShortened(error, MAX_CLIENT_ERROR_MESSAGE.body, 10_000);
    const c = simpleCase(1);
    const body = JSON.stringify({ inputs: [{ ...c.inputs[0]!, name: HUGE }, c.inputs[1]!] });
    const bad = await fetch(`${srv.url}/v2/models/simple/infer`, { method: 'POST', body });
    assert.equal(bad.status, 400);
    assertShortened(((await bad.json()) as { error: string }).error, MAX_CLIENT_ERROR_MESSAGE.body);
  });
});
