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
 * Shared mappings (`shareFile`): a file's bytes mapped as an entry of the same table, viewed by
 * id the same way (a client's shared-memory region whose bytes an ONNX Runtime worker reads where
 * they lie). Unlike slabs they are unmapped (`unshareFile`): their owner guarantees that no view is
 * used afterwards, and their ids are never handed out again, so a view a thread kept is never
 * mistaken for a later mapping's; a thread drops the view it kept of a dead mapping once it views
 * the entry's next one (so each thread keeps at most one view per table entry).
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

/**
 * The table entry an id names (its low bits; the rest is the entry's generation, which changes
 * when a shared mapping's entry is reused for another).
 */
const SLOT_MASK = 0xfff;
/** The id each entry was last viewed under in this thread, so that a view of a dead mapping is dropped. */
const slots = new Map<number, number>();

/** This thread's view of slab `id` (taken by any thread). */
export function slabView(id: number): ArrayBuffer {
  let view = views.get(id);
  if (view === undefined) {
    const addon = nativeAddon();
    if (addon === undefined) throw new Error(`slab ${id}: the native addon is not loaded in this thread`);
    view = addon.slabView(id);
    const previous = slots.get(id & SLOT_MASK);
    if (previous !== undefined) forget(previous);
    views.set(id, view);
    ids.set(view, id);
    slots.set(id & SLOT_MASK, id);
  }
  return view;
}

function forget(id: number): void {
  const view = views.get(id);
  views.delete(id);
  if (view !== undefined) ids.delete(view);
  if (slots.get(id & SLOT_MASK) === id) slots.delete(id & SLOT_MASK);
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

/** A file's bytes `[0, length)`, mapped for every thread to view (`slabView(id)`). */
export interface SharedFileMapping {
  readonly id: number;
  /** This thread's view of the whole mapping. */
  readonly view: ArrayBuffer;
}

/**
 * Maps bytes `[0, length)` of the file open as `fd` (read and write, shared with other processes);
 * undefined without the addon. Throws when the mapping cannot be made.
 */
export function shareFile(fd: number, length: number): SharedFileMapping | undefined {
  const addon = nativeAddon();
  if (addon === undefined) return undefined;
  const id = addon.shareMap(fd, length);
  return { id, view: slabView(id) };
}

/**
 * Whether the file shrank under mapping `id` since it was mapped: every view of it reads zeros
 * from then on, not the file (the addon replaces the lost pages rather than let the access crash).
 */
export function sharedFileDamaged(id: number): boolean {
  return nativeAddon()!.shareDamaged(id);
}

/** Releases mapping `id`. No view of it, in any thread, may be used afterwards. */
export function unshareFile(id: number): void {
  nativeAddon()!.shareUnmap(id);
  forget(id);
}
