/**
 * The test servers' processes: a free port to start one on, and stopping one started as the
 * leader of its own process group (`spawn(…, { detached: true })`), so that whatever it started
 * goes with it.
 */
import { createServer } from 'node:net';

/** A TCP port that was free on `host` a moment ago (the OS picks it). */
export function freePort(host = '127.0.0.1'): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, host, () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Sends `signal` to the process group led by `pid`; nothing if it is gone. */
export function signalGroup(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(-pid, signal);
  } catch {
    // already gone
  }
}

/** `count` distinct ports that were free a moment ago (the OS may hand the same one out twice in a row). */
export async function freePorts(count: number, host = '127.0.0.1'): Promise<number[]> {
  const ports = new Set<number>();
  while (ports.size < count) ports.add(await freePort(host));
  return [...ports];
}

/**
 * SIGTERM to the group, SIGKILL after `graceMs` if it is still there; resolves once `closed` (the
 * leader's 'close') has.
 */
export async function stopGroup(pid: number | undefined, closed: Promise<void>, graceMs = 5000): Promise<void> {
  if (pid === undefined) return;
  signalGroup(pid, 'SIGTERM');
  const timer = setTimeout(() => signalGroup(pid, 'SIGKILL'), graceMs);
  await closed;
  clearTimeout(timer);
}
