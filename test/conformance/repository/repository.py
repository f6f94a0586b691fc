"""The model repository extension through tritonclient on a server in explicit mode: index, load,
unload, load with a configuration override and with file overrides, errors."""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.grpc.aio as grpcaio  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.http.aio as httpaio  # noqa: E402


def infer_simple(module, client, model="simple"):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    for t in inputs:
        t.set_data_from_numpy(np.full((1, 16), 3, dtype=np.int32))
    out = client.infer(model, inputs).as_numpy("OUTPUT0")
    np.testing.assert_array_equal(out, np.full((1, 16), 6, dtype=np.int32))


def state_of(index, name):
    return {e["name"]: e.get("state", "") for e in index}.get(name)


@case
def index_lists_loaded_and_unloaded(ctx):
    index = httpclient.InferenceServerClient(ctx["http"]).get_model_repository_index()
    assert state_of(index, "simple") == "READY", index
    assert state_of(index, "simple_string") is not None and state_of(index, "simple_string") != "READY", index
    g = grpcclient.InferenceServerClient(ctx["grpc"]).get_model_repository_index(as_json=True)
    names = {m["name"] for m in g["models"]}
    assert {"simple", "simple_string"} <= names, g


@case
def http_load_and_unload(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    assert not c.is_model_ready("simple_string")
    c.load_model("simple_string")
    assert c.is_model_ready("simple_string")
    assert state_of(c.get_model_repository_index(), "simple_string") == "READY"
    c.unload_model("simple_string")
    assert not c.is_model_ready("simple_string")
    # Unload returns once it has begun (protocol.md §3.13); the index shows UNLOADING until done.
    deadline = time.monotonic() + 30
    while True:
        entry = [e for e in c.get_model_repository_index() if e["name"] == "simple_string"][0]
        if entry["state"] != "UNLOADING" or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert entry["state"] == "UNAVAILABLE" and entry["reason"] == "unloaded", entry


@case
def grpc_load_and_unload(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    c.load_model("simple_string")
    assert c.is_model_ready("simple_string")
    c.unload_model("simple_string")
    # Triton's ModelReady answers false (not an error) once a model is unloaded.
    assert not c.is_model_ready("simple_string")


@case
def load_with_config_override(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    config = c.get_model_config("simple")
    override = {
        "name": "simple",
        "backend": "onnxruntime",
        "max_batch_size": 4,
        "input": config["input"],
        "output": config["output"],
        "instance_group": [{"kind": "KIND_CPU", "count": 2}],
    }
    c.load_model("simple", config=json.dumps(override))
    reloaded = c.get_model_config("simple")
    assert reloaded["max_batch_size"] == 4 and reloaded["instance_group"][0]["count"] == 2, reloaded
    infer_simple(httpclient, c)
    # Through gRPC, back to the repository's own configuration.
    g = grpcclient.InferenceServerClient(ctx["grpc"])
    g.load_model("simple")
    assert g.get_model_config("simple").config.max_batch_size == 8


@case
def load_with_file_override(ctx):
    with open(os.path.join(ctx["repository"], "simple", "1", "model.onnx"), "rb") as f:
        onnx = f.read()
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    config = c.get_model_config("simple", as_json=True)["config"]
    config["name"] = "simple"
    c.load_model("simple", config=json.dumps({k: config[k] for k in ("name", "backend", "max_batch_size", "input", "output")}), files={"file:1/model.onnx": onnx})
    assert c.is_model_ready("simple")
    infer_simple(grpcclient, c)
    h = httpclient.InferenceServerClient(ctx["http"])
    h.load_model("simple", config=json.dumps({"name": "simple", "backend": "onnxruntime", "max_batch_size": 8}), files={"file:1/model.onnx": onnx})
    infer_simple(httpclient, h)
    h.load_model("simple")


@case
async def aio_load_and_unload(ctx):
    h = httpaio.InferenceServerClient(ctx["http"])
    g = grpcaio.InferenceServerClient(ctx["grpc"])
    try:
        await h.load_model("simple_string")
        assert await g.is_model_ready("simple_string")
        await g.unload_model("simple_string")
        assert not await h.is_model_ready("simple_string")
        index = await g.get_model_repository_index(as_json=True)
        assert any(m["name"] == "simple_string" for m in index["models"])
    finally:
        await h.close()
        await g.close()


@case
def control_errors(ctx):
    h = httpclient.InferenceServerClient(ctx["http"])
    g = grpcclient.InferenceServerClient(ctx["grpc"])
    # The failure text is the contract (protocol.md §3.13: "400 or the mapped status").
    expect_error(lambda: h.load_model("no_such_model"), None, ["failed to load 'no_such_model'", "no directory 'no_such_model'"])
    expect_error(lambda: g.load_model("no_such_model"), None, ["failed to load 'no_such_model'", "no directory 'no_such_model'"])
    # A configuration override that does not parse fails Triton's repository poll (500).
    expect_error(lambda: h.load_model("simple", config="{not json"), "500", ["failed to load 'simple', failed to poll from model repository: "])
    # The failed loads left the serving model alone.
    infer_simple(httpclient, h)


run()
