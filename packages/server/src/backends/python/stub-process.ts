/**
 * One Python stub process (python/nereid_stub/stub.py) and the channel to it: length-prefixed
 * JSON frames over a socket the stub inherits as fd 3, tensor bytes through the shared-memory
 * rings of `shm-ring.ts`. The model's own stdout and stderr (fds 1 and 2) go to the server log,
 * one line at a time, prefixed with the model and instance.
 *
 * Contracts:
 * - `start` resolves once the stub has mapped its rings and imported numpy, or rejects with a
 *   load error naming the model (missing interpreter, missing numpy, stub that dies at once, or
 *   one that has not started within `startTimeoutMs`: it is killed then).
 * - `call` sends a request that the stub answers with `{t: 'ok', call, value?, error?}`;
 *   pending calls reject when the process exits.
 * - Every other message from the stub goes to `onMessage`, in order, after its tensors were read
 *   out of the ring (`tensors`).
 * - `onExit` fires once, when the process is gone; rings and spill files are removed then.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { createInterface } from 'node:readline';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';
import { NereidError } from '@nereid/protocol';
import type { Logger } from '../../observability/logger.js';
import { LoopPoller } from './loop-poll.js';
import { IdMap } from '../../core/id-map.js';
import { closeQuietly, createRingFile, RingReader, RingWriter, unlinkQuietly, type Placement, type ShmRef } from './shm-ring.js';

/**
 * The folder holding `nereid_stub/` and `triton_python_backend_utils.py`: `<package>/python`,
 * two levels above this file in `src/` and in `dist/` alike.
 */
export const PYTHON_DIR = fileURLToPath(new URL('../../../python/', import.meta.url));

/** A message from the stub; tensors of `outputs`/`inputs` descriptors have been read out. */
export interface StubMessage {
  readonly t: string;
  readonly [key: string]: unknown;
}

export interface StubOptions {
  /** Interpreter to run. */
  readonly python: string;
  /** Data bytes of each ring. */
  readonly ringBytes: number;
  /** `model 'm' instance 'i'`: prefixes log lines and errors. */
  readonly what: string;
  readonly logger: Logger;
  /** Extra environment variables. */
  readonly env?: Readonly<Record<string, string>>;
  readonly cwd?: string;
  /** How long the stub may take to start (interpreter, numpy, channel); 0 = no limit. */
  readonly startTimeoutMs?: number;
  /** The Python module to run on the channel; default `nereid_stub.stub`. */
  readonly module?: string;
  /** How long the stub polls for its next message and the event loop for an execution's answer, µs; 0 or absent: never. */
  readonly busyPollUs?: number;
}

interface PendingCall {
  resolve(value: StubMessage): void;
  reject(error: NereidError): void;
}

/** JSON has no bigint: a safe one becomes a number, a larger one its decimal text. */
function bigintAsNumber(_key: string, value: unknown): unknown {
  if (typeof value !== 'bigint') return value;
  const n = Number(value);
  return Number.isSafeInteger(n) ? n : value.toString();
}

/**
 * A message as JSON. Messages rarely hold a BigInt (a BLS answer may); JSON.stringify with a
 * replacer costs twice as much as without, so the replacer is used only when a BigInt made the
 * plain call throw.
 */
export function frameJson(message: Record<string, unknown>): string {
  try {
    return JSON.stringify(message);
  } catch (err) {
    if (err instanceof TypeError && /BigInt/i.test(err.message)) return JSON.stringify(message, bigintAsNumber);
    throw err;
  }
}

/**
 * Ring files not yet unlinked (a stub unlinks nothing before it started): removed when the
 * server process exits, so a server that exits while a stub starts leaves nothing in /dev/shm.
 */
const unlinkAtExit = new Set<string>();
let exitHookInstalled = false;

function removeAtExit(paths: readonly string[]): void {
  if (!exitHookInstalled) {
    exitHookInstalled = true;
    process.once('exit', () => {
      for (const p of unlinkAtExit) unlinkQuietly(p);
    });
  }
  for (const p of paths) unlinkAtExit.add(p);
}

function unlinkRings(paths: readonly string[]): void {
  for (const p of paths) {
    unlinkQuietly(p);
    unlinkAtExit.delete(p);
  }
}

/** /dev/shm where it exists (memory-backed), else the temporary directory. */
function shmDirectory(): string {
  return existsSync('/dev/shm') ? '/dev/shm' : tmpdir();
}

export class StubProcess {
  readonly #options: StubOptions;
  readonly #child: ChildProcess;
  readonly #socket: Socket;
  readonly #writer: RingWriter;
  readonly #reader: RingReader;
  readonly #fds: number[];
  readonly #paths: string[];
  readonly #spillBase: string;
  readonly #calls = new IdMap<PendingCall>();
  #nextCall = 1;
  #buffered: Buffer = Buffer.alloc(0);
  #exited = false;
  /** The last lines the process wrote to stderr, for errors about a stub that died starting. */
  readonly #lastErr: string[] = [];
  #exitReason: string | undefined;
  #killedFor: string | undefined;
  #onMessage: (m: StubMessage, tensors: Uint8Array[]) => void = () => undefined;
  #onExit: (why: string) => void = () => undefined;
  #booted: { resolve(): void; reject(e: NereidError): void } | undefined;
  #startTimer: NodeJS.Timeout | undefined;
  readonly #poller: LoopPoller;
  readonly exited: Promise<void>;

  private constructor(options: StubOptions) {
    this.#options = options;
    this.#poller = new LoopPoller(options.busyPollUs ?? 0);
    const dir = shmDirectory();
    const base = join(dir, `nereid-${process.pid}-${randomBytes(6).toString('hex')}`);
    this.#spillBase = `${base}-spill`;
    this.#paths = [`${base}-in`, `${base}-out`];
    removeAtExit(this.#paths);
    const inFd = createRingFile(this.#paths[0]!, options.ringBytes);
    const outFd = createRingFile(this.#paths[1]!, options.ringBytes);
    this.#fds = [inFd, outFd];
    this.#writer = new RingWriter(inFd, options.ringBytes, `${base}-in-spill`);
    this.#reader = new RingReader(outFd, options.ringBytes);
    const env = {
      ...process.env,
      PYTHONPATH: [PYTHON_DIR, process.env['PYTHONPATH']].filter((p) => p).join(':'),
      PYTHONUNBUFFERED: '1',
      // The framework runners let their libraries' start-up chatter through only then (tensorflow_model.py).
      ...(options.logger.isVerbose(1) ? { NEREID_LOG_VERBOSE: '1' } : {}),
      // The stub's side of busy polling (transport.py, `Channel`); the event loop's is `#poller`.
      NEREID_STUB_BUSY_POLL_US: String(options.busyPollUs ?? 0),
      ...options.env,
    };
    this.#child = spawn(options.python, ['-m', options.module ?? 'nereid_stub.stub', this.#paths[0]!, this.#paths[1]!, this.#spillBase], {
      stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
      env,
      ...(options.cwd ? { cwd: options.cwd } : {}),
    });
    this.#socket = this.#child.stdio[3] as Socket;
    this.exited = new Promise<void>((resolve) => this.#child.once('close', () => resolve()));
  }

  /** Starts a stub and waits until it is running. */
  static async start(options: StubOptions): Promise<StubProcess> {
    const stub = new StubProcess(options);
    await stub.#boot();
    return stub;
  }

  get pid(): number | undefined {
    return this.#child.pid;
  }

  get alive(): boolean {
    return !this.#exited;
  }

  #boot(): Promise<void> {
    const { what, python } = this.#options;
    const booted = new Promise<void>((resolve, reject) => (this.#booted = { resolve, reject }));
    const limit = this.#options.startTimeoutMs ?? 0;
    if (limit > 0) {
      this.#startTimer = setTimeout(() => this.kill(`did not start within ${limit / 1000} s (stub-timeout-seconds)`), limit);
    }
    for (const [stream, level] of [
      [this.#child.stdout!, 'out'],
      [this.#child.stderr!, 'err'],
    ] as const) {
      createInterface({ input: stream, crlfDelay: Infinity }).on('line', (line) => this.#logLine(line, level));
    }
    this.#child.once('error', (err: NodeJS.ErrnoException) => {
      const message =
        err.code === 'ENOENT'
          ? `${what}: the Python interpreter '${python}' was not found; install Python 3 with numpy, or point --backend-config=python,python-executable=<path> at one`
          : `${what}: could not start the Python interpreter '${python}': ${err.message}`;
      this.#gone(message);
    });
    // 'close' comes after stdout and stderr ended, so their last lines are in the log and in the error.
    this.#child.once('close', (code, signal) => {
      this.#gone(this.#killedFor ?? (signal ? `was killed by ${signal}` : `exited with code ${code}`));
    });
    this.#socket.on('data', (chunk: Buffer) => this.#onData(chunk));
    this.#socket.on('error', () => undefined);
    return booted;
  }

  #logLine(line: string, stream: 'out' | 'err'): void {
    const { logger, what } = this.#options;
    if (stream === 'err' && line.trim() !== '') {
      this.#lastErr.push(line);
      if (this.#lastErr.length > 5) this.#lastErr.shift();
    }
    const prefix = `[${what}] `;
    const level = /^(INFO|WARNING|ERROR|VERBOSE): /.exec(line);
    if (level) {
      const text = prefix + line.slice(level[0].length);
      if (level[1] === 'ERROR') logger.error(text);
      else if (level[1] === 'WARNING') logger.warning(text);
      else if (level[1] === 'VERBOSE') logger.verbose(1, text);
      else logger.info(text);
    } else if (stream === 'err') logger.warning(prefix + line);
    else logger.info(prefix + line);
  }

  /** Handlers for messages that are not call answers, and for the process's end. */
  listen(onMessage: (m: StubMessage, tensors: Uint8Array[]) => void, onExit: (why: string) => void): void {
    this.#onMessage = onMessage;
    this.#onExit = onExit;
  }

  #onData(chunk: Buffer): void {
    let buf = this.#buffered.byteLength === 0 ? chunk : Buffer.concat([this.#buffered, chunk]);
    let offset = 0;
    while (buf.byteLength - offset >= 4) {
      const length = buf.readUInt32LE(offset);
      if (buf.byteLength - offset - 4 < length) break;
      const message = JSON.parse(buf.toString('utf8', offset + 4, offset + 4 + length)) as StubMessage;
      offset += 4 + length;
      this.#dispatch(message);
    }
    buf = buf.subarray(offset);
    this.#buffered = buf.byteLength === 0 ? Buffer.alloc(0) : Buffer.from(buf);
  }

  #dispatch(message: StubMessage): void {
    if (message.t === 'boot') {
      if (typeof message['error'] === 'string') {
        this.#booted?.reject(new NereidError('MODEL_LOAD_FAILED', `${this.#options.what}: ${message['error']}`));
      } else {
        // Both sides hold the rings open now; their names are no longer needed.
        unlinkRings(this.#paths);
        clearTimeout(this.#startTimer);
        this.#booted?.resolve();
      }
      this.#booted = undefined;
      return;
    }
    if (message.t === 'ok') {
      const call = this.#calls.get(message['call'] as number);
      this.#calls.delete(message['call'] as number);
      call?.resolve(message);
      return;
    }
    if (message.t === 'done') this.#poller.answered(message['x'] as number);
    const descriptors = (message.t === 'bls' ? message['inputs'] : message['outputs']) as Placement[] | undefined;
    let tensors: Uint8Array[] = [];
    if (descriptors && descriptors.length > 0) {
      try {
        tensors = this.#reader.take(message['shm'] as ShmRef | undefined, descriptors);
      } catch (err) {
        // The stub broke the channel (shrank its ring, removed a spill file): it cannot be trusted
        // with more requests. Its calls fail and the backend restarts it, as after a crash.
        this.kill(`broke its shared-memory channel (${err instanceof Error ? err.message : String(err)})`);
        return;
      }
    }
    this.#onMessage(message, tensors);
  }

  /**
   * Sends a message; `parts` (tensor bytes, in descriptor order) go through the ring first.
   * `staged` runs once the bytes are in the ring and the frame is built, right before the write
   * that wakes the stub (the end of an execution's compute_input). `partsPerDescriptor`: how many
   * consecutive parts each descriptor covers as one tensor (they are placed back to back); one
   * each when absent.
   */
  send(
    message: Record<string, unknown>,
    parts: readonly Uint8Array[] = [],
    descriptors: Record<string, unknown>[] = [],
    staged?: () => void,
    partsPerDescriptor?: readonly number[],
  ): void {
    if (this.#exited) return;
    if (parts.length > 0) {
      let placed: ReturnType<RingWriter['put']>;
      try {
        placed = this.#writer.put(parts);
      } catch (err) {
        // The stub shrank its inbound ring: the message is not sent, the stub is stopped, and its
        // calls fail with this reason once it is gone (the backend restarts it, as after a crash).
        this.kill(`broke its shared-memory channel (${err instanceof Error ? err.message : String(err)})`);
        return;
      }
      const { shm, placements } = placed;
      message['shm'] = shm;
      if (partsPerDescriptor === undefined) {
        for (let i = 0; i < descriptors.length; i++) {
          descriptors[i]!['o'] = placements[i]!.o;
          descriptors[i]!['n'] = placements[i]!.n;
        }
      } else {
        // Parts are placed back to back: a descriptor of k parts covers them as one tensor.
        let at = 0;
        for (let i = 0; i < descriptors.length; i++) {
          const k = partsPerDescriptor[i]!;
          let n = 0;
          for (let j = at; j < at + k; j++) n += placements[j]!.n;
          descriptors[i]!['o'] = placements[at]!.o;
          descriptors[i]!['n'] = n;
          at += k;
        }
      }
    }
    const json = frameJson(message);
    const length = Buffer.byteLength(json);
    const frame = Buffer.allocUnsafe(4 + length);
    frame.writeUInt32LE(length, 0);
    frame.write(json, 4, 'utf8');
    staged?.();
    if (message['t'] === 'exec') this.#poller.sent(message['x'] as number, (message['requests'] as unknown[]).length);
    else if (message['t'] === 'bexec') this.#poller.sent(message['x'] as number, message['n'] as number);
    this.#socket.write(frame);
  }

  /**
   * A request the stub answers with `ok`; resolves with its `value`, rejects with its `error`
   * (as `code`, message prefixed by `context`) or when the process ends or `timeoutMs` passes
   * (the error then names `timeoutSetting`, the option that sets the limit). `parts` and
   * `descriptors` are tensor bytes sent with it, as with `send`.
   */
  call(
    message: Record<string, unknown>,
    context: string,
    code: 'MODEL_LOAD_FAILED' | 'BACKEND_ERROR' | 'PYTHON_STUB_FAILED',
    timeoutMs = 0,
    timeoutSetting?: string,
    parts: readonly Uint8Array[] = [],
    descriptors: Record<string, unknown>[] = [],
  ): Promise<unknown> {
    if (this.#exited) return Promise.reject(new NereidError('PYTHON_STUB_FAILED', `${context}: the Python stub ${this.#exitReason ?? 'is not running'}`));
    const id = this.#nextCall++;
    return new Promise<unknown>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      if (timeoutMs > 0) {
        timer = setTimeout(() => {
          this.#calls.delete(id);
          const setting = timeoutSetting ? ` (${timeoutSetting})` : '';
          reject(new NereidError('PYTHON_STUB_FAILED', `${context}: the Python stub did not answer within ${timeoutMs / 1000} s${setting}`));
        }, timeoutMs);
      }
      this.#calls.set(id, {
        resolve: (m) => {
          clearTimeout(timer);
          if (typeof m['error'] === 'string') reject(new NereidError(code, `${context}: ${m['error']}`));
          else resolve(m['value']);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.send({ ...message, call: id }, parts, descriptors);
    });
  }

  /** Kills the process (SIGKILL); `reason` becomes the exit reason reported to `onExit`. */
  kill(reason: string): void {
    if (this.#exited) return;
    this.#killedFor ??= reason;
    this.#child.kill('SIGKILL');
  }

  /** Closes the channel: the stub exits on its own when it sees the end of the stream. */
  closeChannel(): void {
    this.#socket.end();
  }

  #gone(why: string): void {
    if (this.#exited) return;
    this.#exited = true;
    this.#exitReason = why;
    const error = new NereidError('PYTHON_STUB_FAILED', `${this.#options.what}: the Python stub ${why}`);
    const stderr = this.#lastErr.length > 0 ? `; its last output: ${this.#lastErr.join(' | ')}` : '';
    const starting = why.includes('interpreter') ? why : `${this.#options.what}: the Python stub ${why}${this.#killedFor === undefined ? ' while starting' : ''}${stderr}`;
    this.#booted?.reject(new NereidError('MODEL_LOAD_FAILED', starting));
    this.#booted = undefined;
    for (const c of this.#calls.values()) c.reject(error);
    this.#calls.clear();
    this.#poller.clear();
    this.#writer.close();
    this.#reader.close();
    for (const fd of this.#fds) closeQuietly(fd);
    unlinkRings(this.#paths);
    clearTimeout(this.#startTimer);
    this.#removeSpills();
    this.#socket.destroy();
    this.#onExit(why);
  }

  #removeSpills(): void {
    const dir = dirname(this.#spillBase);
    const prefix = basename(this.#spillBase).replace(/-spill$/, '');
    try {
      for (const name of readdirSync(dir)) if (name.startsWith(prefix)) unlinkQuietly(join(dir, name));
    } catch {
      // the directory is gone
    }
  }
}
