/**
 * Shared benchmark plumbing: a closed-loop load runner, child-process servers, and the summary
 * line format `name: value unit (baseline …, ratio …)` (conventions.md, Benchmarks).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { performance } from 'node:perf_hooks';

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
  latencies.sort((a, b) => a - b);
  const pick = (q: number) => latencies[Math.min(latencies.length - 1, Math.round(q * (latencies.length - 1)))] ?? 0;
  return {
    completed,
    seconds: elapsed,
    throughput: completed / elapsed,
    meanLatencyUs: latencies.reduce((a, b) => a + b, 0) / Math.max(1, latencies.length),
    p50Us: pick(0.5),
    p99Us: pick(0.99),
    loopBusyUsPerRequest: (elu.active * 1000) / Math.max(1, completed),
  };
}

/** A keep-alive HTTP POST helper that checks the status and drains the body. */
export function httpPoster(port: number, path: string, body: Buffer, headers: Record<string, string | number>, concurrency: number) {
  const agent = new Agent({ keepAlive: true, maxSockets: concurrency });
  const allHeaders = { ...headers, 'Content-Length': body.byteLength };
  const post = () =>
    new Promise<void>((resolve, reject) => {
      const req = request({ host: '127.0.0.1', port, path, method: 'POST', agent, headers: allHeaders }, (res) => {
        res.on('data', () => undefined);
        res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`HTTP ${res.statusCode}`))));
      });
      req.on('error', reject);
      req.end(body);
    });
  return { post, close: () => agent.destroy() };
}

export interface ChildServer {
  port: number;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** Spawns a node script, waits for the line matching `portPattern`, and returns the port. */
export function spawnServer(args: string[], portPattern: RegExp): Promise<ChildServer> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      const m = portPattern.exec(output);
      if (m) {
        child.stdout!.off('data', onData);
        child.stdout!.resume();
        child.stderr!.resume();
        resolve({
          port: Number(m[1]),
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

export interface Figure {
  name: string;
  value: number;
  unit: string;
  baseline?: number;
  baselineName?: string;
  ratio?: number;
}

const fmt = (n: number) => (Math.abs(n) >= 100 ? n.toFixed(0) : Math.abs(n) >= 10 ? n.toFixed(1) : n.toFixed(2));

/** Prints one summary line per figure. */
export function report(figures: readonly Figure[], jsonPath?: string): void {
  for (const f of figures) {
    let line = `${f.name}: ${fmt(f.value)} ${f.unit}`;
    if (f.baseline !== undefined) {
      line += ` (baseline ${f.baselineName ? `${f.baselineName} ` : ''}${fmt(f.baseline)} ${f.unit}, ratio ${f.ratio?.toFixed(3)})`;
    }
    console.log(line);
  }
  if (jsonPath) writeFileSync(jsonPath, JSON.stringify(figures, null, 2));
}
