/**
 * The text-recognition example (examples/ocr): one ensemble request, a PNG in and its text out,
 * through JavaScript pre-processing, the PaddleOCR detector, line cropping, the recognizer and
 * CTC decoding. Images are rendered with Debian's python3-pil and the DejaVu fonts.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { access, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { HttpClient } from '@nereid/client';
import { REPO_ROOT } from '../../helpers/cli.js';
import { refusal, startServer, type RunningServer } from '../../helpers/harness.js';
import { requirePython, runPython } from '../../helpers/python.js';

const run = promisify(execFile);
const REPOSITORY = join(REPO_ROOT, 'examples', 'ocr', 'model_repository');
const CLIENT = join(REPO_ROOT, 'examples', 'ocr', 'client.mjs');
const FONT = '/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf';

/** Renders `lines` (black on white, 40 px DejaVu Sans, 70 px apart) into a PNG file. */
async function render(file: string, lines: readonly string[], size: [number, number] = [480, 70 * lines.length + 30]): Promise<Buffer> {
  await runPython(
    `import json, sys
from PIL import Image, ImageDraw, ImageFont
lines = json.loads(sys.argv[2])
image = Image.new('RGB', (${size[0]}, ${size[1]}), 'white')
draw = ImageDraw.Draw(image)
font = ImageFont.truetype(${JSON.stringify(FONT)}, 40)
for i, line in enumerate(lines):
    draw.text((30, 20 + 70 * i), line, fill='black', font=font)
image.save(sys.argv[1])`,
    [file, JSON.stringify(lines)],
  );
  return readFile(file);
}

describe('example: text recognition pipeline (ensemble of JS steps and PaddleOCR models)', () => {
  let srv: RunningServer;
  let http: HttpClient;
  let dir: string;
  let twoLines: Buffer;

  before(async () => {
    await requirePython(['PIL']);
    await access(FONT).catch(() => {
      throw new Error(`${FONT} is missing: install fonts-dejavu-core (apt-get install -y fonts-dejavu-core), or run npm test, which installs it`);
    });
    srv = await startServer({ modelRepositories: [REPOSITORY] });
    http = new HttpClient(srv.url);
    dir = await mkdtemp(join(tmpdir(), 'nereid-ocr-'));
    twoLines = await render(join(dir, 'two-lines.png'), ['NEREID 2026', 'hello world']);
  });

  after(async () => {
    await srv?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  const ocr = (png: Uint8Array) => http.infer({ model: 'ocr', inputs: [{ name: 'IMAGE', datatype: 'BYTES', shape: [1], data: [png] }] });

  it('the client prints the rendered lines, top to bottom', async () => {
    const { stdout } = await run(process.execPath, [CLIENT, '--url', srv.url, join(dir, 'two-lines.png')]);
    const lines = stdout.trim().split('\n').map((l) => l.split('\t')[0]);
    assert.equal(lines.length, 2, stdout);
    // The recognizer (trained mostly on Chinese text) may drop the space between a word and a number.
    assert.equal(lines[0]!.replace(/\s+/g, ''), 'NEREID2026', stdout);
    assert.equal(lines[1], 'hello world', stdout);
  });

  it('answers TEXT, CONFIDENCE and BOXES that locate each line in the image', async () => {
    const result = await ocr(twoLines);
    assert.deepEqual(result.shape('TEXT'), [2]);
    assert.deepEqual(result.shape('BOXES'), [2, 4]);
    const boxes = [...(result.typed('BOXES') as Int32Array)];
    // Line i is drawn at x = 30, y = 20 + 70 i, about 40 px high.
    for (const [i, [x0, y0, x1, y1]] of [boxes.slice(0, 4), boxes.slice(4)].entries()) {
      assert.ok(x0! >= 15 && x0! <= 40 && y0! >= 10 + 70 * i && y0! <= 35 + 70 * i && y1! > y0! + 20 && y1! <= 75 + 70 * i && x1! > 200, `box ${i}: ${[x0, y0, x1, y1]}`);
    }
    for (const c of result.typed('CONFIDENCE') as Float32Array) assert.ok(c > 0.8 && c <= 1, `confidence ${c}`);
  });

  it('reads a larger, wider image scaled down for the detector', async () => {
    const png = await render(join(dir, 'wide.png'), ['Triton protocols'], [1400, 300]);
    const result = await ocr(png);
    assert.deepEqual(result.strings('TEXT'), ['Triton protocols']);
  });

  it('an image without text gives no lines', async () => {
    const result = await ocr(await render(join(dir, 'blank.png'), []));
    assert.deepEqual(result.shape('TEXT'), [0]);
    assert.deepEqual(result.shape('BOXES'), [0, 4]);
  });

  it('a malformed PNG fails that request alone, naming the model and the input', async () => {
    const good = ocr(twoLines);
    const cases: [string, Uint8Array, RegExp][] = [
      ['not a PNG', Buffer.from('GIF89a this is not a png'), /is not a PNG image/],
      ['truncated', twoLines.subarray(0, Math.floor(twoLines.length / 2)), /truncated PNG image/],
      ['corrupt data', Buffer.concat([twoLines.subarray(0, 60), Buffer.alloc(200, 7), twoLines.subarray(260)]), /is not a valid PNG image/],
    ];
    const failures = await Promise.all(cases.map(([, png]) => refusal(ocr(png))));
    failures.forEach((err, i) => {
      assert.equal(err.status, 400, `${cases[i]![0]}: ${err.message}`);
      assert.match(err.message, /model 'ocr_preprocess': input 'IMAGE'/, cases[i]![0]);
      assert.match(err.message, /in ensemble 'ocr'/, cases[i]![0]);
      assert.match(err.message, cases[i]![2], cases[i]![0]);
    });
    assert.equal((await good).strings('TEXT')[1], 'hello world', 'the request sent with them is answered');
    assert.equal((await ocr(twoLines)).strings('TEXT')[1], 'hello world', 'the pipeline serves after them');
  });

  it('an image of too many pixels is refused before it is decoded', async () => {
    const png = Buffer.from(twoLines);
    png.writeUInt32BE(100_000, 16);
    png.writeUInt32BE(100_000, 20);
    const err = await refusal(ocr(png));
    assert.equal(err.status, 400);
    assert.match(err.message, /model 'ocr_preprocess': input 'IMAGE' is 100000×100000 pixels/);
  });

  it('an IMAGE of the wrong datatype or shape is refused by the ensemble', async () => {
    const dtype = await refusal(http.infer({ model: 'ocr', inputs: [{ name: 'IMAGE', datatype: 'UINT8', shape: [1], data: new Uint8Array(1) }] }));
    assert.equal(dtype.status, 400);
    assert.match(dtype.message, /ocr/);
    assert.match(dtype.message, /IMAGE/);
    const shape = await refusal(http.infer({ model: 'ocr', inputs: [{ name: 'IMAGE', datatype: 'BYTES', shape: [2], data: [twoLines, twoLines] }] }));
    assert.equal(shape.status, 400);
    assert.match(shape.message, /IMAGE/);
  });
});
