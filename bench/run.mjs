#!/usr/bin/env node
// Runs every benchmark under dist/bench (built by `npm run build`) one after the other.
// Usage: npm run bench [-- --seconds N]
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { join } from 'node:path';

const root = fileURLToPath(new URL('..', import.meta.url));
const benches = ['http-overhead.js', 'grpc-overhead.js', 'dynamic-batching.js', 'instance-update.js', 'python-overhead.js', 'streaming.js', 'custom-backend.js', 'shared-memory.js', 'sequence.js', 'ensemble.js', 'ocr-pipeline.js'];
let failed = false;
for (const bench of benches) {
  console.log(`# ${bench.replace(/\.js$/, '')}`);
  const r = spawnSync(process.execPath, [join(root, 'dist', 'bench', bench), ...process.argv.slice(2)], { stdio: 'inherit' });
  if (r.status !== 0) failed = true;
}
process.exit(failed ? 1 : 0);
