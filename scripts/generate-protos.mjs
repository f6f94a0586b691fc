#!/usr/bin/env node
// Generates TypeScript from the hand-written .proto files of packages/protocol/proto into
// packages/protocol/src/generated (not committed; run before `tsc -b` by `npm run build`).
//
// ts-proto emits message codecs and grpc-js service definitions. Two runs, because the model
// configuration and the service want different 64-bit integer types:
//   - model_config.proto: int64 as JS numbers, enums as their names, snake_case fields — the
//     generated ModelConfig is then the same shape as the server's ModelConfig object;
//   - grpc_service.proto, health.proto: int64 as bigint (sequence ids and uint64 parameters keep
//     every bit), snake_case fields, grpc-js service definitions.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, rmSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const protoDir = join(root, 'packages/protocol/proto');
const outDir = join(root, 'packages/protocol/src/generated');
const buf = join(root, 'node_modules/.bin/buf');
const plugin = join(root, 'node_modules/.bin/protoc-gen-ts_proto');

const newest = (dir) => Math.max(...readdirSync(dir).map((f) => statSync(join(dir, f)).mtimeMs));
if (existsSync(join(outDir, 'grpc_service.ts')) && newest(outDir) >= Math.max(newest(protoDir), statSync(fileURLToPath(import.meta.url)).mtimeMs)) {
  process.exit(0);
}

const common = [
  'esModuleInterop=true',
  'importSuffix=.js',
  'snakeToCamel=false',
  'outputJsonMethods=false',
  'outputPartialMethods=false',
  'useOptionals=messages',
  'useDate=false',
  'env=browser',
];
// The service run also writes model_config.ts (an import); the configuration run comes second so
// its version stays.
const runs = [
  {
    files: ['grpc_service.proto', 'health.proto'],
    opts: [...common, 'forceLong=bigint', 'outputServices=false'],
  },
  { files: ['model_config.proto'], opts: [...common, 'forceLong=number', 'stringEnums=true', 'outputServices=false'] },
];

rmSync(outDir, { recursive: true, force: true });
mkdirSync(outDir, { recursive: true });
for (const run of runs) {
  const template = JSON.stringify({
    version: 'v2',
    plugins: [{ local: plugin, out: outDir, opt: run.opts }],
  });
  const args = ['generate', protoDir, '--template', template];
  for (const f of run.files) args.push('--path', join(protoDir, f));
  execFileSync(buf, args, { stdio: 'inherit', cwd: root });
}
console.log(`generate-protos: ${readdirSync(outDir).join(', ')}`);
