/**
 * Test support, not part of the server's surface: how the fuzz properties run and report, shared
 * by `fuzz.test.ts` (a fixed seed and a few hundred cases per property, in `npm test`) and
 * `scripts/fuzz.mjs` (longer runs, any seed).
 */
import fc from 'fast-check';
import { ERROR_CODES, isNereidError, type ErrorCode } from '@nereid/protocol';

/** The settings of one run: fast-check's seed, number of cases, and a replay path. */
export interface FuzzSettings {
  readonly seed: number;
  readonly numRuns: number;
  /** fast-check's `path` of a reported failure, to replay exactly that case. */
  readonly path?: string;
}

/** What one property's run came to. */
export interface FuzzOutcome {
  readonly name: string;
  readonly failed: boolean;
  readonly numRuns: number;
  readonly seed: number;
  /** Set when it failed: the replay path, the shrunk counterexample and its error. */
  readonly path?: string;
  readonly counterexample?: string;
  readonly error?: string;
}

/** A named property: `run` checks it under the given settings and never throws. */
export interface FuzzProperty {
  readonly name: string;
  /** What the property holds, in one sentence. */
  readonly claim: string;
  run(settings: FuzzSettings): FuzzOutcome;
}

/** A property over the values of `arbitrary`. `predicate` fails by throwing. */
export function property<T>(name: string, claim: string, arbitrary: fc.Arbitrary<T>, predicate: (value: T) => void): FuzzProperty {
  return {
    name,
    claim,
    run(settings) {
      let details: fc.RunDetails<[T]>;
      try {
        details = fc.check(fc.property(arbitrary, predicate), {
          seed: settings.seed,
          numRuns: settings.numRuns,
          ...(settings.path === undefined ? {} : { path: settings.path }),
        });
      } catch (err) {
        // The arbitrary itself threw while generating a case: a fault of the property, reported.
        return { name, failed: true, numRuns: 0, seed: settings.seed, counterexample: '(generation failed)', error: err instanceof Error ? (err.stack ?? err.message) : String(err) };
      }
      if (!details.failed) return { name, failed: false, numRuns: details.numRuns, seed: settings.seed };
      return {
        name,
        failed: true,
        numRuns: details.numRuns,
        seed: details.seed,
        path: details.counterexamplePath ?? undefined,
        counterexample: details.counterexample === null ? '(none)' : clip(fc.stringify(details.counterexample[0])),
        error: clip(details.errorInstance instanceof Error ? (details.errorInstance.stack ?? details.errorInstance.message) : String(details.errorInstance)),
      };
    },
  };
}

function clip(text: string, max = 4000): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length} characters)`;
}

/**
 * Runs `fn`; anything it throws must be a NereidError with a registered code and a message, and
 * (unless `internal` lists its code) not of kind INTERNAL: bad input is the client's error.
 * Returns the error, or undefined when `fn` returned.
 */
export function onlyTypedErrors(fn: () => void, internal: readonly ErrorCode[] = []): Error | undefined {
  try {
    fn();
    return undefined;
  } catch (err) {
    if (!isNereidError(err)) throw new Error(`threw something other than a NereidError: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
    if (!(err.code in ERROR_CODES)) throw new Error(`threw an unregistered error code ${err.code}`);
    if (err.message.trim() === '') throw new Error(`threw ${err.code} with an empty message`);
    if (err.kind === 'INTERNAL' && !internal.includes(err.code)) throw new Error(`bad input is reported as an internal error: ${err.code}: ${err.message}`);
    return err;
  }
}

/** Fails with `message` unless `condition`. */
export function holds(condition: boolean, message: () => string): void {
  if (!condition) throw new Error(message());
}
