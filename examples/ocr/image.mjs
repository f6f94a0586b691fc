/**
 * Image helpers shared by the OCR example's JavaScript backends (ocr_preprocess, text_crop).
 * Images are interleaved 8-bit RGB (`Uint8Array`, row-major, `width × height × 3`).
 */

/**
 * Resizes the rectangle `(x, y, w, h)` of `rgb` (an image `width` pixels wide) to `outW × outH`
 * with bilinear interpolation (pixel centres aligned, as OpenCV's INTER_LINEAR does) and writes it
 * planar in B, G, R order (the channel order the PaddleOCR models were trained on) as
 * `(value / 255 - mean[c]) / std[c]` into `out` at `offset`, a row `stride` floats wide
 * (`stride ≥ outW`; the rest of each row is left as it is).
 */
export function resizeNormalized(rgb, width, height, x, y, w, h, outW, outH, mean, std, out, offset = 0, stride = outW) {
  const plane = outH * stride;
  const sx = w / outW;
  const sy = h / outH;
  const xs = new Int32Array(outW * 2);
  const fx = new Float32Array(outW);
  for (let i = 0; i < outW; i++) {
    const px = Math.min(Math.max(x + (i + 0.5) * sx - 0.5, 0), width - 1);
    const x0 = Math.floor(px);
    xs[2 * i] = x0;
    xs[2 * i + 1] = Math.min(x0 + 1, width - 1);
    fx[i] = px - x0;
  }
  for (let j = 0; j < outH; j++) {
    const py = Math.min(Math.max(y + (j + 0.5) * sy - 0.5, 0), height - 1);
    const y0 = Math.floor(py);
    const y1 = Math.min(y0 + 1, height - 1);
    const fy = py - y0;
    const row0 = y0 * width * 3;
    const row1 = y1 * width * 3;
    for (let i = 0; i < outW; i++) {
      const a = xs[2 * i] * 3;
      const b = xs[2 * i + 1] * 3;
      const f = fx[i];
      for (let c = 0; c < 3; c++) {
        const top = rgb[row0 + a + c] + (rgb[row0 + b + c] - rgb[row0 + a + c]) * f;
        const bottom = rgb[row1 + a + c] + (rgb[row1 + b + c] - rgb[row1 + a + c]) * f;
        const value = (top + (bottom - top) * fy) / 255;
        const bgr = 2 - c;
        out[offset + bgr * plane + j * stride + i] = (value - mean[bgr]) / std[bgr];
      }
    }
  }
}
