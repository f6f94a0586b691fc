#!/usr/bin/env node
// The project's one setup step: checks what a command needs from the system and installs what is
// missing, before that command runs. `npm test`, `npm run serve`, `npm run test:conformance`,
// `npm run test:corpus`, `npm run test:kubernetes` and `npm run bench` call it with their profile;
// .ci/run has no install logic of its own.
//
//   node scripts/setup.mjs <profile> [--check]
//
// Profiles: serve, test, corpus, conformance, kubernetes, bench, runtimes (docs/testing.md lists what each needs, and
// why). Debian packages are installed with apt-get when the user is root or has passwordless sudo;
// PyPI packages go into the project's virtual environments (.venv-conformance for Triton's clients and
// tools, .venv-runtimes for the TensorFlow and OpenVINO runtimes). Where it cannot
// install, it stops (exit 1) before the command runs and prints the exact command that would.
// The kubernetes profile also builds the tier's real servers (kube-apiserver, etcd, …) from the Go
// module proxy into ~/.cache/nereid/fleet, through scripts/fleet-infra.mjs, when any is missing;
// the test profile builds Jaeger there the same way, for the OpenTelemetry tracing tests.
// When everything is present it only checks: one short Python probe and a few file lookups,
// well under a second, and it says so in one line.
//
// NEREID_SETUP=check: never install, only report and stop on what is missing (as --check does).
// NEREID_SETUP=skip: do nothing (the tests then fail, each naming what it lacks).
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { createHash } from 'node:crypto';
import { homedir } from 'node:os';
import { delimiter, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
/** The interpreter the Python and PyTorch backends run models with, and its Debian packages. */
const PYTHON = '/usr/bin/python3';
const VENV = join(root, '.venv-conformance');
const REQUIREMENTS = join(root, 'test', 'conformance', 'requirements.txt');
/**
 * The framework runtimes' environment (TensorFlow, OpenVINO from PyPI, pinned): its interpreter runs
 * the stubs of tensorflow and openvino models (packages/server/src/backends/python/framework-backends.ts).
 */
const RUNTIMES_VENV = join(root, '.venv-runtimes');
const RUNTIMES_REQUIREMENTS = join(root, 'packages', 'server', 'python', 'runtimes-requirements.txt');
/**
 * Real Triton, the reference of the differential test: the server and Python backend that the
 * nvidia-pytriton wheel bundles, unpacked into an ignored cache directory (never shipped).
 */
const TRITON_WHEEL = 'nvidia-pytriton==0.7.0';
const TRITON_CACHE = join(root, '.cache', 'triton');
const TRITON_DIR = join(TRITON_CACHE, 'nvidia-pytriton-0.7.0');
/** The Kubernetes tier's Go-built servers: the script that builds them, and its cache. */
const FLEET = join(root, 'scripts', 'fleet-infra.mjs');
const FLEET_CACHE = join(process.env.NEREID_CACHE_DIR ?? join(homedir(), '.cache', 'nereid'), 'fleet');
/** The Kubernetes tier's servers among the binaries fleet-infra.mjs builds (jaeger is the test tier's). */
const FLEET_SERVERS = ['kube-apiserver', 'kube-controller-manager', 'etcd', 'weed', 'helm'];
const started = process.hrtime.bigint();

/**
 * @typedef {object} Need
 * @property {string} what         what must be present, as a user would look for it
 * @property {string[]} debian     the Debian packages that provide it
 * @property {string} why          what uses it
 * @property {() => boolean} present
 * @property {boolean} [optional]  a missing optional need is installed when possible, else only reported
 * @property {boolean} [service]   the package brings a service that must not start on install
 */

/** True when `name` is an executable file on PATH. */
function onPath(name) {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir === '') continue;
    try {
      accessSync(join(dir, name), constants.X_OK);
      return true;
    } catch {
      // not in this directory
    }
  }
  return false;
}

/** True when some `/usr/lib/<multiarch>/<name>` exists (a shared library or a library directory). */
function inLibDirs(name) {
  for (const base of ['/usr/lib', '/lib']) {
    if (!existsSync(base)) continue;
    if (existsSync(join(base, name))) return true;
    for (const dir of readdirSync(base)) {
      if (dir.includes('-linux-') && existsSync(join(base, dir, name))) return true;
    }
  }
  return false;
}

/**
 * The Python modules of `PYTHON` that cannot be found, probed once per check for every module any
 * need names: `importlib.util.find_spec` locates a module without importing it (importing torch
 * alone takes seconds).
 */
let pythonProbe;
function pythonMissing(modules) {
  if (pythonProbe === undefined) {
    const all = [...new Set(NEEDS.flatMap((n) => n.modules ?? []))];
    if (!existsSync(PYTHON)) pythonProbe = new Set(all);
    else {
      const probe =
        'import importlib.util, sys\n' +
        'for m in sys.argv[1:]:\n' +
        '    try:\n' +
        '        found = importlib.util.find_spec(m) is not None\n' +
        '    except Exception:\n' +
        '        found = False\n' +
        '    if not found: print(m)\n';
      const r = spawnSync(PYTHON, ['-c', probe, ...all], { encoding: 'utf8' });
      pythonProbe = r.status === 0 ? new Set(r.stdout.split('\n').filter(Boolean)) : new Set(all);
    }
  }
  return modules.filter((m) => pythonProbe.has(m));
}

const python = (...modules) => ({ modules, present: () => pythonMissing(modules).length === 0 });

/** Everything any profile needs, by name. */
const NEEDS = [
  {
    name: 'numpy',
    what: `${PYTHON} with numpy`,
    debian: ['python3-numpy'],
    why: 'the Python backend (model.py) runs models with it; its tests and the python-overhead benchmark',
    ...python('numpy'),
  },
  {
    name: 'torch',
    what: `${PYTHON} with torch (libtorch)`,
    debian: ['python3-torch'],
    why: 'the PyTorch backend (TorchScript model.pt) and its tests',
    ...python('torch'),
  },
  {
    name: 'openblas',
    what: 'OpenBLAS (pthread build)',
    debian: ['libopenblas0-pthread'],
    why: "torch's and numpy's CPU matrix products (the reference BLAS is about 30 times slower)",
    present: () => inLibDirs('openblas-pthread'),
  },
  {
    name: 'grpc',
    what: `${PYTHON} with grpcio and grpc_tools`,
    debian: ['python3-grpcio', 'python3-grpc-tools'],
    why: 'the gRPC tests drive the server with an independent client generated from the .proto files, and compile model_config.proto for the config-parser tests',
    ...python('grpc', 'grpc_tools'),
  },
  {
    name: 'protobuf',
    what: `${PYTHON} with google.protobuf`,
    debian: ['python3-protobuf'],
    why: "the config-parser tests compare Nereid's parser with protobuf's reference text-format parser",
    ...python('google.protobuf'),
  },
  {
    name: 'pil',
    what: `${PYTHON} with PIL and the DejaVu fonts`,
    debian: ['python3-pil', 'fonts-dejavu-core'],
    why: 'the OCR example test renders its input images',
    modules: ['PIL'],
    present: () => pythonMissing(['PIL']).length === 0 && existsSync('/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf'),
  },
  {
    name: 'espeak-ng',
    what: 'espeak-ng',
    debian: ['espeak-ng'],
    why: 'the speech-detection example test speaks its input',
    present: () => onPath('espeak-ng'),
  },
  {
    name: 'promtool',
    what: 'promtool',
    debian: ['prometheus'],
    why: 'the metrics tests check the exposition text with `promtool check metrics`',
    present: () => onPath('promtool'),
    service: true,
  },
  {
    name: 'prometheus',
    what: 'prometheus',
    debian: ['prometheus'],
    why: 'the autoscaling and canary tests scrape the pods with a real Prometheus',
    present: () => onPath('prometheus'),
    service: true,
  },
  {
    name: 'redis-server',
    what: 'redis-server',
    debian: ['redis-server'],
    why: "the Redis response-cache tests run Nereid's redis cache against a real Redis server they start",
    present: () => onPath('redis-server'),
    service: true,
  },
  {
    name: 'chromium',
    what: 'chromium (headless)',
    debian: ['chromium'],
    why: "the analyze report test draws the HTML report in a headless browser and checks its charts' pixels",
    present: () => onPath('chromium'),
  },
  {
    name: 'cc',
    what: 'a C compiler (cc) and the C library headers',
    debian: ['gcc', 'libc6-dev'],
    why: "the build compiles the server's native addon (memory-mapped shared memory)",
    present: () => onPath('cc') && existsSync('/usr/include/stdio.h'),
  },
  {
    name: 'venv',
    what: `${PYTHON} with venv and ensurepip`,
    debian: ['python3-venv'],
    why: "the conformance tier's virtual environment of Triton's own clients and tools",
    ...python('venv', 'ensurepip'),
  },
  {
    name: 'openssl',
    what: 'openssl',
    debian: ['openssl'],
    why: "the Kubernetes tier's harness makes each test cluster's CA, serving and client certificates with it",
    present: () => onPath('openssl'),
  },
  {
    name: 'ca-certificates',
    what: 'the CA certificates (/etc/ssl/certs/ca-certificates.crt)',
    debian: ['ca-certificates'],
    why: "the Go toolchain and modules of the Kubernetes tier's servers are fetched over HTTPS from the Go module proxy",
    present: () => existsSync('/etc/ssl/certs/ca-certificates.crt'),
  },
  {
    name: 'python3',
    what: PYTHON,
    debian: ['python3'],
    why: 'scripts/fleet-infra.mjs unpacks the Go toolchain it fetches with it',
    present: () => existsSync(PYTHON),
  },
  {
    name: 'fleet',
    what: `kube-apiserver, kube-controller-manager, etcd, weed (SeaweedFS) and helm, built from the Go module proxy into ${FLEET_CACHE}`,
    debian: [],
    build: [process.execPath, FLEET, 'build', ...FLEET_SERVERS],
    why: 'the Kubernetes tier runs them as real servers (a first build takes about 10 minutes and 9.5 GB of disk)',
    present: () => spawnSync(process.execPath, [FLEET, 'check', ...FLEET_SERVERS], { stdio: 'ignore' }).status === 0,
  },
  {
    name: 'jaeger',
    what: `jaeger (github.com/jaegertracing/jaeger v1.75.0, cmd/jaeger), built from the Go module proxy into ${FLEET_CACHE}`,
    debian: [],
    build: [process.execPath, FLEET, 'build', 'jaeger'],
    why: 'the OpenTelemetry tracing tests (and their comparison with real Triton in the conformance tier) export spans to a real Jaeger and query them back (a first build takes about 9 minutes on 2 cores)',
    present: () => spawnSync(process.execPath, [FLEET, 'check', 'jaeger'], { stdio: 'ignore' }).status === 0,
  },
  {
    name: 'libb64',
    what: 'libb64.so.0d',
    debian: ['libb64-0d'],
    why: 'the perf_analyzer binary of the tritonclient wheel links it',
    present: () => inLibDirs('libb64.so.0d'),
  },
];

/** Each profile's needs; a name with a `?` is optional (installed when possible, else reported). */
const PROFILES = {
  serve: ['cc?'],
  // jaeger is built last: building it needs the CA certificates and, without a recent Go, python3.
  test: ['numpy', 'torch', 'openblas', 'grpc', 'protobuf', 'pil', 'espeak-ng', 'promtool', 'redis-server', 'chromium', 'cc', 'venv', 'ca-certificates', 'python3', 'jaeger'],
  corpus: ['grpc', 'protobuf'],
  conformance: ['numpy', 'venv', 'libb64', 'cc', 'ca-certificates', 'python3', 'jaeger'],
  // The Debian needs first: building the servers needs them.
  kubernetes: ['openssl', 'ca-certificates', 'python3', 'cc?', 'fleet', 'prometheus'],
  bench: ['numpy', 'venv', 'libb64', 'cc'],
  // The TensorFlow and OpenVINO runtimes (PyPI) in .venv-runtimes; the test and bench profiles make it too.
  runtimes: ['venv'],
};

function fail(message) {
  process.stderr.write(`setup: ${message}\n`);
  process.exit(1);
}

const args = process.argv.slice(2);
const profile = args.find((a) => !a.startsWith('--'));
const mode = args.includes('--check') ? 'check' : (process.env.NEREID_SETUP ?? 'install');
if (profile === undefined || !(profile in PROFILES)) {
  fail(`usage: node scripts/setup.mjs <${Object.keys(PROFILES).join('|')}> [--check]`);
}
if (!['install', 'check', 'skip'].includes(mode)) fail(`NEREID_SETUP must be 'check' or 'skip', got '${mode}'`);
if (mode === 'skip') process.exit(0);

const wanted = PROFILES[profile].map((entry) => {
  const optional = entry.endsWith('?');
  const need = NEEDS.find((n) => n.name === entry.replace(/\?$/, ''));
  return { ...need, optional };
});
/** The needs of `needs` that are not present now (a fresh look at the system). */
function absent(needs) {
  pythonProbe = undefined;
  return needs.filter((n) => !n.present());
}

/** Needs that a project script builds (no Debian package): handled after the packages. */
const built = wanted.filter((n) => n.build !== undefined);
let missing = absent(wanted.filter((n) => n.build === undefined));

/** How to run a command as root here: directly, with passwordless sudo, or not at all. */
function rootRunner() {
  if (process.getuid?.() === 0) return [];
  if (onPath('sudo') && spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0) return ['sudo', '-n'];
  return undefined;
}

function run(command) {
  const r = spawnSync(command[0], command.slice(1), { stdio: 'inherit' });
  if (r.error) process.stderr.write(`setup: ${command.join(' ')} could not run: ${r.error.message}\n`);
  return r.status ?? 1;
}

function installCommand(packages) {
  return `apt-get update && apt-get install -y --no-install-recommends ${packages.join(' ')}`;
}

if (missing.length > 0) {
  const packages = [...new Set(missing.flatMap((n) => n.debian))];
  const list = missing.map((n) => `  - ${n.what} (Debian: ${n.debian.join(', ')}): ${n.why}${n.optional ? ' [optional]' : ''}`).join('\n');
  const asRoot = mode === 'install' && onPath('apt-get') ? rootRunner() : undefined;
  if (asRoot === undefined) {
    const required = missing.filter((n) => !n.optional);
    const how = onPath('apt-get')
      ? `Run as root:\n  ${asRootText(installCommand(packages))}`
      : `This system has no apt-get: install the equivalents of these Debian packages with its package manager: ${packages.join(' ')}`;
    const why = mode === 'check' ? 'NEREID_SETUP=check' : onPath('apt-get') ? 'not root and no passwordless sudo' : 'no apt-get';
    process.stderr.write(`setup (${profile}): missing, and not installed here (${why}):\n${list}\n${how}\n`);
    if (required.length > 0) process.exit(1);
  } else {
    process.stdout.write(`setup (${profile}): installing with apt-get: ${packages.join(' ')}\n${list}\n`);
    const env = ['env', 'DEBIAN_FRONTEND=noninteractive'];
    // A package with a service (prometheus) must not start it: a policy-rc.d that refuses, unless
    // the system has its own.
    const policy = '/usr/sbin/policy-rc.d';
    const ownPolicy = missing.some((n) => n.service) && !existsSync(policy);
    if (ownPolicy) run([...asRoot, 'sh', '-c', `printf '#!/bin/sh\\nexit 101\\n' > ${policy} && chmod +x ${policy}`]);
    // `fail` exits at once, so the policy is removed before any failure is reported.
    const updated = run([...asRoot, ...env, 'apt-get', 'update', '-q']) === 0;
    const installed = updated && run([...asRoot, ...env, 'apt-get', 'install', '-y', '-q', '--no-install-recommends', ...packages]) === 0;
    if (ownPolicy) run([...asRoot, 'rm', '-f', policy]);
    if (!updated) fail('apt-get update failed (see above)');
    if (!installed) fail(`apt-get install failed (see above); the command was: ${asRootText(installCommand(packages))}`);
    // The needs a project script builds come next (below); only the packages' needs count here.
    missing = absent(wanted.filter((n) => n.build === undefined));
    if (missing.length > 0) {
      fail(`still missing after the install: ${missing.map((n) => n.what).join('; ')}`);
    }
  }
}

/** `command` as the user would type it: with sudo where sudo is installed and they are not root. */
function asRootText(command) {
  const sudo = process.getuid?.() !== 0 && onPath('sudo');
  return sudo ? command.replace(/(^|&& )apt-get/g, '$1sudo apt-get') : command;
}

for (const need of absent(built)) {
  const command = need.build.map((a) => (a === process.execPath ? 'node' : a.startsWith(root) ? a.slice(root.length) : a)).join(' ');
  if (mode === 'check') {
    process.stderr.write(`setup (${profile}): missing, and not built here (NEREID_SETUP=check):\n  - ${need.what}: ${need.why}\nRun:\n  ${command}\n`);
    process.exit(1);
  }
  process.stdout.write(`setup (${profile}): building ${need.what}\n`);
  if (run(need.build) !== 0 || !need.present()) fail(`building ${need.what} failed (see above); the command was: ${command}`);
}
missing = [...missing, ...absent(built)];

if (profile === 'conformance') conformanceEnvironment();
if (profile === 'runtimes' || profile === 'test') runtimesEnvironment();
// The vs-triton benchmark runs real Triton and perf_analyzer: the conformance environment, made by
// a child run so that a failure (no PyPI, say) leaves the other benchmarks to run; vs-triton then
// prints why it skips.
if (profile === 'bench' && mode !== 'check') {
  const child = spawnSync(process.execPath, [fileURLToPath(import.meta.url), 'conformance'], { stdio: 'inherit' });
  if (child.status !== 0) process.stdout.write('setup (bench): real Triton or perf_analyzer could not be set up (see above); the vs-triton benchmark will say it skips\n');
  const runtimes = spawnSync(process.execPath, [fileURLToPath(import.meta.url), 'runtimes'], { stdio: 'inherit' });
  if (runtimes.status !== 0) process.stdout.write('setup (bench): the TensorFlow and OpenVINO runtimes could not be set up (see above); the frameworks benchmark will say it skips\n');
}

const ms = Number((process.hrtime.bigint() - started) / 1_000_000n);
const optionalMissing = missing.filter((n) => n.optional);
process.stdout.write(
  `setup (${profile}): ${wanted.length - optionalMissing.length} of ${wanted.length} prerequisites present (${ms} ms)` +
    (optionalMissing.length > 0 ? `; without ${optionalMissing.map((n) => n.what).join(', ')}` : '') +
    '\n',
);

/**
 * A virtual environment `venv` of `requirements` (pinned PyPI packages), made again when the
 * requirements file changes (a stamp in it holds the file's hash).
 */
function pinnedEnvironment(venv, requirements, label) {
  const stamp = join(venv, '.requirements.sha256');
  const want = createHash('sha256').update(readFileSync(requirements)).digest('hex');
  if (existsSync(stamp) && readFileSync(stamp, 'utf8').trim() === want) return;
  const file = requirements.slice(root.length);
  if (mode === 'check') fail(`${venv} is missing or out of date; run: node scripts/setup.mjs ${label}`);
  process.stdout.write(`setup (${profile}): creating ${venv} from ${file} (PyPI)\n`);
  rmSync(venv, { recursive: true, force: true });
  if (run([PYTHON, '-m', 'venv', venv]) !== 0) fail(`${PYTHON} -m venv ${venv} failed (see above)`);
  const pip = [join(venv, 'bin', 'pip'), 'install', '--quiet', '--disable-pip-version-check', '--no-input', '-r', requirements];
  if (run(pip) !== 0) fail(`installing ${file} into ${venv} failed (see above); the command was: ${pip.join(' ')}`);
  writeFileSync(stamp, `${want}\n`);
}

/**
 * The framework runtimes' environment, `.venv-runtimes`: TensorFlow and OpenVINO for the
 * tensorflow and openvino backends, checked by importing both once it is made.
 */
function runtimesEnvironment() {
  pinnedEnvironment(RUNTIMES_VENV, RUNTIMES_REQUIREMENTS, 'runtimes');
  const python = join(RUNTIMES_VENV, 'bin', 'python3');
  const probe = spawnSync(python, ['-c', 'import importlib.util, sys\nfor m in ("tensorflow", "openvino", "numpy"):\n    if importlib.util.find_spec(m) is None: print(m)\n'], { encoding: 'utf8' });
  const lacking = probe.status === 0 ? probe.stdout.split('\n').filter(Boolean) : [`(${python} cannot run: ${(probe.error?.message ?? probe.stderr).trim()})`];
  if (lacking.length > 0) fail(`${RUNTIMES_VENV} lacks ${lacking.join(', ')}; remove it and run: node scripts/setup.mjs runtimes`);
}

/**
 * The conformance tier's virtual environment, `.venv-conformance`, with the pinned packages of
 * test/conformance/requirements.txt (Triton's own clients and tools from PyPI). Rebuilt when the
 * requirements file changes (a stamp holds its hash); checks that perf_analyzer starts.
 */
function conformanceEnvironment() {
  pinnedEnvironment(VENV, REQUIREMENTS, 'conformance');
  // perf_analyzer links libcudart.so.12 from the CUDA runtime wheel, even for CPU-only use.
  const lib = join(VENV, 'lib');
  const pythonDir = readdirSync(lib).find((d) => d.startsWith('python3'));
  const cudart = join(lib, pythonDir ?? 'python3', 'site-packages', 'nvidia', 'cuda_runtime', 'lib');
  const perf = spawnSync(join(VENV, 'bin', 'perf_analyzer'), ['--help'], {
    encoding: 'utf8',
    env: { ...process.env, LD_LIBRARY_PATH: cudart },
  });
  if (!`${perf.stdout}${perf.stderr}`.includes('Usage:')) {
    fail(
      `${join(VENV, 'bin', 'perf_analyzer')} cannot start: ${(perf.error?.message ?? perf.stderr).trim().split('\n').slice(0, 5).join(' | ')}\n` +
        'See docs/compatibility.md (Tool versions) for the versions known to run on Debian 12.',
    );
  }
  tritonReference();
}

/**
 * Real Triton for the differential test (test/conformance/differential): the wheel of
 * `TRITON_WHEEL` downloaded with the venv's pip (no dependencies) and unpacked into
 * `.cache/triton/` with Python's zipfile, which drops the executable bits, so the server and the
 * Python backend stubs are made executable again. A stamp marks a complete unpack; the check that
 * the server starts (`--help`) runs every time.
 */
function tritonReference() {
  const stamp = join(TRITON_DIR, '.complete');
  const server = join(TRITON_DIR, 'pytriton', 'tritonserver', 'bin', 'tritonserver');
  if (!existsSync(stamp) || readFileSync(stamp, 'utf8').trim() !== TRITON_WHEEL) {
    if (mode === 'check') fail(`real Triton (${TRITON_WHEEL}) is not unpacked in ${TRITON_CACHE}; run: node scripts/setup.mjs conformance`);
    process.stdout.write(`setup (conformance): downloading ${TRITON_WHEEL} (real Triton, 55 MB) from PyPI into ${TRITON_CACHE}\n`);
    rmSync(TRITON_CACHE, { recursive: true, force: true });
    const download = join(TRITON_CACHE, 'wheel');
    const pip = [join(VENV, 'bin', 'pip'), 'download', '--quiet', '--disable-pip-version-check', '--no-input', '--no-deps', TRITON_WHEEL, '-d', download];
    if (run(pip) !== 0) fail(`downloading ${TRITON_WHEEL} failed (see above); the command was: ${pip.join(' ')}`);
    const wheel = readdirSync(download).find((f) => f.endsWith('.whl'));
    if (wheel === undefined) fail(`${pip.join(' ')} left no wheel in ${download}`);
    const unpack =
      'import os, stat, sys, zipfile\n' +
      'wheel, dest = sys.argv[1], sys.argv[2]\n' +
      'zipfile.ZipFile(wheel).extractall(dest)\n' +
      "base = os.path.join(dest, 'pytriton', 'tritonserver')\n" +
      "paths = [os.path.join(base, 'bin', 'tritonserver')]\n" +
      "stubs = os.path.join(base, 'python_backend_stubs')\n" +
      'for version in os.listdir(stubs):\n' +
      "    paths.append(os.path.join(stubs, version, 'triton_python_backend_stub'))\n" +
      'for p in paths:\n' +
      '    os.chmod(p, os.stat(p).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)\n';
    if (run([PYTHON, '-c', unpack, join(download, wheel), TRITON_DIR]) !== 0) fail(`unpacking ${join(download, wheel)} into ${TRITON_DIR} failed (see above)`);
    rmSync(download, { recursive: true, force: true });
    writeFileSync(stamp, `${TRITON_WHEEL}\n`);
  }
  const help = spawnSync(server, ['--help'], {
    encoding: 'utf8',
    env: { ...process.env, LD_LIBRARY_PATH: join(TRITON_DIR, 'nvidia_pytriton.libs') },
  });
  if (!`${help.stdout}${help.stderr}`.includes('--model-repository')) {
    fail(
      `${server} cannot start: ${(help.error?.message ?? help.stderr).trim().split('\n').slice(0, 5).join(' | ')}\n` +
        `Remove ${TRITON_CACHE} and run node scripts/setup.mjs conformance again.`,
    );
  }
}
