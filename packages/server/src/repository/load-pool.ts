/**
 * The bounded pool every model load runs on (`--model-load-thread-count`,
 * models-and-scheduling.md §1.10 item 6): at most `size` loads at once, the others wait in
 * arrival order. Models not being loaded keep serving meanwhile.
 */
export class LoadPool {
  readonly size: number;
  #active = 0;
  readonly #waiting: (() => void)[] = [];

  constructor(size: number) {
    this.size = Math.max(1, Math.floor(size));
  }

  /** Loads running now. */
  get active(): number {
    return this.#active;
  }

  /** Runs `job` once a place is free; the place is given back however the job ends. */
  async run<T>(job: () => Promise<T>): Promise<T> {
    if (this.#active >= this.size) await new Promise<void>((resolve) => this.#waiting.push(resolve));
    else this.#active++;
    try {
      return await job();
    } finally {
      const next = this.#waiting.shift();
      if (next) next();
      else this.#active--;
    }
  }
}
