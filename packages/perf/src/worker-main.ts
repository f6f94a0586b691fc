/**
 * The entry of a `--workers` child process (see workers.ts for the message protocol): it prepares
 * the same requests as the parent, runs its share of the load, and reports finished requests
 * every 50 ms and whenever the parent asks for a flush.
 */
import { performance } from 'node:perf_hooks';
import { startLoad, type LoadGenerator } from './load.js';
import { parsePerfArgs } from './options.js';
import { dataOptionsOf, prepareRequests } from './input-data.js';
import { createTransport, type Sender } from './transport.js';
import type { WorkerShare } from './workers.js';

const REPORT_MS = 50;

function send(message: object): Promise<void> {
  return new Promise((resolve) => (process.connected ? process.send!(message, () => resolve()) : resolve()));
}

process.once('message', async (m: { argv: string[]; share: WorkerShare }) => {
  let load: LoadGenerator & { finished?: Promise<void> };
  const senders: Sender[] = [];
  const options = parsePerfArgs(m.argv);
  const transport = createTransport(options);
  try {
    const model = await transport.modelInfo();
    const { requests } = await prepareRequests(model, dataOptionsOf(options));
    load = startLoad(
      {
        mode: options.concurrency ? 'concurrency' : 'request_rate',
        value: m.share.value,
        limit: m.share.limit,
        streaming: options.streaming,
        maxThreads: options.maxThreads,
        distribution: options.distribution,
        intervalsUs: [],
        phase: m.share.phase,
      },
      senders,
      () => transport.sender(),
      requests,
    );
  } catch (err) {
    await send({ error: err instanceof Error ? err.message : String(err) });
    process.exit(1);
  }
  let reported = 0;
  let elu = performance.eventLoopUtilization();
  const report = (flush?: number): Promise<void> => {
    const fresh = load.records.slice(reported);
    reported = load.records.length;
    const records: number[] = [];
    const origin = performance.timeOrigin;
    for (const r of fresh) records.push(origin + r.start, origin + r.end, r.ok ? 1 : 0, r.responses, r.lag, r.sendMs, r.recvMs);
    const busy = performance.eventLoopUtilization(elu).utilization;
    elu = performance.eventLoopUtilization();
    return send({ records, sent: load.sent, delayed: load.delayed, busy, flush });
  };
  const timer = setInterval(() => void report(), REPORT_MS);
  void load.finished?.then(async () => {
    await report();
    await send({ done: true });
  });
  process.on('message', async (msg: { stop?: boolean; flush?: number }) => {
    if (msg.flush !== undefined) await report(msg.flush);
    if (msg.stop) {
      clearInterval(timer);
      await load.stop();
      await report();
      for (const s of senders) s.close();
      await transport.close();
      process.disconnect();
    }
  });
  await send({ ready: true });
});
