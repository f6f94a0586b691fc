import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { NereidError, encodeBytesElements } from '@nereid/protocol';
import type { BackendInstance, BackendRequest } from '../backends/spi.js';
import { completeModelConfig, normalizeModelConfig, parseModelConfigText, type ModelConfig } from '../config/index.js';
import { InstanceRunner } from '../scheduling/instance-runner.js';
import type { SchedulerObserver } from '../scheduling/scheduler.js';
import { prepareWarmup, runWarmup } from './warmup.js';

const config = (text: string): ModelConfig => normalizeModelConfig(completeModelConfig(parseModelConfigText(text)));

const IO = `
name: "w"
max_batch_size: 8
input [ { name: "A" data_type: TYPE_FP32 dims: [ -1, 2 ] }, { name: "S" data_type: TYPE_STRING dims: [ 2 ] optional: true } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1, 2 ] } ]
`;

const sample = (inputs: string, extra = 'batch_size: 2') => `${IO} model_warmup [ { name: "s1" ${extra} ${inputs} } ]`;
const input = (name: string, body: string) => `inputs { key: "${name}" value { ${body} } }`;

let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), 'nereid-warmup-'));
  await mkdir(join(dir, 'warmup'));
  await writeFile(join(dir, 'warmup', 'a.bin'), Buffer.from(new Float32Array([1, 2, 3, 4, 5, 6, 7]).buffer));
  await writeFile(join(dir, 'warmup', 'short.bin'), Buffer.alloc(5));
  await writeFile(join(dir, 'warmup', 's.bin'), encodeBytesElements(['x', 'yz']));
  await writeFile(join(dir, 'secret.bin'), Buffer.alloc(64));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('prepareWarmup', () => {
  it('builds zero, random and file data with the request shape [1] + dims', async () => {
    const samples = await prepareWarmup(
      config(
        sample(`${input('A', 'data_type: TYPE_FP32 dims: [ 3, 2 ] input_data_file: "a.bin"')} ${input('S', 'data_type: TYPE_STRING dims: [ 2 ] zero_data: true')}`, 'batch_size: 2 count: 3'),
      ),
      dir,
    );
    assert.equal(samples.length, 1);
    const s = samples[0]!;
    assert.deepEqual({ name: s.name, batchSize: s.batchSize, executions: s.executions }, { name: 's1', batchSize: 2, executions: 3 });
    const a = s.inputs.get('A')!;
    assert.deepEqual([a.datatype, a.shape], ['FP32', [1, 3, 2]]);
    // The file holds 7 floats; the first 6 are used.
    assert.deepEqual([...new Float32Array(Uint8Array.from(a.data).buffer)], [1, 2, 3, 4, 5, 6]);
    const str = s.inputs.get('S')!;
    assert.deepEqual([str.datatype, str.shape, [...str.data]], ['BYTES', [1, 2], [0, 0, 0, 0, 0, 0, 0, 0]]);

    const random = (await prepareWarmup(config(sample(input('A', 'data_type: TYPE_FP32 dims: [ 64, 2 ] random_data: true'))), dir))[0]!;
    assert.equal(random.inputs.get('A')!.data.byteLength, 512);
    assert.ok(random.inputs.get('A')!.data.some((b) => b !== 0));
    const zero = (await prepareWarmup(config(sample(input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] zero_data: true'))), dir))[0]!;
    assert.deepEqual([...zero.inputs.get('A')!.data], Array(8).fill(0));
  });

  it('reads a BYTES file whole; random BYTES data is empty strings; count 0 runs once; batch_size 0 is skipped', async () => {
    const c = config(
      `${IO} model_warmup [ { name: "skipped" batch_size: 0 }, { name: "s" batch_size: 1 ` +
        `${input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] zero_data: true')} ${input('S', 'data_type: TYPE_STRING dims: [ 2 ] input_data_file: "s.bin"')} } ]`,
    );
    const samples = await prepareWarmup(c, dir);
    assert.deepEqual(samples.map((s) => [s.name, s.executions]), [['s', 1]]);
    assert.deepEqual(Buffer.from(samples[0]!.inputs.get('S')!.data), encodeBytesElements(['x', 'yz']));
    const random = (await prepareWarmup(config(sample(`${input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] zero_data: true')} ${input('S', 'data_type: TYPE_STRING dims: [ 2 ] random_data: true')}`)), dir))[0]!;
    assert.deepEqual([...random.inputs.get('S')!.data], Array(8).fill(0));
  });

  it('applies the input reshape, and uses dims alone for a model that does not batch', async () => {
    const reshaped = config(
      `name: "r" max_batch_size: 4 input [ { name: "A" data_type: TYPE_INT32 dims: [ 4 ] reshape: { shape: [ 2, 2 ] } } ] output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ] ` +
        `model_warmup { name: "s" batch_size: 1 ${input('A', 'data_type: TYPE_INT32 dims: [ 4 ] zero_data: true')} }`,
    );
    assert.deepEqual((await prepareWarmup(reshaped, dir))[0]!.inputs.get('A')!.shape, [1, 2, 2]);
    const flat = config(
      `name: "f" input [ { name: "A" data_type: TYPE_INT32 dims: [ 4 ] } ] output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ] ` +
        `model_warmup { name: "s" batch_size: 1 ${input('A', 'data_type: TYPE_INT32 dims: [ 4 ] zero_data: true')} }`,
    );
    assert.deepEqual((await prepareWarmup(flat, dir))[0]!.inputs.get('A')!.shape, [4]);
  });

  const refusals: [string, string, RegExp][] = [
    ['batch_size over max_batch_size', sample(input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] zero_data: true'), 'batch_size: 9'), /^failed to run warmup sample 's1': batch_size 9 exceeds the model's max_batch_size 8$/],
    ['a required input missing', sample(input('S', 'data_type: TYPE_STRING dims: [ 2 ] zero_data: true')), /^failed to run warmup sample 's1': input 'A' of the model is not given/],
    ['a data type that differs', sample(input('A', 'data_type: TYPE_INT32 dims: [ 1, 2 ] zero_data: true')), /^failed to run warmup sample 's1': input 'A': data_type is TYPE_INT32, but the model's input has TYPE_FP32$/],
    ['variable dims', sample(input('A', 'data_type: TYPE_FP32 dims: [ -1, 2 ] zero_data: true')), /^failed to run warmup sample 's1': input 'A': dims \[-1, 2\] must all be fixed/],
    ['dims that do not fit', sample(input('A', 'data_type: TYPE_FP32 dims: [ 1, 3 ] zero_data: true')), /input 'A': dims \[1, 3\] do not fit the model's input dims \[-1, 2\]/],
    ['no data source', sample(input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ]')), /input 'A': give one of zero_data, random_data or input_data_file$/],
    ['a file outside warmup/', sample(input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] input_data_file: "../secret.bin"')), /input 'A': input_data_file '..\/secret.bin' is outside the model's warmup directory$/],
    ['a missing file', sample(input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] input_data_file: "none.bin"')), /input 'A': input_data_file '.*warmup\/none.bin' cannot be read: ENOENT/],
    ['a file too short', sample(input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] input_data_file: "short.bin"')), /input 'A': input_data_file 'short.bin' holds 5 bytes; dims \[1, 2\] of TYPE_FP32 need 8$/],
    ['a BYTES file with another element count', sample(`${input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] zero_data: true')} ${input('S', 'data_type: TYPE_STRING dims: [ 3 ] input_data_file: "s.bin"')}`), /input 'S': dims \[3\] do not fit|holds 2 strings/],
  ];
  for (const [what, text, error] of refusals) {
    it(`refuses ${what}, naming the sample and input`, async () => {
      await assert.rejects(prepareWarmup(config(text), dir), (err: unknown) => {
        assert.ok(err instanceof NereidError);
        assert.match(err.message, error);
        return true;
      });
    });
  }

  it('refuses batch_size 2 for a model that does not batch', async () => {
    const c = config(`name: "f" input [ { name: "A" data_type: TYPE_INT32 dims: [ 4 ] } ] output [ { name: "Y" data_type: TYPE_INT32 dims: [ 4 ] } ] model_warmup { name: "s" batch_size: 2 }`);
    await assert.rejects(prepareWarmup(c, dir), /^NereidError: failed to run warmup sample 's': batch_size is 2; a model that does not batch \(max_batch_size 0\) takes batch_size 1$/);
  });
});

/** A backend instance that records the batches it executes and answers (or fails) them. */
class RecordingInstance implements BackendInstance {
  readonly batches: (readonly BackendRequest[])[] = [];
  constructor(readonly fail = false) {}
  async execute(requests: readonly BackendRequest[]): Promise<void> {
    this.batches.push(requests);
    if (this.fail) throw new NereidError('BACKEND_ERROR', 'kernel exploded');
    for (const r of requests) r.respond({ outputs: [] });
  }
  async unload(): Promise<void> {}
}

describe('runWarmup', () => {
  const spec = (i: number) => ({ name: `w_${i}`, groupName: 'w', kind: 'KIND_CPU' as const, deviceId: 0, instanceCount: 2 });
  const counting = () => {
    const seen = { executions: 0, completions: 0 };
    const observer: SchedulerObserver = { onExecution: () => void seen.executions++, onRequestComplete: () => void seen.completions++ };
    return { seen, observer };
  };
  const twoSamples = config(
    `${IO} model_warmup [ { name: "one" batch_size: 3 count: 2 ${input('A', 'data_type: TYPE_FP32 dims: [ 1, 2 ] zero_data: true')} }, ` +
      `{ name: "two" batch_size: 1 ${input('A', 'data_type: TYPE_FP32 dims: [ 2, 2 ] random_data: true')} } ]`,
  );

  it('runs every sample, in order, count times, on every instance, each execution one batch; statistics see nothing', async () => {
    const instances = [new RecordingInstance(), new RecordingInstance()];
    const { seen, observer } = counting();
    const runners = instances.map((inst, i) => new InstanceRunner(spec(i), inst, 'test', { observer }));
    await runWarmup(twoSamples, await prepareWarmup(twoSamples, dir), runners);
    for (const inst of instances) {
      assert.deepEqual(inst.batches.map((b) => b.length), [3, 3, 1]);
      assert.deepEqual(inst.batches[0]![0]!.requestedOutputs, ['Y']);
      assert.deepEqual(inst.batches[2]![0]!.inputs.get('A')!.shape, [1, 2, 2]);
    }
    assert.deepEqual(seen, { executions: 0, completions: 0 });
    assert.deepEqual(runners.map((r) => r.limited.executions), [0, 0]);
  });

  it('fails with the sample and instance named when an execution fails', async () => {
    const runners = [new InstanceRunner(spec(0), new RecordingInstance(), 'test'), new InstanceRunner(spec(1), new RecordingInstance(true), 'test')];
    await assert.rejects(runWarmup(twoSamples, await prepareWarmup(twoSamples, dir), runners), (err: unknown) => {
      assert.ok(err instanceof NereidError);
      assert.equal(err.code, 'MODEL_LOAD_FAILED');
      assert.match(err.message, /^failed to run warmup sample 'one': instance 'w_1': .*kernel exploded$/);
      return true;
    });
  });
});
