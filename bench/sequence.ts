/**
 * The sequence batcher's cost, in process (the `Server` facade, no network), on the testkit
 * accumulator (OUTPUT = INPUT + STATE_IN, all INT32 [batch, 1], one CPU instance,
 * max_batch_size 32, so 32 sequence slots), measured in one run:
 *   (a) under `sequence_batching` (direct strategy): `--sequences` (default 32) closed-loop
 *       clients, each running endless sequences of 8 requests; the server adds START, END,
 *       READY, CORRID and the state;
 *   (b) the same ONNX model under `dynamic_batching` (max_batch_size 32, no delay) with every
 *       input listed in `input`: the clients send the control values and the state themselves,
 *       with the same concurrency — the same tensors reach ONNX Runtime without the batcher.
 * Windows alternate (a, b; `--rounds` rounds of `--seconds`) and the medians are kept.
 * `--sequences` must not exceed the 32 slots: a closed-loop client stops mid-sequence when a window
 * ends, and a sequence waiting in the backlog would then wait for the holders' idle timeout.
 *
 * Usage: node dist/bench/sequence.js [--seconds N] [--rounds N] [--sequences N] [--json out.json]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Server, silentLogger } from '@nereid/server';
import { modelConfigText, sequenceAccumulatorModel, writeModelToRepository } from '@nereid/testkit';
import { alternate, benchArgs, compared, medianOf, report, runLoad, type LoadResult } from './lib.js';

const args = benchArgs();
const { seconds, jsonPath } = args;
const rounds = Math.floor(args.number('rounds', 3));
const sequences = Math.floor(args.number('sequences', 32));
const LENGTH = 8;
const SLOTS = 32;
if (sequences > SLOTS) throw new Error(`--sequences must be at most ${SLOTS} (the model's sequence slots), got ${sequences}`);

const work = await mkdtemp(join(tmpdir(), 'nereid-bench-seq-'));
const stateful = sequenceAccumulatorModel({ name: 'stateful', maxBatchSize: SLOTS, instances: 1 });
await writeModelToRepository(work, stateful);
const plain = sequenceAccumulatorModel({ name: 'plain', maxBatchSize: SLOTS });
const t = (name: string, dataType: 'INT32' | 'UINT64') => ({ name, dataType, dims: [1] });
await writeModelToRepository(work, plain, {
  config: modelConfigText({
    name: 'plain',
    maxBatchSize: SLOTS,
    inputs: [t('INPUT', 'INT32'), t('STATE_IN', 'INT32'), t('START', 'INT32'), t('END', 'INT32'), t('READY', 'INT32'), t('CORRID', 'UINT64')],
    outputs: [t('OUTPUT', 'INT32'), t('STATE_OUT', 'INT32'), t('OUT_START', 'INT32'), t('OUT_END', 'INT32'), t('OUT_READY', 'INT32'), t('OUT_CORRID', 'UINT64')],
    extra: 'dynamic_batching { }\ninstance_group [ { kind: KIND_CPU count: 1 } ]',
  }),
});

const server = new Server({ modelRepositories: [work], logger: silentLogger() });
await server.load();

const i32 = (v: number) => Int32Array.of(v);
let nextId = 1n;

/** One closed-loop client of (a): sequence after sequence, checking the running sum. */
function statefulClient(): () => Promise<unknown> {
  let id = 0n;
  let step = LENGTH;
  let sum = 0;
  return async () => {
    if (step === LENGTH) {
      id = nextId++;
      step = 0;
      sum = 0;
    }
    const value = step + 1;
    const r = await server.infer({
      model: 'stateful',
      parameters: { sequence_id: id, sequence_start: step === 0, sequence_end: step === LENGTH - 1 },
      inputs: [{ name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: i32(value) }],
      outputs: [{ name: 'OUTPUT' }],
    });
    sum += value;
    step++;
    const out = r.outputs[0]!.data as Uint8Array;
    if (new DataView(out.buffer, out.byteOffset, 4).getInt32(0, true) !== sum) throw new Error('wrong running sum');
  };
}

/** One closed-loop client of (b): the same requests with the controls and state sent by the client. */
function plainClient(): () => Promise<unknown> {
  let id = 0n;
  let step = LENGTH;
  let state = 0;
  return async () => {
    if (step === LENGTH) {
      id = nextId++;
      step = 0;
      state = 0;
    }
    const value = step + 1;
    const r = await server.infer({
      model: 'plain',
      inputs: [
        { name: 'INPUT', datatype: 'INT32', shape: [1, 1], data: i32(value) },
        { name: 'STATE_IN', datatype: 'INT32', shape: [1, 1], data: i32(state) },
        { name: 'START', datatype: 'INT32', shape: [1, 1], data: i32(step === 0 ? 1 : 0) },
        { name: 'END', datatype: 'INT32', shape: [1, 1], data: i32(step === LENGTH - 1 ? 1 : 0) },
        { name: 'READY', datatype: 'INT32', shape: [1, 1], data: i32(1) },
        { name: 'CORRID', datatype: 'UINT64', shape: [1, 1], data: BigUint64Array.of(id) },
      ],
      outputs: [{ name: 'OUTPUT' }, { name: 'STATE_OUT' }],
    });
    step++;
    const out = r.outputs[1]!.data as Uint8Array;
    state = new DataView(out.buffer, out.byteOffset, 4).getInt32(0, true);
  };
}

/**
 * Closed loop of `sequences` clients, each with at most one request in flight (its sequence's
 * order). The clients outlive a window: a sequence left open at the end of one continues in the
 * next (abandoned sequences would hold their slots until the idle timeout).
 */
const pools = new Map<() => () => Promise<unknown>, (() => Promise<unknown>)[]>();
async function measure(make: () => () => Promise<unknown>): Promise<LoadResult> {
  let idle = pools.get(make);
  if (idle === undefined) pools.set(make, (idle = Array.from({ length: sequences }, make)));
  const clients = idle;
  return runLoad(async () => {
    const client = clients.pop()!;
    try {
      await client();
    } finally {
      clients.push(client);
    }
  }, sequences, seconds);
}

try {
  const [seq, dyn] = await alternate([statefulClient, plainClient], rounds, (make) => measure(make));
  const a = medianOf(seq!);
  const b = medianOf(dyn!);
  report(
    [
      compared('sequence batcher throughput', 'req/s', a.throughput, b.throughput, 'dynamic batcher, client-held state'),
      compared('sequence batcher p50 latency', 'us', a.p50Us, b.p50Us, 'dynamic batcher, client-held state'),
    ],
    jsonPath,
  );
} finally {
  await server.stop();
  await rm(work, { recursive: true, force: true });
}
