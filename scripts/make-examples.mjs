#!/usr/bin/env node
// Writes the generated ONNX files of the example model repository (examples/model_repository/
// <model>/1/model.onnx). Their config.pbtxt files are committed; the .onnx files are not (see
// .gitignore). Runs after `tsc -b`: the models come from the testkit build. A file that already
// holds the right bytes is left alone, so running this again is cheap and changes nothing.
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const testkitEntry = join(root, 'packages', 'testkit', 'dist', 'index.js');
if (!existsSync(testkitEntry)) {
  console.error(`make-examples: ${relative(root, testkitEntry)} is missing; run \`npx tsc -b\` first`);
  process.exit(1);
}
const { mlpModel, simpleIdentityModel, simpleInt8Model, simpleModel, simpleStringModel } = await import(pathToFileURL(testkitEntry).href);

const repository = join(root, 'examples', 'model_repository');

for (const model of [simpleModel(), simpleStringModel(), simpleIdentityModel(), simpleInt8Model(), mlpModel()]) {
  const file = join(repository, model.name, '1', 'model.onnx');
  const bytes = Buffer.from(model.onnx.bytes);
  const current = existsSync(file) ? await readFile(file) : undefined;
  const status = current?.equals(bytes) ? 'up to date' : 'written';
  if (status === 'written') {
    await mkdir(dirname(file), { recursive: true });
    await writeFile(file, bytes);
  }
  console.log(`${model.name}: ${relative(root, file)} ${status} (${bytes.length} bytes)`);
}
