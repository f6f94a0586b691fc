/**
 * Real Triton Inference Server 2.51, the reference of the differential test: the server and Python
 * backend of the nvidia-pytriton 0.7.0 wheel, which `node scripts/setup.mjs conformance` unpacks
 * into `.cache/triton/` (a test dependency only, never shipped).
 *
 * `startTriton` runs it on a repository of Python models on 127.0.0.1 ports that were checked
 * free first; `stop` ends it by its PID, then its Python backend stubs (which may outlive it) by
 * theirs, and removes the `/dev/shm` files it left.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { REPO_ROOT } from '../../helpers/cli.js';
import { freePorts } from '../../helpers/processes.js';

export const TRITON_DIR = join(REPO_ROOT, '.cache', 'triton', 'nvidia-pytriton-0.7.0');
const SERVER_DIR = join(TRITON_DIR, 'pytriton', 'tritonserver');
const SERVER = join(SERVER_DIR, 'bin', 'tritonserver');
/** The interpreter that runs the models (Debian 12's, with python3-numpy) and its stub version. */
const PYTHON_BIN_DIR = '/usr/bin';
const STUB_VERSION = '3.11';
const START_LIMIT_MS = 60_000;
const STOP_LIMIT_MS = 15_000;

/** Throws the setup instruction unless the unpacked wheel is there. */
export function requireTriton(): void {
  const stub = join(SERVER_DIR, 'python_backend_stubs', STUB_VERSION, 'triton_python_backend_stub');
  for (const path of [SERVER, stub, join(SERVER_DIR, 'backends', 'python', 'libtriton_python.so')]) {
    if (!existsSync(path)) {
      throw new Error(
        `Real Triton is not unpacked (no ${path}). Run \`node scripts/setup.mjs conformance\` ` +
          '(npm run test:conformance does): it downloads the nvidia-pytriton==0.7.0 wheel from PyPI into .cache/triton/.',
      );
    }
  }
}

/** True when nothing listens on 127.0.0.1:`port`. */
function portIsFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, '127.0.0.1', () => s.close(() => resolve(true)));
  });
}

/** The PIDs whose parent is `pid` (from /proc). */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
      if (ppid === pid) out.push(Number(entry));
    } catch {
      // the process ended meanwhile
    }
  }
  return out;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface TritonServer {
  pid: number;
  endpoints: { http: string; grpc: string; metrics: string };
  /** Its log so far (stdout and stderr), for failure messages. */
  readonly log: string;
  stop(): Promise<void>;
}

/**
 * Starts Triton on `repository` with `args` added (e.g. `--model-control-mode=explicit`) and
 * resolves once `/v2/health/live` answers. Rejects with its log when it exits first or does not
 * come up in time.
 */
export async function startTriton(repository: string, args: readonly string[] = []): Promise<TritonServer> {
  requireTriton();
  const ports = await freePorts(3);
  for (const port of ports) {
    if (!(await portIsFree(port))) throw new Error(`port ${port} is in use; another server on this machine answers there`);
  }
  const [http, grpc, metrics] = ports as [number, number, number];
  const work = mkdtempSync(join(tmpdir(), 'nereid-triton-'));
  const backend = join(work, 'backends', 'python');
  mkdirSync(backend, { recursive: true });
  for (const f of ['libtriton_python.so', 'triton_python_backend_utils.py']) copyFileSync(join(SERVER_DIR, 'backends', 'python', f), join(backend, f));
  copyFileSync(join(SERVER_DIR, 'python_backend_stubs', STUB_VERSION, 'triton_python_backend_stub'), join(backend, 'triton_python_backend_stub'));
  const shmBefore = new Set(readdirSync('/dev/shm'));
  const child: ChildProcess = spawn(
    SERVER,
    [
      `--backend-directory=${join(work, 'backends')}`,
      `--cache-directory=${join(SERVER_DIR, 'caches')}`,
      `--model-repository=${repository}`,
      '--http-address=127.0.0.1',
      '--grpc-address=127.0.0.1',
      '--metrics-address=127.0.0.1',
      `--http-port=${http}`,
      `--grpc-port=${grpc}`,
      `--metrics-port=${metrics}`,
      ...args,
    ],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, LD_LIBRARY_PATH: join(TRITON_DIR, 'nvidia_pytriton.libs'), PATH: `${PYTHON_BIN_DIR}:${process.env.PATH ?? ''}`, PYTHONDONTWRITEBYTECODE: '1' },
    },
  );
  let log = '';
  child.stdout!.setEncoding('utf8').on('data', (s: string) => (log += s));
  child.stderr!.setEncoding('utf8').on('data', (s: string) => (log += s));
  let exited = false;
  const exit = new Promise<void>((resolve) => child.once('close', () => ((exited = true), resolve())));
  const pid = child.pid!;
  const stubs = new Set<number>();

  const stop = async (): Promise<void> => {
    for (const c of childrenOf(pid)) stubs.add(c);
    if (!exited) child.kill('SIGTERM');
    const timer = setTimeout(() => child.kill('SIGKILL'), STOP_LIMIT_MS);
    await exit;
    clearTimeout(timer);
    for (const s of stubs) if (alive(s)) process.kill(s, 'SIGKILL');
    for (let i = 0; i < 50 && [...stubs].some(alive); i++) await sleep(100);
    for (const f of readdirSync('/dev/shm')) {
      if (!shmBefore.has(f) && f.startsWith('triton_python_backend')) rmSync(join('/dev/shm', f), { force: true });
    }
    rmSync(work, { recursive: true, force: true });
  };

  const deadline = Date.now() + START_LIMIT_MS;
  for (;;) {
    if (exited) {
      await stop();
      throw new Error(`tritonserver exited before it was live\n${log}`);
    }
    try {
      const r = await fetch(`http://127.0.0.1:${http}/v2/health/live`);
      if (r.status === 200) break;
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`tritonserver was not live after ${START_LIMIT_MS} ms\n${log}`);
    }
    await sleep(200);
  }
  // Stubs started while it runs are recorded on the way, so that one whose parent is gone by the
  // time `stop` looks is still ended.
  const watch = setInterval(() => {
    for (const c of childrenOf(pid)) stubs.add(c);
  }, 500);
  watch.unref();
  return {
    pid,
    endpoints: { http: `127.0.0.1:${http}`, grpc: `127.0.0.1:${grpc}`, metrics: `http://127.0.0.1:${metrics}/metrics` },
    get log() {
      return log;
    },
    async stop() {
      clearInterval(watch);
      await stop();
    },
  };
}
