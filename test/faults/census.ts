/**
 * What the test process holds, read from /proc: its live child processes (a stub is one), the
 * /dev/shm entries named after it (a stub's rings and spill files are `nereid-<server pid>-…`, so
 * entries of other servers running at the same time are not counted), open descriptors, threads
 * and resident memory.
 */
import { readdirSync, readFileSync } from 'node:fs';

/** A child process of this process: its pid and command line. */
export interface Child {
  pid: number;
  cmdline: string;
}

/** The live (not zombie) children of this process. */
export function children(): Child[] {
  const out: Child[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
      const [state, ppid] = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(ppid) !== process.pid || state === 'Z') continue;
      out.push({ pid: Number(name), cmdline: readFileSync(`/proc/${name}/cmdline`, 'utf8').split('\0').join(' ').trim() });
    } catch {
      // the process ended while it was read
    }
  }
  return out;
}

/** The live Python stubs this process started. */
export function stubs(): Child[] {
  return children().filter((c) => c.cmdline.includes('nereid_stub.stub'));
}

/** /dev/shm entries of the server in this process. */
export function shmEntries(): string[] {
  try {
    return readdirSync('/dev/shm').filter((n) => n.startsWith(`nereid-${process.pid}-`));
  } catch {
    return [];
  }
}

export function openDescriptors(): number {
  return readdirSync('/proc/self/fd').length;
}

export function threads(): number {
  return readdirSync('/proc/self/task').length;
}

/** Resident memory, bytes. */
export function rss(): number {
  return process.memoryUsage.rss();
}

export interface Census {
  rss: number;
  fds: number;
  threads: number;
  children: number;
  shm: number;
}

export function census(): Census {
  return { rss: rss(), fds: openDescriptors(), threads: threads(), children: children().length, shm: shmEntries().length };
}

/**
 * Watches for `ms` milliseconds, polling every 25 ms, and returns every stub pid seen: a failed
 * model that restarts its stub shows up as pids appearing after the load failed.
 */
export async function stubsSeenDuring(ms: number): Promise<Set<number>> {
  const seen = new Set<number>();
  const end = Date.now() + ms;
  while (Date.now() < end) {
    for (const c of stubs()) seen.add(c.pid);
    await new Promise((r) => setTimeout(r, 25));
  }
  return seen;
}
