/**
 * @nereid/perf — `nereid perf`, a perf_analyzer-compatible load generator (docs/perf.md).
 */
export { runPerf, EXIT_SUCCESS, EXIT_UNSTABLE, EXIT_OPTION_ERROR, EXIT_GENERIC_ERROR, type PerfIO } from './perf.js';
export { parsePerfArgs, type PerfOptions } from './options.js';
export type { LevelSummary, ServerBreakdown } from './report.js';
