/**
 * Paths and checks the config layer's tests share (not part of the layer's surface). They work
 * from `src` (tsx) and from `dist` (the compiled tests).
 */
import assert from 'node:assert/strict';
import { existsSync, readFileSync, readdirSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { configPb } from '@nereid/protocol';
import { fromProtoModelConfig, toProtoModelConfig } from './config-proto.js';
import { completeModelConfig, modelConfigToJson } from './config-json.js';
import { parseModelConfigText } from './pbtxt-parser.js';

/** The project root: the nearest ancestor holding a package.json with "workspaces". */
export function projectRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const pkg = join(dir, 'package.json');
    if (existsSync(pkg) && 'workspaces' in (JSON.parse(readFileSync(pkg, 'utf8')) as object)) return dir;
    const parent = dirname(dir);
    if (parent === dir) throw new Error(`no workspace package.json above ${fileURLToPath(import.meta.url)}`);
    dir = parent;
  }
}

/** The hand-written config fixtures (`src/config/fixtures`). */
export function fixturesDir(): string {
  return join(projectRoot(), 'packages/server/src/config/fixtures');
}

export interface ReferenceCorpus {
  readonly configsDir: string;
  /** File names in `configsDir`, sorted. */
  readonly files: readonly string[];
  /** What protobuf's reference parser gives for each file, as protobuf JSON. */
  readonly expected: Readonly<Record<string, unknown>>;
}

/**
 * The reference corpus of 410 real config.pbtxt files from Triton's repository, kept outside
 * the project at `../shared/testdata/triton-configs` (its README says what it holds). Fails the
 * calling test, naming the paths, when it is not there.
 */
export function referenceCorpus(): ReferenceCorpus {
  const corpusDir = resolve(projectRoot(), '../shared/testdata/triton-configs');
  const configsDir = join(corpusDir, 'configs');
  const expectedFile = join(corpusDir, 'expected.json');
  if (!existsSync(configsDir) || !existsSync(expectedFile)) {
    assert.fail(`the reference config corpus is missing: looked for ${configsDir} and ${expectedFile}`);
  }
  const files = readdirSync(configsDir).sort();
  const expected = JSON.parse(readFileSync(expectedFile, 'utf8')) as Record<string, unknown>;
  return { configsDir, files, expected };
}

/**
 * `float` fields travel as 32-bit floats: the config layer keeps their shortest decimal (0.1), the
 * decoded message their widened value (0.10000000149011612). Both are the same float.
 */
function sameFloat32(a: unknown): unknown {
  if (typeof a === 'number' && Number.isFinite(a) && !Number.isInteger(a)) return Math.fround(a);
  if (Array.isArray(a)) return a.map(sameFloat32);
  if (typeof a === 'object' && a !== null) return Object.fromEntries(Object.entries(a).map(([k, v]) => [k, sameFloat32(v)]));
  return a;
}

/**
 * The files among `paths` whose completed configuration does not survive encoding as the
 * protobuf ModelConfig message and decoding back (what the gRPC ModelConfig RPC sends must be
 * what the HTTP config endpoint shows).
 */
export function protoRoundTripFailures(paths: readonly string[]): string[] {
  const failures: string[] = [];
  for (const path of paths) {
    const config = completeModelConfig(parseModelConfigText(readFileSync(path, 'utf8'), path));
    const bytes = configPb.ModelConfig.encode(toProtoModelConfig(config)).finish();
    const back = fromProtoModelConfig(configPb.ModelConfig.decode(bytes));
    const want = modelConfigToJson(config, { emitDefaults: true, int64AsString: false });
    const got = modelConfigToJson(completeModelConfig(back), { emitDefaults: true, int64AsString: false });
    try {
      assert.deepEqual(sameFloat32(got), sameFloat32(want));
    } catch {
      failures.push(path);
    }
  }
  return failures;
}
