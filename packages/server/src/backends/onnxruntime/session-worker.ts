/**
 * Worker-thread entry of one ONNX Runtime instance. `InferenceSession.run()` blocks the thread
 * that calls it while the model computes, so each instance owns a worker and the event loop of
 * the main thread stays free for the network.
 *
 * Runs arrive as messages and are executed one at a time, in arrival order; each reply carries
 * the real compute timestamps, so batches queued behind another are accounted correctly.
 */
import { parentPort, receiveMessageOnPort, workerData, type MessagePort } from 'node:worker_threads';
import * as ort from 'onnxruntime-node';
import { BufferPool } from '../../core/buffer-pool.js';
import { slabView } from '../../core/slabs.js';
import { loadSyncSession, ortSessionOptions, ortTensors, outputBytes, toFeed, type Feed, type RawTensor, type SyncSession } from './native-session.js';
import { POOLED_OUTPUT_MIN_BYTES, type OutputTarget, type RunOutcome, type RunRequest, type RunsMessage, type SessionWorkerOptions, type WireTensor, type WorkerReply, type WorkerRequest } from './worker-protocol.js';

const options = workerData as SessionWorkerOptions;
const port = parentPort!;

function feedOf(t: WireTensor): Feed {
  if (t.slab !== undefined) return toFeed(t.type, t.dims, new Uint8Array(slabView(t.slab), t.byteOffset ?? 0, t.byteLength ?? 0));
  const data = t.data!;
  return toFeed(t.type, t.dims, new Uint8Array(data, 0, t.byteLength ?? data.byteLength));
}

/** Spare output buffers from the main thread (`RunsMessage.spares`). */
const spares = new BufferPool({ maxBytes: 64 * 1024 * 1024 });

/**
 * An output as the main thread gets it: written into its target when it has one and fits there;
 * else as transferable bytes, a large one copied into a spare buffer when one fits, others the
 * binding's own buffer when the data fills it, else a copy.
 */
function fromRawTensor(name: string, tensor: RawTensor, target: OutputTarget | undefined): WireTensor {
  const bytes = outputBytes(tensor);
  if (target !== undefined && tensor.type !== 'string' && bytes.byteLength <= target.byteLength) {
    new Uint8Array(slabView(target.slab), target.byteOffset, bytes.byteLength).set(bytes);
    return { name, type: tensor.type as WireTensor['type'], dims: [...tensor.dims], slab: target.slab, byteOffset: target.byteOffset, byteLength: bytes.byteLength };
  }
  const spare = tensor.type !== 'string' && bytes.byteLength >= POOLED_OUTPUT_MIN_BYTES ? spares.takeIdle(bytes.byteLength) : undefined;
  if (spare !== undefined) {
    new Uint8Array(spare, 0, bytes.byteLength).set(bytes);
    return { name, type: tensor.type as WireTensor['type'], dims: [...tensor.dims], data: spare, byteLength: bytes.byteLength };
  }
  const whole = bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength && bytes.buffer instanceof ArrayBuffer;
  const data = whole ? (bytes.buffer as ArrayBuffer) : bytes.slice().buffer;
  return { name, type: tensor.type as WireTensor['type'], dims: [...tensor.dims], data };
}

/**
 * Results of one message go back together, except that results which would wait longer than this
 * for the next run to end (judged by the duration of the last one) are sent at once: grouping
 * saves thread wake-ups for small models without holding back the results of slow ones.
 */
const MAX_HOLD_NS = 200_000n;

/**
 * Executes the runs of `message`, and of every message that arrived meanwhile, in order, and
 * replies with their outcomes (see MAX_HOLD_NS). Messages queued behind the current one are read
 * synchronously, so one wake-up of this thread serves everything the main thread sent meanwhile;
 * a close request read that way is returned, to be honoured after the runs before it.
 */
async function handle(
  message: RunsMessage,
  execute: (run: RunRequest) => Promise<RunOutcome> | RunOutcome,
): Promise<'close' | undefined> {
  let close: 'close' | undefined;
  let results: RunOutcome[] = [];
  let transfer: ArrayBuffer[] = [];
  let oldest = 0n;
  const flush = () => {
    port.postMessage({ kind: 'results', results } satisfies WorkerReply, transfer);
    results = [];
    transfer = [];
  };
  const queue: RunRequest[] = [...message.runs];
  for (const b of message.spares ?? []) spares.give(b);
  for (let i = 0; i < queue.length; i++) {
    const started = process.hrtime.bigint();
    const outcome = await execute(queue[i]!);
    const now = process.hrtime.bigint();
    if (outcome.ok) for (const o of outcome.outputs) if (o.data !== undefined) transfer.push(o.data);
    if (results.length === 0) oldest = now;
    results.push(outcome);
    if (i === queue.length - 1 && close === undefined) {
      const next = receiveMessageOnPort(port as unknown as MessagePort)?.message as WorkerRequest | undefined;
      if (next?.kind === 'runs') {
        queue.push(...next.runs);
        for (const b of next.spares ?? []) spares.give(b);
      }
      else if (next?.kind === 'close') close = 'close';
    }
    // Results held back wait for the next run as well; it is expected to take as long as this one.
    if (i === queue.length - 1 || now - oldest + (now - started) > MAX_HOLD_NS) flush();
  }
  return close;
}

function outcome(run: RunRequest, results: Record<string, RawTensor>, start: bigint, inputsReady: bigint, outputsStart: bigint): RunOutcome {
  const outputs = run.fetches.map((name) => fromRawTensor(name, results[name]!, run.targets?.find((t) => t.name === name)));
  return { id: run.id, ok: true, outputs, start, inputsReady, outputsStart, end: process.hrtime.bigint() };
}

function failure(run: RunRequest, err: unknown): RunOutcome {
  return { id: run.id, ok: false, message: err instanceof Error ? err.message : String(err) };
}

async function main(): Promise<void> {
  const loadStart = process.hrtime.bigint();
  let sync: SyncSession | undefined;
  let session: ort.InferenceSession | undefined;
  try {
    sync = loadSyncSession(options);
    if (sync === undefined) session = await ort.InferenceSession.create(options.modelPath, ortSessionOptions(options));
  } catch (err) {
    port.postMessage({ kind: 'init-error', message: err instanceof Error ? err.message : String(err) } satisfies WorkerReply);
    return;
  }
  const loadNs = sync?.loadNs ?? Number(process.hrtime.bigint() - loadStart);

  let execute: (run: RunRequest) => Promise<RunOutcome> | RunOutcome;
  if (sync !== undefined) {
    const s = sync;
    execute = (run) => {
      const start = process.hrtime.bigint();
      try {
        const feeds: Record<string, Feed> = {};
        for (const t of run.feeds) feeds[t.name] = feedOf(t);
        const inputsReady = process.hrtime.bigint();
        const results = s.run(feeds, run.fetches);
        return outcome(run, results, start, inputsReady, process.hrtime.bigint());
      } catch (err) {
        return failure(run, err);
      }
    };
  } else {
    const s = session!;
    execute = async (run) => {
      const start = process.hrtime.bigint();
      try {
        const feeds: Record<string, Feed> = {};
        for (const t of run.feeds) feeds[t.name] = feedOf(t);
        const inputsReady = process.hrtime.bigint();
        const results = await s.run(ortTensors(feeds), run.fetches);
        return outcome(run, results, start, inputsReady, process.hrtime.bigint());
      } catch (err) {
        return failure(run, err);
      }
    };
  }
  // Releases the session's native memory now rather than whenever the thread's heap is torn
  // down, then lets the thread end.
  let closed = false;
  const close = async () => {
    if (closed) return;
    closed = true;
    try {
      if (sync !== undefined) sync.dispose();
      else await session!.release();
    } finally {
      port.postMessage({ kind: 'closed' } satisfies WorkerReply);
      port.close();
    }
  };
  // Messages are handled strictly one after another, in arrival order.
  let chain = Promise.resolve();
  port.on('message', (message: WorkerRequest) => {
    chain = chain.then(async () => {
      if (closed) return;
      if (message.kind === 'close' || (await handle(message, execute)) === 'close') await close();
    });
  });
  port.postMessage({ kind: 'ready', loadNs } satisfies WorkerReply);
}

void main();
