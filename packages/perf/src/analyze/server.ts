/**
 * The server `nereid analyze` measures on. Local mode starts one server for the whole run, in
 * explicit model control mode over the model repository and the output repository (a
 * `tritonserver`-compatible command when `triton_server_path` names one, else this installation's
 * `nereid serve`), and stops it at the end; remote mode uses a server already running. Either way
 * every variant is applied through the model repository API, never by a restart.
 *
 * Memory: in local mode the resident memory of the server's process tree (model processes such as
 * Python stubs included) is read from /proc while each level is measured; a remote server's memory
 * is not visible, so `cpu_used_ram` is then unavailable.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { readFile, readdir } from 'node:fs/promises';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { NereidError } from '@nereid/protocol';
import { HttpClient } from '@nereid/client';
import type { AnalyzeConfig } from './types.js';

export interface ServerHandle {
  httpUrl: string;
  grpcUrl: string;
  metricsUrl: string;
  client: HttpClient;
  launchMode: 'local' | 'remote';
  /** Resident memory of the server's processes, MB; undefined when not visible. */
  rssMb(): Promise<number | undefined>;
  stop(): Promise<void>;
}

/** `n` distinct free ports (all held open until every one is chosen, so none repeats). */
async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from({ length: n }, () => new Promise<ReturnType<typeof createServer>>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(0, '127.0.0.1', () => resolve(s));
    })),
  );
  const ports = servers.map((s) => (s.address() as { port: number }).port);
  await Promise.all(servers.map((s) => new Promise((r) => s.close(r))));
  return ports;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The `nereid` command of this installation (the server package's bin script). */
async function nereidBin(): Promise<string> {
  try {
    const entry = fileURLToPath(import.meta.resolve('@nereid/server'));
    return join(dirname(entry), '..', 'bin', 'nereid.js');
  } catch {
    throw new NereidError('ANALYZE_CONFIG', 'local launch mode needs the @nereid/server package (npm install @nereid/server), or triton_server_path naming a tritonserver-compatible command');
  }
}

/** Resident memory (kB) of `pid` and all its descendants, from /proc. */
async function treeRssKb(pid: number): Promise<number | undefined> {
  const parents = new Map<number, number[]>();
  for (const name of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(name)) continue;
    const stat = await readFile(`/proc/${name}/stat`, 'utf8').catch(() => '');
    const m = /\) \S+ (\d+)/.exec(stat);
    if (!m) continue;
    const ppid = Number(m[1]);
    const list = parents.get(ppid) ?? [];
    list.push(Number(name));
    parents.set(ppid, list);
  }
  let total = 0;
  let seen = false;
  const stack = [pid];
  while (stack.length > 0) {
    const p = stack.pop()!;
    const status = await readFile(`/proc/${p}/status`, 'utf8').catch(() => '');
    const m = /VmRSS:\s+(\d+) kB/.exec(status);
    if (m) {
      total += Number(m[1]);
      seen = true;
    }
    stack.push(...(parents.get(p) ?? []));
  }
  return seen ? total : undefined;
}

function withScheme(endpoint: string): string {
  return /^https?:\/\//.test(endpoint) ? endpoint : `http://${endpoint}`;
}

/** Connects to the server of remote mode; throws a clear error when it does not answer. */
export async function connectRemote(config: AnalyzeConfig): Promise<ServerHandle> {
  const client = new HttpClient(withScheme(config.httpEndpoint));
  try {
    await client.isServerLive();
  } catch (err) {
    throw new NereidError(
      'ANALYZE_SERVER',
      `triton_launch_mode remote: no server answers at ${config.httpEndpoint} (${err instanceof Error ? err.message : String(err)}); start one with --model-control-mode=explicit, or set triton_http_endpoint`,
    );
  }
  return {
    httpUrl: config.httpEndpoint.replace(/^https?:\/\//, ''),
    grpcUrl: config.grpcEndpoint,
    metricsUrl: config.metricsUrl,
    client,
    launchMode: 'remote',
    rssMb: async () => undefined,
    stop: async () => {},
  };
}

/**
 * Starts the server of local mode over `repositories` and waits until it is ready. Its output goes
 * to `logFile`; a server that exits while starting is an error quoting the log's end.
 */
export async function launchLocal(config: AnalyzeConfig, repositories: readonly string[], logFile: string): Promise<ServerHandle> {
  const [http, grpc, metrics] = await freePorts(3);
  const flags = [
    ...repositories.map((r) => `--model-repository=${r}`),
    '--model-control-mode=explicit',
    `--http-port=${http}`,
    `--grpc-port=${grpc}`,
    `--metrics-port=${metrics}`,
    ...Object.entries(config.serverFlags).map(([k, v]) => `--${k.replace(/_/g, '-')}=${v}`),
  ];
  let command: string;
  let args: string[];
  if (config.serverPath !== undefined) {
    command = config.serverPath;
    args = flags;
  } else {
    command = process.execPath;
    args = ['--max-semi-space-size=64', '--single-threaded-gc', await nereidBin(), 'serve', ...flags];
  }
  const log = createWriteStream(logFile);
  // Its own process group: a Ctrl-C at the terminal interrupts the analysis (which then finishes
  // the level it measures, with this server still up), not the server; the analysis stops it.
  const child: ChildProcess = spawn(command, args, { env: { ...process.env, ...config.serverEnvironment }, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  child.stdout?.pipe(log, { end: false });
  child.stderr?.pipe(log, { end: false });
  let exited: { code: number | null; signal: string | null } | undefined;
  let spawnError: Error | undefined;
  const exit = new Promise<void>((resolve) => {
    child.once('error', (err) => {
      spawnError = err;
      resolve();
    });
    child.once('exit', (code, signal) => {
      exited = { code, signal };
      resolve();
    });
  });
  const client = new HttpClient(`http://127.0.0.1:${http}`);
  const stop = async (): Promise<void> => {
    if (exited === undefined && spawnError === undefined) {
      child.kill('SIGTERM');
      const killer = setTimeout(() => child.kill('SIGKILL'), 20_000);
      await exit;
      clearTimeout(killer);
    }
    await new Promise<void>((r) => log.end(r));
  };
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (spawnError !== undefined || exited !== undefined) {
      await stop();
      const tail = (await readFile(logFile, 'utf8').catch(() => '')).split('\n').slice(-15).join('\n');
      throw new NereidError(
        'ANALYZE_SERVER',
        `the server (${command}) ${spawnError ? `could not start: ${spawnError.message}` : `exited while starting (${exited?.code ?? exited?.signal})`}; its log (${logFile}) ends:\n${tail}`,
      );
    }
    if (await client.isServerReady().catch(() => false)) break;
    if (Date.now() > deadline) {
      await stop();
      throw new NereidError('ANALYZE_SERVER', `the server (${command}) did not become ready within 120 s; see its log, ${logFile}`);
    }
    await sleep(100);
  }
  return {
    httpUrl: `127.0.0.1:${http}`,
    grpcUrl: `127.0.0.1:${grpc}`,
    metricsUrl: `127.0.0.1:${metrics}/metrics`,
    client,
    launchMode: 'local',
    rssMb: async () => {
      if (child.pid === undefined) return undefined;
      const kb = await treeRssKb(child.pid);
      return kb === undefined ? undefined : kb / 1024;
    },
    stop,
  };
}
