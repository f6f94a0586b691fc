#!/usr/bin/env node
// Runs every benchmark under dist/bench (built by `npm run build`) one after the other, then prints
// one table of the key figures the issues defined, read from the scripts' summary lines
// (`name: value unit (baseline …, ratio …)`, bench/lib.ts), with the target where one exists.
// Usage: npm run bench [-- --seconds N] [-- --only NAME,NAME]
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';
import { KEY_FIGURES, parseFigureLine, summaryTable } from '../dist/bench/summary.js';

const root = fileURLToPath(new URL('..', import.meta.url));
const all = ['http-overhead', 'grpc-overhead', 'perf-protocols', 'dynamic-batching', 'dynamic-batching-stream', 'queue-delay', 'instance-update', 'python-overhead', 'frameworks', 'streaming', 'custom-backend', 'shared-memory', 'sequence', 'ensemble', 'response-cache', 'ocr-pipeline', 'tracing', 'analyze', 'vs-triton'];
/** Entries that run another entry's script with arguments of their own. */
const variants = { 'dynamic-batching-stream': ['dynamic-batching', '--transport', 'http2', '--mode', 'stream'] };
const argv = process.argv.slice(2);
const onlyAt = argv.indexOf('--only');
const only = onlyAt >= 0 ? argv[onlyAt + 1]?.split(',') : undefined;
const passOn = onlyAt >= 0 ? [...argv.slice(0, onlyAt), ...argv.slice(onlyAt + 2)] : argv;
const benches = only ? all.filter((b) => only.includes(b)) : all;

/** Runs one script, echoing its output, and resolves with its exit code and the figures it printed. */
function runOne(bench) {
  return new Promise((resolve) => {
    const [script, ...own] = variants[bench] ?? [bench];
    const child = spawn(process.execPath, [join(root, 'dist', 'bench', `${script}.js`), ...own, ...passOn], { stdio: ['ignore', 'pipe', 'inherit'] });
    const figures = [];
    let pending = '';
    child.stdout.on('data', (chunk) => {
      process.stdout.write(chunk);
      pending += chunk.toString('utf8');
      const lines = pending.split('\n');
      pending = lines.pop();
      for (const line of lines) {
        const f = parseFigureLine(line);
        if (f) figures.push(f);
      }
    });
    child.on('close', (code) => {
      const f = parseFigureLine(pending);
      if (f) figures.push(f);
      resolve({ code, figures });
    });
  });
}

let failed = false;
const results = new Map();
for (const bench of benches) {
  console.log(`# ${bench}`);
  const { code, figures } = await runOne(bench);
  if (code !== 0) failed = true;
  results.set(bench, { code, figures });
}
console.log('\n# summary');
console.log(summaryTable(KEY_FIGURES.filter((k) => benches.includes(k.bench)), results));
process.exit(failed ? 1 : 0);
