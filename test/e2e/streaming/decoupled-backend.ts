/**
 * A decoupled JavaScript backend for the streaming tests, after Triton's `repeat_int32` example:
 * for every element of INT32 input `IN` it sends one response, `OUT` = the element and `IDX` =
 * its index, after `execute` has returned. A request's custom parameters choose how it ends:
 *
 * - `mode` `"final"` (default): the final flag rides on the last data response;
 * - `"empty_final"`: the data responses, then a flags-only final response;
 * - `"no_final"`: the data responses and nothing more (the server's response timeout ends it);
 * - `"error"`: the data responses, then an error naming the request;
 * - `"wait_cancel"`: the data responses, then nothing until the request's signal aborts, when it
 *   sends a CANCELLED error (and records the request id in `cancelled`);
 * - `"hold"`: nothing until the test calls `release(id)`, then as `"final"`.
 *
 * `delay_ms` (int) spaces the responses. Models: `backend: "decoupled_test"`, see `repeatConfig`.
 */
import { NereidError } from '@nereid/protocol';
import { BACKEND_SPI_VERSION, type Backend, type BackendRequest, type BackendTensor } from '@nereid/server';

function int32Tensor(name: string, value: number, batched: boolean): BackendTensor {
  const data = new Uint8Array(4);
  new DataView(data.buffer).setInt32(0, value, true);
  return { name, datatype: 'INT32', shape: batched ? [1, 1] : [1], data };
}

function int32s(t: BackendTensor): number[] {
  const view = new DataView(t.data.buffer, t.data.byteOffset, t.data.byteLength);
  return Array.from({ length: t.data.byteLength / 4 }, (_, i) => view.getInt32(i * 4, true));
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

export class DecoupledBackend {
  readonly backend: Backend;
  /** Ids of requests whose signal aborted while the backend was waiting for it. */
  readonly cancelled: string[] = [];
  /** Ids of requests the backend finished (final response or error sent), in order. */
  readonly finished: string[] = [];
  /** The request count of each `execute` call. */
  readonly batches: number[] = [];
  /** Instances unloaded so far. */
  unloadedInstances = 0;
  readonly #holds = new Map<string, () => void>();
  #finishWaiters: (() => void)[] = [];

  constructor() {
    const self = this;
    this.backend = {
      name: 'decoupled_test',
      spiVersion: BACKEND_SPI_VERSION,
      async createModel(ctx) {
        const batched = ctx.config.max_batch_size > 0;
        return {
          async createInstance() {
            return {
              async execute(requests: readonly BackendRequest[]) {
                self.batches.push(requests.length);
                for (const r of requests) void self.#serve(r, batched);
              },
              async unload() {
                self.unloadedInstances++;
              },
            };
          },
          async unload() {},
        };
      },
    };
  }

  /** Lets a `"hold"` request go on; resolves once it is holding if it was not yet. */
  async release(id: string): Promise<void> {
    while (!this.#holds.has(id)) await sleep(5);
    this.#holds.get(id)!();
    this.#holds.delete(id);
  }

  /** Resolves once the backend finished request `id`. */
  async whenFinished(id: string): Promise<void> {
    while (!this.finished.includes(id)) await new Promise<void>((resolve) => this.#finishWaiters.push(resolve));
  }

  #finish(id: string): void {
    this.finished.push(id);
    const waiters = this.#finishWaiters;
    this.#finishWaiters = [];
    for (const w of waiters) w();
  }

  async #serve(r: BackendRequest, batched: boolean): Promise<void> {
    const values = int32s(r.inputs.get('IN')!);
    const mode = typeof r.parameters.mode === 'string' ? r.parameters.mode : 'final';
    const delay = Number(r.parameters.delay_ms ?? 0);
    if (mode === 'hold') await new Promise<void>((resolve) => this.#holds.set(r.id, resolve));
    await sleep(0);
    for (let i = 0; i < values.length; i++) {
      if (delay > 0) await sleep(delay);
      const last = i === values.length - 1;
      const final = last && (mode === 'final' || mode === 'hold');
      r.respond({ outputs: [int32Tensor('OUT', values[i]!, batched), int32Tensor('IDX', i, batched)] }, final);
    }
    switch (mode) {
      case 'final':
      case 'hold':
        if (values.length === 0) r.respond(null, true);
        break;
      case 'empty_final':
        r.respond(null, true);
        break;
      case 'error':
        r.respond(new NereidError('BACKEND_ERROR', `decoupled_test failed request '${r.id}' on purpose after ${values.length} responses`));
        break;
      case 'wait_cancel':
        await new Promise<void>((resolve) => {
          if (r.signal.aborted) resolve();
          else r.signal.addEventListener('abort', () => resolve(), { once: true });
        });
        this.cancelled.push(r.id);
        r.respond(new NereidError('REQUEST_CANCELLED', `request '${r.id}' was cancelled`));
        break;
      case 'no_final':
        return;
    }
    this.#finish(r.id);
  }
}

/**
 * `config.pbtxt` of a decoupled repeat model: INT32 `IN` [-1] → `OUT` [1], `IDX` [1];
 * `maxBatchSize` 0 by default; `extra` appended (e.g. dynamic batching).
 */
export function repeatConfig(name: string, options: { maxBatchSize?: number; extra?: string } = {}): string {
  return `name: "${name}"
backend: "decoupled_test"
max_batch_size: ${options.maxBatchSize ?? 0}
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] }, { name: "IDX" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: 1 } ]
${options.extra ?? ''}
`;
}
