/**
 * Weighted routing of the requests that name no version between a model's versions (a Nereid
 * addition, docs/protocol.md `version_weights`): smooth weighted round-robin, as nginx balances
 * upstreams. Each pick adds every candidate's weight to its running credit, takes the candidate
 * with the most credit (the lowest version on a tie) and takes the sum of the weights from it.
 * The picks repeat with a period of sum(weights) (after dividing the weights by their greatest
 * common divisor), so any run of that many consecutive picks splits exactly by weight, and the
 * versions interleave instead of coming in blocks.
 *
 * Not safe to share across threads; every pick is synchronous.
 */

export class VersionWeights {
  /** version → weight as set, ascending by version (zeros included: they are reported). */
  readonly #weights: ReadonlyMap<number, number>;
  /** The weights above 0, divided by their greatest common divisor, ascending by version. */
  readonly #versions: readonly number[];
  readonly #reduced: readonly number[];
  /** Running credit per entry of `#versions`. */
  readonly #credit: number[];
  /** Which of `#versions` took part in the last pick; a change starts the credits again. */
  readonly #available: boolean[];

  /** `weights`: version → non-negative integer weight, at least one above 0 (checked by the caller). */
  constructor(weights: ReadonlyMap<number, number>) {
    const sorted = [...weights].sort(([a], [b]) => a - b);
    this.#weights = new Map(sorted);
    const positive = sorted.filter(([, w]) => w > 0);
    const divisor = positive.reduce((g, [, w]) => gcd(g, w), 0) || 1;
    this.#versions = positive.map(([v]) => v);
    this.#reduced = positive.map(([, w]) => w / divisor);
    this.#credit = positive.map(() => 0);
    this.#available = positive.map(() => false);
  }

  /** The weights as set, ascending by version. */
  get weights(): ReadonlyMap<number, number> {
    return this.#weights;
  }

  /** The same weights restricted to `versions` (those a reload still serves); undefined when none above 0 remains. */
  restrictedTo(versions: ReadonlySet<number>): VersionWeights | undefined {
    const kept = new Map([...this.#weights].filter(([v]) => versions.has(v)));
    if (kept.size === this.#weights.size) return this;
    return [...kept.values()].some((w) => w > 0) ? new VersionWeights(kept) : undefined;
  }

  /**
   * The version the next request goes to, among the versions with weight above 0 for which
   * `available` is true; undefined when there is none. When the set of available versions changes
   * (one became unavailable or came back) the credits start again from zero.
   */
  pick(available: (version: number) => boolean): number | undefined {
    const versions = this.#versions;
    const taking = this.#available;
    const credit = this.#credit;
    let total = 0;
    let changed = false;
    for (let i = 0; i < versions.length; i++) {
      const now = available(versions[i]!);
      if (now !== taking[i]) {
        taking[i] = now;
        changed = true;
      }
      if (now) total += this.#reduced[i]!;
    }
    if (total === 0) return undefined;
    if (changed) credit.fill(0);
    let best = -1;
    for (let i = 0; i < versions.length; i++) {
      if (!taking[i]) continue;
      credit[i]! += this.#reduced[i]!;
      if (best === -1 || credit[i]! > credit[best]!) best = i;
    }
    credit[best]! -= total;
    return versions[best];
  }

  /** `{"1":90,"2":10}`: the weights as the load parameter writes them. */
  toString(): string {
    return JSON.stringify(Object.fromEntries([...this.#weights].map(([v, w]) => [String(v), w])));
  }
}

function gcd(a: number, b: number): number {
  while (b !== 0) [a, b] = [b, a % b];
  return a;
}
