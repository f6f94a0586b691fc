/**
 * @nereid/perf — `nereid perf`, a perf_analyzer-compatible load generator (docs/perf.md), and
 * `nereid analyze`, the configuration search that measures with it (docs/analyze.md).
 */
export { runPerf, PerfSession, type MeasuredLevel, EXIT_SUCCESS, EXIT_UNSTABLE, EXIT_OPTION_ERROR, EXIT_GENERIC_ERROR, type PerfIO } from './perf.js';
export { parsePerfArgs, type PerfOptions } from './options.js';
export type { LevelSummary, ServerBreakdown } from './report.js';
export { runAnalyze, type AnalyzeIO } from './analyze/analyze.js';
export { FRONTIER_COLOR } from './analyze/report-html.js';
export type { AnalysisResult, AnalyzeConfig, Measurement, ModelResult, Variant } from './analyze/types.js';
