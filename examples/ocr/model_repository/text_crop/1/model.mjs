/**
 * OCR text-line cropping (custom backend, docs/backends.md).
 *
 * PROB (FP32 [1, 1, h, w], the detector's text probability per pixel) and IMAGE_RGB (UINT8
 * [H, W, 3], the full-size image) → BOXES (INT32 [n, 4]: x0, y0, x1, y1 in image pixels, end
 * exclusive, top to bottom then left to right) and REC_INPUT (FP32 [max(n, 1), 3, 48, width]:
 * each box cut from the image, scaled to 48 pixels high keeping its aspect ratio, BGR,
 * (v / 255 - 0.5) / 0.5, padded on the right with zeros to the widest line and at least 320).
 * With no text, REC_INPUT holds one blank row so the recognizer still has an input; BOXES, which
 * ctc_decode reads, then has no row.
 *
 * DB post-processing (PaddleOCR's DBPostProcess, with upright rectangles instead of rotated
 * ones): pixels above `threshold` form 4-connected regions; each region's bounding box is kept
 * when the mean probability of the region is at least `box_threshold` and its shorter side is at
 * least 3 pixels, then grown on every side by area × `unclip_ratio` / perimeter.
 */
import { NereidError } from '@nereid/protocol';
import { resizeNormalized } from '../../../image.mjs';

const HEIGHT = 48;
const MIN_WIDTH = 320;
const HALF = [0.5, 0.5, 0.5];

/** The FP32 values of a tensor's bytes (a copy: `data` may sit at any offset of a larger buffer). */
function floats(data) {
  return new Float32Array(new Uint8Array(data).buffer);
}

/** Boxes `[x0, y0, x1, y1]` (map pixels, end exclusive) of the text regions of a probability map. */
function findBoxes(prob, w, h, { threshold, boxThreshold, unclipRatio, maxBoxes }) {
  const seen = new Uint8Array(w * h);
  const stack = new Int32Array(w * h);
  const boxes = [];
  for (let start = 0; start < w * h && boxes.length < maxBoxes; start++) {
    if (seen[start] || prob[start] <= threshold) continue;
    let top = 0;
    stack[top++] = start;
    seen[start] = 1;
    let x0 = w, y0 = h, x1 = -1, y1 = -1, sum = 0, count = 0;
    while (top > 0) {
      const p = stack[--top];
      const x = p % w;
      const y = (p - x) / w;
      sum += prob[p];
      count++;
      if (x < x0) x0 = x;
      if (x > x1) x1 = x;
      if (y < y0) y0 = y;
      if (y > y1) y1 = y;
      const neighbours = [x > 0 ? p - 1 : -1, x < w - 1 ? p + 1 : -1, y > 0 ? p - w : -1, y < h - 1 ? p + w : -1];
      for (const q of neighbours) {
        if (q >= 0 && !seen[q] && prob[q] > threshold) {
          seen[q] = 1;
          stack[top++] = q;
        }
      }
    }
    const bw = x1 - x0 + 1;
    const bh = y1 - y0 + 1;
    if (Math.min(bw, bh) < 3 || sum / count < boxThreshold) continue;
    const grow = (bw * bh * unclipRatio) / (2 * (bw + bh));
    boxes.push([Math.max(0, x0 - grow), Math.max(0, y0 - grow), Math.min(w, x1 + 1 + grow), Math.min(h, y1 + 1 + grow)]);
  }
  return boxes;
}

/** @type {import('@nereid/server').Backend} */
export default {
  name: 'text_crop',
  spiVersion: 1,

  async createModel(ctx) {
    const name = ctx.name;
    const number = (key, fallback) => {
      const value = Number(ctx.config.parameters[key]?.string_value ?? fallback);
      if (!Number.isFinite(value) || value < 0) throw new Error(`parameter ${key} must be a non-negative number, got '${ctx.config.parameters[key]?.string_value}'`);
      return value;
    };
    const options = { threshold: number('threshold', 0.3), boxThreshold: number('box_threshold', 0.6), unclipRatio: number('unclip_ratio', 1.5), maxBoxes: number('max_boxes', 1000) };

    return {
      async createInstance() {
        return {
          async execute(requests, timing) {
            for (const request of requests) {
              const probTensor = request.inputs.get('PROB');
              const image = request.inputs.get('IMAGE_RGB');
              const [, , mapH, mapW] = probTensor.shape;
              const [height, width] = image.shape;
              if (height === 0 || width === 0 || mapH === 0 || mapW === 0) {
                request.respond(new NereidError('MODEL_ERROR_INVALID_ARG', `model '${name}': inputs 'PROB' [${probTensor.shape}] and 'IMAGE_RGB' [${image.shape}] must not be empty`));
                continue;
              }
              const rgb = image.data;
              const scaleX = width / mapW;
              const scaleY = height / mapH;
              const boxes = findBoxes(floats(probTensor.data), mapW, mapH, options)
                .map(([x0, y0, x1, y1]) => [
                  Math.max(0, Math.floor(x0 * scaleX)),
                  Math.max(0, Math.floor(y0 * scaleY)),
                  Math.min(width, Math.ceil(x1 * scaleX)),
                  Math.min(height, Math.ceil(y1 * scaleY)),
                ])
                .filter(([x0, y0, x1, y1]) => x1 > x0 && y1 > y0)
                .sort((a, b) => (Math.abs(a[1] - b[1]) < 10 ? a[0] - b[0] : a[1] - b[1]));
              timing.markInputsReady();
              const widths = boxes.map(([x0, y0, x1, y1]) => Math.max(1, Math.ceil((HEIGHT * (x1 - x0)) / (y1 - y0))));
              const stride = Math.max(MIN_WIDTH, ...widths);
              const rows = Math.max(1, boxes.length);
              const rec = new Float32Array(rows * 3 * HEIGHT * stride);
              boxes.forEach(([x0, y0, x1, y1], i) => {
                resizeNormalized(rgb, width, height, x0, y0, x1 - x0, y1 - y0, widths[i], HEIGHT, HALF, HALF, rec, i * 3 * HEIGHT * stride, stride);
              });
              timing.markOutputsStart();
              request.respond({
                outputs: [
                  { name: 'REC_INPUT', datatype: 'FP32', shape: [rows, 3, HEIGHT, stride], data: new Uint8Array(rec.buffer) },
                  { name: 'BOXES', datatype: 'INT32', shape: [boxes.length, 4], data: new Uint8Array(Int32Array.from(boxes.flat()).buffer) },
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
