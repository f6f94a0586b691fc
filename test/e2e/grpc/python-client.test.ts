/**
 * An independent client: Python's grpcio with stubs generated at test time from our .proto files
 * by grpc_tools.protoc, against the gRPC frontend (protocol.md §4, §7.4). Checks that the schema
 * files are what another protobuf implementation compiles and speaks, not only ts-proto.
 *
 * Needs Debian's python3-grpcio and python3-grpc-tools for /usr/bin/python3 (npm test installs
 * them); without them the tests fail and say so, they are never skipped.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { after, before, describe, it } from 'node:test';
import { NEREID_VERSION } from '@nereid/server';
import { simpleModel } from '@nereid/testkit';
import { simpleRequest } from '../../helpers/grpc.js';
import { makeRepository, removeDir, startServer, type RunningGrpcServer } from '../../helpers/harness.js';
import { modelFiles } from '../../helpers/models.js';
import { DecoupledBackend, repeatConfig } from '../streaming/decoupled-backend.js';

const PYTHON = '/usr/bin/python3';
const ROOT = fileURLToPath(new URL('../../../../', import.meta.url));
const PROTO_DIR = join(ROOT, 'packages/protocol/proto');
const MISSING =
  `${PYTHON} cannot import grpc and grpc_tools. This test needs Debian's gRPC packages for the system Python: ` +
  'install python3-grpcio and python3-grpc-tools (sudo apt-get install -y python3-grpcio python3-grpc-tools python3-numpy).';

function run(file: string, args: readonly string[], options: { cwd?: string } = {}): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    execFile(file, args, { cwd: options.cwd, timeout: 60_000, maxBuffer: 16 * 1024 * 1024 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === 'number' ? err.code : 1;
      resolve({ code, stdout, stderr: err !== null && stderr === '' ? err.message : stderr });
    });
  });
}

/**
 * The client script: argv[1] = the directory of the generated stubs, argv[2] = the target. Inputs
 * of `simple` follow `simpleRequest(batch, seed)`: a[i] = i + seed, b[i] = 1000 - 3i + 7 seed.
 */
const SCRIPT = String.raw`
import json
import struct
import sys

sys.path.insert(0, sys.argv[1])
import grpc
import grpc_service_pb2 as pb
import grpc_service_pb2_grpc as pb_grpc
import health_pb2
import health_pb2_grpc
import model_config_pb2

target = sys.argv[2]
INT32_MAX = 2**31 - 1
options = [('grpc.max_send_message_length', INT32_MAX), ('grpc.max_receive_message_length', INT32_MAX)]


def simple_request(batch, seed, request_id, model='simple'):
    n = batch * 16
    a = [i + seed for i in range(n)]
    b = [1000 - 3 * i + 7 * seed for i in range(n)]
    request = pb.ModelInferRequest(model_name=model, id=request_id)
    for name in ('INPUT0', 'INPUT1'):
        tensor = request.inputs.add()
        tensor.name = name
        tensor.datatype = 'INT32'
        tensor.shape.extend([batch, 16])
    request.raw_input_contents.append(struct.pack('<%di' % n, *a))
    request.raw_input_contents.append(struct.pack('<%di' % n, *b))
    # As tritonclient.grpc encodes them.
    request.parameters['priority'].uint64_param = 1
    request.parameters['sequence_id'].int64_param = 0
    request.parameters['my_flag'].bool_param = True
    return request


def decode(response):
    outputs = []
    for i, out in enumerate(response.outputs):
        raw = response.raw_output_contents[i]
        outputs.append({
            'name': out.name,
            'datatype': out.datatype,
            'shape': list(out.shape),
            'has_contents': out.HasField('contents'),
            'data': list(struct.unpack('<%di' % (len(raw) // 4), raw)),
        })
    final = None
    if 'triton_final_response' in response.parameters:
        p = response.parameters['triton_final_response']
        final = [p.WhichOneof('parameter_choice'), p.bool_param]
    return {
        'id': response.id,
        'model_name': response.model_name,
        'model_version': response.model_version,
        'raw_count': len(response.raw_output_contents),
        'outputs': outputs,
        'final': final,
    }


result = {}
with grpc.insecure_channel(target, options=options) as channel:
    stub = pb_grpc.GRPCInferenceServiceStub(channel)
    result['live'] = stub.ServerLive(pb.ServerLiveRequest()).live
    result['ready'] = stub.ServerReady(pb.ServerReadyRequest()).ready
    metadata = stub.ServerMetadata(pb.ServerMetadataRequest())
    result['server'] = {'name': metadata.name, 'version': metadata.version, 'extensions': list(metadata.extensions)}
    model = stub.ModelMetadata(pb.ModelMetadataRequest(name='simple'))
    result['model_inputs'] = [[t.name, t.datatype, list(t.shape)] for t in model.inputs]
    config = stub.ModelConfig(pb.ModelConfigRequest(name='simple')).config
    result['config'] = {
        'name': config.name,
        'max_batch_size': config.max_batch_size,
        'input_dims': [list(t.dims) for t in config.input],
        'input_types': [model_config_pb2.DataType.Name(t.data_type) for t in config.input],
        'kind': model_config_pb2.ModelInstanceGroup.Kind.Name(config.instance_group[0].kind),
    }
    try:
        result['unknown_model_ready'] = stub.ModelReady(pb.ModelReadyRequest(name='nope')).ready
    except grpc.RpcError as e:
        result['unknown_model_ready'] = e.code().name
    check = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    result['health'] = health_pb2.HealthCheckResponse.ServingStatus.Name(check.status)

    result['infer'] = decode(stub.ModelInfer(simple_request(2, 5, 'py-unary')))
    try:
        bad = simple_request(1, 0, 'py-bad-shape')
        bad.inputs[0].shape[1] = 15
        stub.ModelInfer(bad)
        result['infer_error'] = 'no error'
    except grpc.RpcError as e:
        result['infer_error'] = [e.code().name, e.details()]

    requests = [
        simple_request(1, 1, 'py-s1'),
        simple_request(2, 2, 'py-s2'),
        simple_request(1, 0, 'py-unknown', model='nope'),
        simple_request(3, 3, 'py-s3'),
    ]
    stream = []
    for response in stub.ModelStreamInfer(iter(requests)):
        stream.append({'error_message': response.error_message, 'response': decode(response.infer_response)})
    result['stream'] = stream

    # A decoupled model (repeat: one response per element of IN), the way tritonclient.grpc's
    # stream sends requests: two interleaving requests, one asking for the empty final response.
    def repeat_request(request_id, values, empty_final, delay_ms):
        request = pb.ModelInferRequest(model_name='repeat', id=request_id)
        tensor = request.inputs.add()
        tensor.name = 'IN'
        tensor.datatype = 'INT32'
        tensor.shape.extend([len(values)])
        request.raw_input_contents.append(struct.pack('<%di' % len(values), *values))
        request.parameters['delay_ms'].int64_param = delay_ms
        if empty_final:
            request.parameters['mode'].string_param = 'empty_final'
            request.parameters['triton_enable_empty_final_response'].bool_param = True
        return request

    decoupled = []
    for response in stub.ModelStreamInfer(iter([repeat_request('py-d1', [1, 2, 3], True, 3), repeat_request('py-d2', [7, 8], False, 1)])):
        decoupled.append({'error_message': response.error_message, 'response': decode(response.infer_response)})
    result['decoupled'] = decoupled
    try:
        stub.ModelInfer(repeat_request('py-unary', [1], False, 0))
        result['decoupled_unary'] = 'no error'
    except grpc.RpcError as e:
        result['decoupled_unary'] = [e.code().name, e.details()]

print(json.dumps(result))
`;

interface PyOutput {
  name: string;
  datatype: string;
  shape: number[];
  has_contents: boolean;
  data: number[];
}
interface PyResponse {
  id: string;
  model_name: string;
  model_version: string;
  raw_count: number;
  outputs: PyOutput[];
  final: [string, boolean] | null;
}
interface PyResult {
  live: boolean;
  ready: boolean;
  server: { name: string; version: string; extensions: string[] };
  model_inputs: [string, string, number[]][];
  config: { name: string; max_batch_size: number; input_dims: number[][]; input_types: string[]; kind: string };
  unknown_model_ready: boolean | string;
  health: string;
  infer: PyResponse;
  infer_error: [string, string] | string;
  stream: { error_message: string; response: PyResponse }[];
  decoupled: { error_message: string; response: PyResponse }[];
  decoupled_unary: [string, string] | string;
}

let pythonProblem: string | undefined;
let dir: string | undefined;
let repo: string;
let srv: RunningGrpcServer;

before(async () => {
  const probe = await run(PYTHON, ['-c', 'import grpc, grpc_tools']);
  if (probe.code !== 0) pythonProblem = `${MISSING}\n${probe.stderr.trim()}`;
  repo = await makeRepository({ simple: modelFiles(simpleModel()), repeat: { 'config.pbtxt': repeatConfig('repeat'), '1/.keep': '' } });
  srv = await startServer({ modelRepositories: [repo], grpc: true, backends: [new DecoupledBackend().backend] });
});

after(async () => {
  await srv?.stop();
  if (repo) await removeDir(repo);
  if (dir) await removeDir(dir);
});

/** Fails the test, saying what to install, when the system Python lacks grpc. */
function requirePython(): void {
  if (pythonProblem !== undefined) assert.fail(pythonProblem);
}

/** Generates the stubs (once) and runs the client script; resolves with its parsed output. */
let resultPromise: Promise<PyResult> | undefined;
function pythonResult(): Promise<PyResult> {
  resultPromise ??= (async () => {
    assert.ok(existsSync(PROTO_DIR), `no ${PROTO_DIR}`);
    dir = await mkdtemp(join(tmpdir(), 'nereid-pyclient-'));
    const protoc = await run(
      PYTHON,
      [
        '-m',
        'grpc_tools.protoc',
        `-I${PROTO_DIR}`,
        `--python_out=${dir}`,
        `--grpc_python_out=${dir}`,
        ...['grpc_service.proto', 'model_config.proto', 'health.proto'].map((f) => join(PROTO_DIR, f)),
      ],
      { cwd: ROOT },
    );
    assert.equal(protoc.code, 0, `grpc_tools.protoc failed on our .proto files:\n${protoc.stderr}`);
    const script = join(dir, 'client.py');
    await writeFile(script, SCRIPT);
    const client = await run(PYTHON, [script, dir, srv.grpcTarget]);
    assert.equal(client.code, 0, `the Python client failed:\n${client.stderr}`);
    return JSON.parse(client.stdout) as PyResult;
  })();
  return resultPromise;
}

function assertSimple(response: PyResponse, id: string, batch: number, seed: number): void {
  const expected = simpleRequest(batch, seed);
  assert.equal(response.id, id);
  assert.equal(response.model_name, 'simple');
  assert.equal(response.model_version, '1');
  assert.equal(response.raw_count, 2);
  assert.deepEqual(response.outputs, [
    { name: 'OUTPUT0', datatype: 'INT32', shape: [batch, 16], has_contents: false, data: expected.sum },
    { name: 'OUTPUT1', datatype: 'INT32', shape: [batch, 16], has_contents: false, data: expected.difference },
  ]);
}

describe('Python grpcio client with stubs generated from our .proto files', () => {
  it(`${PYTHON} has grpc and grpc_tools`, () => {
    requirePython();
  });

  it('health, metadata, config and readiness RPCs', async () => {
    requirePython();
    const r = await pythonResult();
    assert.equal(r.live, true);
    assert.equal(r.ready, true);
    assert.deepEqual(r.server, { name: 'triton', version: NEREID_VERSION, extensions: srv.server.metadata().extensions });
    assert.deepEqual(r.model_inputs, [
      ['INPUT0', 'INT32', [-1, 16]],
      ['INPUT1', 'INT32', [-1, 16]],
    ]);
    assert.deepEqual(r.config, { name: 'simple', max_batch_size: 8, input_dims: [[16], [16]], input_types: ['TYPE_INT32', 'TYPE_INT32'], kind: 'KIND_CPU' });
    assert.equal(r.unknown_model_ready, false);
    assert.equal(r.health, 'SERVING');
  });

  it('ModelInfer with raw contents and Python-typed parameters', async () => {
    requirePython();
    const r = await pythonResult();
    assertSimple(r.infer, 'py-unary', 2, 5);
    assert.equal(r.infer.final, null);
    assert.ok(Array.isArray(r.infer_error), `a bad shape was answered: ${JSON.stringify(r.infer_error)}`);
    assert.equal(r.infer_error[0], 'INVALID_ARGUMENT');
    assert.match(r.infer_error[1], /INPUT0/);
  });

  it('ModelStreamInfer: responses in order, final flags, an in-band error', async () => {
    requirePython();
    const r = await pythonResult();
    assert.deepEqual(r.stream.map((s) => s.response.id), ['py-s1', 'py-s2', 'py-unknown', 'py-s3']);
    const [s1, s2, unknown, s3] = r.stream;
    for (const [s, id, batch, seed] of [
      [s1!, 'py-s1', 1, 1],
      [s2!, 'py-s2', 2, 2],
      [s3!, 'py-s3', 3, 3],
    ] as const) {
      assert.equal(s.error_message, '');
      assertSimple(s.response, id, batch, seed);
      assert.deepEqual(s.response.final, ['bool_param', true]);
    }
    assert.match(unknown!.error_message, /Request for unknown model: 'nope' is not found/);
    assert.deepEqual(unknown!.response.outputs, []);
  });

  it('ModelStreamInfer with a decoupled model: many responses per request, final flags, the empty final on opt-in', async () => {
    requirePython();
    const r = await pythonResult();
    for (const d of r.decoupled) assert.equal(d.error_message, '');
    const summary = (id: string) =>
      r.decoupled
        .filter((d) => d.response.id === id)
        .map((d) => [d.response.outputs.map((o) => [o.name, o.data[0]]), d.response.final]);
    assert.deepEqual(summary('py-d1'), [
      [[['OUT', 1], ['IDX', 0]], ['bool_param', false]],
      [[['OUT', 2], ['IDX', 1]], ['bool_param', false]],
      [[['OUT', 3], ['IDX', 2]], ['bool_param', false]],
      [[], ['bool_param', true]],
    ]);
    assert.deepEqual(summary('py-d2'), [
      [[['OUT', 7], ['IDX', 0]], ['bool_param', false]],
      [[['OUT', 8], ['IDX', 1]], ['bool_param', true]],
    ]);
    assert.equal(r.decoupled.length, 6);
    const empty = r.decoupled.find((d) => d.response.id === 'py-d1' && d.response.outputs.length === 0)!;
    assert.equal(empty.response.model_name, 'repeat');
    assert.equal(empty.response.raw_count, 0);
    assert.ok(Array.isArray(r.decoupled_unary), `ModelInfer answered a decoupled model: ${JSON.stringify(r.decoupled_unary)}`);
    assert.equal(r.decoupled_unary[0], 'UNIMPLEMENTED');
    assert.match(r.decoupled_unary[1], /ModelInfer RPC doesn't support models with decoupled transaction policy/);
  });
});
