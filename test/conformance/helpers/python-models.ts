/**
 * Python models that both Triton and Nereid serve from the same files, for the tests and the
 * benchmark that compare them (test/conformance/perf/perf-streaming.test.ts, bench/vs-triton.ts).
 */

/** A FP32 tensor of 16 elements per batch row. */
export const FP32_16 = 'data_type: TYPE_FP32, dims: [ 16 ]';

/** `config.pbtxt` and `1/model.py` of a Python model whose class has `body` (indented methods). */
export function pythonModelFiles(name: string, config: string, body: string): Record<string, string> {
  return {
    'config.pbtxt': `name: "${name}"\nbackend: "python"\n${config}\n`,
    '1/model.py': `import time\nimport numpy as np\nimport triton_python_backend_utils as pb_utils\n\n\nclass TritonPythonModel:\n${body}`,
  };
}

/** The inputs and outputs of `add_sub`: INPUT0, INPUT1 in; their sum and difference out. */
export const ADD_SUB_IO = `input [ { name: "INPUT0", ${FP32_16} }, { name: "INPUT1", ${FP32_16} } ]\noutput [ { name: "OUTPUT0", ${FP32_16} }, { name: "OUTPUT1", ${FP32_16} } ]`;

/** `add_sub`'s execute: OUTPUT0 = INPUT0 + INPUT1, OUTPUT1 = INPUT0 - INPUT1, per request. */
export const ADD_SUB_EXECUTE = `    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]))
        return responses
`;

/** A decoupled execute: four responses per request (INPUT0 + 0..3), then a flags-only final. */
export const DECOUPLED_EXECUTE = `    def execute(self, requests):
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            sender = request.get_response_sender()
            for i in range(4):
                sender.send(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", x + np.float32(i))]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
`;

/**
 * `add_sub` without batching and `ens`, an ensemble of two `add_sub` steps: S = (A + B) + (A - B).
 * The trace tests compare both servers' traces of an ensemble on these.
 */
export const ADD_SUB_ENSEMBLE_MODELS: Record<string, Record<string, string>> = {
  add_sub: pythonModelFiles('add_sub', `max_batch_size: 0\n${ADD_SUB_IO}`, ADD_SUB_EXECUTE),
  ens: {
    'config.pbtxt': `name: "ens"
platform: "ensemble"
max_batch_size: 0
input [ { name: "A", ${FP32_16} }, { name: "B", ${FP32_16} } ]
output [ { name: "S", ${FP32_16} } ]
ensemble_scheduling { step [
  { model_name: "add_sub" model_version: -1 input_map { key: "INPUT0" value: "A" } input_map { key: "INPUT1" value: "B" } output_map { key: "OUTPUT0" value: "T" } output_map { key: "OUTPUT1" value: "D" } },
  { model_name: "add_sub" model_version: -1 input_map { key: "INPUT0" value: "T" } input_map { key: "INPUT1" value: "D" } output_map { key: "OUTPUT0" value: "S" } }
] }
`,
    '1/.keep': '',
  },
};
