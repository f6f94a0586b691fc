/**
 * A JavaScript backend for the sequence tests (`backend: "seq_probe"`). It reads the control
 * inputs START, END, READY and CORRID (INT32, INT32, INT32, UINT64) when the model has them and
 * records, per execution, each row's controls, so tests see what the sequence batcher sent.
 *
 * The model's `mode` parameter chooses what it does with INT32 input `IN` (`[1]` per request):
 *
 * - `countdown` (default): an iterative countdown. On START the count is `IN`, later it is the
 *   implicit state `STATE_IN`; each execution sends `OUT` = the count (with `STATE_OUT` = count
 *   - 1), non-final when the model is decoupled, and reschedules the request while the count is
 *   above 1; the last execution ends the request (decoupled: a flags-only final response).
 *   Not decoupled: the count is kept per correlation id and only the last execution answers, with
 *   `OUT` = the number of executions.
 * - `echo`: `OUT` = `IN` (plus `STATE_OUT` = `IN` when the model has state), one final response.
 * - `reschedule`: calls `reschedule()` on every request (for models that may not).
 * - `order`: `OUT` = `IN`; answers the rows of a batch in reverse order, 5 ms apart.
 * - `nofinal` (decoupled): `OUT` = `IN`, final; but for a negative `IN` one non-final response
 *   and never the final one.
 *
 * `delay_ms` makes each execution wait first. Rows record -1 for a control or state input the
 * request did not carry.
 */
import { NereidError } from '@nereid/protocol';
import { BACKEND_SPI_VERSION, type Backend, type BackendRequest, type BackendTensor } from '@nereid/server';

export interface ProbeRow {
  readonly model: string;
  readonly id: string;
  readonly corrid: bigint;
  readonly start: number;
  readonly end: number;
  readonly ready: number;
  readonly value: number;
  /** STATE_IN (-1 when absent). */
  readonly state: number;
  /** Names of every input the row carried, sorted. */
  readonly inputs: readonly string[];
}

const sleep = (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms));

function int32(t: BackendTensor | undefined): number {
  if (t === undefined) return -1;
  return new DataView(t.data.buffer, t.data.byteOffset, t.data.byteLength).getInt32(0, true);
}

function uint64(t: BackendTensor | undefined): bigint {
  if (t === undefined) return -1n;
  return new DataView(t.data.buffer, t.data.byteOffset, t.data.byteLength).getBigUint64(0, true);
}

function int32Tensor(name: string, value: number, batched: boolean): BackendTensor {
  const data = new Uint8Array(4);
  new DataView(data.buffer).setInt32(0, value, true);
  return { name, datatype: 'INT32', shape: batched ? [1, 1] : [1], data };
}

export class SequenceProbeBackend {
  readonly backend: Backend;
  /** Every execution, in order: its rows. */
  readonly batches: ProbeRow[][] = [];

  constructor() {
    const self = this;
    this.backend = {
      name: 'seq_probe',
      spiVersion: BACKEND_SPI_VERSION,
      async createModel(ctx) {
        const param = (key: string) => ctx.config.parameters[key]?.string_value;
        const mode = param('mode') ?? 'countdown';
        const delayMs = Number(param('delay_ms') ?? '0');
        const decoupled = ctx.config.model_transaction_policy?.decoupled ?? false;
        const batched = ctx.config.max_batch_size > 0;
        const hasState = (ctx.config.sequence_batching?.state.length ?? 0) > 0;
        /** Not decoupled countdown: correlation id → [count left, executions]. */
        const counts = new Map<bigint, [number, number]>();
        return {
          async createInstance() {
            return {
              async execute(requests: readonly BackendRequest[]) {
                const rows = requests.map((r) => ({
                  model: ctx.name,
                  id: r.id,
                  corrid: uint64(r.inputs.get('CORRID')),
                  start: int32(r.inputs.get('START')),
                  end: int32(r.inputs.get('END')),
                  ready: int32(r.inputs.get('READY')),
                  value: int32(r.inputs.get('IN')),
                  state: int32(r.inputs.get('STATE_IN')),
                  inputs: [...r.inputs.keys()].sort(),
                }));
                self.batches.push(rows);
                if (delayMs > 0) await sleep(delayMs);
                if (mode === 'order') {
                  for (const r of [...requests].reverse()) {
                    r.respond({ outputs: [int32Tensor('OUT', int32(r.inputs.get('IN')), batched)] });
                    await sleep(5);
                  }
                  return;
                }
                requests.forEach((r, i) => {
                  const row = rows[i]!;
                  if (mode === 'reschedule') {
                    try {
                      if (r.reschedule === undefined) throw new NereidError('BACKEND_ERROR', `model '${ctx.name}': no reschedule() on this request`);
                      r.reschedule();
                    } catch (err) {
                      r.respond(err as NereidError);
                    }
                    return;
                  }
                  if (mode === 'nofinal') {
                    r.respond({ outputs: [int32Tensor('OUT', row.value, batched)] }, row.value >= 0);
                    return;
                  }
                  if (mode === 'echo') {
                    const outputs = [int32Tensor('OUT', row.value, batched)];
                    if (hasState) outputs.push(int32Tensor('STATE_OUT', row.value, batched));
                    r.respond({ outputs });
                    return;
                  }
                  if (decoupled) {
                    const count = row.start === 1 ? row.value : int32(r.inputs.get('STATE_IN'));
                    r.respond({ outputs: [int32Tensor('OUT', count, batched), int32Tensor('STATE_OUT', count - 1, batched)] }, false);
                    if (count > 1) r.reschedule!();
                    else r.respond(null, true);
                    return;
                  }
                  const [left, runs] = row.start === 1 ? [row.value, 0] : counts.get(row.corrid)!;
                  if (left > 1) {
                    counts.set(row.corrid, [left - 1, runs + 1]);
                    r.reschedule!();
                    return;
                  }
                  counts.delete(row.corrid);
                  const outputs = [int32Tensor('OUT', runs + 1, batched)];
                  if (hasState) outputs.push(int32Tensor('STATE_OUT', 0, batched));
                  r.respond({ outputs });
                });
              },
              async unload() {},
            };
          },
          async unload() {},
        };
      },
    };
  }

  /** The rows `model` executed, batch by batch. */
  of(model: string): ProbeRow[][] {
    return this.batches.filter((b) => b[0]?.model === model);
  }
}

/** The `config.pbtxt` of a `seq_probe` model. */
export function probeConfig(
  name: string,
  options: {
    mode?: string;
    decoupled?: boolean;
    iterative?: boolean;
    strategy?: string;
    maxBatchSize?: number;
    state?: boolean;
    delayMs?: number;
    idleUs?: number;
    extra?: string;
  } = {},
): string {
  const state = options.state ?? true;
  return `name: "${name}"
backend: "seq_probe"
max_batch_size: ${options.maxBatchSize ?? 4}
${options.decoupled ? 'model_transaction_policy { decoupled: true }' : ''}
input [{ name: "IN" data_type: TYPE_INT32 dims: [1] }]
output [{ name: "OUT" data_type: TYPE_INT32 dims: [1] }]
sequence_batching {
  ${options.iterative ? 'iterative_sequence: true' : ''}
  ${options.strategy ?? 'oldest { max_candidate_sequences: 4 }'}
  ${options.idleUs ? `max_sequence_idle_microseconds: ${options.idleUs}` : ''}
  control_input [
    { name: "START" control [{ kind: CONTROL_SEQUENCE_START int32_false_true: [0, 1] }] },
    { name: "END" control [{ kind: CONTROL_SEQUENCE_END int32_false_true: [0, 1] }] },
    { name: "READY" control [{ kind: CONTROL_SEQUENCE_READY int32_false_true: [0, 1] }] },
    { name: "CORRID" control [{ kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 }] }
  ]
  ${state ? 'state [{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [1] }]' : ''}
}
instance_group [{ count: 1 kind: KIND_CPU }]
parameters { key: "mode" value: { string_value: "${options.mode ?? 'countdown'}" } }
parameters { key: "delay_ms" value: { string_value: "${options.delayMs ?? 0}" } }
${options.extra ?? ''}
`;
}
