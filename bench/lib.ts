/**
 * Shared benchmark plumbing: a closed-loop load runner, child-process servers, and the summary
 * line format `name: value unit (baseline …, ratio …)` (conventions.md, Benchmarks).
 */
import { fork, spawn, type ChildProcess } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { availableParallelism } from 'node:os';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Client, credentials } from '@grpc/grpc-js';
import { GRPC_INFERENCE_SERVICE } from '@nereid/protocol';
import { SERVE_NODE_OPTIONS } from '@nereid/server';
import { leanHttpPoster } from './lean-http.js';

export interface LoadResult {
  completed: number;
  seconds: number;
  /** Requests per second. */
  throughput: number;
  /** Mean latency in microseconds. */
  meanLatencyUs: number;
  p50Us: number;
  p99Us: number;
  /** Main-thread event-loop busy time per completed request, microseconds (this process). */
  loopBusyUsPerRequest: number;
}

/**
 * Keeps `concurrency` calls of `op` in flight for `seconds` (after `warmupSeconds`) and reports
 * completions per second and latencies.
 */
export async function runLoad(
  op: () => Promise<unknown>,
  concurrency: number,
  seconds: number,
  warmupSeconds = 0.5,
): Promise<LoadResult> {
  const latencies: number[] = [];
  let measuring = false;
  let stop = false;
  let completed = 0;
  const worker = async () => {
    while (!stop) {
      const t0 = process.hrtime.bigint();
      await op();
      if (measuring && !stop) {
        latencies.push(Number(process.hrtime.bigint() - t0) / 1000);
        completed++;
      }
    }
  };
  const workers = Array.from({ length: concurrency }, worker);
  await new Promise((r) => setTimeout(r, warmupSeconds * 1000));
  measuring = true;
  const start = process.hrtime.bigint();
  const elu0 = performance.eventLoopUtilization();
  await new Promise((r) => setTimeout(r, seconds * 1000));
  stop = true;
  const elu = performance.eventLoopUtilization(elu0);
  const elapsed = Number(process.hrtime.bigint() - start) / 1e9;
  await Promise.all(workers);
  return { ...summarizeLatencies(latencies, completed, elapsed), loopBusyUsPerRequest: (elu.active * 1000) / Math.max(1, completed) };
}

/**
 * Throughput and latency statistics of `completed` requests over `seconds`, from their latencies
 * in microseconds (sorted in place). Several load processes' results combine by concatenating
 * their latencies and adding their throughputs (see `LoadClientPool.run`).
 */
export function summarizeLatencies(latencies: number[], completed: number, seconds: number): Omit<LoadResult, 'loopBusyUsPerRequest'> {
  latencies.sort((a, b) => a - b);
  const pick = (q: number) => latencies[Math.min(latencies.length - 1, Math.round(q * (latencies.length - 1)))] ?? 0;
  return {
    completed,
    seconds,
    throughput: completed / seconds,
    meanLatencyUs: latencies.reduce((a, b) => a + b, 0) / Math.max(1, latencies.length),
    p50Us: pick(0.5),
    p99Us: pick(0.99),
  };
}

/** Median of a list of numbers (0 for none). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return 0;
  const v = [...values].sort((a, b) => a - b);
  return v.length % 2 ? v[(v.length - 1) / 2]! : (v[v.length / 2 - 1]! + v[v.length / 2]!) / 2;
}

/**
 * Measures each target in turn, `rounds` times (target 0, 1, …, 0, 1, …), so that the machine's
 * noise hits all of them alike; returns each target's results in round order.
 */
export async function alternate<T, R>(targets: readonly T[], rounds: number, measure: (target: T, index: number) => Promise<R>): Promise<R[][]> {
  const results: R[][] = targets.map(() => []);
  for (let round = 0; round < rounds; round++) {
    for (let i = 0; i < targets.length; i++) results[i]!.push(await measure(targets[i]!, i));
  }
  return results;
}

/** The per-field median of several results. */
export function medianOf<R extends object>(results: readonly R[]): { [K in keyof R]: R[K] extends number ? number : never } {
  const out: Record<string, number> = {};
  for (const key of Object.keys(results[0] ?? {})) {
    const values = results.map((r) => (r as Record<string, unknown>)[key]);
    if (values.every((v) => typeof v === 'number')) out[key] = median(values as number[]);
  }
  return out as { [K in keyof R]: R[K] extends number ? number : never };
}

/** `--seconds N` (default `defaultSeconds`), `--json FILE`, and `--NAME value` lookups. */
export function benchArgs(argv: readonly string[] = process.argv.slice(2), defaultSeconds = 2) {
  const value = (name: string): string | undefined => {
    const i = argv.indexOf(`--${name}`);
    if (i >= 0) return argv[i + 1];
    const eq = argv.find((a) => a.startsWith(`--${name}=`));
    return eq?.slice(name.length + 3);
  };
  const number = (name: string, fallback: number): number => {
    const v = Number(value(name));
    return Number.isFinite(v) && v > 0 ? v : fallback;
  };
  return { seconds: number('seconds', defaultSeconds), jsonPath: value('json'), value, number };
}

/** The machine's CPU time so far (all cores, clock ticks): busy and total, from /proc/stat. */
export function machineCpuTicks(): { busy: number; total: number } | undefined {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]!.trim().split(/\s+/).slice(1, 9).map(Number);
    const total = fields.reduce((a, b) => a + b, 0);
    return { busy: total - fields[3]! - fields[4]!, total }; // idle, iowait
  } catch {
    return undefined;
  }
}

/**
 * CPU time a process has used so far, in microseconds: all its threads (`total`) and its main
 * thread alone (`main`), from /proc (Linux; nanosecond `schedstat` where the kernel keeps it,
 * clock ticks otherwise). Threads that have exited are not counted, so compare differences over
 * a window of long-lived threads. Returns undefined where /proc is not available.
 */
export function cpuTimeUs(pid: number): { total: number; main: number } | undefined {
  const threadUs = (tid: string): number => {
    try {
      const ns = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8').split(' ')[0]);
      if (ns > 0) return ns / 1000;
    } catch {
      // fall through to ticks
    }
    try {
      const fields = readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1]!.split(' ');
      return ((Number(fields[11]) + Number(fields[12])) * 1e6) / 100; // utime + stime, USER_HZ = 100
    } catch {
      return 0; // the thread has exited
    }
  };
  let tids: string[];
  try {
    tids = readdirSync(`/proc/${pid}/task`);
  } catch {
    return undefined;
  }
  let total = 0;
  for (const tid of tids) total += threadUs(tid);
  return { total, main: threadUs(String(pid)) };
}

/** `pid` and every process below it (children, grandchildren), from /proc. */
export function processTree(pid: number): number[] {
  const children = new Map<number, number[]>();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      const list = children.get(ppid) ?? [];
      list.push(Number(entry));
      children.set(ppid, list);
    } catch {
      // exited meanwhile
    }
  }
  const tree = [pid];
  for (let i = 0; i < tree.length; i++) tree.push(...(children.get(tree[i]!) ?? []));
  return tree;
}

/**
 * CPU time (µs, all threads) used so far by `pid` and the processes below it: a server with
 * the model processes it started (Python stubs). Processes that exited are not counted, so
 * compare differences over a window in which the tree stays the same. Undefined without /proc.
 */
export function processTreeCpuUs(pid: number): number | undefined {
  let total = 0;
  try {
    for (const p of processTree(pid)) total += cpuTimeUs(p)?.total ?? 0;
  } catch {
    return undefined;
  }
  return total;
}

/**
 * The KServe v2 HTTP request of `simple` (INT32 [1,16] INPUT0 and INPUT1) with binary inputs and
 * outputs, as the Python client sends it: its body and the header naming the JSON part's length.
 */
export function simpleBinaryRequest(in0: Int32Array, in1: Int32Array): { body: Buffer; headers: { 'Inference-Header-Content-Length': number } } {
  const header = JSON.stringify({
    inputs: [
      { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: in0.byteLength } },
      { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', parameters: { binary_data_size: in1.byteLength } },
    ],
    outputs: [
      { name: 'OUTPUT0', parameters: { binary_data: true } },
      { name: 'OUTPUT1', parameters: { binary_data: true } },
    ],
  });
  const body = Buffer.concat([Buffer.from(header), Buffer.from(in0.buffer, in0.byteOffset, in0.byteLength), Buffer.from(in1.buffer, in1.byteOffset, in1.byteLength)]);
  return { body, headers: { 'Inference-Header-Content-Length': Buffer.byteLength(header) } };
}

/**
 * The benchmarks' HTTP load: keep-alive POSTs of prebuilt bytes on `concurrency` connections that
 * check the status and drain the body; `post` resolves with the body's length. The client is
 * `lean-http.ts`, which allocates nothing per response chunk (the `node:http` client it replaced
 * spent as much CPU per 16 MiB round trip as the server did).
 */
export function httpPoster(port: number, path: string, body: Buffer, headers: Record<string, string | number>, concurrency: number) {
  return leanHttpPoster(port, path, body, headers, concurrency);
}

/**
 * `httpPoster` through `node:http`'s own client (keep-alive agent; the body counted chunk by
 * chunk): how an application's Node.js client loads a server, and what the benchmarks used
 * before the lean client.
 */
export function nodeHttpPoster(port: number, path: string, body: Buffer, headers: Record<string, string | number>, concurrency: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const allHeaders = { ...headers, 'Content-Length': body.byteLength };
  const post = () =>
    new Promise<number>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers: allHeaders }, (res) => {
        let length = 0;
        res.on('data', (chunk: Buffer) => void (length += chunk.byteLength));
        res.on('end', () => (res.statusCode === 200 ? resolve(length) : reject(new Error(`HTTP ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end(body);
    });
  return { post, close: () => agent.destroy() };
}

export interface ChildServer {
  port: number;
  /** The ports matched by `otherPorts` (same names). */
  ports: Record<string, number>;
  process: ChildProcess;
  stop(): Promise<void>;
}

/**
 * The start of `nereid serve`'s command line as the benchmarks run it (arguments to `node`, for
 * `spawnServer`): `nodeFlags` (profiling), the Node.js options the server is meant to run with
 * (`SERVE_NODE_OPTIONS`, docs/operations.md), the CLI and `serve`; the caller appends the options.
 */
export function nereidServeCommand(nodeFlags: readonly string[] = []): string[] {
  return [...nodeFlags, ...SERVE_NODE_OPTIONS, fileURLToPath(new URL('../../packages/server/bin/nereid.js', import.meta.url)), 'serve'];
}

/**
 * Spawns a node script, waits for the line matching `portPattern` (and those of `otherPorts`,
 * a server listening on several ports), and returns the port(s).
 */
export function spawnServer(args: string[], portPattern: RegExp, otherPorts: Record<string, RegExp> = {}): Promise<ChildServer> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    // A benchmark that fails midway must not leave its servers running.
    const killOnExit = () => child.kill();
    process.once('exit', killOnExit);
    child.once('exit', () => process.off('exit', killOnExit));
    let output = '';
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const m = portPattern.exec(output);
      const ports: Record<string, number> = {};
      for (const [name, pattern] of Object.entries(otherPorts)) {
        const other = pattern.exec(output);
        if (other) ports[name] = Number(other[1]);
      }
      if (m && Object.keys(ports).length === Object.keys(otherPorts).length) {
        child.stdout!.off('data', onData);
        child.stdout!.resume();
        child.stderr!.resume();
        resolve({
          port: Number(m[1]),
          ports,
          process: child,
          stop: () =>
            new Promise<void>((done) => {
              if (child.exitCode !== null) return done();
              child.once('exit', () => done());
              child.kill('SIGTERM');
            }),
        });
      }
    };
    child.stdout!.on('data', onData);
    child.stderr!.on('data', (c: Buffer) => (output += c.toString()));
    child.once('exit', (code) => reject(new Error(`server exited with code ${code}:\n${output}`)));
  });
}

/**
 * Messages between `LoadClientPool` and a load process (bench/grpc-load-client.ts is one): the
 * pool sends start / measure / stop / exit, the process answers started / result, or error.
 */
export type LoadClientMessage<O = unknown> =
  | { type: 'start'; options: O }
  | { type: 'measure' }
  | { type: 'stop' }
  | { type: 'exit' }
  | { type: 'started' }
  | { type: 'error'; message: string }
  | LoadClientResult;

/** A load process's report of one window. */
export interface LoadClientResult {
  type: 'result';
  completed: number;
  seconds: number;
  /** Latencies of the completed requests, microseconds. */
  latencies: Float64Array;
  /** The load process's CPU time in the window (user + system), microseconds. */
  cpuUs: number;
  /** Its main thread's event-loop utilisation in the window (1 = never idle: it is saturated). */
  loopUtilization: number;
}

export interface DistributedLoadResult extends Omit<LoadResult, 'loopBusyUsPerRequest'> {
  /** Load processes that took part. */
  clients: number;
  /** The load processes' CPU time per completed request, microseconds. */
  clientCpuUsPerRequest: number;
  /** The busiest load process's event-loop utilisation. */
  maxClientLoopUtilization: number;
  /** CPU time per completed request of the watched process (all threads, main thread), µs. */
  serverCpuUsPerRequest: number;
  serverMainThreadCpuUsPerRequest: number;
  /** Busy fraction of the machine's CPUs over the window (all processes; 1 = every core busy). */
  machineCpuBusy: number;
  /**
   * The part of the machine's CPUs busy with processes other than the watched one and the load
   * processes (other jobs on a shared machine: noise), as a fraction of all cores.
   */
  foreignCpuShare: number;
}

/**
 * Load spread over several child processes, for clients too slow to load a server from one
 * process (the grpc-js client). Each process runs a closed loop given by its start options; the
 * pool starts them together, lets them warm up, opens one measurement window for all, and
 * combines their counts and latencies.
 */
export class LoadClientPool {
  readonly #children: ChildProcess[];
  readonly #waiting = new Map<ChildProcess, { type: string; resolve(m: LoadClientMessage): void; reject(e: Error): void }>();
  /** Errors a load process reported while the pool waited for nothing from it. */
  readonly #errors = new Map<ChildProcess, Error>();

  private constructor(children: ChildProcess[]) {
    this.#children = children;
    for (const child of children) {
      child.on('message', (m: LoadClientMessage) => {
        const w = this.#waiting.get(child);
        if (m.type === 'error') {
          const error = new Error(`load process ${child.pid}: ${m.message}`);
          this.#waiting.delete(child);
          if (w) w.reject(error);
          else if (!this.#errors.has(child)) this.#errors.set(child, error); // for the next #expect
        } else if (w && m.type === w.type) {
          this.#waiting.delete(child);
          w.resolve(m);
        }
      });
      child.on('exit', (code) => {
        const w = this.#waiting.get(child);
        this.#waiting.delete(child);
        w?.reject(new Error(`load process ${child.pid} exited with code ${code}`));
      });
    }
  }

  /** Forks `count` processes of `script` with `args` (they talk over IPC with structured clone). */
  static fork(script: string, args: string[], count: number): LoadClientPool {
    const children = Array.from({ length: count }, () => fork(script, args, { serialization: 'advanced', stdio: 'inherit' }));
    return new LoadClientPool(children);
  }

  get size(): number {
    return this.#children.length;
  }

  #expect(child: ChildProcess, type: string): Promise<LoadClientMessage> {
    const error = this.#errors.get(child);
    if (error) {
      this.#errors.delete(child);
      return Promise.reject(error);
    }
    return new Promise((resolve, reject) => this.#waiting.set(child, { type, resolve, reject }));
  }

  /**
   * One window: process i runs with `options[i]` (undefined: it sits out), `warmupSeconds` of
   * warm-up, then `seconds` measured. `watchPid`: a process whose CPU time is charged per request.
   */
  async run<O>(options: readonly (O | undefined)[], seconds: number, warmupSeconds = 0.5, watchPid?: number): Promise<DistributedLoadResult> {
    const active = this.#children.filter((_, i) => options[i] !== undefined);
    await Promise.all(
      active.map((child) => {
        const started = this.#expect(child, 'started');
        child.send({ type: 'start', options: options[this.#children.indexOf(child)] });
        return started;
      }),
    );
    await new Promise((r) => setTimeout(r, warmupSeconds * 1000));
    for (const child of active) child.send({ type: 'measure' });
    const cpu0 = watchPid === undefined ? undefined : cpuTimeUs(watchPid);
    const machine0 = machineCpuTicks();
    const t0 = performance.now();
    await new Promise((r) => setTimeout(r, seconds * 1000));
    const results = active.map((child) => this.#expect(child, 'result') as Promise<LoadClientResult>);
    for (const child of active) child.send({ type: 'stop' });
    const cpu1 = watchPid === undefined ? undefined : cpuTimeUs(watchPid);
    const machine1 = machineCpuTicks();
    const elapsed = (performance.now() - t0) / 1000;
    const reports = await Promise.all(results);
    const latencies: number[] = [];
    let throughput = 0;
    let completed = 0;
    let clientCpuUs = 0;
    for (const r of reports) {
      for (const l of r.latencies) latencies.push(l);
      throughput += r.completed / r.seconds;
      completed += r.completed;
      clientCpuUs += r.cpuUs;
    }
    const served = Math.max(1, throughput * elapsed);
    const machineBusy = machine0 && machine1 ? (machine1.busy - machine0.busy) / Math.max(1, machine1.total - machine0.total) : 0;
    const cores = availableParallelism();
    const ownUs = clientCpuUs + (cpu0 && cpu1 ? cpu1.total - cpu0.total : 0);
    return {
      ...summarizeLatencies(latencies, completed, elapsed),
      throughput,
      clients: active.length,
      clientCpuUsPerRequest: clientCpuUs / Math.max(1, completed),
      maxClientLoopUtilization: Math.max(...reports.map((r) => r.loopUtilization)),
      serverCpuUsPerRequest: cpu0 && cpu1 ? (cpu1.total - cpu0.total) / served : 0,
      serverMainThreadCpuUsPerRequest: cpu0 && cpu1 ? (cpu1.main - cpu0.main) / served : 0,
      machineCpuBusy: machineBusy,
      foreignCpuShare: Math.max(0, machineBusy - ownUs / (elapsed * 1e6 * cores)),
    };
  }

  /** Ends every load process. */
  async close(): Promise<void> {
    await Promise.all(
      this.#children.map(
        (child) =>
          new Promise<void>((done) => {
            if (child.exitCode !== null) return done();
            child.once('exit', () => done());
            child.send({ type: 'exit' });
          }),
      ),
    );
  }
}

export interface Figure {
  name: string;
  value: number;
  unit: string;
  baseline?: number;
  baselineName?: string;
  ratio?: number;
}

/** A figure measured against a baseline of the same run; the ratio is value / baseline. */
export function compared(name: string, unit: string, value: number, baseline: number, baselineName: string): Figure {
  return { name, value, unit, baseline, baselineName, ratio: value / baseline };
}

const fmt = (n: number) => (Number.isInteger(n) ? String(n) : Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2));

/** Prints one summary line per figure. */
export function report(figures: readonly Figure[], jsonPath?: string): void {
  for (const f of figures) {
    let line = `${f.name}: ${fmt(f.value)}${f.unit ? ` ${f.unit}` : ''}`;
    if (f.baseline !== undefined) {
      line += ` (baseline ${f.baselineName ? `${f.baselineName} ` : ''}${fmt(f.baseline)}${f.unit ? ` ${f.unit}` : ''}, ratio ${f.ratio?.toFixed(3)})`;
    }
    console.log(line);
  }
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(figures, null, 2));
}

/**
 * A server's raw answers to one encoded `ModelInferRequest` at `address` (host:port): the bytes of
 * its unary `ModelInferResponse` and of the `ModelStreamInferResponse` it streams back for the same
 * request, for bare servers and load processes to send or expect.
 */
export async function rawGrpcAnswers(address: string, request: Buffer): Promise<{ unary: Buffer; streamed: Buffer }> {
  const identity = (b: Buffer) => b;
  const client = new Client(address, credentials.createInsecure());
  try {
    const unary = await new Promise<Buffer>((done, fail) =>
      client.makeUnaryRequest(GRPC_INFERENCE_SERVICE.ModelInfer.path, identity, identity, request, (err, r) => (err ? fail(err) : done(r!))),
    );
    const streamed = await new Promise<Buffer>((done, fail) => {
      const call = client.makeBidiStreamRequest(GRPC_INFERENCE_SERVICE.ModelStreamInfer.path, identity, identity);
      call.once('data', (r: Buffer) => {
        done(r);
        call.end();
      });
      call.on('error', fail);
      call.write(request);
    });
    return { unary, streamed };
  } finally {
    client.close();
  }
}
