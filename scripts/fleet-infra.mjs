#!/usr/bin/env node
// The real servers that the Kubernetes tier runs against, built from the Go module proxy on first
// use and cached outside the repository (never committed, never shipped):
//
//   kube-apiserver, kube-controller-manager   k8s.io/kubernetes v1.37.2 (through a wrapper module)
//   etcd                                      go.etcd.io/etcd/server/v3 v3.6.17
//   weed (SeaweedFS, the S3 server)           github.com/seaweedfs/seaweedfs
//   helm                                      helm.sh/helm/v4 v4.3.2
//   jaeger (the trace backend of the tracing tests)  github.com/jaegertracing/jaeger v1.75.0
//
//   node scripts/fleet-infra.mjs build [name ...]   build what is missing (all when no name)
//   node scripts/fleet-infra.mjs path <name>        print a built binary's path (exit 1 if absent)
//   node scripts/fleet-infra.mjs check [name ...]   exit 1 when anything (of those named) is missing
//
// The cache is $NEREID_CACHE_DIR/fleet, or ~/.cache/nereid/fleet. A binary's file name carries its
// version, so a version change here builds anew. The Go toolchain is the `go` on PATH when it is
// recent enough, else the one the Go module proxy serves (golang.org/toolchain), fetched into the
// cache: a machine with only Node and Debian can build these.
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

const CACHE = join(process.env.NEREID_CACHE_DIR ?? join(homedir(), '.cache', 'nereid'), 'fleet');
const GO_VERSION = '1.26.8';
const PROXY = (process.env.GOPROXY ?? 'https://proxy.golang.org').split(/[,|]/).find((p) => p.startsWith('http')) ?? 'https://proxy.golang.org';
const K8S = '1.37.2';
const ETCD = '3.6.17';
const SEAWEED = 'v0.0.0-20261109003541-7506e5f91cd6';
const HELM = '4.3.2';
// v1.75.0 is the Jaeger v2 binary (an OpenTelemetry Collector distribution) under the v1 module path.
const JAEGER = '1.75.0';

/**
 * What each binary is: the module its wrapper requires, the package it builds (or a main.go of
 * its own), and the linker flags that give it a real version.
 */
const k8sVersionFlags = [
  `-X k8s.io/component-base/version.gitVersion=v${K8S}`,
  `-X k8s.io/component-base/version.gitMajor=${K8S.split('.')[0]}`,
  `-X k8s.io/component-base/version.gitMinor=${K8S.split('.')[1]}`,
  '-X k8s.io/component-base/version.gitTreeState=clean',
].join(' ');
const BINARIES = {
  'kube-apiserver': { version: K8S, module: 'k8s.io/kubernetes', moduleVersion: `v${K8S}`, pkg: 'k8s.io/kubernetes/cmd/kube-apiserver', ldflags: k8sVersionFlags, wrapper: 'kubernetes' },
  'kube-controller-manager': { version: K8S, module: 'k8s.io/kubernetes', moduleVersion: `v${K8S}`, pkg: 'k8s.io/kubernetes/cmd/kube-controller-manager', ldflags: k8sVersionFlags, wrapper: 'kubernetes' },
  etcd: {
    version: ETCD,
    module: 'go.etcd.io/etcd/server/v3',
    moduleVersion: `v${ETCD}`,
    pkg: '.',
    wrapper: 'etcd',
    main: 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n',
  },
  weed: { version: SEAWEED.split('-').pop(), module: 'github.com/seaweedfs/seaweedfs', moduleVersion: SEAWEED, pkg: 'github.com/seaweedfs/seaweedfs/weed', wrapper: 'seaweedfs' },
  helm: { version: HELM, module: 'helm.sh/helm/v4', moduleVersion: `v${HELM}`, pkg: 'helm.sh/helm/v4/cmd/helm', ldflags: `-X helm.sh/helm/v4/internal/version.version=v${HELM}`, wrapper: 'helm' },
  jaeger: { version: JAEGER, module: 'github.com/jaegertracing/jaeger', moduleVersion: `v${JAEGER}`, pkg: 'github.com/jaegertracing/jaeger/cmd/jaeger', wrapper: 'jaeger' },
};

export function binaryPath(name) {
  const b = BINARIES[name];
  if (b === undefined) throw new Error(`unknown binary '${name}' (known: ${Object.keys(BINARIES).join(', ')})`);
  return join(CACHE, 'bin', `${name}-${b.version}`);
}

function log(line) {
  process.stdout.write(`fleet-infra: ${line}\n`);
}

function fail(line) {
  process.stderr.write(`fleet-infra: ${line}\n`);
  process.exit(1);
}

function run(cmd, args, options) {
  const r = spawnSync(cmd, args, { stdio: ['ignore', 'inherit', 'inherit'], ...options });
  if (r.error) fail(`${cmd} ${args.join(' ')}: ${r.error.message}`);
  if (r.status !== 0) fail(`${cmd} ${args.join(' ')} failed (exit ${r.status}) in ${options?.cwd ?? process.cwd()}`);
}

/** `go version` of a go binary as [major, minor, patch], or undefined. */
function goVersionOf(go) {
  const r = spawnSync(go, ['env', 'GOVERSION'], { encoding: 'utf8', env: { ...process.env, GOTOOLCHAIN: 'local' } });
  const m = r.status === 0 ? /^go(\d+)\.(\d+)(?:\.(\d+))?/.exec(r.stdout.trim()) : null;
  return m ? [Number(m[1]), Number(m[2]), Number(m[3] ?? 0)] : undefined;
}

/** A go command of at least GO_VERSION: the one on PATH, or the module proxy's toolchain, cached. */
function goCommand() {
  const want = GO_VERSION.split('.').map(Number);
  const have = goVersionOf('go');
  if (have && (have[0] > want[0] || (have[0] === want[0] && (have[1] > want[1] || (have[1] === want[1] && have[2] >= want[2]))))) return 'go';
  const dir = join(CACHE, `go${GO_VERSION}`);
  const go = join(dir, 'bin', 'go');
  if (existsSync(go)) return go;
  const arch = { x64: 'amd64', arm64: 'arm64' }[process.arch];
  if (arch === undefined || process.platform !== 'linux') fail(`no Go ${GO_VERSION} here, and the toolchain is only fetched for Linux amd64/arm64`);
  const url = `${PROXY}/golang.org/toolchain/@v/v0.0.1-go${GO_VERSION}.linux-${arch}.zip`;
  log(`Go ${GO_VERSION} not on PATH; fetching the toolchain from ${url}`);
  const zip = join(CACHE, `go${GO_VERSION}.zip`);
  mkdirSync(CACHE, { recursive: true });
  const fetchScript = `const r = await fetch(${JSON.stringify(url)}); if (!r.ok) { console.error('HTTP ' + r.status); process.exit(1); } require('node:fs').writeFileSync(${JSON.stringify(zip)}, Buffer.from(await r.arrayBuffer()));`;
  run(process.execPath, ['--input-type=commonjs', '-e', `(async () => { ${fetchScript} })()`]);
  // The zip holds golang.org/toolchain@v0.0.1-go<version>.linux-<arch>/{bin,pkg,src,...}.
  const unpack = join(CACHE, `go${GO_VERSION}.tmp`);
  rmSync(unpack, { recursive: true, force: true });
  const py = "import sys, zipfile, os, stat\nz = zipfile.ZipFile(sys.argv[1])\nfor i in z.infolist():\n    p = z.extract(i, sys.argv[2])\n    mode = (i.external_attr >> 16) & 0o777\n    if mode: os.chmod(p, mode)\n";
  run('python3', ['-c', py, zip, unpack]);
  const inner = join(unpack, `golang.org`, `toolchain@v0.0.1-go${GO_VERSION}.linux-${arch}`);
  renameSync(inner, dir);
  rmSync(unpack, { recursive: true, force: true });
  rmSync(zip, { force: true });
  return go;
}

/** Writes a wrapper module for `b` (once per wrapper) and returns its directory. */
function wrapper(go, b, env) {
  const dir = join(CACHE, 'src', b.wrapper);
  const stamp = join(dir, '.ready');
  if (existsSync(stamp) && readFileSync(stamp, 'utf8') === b.moduleVersion) return dir;
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, 'go.mod'), `module nereid.local/fleet/${b.wrapper}\n\ngo ${GO_VERSION.split('.').slice(0, 2).join('.')}\n`);
  if (b.main) writeFileSync(join(dir, 'main.go'), b.main);
  else writeFileSync(join(dir, 'tools.go'), `//go:build tools\n\npackage tools\n\nimport _ "${b.pkg}"\n`);
  if (b.wrapper === 'kubernetes') {
    // k8s.io/kubernetes names its staging modules at v0.0.0; each is served at v0.<minor>.<patch>.
    run(go, ['mod', 'download', `${b.module}@${b.moduleVersion}`], { cwd: dir, env });
    const r = spawnSync(go, ['mod', 'download', '-json', `${b.module}@${b.moduleVersion}`], { cwd: dir, env, encoding: 'utf8' });
    const gomod = readFileSync(JSON.parse(r.stdout).GoMod, 'utf8');
    const staging = [...gomod.matchAll(/^\s+(k8s\.io\/[A-Za-z0-9._-]+) v0\.0\.0$/gm)].map((m) => m[1]);
    const stagingVersion = `v0.${K8S.split('.').slice(1).join('.')}`;
    const replaces = staging.map((m) => `\t${m} => ${m} ${stagingVersion}`).join('\n');
    writeFileSync(join(dir, 'go.mod'), `${readFileSync(join(dir, 'go.mod'), 'utf8')}\nreplace (\n${replaces}\n)\n`);
  }
  run(go, ['get', `${b.module}@${b.moduleVersion}`], { cwd: dir, env });
  run(go, ['mod', 'tidy'], { cwd: dir, env });
  writeFileSync(stamp, b.moduleVersion);
  return dir;
}

function build(name) {
  const out = binaryPath(name);
  if (existsSync(out)) {
    log(`${name}: ${out} (cached)`);
    return;
  }
  const b = BINARIES[name];
  const go = goCommand();
  const env = { ...process.env, GOTOOLCHAIN: 'local', GOFLAGS: '-mod=mod', CGO_ENABLED: '0' };
  const started = Date.now();
  log(`${name}: building ${b.pkg === '.' ? b.module : b.pkg} ${b.moduleVersion} (minutes on first use)`);
  const dir = wrapper(go, b, env);
  mkdirSync(join(CACHE, 'bin'), { recursive: true });
  const tmp = `${out}.tmp`;
  const ldflags = ['-s', '-w', b.ldflags].filter(Boolean).join(' ');
  run(go, ['build', '-trimpath', '-ldflags', ldflags, '-o', tmp, b.pkg], { cwd: dir, env });
  chmodSync(tmp, 0o755);
  renameSync(tmp, out);
  log(`${name}: built ${out} in ${((Date.now() - started) / 1000).toFixed(0)} s`);
}

const [command, ...names] = process.argv.slice(2);
if (command === 'build') {
  for (const name of names.length > 0 ? names : Object.keys(BINARIES)) {
    if (!(name in BINARIES)) fail(`unknown binary '${name}' (known: ${Object.keys(BINARIES).join(', ')})`);
    build(name);
  }
} else if (command === 'path' && names.length === 1) {
  if (!(names[0] in BINARIES)) fail(`unknown binary '${names[0]}'`);
  const p = binaryPath(names[0]);
  if (!existsSync(p)) fail(`${names[0]} is not built; run: node scripts/fleet-infra.mjs build ${names[0]}`);
  process.stdout.write(`${p}\n`);
} else if (command === 'check') {
  for (const name of names) if (!(name in BINARIES)) fail(`unknown binary '${name}' (known: ${Object.keys(BINARIES).join(', ')})`);
  const missing = (names.length > 0 ? names : Object.keys(BINARIES)).filter((n) => !existsSync(binaryPath(n)));
  if (missing.length > 0) fail(`not built: ${missing.join(', ')}; run: node scripts/fleet-infra.mjs build ${missing.join(' ')}`);
  log(`all built in ${join(CACHE, 'bin')}`);
} else {
  fail('usage: node scripts/fleet-infra.mjs build [name ...] | path <name> | check [name ...]');
}
