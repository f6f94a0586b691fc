/**
 * A second baseline of the gRPC benchmark: gRPC framed by hand on `node:http2`, with no gRPC
 * library, serving Nereid's `ModelInfer` and `ModelStreamInfer` method paths and answering every
 * request with fixed bytes, as bare-grpc-server.ts does with grpc-js. Measured beside it, it shows
 * what grpc-js itself costs per call over Node's HTTP/2 (bench/grpc-overhead.ts).
 *
 * Usage (child process): node bare-http2-grpc-server.js <unary-response-file> <stream-response-file>
 * Prints `port <n>` on stdout once listening.
 */
import { readFileSync } from 'node:fs';
import { createServer, constants, type ServerHttp2Stream } from 'node:http2';
import { frameGrpcMessage, GRPC_INFERENCE_SERVICE } from '@nereid/protocol';

const unaryResponse = frameGrpcMessage(readFileSync(process.argv[2]!));
const streamResponse = frameGrpcMessage(readFileSync(process.argv[3]!));
const HEADERS = { [constants.HTTP2_HEADER_STATUS]: 200, [constants.HTTP2_HEADER_CONTENT_TYPE]: 'application/grpc' };
const OK = { 'grpc-status': '0' };

/** Calls `onMessage` once per complete gRPC message received on `stream`. */
function onMessages(stream: ServerHttp2Stream, onMessage: () => void): void {
  let pending: Buffer = Buffer.alloc(0);
  stream.on('data', (chunk: Buffer) => {
    pending = pending.byteLength === 0 ? chunk : Buffer.concat([pending, chunk]);
    while (pending.byteLength >= 5) {
      const length = pending.readUInt32BE(1);
      if (pending.byteLength < 5 + length) break;
      pending = pending.subarray(5 + length);
      onMessage();
    }
  });
}

function respond(stream: ServerHttp2Stream): void {
  stream.respond(HEADERS, { waitForTrailers: true });
  stream.once('wantTrailers', () => stream.sendTrailers(OK));
}

const server = createServer({ settings: { maxConcurrentStreams: 1024 } });
server.on('stream', (stream, headers) => {
  stream.on('error', () => undefined);
  const path = headers[constants.HTTP2_HEADER_PATH];
  if (path === GRPC_INFERENCE_SERVICE.ModelInfer.path) {
    let messages = 0;
    onMessages(stream, () => messages++);
    stream.on('end', () => {
      respond(stream);
      stream.end(unaryResponse);
    });
  } else if (path === GRPC_INFERENCE_SERVICE.ModelStreamInfer.path) {
    respond(stream);
    onMessages(stream, () => stream.write(streamResponse));
    stream.on('end', () => stream.end());
  } else {
    stream.respond({ ...HEADERS, 'grpc-status': '12', 'grpc-message': `no method ${String(path)}` }, { endStream: true });
  }
});
server.listen(0, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`port ${typeof address === 'object' && address ? address.port : 0}\n`);
});
process.on('SIGTERM', () => {
  server.close();
  process.exit(0);
});
