/** `nereid operator`'s flags: defaults, forms of --leader-elect, and errors that name the flag. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseOperatorArgs } from './cli.js';

describe('parseOperatorArgs', () => {
  it('has the documented defaults', () => {
    const a = parseOperatorArgs([]);
    assert.equal(a.leaderElect, true);
    assert.equal(a.leaseName, 'nereid-operator');
    assert.equal(a.namespace, undefined);
    assert.equal(a.metricsAddress, '0.0.0.0');
    assert.equal(a.metricsPort, 8080);
    assert.equal(a.logLevel, 'info');
    assert.deepEqual([a.leaseDurationSeconds, a.renewDeadlineSeconds, a.retryPeriodSeconds], [15, 10, 2]);
  });

  it('accepts --leader-elect, --leader-elect=false and --no-leader-elect', () => {
    assert.equal(parseOperatorArgs(['--leader-elect']).leaderElect, true);
    assert.equal(parseOperatorArgs(['--leader-elect=false']).leaderElect, false);
    assert.equal(parseOperatorArgs(['--no-leader-elect']).leaderElect, false);
  });

  it('reads every flag', () => {
    const a = parseOperatorArgs([
      '--kubeconfig=/k',
      '--namespace',
      'ml',
      '--leader-election-namespace=ops',
      '--lease-name=l',
      '--leader-election-id=me',
      '--lease-duration-seconds=6',
      '--renew-deadline-seconds=4',
      '--retry-period-seconds=1',
      '--metrics-address=127.0.0.1',
      '--metrics-port=0',
      '--concurrency=8',
      '--resync-seconds=7',
      '--server-image=registry.example/nereid:1',
      '--prometheus-url=http://prometheus.monitoring:9090',
      '--log-level=debug',
    ]);
    assert.deepEqual(
      [a.kubeconfig, a.namespace, a.leaseNamespace, a.leaseName, a.identity, a.metricsAddress, a.metricsPort, a.concurrency, a.resyncSeconds, a.serverImage, a.prometheusUrl, a.logLevel],
      ['/k', 'ml', 'ops', 'l', 'me', '127.0.0.1', 0, 8, 7, 'registry.example/nereid:1', 'http://prometheus.monitoring:9090', 'debug'],
    );
  });

  for (const [args, message] of [
    [['--bogus'], /Unknown option '--bogus'/],
    [['--metrics-port=http'], /--metrics-port must be a whole number/],
    [['--metrics-port=70000'], /--metrics-port must lie between 0 and 65535/],
    [['--leader-elect=maybe'], /--leader-elect takes true or false/],
    [['--log-level=loud'], /--log-level takes one of debug, info, warn, error/],
    [['--namespace=Bad_NS'], /--namespace must be a Kubernetes object name/],
    [['--lease-duration-seconds=5', '--renew-deadline-seconds=5'], /must be shorter than --lease-duration-seconds/],
    [['--prometheus-url=prometheus:9090'], /--prometheus-url must be an http:\/\/ or https:\/\/ URL, got "prometheus:9090"/],
    [['--prometheus-url=ftp://p/'], /--prometheus-url must be an http:\/\/ or https:\/\/ URL/],
    [['stray'], /Unexpected argument 'stray'/],
  ] as const) {
    it(`rejects ${args.join(' ')}`, () => {
      assert.throws(() => parseOperatorArgs(args), (err: Error & { code?: string }) => err.code === 'OPERATOR_OPTION' && message.test(err.message));
    });
  }
});
