/**
 * Child processes of the Kubernetes tier (etcd, kube-apiserver, kube-controller-manager, the Nereid
 * processes of simulated pods): each runs in its own process group, writes its output to a log file,
 * and is killed with its whole group when stopped or when the test process exits, however it exits.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { closeSync, openSync, readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (this file compiles to dist/test/kubernetes/helpers/processes.js). */
export const REPO_ROOT = fileURLToPath(new URL('../../../../', import.meta.url));

/** Process groups still running, killed with SIGKILL when the test process exits. */
const live = new Set<number>();
/** Synchronous clean-ups run when the test process exits (after the groups are killed). */
const exitCleanups = new Set<() => void>();
let hooked = false;

/** Runs `cleanup` (synchronous) if the test process exits before the returned function is called. */
export function atExit(cleanup: () => void): () => void {
  hookExit();
  exitCleanups.add(cleanup);
  return () => exitCleanups.delete(cleanup);
}

function killAll(): void {
  for (const pid of live) killGroup(pid, 'SIGKILL');
  for (const cleanup of exitCleanups) {
    try {
      cleanup();
    } catch {
      // best effort on the way out
    }
  }
}

function killGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

function hookExit(): void {
  if (hooked) return;
  hooked = true;
  process.on('exit', killAll);
  // A runner that stops this file (timeout, Ctrl-C) sends a signal: without a handler Node would
  // die without running 'exit' listeners and leave the servers behind.
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      killAll();
      process.exit(128 + (signal === 'SIGINT' ? 2 : signal === 'SIGTERM' ? 15 : 1));
    });
  }
}

export interface ManagedProcess {
  readonly name: string;
  readonly pid: number;
  readonly child: ChildProcess;
  readonly logPath: string;
  /** Settles when the process has exited: its code, or the signal that ended it. */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** True until the process exits. */
  readonly running: boolean;
  /** Sends `signal` to the process group (no-op once exited). */
  signal(signal: NodeJS.Signals): void;
  /** SIGTERM to the group, SIGKILL after `graceMs`; resolves once the process has exited. */
  stop(graceMs?: number): Promise<void>;
  /** The last `lines` lines of the log. */
  tail(lines?: number): string;
}

export interface SpawnOptions {
  env?: NodeJS.ProcessEnv;
  cwd?: string;
}

/** Starts `command` in a process group of its own, stdout and stderr appended to `logPath`. */
export function spawnManaged(name: string, command: string, args: readonly string[], logPath: string, options: SpawnOptions = {}): ManagedProcess {
  hookExit();
  const fd = openSync(logPath, 'a');
  const child = spawn(command, args, {
    detached: true,
    stdio: ['ignore', fd, fd],
    env: options.env ?? process.env,
    cwd: options.cwd,
  });
  closeSync(fd);
  // A test that forgets stop() must not hang its file: the exit hook kills the group instead.
  child.unref();
  let running = true;
  let spawnError: Error | undefined;
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('error', (err) => {
      spawnError = err;
      running = false;
      resolve({ code: -1, signal: null });
    });
    child.once('exit', (code, signal) => {
      running = false;
      if (child.pid !== undefined) live.delete(child.pid);
      resolve({ code, signal });
    });
  });
  if (child.pid !== undefined) live.add(child.pid);
  const pid = child.pid ?? -1;
  const proc: ManagedProcess = {
    name,
    pid,
    child,
    logPath,
    exited,
    get running() {
      return running;
    },
    signal(signal) {
      if (running && pid > 0) killGroup(pid, signal);
    },
    async stop(graceMs = 5000) {
      if (running && pid > 0) {
        killGroup(pid, 'SIGTERM');
        const timer = setTimeout(() => killGroup(pid, 'SIGKILL'), graceMs);
        await exited;
        clearTimeout(timer);
      }
      // Whatever the leader left in its group (a shell's children) goes too.
      if (pid > 0) killGroup(pid, 'SIGKILL');
    },
    tail(lines = 40) {
      let text = '';
      try {
        text = readFileSync(logPath, 'utf8');
      } catch {
        // no log yet
      }
      if (spawnError) text += `\n(spawn failed: ${spawnError.message})`;
      return text.split('\n').slice(-lines).join('\n');
    },
  };
  return proc;
}

/** A TCP port that was free on `host` a moment ago (the OS picks it). */
export { freePort } from '../../helpers/processes.js';

/** True while a process with this pid exists. */
export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Pids of the Nereid server processes listening on `ip` (`nereid.js` with `--http-address=<ip>`),
 * read from /proc rather than from the kubelet's books; with `childrenOf`, only that process's children.
 */
export function nereidPidsOn(ip: string, childrenOf?: number): number[] {
  const pids: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    let argv: string[];
    let parent: number;
    try {
      argv = readFileSync(join('/proc', entry, 'cmdline'), 'utf8').split('\0');
      parent = Number(readFileSync(join('/proc', entry, 'stat'), 'utf8').replace(/^.*\) /s, '').split(' ')[1]);
    } catch {
      continue; // the process ended while being read
    }
    if (childrenOf !== undefined && parent !== childrenOf) continue;
    if (argv.some((a) => a.endsWith('/bin/nereid.js')) && argv.includes(`--http-address=${ip}`)) pids.push(Number(entry));
  }
  return pids;
}
