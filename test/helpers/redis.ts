/**
 * A real Redis server for the response-cache tests: Debian's `redis-server` (installed by
 * `node scripts/setup.mjs test`), on a free 127.0.0.1 port, without persistence, in a temporary
 * directory. `pause`/`resume` stop and continue the process (a Redis that does not answer),
 * `stop` ends it by its PID.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from './processes.js';

export interface RunningRedis {
  readonly port: number;
  readonly pid: number;
  pause(): void;
  resume(): void;
  stop(): Promise<void>;
}

/** Throws the setup instruction unless `redis-server` is on PATH. */
export function requireRedis(): void {
  if (spawnSync('redis-server', ['--version'], { stdio: 'ignore' }).status !== 0) {
    throw new Error('redis-server is not installed: run `node scripts/setup.mjs test` (as root: apt-get install -y redis-server)');
  }
}

export async function startRedis(options: { password?: string } = {}): Promise<RunningRedis> {
  requireRedis();
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'nereid-redis-'));
  const args = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir, '--daemonize', 'no'];
  if (options.password !== undefined) args.push('--requirepass', options.password);
  const child: ChildProcess = spawn('redis-server', args, { stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  const exited = new Promise<void>((resolve) => child.once('close', () => resolve()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`redis-server did not start in 10 s:\n${log}`)), 10_000);
    const onData = (s: string) => {
      log += s;
      if (log.includes('Ready to accept connections')) {
        clearTimeout(timer);
        resolve();
      }
    };
    child.stdout!.setEncoding('utf8').on('data', onData);
    child.stderr!.setEncoding('utf8').on('data', onData);
    child.once('close', () => {
      clearTimeout(timer);
      reject(new Error(`redis-server exited at start:\n${log}`));
    });
  });
  const pid = child.pid!;
  return {
    port,
    pid,
    pause: () => process.kill(pid, 'SIGSTOP'),
    resume: () => process.kill(pid, 'SIGCONT'),
    async stop() {
      if (child.exitCode === null && child.signalCode === null) {
        process.kill(pid, 'SIGCONT');
        process.kill(pid, 'SIGKILL');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
