/**
 * The example custom backend of the bundled repository (examples/model_repository/tokenizer,
 * docs/backends.md): text in, token ids and attention mask out, over HTTP and gRPC.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { GrpcClient } from '@nereid/client';
import { EXAMPLE_REPOSITORY } from '../../helpers/cli.js';
import { httpRequest, jsonBody, outputNamed, startServer, type JsonInferResponse, type RunningGrpcServer } from '../../helpers/harness.js';

let srv: RunningGrpcServer;
let grpc: GrpcClient;

before(async () => {
  srv = await startServer({ modelRepositories: [EXAMPLE_REPOSITORY], modelControlMode: 'explicit', loadModels: ['tokenizer'], grpc: true });
  grpc = new GrpcClient(srv.grpcTarget);
});

after(async () => {
  grpc?.close();
  await srv?.stop();
});

// vocab.txt ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, "." 4, "," 5, "!" 6, hello 34, world 35, nereid 38, serves 40, the 9, model 36.
describe('example: the tokenizer backend', () => {
  it('tokenizes a batch over HTTP, padding to the longest text', async () => {
    const reply = await httpRequest(`${srv.url}/v2/models/tokenizer/infer`, {
      method: 'POST',
      body: JSON.stringify({ inputs: [{ name: 'TEXT', datatype: 'BYTES', shape: [2, 1], data: ['Hello, WORLD!', 'Nereid serves the model.'] }] }),
    });
    assert.equal(reply.status, 200, reply.text);
    const body = jsonBody(reply) as JsonInferResponse;
    assert.deepEqual(outputNamed(body, 'INPUT_IDS').shape, [2, 7]);
    assert.deepEqual(outputNamed(body, 'INPUT_IDS').data, [2, 34, 5, 35, 6, 3, 0, 2, 38, 40, 9, 36, 4, 3]);
    assert.deepEqual(outputNamed(body, 'ATTENTION_MASK').data, [1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1]);
  });

  it('maps unknown words to [UNK] and cuts at max_length over gRPC', async () => {
    const long = Array.from({ length: 40 }, () => 'zebra').join(' ');
    const result = await grpc.infer({ model: 'tokenizer', inputs: [{ name: 'TEXT', datatype: 'BYTES', shape: [1, 1], data: [long] }] });
    assert.deepEqual(result.shape('INPUT_IDS'), [1, 32]);
    const ids = [...(result.typed('INPUT_IDS') as BigInt64Array)].map(Number);
    assert.deepEqual(ids, [2, ...Array<number>(30).fill(1), 3]);
  });

  it('text that is not UTF-8 fails that request with the reason', async () => {
    const err = await grpc.infer({ model: 'tokenizer', inputs: [{ name: 'TEXT', datatype: 'BYTES', shape: [1, 1], data: [new Uint8Array([0xff, 0xfe])] }] }).then(
      () => assert.fail('succeeded'),
      (e: unknown) => e as Error,
    );
    assert.match(err.message, /model 'tokenizer': TEXT must be valid UTF-8 text/);
  });
});
