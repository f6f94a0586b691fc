/**
 * Nereid's gRPC server at the wire (protocol.md §4.9), on both of its HTTP/2 transports (its own,
 * the default, and node:http2's): `grpc-timeout` in every unit, gzip and deflate requests, an
 * unknown encoding, messages split across DATA frames and several in one, keepalive closing a
 * connection whose client never answers a ping, maximum connection age, the ping policy; and a
 * smoke set served by every gRPC server (`--grpc-server=http2|node-http2|grpc-js`).
 */
import assert from 'node:assert/strict';
import { connect as connectHttp2, constants, type ClientHttp2Session, type IncomingHttpHeaders } from 'node:http2';
import { connect as connectTcp } from 'node:net';
import { randomBytes } from 'node:crypto';
import { deflateSync, gzipSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import { Metadata, status, type Client } from '@grpc/grpc-js';
import { GRPC_INFERENCE_SERVICE, pb } from '@nereid/protocol';
import { simpleModel } from '@nereid/testkit';
import {
  assertSimpleResponse,
  assertStatus,
  collectStream,
  inferenceClient,
  openStream,
  simpleRequest,
  unary,
  unaryError,
} from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { parseServeArgs, type GrpcFrontendOptions } from '@nereid/server';

let repo: string;

before(async () => {
  repo = await makeRepository({ simple: modelFiles(simpleModel()) });
});

after(async () => {
  if (repo) await removeDir(repo);
});

/** A message with gRPC's 5-byte prefix. */
function frame(message: Uint8Array, compressed = false): Buffer {
  const out = Buffer.alloc(5 + message.byteLength);
  out[0] = compressed ? 1 : 0;
  out.writeUInt32BE(message.byteLength, 1);
  out.set(message, 5);
  return out;
}

/** The messages of a response body. */
function unframe(body: Buffer): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at + 5 <= body.byteLength; ) {
    const length = body.readUInt32BE(at + 1);
    out.push(body.subarray(at + 5, at + 5 + length));
    at += 5 + length;
  }
  return out;
}

interface RawReply {
  code: number;
  details: string;
  headers: IncomingHttpHeaders;
  messages: Buffer[];
}

/**
 * One call on `session`: writes each chunk of `chunks` as its own DATA frame (a turn of the event
 * loop apart), then half-closes unless `end` is false. Resolves with the status and messages.
 */
function rawCall(
  session: ClientHttp2Session,
  path: string,
  chunks: Buffer[],
  headers: Record<string, string> = {},
  end = true,
): Promise<RawReply> {
  return new Promise((resolve, reject) => {
    const stream = session.request({
      [constants.HTTP2_HEADER_METHOD]: 'POST',
      [constants.HTTP2_HEADER_PATH]: path,
      [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc',
      te: 'trailers',
      ...headers,
    });
    let responseHeaders: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders = {};
    const body: Buffer[] = [];
    stream.on('response', (h) => (responseHeaders = h));
    stream.on('trailers', (t) => (trailers = t));
    stream.on('data', (chunk: Buffer) => body.push(chunk));
    stream.on('error', reject);
    stream.on('close', () => {
      const all = { ...responseHeaders, ...trailers };
      resolve({
        code: Number(all['grpc-status']),
        details: decodeURIComponent(String(all['grpc-message'] ?? '')),
        headers: responseHeaders,
        messages: unframe(Buffer.concat(body)),
      });
    });
    let i = 0;
    const next = () => {
      if (i < chunks.length) {
        stream.write(chunks[i++]);
        setImmediate(next);
      } else if (end) stream.end();
    };
    next();
  });
}

const INFER = GRPC_INFERENCE_SERVICE.ModelInfer;
const STREAM = GRPC_INFERENCE_SERVICE.ModelStreamInfer;

function assertSimpleMessage(bytes: Buffer | undefined, expected: ReturnType<typeof simpleRequest>): void {
  assert.ok(bytes, 'no response message');
  assertSimpleResponse(INFER.responseDeserialize(bytes), expected);
}

/** The wire-level tests run on both HTTP/2 transports of Nereid's gRPC server. */
const TRANSPORT = { http2: "Nereid's HTTP/2 transport", 'node-http2': 'node:http2' } as const;

for (const server of ['http2', 'node-http2'] as const) {
  describe(`the gRPC server on ${TRANSPORT[server]}`, () => {
    let srv: RunningGrpcServer;
    let session: ClientHttp2Session;

    before(async () => {
      srv = await startServer({ modelRepositories: [repo], grpc: { server } });
      session = connectHttp2(`http://${srv.grpcTarget}`);
    });

    after(async () => {
      session?.close();
      await srv?.stop();
    });

    it('takes a message split across DATA frames, byte by byte over its prefix', async () => {
      const ok = simpleRequest(1, 4);
      const bytes = frame(INFER.requestSerialize(ok.request));
      const chunks = [...Array.from({ length: 7 }, (_, i) => bytes.subarray(i, i + 1)), bytes.subarray(7, 40), bytes.subarray(40)];
      const reply = await rawCall(session, INFER.path, chunks);
      assert.equal(reply.code, status.OK, reply.details);
      assert.equal(reply.headers['content-type'], 'application/grpc+proto');
      assert.match(String(reply.headers['grpc-accept-encoding']), /gzip/);
      assertSimpleMessage(reply.messages[0], ok);
    });

    it('takes several stream messages in one DATA frame and answers each in order', async () => {
      const requests = [simpleRequest(1, 1, { id: 'a' }), simpleRequest(1, 2, { id: 'b' }), simpleRequest(1, 3, { id: 'c' })];
      const one = Buffer.concat(requests.map((r) => frame(STREAM.requestSerialize(r.request))));
      const reply = await rawCall(session, STREAM.path, [one]);
      assert.equal(reply.code, status.OK, reply.details);
      const responses = reply.messages.map((m) => STREAM.responseDeserialize(m));
      assert.deepEqual(responses.map((r) => r.infer_response?.id), ['a', 'b', 'c']);
      for (const [i, r] of responses.entries()) assertSimpleResponse(r.infer_response, requests[i]!);
    });

    for (const [encoding, compress] of [
      ['gzip', gzipSync],
      ['deflate', deflateSync],
    ] as const) {
      it(`inflates a ${encoding} request`, async () => {
        const ok = simpleRequest(1, 9);
        const body = frame(compress(INFER.requestSerialize(ok.request)), true);
        const reply = await rawCall(session, INFER.path, [body], { 'grpc-encoding': encoding });
        assert.equal(reply.code, status.OK, reply.details);
        assertSimpleMessage(reply.messages[0], ok);
      });
    }

    for (const [encoding, compress] of [
      ['gzip', gzipSync],
      ['deflate', deflateSync],
    ] as const) {
      it(`inflates a large ${encoding} request off the event loop, and delivers a stream's messages in order around it`, async () => {
        // A request id of random hex keeps the compressed message above the size inflated off the loop.
        const id = randomBytes(2048).toString('hex');
        const big = simpleRequest(1, 5, { id });
        const reply = await rawCall(session, INFER.path, [frame(compress(INFER.requestSerialize(big.request)), true)], { 'grpc-encoding': encoding });
        assert.equal(reply.code, status.OK, reply.details);
        const response = INFER.responseDeserialize(reply.messages[0]!);
        assert.equal(response.id, id);
        assertSimpleResponse(response, big);

        const requests = [simpleRequest(1, 1, { id: `a${id}` }), simpleRequest(1, 2, { id: 'b' }), simpleRequest(1, 3, { id: 'c' }), simpleRequest(1, 4, { id: `d${id}` })];
        const [a, b, c, d] = requests.map((r) => STREAM.requestSerialize(r.request));
        const one = Buffer.concat([frame(compress(a!), true), frame(b!), frame(compress(c!), true), frame(compress(d!), true)]);
        const streamed = await rawCall(session, STREAM.path, [one], { 'grpc-encoding': encoding });
        assert.equal(streamed.code, status.OK, streamed.details);
        const responses = streamed.messages.map((m) => STREAM.responseDeserialize(m).infer_response);
        assert.deepEqual(responses.map((r) => r?.id), [`a${id}`, 'b', 'c', `d${id}`]);
        for (const [i, r] of responses.entries()) assertSimpleResponse(r, requests[i]!);
      });
    }

    it('refuses an unknown encoding with UNIMPLEMENTED and says which it accepts', async () => {
      const body = frame(gzipSync(INFER.requestSerialize(simpleRequest().request)), true);
      const reply = await rawCall(session, INFER.path, [body], { 'grpc-encoding': 'snappy' });
      assert.equal(reply.code, status.UNIMPLEMENTED, reply.details);
      assert.match(reply.details, /unsupported encoding "snappy"/);
      assert.equal(reply.headers['grpc-accept-encoding'], 'identity,deflate,gzip');
    });

    it('answers an unknown method with UNIMPLEMENTED, a GET with 405 and a wrong content type with 415', async () => {
      const reply = await rawCall(session, '/inference.GRPCInferenceService/Nope', [frame(Buffer.alloc(0))]);
      assert.equal(reply.code, status.UNIMPLEMENTED);
      assert.match(reply.details, /does not implement the method \/inference.GRPCInferenceService\/Nope/);
      for (const [headers, expected] of [
        [{ [constants.HTTP2_HEADER_METHOD]: 'GET', [constants.HTTP2_HEADER_PATH]: INFER.path, [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc' }, 405],
        [{ [constants.HTTP2_HEADER_METHOD]: 'POST', [constants.HTTP2_HEADER_PATH]: INFER.path, [constants.HTTP2_HEADER_CONTENT_TYPE]: 'text/plain' }, 415],
      ] as const) {
        const got = await new Promise<number>((resolve, reject) => {
          const stream = session.request(headers, { endStream: true });
          stream.on('response', (h) => resolve(Number(h[constants.HTTP2_HEADER_STATUS])));
          stream.on('error', reject);
          stream.resume();
        });
        assert.equal(got, expected);
      }
    });

    it('percent-encodes grpc-message', async () => {
      const request = simpleRequest(1, 0, { model_name: 'nö model %' }).request;
      const reply = await rawCall(session, INFER.path, [frame(INFER.requestSerialize(request))]);
      assert.equal(reply.code, status.NOT_FOUND);
      assert.match(reply.details, /nö model %/);
    });

    // A call whose client never half-closes waits for its message until the deadline.
    const expiring: [timeout: string, within: number][] = [
      ['150m', 150],
      ['150000u', 150],
      ['90000000n', 90],
      ['1S', 1000],
    ];
    for (const [timeout, ms] of expiring) {
      it(`ends a call at its grpc-timeout ${timeout} with DEADLINE_EXCEEDED`, async () => {
        const started = Date.now();
        const reply = await rawCall(session, INFER.path, [], { 'grpc-timeout': timeout }, false);
        const took = Date.now() - started;
        assert.equal(reply.code, status.DEADLINE_EXCEEDED, reply.details);
        assert.equal(reply.details, 'Deadline exceeded');
        assert.ok(took >= ms - 5, `ended after ${took} ms`);
      });
    }

    for (const timeout of ['1M', '1H', '99999999S', '5000000u']) {
      it(`serves a call whose grpc-timeout ${timeout} is far off`, async () => {
        const ok = simpleRequest(1, 2);
        const reply = await rawCall(session, INFER.path, [frame(INFER.requestSerialize(ok.request))], { 'grpc-timeout': timeout });
        assert.equal(reply.code, status.OK, reply.details);
        assertSimpleMessage(reply.messages[0], ok);
      });
    }

    it('refuses a malformed grpc-timeout', async () => {
      const reply = await rawCall(session, INFER.path, [frame(INFER.requestSerialize(simpleRequest().request))], { 'grpc-timeout': '10x' });
      assert.equal(reply.code, status.INTERNAL);
      assert.match(reply.details, /Invalid grpc-timeout value "10x"/);
    });

    it('answers a second message on a unary call with UNIMPLEMENTED', async () => {
      const bytes = frame(INFER.requestSerialize(simpleRequest().request));
      const reply = await rawCall(session, INFER.path, [Buffer.concat([bytes, bytes])]);
      assert.equal(reply.code, status.UNIMPLEMENTED);
      assert.match(reply.details, /second request message/);
    });

    it('sends the status of a stream that ends after a response while the client is still sending', async () => {
      const client = inferenceClient(srv.grpcTarget);
      try {
        const metadata = new Metadata();
        metadata.set('triton_grpc_error', 'true');
        const stream = openStream(client, { metadata });
        const result = collectStream(stream);
        stream.write(simpleRequest(1, 1, { id: 'good' }).request);
        stream.write(simpleRequest(1, 0, { model_name: 'missing' }).request);
        const { responses, status: end } = await result;
        assert.deepEqual(responses.map((r: pb.ModelStreamInferResponse) => r.infer_response?.id), ['good']);
        assert.equal(end.code, status.NOT_FOUND, end.details);
        stream.end();
      } finally {
        client.close();
      }
    });

    it('survives an HTTP/1.1 request and garbage on its port', async () => {
      for (const bytes of ['POST /inference.GRPCInferenceService/ModelInfer HTTP/1.1\r\nHost: x\r\n\r\n', Buffer.alloc(4096, 0xa7)]) {
        await new Promise<void>((resolve) => {
          const socket = connectTcp(srv.grpcPort, '127.0.0.1', () => socket.write(bytes));
          socket.on('error', () => undefined);
          socket.on('close', () => resolve());
          socket.resume();
        });
      }
      const ok = simpleRequest(1, 5);
      const reply = await rawCall(session, INFER.path, [frame(INFER.requestSerialize(ok.request))]);
      assertSimpleMessage(reply.messages[0], ok);
    });
  });

  describe(`the gRPC server on ${TRANSPORT[server]}: --grpc-max-input-size and compressed messages`, () => {
    let srv: RunningGrpcServer;
    let session: ClientHttp2Session;

    before(async () => {
      srv = await startServer({ modelRepositories: [repo], grpc: { server, maxInputSize: 100_000 } });
      session = connectHttp2(`http://${srv.grpcTarget}`);
    });

    after(async () => {
      session?.close();
      await srv?.stop();
    });

    for (const [encoding, compress] of [
      ['gzip', gzipSync],
      ['deflate', deflateSync],
    ] as const) {
      for (const size of [200_000, 8_000_000]) {
        it(`refuses a ${encoding} message that inflates to ${size} bytes, past the limit, with RESOURCE_EXHAUSTED and keeps serving`, async () => {
          const reply = await rawCall(session, INFER.path, [frame(compress(Buffer.alloc(size)), true)], { 'grpc-encoding': encoding });
          assert.equal(reply.code, status.RESOURCE_EXHAUSTED, reply.details);
          assert.equal(reply.details, 'Received message that decompresses to a size larger than 100000');
          const ok = simpleRequest(1, 2);
          assertSimpleMessage((await rawCall(session, INFER.path, [frame(INFER.requestSerialize(ok.request))])).messages[0], ok);
        });
      }
    }

    it('fails a stream at a message that inflates past the limit, after answering the ones before it', async () => {
      const first = simpleRequest(1, 1, { id: 'first' });
      const one = Buffer.concat([frame(STREAM.requestSerialize(first.request)), frame(gzipSync(Buffer.alloc(8_000_000)), true), frame(STREAM.requestSerialize(simpleRequest(1, 2, { id: 'never' }).request))]);
      const reply = await rawCall(session, STREAM.path, [one], { 'grpc-encoding': 'gzip' });
      assert.equal(reply.code, status.RESOURCE_EXHAUSTED, reply.details);
      const ids = reply.messages.map((m) => STREAM.responseDeserialize(m).infer_response?.id);
      assert.ok(!ids.includes('never'), `answered ${ids.join(', ')}`);
    });
  });

  describe(`the gRPC server on ${TRANSPORT[server]}: connection lifetime`, () => {
    let srv: RunningGrpcServer;

    before(async () => {
      srv = await startServer({
        modelRepositories: [repo],
        grpc: {
          server,
          keepaliveTimeMs: 200,
          keepaliveTimeoutMs: 200,
          maxConnectionAgeMs: 1500,
          maxConnectionAgeGraceMs: 300,
          maxConcurrentStreams: 3,
          // The silent client below opens no call: pings it only if permitted.
          keepalivePermitWithoutCalls: true,
        },
      });
    });

    after(async () => {
      await srv?.stop();
    });

    it('announces --grpc-max-concurrent-streams in its SETTINGS', async () => {
      const session = connectHttp2(`http://${srv.grpcTarget}`);
      try {
        const settings = await new Promise<{ maxConcurrentStreams?: number }>((resolve) => session.once('remoteSettings', resolve));
        assert.equal(settings.maxConcurrentStreams, 3);
      } finally {
        session.close();
      }
    });

    it('closes a connection whose client never answers a keepalive ping', async () => {
      const started = Date.now();
      await new Promise<void>((resolve) => {
        const socket = connectTcp(srv.grpcPort, '127.0.0.1', () => {
          // The client preface and an empty SETTINGS frame; then silence (no PING ACK).
          socket.write(Buffer.concat([Buffer.from('PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n'), Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0])]));
        });
        socket.on('error', () => undefined);
        socket.on('close', () => resolve());
        socket.resume();
      });
      const took = Date.now() - started;
      assert.ok(took < 1400, `closed after ${took} ms, before the maximum age`);
    });

    it('keeps a connection that answers pings until its maximum age, then sends GOAWAY and closes it', async () => {
      const started = Date.now();
      const session = connectHttp2(`http://${srv.grpcTarget}`);
      const goaway = new Promise<number>((resolve) => session.once('goaway', () => resolve(Date.now() - started)));
      const closed = new Promise<number>((resolve) => session.once('close', () => resolve(Date.now() - started)));
      session.on('error', () => undefined);
      const ok = simpleRequest(1, 6);
      assertSimpleMessage((await rawCall(session, INFER.path, [frame(INFER.requestSerialize(ok.request))])).messages[0], ok);
      // A call still open at the GOAWAY may go on for the grace period, then the connection closes.
      const open = rawCall(session, INFER.path, [], {}, false).catch(() => undefined);
      const at = await goaway;
      assert.ok(at >= 1400, `GOAWAY after ${at} ms`);
      const end = await closed;
      assert.ok(end >= at, `closed after ${end} ms`);
      await open;
    });
  });

  describe(`the gRPC server on ${TRANSPORT[server]}: ping policy (gRPC core's keepalive rules)`, () => {
    let strict: RunningGrpcServer;
    let permissive: RunningGrpcServer;
    const READY = GRPC_INFERENCE_SERVICE.ServerReady;

    before(async () => {
      // Triton's defaults for the ping settings, with keepalive pings every 100 ms.
      strict = await startServer({ modelRepositories: [repo], grpc: { server, keepaliveTimeMs: 100, keepaliveTimeoutMs: 5000 } });
      permissive = await startServer({
        modelRepositories: [repo],
        grpc: { server, keepaliveTimeMs: 100, keepaliveTimeoutMs: 5000, keepalivePermitWithoutCalls: true, maxPingsWithoutData: 0, minRecvPingIntervalWithoutDataMs: 0 },
      });
    });

    after(async () => {
      await strict?.stop();
      await permissive?.stop();
    });

    /** A client session that records the GOAWAY it gets and the pings the server sends it. */
    async function client(target: string) {
      const session = connectHttp2(`http://${target}`);
      await new Promise((resolve) => session.once('connect', resolve));
      session.on('error', () => undefined);
      const seen = { pings: 0, goaway: undefined as { code: number; data: string } | undefined };
      session.on('ping', () => seen.pings++);
      session.on('goaway', (code: number, _last: number, data?: Buffer) => (seen.goaway = { code, data: data?.toString() ?? '' }));
      const ping = () => new Promise<boolean>((resolve) => session.ping((err) => resolve(err === null || err === undefined)));
      return { session, seen, ping };
    }

    const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

    it('ends a connection whose client pings again and again while nothing is sent: GOAWAY ENHANCE_YOUR_CALM "too_many_pings" past --grpc-http2-max-ping-strikes', async () => {
      const { session, seen, ping } = await client(strict.grpcTarget);
      const closed = new Promise((resolve) => session.once('close', resolve));
      // The first ping is fine, the next two are strikes (2 allowed), the fourth ends the connection.
      for (let i = 0; i < 3; i++) assert.equal(await ping(), true, `ping ${i + 1}`);
      assert.equal(seen.goaway, undefined);
      await ping();
      await closed;
      assert.deepEqual(seen.goaway, { code: constants.NGHTTP2_ENHANCE_YOUR_CALM, data: 'too_many_pings' });
    });

    it('forgets the strikes once the server sends headers or data', async () => {
      const { session, seen, ping } = await client(strict.grpcTarget);
      try {
        for (let round = 0; round < 3; round++) {
          for (let i = 0; i < 3; i++) assert.equal(await ping(), true, `round ${round}, ping ${i + 1}`);
          const reply = await rawCall(session, READY.path, [frame(READY.requestSerialize({}))]);
          assert.equal(reply.code, 0);
        }
        assert.equal(seen.goaway, undefined);
        assert.equal(session.destroyed, false);
      } finally {
        session.close();
      }
    });

    it('sends keepalive pings only while calls are open, and at most --grpc-http2-max-pings-without-data (2) while it sends nothing', async () => {
      const { session, seen } = await client(strict.grpcTarget);
      try {
        await sleep(450);
        assert.equal(seen.pings, 0, 'pings on a connection without calls');
        // A stream that sends nothing holds a call open, and the server has nothing to send on it.
        const open = rawCall(session, STREAM.path, [], {}, false).catch(() => undefined);
        await sleep(650);
        assert.equal(seen.pings, 2);
        session.destroy();
        await open;
      } finally {
        session.destroy();
      }
    });

    it('with --grpc-keepalive-permit-without-calls, no ping interval and no ping limit, pings and takes pings on an idle connection any number of times', async () => {
      const { session, seen, ping } = await client(permissive.grpcTarget);
      try {
        for (let i = 0; i < 8; i++) assert.equal(await ping(), true, `ping ${i + 1}`);
        await sleep(450);
        assert.ok(seen.pings >= 3, `${seen.pings} keepalive pings in 450 ms`);
        assert.equal(seen.goaway, undefined);
        const reply = await rawCall(session, READY.path, [frame(READY.requestSerialize({}))]);
        assert.equal(reply.code, 0);
      } finally {
        session.close();
      }
    });
  });
}

it('parses the ping settings, with gRPC core\'s defaults', () => {
  const defaults = parseServeArgs(['--model-repository=/m']);
  assert.deepEqual(
    [defaults.grpcKeepalivePermitWithoutCalls, defaults.grpcMaxPingsWithoutData, defaults.grpcMinRecvPingIntervalWithoutDataMs, defaults.grpcMaxPingStrikes],
    [false, 2, 300_000, 2],
  );
  const set = parseServeArgs([
    '--model-repository=/m',
    '--grpc-keepalive-permit-without-calls=true',
    '--grpc-http2-max-pings-without-data=0',
    '--grpc-http2-min-recv-ping-interval-without-data=10000',
    '--grpc-http2-max-ping-strikes=5',
  ]);
  assert.deepEqual([set.grpcKeepalivePermitWithoutCalls, set.grpcMaxPingsWithoutData, set.grpcMinRecvPingIntervalWithoutDataMs, set.grpcMaxPingStrikes], [true, 0, 10_000, 5]);
  assert.deepEqual(set.ignored, []);
  assert.throws(() => parseServeArgs(['--model-repository=/m', '--grpc-http2-max-ping-strikes=-1']), /grpc-http2-max-ping-strikes/);
});

it('--grpc-server is http2 by default, takes node-http2 and grpc-js, and refuses anything else', () => {
  assert.equal(parseServeArgs(['--model-repository=/m']).grpcServer, 'http2');
  assert.equal(parseServeArgs(['--model-repository=/m', '--grpc-server=node-http2']).grpcServer, 'node-http2');
  assert.equal(parseServeArgs(['--model-repository=/m', '--grpc-server=grpc-js']).grpcServer, 'grpc-js');
  assert.throws(() => parseServeArgs(['--model-repository=/m', '--grpc-server=grpcio']), /--grpc-server must be 'http2', 'node-http2' or 'grpc-js', got 'grpcio'/);
});

for (const kind of ['http2', 'node-http2', 'grpc-js'] as const) {
  describe(`--grpc-server=${kind} serves`, () => {
    let srv: RunningGrpcServer;
    let client: Client;

    before(async () => {
      const options: GrpcFrontendOptions = { server: kind };
      srv = await startServer({ modelRepositories: [repo], grpc: options });
      client = inferenceClient(srv.grpcTarget);
    });

    after(async () => {
      client?.close();
      await srv?.stop();
    });

    it('ServerLive, ModelInfer and an error status', async () => {
      assert.deepEqual(await unary(client, 'ServerLive', {}), { live: true });
      const ok = simpleRequest(2, 3);
      assertSimpleResponse(await unary(client, 'ModelInfer', ok.request), ok, 2);
      assertStatus(await unaryError(client, 'ModelInfer', simpleRequest(1, 0, { model_name: 'missing' }).request), status.NOT_FOUND, 'missing');
    });

    it('ModelStreamInfer', async () => {
      const stream = openStream(client);
      const requests = [simpleRequest(1, 1, { id: '1' }), simpleRequest(1, 2, { id: '2' })];
      const result = collectStream(stream);
      for (const r of requests) stream.write(r.request);
      stream.end();
      const { responses, status: end } = await result;
      assert.equal(end.code, status.OK, end.details);
      assert.deepEqual(responses.map((r: pb.ModelStreamInferResponse) => r.infer_response?.id), ['1', '2']);
    });

    // Last: it closes this server's connections.
    it('closed by force, ends an open stream with CANCELLED', async () => {
      const stream = openStream(client);
      const result = collectStream(stream);
      const ok = simpleRequest(1, 1, { id: 'a' });
      stream.write(ok.request);
      await new Promise<void>((resolve) => stream.once('data', () => resolve()));
      srv.grpc.forceClose();
      const { status: end } = await result;
      assert.equal(end.code, status.CANCELLED, `${end.code}: ${end.details}`);
    });
  });
}
