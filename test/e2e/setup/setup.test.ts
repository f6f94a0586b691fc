/**
 * The setup step (scripts/setup.mjs) that `npm test`, `npm run serve` and the other npm scripts run
 * first: it finds what is present, and where something is missing and it may not install, it stops
 * with the exact command that would. Here it runs in check mode (NEREID_SETUP=check: never
 * installs) with a PATH that hides some tools, so the missing-prerequisite paths run without
 * changing the machine. Installing is proven on a clean system by scripts/fresh-machine-check.sh.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { REPO_ROOT } from '../../helpers/cli.js';

const SETUP = join(REPO_ROOT, 'scripts', 'setup.mjs');

function setup(args: string[], env: NodeJS.ProcessEnv = {}): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [SETUP, ...args], { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** A PATH directory holding only the named commands (links to the real ones). */
function pathWith(commands: Record<string, string>): string {
  const dir = mkdtempSync(join(tmpdir(), 'nereid-setup-path-'));
  for (const [name, target] of Object.entries(commands)) symlinkSync(target, join(dir, name));
  dirs.push(dir);
  return dir;
}
const dirs: string[] = [];
after(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('setup step (scripts/setup.mjs)', () => {
  it('finds every prerequisite of the test profile on this machine and says so in one line', () => {
    const r = setup(['test', '--check']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^setup \(test\): 15 of 15 prerequisites present \(\d+ ms\)\n$/);
    assert.equal(r.stderr, '');
  });

  it('stops on missing tools with the apt-get command that installs them, naming each and its use', () => {
    const path = pathWith({ node: process.execPath, 'apt-get': '/usr/bin/apt-get' });
    const r = setup(['test'], { PATH: path, NEREID_SETUP: 'check' });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /setup \(test\): missing, and not installed here \(NEREID_SETUP=check\):/);
    assert.match(r.stderr, /- espeak-ng \(Debian: espeak-ng\): the speech-detection example test/);
    assert.match(r.stderr, /- promtool \(Debian: prometheus\): the metrics tests check the exposition text/);
    assert.match(r.stderr, /- redis-server \(Debian: redis-server\): the Redis response-cache tests/);
    assert.match(r.stderr, /- chromium \(headless\) \(Debian: chromium\): the analyze report test draws the HTML report/);
    assert.match(r.stderr, /- a C compiler \(cc\) and the C library headers \(Debian: gcc, libc6-dev\)/);
    // No sudo on this PATH: the command is the one to run as root.
    assert.ok(r.stderr.includes('Run as root:\n  apt-get update && apt-get install -y --no-install-recommends espeak-ng prometheus redis-server chromium gcc libc6-dev\n'), r.stderr);
  });

  it('without apt-get names the Debian packages to find equivalents of', () => {
    const r = setup(['test'], { PATH: pathWith({ node: process.execPath }), NEREID_SETUP: 'check' });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /This system has no apt-get: install the equivalents of these Debian packages with its package manager: espeak-ng prometheus redis-server chromium gcc libc6-dev/);
  });

  it('serves without a C compiler: reported as optional, not a stop', () => {
    const r = setup(['serve'], { PATH: pathWith({ node: process.execPath, 'apt-get': '/usr/bin/apt-get' }), NEREID_SETUP: 'check' });
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stderr, /- a C compiler \(cc\) and the C library headers \(Debian: gcc, libc6-dev\): .* \[optional\]/);
    assert.match(r.stdout, /setup \(serve\): 0 of 1 prerequisites present \(\d+ ms\); without a C compiler/);
  });

  it('kubernetes: stops on a missing openssl before building anything, naming its package', () => {
    const cache = mkdtempSync(join(tmpdir(), 'nereid-setup-cache-'));
    dirs.push(cache);
    const r = setup(['kubernetes'], { PATH: pathWith({ node: process.execPath, 'apt-get': '/usr/bin/apt-get' }), NEREID_SETUP: 'check', NEREID_CACHE_DIR: cache });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /setup \(kubernetes\): missing, and not installed here \(NEREID_SETUP=check\):/);
    assert.match(r.stderr, /- openssl \(Debian: openssl\): the Kubernetes tier's harness makes each test cluster's CA/);
    assert.ok(r.stderr.includes('apt-get install -y --no-install-recommends openssl'), r.stderr);
    assert.deepEqual(readdirSync(cache), []);
  });

  it('on a machine missing packages and servers, installs the packages first, then builds the servers', () => {
    // An apt-get that "installs" openssl and the C compiler by linking the real ones beside itself,
    // and a sudo that runs its command (used only when not root); the servers' build then fails at
    // once (no Go on PATH, an unreachable module proxy), which is the step after the packages.
    const path = pathWith({ node: process.execPath, env: '/usr/bin/env', prometheus: '/usr/bin/prometheus' });
    writeFileSync(join(path, 'apt-get'), `#!/bin/sh\nif [ "$1" = install ]; then /bin/ln -sf /usr/bin/openssl /usr/bin/cc "$(/usr/bin/dirname "$0")"; fi\nexit 0\n`, { mode: 0o755 });
    writeFileSync(join(path, 'sudo'), '#!/bin/sh\n[ "$1" = -n ] && shift\nexec "$@"\n', { mode: 0o755 });
    const cache = mkdtempSync(join(tmpdir(), 'nereid-setup-cache-'));
    dirs.push(cache);
    const r = setup(['kubernetes'], { PATH: path, NEREID_CACHE_DIR: cache, GOPROXY: 'http://127.0.0.1:9' });
    assert.equal(r.code, 1, r.stderr);
    assert.match(r.stdout, /setup \(kubernetes\): installing with apt-get: openssl gcc libc6-dev\n/);
    assert.match(r.stdout, /setup \(kubernetes\): building kube-apiserver, kube-controller-manager, etcd, weed \(SeaweedFS\) and helm/);
    assert.match(r.stderr, /setup: building kube-apiserver, .* failed \(see above\); the command was: node scripts\/fleet-infra\.mjs build kube-apiserver/);
    assert.doesNotMatch(r.stderr, /still missing after the install/);
  });

  it('kubernetes: in check mode names the build of the missing servers and builds nothing', () => {
    const cache = mkdtempSync(join(tmpdir(), 'nereid-setup-cache-'));
    dirs.push(cache);
    const r = setup(['kubernetes'], { NEREID_SETUP: 'check', NEREID_CACHE_DIR: cache });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /setup \(kubernetes\): missing, and not built here \(NEREID_SETUP=check\):\n {2}- kube-apiserver, kube-controller-manager, etcd, weed \(SeaweedFS\) and helm, built from the Go module proxy into .*nereid-setup-cache-.*\/fleet: /);
    assert.ok(r.stderr.endsWith('Run:\n  node scripts/fleet-infra.mjs build kube-apiserver kube-controller-manager etcd weed helm\n'), r.stderr);
    assert.deepEqual(readdirSync(cache), []);
  });

  it('test: in check mode names the build of a missing Jaeger and builds nothing', () => {
    const cache = mkdtempSync(join(tmpdir(), 'nereid-setup-cache-'));
    dirs.push(cache);
    const r = setup(['test'], { NEREID_SETUP: 'check', NEREID_CACHE_DIR: cache });
    assert.equal(r.code, 1);
    assert.match(r.stderr, /setup \(test\): missing, and not built here \(NEREID_SETUP=check\):\n {2}- jaeger \(github\.com\/jaegertracing\/jaeger v1\.75\.0, cmd\/jaeger\), built from the Go module proxy into .*nereid-setup-cache-.*\/fleet: the OpenTelemetry tracing tests/);
    assert.ok(r.stderr.endsWith('Run:\n  node scripts/fleet-infra.mjs build jaeger\n'), r.stderr);
    assert.deepEqual(readdirSync(cache), []);
  });

  it('runtimes: finds the runtimes environment up to date with its pinned requirements and importing TensorFlow and OpenVINO', () => {
    const r = setup(['runtimes', '--check']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.stdout, /^setup \(runtimes\): 1 of 1 prerequisites present \(\d+ ms\)\n$/);
    assert.equal(r.stderr, '');
  });

  it('refuses an unknown profile or NEREID_SETUP value, and does nothing with NEREID_SETUP=skip', () => {
    const unknown = setup(['everything']);
    assert.equal(unknown.code, 1);
    assert.match(unknown.stderr, /usage: node scripts\/setup\.mjs <serve\|test\|corpus\|conformance\|kubernetes\|bench\|runtimes> \[--check\]/);
    const bad = setup(['test'], { NEREID_SETUP: 'maybe' });
    assert.equal(bad.code, 1);
    assert.match(bad.stderr, /NEREID_SETUP must be 'check' or 'skip', got 'maybe'/);
    const skipped = setup(['test'], { PATH: pathWith({ node: process.execPath }), NEREID_SETUP: 'skip' });
    assert.deepEqual([skipped.code, skipped.stdout, skipped.stderr], [0, '', '']);
  });
});
