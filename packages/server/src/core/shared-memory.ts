/**
 * The shared-memory extensions (protocol.md §3.17): system regions are POSIX shared-memory objects
 * (`/dev/shm/<key>`) that clients create and register; the server reads input tensors from them
 * and writes output tensors into them. CUDA regions (§3.17.2) are device memory that clients
 * share by cudaIpcMemHandle_t: a `CudaRuntime` (backends/python/cuda-helper.ts, a helper process
 * with cupy or torch) opens the handle at registration, copies an input's range to the host
 * before the request is queued and an output's bytes to the device before the response is
 * delivered. Where no CUDA device is usable, CUDA registration is refused as by a Triton built
 * without GPU support.
 *
 * Access: where the native addon is built, the region is mapped once at registration as a shared
 * mapping (slabs.ts) that every thread of the process views. An input tensor is a view of the
 * region itself, no copy: an ONNX Runtime worker reads it where it lies (Triton hands its
 * backends the same memory). An output is copied into the mapping. A client that shrinks the
 * object underneath makes the next access to the lost pages fault; the addon's SIGBUS handler
 * then maps zeroed memory in their place, so the access completes, and marks the mapping
 * damaged: the request fails on that mark (`verify`, checked before a response is delivered), the
 * server keeps running, and the region is refused until it is registered again. Without the addon,
 * positioned reads (into pooled buffers) and writes on the descriptor, where shrinking shows as a
 * short read. Either way a client that shrinks or replaces the object can make a request fail,
 * but never crash the server or make it touch memory outside the region. Every use re-checks the
 * object: its size must still cover the region, and `/dev/shm/<key>` must still be the object
 * registered.
 *
 * Concurrency: region names are one name space for both kinds. A region acquired by a request
 * (`acquire`) stays usable by that request until it releases it, even if it is unregistered
 * meanwhile; its descriptor closes once the last user released it (§3.17.1: "removed once they
 * finish"). Unregistering frees the name at once, so it can be registered again.
 */
import { closeSync, constants, fstatSync, openSync, statSync } from 'node:fs';
import { NereidError, type CudaSharedMemoryStatus, type SystemSharedMemoryStatus } from '@nereid/protocol';
import { BufferPool } from './buffer-pool.js';
import { fileBytes, mappingUnavailableReason, type FileBytes } from './mapped-file.js';
import { shareFile, sharedFileDamaged, unshareFile, type SharedFileMapping } from './slabs.js';

/** Where POSIX shared-memory objects live on Linux. */
export const SHM_DIRECTORY = '/dev/shm';

const DISABLED_MESSAGE = "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable.";

export type { CudaSharedMemoryStatus, SystemSharedMemoryStatus } from '@nereid/protocol';

/** A reference from a tensor into a registered region (protocol.md §3.17.3). */
export interface SharedMemoryRef {
  region: string;
  byteSize: number;
  /** Offset inside the region; default 0. */
  offset?: number;
}

/** How a CUDA registration ended in the runtime (`CudaRuntime.open`). */
export type CudaOpenResult = { ok: true } | { ok: false; why: string; size: boolean };

/**
 * Device memory the server reaches through a CUDA runtime. Calls on one runtime complete in the
 * order they were made. `read` resolves with a copy on the host, which is the caller's.
 */
export interface CudaRuntime {
  /** The library that opened the handles (`cupy`, `torch`) and how many devices it sees. */
  readonly runtime: string;
  readonly devices: number;
  /** Resolves, with why, once the runtime is gone: its regions are gone with it. */
  readonly lost: Promise<string>;
  /** Opens `handle` on device `deviceId` as region `name`, which must hold `byteSize` bytes. */
  open(name: string, handle: Uint8Array, deviceId: number, byteSize: number): Promise<CudaOpenResult>;
  read(name: string, offset: number, byteSize: number): Promise<Uint8Array>;
  write(name: string, offset: number, data: Uint8Array): Promise<void>;
  /** Closes the handle of `name`. */
  close(name: string): Promise<void>;
  stop(): void;
}

/** Starts a CUDA runtime, or resolves with the reason none is usable (logged; clients get Triton's refusal). */
export type CudaRuntimeStarter = () => Promise<CudaRuntime | string>;

/** A registered CUDA region: a handle opened by the runtime. */
class CudaRegion {
  readonly name: string;
  readonly deviceId: number;
  readonly byteSize: number;
  readonly runtime: CudaRuntime;
  readonly #onClose: (region: CudaRegion) => void;
  #users = 0;
  #unregistered = false;

  constructor(name: string, deviceId: number, byteSize: number, runtime: CudaRuntime, onClose: (region: CudaRegion) => void) {
    this.name = name;
    this.deviceId = deviceId;
    this.byteSize = byteSize;
    this.runtime = runtime;
    this.#onClose = onClose;
  }

  retain(): void {
    this.#users++;
  }

  release(): void {
    this.#users--;
    if (this.#users === 0 && this.#unregistered) this.#onClose(this);
  }

  /** Removed from the manager: closes now if unused (true), else when the last user releases it. */
  unregister(): boolean {
    this.#unregistered = true;
    if (this.#users > 0) return false;
    return true;
  }

  status(): CudaSharedMemoryStatus {
    return { name: this.name, device_id: this.deviceId, byte_size: this.byteSize };
  }
}

/** A registered system region. */
class SystemRegion {
  readonly name: string;
  readonly key: string;
  readonly path: string;
  /** Start of the region inside the object. */
  readonly offset: number;
  readonly byteSize: number;
  readonly #fd: number;
  readonly #ino: bigint;
  readonly #dev: bigint;
  /**
   * Bytes [0, offset + byteSize) of the object mapped for every thread (slabs.ts): inputs are
   * views of it, outputs are copied into it. Undefined without the native addon.
   */
  readonly #mapping: SharedFileMapping | undefined;
  /** Positioned reads and writes on the descriptor, where the object is not mapped. */
  readonly #bytes: FileBytes | undefined;
  #users = 0;
  #unregistered = false;

  constructor(name: string, key: string, path: string, offset: number, byteSize: number, fd: number, dev: bigint, ino: bigint, map: boolean) {
    this.name = name;
    this.key = key;
    this.path = path;
    this.offset = offset;
    this.byteSize = byteSize;
    this.#fd = fd;
    this.#dev = dev;
    this.#ino = ino;
    const length = offset + byteSize;
    try {
      this.#mapping = map && length > 0 && mappingUnavailableReason() === undefined ? shareFile(fd, length) : undefined;
    } catch (err) {
      throw new NereidError('SHM_REGISTER_INVALID', `failed to register shared memory region '${name}': ${(err as Error).message}`, { cause: err });
    }
    if (this.#mapping === undefined) this.#bytes = fileBytes(fd, length, { writable: true, map: false });
  }

  /** Whether `read` answers views of the region itself (else copies). */
  get mapped(): boolean {
    return this.#mapping !== undefined;
  }

  retain(): void {
    this.#users++;
  }

  release(): void {
    this.#users--;
    if (this.#users === 0 && this.#unregistered) this.#close();
  }

  /** Removed from the manager: closes now if unused, else when the last user releases it. */
  unregister(): void {
    this.#unregistered = true;
    if (this.#users === 0) this.#close();
  }

  #close(): void {
    if (this.#mapping !== undefined) unshareFile(this.#mapping.id);
    this.#bytes?.close();
    closeSync(this.#fd);
  }

  /** Checks `[offset, offset+byteSize)` of the region (§3.17.3 errors) and that the object still holds it. */
  #check(offset: number, byteSize: number): number {
    checkRange(this.name, this.byteSize, offset, byteSize);
    this.verify();
    let current;
    try {
      current = statSync(this.path, { bigint: true, throwIfNoEntry: false });
    } catch {
      current = undefined;
    }
    if (current === undefined || current.ino !== this.#ino || current.dev !== this.#dev) {
      throw new NereidError(
        'SHM_REGION_CHANGED',
        `shared memory region '${this.name}': the object '${this.key}' was deleted or replaced after registration; unregister the region and register it again`,
      );
    }
    const size = Number(fstatSync(this.#fd, { bigint: true }).size);
    if (size < this.offset + this.byteSize) {
      throw new NereidError(
        'SHM_REGION_CHANGED',
        `shared memory region '${this.name}': the object '${this.key}' shrank to ${size} bytes, smaller than the registered region ` +
          `(offset ${this.offset}, byte size ${this.byteSize}); resize it or register the region again`,
      );
    }
    return this.offset + offset;
  }

  /**
   * Throws SHM_REGION_CHANGED when the object shrank under the mapping since registration: its
   * views have read zeros since then, so whatever used them is wrong, and the region stays
   * unusable until it is registered again.
   */
  verify(): void {
    if (this.#mapping !== undefined && sharedFileDamaged(this.#mapping.id)) {
      throw new NereidError(
        'SHM_REGION_CHANGED',
        `shared memory region '${this.name}': the object '${this.key}' shrank while the server was using the region, ` +
          'so its contents were lost to the server; unregister the region and register it again',
      );
    }
  }

  /**
   * `byteSize` bytes at `offset` inside the region: where it is mapped, a view of the region
   * itself (valid while the region is retained; what the client writes there meanwhile shows
   * through, as with Triton); else a copy into `out()`.
   */
  read(offset: number, byteSize: number, out: (byteSize: number) => Uint8Array): Uint8Array {
    const position = this.#check(offset, byteSize);
    if (this.#mapping !== undefined) return new Uint8Array(this.#mapping.view, position, byteSize);
    const target = out(byteSize).subarray(0, byteSize);
    if (!this.#bytes!.read(position, target)) throw this.#shrankDuring('reading', byteSize, offset);
    return target;
  }

  /**
   * A view of `[offset, offset + byteSize)` of the region for an output to be written into where
   * it is produced, or undefined when the region is not mapped. Range-checked only: the object is
   * checked once the output is there (`confirm`), as `write` checks it.
   */
  target(offset: number, byteSize: number): Uint8Array | undefined {
    if (this.#mapping === undefined) return undefined;
    checkRange(this.name, this.byteSize, offset, byteSize);
    return new Uint8Array(this.#mapping.view, this.offset + offset, byteSize);
  }

  /** The checks of `write`, for bytes a backend wrote into a `target` view. */
  confirm(offset: number, byteSize: number): void {
    this.#check(offset, byteSize);
  }

  /** Writes `data` at `offset` inside the region. */
  write(offset: number, data: Uint8Array): void {
    const position = this.#check(offset, data.byteLength);
    if (this.#mapping !== undefined) {
      new Uint8Array(this.#mapping.view, position, data.byteLength).set(data);
      if (sharedFileDamaged(this.#mapping.id)) throw this.#shrankDuring('writing', data.byteLength, offset);
    } else if (!this.#bytes!.write(position, data)) {
      throw this.#shrankDuring('writing', data.byteLength, offset);
    }
  }

  /** The object was shrunk by another process between the check and the copy. */
  #shrankDuring(what: string, byteSize: number, offset: number): NereidError {
    return new NereidError(
      'SHM_REGION_CHANGED',
      `shared memory region '${this.name}': the object '${this.key}' shrank while ${what} ${byteSize} bytes at offset ${offset}; ` +
        'resize it or register the region again',
    );
  }

  status(): SystemSharedMemoryStatus {
    return { name: this.name, key: this.key, offset: this.offset, byte_size: this.byteSize };
  }
}

/** The §3.17.3 range checks of a tensor reference against a region of `regionSize` bytes. */
function checkRange(region: string, regionSize: number, offset: number, byteSize: number): void {
  if (!Number.isSafeInteger(offset) || offset < 0 || (offset >= regionSize && !(offset === 0 && byteSize === 0))) {
    throw new NereidError(
      'SHM_RANGE',
      `Invalid offset for shared memory region: '${region}' (offset ${offset}, region byte size ${regionSize})`,
    );
  }
  if (!Number.isSafeInteger(byteSize) || byteSize < 0 || offset + byteSize > regionSize) {
    throw new NereidError(
      'SHM_RANGE',
      `Invalid offset + byte size for shared memory region: '${region}' (offset ${offset} + byte size ${byteSize} > region byte size ${regionSize})`,
    );
  }
}

/**
 * The file of a POSIX shared-memory key: `/name` or `name`, one path component, not `.` or `..`.
 * Anything else (paths, `../`) is refused rather than resolved.
 */
export function shmKeyPath(key: string, region: string): string {
  const name = key.startsWith('/') ? key.slice(1) : key;
  if (name === '' || name === '.' || name === '..' || name.includes('/') || name.includes('\0') || name.length > 255) {
    throw new NereidError(
      'SHM_REGISTER_INVALID',
      `failed to register shared memory region '${region}': key '${key}' is not a POSIX shared memory object name; ` +
        `use '/name' with no further '/' (the object /dev/shm/name, created with shm_open)`,
    );
  }
  return `${SHM_DIRECTORY}/${name}`;
}

/** A region acquired for one request: valid until `release`, even if unregistered meanwhile. */
export interface SharedMemoryLease {
  readonly name: string;
  /**
   * Set for a CUDA region: `read`, `write`, `target` and `confirm` do not apply; its bytes move
   * with `fetch` and `store`, which copy between the device and the host.
   */
  readonly cuda?: {
    fetch(offset: number, byteSize: number): Promise<Uint8Array>;
    store(offset: number, data: Uint8Array): Promise<void>;
  };
  /**
   * Whether `read` answers views of the region itself (the native addon maps it), valid until
   * `release`; else copies, into pooled buffers that are the request's until it passes them back
   * with `SharedMemoryManager.recycle` (or drops them).
   */
  readonly mapped: boolean;
  /** The `byteSize` bytes at `offset` of the region (see `mapped`). */
  read(offset: number, byteSize: number): Uint8Array;
  write(offset: number, data: Uint8Array): void;
  /**
   * Where mapped, a view of `[offset, offset + byteSize)` of the region, for an output's bytes
   * to be written into directly (`BackendRequest.outputBuffers`); undefined otherwise.
   */
  target(offset: number, byteSize: number): Uint8Array | undefined;
  /**
   * For an output a backend wrote into its `target` view: the checks `write` makes (the object
   * still holds the region, is still the one registered, did not shrink under the mapping).
   */
  confirm(offset: number, byteSize: number): void;
  /** Range checks against the region, without touching it. */
  check(offset: number, byteSize: number): void;
  /** Throws SHM_REGION_CHANGED when the object shrank under the mapping (views read zeros since). */
  verify(): void;
  release(): void;
}

export interface SharedMemoryOptions {
  /** `--allow-client-shm`: clients may register, unregister and use regions. Default false. */
  allowClient?: boolean;
  /** Map regions when the native addon is available (`mapped-file.ts`). Default true. */
  map?: boolean;
  /**
   * Starts the CUDA runtime, at the first CUDA registration. Without it, or when it reports no
   * usable device, CUDA registration is refused as by a server without GPU support.
   */
  cuda?: CudaRuntimeStarter;
  /** Where the details of a refused CUDA registration go (Triton logs them, answers generically). */
  logError?: (message: string) => void;
}

/** Idle buffers kept for region reads (`BufferPool`). */
const READ_POOL_BYTES = 128 * 1024 * 1024;

export class SharedMemoryManager {
  readonly #allowClient: boolean;
  readonly #map: boolean;
  readonly #system = new Map<string, SystemRegion>();
  readonly #cuda = new Map<string, CudaRegion>();
  /** Names whose CUDA registration is in progress: taken, but not yet usable. */
  readonly #opening = new Set<string>();
  readonly #startCuda: CudaRuntimeStarter | undefined;
  /** The runtime once started (or the reason there is none); reset when the runtime is lost. */
  #runtime: Promise<CudaRuntime | string> | undefined;
  /** The runtime `#runtime` resolved to, while it serves. */
  #current: CudaRuntime | undefined;
  readonly #logError: (message: string) => void;
  /**
   * Buffers region reads land in where regions are not mapped: slabs where the addon is built
   * (core/slabs.ts; mappings turned off), so that an ONNX Runtime worker reads a large input where
   * it lies; every read is given back (`recycle`).
   */
  readonly #reads = new BufferPool({ shared: true, maxBytes: READ_POOL_BYTES });

  constructor(options: SharedMemoryOptions = {}) {
    this.#allowClient = options.allowClient ?? false;
    this.#map = options.map ?? true;
    this.#startCuda = options.cuda;
    this.#logError = options.logError ?? (() => undefined);
  }

  get allowClient(): boolean {
    return this.#allowClient;
  }

  /** Throws SHM_DISABLED (protocol.md §3.17) unless clients may register and unregister regions. */
  checkClientAllowed(): void {
    if (!this.#allowClient) throw new NereidError('SHM_DISABLED', DISABLED_MESSAGE);
  }

  /**
   * Registers system region `name`: `byteSize` bytes at `offset` of the object `key` (§3.17.1).
   * The object must exist as a regular file directly in /dev/shm (no symlink) and hold the region.
   */
  registerSystem(name: string, key: string, offset: number, byteSize: number): void {
    this.checkClientAllowed();
    if (name === '') throw new NereidError('SHM_REGISTER_INVALID', 'failed to register shared memory region: a region name is required');
    this.#checkNameFree(name);
    if (!Number.isSafeInteger(offset) || offset < 0 || !Number.isSafeInteger(byteSize) || byteSize < 0) {
      throw new NereidError('SHM_REGISTER_INVALID', `failed to register shared memory region '${name}': offset and byte_size must be non-negative integers`);
    }
    const path = shmKeyPath(key, name);
    let fd: number;
    try {
      fd = openSync(path, constants.O_RDWR | constants.O_NOFOLLOW);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      const why = code === 'ENOENT' ? 'no such object' : code === 'ELOOP' ? 'it is a symbolic link' : (err as Error).message;
      // Triton answers a key it cannot open with INTERNAL; a symbolic link, which Nereid refuses
      // to follow, stays the client's error.
      throw new NereidError(
        code === 'ELOOP' ? 'SHM_REGISTER_INVALID' : 'SHM_REGISTER_FAILED',
        `Unable to open shared memory region: '${key}' for region '${name}' (${why}); create it with shm_open before registering`,
        { cause: err },
      );
    }
    try {
      const st = fstatSync(fd, { bigint: true });
      if (!st.isFile()) {
        throw new NereidError('SHM_REGISTER_INVALID', `failed to register shared memory region '${name}': key '${key}' is not a shared memory object`);
      }
      if (BigInt(offset) + BigInt(byteSize) > st.size) {
        throw new NereidError(
          'SHM_REGISTER_FAILED',
          `Invalid shared memory region: '${key}': region '${name}' at offset ${offset} + byte size ${byteSize} exceeds the ${st.size} bytes of the object; ` +
            `ftruncate the object to at least ${offset + byteSize} bytes`,
        );
      }
      this.#system.set(name, new SystemRegion(name, key, path, offset, byteSize, fd, st.dev, st.ino, this.#map));
    } catch (err) {
      closeSync(fd);
      throw err;
    }
  }

  /** Unregisters one region, or every system region when `name` is absent or empty; unknown names succeed. */
  unregisterSystem(name?: string): void {
    this.checkClientAllowed();
    const names = name ? [name] : [...this.#system.keys()];
    for (const n of names) {
      const region = this.#system.get(n);
      if (region === undefined) continue;
      this.#system.delete(n);
      region.unregister();
    }
  }

  /** Every system region, or the one named (§3.17.1: unknown → NOT_FOUND). */
  systemStatus(name?: string): SystemSharedMemoryStatus[] {
    if (!name) return [...this.#system.values()].map((r) => r.status());
    const region = this.#system.get(name);
    if (region !== undefined) return [region.status()];
    if (this.#cuda.has(name)) {
      throw new NereidError('SHM_REGION_NOT_FOUND', `The region named '${name}' is registered as CUDA shared memory, not system shared memory`);
    }
    throw new NereidError('SHM_REGION_NOT_FOUND', `Unable to find system shared memory region: '${name}'`);
  }

  /** Throws SHM_REGION_EXISTS when `name` is taken by a region of either kind. */
  #checkNameFree(name: string): void {
    if (this.#system.has(name) || this.#cuda.has(name) || this.#opening.has(name)) {
      throw new NereidError('SHM_REGION_EXISTS', `shared memory region '${name}' already in manager`);
    }
  }

  /** The CUDA runtime, started once; a string where none is usable. */
  #cudaRuntime(): Promise<CudaRuntime | string> {
    if (this.#startCuda === undefined) return Promise.resolve('no CUDA runtime is configured');
    if (this.#runtime === undefined) {
      const started = this.#startCuda();
      this.#runtime = started;
      void started.then((runtime) => {
        if (typeof runtime === 'string' || this.#runtime !== started) return;
        this.#current = runtime;
        void runtime.lost.then((why) => this.#runtimeLost(runtime, why));
      });
    }
    return this.#runtime;
  }

  /** The runtime's process ended: its handles went with it, so its regions are dropped. */
  #runtimeLost(runtime: CudaRuntime, why: string): void {
    if (this.#current !== runtime) return;
    this.#current = undefined;
    for (const [name, region] of this.#cuda) {
      if (region.runtime !== runtime) continue;
      this.#cuda.delete(name);
      region.unregister();
    }
    this.#runtime = undefined;
    this.#logError(`CUDA shared memory: the ${runtime.runtime} helper ${why}; its regions were unregistered`);
  }

  /**
   * Registers CUDA region `name` (§3.17.2): the 64-byte cudaIpcMemHandle_t `rawHandle` of device
   * memory on device `deviceId` holding at least `byteSize` bytes, opened by the CUDA runtime.
   * Refusals as Triton's: a handle of another size; no usable CUDA runtime or device ("GPUs not
   * supported"); a name in use; a device, handle or size that the runtime cannot open (the
   * detail is logged, the client gets Triton's "invalid args").
   */
  async registerCuda(name: string, rawHandle: Uint8Array, deviceId: number, byteSize: number): Promise<void> {
    this.checkClientAllowed();
    if (rawHandle.byteLength !== 64) {
      throw new NereidError(
        'SHM_REGISTER_INVALID',
        `failed to register CUDA shared memory region '${name}': raw_handle holds ${rawHandle.byteLength} bytes, a cudaIpcMemHandle_t has 64`,
      );
    }
    const runtime = await this.#cudaRuntime();
    if (typeof runtime === 'string') {
      this.#logError(`CUDA shared memory region '${name}' refused: ${runtime}`);
      throw new NereidError('CUDA_SHM_UNSUPPORTED', `failed to register CUDA shared memory region: '${name}', GPUs not supported`);
    }
    this.#checkNameFree(name);
    if (name === '') throw new NereidError('SHM_REGISTER_INVALID', 'failed to register shared memory region: a region name is required');
    if (!Number.isSafeInteger(deviceId) || deviceId < 0 || !Number.isSafeInteger(byteSize) || byteSize < 0) {
      throw new NereidError('SHM_REGISTER_INVALID', `failed to register shared memory region '${name}': invalid args`);
    }
    this.#opening.add(name);
    let result: CudaOpenResult;
    try {
      result = await runtime.open(name, rawHandle, deviceId, byteSize);
    } finally {
      this.#opening.delete(name);
    }
    if (!result.ok) {
      this.#logError(`CUDA shared memory region '${name}' (device ${deviceId}, ${byteSize} bytes): ${result.why}`);
      throw new NereidError(
        'SHM_REGISTER_INVALID',
        result.size ? `failed to register shared memory region '${name}': invalid args` : 'failed to register shared memory region: invalid args',
      );
    }
    this.#cuda.set(name, new CudaRegion(name, deviceId, byteSize, runtime, (r) => this.#closeCuda(r)));
  }

  /** Closes a region's handle; a failure is logged (the region is gone from the manager either way). */
  #closeCuda(region: CudaRegion): Promise<void> {
    return region.runtime.close(region.name).catch((err: unknown) => {
      this.#logError(`CUDA shared memory region '${region.name}': closing its handle failed: ${(err as Error).message}`);
    });
  }

  /**
   * Unregisters one CUDA region, or every CUDA region when `name` is absent or empty; unknown
   * names and system regions are left alone, successfully. Resolves once the handles of regions
   * no request uses are closed; the others close when their last request releases them.
   */
  async unregisterCuda(name?: string): Promise<void> {
    this.checkClientAllowed();
    const names = name ? [name] : [...this.#cuda.keys()];
    const closing: Promise<void>[] = [];
    for (const n of names) {
      const region = this.#cuda.get(n);
      if (region === undefined) continue;
      this.#cuda.delete(n);
      if (region.unregister()) closing.push(this.#closeCuda(region));
    }
    await Promise.all(closing);
  }

  /** Every CUDA region, or the one named (§3.17.2: unknown → NOT_FOUND). */
  cudaStatus(name?: string): CudaSharedMemoryStatus[] {
    if (!name) return [...this.#cuda.values()].map((r) => r.status());
    const region = this.#cuda.get(name);
    if (region !== undefined) return [region.status()];
    if (this.#system.has(name)) {
      throw new NereidError('SHM_REGION_NOT_FOUND', `The region named '${name}' is registered as system shared memory, not CUDA shared memory`);
    }
    throw new NereidError('SHM_REGION_NOT_FOUND', `Unable to find cuda shared memory region: '${name}'`);
  }

  /** Whether `name` is a registered CUDA region (its requests take the asynchronous path). */
  isCuda(name: string): boolean {
    return this.#cuda.has(name);
  }

  readonly #take = (byteSize: number): Uint8Array => new Uint8Array(this.#reads.take(byteSize));

  /** Acquires region `name` for a request (§3.17.3: unknown → NOT_FOUND). */
  acquire(name: string): SharedMemoryLease {
    const region = this.#system.get(name);
    if (region === undefined) {
      const cuda = this.#cuda.get(name);
      if (cuda !== undefined) return cudaLease(cuda);
      throw new NereidError('SHM_REGION_NOT_FOUND', `Unable to find shared memory region: '${name}'`);
    }
    region.retain();
    let released = false;
    return {
      name,
      mapped: region.mapped,
      read: (offset, byteSize) => region.read(offset, byteSize, this.#take),
      write: (offset, data) => region.write(offset, data),
      target: (offset, byteSize) => region.target(offset, byteSize),
      confirm: (offset, byteSize) => region.confirm(offset, byteSize),
      check: (offset, byteSize) => checkRange(name, region.byteSize, offset, byteSize),
      verify: () => region.verify(),
      release: () => {
        if (released) return;
        released = true;
        region.release();
      },
    };
  }

  /**
   * Gives the buffer under a `read` result back for reuse. The caller guarantees that nothing
   * reads the bytes any more: no backend still executing on them, no response or state holding
   * a view of them.
   */
  recycle(buffer: ArrayBufferLike): void {
    if (buffer instanceof ArrayBuffer) this.#reads.give(buffer);
  }

  /** Closes every region (server stop) and stops the CUDA runtime, which closes its handles. */
  close(): void {
    for (const region of this.#system.values()) region.unregister();
    this.#system.clear();
    this.#cuda.clear();
    const runtime = this.#runtime;
    this.#runtime = undefined;
    this.#current = undefined;
    void runtime?.then((r) => {
      if (typeof r !== 'string') r.stop();
    });
  }
}

const NOT_ON_HOST = (name: string): NereidError =>
  new NereidError('SHM_IO', `shared memory region '${name}' is CUDA device memory: its bytes move by fetch and store`);

/** A request's lease of a CUDA region. */
function cudaLease(region: CudaRegion): SharedMemoryLease {
  region.retain();
  let released = false;
  const { name, runtime } = region;
  return {
    name,
    mapped: false,
    cuda: {
      fetch: (offset, byteSize) => {
        checkRange(name, region.byteSize, offset, byteSize);
        return runtime.read(name, offset, byteSize);
      },
      store: (offset, data) => {
        checkRange(name, region.byteSize, offset, data.byteLength);
        return runtime.write(name, offset, data);
      },
    },
    read: () => {
      throw NOT_ON_HOST(name);
    },
    write: () => {
      throw NOT_ON_HOST(name);
    },
    target: () => undefined,
    confirm: () => undefined,
    check: (offset, byteSize) => checkRange(name, region.byteSize, offset, byteSize),
    verify: () => undefined,
    release: () => {
      if (released) return;
      released = true;
      region.release();
    },
  };
}
