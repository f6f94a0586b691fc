/**
 * Nereid's native addon (packages/server/native/addon.c, compiled by `npm run build` into
 * dist/native/nereid.node with the system C compiler): memory-mapped copies for shared-memory
 * files (`mapped-file.ts`), and slabs, memory every thread of the process views (`slabs.ts`),
 * which shared-memory regions join as shared mappings (`shared-memory.ts`); and `sched_yield` for
 * the event loop's busy polling (backends/python/loop-poll.ts); and direct ONNX Runtime sessions
 * (native/ort.c, backends/onnxruntime/native-session.ts).
 * Optional: without it the server uses positioned I/O and per-thread buffers.
 */
import { createRequire } from 'node:module';

/** A mapping made by the addon; opaque to JavaScript. */
export interface NativeMapping {
  readonly __brand: 'mapping';
}

export interface NativeAddon {
  map(fd: number, length: number, writable: boolean): NativeMapping;
  unmap(mapping: NativeMapping): void;
  copy(mapping: NativeMapping, position: number, bytes: Uint8Array, intoMapping: boolean): boolean;
  /** Id of a free slab of at least `bytes` bytes, now the caller's; -1 when none can be had. */
  slabTake(bytes: number): number;
  /** A new ArrayBuffer over the whole slab `id`, for the calling thread. */
  slabView(id: number): ArrayBuffer;
  /** Frees slab `id` for the next `slabTake`. */
  slabGive(id: number): void;
  /**
   * Maps bytes `[0, length)` of the file (read and write, shared) as an entry every thread views
   * with `slabView(id)`; a fault on it (the file shrank) is survived, see `shareDamaged`.
   */
  shareMap(fd: number, length: number): number;
  /** Whether the file shrank under mapping `id`: its views then read zeros, not the file. */
  shareDamaged(id: number): boolean;
  /** Releases mapping `id`; its views must not be used any more. */
  shareUnmap(id: number): void;
  /** sched_yield(2): another runnable thread waiting for this CPU runs first. */
  yieldCpu(): void;
  /** Opens ONNX Runtime's C API in the library at `libraryPath` (once per process); its version. */
  ortInit(libraryPath: string): string;
  /** Loads a model on the calling thread (native/ort.c says what each argument is). */
  ortLoad(path: string, intra: number, inter: number, level: number, parallel: boolean, arena: boolean, pattern: boolean, config: string[]): OrtDirectModel;
  /** One run on the calling thread: ArrayBuffers of the outputs, their types and shapes in `meta`. */
  ortRun(session: object, inputs: unknown[], outputs: Uint32Array, meta: Float64Array): ArrayBuffer[];
  /** Releases a session's native memory and threads now. */
  ortRelease(session: object): void;
}

/** What `ortLoad` answers: the session, and its inputs' and outputs' names and ONNX element types (-1: not a tensor). */
export interface OrtDirectModel {
  session: object;
  inputs: string[];
  inputTypes: number[];
  outputs: string[];
  outputTypes: number[];
}

let addon: NativeAddon | undefined;
let missing: string | undefined;

/** The addon, or undefined when it is not built (`nativeAddonMissing` says why). */
export function nativeAddon(): NativeAddon | undefined {
  if (addon !== undefined || missing !== undefined) return addon;
  try {
    addon = createRequire(import.meta.url)('../native/nereid.node') as NativeAddon;
  } catch (err) {
    missing = `native addon not built (${(err as Error).message.split('\n')[0]}); run \`npm run build\` with a C compiler installed`;
  }
  return addon;
}

/** Why the addon is not available, or undefined when it is. */
export function nativeAddonMissing(): string | undefined {
  nativeAddon();
  return missing;
}
