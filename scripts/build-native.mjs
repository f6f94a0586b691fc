#!/usr/bin/env node
// Compiles the server's native addon (packages/server/native/addon.c: memory mappings of shared-
// memory files with a SIGBUS guard; ort.c: direct ONNX Runtime sessions) into
// packages/server/dist/native/nereid.node with the system C compiler (`$CC`, else `cc`) and the
// Node-API headers of the `node-api-headers` package (else the running Node's own include
// directory). No node-gyp, no download. Runs after `tsc -b`; skips the compile when the output
// is newer than the sources.
//
// Without a C compiler the build still succeeds: the server then reads and writes shared memory
// with positioned I/O (slower for large tensors; packages/server/src/core/mapped-file.ts), runs ONNX
// models through onnxruntime-node's binding, and says
// so at startup. `--require` (or NEREID_REQUIRE_NATIVE=1) makes
// a failed build an error (CI).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const required = process.argv.includes('--require') || process.env.NEREID_REQUIRE_NATIVE === '1';
const sources = ['addon.c', 'ort.c'].map((name) => join(root, 'packages', 'server', 'native', name));
const output = join(root, 'packages', 'server', 'dist', 'native', 'nereid.node');

function headersDir() {
  try {
    const pkg = createRequire(join(root, 'packages', 'server', 'package.json')).resolve('node-api-headers/package.json');
    const dir = join(dirname(pkg), 'include');
    if (existsSync(join(dir, 'node_api.h'))) return dir;
  } catch {
    // not installed: try Node's own headers
  }
  const own = join(dirname(dirname(process.execPath)), 'include', 'node');
  return existsSync(join(own, 'node_api.h')) ? own : undefined;
}

function fail(reason) {
  const message = `build-native: ${reason}; the server will use positioned I/O for shared memory and run ONNX models through onnxruntime-node's binding`;
  if (required) {
    console.error(message);
    process.exit(1);
  }
  console.warn(message);
  process.exit(0);
}

const newest = Math.max(statSync(fileURLToPath(import.meta.url)).mtimeMs, ...sources.map((s) => statSync(s).mtimeMs));
if (existsSync(output) && statSync(output).mtimeMs >= newest) {
  console.log(`build-native: ${relative(root, output)} up to date`);
  process.exit(0);
}
const include = headersDir();
if (include === undefined) fail('no Node-API headers (npm package node-api-headers, or include/node beside the node binary)');
const cc = process.env.CC || 'cc';
mkdirSync(dirname(output), { recursive: true });
try {
  execFileSync(cc, ['-O2', '-std=gnu11', '-Wall', '-Wextra', '-Wno-unused-parameter', '-fPIC', '-shared', '-pthread', '-I', include, '-o', output, ...sources, '-ldl'], {
    stdio: ['ignore', 'inherit', 'inherit'],
  });
} catch (err) {
  fail(`compiling ${sources.map((s) => relative(root, s)).join(', ')} with '${cc}' failed (${err.code === 'ENOENT' ? 'no C compiler' : err.message})`);
}
console.log(`build-native: ${relative(root, output)} built`);
