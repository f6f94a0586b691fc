/**
 * What a decoupled model's streamed response costs next to a whole request, all measured in one
 * run on the same JavaScript backend (no model compute: each response is one INT32 element):
 *   (a) facade: `Server.inferStream` on the decoupled model, which answers every request with
 *       `--responses` (default 64) responses, the final flag on the last; closed loop, 8 requests
 *       in flight → responses per second;
 *   (b) facade baseline: `Server.infer` on the same backend as a non-decoupled model (one
 *       response per request), 64 in flight → responses (= requests) per second;
 *   (c) gRPC: the decoupled model on one `ModelStreamInfer` stream, 8 requests in flight →
 *       messages per second;
 *   (d) gRPC baseline: the non-decoupled model on one stream, 64 requests in flight → messages
 *       per second.
 * Client and server share this process (the gRPC figures include the client's decoding). A ratio
 * above 1 means a streamed response costs less than a request. Targets alternate over `--rounds`
 * rounds of `--seconds`; medians are kept.
 *
 * Usage: node dist/bench/streaming.js [--seconds N] [--rounds N] [--responses N] [--json out.json]
 */
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, credentials, Metadata } from '@grpc/grpc-js';
import { GRPC_INFERENCE_SERVICE, type pb } from '@nereid/protocol';
import { BACKEND_SPI_VERSION, GrpcFrontend, Server, silentLogger, type Backend, type BackendRequest, type InferRequest } from '@nereid/server';
import { alternate, benchArgs, compared, median, report, runLoad } from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));
const responses = Math.floor(args.number('responses', 64));

/**
 * Answers each request, in the event loop's next turn, with `count` responses of its first IN
 * element (count = 1 unless decoupled).
 */
const burst: Backend = {
  name: 'burst',
  spiVersion: BACKEND_SPI_VERSION,
  async createModel(ctx) {
    const count = ctx.config.model_transaction_policy?.decoupled ? responses : 1;
    return {
      async createInstance() {
        return {
          async execute(requests: readonly BackendRequest[]) {
            // As a backend computing elsewhere would: the answer comes in a later event-loop turn.
            await new Promise<void>((resolve) => setImmediate(resolve));
            for (const r of requests) {
              const data = r.inputs.get('IN')!.data.subarray(0, 4);
              for (let i = 0; i < count; i++) {
                r.respond({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: [1], data }] }, i === count - 1);
              }
            }
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
};

const config = (name: string, decoupled: boolean) => `name: "${name}"
backend: "burst"
max_batch_size: 0
model_transaction_policy { decoupled: ${decoupled} }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
`;

const repo = await mkdtemp(join(tmpdir(), 'nereid-bench-stream-'));
for (const [name, decoupled] of [
  ['many', true],
  ['one', false],
] as const) {
  await mkdir(join(repo, name, '1'), { recursive: true });
  await writeFile(join(repo, name, 'config.pbtxt'), config(name, decoupled));
}
const server = await Server.start({ modelRepositories: [repo], backends: [burst], logger: silentLogger() });
const grpc = new GrpcFrontend(server, { address: '127.0.0.1', port: 0 });
const port = await grpc.listen();
const client = new Client(`127.0.0.1:${port}`, credentials.createInsecure());

const input = new Int32Array([7]);
const request = (model: string): InferRequest => ({ model, inputs: [{ name: 'IN', datatype: 'INT32', shape: [1], data: input }] });

/** One stream; `op()` sends a request and resolves at its final response; counts messages. */
function grpcStream(model: string) {
  const method = GRPC_INFERENCE_SERVICE.ModelStreamInfer;
  const call = client.makeBidiStreamRequest(method.path, method.requestSerialize, method.responseDeserialize, new Metadata(), {});
  // Closing the client at the end cancels the call: expected, not a failure.
  call.on('error', (err: { code?: number }) => {
    if (err.code !== 1) throw err;
  });
  const waiting = new Map<string, () => void>();
  let next = 0;
  let messages = 0;
  call.on('data', (m: pb.ModelStreamInferResponse) => {
    messages++;
    const r = m.infer_response!;
    if (m.error_message !== '') throw new Error(m.error_message);
    if (r.parameters['triton_final_response']?.bool_param) {
      waiting.get(r.id)?.();
      waiting.delete(r.id);
    }
  });
  const raw = new Uint8Array(input.buffer);
  return {
    get messages() {
      return messages;
    },
    op: () =>
      new Promise<void>((resolve) => {
        const id = String(next++);
        waiting.set(id, resolve);
        call.write({
          model_name: model,
          model_version: '',
          id,
          parameters: {},
          inputs: [{ name: 'IN', datatype: 'INT32', shape: [1n], parameters: {}, contents: undefined }],
          outputs: [],
          raw_input_contents: [raw],
        });
      }),
    end: () => call.end(),
  };
}

type Target = 'facade-many' | 'facade-one' | 'grpc-many' | 'grpc-one';
const targets: Target[] = ['facade-many', 'facade-one', 'grpc-many', 'grpc-one'];
const streams = { many: grpcStream('many'), one: grpcStream('one') };

const perSecond = await alternate(targets, rounds, async (target) => {
  switch (target) {
    case 'facade-many': {
      const r = await runLoad(() => server.inferStream(request('many'), { onResponse: () => undefined }), 8, seconds);
      return r.throughput * responses;
    }
    case 'facade-one':
      return (await runLoad(() => server.infer(request('one')), 64, seconds)).throughput;
    case 'grpc-many': {
      const r = await runLoad(streams.many.op, 8, seconds);
      return r.throughput * responses;
    }
    case 'grpc-one':
      return (await runLoad(streams.one.op, 64, seconds)).throughput;
  }
});
const [facadeMany, facadeOne, grpcMany, grpcOne] = perSecond.map(median) as [number, number, number, number];

report(
  [
    compared('stream_facade_responses_per_s', 'responses/s', facadeMany, facadeOne, 'one-response infer'),
    compared('stream_grpc_messages_per_s', 'messages/s', grpcMany, grpcOne, 'one-response stream requests'),
  ],
  jsonPath,
);
console.log(`rounds: ${perSecond.map((v, i) => `${targets[i]} [${v.map((x) => x.toFixed(0)).join(', ')}]`).join('; ')}`);

streams.many.end();
streams.one.end();
client.close();
grpc.forceClose();
await server.stop();
await rm(repo, { recursive: true, force: true });
