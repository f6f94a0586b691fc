/**
 * @nereid/testkit: an ONNX model writer and the model builders Nereid's tests use, so that no
 * test needs Python or a download (conventions.md, Tests).
 */
export * from './onnx/index.js';
export * from './models/index.js';
export { CHROMIUM, colorRegion, rgb, screenshot, type Png } from './chromium.js';
