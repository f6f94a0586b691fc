import assert from 'node:assert/strict';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { describe, it } from 'node:test';
import type { ModelConfig } from '../config/model-config.js';
import { silentLogger } from '../observability/logger.js';
import type { PreparedModel } from './config-loader.js';
import { ModelManager, type Servable, type VersionFactory } from './model-manager.js';
import { unloadWaves } from './unload-order.js';

const graph = (entries: Record<string, string[]>) => new Map(Object.entries(entries));

describe('unloadWaves', () => {
  it('unloads models without dependencies together, in one sorted wave', () => {
    assert.deepEqual(unloadWaves(graph({ b: [], a: [], c: [] })), [['a', 'b', 'c']]);
    assert.deepEqual(unloadWaves(graph({})), []);
  });

  it('unloads an ensemble before the models its steps use', () => {
    assert.deepEqual(unloadWaves(graph({ pre: [], post: [], pipeline: ['pre', 'model', 'post'], model: [], other: [] })), [
      ['other', 'pipeline'],
      ['model', 'post', 'pre'],
    ]);
  });

  it('waits for every user of a shared model, across nested ensembles', () => {
    // outer uses inner and a; inner uses a and b.
    assert.deepEqual(unloadWaves(graph({ a: [], b: [], inner: ['a', 'b'], outer: ['inner', 'a'] })), [['outer'], ['inner'], ['a', 'b']]);
  });

  it('ignores dependencies on unknown models, repeats and self references', () => {
    assert.deepEqual(unloadWaves(graph({ e: ['gone', 'm', 'm', 'e'], m: [] })), [['e'], ['m']]);
  });

  it('puts models on a cycle in a last wave instead of never unloading them', () => {
    assert.deepEqual(unloadWaves(graph({ x: ['y'], y: ['x'], top: ['x'], free: [] })), [['free', 'top'], ['x', 'y']]);
  });
});

/** A version whose unload takes a little while and records when it started and ended. */
class RecordingVersion implements Servable {
  constructor(
    readonly config: ModelConfig,
    readonly events: string[],
  ) {}
  async unload(): Promise<void> {
    this.events.push(`start ${this.config.name}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
    this.events.push(`end ${this.config.name}`);
  }
}

describe('ModelManager.shutdown', () => {
  it('unloads an ensemble, and only then the models its steps use', async () => {
    const repo = await mkdtemp(join(tmpdir(), 'nereid-unload-order-'));
    const write = async (path: string, content: string) => {
      await mkdir(dirname(join(repo, path)), { recursive: true });
      await writeFile(join(repo, path), content);
    };
    const tensors = (a: string, b: string) =>
      `input [ { name: "${a}" data_type: TYPE_FP32 dims: [ 1 ] } ]\noutput [ { name: "${b}" data_type: TYPE_FP32 dims: [ 1 ] } ]\n`;
    try {
      for (const m of ['a', 'b', 'lone']) await write(`${m}/config.pbtxt`, `name: "${m}"\nbackend: "fake"\n${tensors('x', 'y')}`);
      await write(
        'pipeline/config.pbtxt',
        `name: "pipeline"\nplatform: "ensemble"\n${tensors('IN', 'OUT')}` +
          'ensemble_scheduling { step [ { model_name: "a" model_version: -1 input_map { key: "x" value: "IN" } output_map { key: "y" value: "T" } }, ' +
          '{ model_name: "b" model_version: -1 input_map { key: "x" value: "T" } output_map { key: "y" value: "OUT" } } ] }\n',
      );
      for (const m of ['a', 'b', 'lone', 'pipeline']) await write(`${m}/1/.keep`, '');
      const events: string[] = [];
      const factory: VersionFactory<RecordingVersion> = { load: async (p: PreparedModel) => new RecordingVersion(p.config, events) };
      const manager = new ModelManager(
        { repositories: [repo], controlMode: 'none', loadThreadCount: 4, logger: silentLogger(), autoCompleteConfig: true, modelConfigName: '' },
        factory,
      );
      assert.deepEqual(await manager.startup(), []);
      await manager.shutdown();
      const at = (e: string) => events.indexOf(e);
      assert.equal(events.length, 8, events.join(', '));
      assert.ok(at('end pipeline') < at('start a') && at('end pipeline') < at('start b'), events.join(', '));
      // Models nobody uses go in the first wave, with the ensemble.
      assert.ok(at('start lone') < at('end pipeline'), events.join(', '));
    } finally {
      await rm(repo, { recursive: true, force: true });
    }
  });
});
