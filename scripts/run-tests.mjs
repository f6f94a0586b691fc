#!/usr/bin/env node
// Runs every compiled test file with Node's built-in test runner.
//
// Node 20's `node --test DIR` does not expand directories of compiled TypeScript reliably, so the
// files are listed here explicitly: every `*.test.js` under packages/*/dist and dist/test whose
// TypeScript source still exists (stale outputs of deleted tests are skipped, not run).
// The conformance tier (test/conformance, Triton's own clients and tools; docs/compatibility.md)
// needs the Python environment of scripts/conformance-env.sh and runs only with --conformance,
// which runs nothing else.
// Usage: node scripts/run-tests.mjs [--conformance] [substring ...]   (only files whose path
// contains one)
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));

/** [compiled dir, source dir] pairs; a.test.js in the first maps to a.test.ts in the second. */
const trees = [];
for (const pkg of readdirSync(join(root, 'packages'))) {
  trees.push([join(root, 'packages', pkg, 'dist'), join(root, 'packages', pkg, 'src')]);
}
trees.push([join(root, 'dist', 'test'), join(root, 'test')]);

function walk(dir, out) {
  if (!existsSync(dir)) return out;
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path, out);
    else if (name.endsWith('.test.js')) out.push(path);
  }
  return out;
}

const args = process.argv.slice(2);
const conformance = args.includes('--conformance');
const filters = args.filter((a) => a !== '--conformance');
const conformanceDir = join(root, 'dist', 'test', 'conformance') + '/';
const files = [];
let sources = 0;
for (const [dist, src] of trees) {
  for (const file of walk(dist, [])) {
    const source = join(src, relative(dist, file)).replace(/\.js$/, '.ts');
    if (!existsSync(source)) continue;
    if (file.startsWith(conformanceDir) !== conformance) continue;
    sources++;
    if (filters.length === 0 || filters.some((f) => file.includes(f))) files.push(file);
  }
}

// Every test source must have been compiled; a missing output means the build skipped it.
const missing = [];
for (const [dist, src] of trees) {
  const walkSrc = (dir) => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walkSrc(path);
      else if (name.endsWith('.test.ts')) {
        const out = join(dist, relative(src, path)).replace(/\.ts$/, '.js');
        if (!existsSync(out)) missing.push(relative(root, path));
      }
    }
  };
  walkSrc(src);
}
if (missing.length > 0) {
  console.error(`These test sources have no compiled output (run npm run build):\n  ${missing.join('\n  ')}`);
  process.exit(1);
}
if (files.length === 0) {
  console.error(filters.length ? `No test file matches ${filters.join(', ')}` : 'No test files found');
  process.exit(1);
}

console.log(`Running ${files.length} of ${sources} test files`);
// Conformance files drive the server with external processes (Python clients, perf_analyzer,
// Model Analyzer) that each want the machine's cores: one file at a time.
const concurrency = conformance ? ['--test-concurrency=1'] : [];
const child = spawn(process.execPath, ['--test', '--test-reporter=spec', ...concurrency, ...files], {
  stdio: 'inherit',
  cwd: root,
});
child.on('exit', (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
