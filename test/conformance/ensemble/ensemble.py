"""Ensembles through tritonclient: a two-step pipeline of the ONNX `simple` model ("double")
inferred over HTTP and gRPC, its metadata and config, the composing model's statistics, and a
request missing an input."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402


def pipeline_inputs(module, batch=2):
    a = np.arange(16 * batch, dtype=np.int32).reshape(batch, 16)
    b = np.full((batch, 16), 7, dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [batch, 16], "INT32"), module.InferInput("INPUT1", [batch, 16], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


@case
def http_ensemble_infer(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    inputs, a, b = pipeline_inputs(httpclient)
    result = c.infer("double", inputs, request_id="e1")
    assert result.get_response()["id"] == "e1"
    assert result.get_response()["model_name"] == "double"
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), 2 * a)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * b)


@case
def grpc_ensemble_infer(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    inputs, a, b = pipeline_inputs(grpcclient, batch=3)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT1")]
    result = c.infer("double", inputs, outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), 2 * b)
    assert result.as_numpy("OUTPUT0") is None


@case
def ensemble_metadata_and_config(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    md = c.get_model_metadata("double")
    assert md["platform"] == "ensemble", md
    assert [t["name"] for t in md["inputs"]] == ["INPUT0", "INPUT1"], md
    cfg = grpcclient.InferenceServerClient(ctx["grpc"]).get_model_config("double", as_json=True)["config"]
    steps = cfg["ensemble_scheduling"]["step"]
    assert [s["model_name"] for s in steps] == ["simple", "simple"], steps
    assert steps[0]["output_map"]["OUTPUT0"] == "sum", steps


@case
def ensemble_statistics(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])

    def counts(model):
        stats = c.get_inference_statistics(model)["model_stats"][0]
        return stats["inference_stats"]["success"]["count"], stats["inference_count"]

    ens_before, _ = counts("double")
    simple_before, simple_inferences_before = counts("simple")
    for _ in range(3):
        inputs, _, _ = pipeline_inputs(httpclient, batch=2)
        c.infer("double", inputs)
    ens_after, _ = counts("double")
    simple_after, simple_inferences_after = counts("simple")
    assert ens_after - ens_before == 3, (ens_before, ens_after)
    # Each ensemble request runs `simple` twice, batch 2 each time.
    assert simple_after - simple_before == 6, (simple_before, simple_after)
    assert simple_inferences_after - simple_inferences_before == 12, (simple_inferences_before, simple_inferences_after)


@case
def ensemble_missing_input(ctx):
    inputs, _, _ = pipeline_inputs(httpclient)
    expect_error(lambda: httpclient.InferenceServerClient(ctx["http"]).infer("double", inputs[:1]), status="400",
                 contains=["INPUT1"])
    g_inputs, _, _ = pipeline_inputs(grpcclient)
    expect_error(lambda: grpcclient.InferenceServerClient(ctx["grpc"]).infer("double", g_inputs[:1]),
                 status="StatusCode.INVALID_ARGUMENT", contains=["INPUT1"])


if __name__ == "__main__":
    run()
