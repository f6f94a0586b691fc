/**
 * A stateful accumulator for the sequence batcher (models-and-scheduling.md §5): OUTPUT =
 * INPUT + STATE_IN and STATE_OUT = OUTPUT, all INT32 [batch, 1]. Its config declares only INPUT
 * and OUTPUT; the sequence batcher supplies STATE_IN (implicit state, zero initial state) and the
 * control inputs START, END, READY (INT32) and CORRID, which the model echoes as OUT_START,
 * OUT_END, OUT_READY and OUT_CORRID so tests can read what the server sent.
 */
import { OnnxGraphBuilder } from '../onnx/model-writer.js';
import type { BuilderOptions, TestModel } from './test-model.js';
import { finishModel } from './test-model.js';
import { modelConfigText } from './config-text.js';

export interface SequenceModelOptions extends BuilderOptions {
  /** `sequence_batching` strategy block, e.g. `direct { }` or `oldest { max_candidate_sequences: 4 }`. Default direct. */
  readonly strategy?: string;
  /** Datatype of the CORRID control: 'UINT64' (default) or 'STRING'. */
  readonly corrid?: 'UINT64' | 'STRING';
  /** `max_sequence_idle_microseconds`; default 5 s. */
  readonly idleMicroseconds?: number;
  /** Instances (KIND_CPU). Default 1. */
  readonly instances?: number;
  /** Also list STATE_OUT in `output`, so clients may request it. */
  readonly stateOutputListed?: boolean;
}

export function sequenceAccumulatorModel(options: SequenceModelOptions = {}): TestModel {
  const name = options.name ?? 'sequence_accumulator';
  const maxBatchSize = options.maxBatchSize ?? 4;
  const corrid = options.corrid ?? 'UINT64';
  const shape = ['batch', 1];
  const g = new OnnxGraphBuilder(name)
    .input('INPUT', 'INT32', shape)
    .input('STATE_IN', 'INT32', shape)
    .input('START', 'INT32', shape)
    .input('END', 'INT32', shape)
    .input('READY', 'INT32', shape)
    .input('CORRID', corrid, shape)
    .output('OUTPUT', 'INT32', shape)
    .output('STATE_OUT', 'INT32', shape)
    .output('OUT_START', 'INT32', shape)
    .output('OUT_END', 'INT32', shape)
    .output('OUT_READY', 'INT32', shape)
    .output('OUT_CORRID', corrid, shape)
    .node('Add', ['INPUT', 'STATE_IN'], ['OUTPUT'])
    .node('Identity', ['OUTPUT'], ['STATE_OUT'])
    .node('Identity', ['START'], ['OUT_START'])
    .node('Identity', ['END'], ['OUT_END'])
    .node('Identity', ['READY'], ['OUT_READY'])
    .node('Identity', ['CORRID'], ['OUT_CORRID']);
  const model = finishModel(g, name, maxBatchSize, options.model);
  const tensor = (n: string, type: 'INT32' | 'UINT64' | 'STRING') => ({ name: n, dataType: type === 'STRING' ? ('BYTES' as const) : type, dims: [1] });
  const outputs = [
    tensor('OUTPUT', 'INT32'),
    tensor('OUT_START', 'INT32'),
    tensor('OUT_END', 'INT32'),
    tensor('OUT_READY', 'INT32'),
    tensor('OUT_CORRID', corrid),
    ...(options.stateOutputListed ? [tensor('STATE_OUT', 'INT32')] : []),
  ];
  const extra = `sequence_batching {
  max_sequence_idle_microseconds: ${options.idleMicroseconds ?? 5_000_000}
  ${options.strategy ?? 'direct { }'}
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
    { name: "END" control [ { kind: CONTROL_SEQUENCE_END int32_false_true: [ 0, 1 ] } ] },
    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_${corrid} } ] }
  ]
  state [
    {
      input_name: "STATE_IN"
      output_name: "STATE_OUT"
      data_type: TYPE_INT32
      dims: [ 1 ]
      initial_state: { data_type: TYPE_INT32 dims: [ 1 ] zero_data: true name: "zero" }
    }
  ]
}
instance_group [ { kind: KIND_CPU count: ${options.instances ?? 1} } ]`;
  const config = modelConfigText({ name, maxBatchSize, inputs: [tensor('INPUT', 'INT32')], outputs, extra });
  return { ...model, config };
}
