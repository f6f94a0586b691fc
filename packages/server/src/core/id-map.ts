/**
 * Collections for entries that come and go with each request (executions awaiting their stub or
 * worker, responses being written), kept out of the way of V8's young-generation collector.
 *
 * When a JS `Map` or `Set` outgrows its table (deleted entries count until then), V8 builds a new
 * table and leaves the old one pointing at it, with the entries it held, for iterators still
 * walking it. A long-lived collection with entries added and deleted per request therefore leaves
 * a chain of tables, each holding the next. Once one of them reaches the old generation (the
 * current table survives two scavenges, or any full collection promotes it), every table after
 * it, and every entry they held (whole requests), survives each scavenge until the next full
 * collection, which promotes the current table and starts the chain again. Measured in a loop of
 * 16 entries in flight: after one full collection every scavenge kept everything it found and the
 * old generation filled (31 mark-compacts in 2 s against none). A null-prototype object used as
 * a dictionary has no such link between its old and new storage.
 */

/** Entries by integer id, in ascending id order. */
export class IdMap<V> {
  #entries: Record<number, V> = Object.create(null) as Record<number, V>;
  #size = 0;

  get size(): number {
    return this.#size;
  }

  get(id: number): V | undefined {
    return this.#entries[id];
  }

  /** Sets the entry of `id` (`value` must not be undefined). */
  set(id: number, value: V): void {
    if (this.#entries[id] === undefined) this.#size++;
    this.#entries[id] = value;
  }

  delete(id: number): boolean {
    if (this.#entries[id] === undefined) return false;
    delete this.#entries[id];
    this.#size--;
    return true;
  }

  /** The entries now, as [id, value] pairs in ascending id order (a copy: the map may change while they are used). */
  entries(): [number, V][] {
    const out: [number, V][] = [];
    for (const key in this.#entries) out.push([Number(key), this.#entries[key as unknown as number]!]);
    return out;
  }

  /** The values now, in ascending id order (a copy). */
  values(): V[] {
    const out: V[] = [];
    for (const key in this.#entries) out.push(this.#entries[key as unknown as number]!);
    return out;
  }

  clear(): void {
    this.#entries = Object.create(null) as Record<number, V>;
    this.#size = 0;
  }
}

/** A set of values, each added under an id it is deleted by; in the order they were added. */
export class LiveSet<T> {
  readonly #map = new IdMap<T>();
  #next = 0;

  get size(): number {
    return this.#map.size;
  }

  /** Adds `value` (not undefined); returns the id that `delete` takes. */
  add(value: T): number {
    const id = this.#next++;
    this.#map.set(id, value);
    return id;
  }

  delete(id: number): boolean {
    return this.#map.delete(id);
  }

  /** The values now, in the order they were added (a copy). */
  values(): T[] {
    return this.#map.values();
  }
}
