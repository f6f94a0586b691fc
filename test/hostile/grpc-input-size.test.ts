/**
 * `--grpc-max-input-size`: a gRPC request message larger than the limit, as sent or once
 * inflated, is refused with RESOURCE_EXHAUSTED. grpc-js inflates a compressed message only up to
 * the limit, so a small compressed message that would inflate to far more costs about the limit,
 * not what it would inflate to. The server keeps answering.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Metadata, status as Status, type Client, type ServiceError } from '@grpc/grpc-js';
import { GRPC_INFERENCE_SERVICE } from '@nereid/protocol';
import { simpleModel } from '@nereid/testkit';
import { parseServeArgs } from '@nereid/server';
import { inferenceClient } from '../helpers/grpc.js';
import { inferJson, makeRepository, removeDir, simpleCase, startServer, type RunningGrpcServer } from '../helpers/harness.js';
import { modelFiles } from '../helpers/models.js';
import { settledRss } from './support.js';

const MiB = 1024 * 1024;
const LIMIT = 1 * MiB;

/** Sends `bytes` as a ModelInfer request message; resolves with the status and details. */
function send(client: Client, bytes: Buffer): Promise<{ code: Status; details: string }> {
  const identity = (b: Buffer): Buffer => b;
  return new Promise((resolve) => {
    client.makeUnaryRequest(GRPC_INFERENCE_SERVICE.ModelInfer.path, identity, identity, bytes, new Metadata(), {}, (err: ServiceError | null) => {
      resolve(err ? { code: err.code, details: err.details } : { code: Status.OK, details: '' });
    });
  });
}

describe('--grpc-max-input-size', () => {
  let repo: string;
  let srv: RunningGrpcServer;
  let plain: Client;
  let gzip: Client;

  before(async () => {
    repo = await makeRepository({ simple: modelFiles(simpleModel()) });
    srv = await startServer({ modelRepositories: [repo], grpc: { maxInputSize: LIMIT } });
    plain = inferenceClient(srv.grpcTarget);
    // grpc.default_compression_algorithm 2: gzip every message this client sends.
    gzip = inferenceClient(srv.grpcTarget, { 'grpc.default_compression_algorithm': 2 });
  });

  after(async () => {
    plain?.close();
    gzip?.close();
    await srv?.stop();
    if (repo) await removeDir(repo);
  });

  async function assertServing(): Promise<void> {
    const reply = await inferJson(srv.url, 'simple', simpleCase(1).inputs);
    assert.equal(reply.status, 200, reply.text);
  }

  it('refuses a message over the limit with RESOURCE_EXHAUSTED', async () => {
    const got = await send(plain, Buffer.alloc(2 * MiB, 0x0a));
    assert.equal(Status[got.code], 'RESOURCE_EXHAUSTED', got.details);
    assert.match(got.details, /larger than max/i);
    await assertServing();
  });

  it('refuses a compressed message that inflates past the limit, without inflating it whole', async () => {
    const before = settledRss();
    // 128 MiB of zeros gzip to about 128 KiB; inflated whole they would cost 128 MiB or more.
    const bomb = Buffer.alloc(128 * MiB);
    const got = await send(gzip, bomb);
    assert.equal(Status[got.code], 'RESOURCE_EXHAUSTED', got.details);
    await assertServing();
    const grown = (settledRss() - before) / MiB;
    // Client and server share this process; the client's zero pages are never written.
    assert.ok(grown < 64, `the process holds ${grown.toFixed(0)} MiB more after the refused message`);
  });

  it('is an option of nereid serve, from 1 to the gRPC maximum', () => {
    assert.equal(parseServeArgs(['--model-repository=/m']).grpcMaxInputSize, 2_147_483_647);
    assert.equal(parseServeArgs(['--model-repository=/m', '--grpc-max-input-size=1048576']).grpcMaxInputSize, 1_048_576);
    assert.throws(() => parseServeArgs(['--model-repository=/m', '--grpc-max-input-size=0']), /--grpc-max-input-size expects an integer from 1 to 2147483647, got '0'/);
    assert.throws(() => parseServeArgs(['--model-repository=/m', '--grpc-max-input-size=2147483648']), /--grpc-max-input-size expects an integer from 1 to 2147483647/);
  });
});
