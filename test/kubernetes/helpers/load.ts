/**
 * A load generator for the Kubernetes tier: KServe v2 JSON inference requests over HTTP at a set
 * rate, each sent to the pod a `target` callback picks (a client-side balancer over the ready
 * pods, standing in for a Service, whose endpoints loopback pod IPs cannot be). It counts every
 * answer by status and by the `model_version` that answered, and every request that got no answer
 * (a transport error: refused, reset, timed out), which is a lost request.
 */
import { Agent, request as httpRequest } from 'node:http';

export interface LoadOptions {
  /** The base URL (`http://<pod IP>:<port>`) for the next request; `undefined` when none is ready (the request waits). */
  target: () => string | undefined;
  model: string;
  /** A version for the URL (`/v2/models/<m>/versions/<v>/infer`); default none (the server picks). */
  version?: string;
  /** The JSON inference request body. */
  body: unknown;
  /** Requests per second (default 50). */
  rate?: number;
  /** At most this many requests in flight; requests beyond it wait (default 64). */
  maxInFlight?: number;
  /** Per-request timeout in ms (default 15000). */
  timeoutMs?: number;
}

export interface LoadResult {
  /** Requests sent. */
  sent: number;
  /** Answered with 200. */
  ok: number;
  /** Answered with another status: count by status. */
  errors: Map<number, number>;
  /** The first few error answers' bodies. */
  errorBodies: string[];
  /** 200 answers by the `model_version` they carried. */
  byVersion: Map<string, number>;
  /** 200 answers by the target (base URL) that answered. */
  byTarget: Map<string, number>;
  /** Requests without an answer (transport errors), with their messages. */
  lost: string[];
}

export interface LoadRun {
  /** What was counted so far (a snapshot). */
  stats(): LoadResult;
  /** Changes the rate (requests per second); 0 pauses. */
  setRate(rate: number): void;
  /** Counts from now on start from zero; returns what was counted before. */
  reset(): LoadResult;
  /** Stops sending, waits for every request in flight and returns the totals. */
  stop(): Promise<LoadResult>;
}

function empty(): LoadResult {
  return { sent: 0, ok: 0, errors: new Map(), errorBodies: [], byVersion: new Map(), byTarget: new Map(), lost: [] };
}

function copy(r: LoadResult): LoadResult {
  return { ...r, errors: new Map(r.errors), errorBodies: [...r.errorBodies], byVersion: new Map(r.byVersion), byTarget: new Map(r.byTarget), lost: [...r.lost] };
}

const bump = (m: Map<string | number, number>, k: string | number) => m.set(k, (m.get(k) ?? 0) + 1);

export function startLoad(options: LoadOptions): LoadRun {
  const agent = new Agent({ keepAlive: true, maxSockets: 64 });
  const path = `/v2/models/${encodeURIComponent(options.model)}${options.version ? `/versions/${options.version}` : ''}/infer`;
  const body = Buffer.from(JSON.stringify(options.body));
  const maxInFlight = options.maxInFlight ?? 64;
  const timeoutMs = options.timeoutMs ?? 15_000;
  let rate = options.rate ?? 50;
  let result = empty();
  let inFlight = 0;
  let owed = 0;
  let stopped = false;
  let last = performance.now();
  const drained: (() => void)[] = [];

  const send = (base: string) => {
    inFlight++;
    result.sent++;
    const counted = result;
    let done = false;
    const finish = () => {
      done = true;
      inFlight--;
      if (inFlight === 0) for (const d of drained.splice(0)) d();
    };
    const req = httpRequest(
      `${base}${path}`,
      { method: 'POST', agent, headers: { 'content-type': 'application/json', 'content-length': body.length }, timeout: timeoutMs },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (err) => {
          if (!done) {
            counted.lost.push(`${base}: ${err.message}`);
            finish();
          }
        });
        res.on('end', () => {
          if (done) return;
          const text = Buffer.concat(chunks).toString('utf8');
          if (res.statusCode === 200) {
            counted.ok++;
            bump(counted.byTarget, base);
            try {
              const v = (JSON.parse(text) as { model_version?: string }).model_version;
              bump(counted.byVersion, v ?? '');
            } catch {
              bump(counted.byVersion, '?');
            }
          } else {
            bump(counted.errors, res.statusCode ?? 0);
            if (counted.errorBodies.length < 20) counted.errorBodies.push(`${base} ${res.statusCode}: ${text.slice(0, 300)}`);
          }
          finish();
        });
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeoutMs} ms`)));
    req.on('error', (err) => {
      if (done) return;
      counted.lost.push(`${base}: ${err.message}`);
      finish();
    });
    req.end(body);
  };

  const timer = setInterval(() => {
    const t = performance.now();
    owed = Math.min(owed + ((t - last) / 1000) * rate, rate + maxInFlight);
    last = t;
    while (owed >= 1 && inFlight < maxInFlight && !stopped) {
      const base = options.target();
      if (base === undefined) break;
      owed -= 1;
      send(base);
    }
  }, 5);

  return {
    stats: () => copy(result),
    setRate(r) {
      rate = r;
      owed = 0;
    },
    reset() {
      const before = result;
      result = empty();
      return copy(before);
    },
    async stop() {
      stopped = true;
      clearInterval(timer);
      if (inFlight > 0) await new Promise<void>((resolve) => drained.push(resolve));
      agent.destroy();
      return copy(result);
    },
  };
}
