/**
 * A real Jaeger for the tracing tests: the Jaeger v2 binary (`cmd/jaeger` of
 * github.com/jaegertracing/jaeger v1.75.0, built by `node scripts/fleet-infra.mjs build jaeger`)
 * on loopback, with in-memory storage, its OTLP/HTTP receiver and its query API each on a port
 * the OS chose a moment before. Nothing else listens: the collector's own metrics are off, and no
 * gRPC receiver is configured.
 *
 * `stop()` kills its process group and removes its directory; the process group is also killed if
 * the test process exits first.
 */
import { execFile, spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { freePorts, stopGroup } from './processes.js';

const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));

/** One span as Jaeger's query API answers it (`/api/traces`). */
export interface JaegerSpan {
  readonly traceID: string;
  readonly spanID: string;
  readonly operationName: string;
  readonly references: readonly { readonly refType: string; readonly traceID: string; readonly spanID: string }[];
  /** Microseconds since the epoch. */
  readonly startTime: number;
  /** Microseconds. */
  readonly duration: number;
  readonly tags: readonly { readonly key: string; readonly type: string; readonly value: unknown }[];
  readonly logs: readonly { readonly timestamp: number; readonly fields: readonly { readonly key: string; readonly value: unknown }[] }[];
  readonly processID: string;
}

export interface JaegerTrace {
  readonly traceID: string;
  readonly spans: readonly JaegerSpan[];
  readonly processes: Readonly<Record<string, { readonly serviceName: string; readonly tags: readonly { readonly key: string; readonly value: unknown }[] }>>;
}

export interface Jaeger {
  /** Where OTLP/HTTP trace exports go: `http://127.0.0.1:<port>/v1/traces`. */
  readonly otlpUrl: string;
  /** The query API's base: `http://127.0.0.1:<port>`. */
  readonly queryUrl: string;
  /** GET `/api/traces/<id>`: the trace, or undefined while Jaeger has none by that id. */
  trace(traceId: string): Promise<JaegerTrace | undefined>;
  /** GET `/api/traces?service=<name>`: the service's traces (at most `limit`), those with every tag of `tags` when given. */
  traces(service: string, tags?: Record<string, string>, limit?: number): Promise<JaegerTrace[]>;
  /**
   * Polls `trace(traceId)` until it holds at least `spans` spans (exports are batched, and Jaeger
   * stores what it receives a moment later); rejects after `timeoutMs` with what it last saw.
   */
  waitForTrace(traceId: string, spans: number, timeoutMs?: number): Promise<JaegerTrace>;
  /** The last lines Jaeger printed. */
  output(): string;
  stop(): Promise<void>;
}

/** The path of the built `jaeger` binary; rejects saying how to build it. */
export function jaegerPath(): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [join(REPO_ROOT, 'scripts', 'fleet-infra.mjs'), 'path', 'jaeger'], (err, stdout, stderr) => {
      if (err !== null) reject(new Error(`no jaeger binary (${stderr.trim() || err.message}); build it with: node scripts/fleet-infra.mjs build jaeger`));
      else resolve(stdout.trim());
    });
  });
}

/** Jaeger's configuration: OTLP/HTTP in, memory storage, the query API; every listener on loopback. */
function config(otlpPort: number, queryHttpPort: number, queryGrpcPort: number): string {
  return `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: []
      exporters: [jaeger_storage_exporter]
  telemetry:
    metrics:
      level: none
    logs:
      level: warn
extensions:
  jaeger_storage:
    backends:
      memstore:
        memory:
          max_traces: 100000
  jaeger_query:
    enable_tracing: false
    storage:
      traces: memstore
    http:
      endpoint: 127.0.0.1:${queryHttpPort}
    grpc:
      endpoint: 127.0.0.1:${queryGrpcPort}
receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:${otlpPort}
exporters:
  jaeger_storage_exporter:
    trace_storage: memstore
`;
}

const live = new Set<number>();
let hooked = false;
function killOnExit(pid: number): void {
  live.add(pid);
  if (hooked) return;
  hooked = true;
  process.on('exit', () => {
    for (const p of live) {
      try {
        process.kill(-p, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  });
}

export async function startJaeger(): Promise<Jaeger> {
  const binary = await jaegerPath();
  const dir = await mkdtemp(join(tmpdir(), 'nereid-jaeger-'));
  const [otlpPort, queryHttpPort, queryGrpcPort] = (await freePorts(3)) as [number, number, number];
  await writeFile(join(dir, 'config.yaml'), config(otlpPort, queryHttpPort, queryGrpcPort));
  const child = spawn(binary, ['--config', join(dir, 'config.yaml')], { cwd: dir, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  killOnExit(child.pid!);
  let output = '';
  const keep = (s: string) => (output = (output + s).slice(-20_000));
  child.stdout!.setEncoding('utf8').on('data', keep);
  child.stderr!.setEncoding('utf8').on('data', keep);
  let exited = false;
  const closed = new Promise<void>((resolve) => child.once('close', () => ((exited = true), live.delete(child.pid!), resolve())));
  const queryUrl = `http://127.0.0.1:${queryHttpPort}`;
  const otlpUrl = `http://127.0.0.1:${otlpPort}/v1/traces`;

  const stop = async () => {
    if (!exited) await stopGroup(child.pid, closed);
    await rm(dir, { recursive: true, force: true });
  };

  // Ready when the query API answers and the OTLP receiver takes an (empty) export.
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) {
      await stop();
      throw new Error(`jaeger exited before it answered:\n${output}`);
    }
    try {
      const services = await fetch(`${queryUrl}/api/services`);
      const otlp = await fetch(otlpUrl, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{"resourceSpans":[]}' });
      if (services.ok && otlp.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`jaeger did not answer on ${queryUrl} and ${otlpUrl} within 60 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }

  const trace = async (traceId: string): Promise<JaegerTrace | undefined> => {
    const response = await fetch(`${queryUrl}/api/traces/${traceId}`);
    if (response.status === 404) return undefined;
    if (!response.ok) throw new Error(`jaeger GET /api/traces/${traceId}: HTTP ${response.status} ${await response.text()}`);
    const body = (await response.json()) as { data: JaegerTrace[] | null };
    return body.data?.[0];
  };
  const traces = async (service: string, tags?: Record<string, string>, limit = 100): Promise<JaegerTrace[]> => {
    const tagQuery = tags === undefined ? '' : `&tags=${encodeURIComponent(JSON.stringify(tags))}`;
    const response = await fetch(`${queryUrl}/api/traces?service=${encodeURIComponent(service)}&limit=${limit}${tagQuery}`);
    if (!response.ok) throw new Error(`jaeger GET /api/traces?service=${service}: HTTP ${response.status} ${await response.text()}`);
    const body = (await response.json()) as { data: JaegerTrace[] | null };
    return body.data ?? [];
  };
  const waitForTrace = async (traceId: string, spans: number, timeoutMs = 20_000): Promise<JaegerTrace> => {
    const until = Date.now() + timeoutMs;
    let last: JaegerTrace | undefined;
    for (;;) {
      last = await trace(traceId);
      if (last !== undefined && last.spans.length >= spans) return last;
      if (Date.now() > until) {
        throw new Error(`jaeger has ${last?.spans.length ?? 0} of ${spans} spans of trace ${traceId} after ${timeoutMs} ms: ${JSON.stringify(last?.spans.map((s) => s.operationName) ?? [])}`);
      }
      await new Promise((r) => setTimeout(r, 100));
    }
  };
  return { otlpUrl, queryUrl, trace, traces, waitForTrace, output: () => output, stop };
}
