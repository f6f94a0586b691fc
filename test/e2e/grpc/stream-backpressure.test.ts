/**
 * ModelStreamInfer with a client that stops reading (protocol.md §4.7): once the stream's
 * responses back up, the server stops taking requests off the stream, so HTTP/2 flow control holds
 * the client's writes instead of the server buffering every response; when the client reads
 * again, every response arrives, in request order, with its id and its data, even though other
 * calls ran the model meanwhile (a waiting response keeps its pooled output buffer until grpc-js
 * encodes it). Also: responses that
 * complete together (a burst of requests on one stream) arrive in order with the right ids.
 *
 * The client is gRPC framed by hand over `node:http2`, so that pausing its stream really stops
 * reading (and acknowledging) the server's DATA frames.
 */
import assert from 'node:assert/strict';
import { connect, constants, type ClientHttp2Session, type ClientHttp2Stream, type IncomingHttpHeaders } from 'node:http2';
import { after, before, describe, it } from 'node:test';
import { GRPC_INFERENCE_SERVICE, pb } from '@nereid/protocol';
import { identityModel, simpleModel } from '@nereid/testkit';
import { inferRequest, inputTensor, rawBytes, simpleRequest, assertSimpleResponse } from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

/** Elements per request: 256 KiB of FP32 each way. */
const ELEMENTS = 65_536;
/** Far more response bytes than HTTP/2 windows and socket buffers hold (24 MiB). */
const REQUESTS = 96;

let repo: string;
let srv: RunningGrpcServer;
let session: ClientHttp2Session;

before(async () => {
  repo = await makeRepository({
    big: modelFiles(identityModel('FP32', [-1, ELEMENTS], { name: 'big' })),
    simple: modelFiles(simpleModel()),
  });
  srv = await startServer({ modelRepositories: [repo], grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
  // The requests written ahead of the server's reads are held in the session's memory (MB).
  session = connect(`http://${srv.grpcTarget}`, { maxSessionMemory: 256 });
  await new Promise<void>((resolve, reject) => {
    session.once('connect', () => resolve());
    session.once('error', reject);
  });
});

after(async () => {
  session?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

/** A message as one gRPC length-prefixed frame (uncompressed). */
function frame(message: pb.ModelInferRequest): Buffer {
  const bytes = pb.ModelInferRequest.encode(message).finish();
  const framed = Buffer.alloc(5 + bytes.byteLength);
  framed.writeUInt32BE(bytes.byteLength, 1);
  framed.set(bytes, 5);
  return framed;
}

/** Opens ModelStreamInfer; `messages` collects every response message as it is read. */
function openRawStream(): { stream: ClientHttp2Stream; messages: pb.ModelStreamInferResponse[]; done: Promise<string> } {
  const stream = session.request({
    [constants.HTTP2_HEADER_METHOD]: 'POST',
    [constants.HTTP2_HEADER_PATH]: GRPC_INFERENCE_SERVICE.ModelStreamInfer.path,
    'content-type': 'application/grpc',
    te: 'trailers',
  });
  const messages: pb.ModelStreamInferResponse[] = [];
  let pending: Buffer = Buffer.alloc(0);
  let headers: IncomingHttpHeaders = {};
  let trailers: IncomingHttpHeaders = {};
  stream.on('response', (h) => (headers = h));
  stream.on('trailers', (t) => (trailers = t));
  stream.on('data', (chunk: Buffer) => {
    pending = pending.byteLength === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.byteLength >= 5 && pending.byteLength >= 5 + pending.readUInt32BE(1)) {
      const length = pending.readUInt32BE(1);
      messages.push(pb.ModelStreamInferResponse.decode(pending.subarray(5, 5 + length)));
      pending = pending.subarray(5 + length);
    }
  });
  const done = new Promise<string>((resolve, reject) => {
    stream.on('error', reject);
    stream.on('end', () => resolve(String(trailers['grpc-status'] ?? headers['grpc-status'])));
  });
  // Awaited by the test; a test that failed first must not leave it unhandled.
  done.catch(() => undefined);
  return { stream, messages, done };
}

function bigRequest(i: number): pb.ModelInferRequest {
  const data = new Float32Array(ELEMENTS).fill(i);
  data[0] = -i;
  return inferRequest({
    model_name: 'big',
    id: `r${i}`,
    inputs: [inputTensor('INPUT0', 'FP32', [1, ELEMENTS])],
    raw_input_contents: [rawBytes(data)],
  });
}

const inferences = (model: string) => srv.server.modelStatistics(model)[0]!.inference_count;

/** Waits until `read()` has not changed for `quietMs` (polled), and returns it. */
async function settled(read: () => number, quietMs = 500): Promise<number> {
  let value = read();
  let since = Date.now();
  for (;;) {
    await new Promise((resolve) => setTimeout(resolve, 50));
    const now = read();
    if (now !== value) {
      value = now;
      since = Date.now();
    } else if (Date.now() - since >= quietMs) {
      return value;
    }
  }
}

// A bound against hangs only; nothing here asserts a duration.
describe('ModelStreamInfer backpressure', { timeout: 120_000 }, () => {
  it('stops taking requests while the client does not read, then delivers every response in order', async () => {
    const before = inferences('big');
    const { stream, messages, done } = openRawStream();
    stream.pause();
    for (let i = 0; i < REQUESTS; i++) stream.write(frame(bigRequest(i)));
    stream.end();

    const served = (await settled(() => inferences('big'))) - before;
    assert.equal(messages.length, 0);
    assert.ok(served < REQUESTS, `the server ran all ${REQUESTS} requests of a stream whose client read nothing`);
    // Other calls run the model meanwhile: the responses waiting to be written still hold their
    // output buffers (given back for reuse only once encoded), so these cannot overwrite them.
    const others = await Promise.all(
      Array.from({ length: 8 }, () =>
        srv.server.infer({ model: 'big', inputs: [{ name: 'INPUT0', datatype: 'FP32', shape: [1, ELEMENTS], data: new Float32Array(ELEMENTS).fill(-7) }] }),
      ),
    );
    for (const o of others) srv.server.recycleOutputs(o);

    stream.resume();
    assert.equal(await done, '0');
    assert.deepEqual(
      messages.map((m) => m.infer_response?.id),
      Array.from({ length: REQUESTS }, (_, i) => `r${i}`),
    );
    messages.forEach((m, i) => {
      assert.equal(m.error_message, '');
      const out = new Float32Array(new Uint8Array(m.infer_response!.raw_output_contents[0]!).buffer);
      assert.equal(out.length, ELEMENTS);
      assert.equal(out[0], -i);
      assert.ok(out.subarray(1).every((v) => v === i), `response r${i} holds another call's values`);
    });
    assert.equal(inferences('big') - before, REQUESTS + 8);
  });

  it('answers a burst of requests written at once in order, each with its id and its own data', async () => {
    const { stream, messages, done } = openRawStream();
    const calls = Array.from({ length: 200 }, (_, i) => simpleRequest(1 + (i % 8), i, { id: `b${i}` }));
    stream.end(Buffer.concat(calls.map((c) => frame(c.request))));
    assert.equal(await done, '0');
    assert.deepEqual(
      messages.map((m) => m.infer_response?.id),
      calls.map((_, i) => `b${i}`),
    );
    messages.forEach((m, i) => {
      assert.equal(m.error_message, '');
      assertSimpleResponse(m.infer_response, calls[i]!, 1 + (i % 8));
    });
  });
});
