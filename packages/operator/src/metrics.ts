/**
 * The operator's own Prometheus metrics and its /metrics, /healthz and /readyz endpoint.
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export class OperatorMetrics {
  readonly registry = new Registry();
  readonly reconciles = new Counter({
    name: 'nereid_operator_reconcile_total',
    help: 'Reconciles by kind (NereidServer, NereidModel, ModelsReadyGate) and result (success, error, requeue).',
    labelNames: ['kind', 'result'],
    registers: [this.registry],
  });
  readonly durations = new Histogram({
    name: 'nereid_operator_reconcile_duration_seconds',
    help: 'Reconcile durations by kind.',
    labelNames: ['kind'],
    buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
    registers: [this.registry],
  });
  /** Queue depths by kind, read at each scrape. */
  depthSources = new Map<string, () => number>();
  readonly queueDepth: Gauge<'kind'>;
  readonly leader = new Gauge({
    name: 'nereid_operator_leader',
    help: '1 while this process holds the leader Lease (or runs without leader election), else 0.',
    registers: [this.registry],
  });
  readonly relists = new Counter({
    name: 'nereid_operator_watch_relists_total',
    help: 'Full lists by resource and reason (start, gone: the watch answered 410 Gone).',
    labelNames: ['resource', 'reason'],
    registers: [this.registry],
  });

  constructor() {
    const sources = this.depthSources;
    this.queueDepth = new Gauge({
      name: 'nereid_operator_workqueue_depth',
      help: 'Keys waiting in the work queue, by kind.',
      labelNames: ['kind'],
      registers: [this.registry],
      collect() {
        for (const [kind, depth] of sources) this.set({ kind }, depth());
      },
    });
    collectDefaultMetrics({ register: this.registry, prefix: 'nereid_operator_' });
  }
}

export interface HealthSource {
  /** Live: the process runs its loops. */
  live(): boolean;
  /** Ready: a standby, or a leader whose caches have synced. */
  ready(): boolean;
}

/** Serves /metrics, /healthz and /readyz; resolves once listening. */
export async function serveMetrics(metrics: OperatorMetrics, health: HealthSource, host: string, port: number): Promise<http.Server> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/metrics') {
      metrics.registry.metrics().then(
        (text) => {
          res.writeHead(200, { 'content-type': metrics.registry.contentType });
          res.end(text);
        },
        (err: unknown) => {
          res.writeHead(500);
          res.end(String(err));
        },
      );
      return;
    }
    if (path === '/healthz' || path === '/readyz') {
      const ok = path === '/healthz' ? health.live() : health.ready();
      res.writeHead(ok ? 200 : 503, { 'content-type': 'text/plain' });
      res.end(ok ? 'ok\n' : 'not ready\n');
      return;
    }
    res.writeHead(404);
    res.end();
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}

export const boundPort = (server: http.Server): number => (server.address() as AddressInfo).port;
