import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { after, describe, it } from 'node:test';
import { findBackendModule, type ModuleSearch } from './module-resolution.js';

const root = mkdtempSync(join(tmpdir(), 'nereid-resolve-'));
after(() => rmSync(root, { recursive: true, force: true }));

function write(path: string, text = 'export default {};\n'): string {
  const full = join(root, path);
  mkdirSync(dirname(full), { recursive: true });
  writeFileSync(full, text);
  return full;
}

function search(model: string, fields: Partial<ModuleSearch> = {}): ModuleSearch {
  return {
    backend: 'b',
    modelDirectory: join(root, 'repo', model),
    versionDirectory: join(root, 'repo', model, '1'),
    runtime: '',
    cwd: join(root, 'cwd'),
    ...fields,
  };
}

describe('findBackendModule', () => {
  it('version directory, then model directory; model.mjs before model.js before model.cjs', () => {
    const inModel = write('repo/m1/model.mjs');
    assert.deepEqual(findBackendModule(search('m1')).found, { path: inModel, origin: 'model directory' });
    const cjs = write('repo/m1/1/model.cjs');
    assert.deepEqual(findBackendModule(search('m1')).found, { path: cjs, origin: 'version directory' });
    const js = write('repo/m1/1/model.js');
    assert.equal(findBackendModule(search('m1')).found?.path, js);
  });

  it("a JS runtime names the file to look for, in the model's directories and the backend directory", () => {
    const custom = write('repo/m2/impl.cjs');
    write('repo/m2/1/model.mjs');
    assert.equal(findBackendModule(search('m2', { runtime: 'impl.cjs' })).found?.path, custom);
    const inBackendDir = write('backends/b/impl.cjs');
    assert.deepEqual(findBackendModule(search('m3', { runtime: 'impl.cjs', backendDirectory: join(root, 'backends') })).found, {
      path: inBackendDir,
      origin: 'backend directory',
    });
  });

  it('a backend directory package: exports (with conditions), main, index files', () => {
    const dir = join(root, 'bd');
    write('bd/b/package.json', JSON.stringify({ exports: { '.': { require: './cjs.cjs', import: './esm.mjs' } } }));
    const esm = write('bd/b/esm.mjs');
    assert.equal(findBackendModule(search('none', { backendDirectory: dir })).found?.path, esm);
    write('bd/c/package.json', JSON.stringify({ main: 'lib/entry' }));
    const entry = write('bd/c/lib/entry.js');
    assert.equal(findBackendModule(search('none', { backend: 'c', backendDirectory: dir })).found?.path, entry);
    const index = write('bd/d/index.cjs');
    assert.equal(findBackendModule(search('none', { backend: 'd', backendDirectory: dir })).found?.path, index);
  });

  it('nereid-backend-<name> in node_modules above the working directory, or the module option', () => {
    write('node_modules/nereid-backend-pkg/package.json', JSON.stringify({ exports: './main.js' }));
    const main = write('node_modules/nereid-backend-pkg/main.js');
    assert.deepEqual(findBackendModule(search('none', { backend: 'pkg' })).found, { path: main, origin: 'package' });
    write('node_modules/@acme/nereid-tok/package.json', JSON.stringify({ main: 'dist/index.js' }));
    const scoped = write('node_modules/@acme/nereid-tok/dist/index.js');
    assert.equal(findBackendModule(search('none', { backend: 'tok', moduleSpecifier: '@acme/nereid-tok' })).found?.path, scoped);
    const relative = write('cwd/local/backend.mjs');
    assert.equal(findBackendModule(search('none', { backend: 'tok', moduleSpecifier: './local/backend.mjs' })).found?.path, relative);
  });

  it('nothing found: every place looked at, in order', () => {
    const r = findBackendModule(search('empty', { backend: 'zz', backendDirectory: join(root, 'bd') }));
    assert.equal(r.found, undefined);
    assert.deepEqual(r.searched, [
      ...['model.mjs', 'model.js', 'model.cjs'].map((f) => join(root, 'repo', 'empty', '1', f)),
      ...['model.mjs', 'model.js', 'model.cjs'].map((f) => join(root, 'repo', 'empty', f)),
      `${join(root, 'bd', 'zz')}/`,
      "module 'nereid-backend-zz'",
    ]);
  });
});
