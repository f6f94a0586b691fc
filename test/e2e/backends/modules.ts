/**
 * Custom backend modules as source text, written into model directories by the backend tests.
 * Every model here takes FP32 `X` [-1] and returns FP32 `Y` = X × factor (max_batch_size 8).
 */

/** config.pbtxt of a scaling model of backend `backend`, with extra `parameters` and text. */
export function scaleConfig(name: string, backend: string, options: { parameters?: Record<string, string>; extra?: string } = {}): string {
  const parameters = Object.entries(options.parameters ?? {})
    .map(([k, v]) => `parameters { key: "${k}" value { string_value: "${v}" } }\n`)
    .join('');
  return (
    `name: "${name}"\nbackend: "${backend}"\nmax_batch_size: 8\n` +
    'input [ { name: "X" data_type: TYPE_FP32 dims: [ -1 ] } ]\n' +
    'output [ { name: "Y" data_type: TYPE_FP32 dims: [ -1 ] } ]\n' +
    'instance_group [ { kind: KIND_CPU, count: 1 } ]\n' +
    parameters +
    (options.extra ?? '')
  );
}

/**
 * The body of a backend object (no surrounding braces): multiplies by `factor` (or the model
 * parameter `factor` when set) and answers with response parameter `instance`.
 */
export function scaleBackendBody(name: string, factor: number): string {
  return `
  name: ${JSON.stringify(name)},
  spiVersion: 1,
  async createModel(ctx) {
    const factor = Number(ctx.config.parameters.factor?.string_value ?? ${factor});
    return {
      async createInstance(spec) {
        return {
          async execute(requests) {
            for (const r of requests) {
              const x = r.inputs.get('X');
              const input = new Float32Array(new Uint8Array(x.data).buffer);
              const output = input.map((v) => v * factor);
              r.respond({
                outputs: [{ name: 'Y', datatype: 'FP32', shape: x.shape, data: new Uint8Array(output.buffer) }],
                parameters: { instance: spec.name },
              });
            }
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },`;
}

/** An ES module whose default export scales by `factor`. */
export function scaleModule(name: string, factor: number): string {
  return `export default {${scaleBackendBody(name, factor)}\n};\n`;
}

/** An ES module with the backend as the named export `backend`. */
export function namedExportModule(name: string, factor: number): string {
  return `export const backend = {${scaleBackendBody(name, factor)}\n};\n`;
}

/** A CommonJS module exporting a factory that returns the backend (and records its options). */
export function factoryCommonJsModule(name: string, factor: number): string {
  return `module.exports = function (options) {
  if (options.spiVersion !== 1 || options.name !== ${JSON.stringify(name)}) throw new Error('unexpected factory options');
  return {${scaleBackendBody(name, factor)}\n};
};\n`;
}

/** An ES module whose instance does `executeBody` (with `requests` in scope) and nothing else. */
export function executeModule(name: string, executeBody: string): string {
  return `export default {
  name: ${JSON.stringify(name)},
  spiVersion: 1,
  async createModel() {
    return {
      async createInstance() {
        return {
          async execute(requests) {
            ${executeBody}
          },
          async unload() {},
        };
      },
      async unload() {},
    };
  },
};\n`;
}

/** The float32 values of `xs` as a JSON FP32 input `X` of shape [1, n]. */
export function xInput(xs: readonly number[]): { name: string; datatype: string; shape: number[]; data: number[] } {
  return { name: 'X', datatype: 'FP32', shape: [1, xs.length], data: [...xs] };
}
