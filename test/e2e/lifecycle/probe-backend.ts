/**
 * A JavaScript backend for lifecycle tests that counts what the server does with it: models and
 * instances created and released, executions (instance and batch size), with delays and failures
 * chosen per model in its config `parameters`:
 *
 *   create_delay_ms   each instance takes this long to create
 *   execute_delay_ms  each execution takes this long
 *   fail_execute      "true": every execution fails
 *
 * and faults and pauses set by the test: `failCreate` (instance creation fails), `hold()` /
 * `release()` (executions wait until released).
 *
 * Models use `backend: "probe"`, INT32 `IN` [1] → `OUT` [1] (OUT = IN).
 */
import { NereidError } from '@nereid/protocol';
import { BACKEND_SPI_VERSION, type Backend, type BackendRequest, type InstanceSpec } from '@nereid/server';

export interface ProbeExecution {
  readonly model: string;
  readonly instance: string;
  readonly batchSize: number;
}

export class ProbeBackend {
  readonly backend: Backend;
  readonly executions: ProbeExecution[] = [];
  modelsCreated = 0;
  modelsReleased = 0;
  instancesCreated = 0;
  instancesReleased = 0;
  /** The spec of every instance created, in order. */
  readonly instanceSpecs: InstanceSpec[] = [];
  /** While true, `createInstance` fails. */
  failCreate = false;
  #gate: Promise<void> | undefined;
  #open: (() => void) | undefined;

  /** Executions that start from now on wait (after being recorded) until `release()`. */
  hold(): void {
    this.#gate ??= new Promise((resolve) => (this.#open = resolve));
  }

  /** Lets held executions go on; later ones run at once. */
  release(): void {
    this.#open?.();
    this.#gate = undefined;
    this.#open = undefined;
  }

  /** Instances created and not yet released. */
  get liveInstances(): number {
    return this.instancesCreated - this.instancesReleased;
  }

  constructor() {
    const self = this;
    this.backend = {
      name: 'probe',
      spiVersion: BACKEND_SPI_VERSION,
      async createModel(ctx) {
        const number = (key: string) => Number(ctx.config.parameters[key]?.string_value ?? 0);
        const createDelay = number('create_delay_ms');
        const executeDelay = number('execute_delay_ms');
        const fail = ctx.config.parameters['fail_execute']?.string_value === 'true';
        self.modelsCreated++;
        return {
          async createInstance(spec) {
            await sleep(createDelay);
            if (self.failCreate) throw new NereidError('MODEL_LOAD_FAILED', `probe model '${ctx.name}' was told to fail creating instance '${spec.name}'`);
            self.instancesCreated++;
            self.instanceSpecs.push(spec);
            return {
              async execute(requests: readonly BackendRequest[]) {
                self.executions.push({ model: ctx.name, instance: spec.name, batchSize: requests.length });
                const gate = self.#gate;
                if (gate !== undefined) await gate;
                await sleep(executeDelay);
                if (fail) throw new NereidError('BACKEND_ERROR', `probe model '${ctx.name}' was told to fail`);
                for (const r of requests) {
                  const input = r.inputs.get('IN')!;
                  r.respond({ outputs: [{ name: 'OUT', datatype: 'INT32', shape: input.shape, data: input.data }] });
                }
              },
              async unload() {
                self.instancesReleased++;
              },
            };
          },
          async unload() {
            self.modelsReleased++;
          },
        };
      },
    };
  }

  /** Executions of `model`, per instance name. */
  executionsOf(model: string): Map<string, number[]> {
    const out = new Map<string, number[]>();
    for (const e of this.executions) {
      if (e.model !== model) continue;
      out.set(e.instance, [...(out.get(e.instance) ?? []), e.batchSize]);
    }
    return out;
  }
}

function sleep(ms: number): Promise<void> {
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : Promise.resolve();
}

/** `config.pbtxt` of a probe model with `count` instances, `parameters` and `extra` text. */
export function probeConfig(name: string, options: { count?: number; parameters?: Record<string, string>; extra?: string } = {}): string {
  const parameters = Object.entries(options.parameters ?? {})
    .map(([k, v]) => `parameters { key: "${k}" value { string_value: "${v}" } }`)
    .join('\n');
  return `name: "${name}"
backend: "probe"
max_batch_size: 4
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
instance_group [ { kind: KIND_CPU count: ${options.count ?? 1} } ]
${parameters}
${options.extra ?? ''}
`;
}

/** A `model_warmup` entry feeding `IN` zeros. */
export function probeWarmup(name: string, options: { batchSize?: number; count?: number } = {}): string {
  return `model_warmup [ { name: "${name}" batch_size: ${options.batchSize ?? 1} count: ${options.count ?? 1}
  inputs { key: "IN" value { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true } } } ]`;
}
