/**
 * `nereid operator` / `nereid-operator`: flag parsing and the process lifecycle.
 * Exit codes: 0 after SIGTERM/SIGINT, 1 when the leader Lease was lost or startup failed,
 * 2 for bad flags.
 */
import { existsSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { KubeConfig } from '@kubernetes/client-node';
import { NereidError, toNereidError } from '@nereid/protocol';
import { LOG_LEVELS, createLogger } from './log.js';
import type { LogLevel } from './log.js';
import { Operator } from './operator.js';
import type { OperatorOptions } from './operator.js';

export const OPERATOR_HELP = `Usage: nereid operator [options]

Runs the Kubernetes controller for NereidServer and NereidModel resources (nereid.dev/v1alpha1).

Options:
  --kubeconfig <file>                 kubeconfig to use (default: in-cluster service account,
                                      else $KUBECONFIG, else ~/.kube/config)
  --namespace <ns>                    watch only this namespace (default: all namespaces)
  --leader-elect[=true|false]         elect a leader on a coordination.k8s.io Lease (default true)
  --leader-election-namespace <ns>    namespace of the Lease (default: --namespace, else
                                      $POD_NAMESPACE or the service account's namespace in a
                                      cluster, else "default")
  --lease-name <name>                 name of the Lease (default nereid-operator)
  --leader-election-id <id>           this process's identity in the Lease (default $POD_NAME,
                                      else host_random)
  --lease-duration-seconds <n>        how long a Lease is valid after its renewal (default 15)
  --renew-deadline-seconds <n>        a leader that cannot renew for this long stops (default 10)
  --retry-period-seconds <n>          interval of acquire/renew attempts (default 2)
  --metrics-address <host>            address of /metrics, /healthz, /readyz (default 0.0.0.0)
  --metrics-port <port>               port of that endpoint (default 8080; 0 picks a free one)
  --server-image <image>              image of NereidServers that name none
                                      (default localhost/nereid:0.1.0)
  --concurrency <n>                   keys reconciled at once per kind (default 4)
  --resync-seconds <n>                re-check settled resources this often: ConfigMap model
                                      sources, restarted server processes (default 60)
  --prometheus-url <url>              Prometheus that autoscaling (mode operator) and canary
                                      analysis query, e.g. http://prometheus.monitoring:9090
                                      (default: none; such resources then wait with a condition
                                      saying so)
  --log-level <debug|info|warn|error> (default info)
  -h, --help                          this text
`;

const SERVICE_ACCOUNT_NAMESPACE = '/var/run/secrets/kubernetes.io/serviceaccount/namespace';

/** The command line, parsed: the operator's own options but for the parts made from it at start. */
export type ParsedOperatorArgs = Omit<OperatorOptions, 'kubeConfig' | 'log' | 'leaseNamespace' | 'resyncSeconds'> & {
  help: boolean;
  kubeconfig?: string;
  /** Undefined: the watched namespace, else the pod's own, else `default` (decided at start). */
  leaseNamespace?: string;
  resyncSeconds: number;
  logLevel: LogLevel;
};

const bad = (message: string): NereidError => new NereidError('OPERATOR_OPTION', message);

function integer(name: string, value: string | undefined, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (!/^\d+$/.test(value)) throw bad(`--${name} must be a whole number, got "${value}"`);
  const n = Number(value);
  if (n < min || n > max) throw bad(`--${name} must lie between ${min} and ${max}, got ${n}`);
  return n;
}

/** Parses the operator's flags; throws NereidError OPERATOR_OPTION with a message naming the flag. */
export function parseOperatorArgs(argv: readonly string[]): ParsedOperatorArgs {
  const normalised = argv.map((a) => (a === '--leader-elect' ? '--leader-elect=true' : a === '--no-leader-elect' ? '--leader-elect=false' : a));
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: normalised,
      strict: true,
      allowPositionals: false,
      options: {
        help: { type: 'boolean', short: 'h' },
        kubeconfig: { type: 'string' },
        namespace: { type: 'string' },
        'leader-elect': { type: 'string' },
        'leader-election-namespace': { type: 'string' },
        'lease-name': { type: 'string' },
        'leader-election-id': { type: 'string' },
        'lease-duration-seconds': { type: 'string' },
        'renew-deadline-seconds': { type: 'string' },
        'retry-period-seconds': { type: 'string' },
        'metrics-address': { type: 'string' },
        'metrics-port': { type: 'string' },
        concurrency: { type: 'string' },
        'resync-seconds': { type: 'string' },
        'server-image': { type: 'string' },
        'prometheus-url': { type: 'string' },
        'log-level': { type: 'string' },
      },
    }));
  } catch (err) {
    throw bad(`${(err as Error).message} (see nereid operator --help)`);
  }
  const str = (k: string): string | undefined => values[k] as string | undefined;
  const leaderElect = str('leader-elect') ?? 'true';
  if (leaderElect !== 'true' && leaderElect !== 'false') throw bad(`--leader-elect takes true or false, got "${leaderElect}"`);
  const logLevel = str('log-level') ?? 'info';
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) throw bad(`--log-level takes one of ${LOG_LEVELS.join(', ')}, got "${logLevel}"`);
  for (const k of ['namespace', 'leader-election-namespace', 'lease-name']) {
    const v = str(k);
    if (v !== undefined && !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(v)) throw bad(`--${k} must be a Kubernetes object name, got "${v}"`);
  }
  const parsed: ParsedOperatorArgs = {
    help: values.help === true,
    kubeconfig: str('kubeconfig'),
    namespace: str('namespace'),
    leaderElect: leaderElect === 'true',
    leaseNamespace: str('leader-election-namespace'),
    leaseName: str('lease-name') ?? 'nereid-operator',
    identity: str('leader-election-id'),
    leaseDurationSeconds: integer('lease-duration-seconds', str('lease-duration-seconds'), 15, 1, 3600),
    renewDeadlineSeconds: integer('renew-deadline-seconds', str('renew-deadline-seconds'), 10, 1, 3600),
    retryPeriodSeconds: integer('retry-period-seconds', str('retry-period-seconds'), 2, 1, 600),
    metricsAddress: str('metrics-address') ?? '0.0.0.0',
    metricsPort: integer('metrics-port', str('metrics-port'), 8080, 0, 65535),
    concurrency: integer('concurrency', str('concurrency'), 4, 1, 64),
    resyncSeconds: integer('resync-seconds', str('resync-seconds'), 60, 1, 86400),
    serverImage: str('server-image'),
    prometheusUrl: str('prometheus-url'),
    logLevel: logLevel as LogLevel,
  };
  if (parsed.serverImage !== undefined && !/^\S+$/.test(parsed.serverImage)) throw bad(`--server-image must be an image reference, got "${parsed.serverImage}"`);
  if (parsed.prometheusUrl !== undefined) {
    let url: URL | undefined;
    try {
      url = new URL(parsed.prometheusUrl);
    } catch {
      url = undefined;
    }
    if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      throw bad(`--prometheus-url must be an http:// or https:// URL, got "${parsed.prometheusUrl}"`);
    }
  }
  if (parsed.renewDeadlineSeconds >= parsed.leaseDurationSeconds) {
    throw bad(`--renew-deadline-seconds (${parsed.renewDeadlineSeconds}) must be shorter than --lease-duration-seconds (${parsed.leaseDurationSeconds})`);
  }
  if (parsed.retryPeriodSeconds >= parsed.renewDeadlineSeconds) {
    throw bad(`--retry-period-seconds (${parsed.retryPeriodSeconds}) must be shorter than --renew-deadline-seconds (${parsed.renewDeadlineSeconds})`);
  }
  return parsed;
}

/** The kubeconfig: --kubeconfig, else in-cluster, else $KUBECONFIG / ~/.kube/config. */
export function loadKubeConfig(path: string | undefined): { kubeConfig: KubeConfig; inCluster: boolean } {
  const kubeConfig = new KubeConfig();
  if (path !== undefined) {
    if (!existsSync(path)) throw bad(`--kubeconfig ${path}: no such file`);
    kubeConfig.loadFromFile(path);
    return { kubeConfig, inCluster: false };
  }
  if (process.env.KUBERNETES_SERVICE_HOST && existsSync('/var/run/secrets/kubernetes.io/serviceaccount/token')) {
    kubeConfig.loadFromCluster();
    return { kubeConfig, inCluster: true };
  }
  const candidates = (process.env.KUBECONFIG ?? '').split(':').filter(Boolean);
  candidates.push(join(homedir(), '.kube', 'config'));
  if (!candidates.some((c) => existsSync(c))) {
    throw bad('no Kubernetes configuration: not in a cluster, and neither --kubeconfig, $KUBECONFIG nor ~/.kube/config names a file');
  }
  kubeConfig.loadFromDefault();
  return { kubeConfig, inCluster: false };
}

/**
 * Runs the operator until SIGTERM/SIGINT (resolves 0) or until the leader Lease is lost
 * (resolves 1). Bad flags print a message and resolve 2.
 */
export async function runOperator(argv: readonly string[]): Promise<number> {
  let args: ParsedOperatorArgs;
  try {
    args = parseOperatorArgs(argv);
  } catch (err) {
    process.stderr.write(`nereid operator: ${toNereidError(err).message}\n`);
    return 2;
  }
  if (args.help) {
    process.stdout.write(OPERATOR_HELP);
    return 0;
  }
  const log = createLogger(args.logLevel);
  let operator: Operator;
  try {
    const { kubeConfig, inCluster } = loadKubeConfig(args.kubeconfig);
    const podNamespace =
      process.env.POD_NAMESPACE || (inCluster && existsSync(SERVICE_ACCOUNT_NAMESPACE) ? readFileSync(SERVICE_ACCOUNT_NAMESPACE, 'utf8').trim() : undefined);
    const options: OperatorOptions = {
      kubeConfig,
      log,
      namespace: args.namespace,
      leaderElect: args.leaderElect,
      leaseNamespace: args.leaseNamespace ?? args.namespace ?? podNamespace ?? 'default',
      leaseName: args.leaseName,
      identity: args.identity ?? (process.env.POD_NAME || undefined),
      leaseDurationSeconds: args.leaseDurationSeconds,
      renewDeadlineSeconds: args.renewDeadlineSeconds,
      retryPeriodSeconds: args.retryPeriodSeconds,
      metricsAddress: args.metricsAddress,
      metricsPort: args.metricsPort,
      concurrency: args.concurrency,
      resyncSeconds: args.resyncSeconds,
      serverImage: args.serverImage,
      prometheusUrl: args.prometheusUrl,
    };
    operator = new Operator(options);
    await operator.start();
  } catch (err) {
    const e = toNereidError(err);
    process.stderr.write(`nereid operator: ${e.code === 'OPERATOR_OPTION' ? '' : 'cannot start: '}${e.message}\n`);
    return e.code === 'OPERATOR_OPTION' ? 2 : 1;
  }
  const onSignal = (): void => void operator.stop();
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  const reason = await operator.done;
  process.off('SIGTERM', onSignal);
  process.off('SIGINT', onSignal);
  if (reason === 'lost-lease') {
    await operator.stop();
    return 1;
  }
  log.info('stopped');
  return 0;
}
