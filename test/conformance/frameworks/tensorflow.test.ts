/**
 * The TensorFlow backend through Triton's own Python clients (tensorflow.py): Triton's example
 * `simple` model as a GraphDef and as a SavedModel, and `simple_string`, made by the runtimes
 * environment's TensorFlow and driven the way Triton's simple_http/grpc_infer_client and
 * simple_http/grpc_string_infer_client examples drive them, against a `nereid serve` process.
 * The server's log must not carry TensorFlow's start-up chatter.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readdir, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { removeDir, type ModelFiles } from '../../helpers/harness.js';
import { makeTensorFlowModels, requireTensorFlow, simpleConfig } from '../../helpers/tensorflow.js';
import { assertCasePassed, assertCasesAre, requireEnvironment, runCases, startConformanceServer, type CaseResult, type ConformanceServer } from '../helpers/tier.js';

const CASES = [
  'http_simple_graphdef',
  'http_simple_savedmodel',
  'grpc_simple_graphdef',
  'grpc_simple_savedmodel',
  'http_simple_string',
  'grpc_simple_string',
  'http_wrong_datatype_refused',
];

/** The files of a model made into `dir`: its config.pbtxt and every file under 1/. */
async function filesOf(dir: string, config: string): Promise<ModelFiles> {
  const files: ModelFiles = { 'config.pbtxt': config };
  for (const entry of await readdir(join(dir, '1'), { recursive: true, withFileTypes: true })) {
    if (!entry.isFile()) continue;
    const full = join(entry.parentPath, entry.name);
    files[relative(dir, full)] = new Uint8Array(await readFile(full));
  }
  return files;
}

describe('conformance: TensorFlow backend (tritonclient, Triton simple examples)', () => {
  let made: string;
  let srv: ConformanceServer | undefined;
  let results: Map<string, CaseResult> | undefined;

  before(async () => {
    requireEnvironment();
    await requireTensorFlow();
    made = await mkdtemp(join(tmpdir(), 'nereid-tf-conformance-'));
    await makeTensorFlowModels([
      { kind: 'graphdef', model: 'simple', path: join(made, 'simple', '1', 'model.graphdef') },
      { kind: 'savedmodel_v1', model: 'simple', path: join(made, 'simple_savedmodel', '1', 'model.savedmodel') },
      { kind: 'graphdef', model: 'simple_string', path: join(made, 'simple_string', '1', 'model.graphdef') },
    ]);
    srv = await startConformanceServer([
      ['simple', await filesOf(join(made, 'simple'), simpleConfig('simple', 'tensorflow_graphdef'))],
      [
        'simple_savedmodel',
        await filesOf(join(made, 'simple_savedmodel'), simpleConfig('simple_savedmodel', 'tensorflow_savedmodel')),
      ],
      ['simple_string', await filesOf(join(made, 'simple_string'), simpleConfig('simple_string', 'tensorflow_graphdef', 'TYPE_STRING'))],
    ]);
    results = await runCases('frameworks/tensorflow.py', srv.endpoints, { timeoutMs: 180_000 });
  });

  after(async () => {
    await srv?.stop();
    if (made) await removeDir(made);
  });

  for (const name of CASES) it(name, () => assertCasePassed(results, name));
  it('runs exactly the listed cases', () => assertCasesAre(results, CASES));

  it("keeps TensorFlow's start-up chatter out of the server's log", () => {
    const log = srv!.process.output;
    assert.match(log, /successfully loaded 'simple_savedmodel'|loaded 'simple_savedmodel'/i);
    assert.doesNotMatch(log, /oneDNN custom operations|absl::InitializeLog/);
  });
});
