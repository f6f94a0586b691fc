/**
 * Test support, not part of the server's surface: every fuzz property, for `fuzz.test.ts` and
 * `scripts/fuzz.mjs`.
 */
import { CONFIG_PROPERTIES } from './config-properties.js';
import { DECODER_PROPERTIES } from './decoder-properties.js';
import { H1_PROPERTIES } from './h1-properties.js';
import { H2_PROPERTIES } from './h2-properties.js';
import { REQUEST_EXTRA_PROPERTIES } from './request-extras-properties.js';
import type { FuzzProperty } from './check.js';

export type { FuzzOutcome, FuzzProperty, FuzzSettings } from './check.js';

export const FUZZ_PROPERTIES: readonly FuzzProperty[] = [...DECODER_PROPERTIES, ...H1_PROPERTIES, ...H2_PROPERTIES, ...REQUEST_EXTRA_PROPERTIES, ...CONFIG_PROPERTIES];
