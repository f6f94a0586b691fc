/**
 * Malformed ModelInfer requests over real gRPC (protocol.md §2.1, §2.6, §4.6): each one fails
 * with the mapped status code and a message naming what is wrong, and the calls after it (on
 * the same channel) are unaffected.
 */
import assert from 'node:assert/strict';
import { status, type Client } from '@grpc/grpc-js';
import { after, before, describe, it } from 'node:test';
import type { pb } from '@nereid/protocol';
import { identityModel, simpleModel } from '@nereid/testkit';
import {
  assertSimpleResponse,
  assertStatus,
  inferenceClient,
  inferRequest,
  inputTensor,
  requestedOutput,
  simpleRequest,
  tensorContents,
  unary,
  unaryError,
} from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';

let repo: string;
let srv: RunningGrpcServer;
let client: Client;

before(async () => {
  repo = await makeRepository({
    simple: modelFiles(simpleModel()),
    identity_fp16: modelFiles(identityModel('FP16', [-1, -1])),
  });
  srv = await startServer({ modelRepositories: [repo], grpc: true });
  assert.deepEqual(srv.server.startReport.failures, []);
  client = inferenceClient(srv.grpcTarget);
});

after(async () => {
  client?.close();
  await srv?.stop();
  if (repo) await removeDir(repo);
});

/** A valid `simple` request changed by `edit`. */
function simpleWith(edit: (request: pb.ModelInferRequest) => void): pb.ModelInferRequest {
  const { request } = simpleRequest(1, 0);
  edit(request);
  return request;
}

const cases: [string, () => pb.ModelInferRequest, number, (string | RegExp)[]][] = [
  [
    'a datatype that differs from the model input',
    () => simpleWith((r) => (r.inputs[0]!.datatype = 'FP32')),
    status.INVALID_ARGUMENT,
    ["'INPUT0'", 'FP32', 'INT32'],
  ],
  ['an unknown datatype', () => simpleWith((r) => (r.inputs[1]!.datatype = 'INT31')), status.INVALID_ARGUMENT, ["'INPUT1'", "'INT31'"]],
  [
    'a shape that does not match the model',
    () => simpleWith((r) => {
      r.inputs[0]!.shape = [1n, 15n];
      r.raw_input_contents[0] = r.raw_input_contents[0]!.subarray(0, 60);
    }),
    status.INVALID_ARGUMENT,
    ["'INPUT0'", /shape/, /\[1,\s?15\]/],
  ],
  ['a negative dimension', () => simpleWith((r) => (r.inputs[0]!.shape = [-1n, 16n])), status.INVALID_ARGUMENT, ["'INPUT0'", /-1/]],
  ['a batch larger than max_batch_size', () => simpleRequest(9, 0).request, status.INVALID_ARGUMENT, [/batch/, /8/]],
  [
    'a raw entry with the wrong byte count',
    () => simpleWith((r) => (r.raw_input_contents[1] = r.raw_input_contents[1]!.subarray(0, 60))),
    status.INVALID_ARGUMENT,
    ["'INPUT1'", /60/, /64/],
  ],
  [
    'typed contents on one input while raw_input_contents is used',
    () => simpleWith((r) => {
      r.inputs[0]!.contents = tensorContents({ int_contents: new Array<number>(16).fill(1) });
      r.raw_input_contents = [r.raw_input_contents[1]!];
    }),
    status.INVALID_ARGUMENT,
    ['contents field must not be specified when using raw_input_contents', "'INPUT0'"],
  ],
  [
    'raw and typed contents for the same input',
    () => simpleWith((r) => (r.inputs[1]!.contents = tensorContents({ int_contents: new Array<number>(16).fill(1) }))),
    status.INVALID_ARGUMENT,
    ['contents field must not be specified when using raw_input_contents', "'INPUT1'"],
  ],
  [
    'typed contents of the wrong kind for the datatype',
    () =>
      inferRequest({
        model_name: 'simple',
        inputs: [
          inputTensor('INPUT0', 'INT32', [1, 16], { fp32_contents: new Array<number>(16).fill(0.5) }),
          inputTensor('INPUT1', 'INT32', [1, 16], { int_contents: new Array<number>(16).fill(1) }),
        ],
      }),
    status.INVALID_ARGUMENT,
    ['unexpected explicit tensor data', "'INPUT0'", 'fp32_contents'],
  ],
  [
    'typed contents for FP16, which has none',
    () => inferRequest({ model_name: 'identity_fp16', inputs: [inputTensor('INPUT0', 'FP16', [1, 2], { fp32_contents: [1, 2] })] }),
    status.INVALID_ARGUMENT,
    ['unexpected explicit tensor data', "'INPUT0'", 'FP16', 'raw_input_contents'],
  ],
  [
    'typed contents with the wrong element count',
    () =>
      inferRequest({
        model_name: 'simple',
        inputs: [
          inputTensor('INPUT0', 'INT32', [1, 16], { int_contents: new Array<number>(15).fill(1) }),
          inputTensor('INPUT1', 'INT32', [1, 16], { int_contents: new Array<number>(16).fill(1) }),
        ],
      }),
    status.INVALID_ARGUMENT,
    ["'INPUT0'", /60/, /64/],
  ],
  ['an unknown model', () => inferRequest({ model_name: 'nope' }), status.NOT_FOUND, ["Request for unknown model: 'nope' is not found"]],
  [
    'an unknown version',
    () => simpleWith((r) => (r.model_version = '9')),
    status.NOT_FOUND,
    ["Request for unknown model: 'simple' version 9 is not found"],
  ],
  ['a version that is not an integer', () => simpleWith((r) => (r.model_version = 'latest')), status.INVALID_ARGUMENT, ['integral value']],
  ['a negative version', () => simpleWith((r) => (r.model_version = '-1')), status.INVALID_ARGUMENT, ['integral value']],
  [
    'a missing input',
    () => simpleWith((r) => {
      r.inputs.pop();
      r.raw_input_contents.pop();
    }),
    status.INVALID_ARGUMENT,
    ["missing required input(s) ['INPUT1']"],
  ],
  [
    'an input without data',
    () => simpleWith((r) => r.raw_input_contents.pop()),
    status.INVALID_ARGUMENT,
    ["unable to find data for input tensor 'INPUT1' for model 'simple' in request."],
  ],
  [
    'more raw_input_contents than inputs',
    () => simpleWith((r) => r.raw_input_contents.push(new Uint8Array(64))),
    status.INVALID_ARGUMENT,
    ['3 raw_input_contents', 'raw_input_contents'],
  ],
  ['an unknown input', () => simpleWith((r) => (r.inputs[1]!.name = 'INPUT9')), status.INVALID_ARGUMENT, ["'INPUT9'"]],
  ['an unknown requested output', () => simpleWith((r) => r.outputs.push(requestedOutput('OUTPUT7'))), status.INVALID_ARGUMENT, ["'OUTPUT7'"]],
  [
    'an input given twice',
    () => simpleWith((r) => {
      r.inputs[1]!.name = 'INPUT0';
    }),
    status.INVALID_ARGUMENT,
    ["'INPUT0'"],
  ],
];

describe('malformed ModelInfer requests', () => {
  for (const [what, build, code, fragments] of cases) {
    it(`${what}: status ${status[code]}, and the next call succeeds`, async () => {
      const err = await unaryError(client, 'ModelInfer', build());
      assertStatus(err, code, ...fragments);
      const ok = simpleRequest(2, 3);
      assertSimpleResponse(await unary(client, 'ModelInfer', ok.request), ok, 2);
    });
  }

});
