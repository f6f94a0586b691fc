/**
 * Absurd configuration values: each one a configuration can ask for that would make the server
 * allocate, create instances or run work in proportion to it is refused at load — with Triton's
 * answer to a configuration it cannot use, 500 'failed to load …, failed to poll from model
 * repository: …' (gRPC INTERNAL) — in a message that names the model, the field, the value and the limit with the option that raises it, from a load
 * request's config override and from a repository on disk. After each refusal the server still
 * answers a good request, and its memory stays bounded.
 */
import assert from 'node:assert/strict';
import { availableParallelism } from 'node:os';
import { after, before, describe, it } from 'node:test';
import { GrpcClient } from '@nereid/client';
import { httpRequest, jsonBody, makeRepository, refusal, removeDir, startServer, type RunningGrpcServer } from '../helpers/harness.js';
import { INT32_16, ONNX, REFUSED_CONFIG_GRPC_CODE, REFUSED_CONFIG_STATUS, assertSimpleServing, loadModel, simpleConfig, toText } from './config-support.js';
import { recordingLogger } from '../helpers/python.js';


interface Case {
  readonly what: string;
  readonly patch: Record<string, unknown>;
  /** The limit named in the error. */
  readonly limit: string;
  /** A fragment of the field named in the error. */
  readonly field: string;
}

const warmupInput = (dims: number[]) => ({ INPUT0: { data_type: 'TYPE_INT32', dims, zero_data: true } });

const CASES: readonly Case[] = [
  { what: 'instance count 100000', patch: { instance_group: [{ kind: 'KIND_CPU', count: 100000 }] }, limit: 'instances-per-model', field: 'instance count' },
  {
    what: 'two groups of 100 instances',
    patch: { instance_group: [{ kind: 'KIND_CPU', count: 100 }, { kind: 'KIND_CPU', count: 100 }] },
    limit: 'instances-per-model',
    field: 'instance count',
  },
  { what: 'max_batch_size 10^9', patch: { max_batch_size: 1e9 }, limit: 'max-batch-size', field: 'max_batch_size' },
  {
    what: 'a billion priority levels',
    patch: { dynamic_batching: { priority_levels: 1e9, default_priority_level: 1 } },
    limit: 'priority-levels',
    field: 'priority_levels',
  },
  {
    what: '5000 preferred batch sizes',
    patch: { dynamic_batching: { preferred_batch_size: new Array(5000).fill(1) } },
    limit: 'preferred-batch-sizes',
    field: 'preferred_batch_size',
  },
  {
    what: 'ten million candidate sequences',
    patch: { sequence_batching: { oldest: { max_candidate_sequences: 1e7 } } },
    limit: 'sequence-slots',
    field: 'max_candidate_sequences',
  },
  {
    what: 'sequence slots of 100 instances of max_batch_size 60000',
    patch: { max_batch_size: 60000, sequence_batching: {}, instance_group: [{ kind: 'KIND_CPU', count: 100 }] },
    limit: 'sequence-slots',
    field: 'sequence slots',
  },
  {
    what: 'an input of 2^62 elements',
    patch: { input: [{ name: 'INPUT0', data_type: 'TYPE_INT32', dims: [2 ** 31, 2 ** 31] }, INT32_16('INPUT1')] },
    limit: 'tensor-elements',
    field: "input 'INPUT0' dims",
  },
  {
    what: 'a sequence state whose initial value has 2^40 elements',
    patch: {
      sequence_batching: {
        state: [
          {
            input_name: 'INPUT_STATE',
            output_name: 'OUTPUT_STATE',
            data_type: 'TYPE_INT32',
            dims: [-1],
            initial_state: [{ name: 'zeros', data_type: 'TYPE_INT32', dims: [2 ** 40], zero_data: true }],
          },
        ],
      },
    },
    limit: 'tensor-elements',
    field: 'initial_state[0] dims',
  },
  {
    what: 'an output of rank 100',
    patch: { output: [{ name: 'OUTPUT0', data_type: 'TYPE_INT32', dims: new Array(100).fill(1) }, INT32_16('OUTPUT1')] },
    limit: 'tensor-rank',
    field: "output 'OUTPUT0' dims",
  },
  {
    what: 'an input name of 100000 characters',
    patch: { input: [INT32_16('I'.repeat(100_000)), INT32_16('INPUT1')] },
    limit: 'name-length',
    field: 'input name',
  },
  {
    what: 'a warmup sample run a billion times',
    patch: { model_warmup: [{ name: 'w', batch_size: 1, count: 1e9, inputs: warmupInput([16]) }] },
    limit: 'warmup-count',
    field: 'count',
  },
  {
    what: 'a 3 GB warmup sample',
    patch: { model_warmup: [{ name: 'w', batch_size: 8, count: 1, inputs: warmupInput([100_000_000]) }] },
    limit: 'warmup-bytes',
    field: 'input bytes',
  },
  {
    what: '10000 warmup samples',
    patch: { model_warmup: new Array(10000).fill({ name: 'w', batch_size: 1, count: 1, inputs: warmupInput([16]) }) },
    limit: 'warmup-samples',
    field: 'model_warmup entries',
  },
  {
    what: 'a latency histogram of 100000 buckets',
    patch: {
      model_metrics: {
        metric_control: [
          {
            metric_identifier: { family: 'nv_inference_request_duration' },
            histogram_options: { buckets: Array.from({ length: 100_000 }, (_, i) => i + 1) },
          },
        ],
      },
    },
    limit: 'histogram-buckets',
    field: 'histogram buckets',
  },
  {
    what: 'an ensemble of 5000 steps',
    patch: {
      backend: '',
      platform: 'ensemble',
      instance_group: [],
      ensemble_scheduling: {
        step: new Array(5000).fill({ model_name: 'simple', model_version: -1, input_map: { INPUT0: 'INPUT0', INPUT1: 'INPUT1' }, output_map: { OUTPUT0: 'OUTPUT0' } }),
      },
    },
    limit: 'ensemble-steps',
    field: 'ensemble_scheduling steps',
  },
];

function assertLimitError(message: string, model: string, c: Case): void {
  assert.match(message, new RegExp(`model '${model}'`), message);
  assert.ok(message.includes(c.field), `expected the field '${c.field}' in: ${message.slice(0, 500)}`);
  assert.ok(message.includes(`(${c.limit})`), `expected the limit '${c.limit}' in: ${message.slice(0, 500)}`);
  assert.ok(message.includes(`--model-config-limit ${c.limit}=`), `expected the option that raises it in: ${message.slice(0, 500)}`);
  assert.ok(message.length < 2000, `the error is ${message.length} characters long`);
}

describe('hostile config values', () => {
  let repo: string;
  let srv: RunningGrpcServer;
  let grpc: GrpcClient;

  const load = (model: string, config?: Record<string, unknown>) =>
    loadModel(srv.url, model, config === undefined ? {} : { parameters: { config: JSON.stringify(config) } });
  const assertServing = () => assertSimpleServing(srv.url, 3);

  before(async () => {
    // The same values as the overrides (JSON), written as text format.
    const disk: Record<string, Record<string, string | Uint8Array>> = {
      simple: { 'config.pbtxt': toText(simpleConfig()), '1/model.onnx': ONNX },
    };
    CASES.forEach((c, i) => (disk[`bad_${i}`] = { 'config.pbtxt': toText(simpleConfig(c.patch, `bad_${i}`)), '1/model.onnx': ONNX }));
    repo = await makeRepository(disk);
    srv = await startServer({ modelRepositories: [repo], modelControlMode: 'explicit', loadModels: ['simple'], grpc: true });
    grpc = new GrpcClient(srv.grpcTarget);
    await assertServing();
  });

  after(async () => {
    grpc?.close();
    await srv?.stop();
    if (repo) await removeDir(repo);
  });

  for (const [i, c] of CASES.entries()) {
    it(`refuses ${c.what} in a load request's config override, and keeps serving`, async () => {
      const { status, error } = await load('simple', simpleConfig(c.patch));
      assert.equal(status, REFUSED_CONFIG_STATUS, error);
      assertLimitError(error, 'simple', c);
      await assertServing();
    });

    it(`refuses ${c.what} in a config.pbtxt on disk, and keeps serving`, async () => {
      const { status, error } = await load(`bad_${i}`);
      assert.equal(status, REFUSED_CONFIG_STATUS, error);
      assertLimitError(error, `bad_${i}`, c);
      await assertServing();
    });
  }

  it('refuses an instance count of 100000 over gRPC with INTERNAL, as Triton answers a configuration it cannot use', async () => {
    const err = await refusal(grpc.loadModel('simple', { config: simpleConfig(CASES[0]!.patch) }));
    assert.equal(err.grpcCode, REFUSED_CONFIG_GRPC_CODE, err.message);
    assertLimitError(err.message, 'simple', CASES[0]!);
    await assertServing();
  });

  it('stays within bounded memory over every case, five times over', async () => {
    const rssBefore = process.memoryUsage().rss;
    for (let round = 0; round < 5; round++) {
      for (const c of CASES) assert.equal((await load('simple', simpleConfig(c.patch))).status, REFUSED_CONFIG_STATUS);
    }
    await assertServing();
    const grownMiB = (process.memoryUsage().rss - rssBefore) / 2 ** 20;
    assert.ok(grownMiB < 256, `the process grew by ${grownMiB.toFixed(0)} MiB over ${5 * CASES.length} refused loads`);
  });
});

describe('the server-wide instance limit and --model-config-limit', () => {
  let repo: string;
  let srv: RunningGrpcServer;
  const logger = recordingLogger();

  before(async () => {
    repo = await makeRepository({
      a: { 'config.pbtxt': toText(simpleConfig({ instance_group: [{ kind: 'KIND_CPU', count: 2 }] }, 'a')), '1/model.onnx': ONNX },
      b: { 'config.pbtxt': toText(simpleConfig({ instance_group: [{ kind: 'KIND_CPU', count: 3 }] }, 'b')), '1/model.onnx': ONNX },
    });
    srv = await startServer({
      modelRepositories: [repo],
      modelControlMode: 'explicit',
      loadModels: ['a'],
      configLimits: { 'instances-per-server': 4, 'instances-per-model': 4 },
      logger,
      grpc: true,
    });
  });

  after(async () => {
    await srv?.stop();
    if (repo) await removeDir(repo);
  });

  /**
   * Unloads `name` and waits until no version of it is UNLOADING: as in Triton, the unload call
   * answers before the instances drain, and their share of the budget comes back when they are released.
   */
  async function unloadDrained(name: string): Promise<void> {
    const unloaded = await httpRequest(`${srv.url}/v2/repository/models/${name}/unload`, { method: 'POST', body: '{}' });
    assert.equal(unloaded.status, 200, unloaded.text);
    const deadline = Date.now() + 30_000;
    for (;;) {
      const index = jsonBody(await httpRequest(`${srv.url}/v2/repository/index`, { method: 'POST', body: '{}' })) as { name: string; state?: string }[];
      if (!index.some((e) => e.name === name && e.state === 'UNLOADING')) return;
      assert.ok(Date.now() < deadline, `model '${name}' still UNLOADING after 30 s`);
      await new Promise((r) => setTimeout(r, 20));
    }
  }

  it('refuses a model whose instances would pass the server-wide limit, and admits it once others are unloaded', async () => {
    const refused = await httpRequest(`${srv.url}/v2/repository/models/b/load`, { method: 'POST', body: '{}' });
    assert.equal(refused.status, 400, refused.text);
    const error = (jsonBody(refused) as { error: string }).error;
    assert.match(error, /model 'b': 3 more instance\(s\) would make 5 on this server, above its limit of 4 \(instances-per-server\)/);
    assert.match(error, /--model-config-limit instances-per-server=<n>/);

    await unloadDrained('a');
    const loaded = await httpRequest(`${srv.url}/v2/repository/models/b/load`, { method: 'POST', body: '{}' });
    assert.equal(loaded.status, 200, loaded.text);
  });

  it('applies a per-model limit given as an option', async () => {
    const reply = await httpRequest(`${srv.url}/v2/repository/models/b/load`, {
      method: 'POST',
      body: JSON.stringify({ parameters: { config: JSON.stringify(simpleConfig({ instance_group: [{ kind: 'KIND_CPU', count: 5 }] }, 'b')) } }),
    });
    assert.equal(reply.status, REFUSED_CONFIG_STATUS, reply.text);
    assert.match((jsonBody(reply) as { error: string }).error, /the instance count \(over all instance_group entries\) is 5, above this server's limit of 4 \(instances-per-model\)/);
  });

  it('writes a warning about a configuration once per load, not once per instance', async () => {
    const threads = availableParallelism() + 1;
    await unloadDrained('b');
    logger.lines.length = 0;
    const config = simpleConfig(
      { instance_group: [{ kind: 'KIND_CPU', count: 3 }], parameters: { intra_op_thread_count: { string_value: String(threads) } } },
      'b',
    );
    const reply = await httpRequest(`${srv.url}/v2/repository/models/b/load`, { method: 'POST', body: JSON.stringify({ parameters: { config: JSON.stringify(config) } }) });
    assert.equal(reply.status, 200, reply.text);
    const warnings = logger.lines.filter((l) => l.includes('intra_op_thread_count'));
    assert.equal(warnings.length, 1, `expected one oversubscription warning, got:\n${warnings.join('\n')}`);
  });

  it('loads a model with configuration fields Nereid does not act on with one warning each that says what is missing', async () => {
    await unloadDrained('b');
    logger.lines.length = 0;
    const config = simpleConfig(
      {
        instance_group: [{ kind: 'KIND_CPU', count: 2 }],
        response_cache: { enable: true },
        model_operations: { op_library_filename: ['/opt/ops/libcustomop.so'] },
        model_repository_agents: { agents: [{ name: 'checksum', parameters: { 'MD5:1/model.onnx': 'abc' } }] },
        optimization: { execution_accelerators: { cpu_execution_accelerator: [{ name: 'openvino' }] } },
      },
      'b',
    );
    const reply = await httpRequest(`${srv.url}/v2/repository/models/b/load`, { method: 'POST', body: JSON.stringify({ parameters: { config: JSON.stringify(config) } }) });
    assert.equal(reply.status, 200, reply.text);
    const warnings = logger.lines.filter((l) => l.includes('response_cache'));
    assert.equal(warnings.length, 1, `expected one response cache warning, got:\n${logger.lines.join('\n')}`);
    assert.match(warnings[0]!, /model 'b': response_cache\.enable is true, but the server has no response cache/);
    const ops = logger.lines.filter((l) => l.includes('op_library_filename'));
    assert.equal(ops.length, 1, `expected one custom operation library warning, got:\n${logger.lines.join('\n')}`);
    assert.match(ops[0]!, /model 'b': model_operations\.op_library_filename has no effect: Nereid loads no custom operation libraries/);
    assert.equal(logger.lines.filter((l) => /model_repository_agents \('checksum'\) has no effect/.test(l)).length, 1, logger.lines.join('\n'));
    assert.equal(logger.lines.filter((l) => /optimization\.execution_accelerators \('openvino'\) has no effect/.test(l)).length, 1, logger.lines.join('\n'));
  });
});
