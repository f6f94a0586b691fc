/**
 * OCR pre-processing (custom backend, docs/backends.md).
 *
 * IMAGE (BYTES [1]: the bytes of a PNG file) → DET_INPUT (FP32 [1, 3, h, w]: the image for the
 * PaddleOCR detector, scaled so its longer side is at most `limit_side_len`, each side rounded to
 * a multiple of 32, BGR, ImageNet mean/std) and IMAGE_RGB (UINT8 [H, W, 3]: the decoded image at
 * full size, which text_crop cuts the lines from). Transparent pixels are composed over white.
 * A request whose bytes are not a PNG, or whose image exceeds `max_pixels`, fails alone with
 * INVALID_ARG naming the model and the tensor.
 */
import pngjs from 'pngjs';
import { NereidError, decodeBytesElements } from '@nereid/protocol';
import { resizeNormalized } from '../../../image.mjs';

const { PNG } = pngjs;
const MEAN = [0.485, 0.456, 0.406];
const STD = [0.229, 0.224, 0.225];
const SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

/** @type {import('@nereid/server').Backend} */
export default {
  name: 'ocr_preprocess',
  spiVersion: 1,

  async createModel(ctx) {
    const name = ctx.name;
    const limit = Number(ctx.config.parameters.limit_side_len?.string_value ?? 960);
    const maxPixels = Number(ctx.config.parameters.max_pixels?.string_value ?? 25_000_000);
    for (const [key, value] of [['limit_side_len', limit], ['max_pixels', maxPixels]]) {
      if (!Number.isInteger(value) || value < 32) throw new Error(`parameter ${key} must be an integer of at least 32, got '${ctx.config.parameters[key]?.string_value}'`);
    }
    const refuse = (what) => new NereidError('MODEL_ERROR_INVALID_ARG', `model '${name}': input 'IMAGE' ${what}`);

    /** Decodes one PNG into interleaved RGB; throws the request's error. */
    function decode(bytes) {
      const file = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
      if (file.length < 33 || !file.subarray(0, 8).equals(SIGNATURE) || file.toString('latin1', 12, 16) !== 'IHDR') {
        throw refuse(`is not a PNG image (it does not start with the PNG signature and header); send the bytes of a .png file as the one BYTES element`);
      }
      const width = file.readUInt32BE(16);
      const height = file.readUInt32BE(20);
      if (width === 0 || height === 0 || width * height > maxPixels) {
        throw refuse(`is ${width}×${height} pixels; images from 1 pixel up to ${maxPixels} pixels (parameter max_pixels) are accepted, scale it down first`);
      }
      if (file.indexOf('IEND', Math.max(33, file.length - 12), 'latin1') < 0) {
        throw refuse(`is a truncated PNG image (${file.length} bytes, no IEND chunk at the end); send the whole .png file`);
      }
      let png;
      try {
        png = PNG.sync.read(file);
      } catch (err) {
        throw refuse(`is not a valid PNG image (${err.message}); send the bytes of an intact .png file`);
      }
      const rgba = png.data;
      const rgb = new Uint8Array(width * height * 3);
      for (let p = 0, q = 0; p < rgba.length; p += 4, q += 3) {
        const alpha = rgba[p + 3];
        for (let c = 0; c < 3; c++) rgb[q + c] = alpha === 255 ? rgba[p + c] : Math.round((rgba[p + c] * alpha + 255 * (255 - alpha)) / 255);
      }
      return { rgb, width, height };
    }

    return {
      async createInstance() {
        return {
          async execute(requests, timing) {
            timing.markInputsReady();
            for (const request of requests) {
              try {
                const elements = decodeBytesElements(request.inputs.get('IMAGE').data, `model '${name}' input 'IMAGE'`);
                if (elements.length !== 1) throw refuse(`has ${elements.length} elements; send one PNG image per request`);
                const { rgb, width, height } = decode(elements[0]);
                const ratio = Math.max(width, height) > limit ? limit / Math.max(width, height) : 1;
                const w = Math.max(32, Math.round((width * ratio) / 32) * 32);
                const h = Math.max(32, Math.round((height * ratio) / 32) * 32);
                const det = new Float32Array(3 * h * w);
                resizeNormalized(rgb, width, height, 0, 0, width, height, w, h, MEAN, STD, det);
                request.respond({
                  outputs: [
                    { name: 'DET_INPUT', datatype: 'FP32', shape: [1, 3, h, w], data: new Uint8Array(det.buffer) },
                    { name: 'IMAGE_RGB', datatype: 'UINT8', shape: [height, width, 3], data: rgb },
                  ],
                });
              } catch (err) {
                request.respond(err);
              }
            }
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
};
