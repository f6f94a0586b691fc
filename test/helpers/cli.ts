/**
 * Runs the real `nereid` command (`node packages/server/bin/nereid.js ...`) as a child process
 * for end-to-end CLI tests: output collected, patterns awaited, the process always ended.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The repository root (this file compiles to dist/test/helpers/cli.js). */
export const REPO_ROOT = fileURLToPath(new URL('../../../', import.meta.url));
export const NEREID_BIN = fileURLToPath(new URL('../../../packages/server/bin/nereid.js', import.meta.url));
/** Nereid's `tritonserver` launcher (docs/tritonserver-launcher.md). */
export const TRITONSERVER_BIN = fileURLToPath(new URL('../../../packages/server/bin/tritonserver', import.meta.url));
export const EXAMPLE_REPOSITORY = fileURLToPath(new URL('../../../examples/model_repository', import.meta.url));

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

/** Longest wait for an expected line or exit: generous, only to turn a hang into a failure. */
const WAIT_LIMIT_MS = 60_000;

/** Every process started and not yet exited, for `stopAllNereid`. */
const running = new Set<NereidProcess>();

/**
 * Kills every `nereid` process a test left running (call it from an `after` hook), so that a
 * failed assertion never leaves a server behind or keeps the test file from ending.
 */
export async function stopAllNereid(): Promise<void> {
  await Promise.all([...running].map((p) => p.stop('SIGKILL')));
}

export class NereidProcess {
  readonly child: ChildProcess;
  /** Resolves when the process has exited (never rejects). */
  readonly exited: Promise<Exit>;
  #stdout = '';
  #stderr = '';
  #exit: Exit | undefined;
  #listeners = new Set<() => void>();

  /**
   * @param env variables added to this process's environment for the child
   * @param bin the script run with `args`: `nereid` unless told (`TRITONSERVER_BIN`)
   */
  /** @param nodeFlags options to `node` itself, before the script (V8 flags NODE_OPTIONS refuses) */
  constructor(args: readonly string[], env: Record<string, string> = {}, bin: string = NEREID_BIN, nodeFlags: readonly string[] = []) {
    this.child = spawn(process.execPath, [...nodeFlags, bin, ...args], { cwd: REPO_ROOT, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, ...env } });
    this.child.stdout!.setEncoding('utf8').on('data', (s: string) => {
      this.#stdout += s;
      this.#notify();
    });
    this.child.stderr!.setEncoding('utf8').on('data', (s: string) => {
      this.#stderr += s;
      this.#notify();
    });
    running.add(this);
    this.exited = new Promise((resolve) => {
      this.child.once('close', (code, signal) => {
        running.delete(this);
        this.#exit = { code, signal };
        this.#notify();
        resolve(this.#exit);
      });
    });
  }

  get stdout(): string {
    return this.#stdout;
  }

  get stderr(): string {
    return this.#stderr;
  }

  /** stdout then stderr, for failure messages. */
  get output(): string {
    return `--- stdout ---\n${this.#stdout}\n--- stderr ---\n${this.#stderr}`;
  }

  #notify(): void {
    for (const l of [...this.#listeners]) l();
  }

  /**
   * Waits until `pattern` matches stdout (or stderr with `stream: 'stderr'`). Rejects if the
   * process exits first or nothing matches within a generous limit.
   */
  waitFor(pattern: RegExp, stream: 'stdout' | 'stderr' = 'stdout'): Promise<RegExpMatchArray> {
    return new Promise((resolve, reject) => {
      const check = () => {
        const m = (stream === 'stdout' ? this.#stdout : this.#stderr).match(pattern);
        if (m) {
          done();
          resolve(m);
        } else if (this.#exit !== undefined) {
          done();
          reject(new Error(`nereid exited (${JSON.stringify(this.#exit)}) before printing ${pattern}\n${this.output}`));
        }
      };
      const timer = setTimeout(() => {
        done();
        reject(new Error(`nereid did not print ${pattern}\n${this.output}`));
      }, WAIT_LIMIT_MS);
      const done = () => {
        clearTimeout(timer);
        this.#listeners.delete(check);
      };
      this.#listeners.add(check);
      check();
    });
  }

  /** Resolves with the exit once the process ends on its own; kills it after the wait limit. */
  async waitForExit(): Promise<Exit> {
    const timer = setTimeout(() => this.child.kill('SIGKILL'), WAIT_LIMIT_MS);
    try {
      return await this.exited;
    } finally {
      clearTimeout(timer);
    }
  }

  /** Sends `signal` (default SIGTERM) if still running and waits for the exit; idempotent. */
  async stop(signal: NodeJS.Signals = 'SIGTERM'): Promise<Exit> {
    if (this.#exit === undefined) this.child.kill(signal);
    return this.waitForExit();
  }
}

/** Runs `nereid <args>` to completion. */
export async function runNereid(args: readonly string[]): Promise<{ exit: Exit; stdout: string; stderr: string }> {
  const p = new NereidProcess(args);
  const exit = await p.waitForExit();
  return { exit, stdout: p.stdout, stderr: p.stderr };
}

/**
 * Endpoint flags tests add so that servers listen on 127.0.0.1, on ports the OS picks (the metrics
 * endpoint listens on the HTTP address).
 */
export const LOCAL_ENDPOINTS = ['--http-address=127.0.0.1', '--http-port=0', '--grpc-address=127.0.0.1', '--grpc-port=0', '--metrics-port=0'];

/**
 * Starts `nereid serve <args>` on 127.0.0.1 with OS-chosen ports and waits for
 * `Started HTTPService at 127.0.0.1:<port>`. The caller must `stop()` the process.
 */
export async function startNereidServe(
  args: readonly string[],
  env: Record<string, string> = {},
  nodeFlags: readonly string[] = [],
): Promise<{ process: NereidProcess; port: number; url: string; grpcPort: number | undefined }> {
  const p = new NereidProcess(['serve', ...args, ...LOCAL_ENDPOINTS], env, NEREID_BIN, nodeFlags);
  try {
    const m = await p.waitFor(/Started HTTPService at 127\.0\.0\.1:(\d+)/);
    const port = Number(m[1]);
    const g = /Started GRPCInferenceService at 127\.0\.0\.1:(\d+)/.exec(p.stdout);
    return { process: p, port, url: `http://127.0.0.1:${port}`, grpcPort: g ? Number(g[1]) : undefined };
  } catch (err) {
    await p.stop('SIGKILL');
    throw err;
  }
}
