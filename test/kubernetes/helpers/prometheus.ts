/**
 * A real Prometheus (Debian's `prometheus` package, `/usr/bin/prometheus`) for the Kubernetes
 * tier. Debian builds Prometheus without `kubernetes_sd_configs`, so the harness does the pod
 * discovery: it lists the pods of the watched namespaces in the API server twice a second and
 * writes every Running pod's port named `metrics` (the operator's pods) as a `file_sd_configs`
 * target, which Prometheus picks up at once (inotify). Each target is scraped once a second and
 * its series carry the pod's `namespace`, `pod` and `nereid_server` (the pod's
 * `app.kubernetes.io/instance`) labels, as kube-prometheus's pod relabelling gives them.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Cluster } from './cluster.js';
import { atExit, freePort } from './processes.js';
import { Rest } from './rest.js';

export const PROMETHEUS_BIN = '/usr/bin/prometheus';

export interface PromSample {
  metric: Record<string, string>;
  value: number;
}

export interface Prometheus {
  /** `http://127.0.0.1:<port>` */
  readonly url: string;
  /** An instant query (`/api/v1/query`); a vector or scalar result as samples. */
  query(promql: string): Promise<PromSample[]>;
  /** The active targets' scrape URLs with their health (`up`, `down`, `unknown`). */
  targets(): Promise<{ url: string; health: string; labels: Record<string, string> }[]>;
  /** The last lines of Prometheus's output. */
  output(): string;
  stop(): Promise<void>;
}

export interface PrometheusOptions {
  /** Only pods of these namespaces (default: all). */
  namespaces?: string[];
  /** Scrape interval in seconds (default 1). */
  scrapeSeconds?: number;
}

/** The path of the prometheus binary, or throws with the command that installs it. */
export function prometheusPath(): string {
  if (!existsSync(PROMETHEUS_BIN)) {
    throw new Error(`${PROMETHEUS_BIN} is missing: run \`node scripts/setup.mjs kubernetes\` (or \`apt-get install -y prometheus\` as root)`);
  }
  return PROMETHEUS_BIN;
}

function scrapeConfig(targetsFile: string, options: PrometheusOptions): string {
  const interval = `${options.scrapeSeconds ?? 1}s`;
  return `global:
  scrape_interval: ${interval}
  scrape_timeout: ${interval}
  evaluation_interval: ${interval}
scrape_configs:
  - job_name: nereid-pods
    file_sd_configs:
      - files: [${JSON.stringify(targetsFile)}]
        refresh_interval: 1s
`;
}

interface PodList {
  items: {
    metadata: { name: string; namespace: string; labels?: Record<string, string>; deletionTimestamp?: string };
    spec: { containers: { ports?: { name?: string; containerPort: number }[] }[] };
    status?: { phase?: string; podIP?: string };
  }[];
}

/** The file_sd target groups of the Running pods' `metrics` ports. */
function targetGroups(pods: PodList['items']): object[] {
  const groups: object[] = [];
  for (const pod of pods) {
    if (pod.status?.phase !== 'Running' || !pod.status.podIP) continue;
    for (const c of pod.spec.containers) {
      for (const port of c.ports ?? []) {
        if (port.name !== 'metrics') continue;
        groups.push({
          targets: [`${pod.status.podIP}:${port.containerPort}`],
          labels: {
            namespace: pod.metadata.namespace,
            pod: pod.metadata.name,
            ...(pod.metadata.labels?.['app.kubernetes.io/instance'] ? { nereid_server: pod.metadata.labels['app.kubernetes.io/instance'] } : {}),
          },
        });
      }
    }
  }
  return groups;
}

export async function startPrometheus(cluster: Cluster, options: PrometheusOptions = {}): Promise<Prometheus> {
  const bin = prometheusPath();
  const dir = await mkdtemp(join(tmpdir(), 'nereid-prometheus-'));
  const forget = atExit(() => void rm(dir, { recursive: true, force: true }));
  const port = await freePort();
  const config = join(dir, 'prometheus.yml');
  const targetsFile = join(dir, 'targets.json');
  await writeFile(targetsFile, '[]');
  await writeFile(config, scrapeConfig(targetsFile, options));
  const rest = new Rest(cluster.kubeConfig);
  let written = '[]';
  let discovering = true;
  const discover = async () => {
    const paths = options.namespaces?.length ? options.namespaces.map((ns) => `/api/v1/namespaces/${ns}/pods`) : ['/api/v1/pods'];
    const pods: PodList['items'] = [];
    for (const path of paths) pods.push(...(await rest.request<PodList>('GET', path)).items);
    const text = JSON.stringify(targetGroups(pods));
    if (text !== written && discovering) {
      await writeFile(`${targetsFile}.tmp`, text);
      await rename(`${targetsFile}.tmp`, targetsFile);
      written = text;
    }
  };
  const discovery = (async () => {
    while (discovering) {
      try {
        await discover();
      } catch {
        // the API server is stopping or busy: try again
      }
      await new Promise((r) => setTimeout(r, 500));
    }
  })();
  const url = `http://127.0.0.1:${port}`;
  const child = spawn(
    bin,
    [
      `--config.file=${config}`,
      `--storage.tsdb.path=${join(dir, 'data')}`,
      `--web.listen-address=127.0.0.1:${port}`,
      '--storage.tsdb.retention.time=1h',
      '--log.level=warn',
    ],
    { cwd: dir, detached: true, stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  const keep = (s: string) => (output = (output + s).slice(-20_000));
  child.stdout!.setEncoding('utf8').on('data', keep);
  child.stderr!.setEncoding('utf8').on('data', keep);
  let exited = false;
  const closed = new Promise<void>((resolve) => child.once('close', () => ((exited = true), resolve())));
  const killGroup = (signal: NodeJS.Signals) => {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, signal);
    } catch {
      // already gone
    }
  };
  const forgetProcess = atExit(() => killGroup('SIGKILL'));
  const stop = async () => {
    discovering = false;
    await discovery;
    if (!exited) {
      killGroup('SIGTERM');
      const timer = setTimeout(() => killGroup('SIGKILL'), 5000);
      await closed;
      clearTimeout(timer);
    }
    forgetProcess();
    await rm(dir, { recursive: true, force: true });
    forget();
  };
  const api = async (path: string): Promise<any> => {
    const res = await fetch(`${url}${path}`);
    const body = (await res.json()) as { status: string; data?: any; error?: string };
    if (body.status !== 'success') throw new Error(`prometheus ${path}: ${res.status} ${body.error ?? ''}`);
    return body.data;
  };
  const deadline = Date.now() + 60_000;
  for (;;) {
    if (exited) {
      await stop();
      throw new Error(`prometheus exited before it answered:\n${output}`);
    }
    try {
      const res = await fetch(`${url}/-/ready`);
      if (res.ok) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`prometheus was not ready within 60 s:\n${output}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    url,
    async query(promql) {
      const data = await api(`/api/v1/query?query=${encodeURIComponent(promql)}`);
      if (data.resultType === 'scalar') return [{ metric: {}, value: Number(data.result[1]) }];
      return (data.result as { metric: Record<string, string>; value: [number, string] }[]).map((r) => ({ metric: r.metric, value: Number(r.value[1]) }));
    },
    async targets() {
      const data = await api('/api/v1/targets?state=active');
      return (data.activeTargets as { scrapeUrl: string; health: string; labels: Record<string, string> }[]).map((t) => ({ url: t.scrapeUrl, health: t.health, labels: t.labels }));
    },
    output: () => output,
    stop,
  };
}
