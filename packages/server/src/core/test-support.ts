/**
 * For tests of the native addon's paths. The addon is optional for the server, not for its tests:
 * `npm test` installs a C compiler and builds it. Called from a suite's `before` hook, these make
 * the suite fail with the reason instead of running tests that cannot work.
 */
import { mappingUnavailableReason } from './mapped-file.js';
import { nativeAddonMissing } from './native.js';

export function requireNativeAddon(): void {
  const missing = nativeAddonMissing();
  if (missing !== undefined) throw new Error(`${missing} (npm test installs gcc and libc6-dev and builds it)`);
}

/** The addon, and mapped shared memory not turned off (NEREID_SHM_MAPPING=off). */
export function requireMapping(): void {
  const unavailable = mappingUnavailableReason();
  if (unavailable !== undefined) throw new Error(`mapped shared memory is unavailable: ${unavailable}`);
}
