/**
 * The baseline of the gRPC benchmark: a bare grpc-js server with Nereid's `ModelInfer` and
 * `ModelStreamInfer` method paths (GRPC_INFERENCE_SERVICE) and channel options, answering every
 * request with fixed bytes (the responses Nereid gives to the same request). Requests are taken as
 * raw bytes and not decoded, responses are written pre-encoded, so the difference to Nereid is
 * everything Nereid does per request beyond grpc-js itself: decoding, validation, scheduling, the
 * worker-thread hop and encoding.
 *
 * Usage (child process): node bare-grpc-server.js <unary-response-file> <stream-response-file>
 * Prints `port <n>` on stdout once listening.
 */
import { readFileSync } from 'node:fs';
import { Server, ServerCredentials, type ServerDuplexStream, type ServerUnaryCall, type sendUnaryData } from '@grpc/grpc-js';
import { GRPC_INFERENCE_SERVICE } from '@nereid/protocol';

const unaryResponse = readFileSync(process.argv[2]!);
const streamResponse = readFileSync(process.argv[3]!);

const raw = { requestDeserialize: (b: Buffer) => b, responseSerialize: (b: Buffer) => b };
const service = {
  ModelInfer: { ...GRPC_INFERENCE_SERVICE.ModelInfer, ...raw },
  ModelStreamInfer: { ...GRPC_INFERENCE_SERVICE.ModelStreamInfer, ...raw },
};

// Nereid's channel options (grpc-frontend.ts): unlimited message sizes, keepalive defaults.
const server = new Server({
  'grpc.max_receive_message_length': 2_147_483_647,
  'grpc.max_send_message_length': 2_147_483_647,
  'grpc.keepalive_time_ms': 7_200_000,
  'grpc.keepalive_timeout_ms': 20_000,
});
server.addService(service, {
  ModelInfer: (_call: ServerUnaryCall<Buffer, Buffer>, callback: sendUnaryData<Buffer>) => callback(null, unaryResponse),
  ModelStreamInfer: (call: ServerDuplexStream<Buffer, Buffer>) => {
    call.on('data', () => call.write(streamResponse));
    call.on('end', () => call.end());
    call.on('error', () => undefined);
  },
});
server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, port) => {
  if (err) throw err;
  process.stdout.write(`port ${port}\n`);
});
process.on('SIGTERM', () => {
  server.forceShutdown();
  process.exit(0);
});
