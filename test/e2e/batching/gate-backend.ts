/**
 * A JavaScript backend for end-to-end batching tests whose instances execute only when the test
 * opens their gate: queues can then be filled, timed out, cancelled and reordered
 * deterministically behind a busy instance, with no timing assumption.
 *
 * Models use `backend: "gate"`, one INT32 input `IN` and one output `OUT`; each request's `OUT`
 * is its own `IN` (the batch is never mixed up, so a response shows which request it answers).
 */
import { BACKEND_SPI_VERSION, type Backend, type BackendInstance, type BackendRequest } from '@nereid/server';

/** One `execute` call, held until `release`. */
export interface GateExecution {
  /** `<group>_<n>` of the instance that received the batch. */
  readonly instance: string;
  /** The first `IN` element of every request, in batch order. */
  readonly values: readonly number[];
  readonly requests: readonly BackendRequest[];
  /** Answers every request of the batch and returns from `execute`; resolves once done. */
  release(): Promise<void>;
}

export class GateBackend {
  readonly backend: Backend;
  /** Every execution so far, in the order they started. */
  readonly executions: GateExecution[] = [];
  /** While true, executions are released as soon as they start. */
  autoRelease = false;
  #waiters: (() => void)[] = [];

  constructor(options: { pipelineDepth?: number } = {}) {
    const depth = options.pipelineDepth;
    const self = this;
    this.backend = {
      name: 'gate',
      spiVersion: BACKEND_SPI_VERSION,
      async createModel() {
        return {
          async createInstance(spec) {
            const instance: BackendInstance = {
              ...(depth === undefined ? {} : { pipelineDepth: depth }),
              execute: (requests) => self.#execute(spec.name, requests),
              async unload() {},
            };
            return instance;
          },
          async unload() {},
        };
      },
    };
  }

  /** Resolves with execution `n` (0-based) once it has started. */
  async execution(n: number): Promise<GateExecution> {
    while (this.executions.length <= n) await new Promise<void>((resolve) => this.#waiters.push(resolve));
    return this.executions[n]!;
  }

  /** Releases every execution started so far and, from now on, every new one. */
  async releaseAll(): Promise<void> {
    this.autoRelease = true;
    await Promise.all(this.executions.map((e) => e.release()));
  }

  #execute(instance: string, requests: readonly BackendRequest[]): Promise<void> {
    let open!: () => void;
    const gate = new Promise<void>((resolve) => (open = resolve));
    const done = gate.then(() => {
      for (const r of requests) {
        const input = r.inputs.get('IN')!;
        r.respond({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: input.shape, data: input.data }] });
      }
    });
    const values = requests.map((r) => {
      const data = r.inputs.get('IN')!.data;
      return new DataView(data.buffer, data.byteOffset, data.byteLength).getInt32(0, true);
    });
    this.executions.push({
      instance,
      values,
      requests,
      release: () => {
        open();
        return done;
      },
    });
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
    if (this.autoRelease) open();
    return done;
  }
}

/** `config.pbtxt` of a gate model: INT32 `IN` [1] → `OUT` [1], `count` instances, then `extra`. */
export function gateConfig(name: string, options: { maxBatchSize?: number; count?: number; extra?: string } = {}): string {
  return `name: "${name}"
backend: "gate"
max_batch_size: ${options.maxBatchSize ?? 4}
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: ${options.count ?? 1} } ]
${options.extra ?? ''}
`;
}
