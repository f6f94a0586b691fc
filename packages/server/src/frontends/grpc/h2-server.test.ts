import assert from 'node:assert/strict';
import { connect, type ServerHttp2Stream } from 'node:http2';
import { once } from 'node:events';
import { test } from 'node:test';
import { frameGrpcMessage } from '@nereid/protocol';
import { H2GrpcServer, type GrpcMethodDefinition, type H2DuplexCall, type H2UnaryCall } from './h2-server.js';

const OPTIONS = { maxReceiveMessageLength: 1 << 20, maxSendMessageLength: 1 << 20, keepaliveTimeMs: 0, keepaliveTimeoutMs: 20_000, maxConcurrentStreams: 0 };

function method(path: string, streaming: boolean): GrpcMethodDefinition {
  return {
    path,
    requestStream: streaming,
    responseStream: streaming,
    requestDeserialize: (bytes) => bytes.toString(),
    responseSerialize: (value: never) => Buffer.from(value as string),
  };
}

/** The server-side stream of a call (the calls keep it as a protected field). */
function streamOf(call: unknown): ServerHttp2Stream {
  return (call as { stream: ServerHttp2Stream }).stream;
}

test('a closed call leaves nothing of its own on its HTTP/2 stream: Node keeps a closed stream through young-generation collections, and every call its listeners reach with it', async () => {
  const server = new H2GrpcServer(OPTIONS);
  const streams: ServerHttp2Stream[] = [];
  server.addService(
    { Unary: method('/t.S/Unary', false), Duplex: method('/t.S/Duplex', true) },
    {
      Unary: (call: H2UnaryCall<string>, callback: (err: null, value: string) => void) => {
        streams.push(streamOf(call));
        callback(null, `echo ${call.request}`);
      },
      Duplex: (call: H2DuplexCall<string, string>) => {
        streams.push(streamOf(call));
        call.on('data', (message: string) => call.write(`echo ${message}`));
        call.on('end', () => call.end());
      },
    },
  );
  const port = await server.listen('127.0.0.1', 0);
  const session = connect(`http://127.0.0.1:${port}`);
  try {
    for (const path of ['/t.S/Unary', '/t.S/Duplex']) {
      const request = session.request({ ':method': 'POST', ':path': path, 'content-type': 'application/grpc', te: 'trailers' });
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      const trailers = once(request, 'trailers');
      request.end(frameGrpcMessage(Buffer.from('hi')));
      const [headers] = (await trailers) as [Record<string, string>];
      assert.equal(headers['grpc-status'], '0', path);
      assert.equal(Buffer.concat(chunks).subarray(5).toString(), 'echo hi', path);
      await once(request, 'close');
    }
    assert.equal(streams.length, 2);
    for (const stream of streams) {
      if (!stream.closed || !stream.destroyed) await once(stream, 'close');
      await new Promise((resolve) => setImmediate(resolve));
      assert.deepEqual(stream.eventNames(), ['error']);
      assert.equal(stream.listenerCount('error'), 1);
    }
  } finally {
    session.destroy();
    await new Promise<void>((resolve) => server.tryShutdown(resolve));
  }
});
