/**
 * A JavaScript backend for the ensemble tests (`backend: "ens_step"`). The model's `op` parameter
 * chooses what it does with FP32 input `IN`:
 *
 * - `add` (default): `OUT` = `IN` + the `add` parameter (default 1), FP32, a fresh buffer;
 * - `gate`: `OUT` = one BOOL, whether `IN[0]` > 0;
 * - `fail`: an error naming the model.
 *
 * `delay_ms` makes each execution wait (honouring the request's signal). Every execution is
 * recorded with its model, start and end times (ms, performance.now()) and the input and output
 * byte arrays, so tests can check overlap and that a step received the very buffer another produced.
 */
import { NereidError } from '@nereid/protocol';
import { BACKEND_SPI_VERSION, type Backend, type BackendRequest } from '@nereid/server';

export interface StepExecution {
  readonly model: string;
  readonly start: number;
  readonly end: number;
  readonly input: Uint8Array;
  readonly output: Uint8Array | undefined;
}

export class StepBackend {
  readonly backend: Backend;
  readonly executions: StepExecution[] = [];
  /** Models whose execution started, in order (an execution is recorded in `executions` when it ends). */
  readonly started: string[] = [];

  constructor() {
    const self = this;
    this.backend = {
      name: 'ens_step',
      spiVersion: BACKEND_SPI_VERSION,
      async createModel(ctx) {
        const param = (key: string) => ctx.config.parameters[key]?.string_value;
        const op = param('op') ?? 'add';
        const add = Number(param('add') ?? '1');
        const delayMs = Number(param('delay_ms') ?? '0');
        return {
          async createInstance() {
            return {
              async execute(requests: readonly BackendRequest[]) {
                await Promise.all(requests.map((r) => self.#serve(ctx.name, r, op, add, delayMs)));
              },
              async unload() {},
            };
          },
          async unload() {},
        };
      },
    };
  }

  /** Executions of `model`, in order. */
  of(model: string): StepExecution[] {
    return this.executions.filter((e) => e.model === model);
  }

  async #serve(model: string, r: BackendRequest, op: string, add: number, delayMs: number): Promise<void> {
    const start = performance.now();
    this.started.push(model);
    const input = r.inputs.get('IN')!;
    if (delayMs > 0) {
      const aborted = await new Promise<boolean>((resolve) => {
        const timer = setTimeout(() => resolve(false), delayMs);
        r.signal.addEventListener('abort', () => {
          clearTimeout(timer);
          resolve(true);
        }, { once: true });
      });
      if (aborted) {
        this.executions.push({ model, start, end: performance.now(), input: input.data, output: undefined });
        r.respond(new NereidError('REQUEST_CANCELLED', `model '${model}': request cancelled`));
        return;
      }
    }
    if (op === 'fail') {
      this.executions.push({ model, start, end: performance.now(), input: input.data, output: undefined });
      r.respond(new NereidError('BACKEND_ERROR', `model '${model}' failed on purpose`));
      return;
    }
    const values = new Float32Array(input.data.buffer.slice(input.data.byteOffset, input.data.byteOffset + input.data.byteLength));
    let output: Uint8Array;
    let tensor;
    if (op === 'gate') {
      output = Uint8Array.of(values[0]! > 0 ? 1 : 0);
      tensor = { name: 'OUT', datatype: 'BOOL' as const, shape: [1], data: output };
    } else {
      const out = values.map((v) => v + add);
      output = new Uint8Array(out.buffer);
      tensor = { name: 'OUT', datatype: 'FP32' as const, shape: [...input.shape], data: output };
    }
    this.executions.push({ model, start, end: performance.now(), input: input.data, output });
    r.respond({ outputs: [tensor] });
  }
}

/** config.pbtxt of an `ens_step` model: FP32 `IN` [-1] → `OUT` ([-1] FP32, or [1] BOOL for `gate`). */
export function stepConfig(name: string, params: Record<string, string> = {}): string {
  const gate = params.op === 'gate';
  const parameters = Object.entries(params)
    .map(([k, v]) => `parameters { key: "${k}" value { string_value: "${v}" } }`)
    .join('\n');
  return `name: "${name}"
backend: "ens_step"
max_batch_size: 0
input [{ name: "IN" data_type: TYPE_FP32 dims: [-1] }]
output [{ name: "OUT" data_type: ${gate ? 'TYPE_BOOL' : 'TYPE_FP32'} dims: [${gate ? 1 : -1}] }]
instance_group [{ kind: KIND_CPU count: 4 }]
${parameters}
`;
}

export interface StepSpec {
  model: string;
  inputs: Record<string, string>;
  outputs: Record<string, string>;
}

/** config.pbtxt of an ensemble over FP32 [-1] tensors (BOOL [1] for names in `bools`). */
export function ensembleConfig(
  name: string,
  io: { inputs: string[]; outputs: string[]; bools?: string[] },
  steps: StepSpec[],
  params: Record<string, string> = {},
): string {
  const tensor = (t: string) =>
    io.bools?.includes(t) ? `{ name: "${t}" data_type: TYPE_BOOL dims: [1] }` : `{ name: "${t}" data_type: TYPE_FP32 dims: [-1] }`;
  const map = (kind: string, m: Record<string, string>) =>
    Object.entries(m)
      .map(([k, v]) => `${kind} { key: "${k}" value: "${v}" }`)
      .join(' ');
  return `name: "${name}"
platform: "ensemble"
max_batch_size: 0
input [${io.inputs.map(tensor).join(', ')}]
output [${io.outputs.map(tensor).join(', ')}]
ensemble_scheduling {
${steps.map((s) => `  step { model_name: "${s.model}" model_version: -1 ${map('input_map', s.inputs)} ${map('output_map', s.outputs)} }`).join('\n')}
}
${Object.entries(params)
  .map(([k, v]) => `parameters { key: "${k}" value { string_value: "${v}" } }`)
  .join('\n')}
`;
}
