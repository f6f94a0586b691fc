/**
 * The CUDA runtime of the CUDA shared-memory regions (core/shared-memory.ts): one long-lived
 * Python process (python/nereid_stub/cuda_helper.py) on the stub's channel (`StubProcess`),
 * run by the Python backend's interpreter, which opens the clients' IPC handles through cupy or
 * torch and copies byte ranges between the regions and the server.
 *
 * Contracts:
 * - `startCudaHelper` resolves with a `CudaRuntime` once the helper has found a CUDA device, or
 *   with the reason no device is usable (no interpreter, no numpy, neither cupy nor torch with
 *   CUDA, no device); a helper that found none has exited by then.
 * - Calls are answered in the order they were sent (one channel, one helper thread), so reads
 *   issued in some order complete in that order.
 * - When the process ends, every pending and later call rejects, and `lost` resolves with why.
 */
import { NereidError } from '@nereid/protocol';
import type { Logger } from '../../observability/logger.js';
import type { CudaOpenResult, CudaRuntime } from '../../core/shared-memory.js';
import { StubProcess, type StubMessage } from './stub-process.js';

/** Ring bytes each way: a larger copy goes through a file of its own (transport.py). */
const RING_BYTES = 64 * 1024 * 1024;
const START_TIMEOUT_MS = 60_000;

export interface CudaHelperOptions {
  /** The interpreter (the Python backend's `python-executable`). */
  readonly python: string;
  readonly logger: Logger;
  /** Extra environment variables (tests put a stand-in CUDA runtime on PYTHONPATH). */
  readonly env?: Readonly<Record<string, string>>;
}

interface Pending {
  resolve(value: Uint8Array): void;
  reject(error: NereidError): void;
}

class CudaHelper implements CudaRuntime {
  readonly runtime: string;
  readonly devices: number;
  readonly lost: Promise<string>;
  readonly #stub: StubProcess;
  readonly #reads = new Map<number, Pending>();
  #nextRead = 1;
  #gone: string | undefined;

  constructor(stub: StubProcess, runtime: string, devices: number, lost: Promise<string>) {
    this.#stub = stub;
    this.runtime = runtime;
    this.devices = devices;
    this.lost = lost;
  }

  /** Routes the `data` answers of reads (the only messages that are not `ok`). */
  deliver(message: StubMessage, tensors: Uint8Array[]): void {
    const pending = this.#reads.get(message['call'] as number);
    if (pending === undefined) return;
    this.#reads.delete(message['call'] as number);
    pending.resolve(tensors[0] ?? new Uint8Array(0));
  }

  exited(why: string): void {
    this.#gone = why;
    const error = new NereidError('SHM_IO', `the CUDA shared-memory helper ${why}`);
    for (const p of this.#reads.values()) p.reject(error);
    this.#reads.clear();
  }

  async open(name: string, handle: Uint8Array, deviceId: number, byteSize: number): Promise<CudaOpenResult> {
    const value = await this.#stub.call(
      { t: 'open', name, handle: Buffer.from(handle.buffer, handle.byteOffset, handle.byteLength).toString('base64'), device: deviceId, size: byteSize },
      `opening CUDA shared memory region '${name}'`,
      'PYTHON_STUB_FAILED',
    );
    return value as CudaOpenResult;
  }

  read(name: string, offset: number, byteSize: number): Promise<Uint8Array> {
    if (this.#gone !== undefined) return Promise.reject(new NereidError('SHM_IO', `the CUDA shared-memory helper ${this.#gone}`));
    // Negative ids keep reads apart from `StubProcess.call`'s positive ones.
    const call = -this.#nextRead++;
    return new Promise<Uint8Array>((resolve, reject) => {
      this.#reads.set(call, { resolve, reject });
      this.#stub.send({ t: 'read', call, name, offset, size: byteSize });
    });
  }

  async write(name: string, offset: number, data: Uint8Array): Promise<void> {
    const descriptor: Record<string, unknown> = { d: 'UINT8', s: [data.byteLength] };
    const context = `writing to CUDA shared memory region '${name}'`;
    await this.#stub.call({ t: 'write', name, offset, inputs: [descriptor] }, context, 'PYTHON_STUB_FAILED', 0, undefined, [data], [descriptor]);
  }

  async close(name: string): Promise<void> {
    await this.#stub.call({ t: 'close', name }, `closing CUDA shared memory region '${name}'`, 'PYTHON_STUB_FAILED');
  }

  stop(): void {
    this.#stub.closeChannel();
  }
}

/** Starts the helper: a `CudaRuntime`, or the reason no CUDA device is usable. */
export async function startCudaHelper(options: CudaHelperOptions): Promise<CudaRuntime | string> {
  let stub: StubProcess;
  try {
    stub = await StubProcess.start({
      python: options.python,
      ringBytes: RING_BYTES,
      what: 'CUDA shared-memory helper',
      logger: options.logger,
      module: 'nereid_stub.cuda_helper',
      startTimeoutMs: START_TIMEOUT_MS,
      ...(options.env && { env: options.env }),
    });
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
  let helper: CudaHelper | undefined;
  let early: string | undefined;
  let resolveLost!: (why: string) => void;
  const lost = new Promise<string>((resolve) => (resolveLost = resolve));
  stub.listen(
    (message, tensors) => helper?.deliver(message, tensors),
    (why) => {
      early = why;
      helper?.exited(why);
      resolveLost(why);
    },
  );
  let probe: { runtime: string; devices: number };
  try {
    probe = (await stub.call({ t: 'probe' }, 'no usable CUDA device', 'PYTHON_STUB_FAILED')) as typeof probe;
  } catch (err) {
    stub.closeChannel();
    return err instanceof Error ? err.message : String(err);
  }
  if (early !== undefined) return `the CUDA shared-memory helper ${early}`;
  helper = new CudaHelper(stub, probe.runtime, probe.devices, lost);
  options.logger.info(`CUDA shared memory: ${probe.runtime} sees ${probe.devices} CUDA device${probe.devices === 1 ? '' : 's'}`);
  return helper;
}
