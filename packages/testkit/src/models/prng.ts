/**
 * A seeded pseudo-random generator (mulberry32) so that generated models and test data are the
 * same on every run and every machine.
 */
export class Prng {
  #state: number;

  constructor(seed: number) {
    this.#state = seed >>> 0;
  }

  /** The next 32 random bits as an unsigned integer. */
  nextUint32(): number {
    this.#state = (this.#state + 0x6d2b79f5) >>> 0;
    let t = this.#state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return (t ^ (t >>> 14)) >>> 0;
  }

  /** Uniform in [0, 1). */
  next(): number {
    return this.nextUint32() / 0x1_0000_0000;
  }

  /** Uniform in [lo, hi). */
  uniform(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next();
  }

  /** A Float32Array of `n` values uniform in [lo, hi). */
  float32Array(n: number, lo = -1, hi = 1): Float32Array {
    const out = new Float32Array(n);
    for (let i = 0; i < n; i++) out[i] = lo + (hi - lo) * this.next();
    return out;
  }

  /** An Int32Array of `n` integers uniform in [lo, hi]. */
  int32Array(n: number, lo: number, hi: number): Int32Array {
    const out = new Int32Array(n);
    const span = hi - lo + 1;
    for (let i = 0; i < n; i++) out[i] = lo + Math.floor(this.next() * span);
    return out;
  }
}
