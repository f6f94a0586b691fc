/**
 * Slabs: memory that every thread of the process views (the native addon's `slabTake`,
 * `slabView`, `slabGive`). A tensor in a slab reaches an ONNX Runtime worker as the slab's id and
 * an offset: the worker views the same bytes, nothing is copied into a buffer to transfer, and no
 * buffer moves between the threads' heaps (each one that arrives counts there as fresh external
 * memory and drives V8 into full collections; at 16 MiB per request that was one or two full
 * collections per request on the main thread).
 *
 * Each thread views a slab through one ArrayBuffer, created the first time it needs it and kept:
 * `slabId` recognises it. Slabs are never unmapped, so a view used after its slab was given back
 * reads or writes another owner's bytes, never freed memory; ownership is the callers' (a slab is
 * owned by whoever took it until they give it back, and only its owner writes it).
 *
 * Without the addon nothing here hands out slabs and callers keep their per-thread buffers.
 */
import { nativeAddon } from './native.js';

/** This thread's view of each slab it has seen, by id, and the reverse. */
const views = new Map<number, ArrayBuffer>();
const ids = new Map<ArrayBuffer, number>();

/**
 * This thread's view of a free slab of at least `bytes` bytes (its length may be larger), now the
 * caller's until `giveSlab`; undefined without the addon or when the process's slab budget is
 * used up.
 */
export function takeSlab(bytes: number): ArrayBuffer | undefined {
  const addon = nativeAddon();
  if (addon === undefined || bytes <= 0) return undefined;
  const id = addon.slabTake(bytes);
  return id < 0 ? undefined : slabView(id);
}

/** This thread's view of slab `id` (taken by any thread). */
export function slabView(id: number): ArrayBuffer {
  let view = views.get(id);
  if (view === undefined) {
    const addon = nativeAddon();
    if (addon === undefined) throw new Error(`slab ${id}: the native addon is not loaded in this thread`);
    view = addon.slabView(id);
    views.set(id, view);
    ids.set(view, id);
  }
  return view;
}

/** The slab `buffer` views in this thread, or undefined when it is not a slab's view. */
export function slabId(buffer: ArrayBufferLike): number | undefined {
  return ids.get(buffer as ArrayBuffer);
}

/** Frees the slab `buffer` views (a buffer that is not a slab's view is left alone). */
export function giveSlab(buffer: ArrayBufferLike): void {
  const id = ids.get(buffer as ArrayBuffer);
  if (id !== undefined) nativeAddon()!.slabGive(id);
}
