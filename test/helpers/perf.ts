/** Running `nereid perf` in the test's process (`runPerf`), its output captured. */
import assert from 'node:assert/strict';
import { runPerf, type LevelSummary } from '@nereid/perf';

/** The exit code and everything printed. */
export interface PerfOutcome {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `nereid perf` with `args` (as on the command line) and captures its output. */
export async function perf(args: readonly string[]): Promise<PerfOutcome> {
  let stdout = '';
  let stderr = '';
  const code = await runPerf(args, { stdout: (t) => void (stdout += t), stderr: (t) => void (stderr += t) });
  return { code, stdout, stderr };
}

/** The levels of a `--json` run, asserting it exited 0 (the output shown otherwise). */
export function levels(out: PerfOutcome): LevelSummary[] {
  assert.equal(out.code, 0, `exit ${out.code}\n${out.stdout}\n${out.stderr}`);
  return (JSON.parse(out.stdout) as { levels: LevelSummary[] }).levels;
}
