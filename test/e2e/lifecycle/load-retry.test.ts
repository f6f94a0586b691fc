/**
 * `--model-load-retry-count` (models-and-scheduling.md §1.10 item 5): a version load that fails is
 * attempted again, up to N more times, each retry logged. The model file of the test model is
 * missing at first; the logger writes it when the server logs the first retry, which happens
 * before the next attempt starts, so which attempt succeeds does not depend on timing.
 */
import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterEach, describe, it } from 'node:test';
import { Server, createLogger, type Logger } from '@nereid/server';
import { makeRepository, removeDir } from '../../helpers/harness.js';
import { TAGGED_WIDTH, taggedConfig, taggedOnnx } from '../../helpers/lifecycle.js';

/** A logger that keeps warnings, and calls `onWarning` with each as it is logged. */
function capturingLogger(onWarning: (line: string) => void = () => undefined): { logger: Logger; warnings: string[] } {
  const warnings: string[] = [];
  const base = createLogger({ info: false, warning: false, error: false });
  return {
    warnings,
    logger: {
      ...base,
      warning: (m: string) => {
        warnings.push(m);
        onWarning(m);
      },
    },
  };
}

const retryLines = (warnings: readonly string[]) => warnings.filter((w) => /^failed to load 'late' version 1 \(attempt \d+ of \d+\): .*; retrying$/.test(w));

describe('--model-load-retry-count', () => {
  let repo: string | undefined;
  let server: Server | undefined;

  afterEach(async () => {
    await server?.stop();
    if (repo !== undefined) await removeDir(repo);
    server = undefined;
    repo = undefined;
  });

  /** A repository whose model 'late' has its configuration and version directory but no model file yet. */
  async function start(retries: number | undefined, onWarning?: (line: string, modelFile: string) => void): Promise<{ warnings: string[]; modelFile: string }> {
    repo = await makeRepository({ late: { 'config.pbtxt': taggedConfig('late'), '1/.keep': '' } });
    const modelFile = join(repo, 'late', '1', 'model.onnx');
    const captured = capturingLogger((line) => onWarning?.(line, modelFile));
    server = new Server({
      modelRepositories: [repo],
      modelControlMode: 'explicit',
      logger: captured.logger,
      ...(retries === undefined ? {} : { modelLoadRetryCount: retries }),
    });
    await server.load();
    return { warnings: captured.warnings, modelFile };
  }

  it('retries a failed load: the model file that appears after the first attempt is loaded', async () => {
    const { warnings } = await start(2, (line, modelFile) => {
      if (line.startsWith("failed to load 'late' version 1 (attempt 1 of 3)")) writeFileSync(modelFile, taggedOnnx(5));
    });
    await server!.loadModel('late');
    const lines = retryLines(warnings);
    assert.equal(lines.length, 1, warnings.join('\n'));
    assert.match(lines[0]!, /model\.onnx/, 'the retry line says why the attempt failed');
    const index = await server!.repositoryIndex();
    assert.deepEqual(index.map((e) => [e.name, e.version, e.state]), [['late', '1', 'READY']]);
    const answer = await server!.infer({
      model: 'late',
      inputs: [{ name: 'INPUT0', datatype: 'INT32', shape: [1, TAGGED_WIDTH], data: Int32Array.of(1, 2, 3, 4) }],
    });
    assert.deepEqual([...new Int32Array(new Uint8Array(answer.outputs[0]!.data).buffer)], [6, 7, 8, 9]);
  });

  it('by default a failed load is not retried', async () => {
    let wrote = false;
    const { warnings } = await start(undefined, (_line, modelFile) => {
      writeFileSync(modelFile, taggedOnnx(5));
      wrote = true;
    });
    await assert.rejects(server!.loadModel('late'), /load failed for model 'late': version 1 is at UNAVAILABLE state: .*model\.onnx/);
    assert.equal(wrote, false);
    assert.deepEqual(retryLines(warnings), []);
    const index = await server!.repositoryIndex();
    assert.deepEqual(index.map((e) => [e.name, e.version, e.state]), [['late', '1', 'UNAVAILABLE']]);
  });

  it('gives up after the last retry, logging each, and reports the last failure', async () => {
    const { warnings } = await start(2);
    await assert.rejects(server!.loadModel('late'), /load failed for model 'late': version 1 is at UNAVAILABLE state: .*model\.onnx/);
    assert.deepEqual(
      retryLines(warnings).map((l) => l.slice(0, l.indexOf(')') + 1)),
      ["failed to load 'late' version 1 (attempt 1 of 3)", "failed to load 'late' version 1 (attempt 2 of 3)"],
    );
    // The server keeps serving: a later load, once the file is there, succeeds.
    writeFileSync(join(repo!, 'late', '1', 'model.onnx'), taggedOnnx(5));
    await server!.loadModel('late');
    assert.equal(server!.isModelReady('late'), true);
  });
});
