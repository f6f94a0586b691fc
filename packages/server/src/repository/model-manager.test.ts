/**
 * The model manager with a fake version factory: what a reload loads again and what it keeps, the
 * atomic switch, failed reloads, the load pool, control modes, polling and the dependency rules
 * of models-and-scheduling.md §1.9–§1.11 (ensembles cannot be served yet; the manager's side of
 * them is tested here).
 */
import assert from 'node:assert/strict';
import { mkdtemp, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { NereidError } from '@nereid/protocol';
import type { ModelConfig } from '../config/model-config.js';
import { silentLogger, type Logger } from '../observability/logger.js';
import type { PreparedModel } from './config-loader.js';
import { overridePathSegments, OverrideDirectory } from './file-override.js';
import { ModelManager, type ControlMode, type PendingUpdate, type Servable, type VersionFactory } from './model-manager.js';

/** A version copy: `token` is the content of its model file, to tell copies apart. */
class FakeVersion implements Servable {
  unloaded = false;
  constructor(
    public config: ModelConfig,
    readonly version: number,
    readonly token: string,
  ) {}
  async unload(): Promise<void> {
    this.unloaded = true;
  }
}

class FakeFactory implements VersionFactory<FakeVersion> {
  readonly loads: string[] = [];
  active = 0;
  maxActive = 0;
  /** While set, loads wait for it. */
  gate: Promise<void> | undefined;

  async load(model: PreparedModel, version: number): Promise<FakeVersion> {
    this.active++;
    this.maxActive = Math.max(this.maxActive, this.active);
    try {
      if (this.gate) await this.gate;
      const name = model.location.name;
      this.loads.push(`${name}/${version}`);
      if (model.config.platform === 'ensemble') return new FakeVersion(model.config, version, 'ensemble');
      const token = (await readFile(join(model.location.directory, String(version), 'model.fake'), 'utf8')).trim();
      if (token === 'broken') throw new NereidError('MODEL_LOAD_FAILED', `model '${name}' version ${version}: the model file is corrupt`);
      return new FakeVersion(model.config, version, token);
    } finally {
      this.active--;
    }
  }
}

const TENSORS = 'input [ { name: "x" data_type: TYPE_FP32 dims: [ 1 ] } ]\noutput [ { name: "y" data_type: TYPE_FP32 dims: [ 1 ] } ]\n';

function fakeConfig(name: string, extra = ''): string {
  return `name: "${name}"\nbackend: "fake"\nmax_batch_size: 0\n${TENSORS}${extra}`;
}

function ensembleConfig(name: string, steps: string[]): string {
  const chain = steps.map((model, i) => {
    const from = i === 0 ? 'IN' : `T${i}`;
    const to = i === steps.length - 1 ? 'OUT' : `T${i + 1}`;
    return `{ model_name: "${model}" model_version: -1 input_map { key: "x" value: "${from}" } output_map { key: "y" value: "${to}" } }`;
  });
  return (
    `name: "${name}"\nplatform: "ensemble"\nmax_batch_size: 0\n` +
    'input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]\noutput [ { name: "OUT" data_type: TYPE_FP32 dims: [ 1 ] } ]\n' +
    `ensemble_scheduling { step [ ${chain.join(', ')} ] }\n`
  );
}

let repo: string;

async function write(path: string, content: string): Promise<void> {
  await mkdir(dirname(join(repo, path)), { recursive: true });
  await writeFile(join(repo, path), content);
}

async function addFake(name: string, versions: Record<number, string>, extra = ''): Promise<void> {
  await write(`${name}/config.pbtxt`, fakeConfig(name, extra));
  for (const [v, token] of Object.entries(versions)) await write(`${name}/${v}/model.fake`, token);
}

async function addEnsemble(name: string, steps: string[]): Promise<void> {
  await write(`${name}/config.pbtxt`, ensembleConfig(name, steps));
  await mkdir(join(repo, name, '1'), { recursive: true });
}

function manager(
  mode: ControlMode,
  factory: VersionFactory<FakeVersion> = new FakeFactory(),
  loadThreadCount = 4,
  loadRetryCount = 0,
  logger: Logger = silentLogger(),
): ModelManager<FakeVersion> {
  return new ModelManager({ repositories: [repo], controlMode: mode, loadThreadCount, loadRetryCount, logger, autoCompleteConfig: true, modelConfigName: '' }, factory);
}

/** A logger that keeps its info lines in `lines`. */
function infoLines(lines: string[]): Logger {
  const logger = silentLogger();
  return { ...logger, info: (message) => void lines.push(message) };
}

/**
 * A factory that also updates copies in place (as the core does for instance counts): a commit
 * gives the copy the new configuration. Versions in `decline` need a full reload; versions in
 * `fail` fail to update.
 */
class InPlaceFactory extends FakeFactory {
  readonly updates: string[] = [];
  readonly discarded: string[] = [];
  decline = new Set<number>();
  fail = new Set<number>();

  async updateInPlace(current: FakeVersion, model: PreparedModel, version: number): Promise<PendingUpdate | undefined> {
    if (this.decline.has(version)) return undefined;
    if (this.fail.has(version)) throw new NereidError('MODEL_LOAD_FAILED', `instance of '${model.location.name}' version ${version} could not be created`);
    const id = `${model.location.name}/${version}`;
    this.updates.push(id);
    return {
      commit: () => void (current.config = model.config),
      discard: async () => void this.discarded.push(id),
    };
  }
}

/** A factory whose first `failures` loads fail. */
class FlakyFactory extends FakeFactory {
  constructor(public failures: number) {
    super();
  }

  override async load(model: PreparedModel, version: number): Promise<FakeVersion> {
    if (this.failures > 0) {
      this.failures--;
      throw new NereidError('MODEL_LOAD_FAILED', `model '${model.location.name}' version ${version}: not there yet`);
    }
    return super.load(model, version);
  }
}

/** `name/version:STATE` for each index entry (`name` alone for one without a state). */
async function states(m: ModelManager<FakeVersion>): Promise<string[]> {
  return (await m.index()).map((e) => (e.state === undefined ? e.name : `${e.name}/${e.version ?? ''}:${e.state}`));
}

/** Lets background unloads settle. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

beforeEach(async () => {
  repo = await mkdtemp(join(tmpdir(), 'nereid-manager-'));
});
afterEach(async () => {
  await rm(repo, { recursive: true, force: true });
});

describe('reloads', () => {
  it('loads again only the versions whose files or configuration changed, and switches to them', async () => {
    await addFake('m', { 1: 'one', 2: 'two' }, 'version_policy: { all: { } }\n');
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    assert.deepEqual(factory.loads.sort(), ['m/1', 'm/2']);
    const v1 = m.resolve('m', '1').servable;
    const v2 = m.resolve('m', '2').servable;

    // Unchanged: a no-op.
    await m.load('m');
    assert.equal(factory.loads.length, 2);

    await write('m/2/model.fake', 'two-b');
    await m.load('m');
    assert.deepEqual(factory.loads.slice(2), ['m/2']);
    assert.equal(m.resolve('m', '1').servable, v1);
    assert.equal(m.resolve('m', '2').servable.token, 'two-b');
    assert.equal(m.resolve('m').servable.token, 'two-b');
    await settle();
    assert.equal(v2.unloaded, true);
    assert.equal(v1.unloaded, false);

    // A configuration change reloads every version.
    await write('m/config.pbtxt', fakeConfig('m', 'version_policy: { all: { } }\nparameters { key: "k" value: { string_value: "v" } }\n'));
    await m.load('m');
    assert.deepEqual(factory.loads.slice(3).sort(), ['m/1', 'm/2']);
    await settle();
    assert.equal(v1.unloaded, true);
    await m.shutdown();
  });

  it('a new version under latest { 1 } replaces the old one; a removed one is unloaded', async () => {
    await addFake('m', { 1: 'one' });
    const m = manager('explicit');
    await m.startup(['m']);
    const one = m.resolve('m').servable;
    await write('m/2/model.fake', 'two');
    await m.load('m');
    assert.equal(m.resolve('m').version, 2);
    await settle();
    assert.equal(one.unloaded, true);
    assert.deepEqual(await states(m), ['m/1:UNAVAILABLE', 'm/2:READY']);
    assert.equal((await m.index()).find((e) => e.version === '1')!.reason, 'unloaded');
    const err = (() => {
      try {
        m.resolve('m', '1');
      } catch (e) {
        return e as NereidError;
      }
    })();
    assert.equal(err?.code, 'MODEL_VERSION_NOT_READY');
    assert.match(err!.message, /version 1 is not at ready state; ready versions: 2$/);
    await m.shutdown();
  });

  it('keeps serving while new copies load, and a failed reload leaves the old copies serving', async () => {
    await addFake('m', { 1: 'one' });
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    const one = m.resolve('m').servable;

    let open!: () => void;
    factory.gate = new Promise((resolve) => (open = resolve));
    await write('m/1/model.fake', 'one-b');
    const reload = m.load('m');
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(m.resolve('m').servable, one, 'the old copy serves while the new one loads');
    assert.deepEqual(await states(m), ['m/1:READY']);
    factory.gate = undefined;
    open();
    await reload;
    assert.equal(m.resolve('m').servable.token, 'one-b');

    const current = m.resolve('m').servable;
    await write('m/1/model.fake', 'broken');
    await assert.rejects(m.load('m'), (err: NereidError) => {
      assert.equal(err.code, 'MODEL_LOAD_FAILED');
      assert.match(err.message, /^load failed for model 'm': version 1 is at UNAVAILABLE state: .*corrupt;$/);
      return true;
    });
    assert.equal(m.resolve('m').servable, current);
    const [entry] = await m.index();
    assert.equal(entry!.state, 'READY');
    assert.match(entry!.reason!, /^reload failed, this version keeps serving its previous copy: .*corrupt/);
    assert.equal(m.allReady(), true);

    // A configuration that no longer parses: same.
    await write('m/1/model.fake', 'one-c');
    await write('m/config.pbtxt', 'name: "m"\nbackend: "fake"\nmax_batch_size: [\n');
    await assert.rejects(m.load('m'), /failed to load 'm', failed to poll from model repository: .*config\.pbtxt:3:\d+: /);
    assert.equal(m.resolve('m').servable, current);
    await m.shutdown();
  });

  it('a failed first load makes strict readiness false; a model still loading does not', async () => {
    await addFake('good', { 1: 'g' });
    await addFake('bad', { 1: 'broken' });
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup(['good']);
    assert.equal(m.allReady(), true);
    let open!: () => void;
    factory.gate = new Promise((resolve) => (open = resolve));
    const loading = m.load('bad');
    // The load reaches the factory (and waits at the gate) after reading the repository.
    for (let i = 0; i < 500 && factory.active === 0; i++) await new Promise((resolve) => setTimeout(resolve, 10));
    assert.deepEqual(await states(m), ['bad/1:LOADING', 'good/1:READY']);
    assert.equal(m.allReady(), true);
    factory.gate = undefined;
    open();
    await assert.rejects(loading, /version 1 is at UNAVAILABLE state/);
    assert.equal(m.allReady(), false);
    await m.unload('bad');
    assert.equal(m.allReady(), true);
    await m.shutdown();
  });

  it('loads at most loadThreadCount models at once', async () => {
    for (const name of ['a', 'b', 'c', 'd', 'e']) await addFake(name, { 1: name });
    const factory = new FakeFactory();
    let open!: () => void;
    factory.gate = new Promise((resolve) => (open = resolve));
    const m = manager('none', factory, 2);
    const started = m.startup();
    for (let i = 0; i < 200 && factory.active < 2; i++) await new Promise((resolve) => setTimeout(resolve, 5));
    await new Promise((resolve) => setTimeout(resolve, 20));
    assert.equal(factory.active, 2);
    open();
    assert.deepEqual(await started, []);
    assert.equal(factory.maxActive, 2);
    assert.equal(factory.loads.length, 5);
    await m.shutdown();
  });
});

describe('in-place updates (instance groups, §1.10)', () => {
  const groups = (n: number) => `version_policy: { all: { } }\ninstance_group [ { kind: KIND_CPU count: ${n} } ]\n`;
  const count = (v: FakeVersion) => v.config.instance_group[0]!.count;

  it('a change of instance groups only updates the serving copies; any other change loads new ones', async () => {
    await addFake('m', { 1: 'one', 2: 'two' }, groups(1));
    const factory = new InPlaceFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    const v1 = m.resolve('m', '1').servable;
    const v2 = m.resolve('m', '2').servable;
    await write('m/config.pbtxt', fakeConfig('m', groups(3)));
    await m.load('m');
    assert.deepEqual(factory.updates.sort(), ['m/1', 'm/2']);
    assert.equal(factory.loads.length, 2, 'no new copy');
    assert.equal(m.resolve('m', '1').servable, v1);
    assert.equal(count(v1), 3);
    assert.equal(count(v2), 3);
    // The same again is a no-op.
    await m.load('m');
    assert.equal(factory.updates.length, 2);
    // A count change with something else: new copies.
    await write('m/config.pbtxt', fakeConfig('m', groups(2) + 'parameters { key: "k" value: { string_value: "v" } }\n'));
    await m.load('m');
    assert.equal(factory.updates.length, 2);
    assert.deepEqual(factory.loads.slice(2).sort(), ['m/1', 'm/2']);
    await settle();
    assert.equal(v1.unloaded, true);
    await m.shutdown();
  });

  it('all or nothing: one version failing discards the others\' prepared updates; a declined one is reloaded', async () => {
    await addFake('m', { 1: 'one', 2: 'two' }, groups(1));
    const factory = new InPlaceFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    const v1 = m.resolve('m', '1').servable;
    const v2 = m.resolve('m', '2').servable;
    factory.fail.add(2);
    await write('m/config.pbtxt', fakeConfig('m', groups(4)));
    await assert.rejects(m.load('m'), /load failed for model 'm': version 2 is at UNAVAILABLE state: instance of 'm' version 2 could not be created;$/);
    assert.deepEqual(factory.discarded, ['m/1']);
    assert.equal(count(v1), 1);
    assert.equal(count(v2), 1);
    assert.deepEqual(await states(m), ['m/1:READY', 'm/2:READY']);
    assert.match((await m.index()).find((e) => e.version === '2')!.reason ?? '', /^reload failed, this version keeps serving its previous copy: instance of 'm'/);

    factory.fail.clear();
    factory.decline.add(2);
    await m.load('m');
    assert.equal(m.resolve('m', '1').servable, v1);
    assert.equal(count(v1), 4);
    assert.notEqual(m.resolve('m', '2').servable, v2);
    assert.deepEqual(factory.loads.slice(2), ['m/2']);
    assert.deepEqual((await m.index()).map((e) => e.reason ?? ''), ['', '']);
    await m.shutdown();
  });
});

describe('load retries (--model-load-retry-count)', () => {
  it('a version load is attempted 1 + N times', async () => {
    await addFake('m', { 1: 'one' });
    const m = manager('explicit', new FlakyFactory(2), 4, 2);
    await m.startup([]);
    await m.load('m');
    assert.equal(m.resolve('m').servable.token, 'one');
    await m.shutdown();

    const fewer = manager('explicit', new FlakyFactory(2), 4, 1);
    await fewer.startup([]);
    await assert.rejects(fewer.load('m'), /load failed for model 'm': version 1 is at UNAVAILABLE state: model 'm' version 1: not there yet;$/);
    await fewer.load('m');
    assert.deepEqual(await states(fewer), ['m/1:READY']);
    await fewer.shutdown();
  });
});

describe('the loading: log line', () => {
  const loading = (lines: readonly string[]) => lines.filter((l) => l.startsWith('loading: '));

  it('is logged as each new copy of a version starts loading, at start-up and on load requests', async () => {
    await addFake('m', { 1: 'one', 2: 'two' }, 'version_policy: { all: { } }\n');
    const lines: string[] = [];
    const factory = new FakeFactory();
    const m = manager('explicit', factory, 4, 0, infoLines(lines));
    let release!: () => void;
    factory.gate = new Promise((resolve) => (release = resolve));
    const started = m.startup(['m']);
    // Start-up reads the repository first (file I/O): wait for both loads, up to a generous limit.
    const deadline = Date.now() + 10_000;
    while (factory.active < 2 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 5));
    // Both loads are under way and held: the lines came when they started, not when they ended.
    assert.equal(factory.active, 2);
    assert.deepEqual(loading(lines).sort(), ['loading: m:1', 'loading: m:2']);
    assert.equal(lines.filter((l) => l.startsWith('successfully loaded')).length, 0);
    factory.gate = undefined;
    release();
    await started;

    // Unchanged files: nothing loads, nothing is logged. A changed version: that one.
    await m.load('m');
    assert.equal(loading(lines).length, 2);
    await write('m/2/model.fake', 'two-b');
    await m.load('m');
    assert.deepEqual(loading(lines).slice(2), ['loading: m:2']);
    await m.shutdown();
  });

  it('is logged for the loads a poll starts, once per version even when its load is retried', async () => {
    const lines: string[] = [];
    const m = manager('poll', new FlakyFactory(1), 4, 1, infoLines(lines));
    await m.startup();
    await addFake('p', { 3: 'three' });
    await m.poll();
    assert.deepEqual(await states(m), ['p/3:READY']);
    assert.deepEqual(loading(lines), ['loading: p:3']);
    await m.shutdown();
  });
});

describe('control modes', () => {
  it('none and poll refuse load and unload with UNAVAILABLE', async () => {
    await addFake('m', { 1: 'one' });
    for (const mode of ['none', 'poll'] as const) {
      const m = manager(mode);
      await m.startup();
      for (const call of [() => m.load('m'), () => m.unload('m')]) {
        await assert.rejects(call(), (err: NereidError) => {
          assert.equal(err.code, 'MODEL_CONTROL_DISABLED');
          assert.equal(err.kind, 'UNAVAILABLE');
          assert.equal(err.message, 'explicit model load / unload is not allowed if polling is enabled');
          return true;
        });
      }
      await m.shutdown();
    }
  });

  it('explicit mode loads only the named models at start, every model with *', async () => {
    await addFake('a', { 1: 'a' });
    await addFake('b', { 1: 'b' });
    let m = manager('explicit');
    assert.deepEqual(await m.startup(['a']), []);
    assert.deepEqual(await states(m), ['a/1:READY', 'b']);
    await m.shutdown();
    m = manager('explicit');
    await m.startup(['*']);
    assert.deepEqual(await states(m), ['a/1:READY', 'b/1:READY']);
    await m.shutdown();
    m = manager('explicit');
    const failures = await m.startup(['nope']);
    assert.equal(failures.length, 1);
    assert.match(failures[0]!.reason, /^failed to load 'nope', failed to poll from model repository/);
    await m.shutdown();
  });

  it('refuses bad names and unknown models with the protocol errors', async () => {
    const m = manager('explicit');
    await m.startup();
    for (const name of ['', '  ', 'a/b', '..']) {
      await assert.rejects(m.load(name), (err: NereidError) => err.code === 'MODEL_NAME_INVALID' && err.kind === 'INVALID_ARG');
    }
    await assert.rejects(m.load('nope'), (err: NereidError) => {
      assert.equal(err.kind, 'INTERNAL');
      assert.match(err.message, /^failed to load 'nope', failed to poll from model repository/);
      return true;
    });
    await m.unload('nope');
    await m.shutdown();
  });

  it('poll picks up a new model, a changed one, a removed one; a failed one is tried again', async () => {
    const m = manager('poll');
    await m.startup();
    assert.deepEqual(await states(m), []);
    await addFake('m', { 1: 'broken' });
    await m.poll();
    assert.deepEqual(await states(m), ['m/1:UNAVAILABLE']);
    await write('m/1/model.fake', 'one');
    await m.poll();
    assert.deepEqual(await states(m), ['m/1:READY']);
    assert.equal(m.resolve('m').servable.token, 'one');
    await m.poll();
    assert.equal(m.resolve('m').servable.token, 'one');
    await rm(join(repo, 'm'), { recursive: true });
    await m.poll();
    await settle();
    assert.deepEqual(await states(m), ['m/1:UNAVAILABLE']);
    assert.equal(m.allReady(), true);
    await m.shutdown();
  });
});

describe('dependencies (ensembles)', () => {
  beforeEach(async () => {
    await addFake('a', { 1: 'a' });
    await addFake('b', { 1: 'b' });
  });

  it('loading an ensemble loads its composing models first; unloading one unloads the ensemble', async () => {
    await addEnsemble('e', ['a', 'b']);
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup();
    await m.load('e');
    assert.deepEqual(factory.loads, ['a/1', 'b/1', 'e/1']);
    assert.deepEqual(await states(m), ['a/1:READY', 'b/1:READY', 'e/1:READY']);

    await m.unload('a');
    await settle();
    const index = await m.index();
    assert.deepEqual(await states(m), ['a/1:UNAVAILABLE', 'b/1:READY', 'e/1:UNAVAILABLE']);
    assert.equal(index.find((e) => e.name === 'e')!.reason, "unloaded: composing model 'a' was unloaded");
    await m.shutdown();
  });

  it('unload_dependents also unloads composing models nothing else needs and nobody loaded by name', async () => {
    await addEnsemble('e', ['a', 'b']);
    await addEnsemble('f', ['b']);
    const m = manager('explicit');
    await m.startup();
    await m.load('a');
    await m.load('e');
    await m.load('f');
    await m.unload('e', { unloadDependents: true });
    await settle();
    // a was loaded by name, b is still needed by f.
    assert.deepEqual(await states(m), ['a/1:READY', 'b/1:READY', 'e/1:UNAVAILABLE', 'f/1:READY']);
    await m.unload('f', { unloadDependents: true });
    await settle();
    assert.deepEqual(await states(m), ['a/1:READY', 'b/1:UNAVAILABLE', 'e/1:UNAVAILABLE', 'f/1:UNAVAILABLE']);
    await m.shutdown();
  });

  it('an ensemble with a missing composing model, or in a cycle, fails with the reason', async () => {
    await addEnsemble('e', ['a', 'missing']);
    await addEnsemble('x', ['y']);
    await addEnsemble('y', ['x']);
    const m = manager('explicit');
    await m.startup();
    await assert.rejects(m.load('e'), /ensemble 'e' contains models that are not available or ambiguous: missing/);
    await assert.rejects(m.load('x'), /^NereidError: load failed for model 'x': circular dependency between ensembles: x -> y -> x$/);
    const index = await m.index();
    for (const name of ['x', 'y']) {
      assert.deepEqual(index.find((e) => e.name === name), { name, state: 'UNAVAILABLE', reason: 'circular dependency between ensembles: x -> y -> x' });
    }
    assert.equal(m.readyVersions('a').length, 1, 'the available composing model was loaded');
    assert.equal(m.allReady(), false);
    await m.shutdown();
  });
});

describe('file overrides', () => {
  it('refuses paths that could leave the override directory', () => {
    for (const path of ['../x', '1/../../x', '/etc/passwd', '1/./model.onnx', '1//model.onnx', '', 'a\\..\\b', 'a\0b']) {
      assert.throws(() => overridePathSegments(path), (err: NereidError) => err.code === 'FILE_OVERRIDE_INVALID', path);
    }
    assert.deepEqual(overridePathSegments('1/model.onnx'), ['1', 'model.onnx']);
  });

  it('writes the files into a fresh directory, removed with its last reference', async () => {
    const dir = await OverrideDirectory.create('m', new Map([['1/model.fake', new TextEncoder().encode('x')], ['labels.txt', new Uint8Array(0)]]));
    assert.equal(await readFile(join(dir.location.directory, '1', 'model.fake'), 'utf8'), 'x');
    dir.retain();
    await dir.release();
    assert.equal(await readFile(join(dir.location.directory, 'labels.txt'), 'utf8'), '');
    await dir.release();
    await assert.rejects(readFile(join(dir.location.directory, 'labels.txt')), /ENOENT/);
    await assert.rejects(
      OverrideDirectory.create('m', new Map([['1', new Uint8Array(1)], ['1/model.fake', new Uint8Array(1)]])),
      (err: NereidError) => err.code === 'FILE_OVERRIDE_INVALID' && /collides/.test(err.message),
    );
  });

  it('a load from files replaces the repository copy; the next load without them goes back', async () => {
    await addFake('m', { 1: 'disk' });
    const m = manager('explicit');
    await m.startup(['m']);
    const files = new Map([['1/model.fake', new TextEncoder().encode('sent')]]);
    await assert.rejects(m.load('m', { files }), /^NereidError: failed to load 'm', failed to poll from model repository: Load parameter 'config' must be specified for model file override/);
    const config = JSON.stringify({ name: 'm', backend: 'fake', input: [{ name: 'x', data_type: 'TYPE_FP32', dims: [1] }], output: [{ name: 'y', data_type: 'TYPE_FP32', dims: [1] }] });
    await m.load('m', { config, files });
    assert.equal(m.resolve('m').servable.token, 'sent');
    await m.load('m');
    assert.equal(m.resolve('m').servable.token, 'disk');
    await m.shutdown();
  });
});

describe('version weights', () => {
  const policyAll = 'version_policy: { all: { } }\n';
  const weights = (w: Record<number, number>) => new Map(Object.entries(w).map(([v, n]) => [Number(v), n]));
  const route = (m: ModelManager<FakeVersion>, n: number, version?: string) => {
    const out: Record<number, number> = {};
    for (let i = 0; i < n; i++) {
      const v = m.route('m', version).version;
      out[v] = (out[v] ?? 0) + 1;
    }
    return out;
  };

  it('routes requests that name no version by weight; named versions, resolve and the fallback stay', async () => {
    await addFake('m', { 1: 'one', 2: 'two' }, policyAll);
    const factory = new FakeFactory();
    const lines: string[] = [];
    const m = manager('explicit', factory, 4, 0, infoLines(lines));
    await m.startup(['m']);
    assert.deepEqual(route(m, 10), { 2: 10 });

    await m.load('m', { versionWeights: weights({ 1: 90, 2: 10 }) });
    assert.deepEqual(factory.loads.sort(), ['m/1', 'm/2'], 'new weights for the same files load nothing');
    assert.deepEqual(route(m, 1000), { 1: 900, 2: 100 });
    assert.deepEqual(route(m, 1000, '-1'), { 1: 900, 2: 100 });
    assert.deepEqual(route(m, 5, '1'), { 1: 5 });
    assert.deepEqual(route(m, 5, '2'), { 2: 5 });
    assert.equal(m.resolve('m').version, 2, 'metadata lookups keep the highest ready version');
    assert.deepEqual(m.versionWeights(), [
      { model: 'm', version: 1, weight: 90 },
      { model: 'm', version: 2, weight: 10 },
    ]);
    assert.deepEqual(
      (await m.index()).map((e) => [e.version, e.weight]),
      [
        ['1', 90],
        ['2', 10],
      ],
    );
    assert.ok(lines.includes(`model 'm': version weights {"1":90,"2":10} for requests that name no version`), lines.join('\n'));

    // Only version 1 weighted: everything goes there.
    await m.load('m', { versionWeights: weights({ 1: 1, 2: 0 }) });
    assert.deepEqual(route(m, 20), { 1: 20 });

    // {} clears: the highest ready version again.
    await m.load('m', { versionWeights: new Map() });
    assert.deepEqual(route(m, 10), { 2: 10 });
    assert.deepEqual(m.versionWeights(), []);
    assert.ok(lines.some((l) => l.startsWith(`model 'm': version weights cleared`)));
    assert.deepEqual(factory.loads.sort(), ['m/1', 'm/2']);
    await m.shutdown();
  });

  it('the same config with new weights reloads nothing; a changed config still reloads what changed', async () => {
    await addFake('m', { 1: 'one', 2: 'two' }, policyAll);
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    const config = (extra: Record<string, unknown> = {}) =>
      JSON.stringify({
        name: 'm',
        backend: 'fake',
        version_policy: { all: {} },
        input: [{ name: 'x', data_type: 'TYPE_FP32', dims: [1] }],
        output: [{ name: 'y', data_type: 'TYPE_FP32', dims: [1] }],
        ...extra,
      });
    // A config parameter alone always reloads (§1.10).
    await m.load('m', { config: config() });
    assert.equal(factory.loads.length, 4);
    const v1 = m.resolve('m', '1').servable;
    await m.load('m', { config: config(), versionWeights: weights({ 1: 50, 2: 50 }) });
    await m.load('m', { config: config(), versionWeights: weights({ 1: 10, 2: 90 }) });
    assert.equal(factory.loads.length, 4);
    assert.equal(m.resolve('m', '1').servable, v1);
    assert.deepEqual(route(m, 10), { 1: 1, 2: 9 });
    // A weights load without config goes back to the files: the same configuration, nothing reloads.
    await m.load('m', { versionWeights: weights({ 1: 1, 2: 1 }) });
    assert.equal(factory.loads.length, 4);
    await m.load('m', { config: config({ parameters: { k: { string_value: 'v' } } }), versionWeights: weights({ 1: 1, 2: 1 }) });
    assert.equal(factory.loads.length, 6);
    await m.shutdown();
  });

  it('a canary: widening the policy with weights loads only the new version; narrowing it drains the old one', async () => {
    await addFake('m', { 1: 'one', 2: 'two' }, 'version_policy: { specific: { versions: [1] } }\n');
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    const config = (versions: number[]) =>
      JSON.stringify({
        name: 'm',
        backend: 'fake',
        version_policy: { specific: { versions } },
        input: [{ name: 'x', data_type: 'TYPE_FP32', dims: [1] }],
        output: [{ name: 'y', data_type: 'TYPE_FP32', dims: [1] }],
      });
    const stable = m.resolve('m', '1').servable;
    await m.load('m', { config: config([1, 2]), versionWeights: weights({ 1: 90, 2: 10 }) });
    assert.deepEqual(factory.loads, ['m/1', 'm/2'], 'only the canary loads');
    assert.equal(m.resolve('m', '1').servable, stable);
    assert.deepEqual(route(m, 100), { 1: 90, 2: 10 });
    const canary = m.resolve('m', '2').servable;
    await m.load('m', { config: config([2]), versionWeights: weights({ 2: 100 }) });
    assert.deepEqual(factory.loads, ['m/1', 'm/2'], 'promotion loads nothing');
    assert.equal(m.resolve('m', '2').servable, canary);
    assert.deepEqual(route(m, 10), { 2: 10 });
    await settle();
    assert.equal(stable.unloaded, true);
    await m.shutdown();
  });

  it('refuses weights for versions the load does not serve, changing nothing', async () => {
    await addFake('m', { 1: 'one', 2: 'two', 3: 'three' }, 'version_policy: { specific: { versions: [1, 2] } }\n');
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    await m.load('m', { versionWeights: weights({ 1: 50, 2: 50 }) });
    await assert.rejects(
      m.load('m', { versionWeights: weights({ 2: 50, 3: 50 }) }),
      (err: NereidError) => {
        assert.equal(err.code, 'LOAD_PARAMETER');
        assert.equal(
          err.message,
          "load parameter 'version_weights' of model 'm' names version 3, which this load does not serve " +
            '(it serves versions 1, 2, per the version policy in effect after the load); weight only served versions, or widen the load\'s version_policy (its parameter, or the one in its config)',
        );
        return true;
      },
    );
    assert.deepEqual(route(m, 10), { 1: 5, 2: 5 });
    assert.deepEqual(factory.loads.sort(), ['m/1', 'm/2']);
    assert.deepEqual(await states(m), ['m/1:READY', 'm/2:READY']);
    await m.shutdown();
  });

  it('a load without weights keeps them less the versions it no longer serves; a failed load keeps them; unload clears them', async () => {
    await addFake('m', { 1: 'one', 2: 'two', 3: 'three' }, policyAll);
    const m = manager('explicit');
    await m.startup(['m']);
    await m.load('m', { versionWeights: weights({ 1: 1, 2: 1, 3: 2 }) });
    await write('m/config.pbtxt', fakeConfig('m', 'version_policy: { specific: { versions: [1, 2] } }\n'));
    await m.load('m');
    assert.deepEqual(m.versionWeights().map((w) => [w.version, w.weight]), [[1, 1], [2, 1]]);
    assert.deepEqual(route(m, 10), { 1: 5, 2: 5 });

    await write('m/2/model.fake', 'broken');
    await assert.rejects(m.load('m', { versionWeights: weights({ 2: 1 }) }), /the model file is corrupt/);
    assert.deepEqual(route(m, 10), { 1: 5, 2: 5 }, 'weights change only once a load succeeds');

    await m.unload('m');
    assert.deepEqual(m.versionWeights(), []);
    await write('m/2/model.fake', 'two');
    await m.load('m');
    assert.deepEqual(route(m, 4), { 2: 4 });
    await m.shutdown();
  });

  it('weights of versions a reload drops go; with no weight above 0 left, the highest ready version serves', async () => {
    await addFake('m', { 1: 'one', 2: 'two', 3: 'three' }, policyAll);
    const m = manager('explicit');
    await m.startup(['m']);
    await m.load('m', { versionWeights: weights({ 1: 1, 2: 3 }) });
    await write('m/config.pbtxt', fakeConfig('m', 'version_policy: { specific: { versions: [1, 3] } }\n'));
    await m.load('m');
    assert.deepEqual(route(m, 4), { 1: 4 });
    await write('m/config.pbtxt', fakeConfig('m', 'version_policy: { specific: { versions: [3] } }\n'));
    await m.load('m');
    assert.deepEqual(m.versionWeights(), []);
    assert.deepEqual(route(m, 4), { 3: 4 });
    await m.shutdown();
  });
});

describe('version policy overrides (version_policy)', () => {
  const servedConfigs = (m: ModelManager<FakeVersion>) => m.readyServables('m').map((r) => [r.version, r.servable.config.max_batch_size, r.servable.config.input.length]);

  it("applies over the repository's configuration, which keeps its other settings; a change of policy loads only the versions it adds", async () => {
    await write('m/config.pbtxt', `name: "m"\nbackend: "fake"\nmax_batch_size: 8\ndynamic_batching { }\n${TENSORS}`);
    for (const v of [1, 2, 3]) await write(`m/${v}/model.fake`, `v${v}`);
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    assert.deepEqual(m.readyVersions('m'), [3]);

    await m.load('m', { versionPolicy: { specific: { versions: [1, 3] } } });
    assert.deepEqual(m.readyVersions('m'), [1, 3]);
    assert.deepEqual(factory.loads, ['m/3', 'm/1'], 'version 3 stays as it was');
    assert.deepEqual(servedConfigs(m), [
      [1, 8, 1],
      [3, 8, 1],
    ]);
    const served = m.resolve('m', '1').servable.config;
    assert.deepEqual(served.version_policy, { specific: { versions: [1, 3] } });
    assert.notEqual(served.dynamic_batching, undefined, 'batching comes from config.pbtxt');

    const v1 = m.resolve('m', '1').servable;
    await m.load('m', { versionPolicy: { latest: { num_versions: 2 } }, versionWeights: new Map([[2, 1], [3, 1]]) });
    assert.deepEqual(m.readyVersions('m'), [2, 3]);
    assert.deepEqual(factory.loads, ['m/3', 'm/1', 'm/2']);
    await settle();
    assert.equal(v1.unloaded, true, 'a version the policy drops is unloaded');

    // Weights are checked against the versions the policy serves.
    await assert.rejects(m.load('m', { versionPolicy: { specific: { versions: [3] } }, versionWeights: new Map([[2, 1]]) }), (err: NereidError) => {
      assert.equal(err.code, 'LOAD_PARAMETER');
      assert.match(err.message, /names version 2, which this load does not serve \(it serves versions? 3,/);
      return true;
    });
    assert.deepEqual(m.readyVersions('m'), [2, 3]);

    // A load without it goes back to the configuration's policy.
    await m.load('m');
    assert.deepEqual(m.readyVersions('m'), [3]);
    assert.deepEqual(factory.loads, ['m/3', 'm/1', 'm/2'], 'going back reloads nothing');
    assert.equal(m.resolve('m', '3').servable.config.version_policy?.latest?.num_versions, 1, 'the kept copy reports the policy in effect');
    await m.shutdown();
  });

  it('applies over the config parameter when both are given', async () => {
    await addFake('m', { 1: 'one', 2: 'two' });
    const factory = new FakeFactory();
    const m = manager('explicit', factory);
    await m.startup(['m']);
    const config = JSON.stringify({
      name: 'm',
      backend: 'fake',
      max_batch_size: 4,
      version_policy: { latest: { num_versions: 1 } },
      input: [{ name: 'x', data_type: 'TYPE_FP32', dims: [1] }],
      output: [{ name: 'y', data_type: 'TYPE_FP32', dims: [1] }],
    });
    await m.load('m', { config, versionPolicy: { all: {} } });
    assert.deepEqual(servedConfigs(m), [
      [1, 4, 1],
      [2, 4, 1],
    ]);
    await m.shutdown();
  });

  it('an unload forgets it: the next load serves the configuration\'s policy', async () => {
    await addFake('m', { 1: 'one', 2: 'two' });
    const m = manager('explicit');
    await m.startup(['m']);
    await m.load('m', { versionPolicy: { specific: { versions: [1] } } });
    assert.deepEqual(m.readyVersions('m'), [1]);
    await m.unload('m');
    await m.load('m');
    assert.deepEqual(m.readyVersions('m'), [2]);
    await m.shutdown();
  });

  it('a policy that selects no present version fails the load and leaves the serving versions', async () => {
    await addFake('m', { 1: 'one', 2: 'two' });
    const m = manager('explicit');
    await m.startup(['m']);
    await assert.rejects(m.load('m', { versionPolicy: { specific: { versions: [7] } } }), /at least one version must be available under the version policy of model 'm'/);
    assert.deepEqual(m.readyVersions('m'), [2]);
    await m.shutdown();
  });
});
