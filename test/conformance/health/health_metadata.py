"""Health, server and model metadata, model config through tritonclient (HTTP, gRPC, both aio)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, expect_error_async, run  # noqa: E402

import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.grpc.aio as grpcaio  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.http.aio as httpaio  # noqa: E402

SIMPLE_IO = [("INPUT0", "INT32", [-1, 16]), ("INPUT1", "INT32", [-1, 16])]
SIMPLE_OUT = [("OUTPUT0", "INT32", [-1, 16]), ("OUTPUT1", "INT32", [-1, 16])]


def tensors(entries):
    return [(t["name"], t["datatype"], [int(d) for d in t["shape"]]) for t in entries]


@case
def http_health(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    assert c.is_server_live()
    assert c.is_server_ready()
    assert c.is_model_ready("simple")
    assert c.is_model_ready("simple", "1")
    assert not c.is_model_ready("no_such_model")
    assert not c.is_model_ready("simple", "7")


@case
def grpc_health(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    assert c.is_server_live()
    assert c.is_server_ready()
    assert c.is_model_ready("simple")
    assert c.is_model_ready("simple", "1")
    # An unknown model, or a version that cannot serve, is ready=false with an OK status, as Triton
    # 2.51's ModelReady answers (Model Analyzer asks this for every repository index entry).
    assert not c.is_model_ready("no_such_model")
    assert not c.is_model_ready("simple", "7")


@case
def http_server_metadata(ctx):
    md = httpclient.InferenceServerClient(ctx["http"]).get_server_metadata()
    assert md["name"] == "triton", md
    for ext in ("classification", "model_repository", "binary_tensor_data", "statistics", "model_configuration"):
        assert ext in md["extensions"], (ext, md)


@case
def grpc_server_metadata(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    md = c.get_server_metadata()
    assert md.name == "triton"
    assert "statistics" in md.extensions
    as_json = c.get_server_metadata(as_json=True)
    assert as_json["extensions"] == list(md.extensions)
    assert as_json["version"] == httpclient.InferenceServerClient(ctx["http"]).get_server_metadata()["version"]


@case
def http_model_metadata(ctx):
    md = httpclient.InferenceServerClient(ctx["http"]).get_model_metadata("simple")
    assert md["name"] == "simple"
    assert md["versions"] == ["1"]
    assert md["platform"] == "onnxruntime_onnx"
    assert tensors(md["inputs"]) == SIMPLE_IO, md
    assert tensors(md["outputs"]) == SIMPLE_OUT, md


@case
def grpc_model_metadata(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    md = c.get_model_metadata("simple", "1")
    assert md.name == "simple" and list(md.versions) == ["1"]
    assert [(t.name, t.datatype, list(t.shape)) for t in md.inputs] == SIMPLE_IO
    md_json = c.get_model_metadata("simple", as_json=True)
    # as_json goes through protobuf's JSON form, where int64 shape entries are strings.
    assert tensors(md_json["outputs"]) == SIMPLE_OUT, md_json


@case
def http_model_config(ctx):
    cfg = httpclient.InferenceServerClient(ctx["http"]).get_model_config("simple")
    assert cfg["name"] == "simple"
    assert cfg["max_batch_size"] == 8
    assert [(t["name"], t["data_type"], t["dims"]) for t in cfg["input"]] == [
        ("INPUT0", "TYPE_INT32", [16]),
        ("INPUT1", "TYPE_INT32", [16]),
    ]
    assert cfg["instance_group"][0]["kind"] == "KIND_CPU"


@case
def grpc_model_config(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    cfg = c.get_model_config("simple").config
    assert cfg.name == "simple" and cfg.max_batch_size == 8
    assert [list(t.dims) for t in cfg.output] == [[16], [16]]
    as_json = c.get_model_config("simple", as_json=True)["config"]
    assert as_json["input"][1]["data_type"] == "TYPE_INT32"
    assert as_json["max_batch_size"] == 8


@case
async def http_aio_health_and_metadata(ctx):
    c = httpaio.InferenceServerClient(ctx["http"])
    try:
        assert await c.is_server_live()
        assert await c.is_server_ready()
        assert await c.is_model_ready("simple_string")
        assert not await c.is_model_ready("no_such_model")
        md = await c.get_model_metadata("simple_string")
        assert [t["datatype"] for t in md["inputs"]] == ["BYTES", "BYTES"]
        cfg = await c.get_model_config("simple_string")
        assert cfg["input"][0]["data_type"] == "TYPE_STRING"
    finally:
        await c.close()


@case
async def grpc_aio_health_and_metadata(ctx):
    c = grpcaio.InferenceServerClient(ctx["grpc"])
    try:
        assert await c.is_server_live()
        assert await c.is_server_ready()
        assert await c.is_model_ready("simple_string")
        assert not await c.is_model_ready("no_such_model")
        md = await c.get_model_metadata("simple_string")
        assert [t.datatype for t in md.inputs] == ["BYTES", "BYTES"]
        cfg = await c.get_model_config("simple_string", as_json=True)
        assert cfg["config"]["input"][0]["data_type"] == "TYPE_STRING"
    finally:
        await c.close()


@case
def metadata_of_unknown_model(ctx):
    expect_error(
        lambda: httpclient.InferenceServerClient(ctx["http"]).get_model_metadata("no_such_model"),
        "404",
        ["Request for unknown model: 'no_such_model' is not found"],
    )
    expect_error(
        lambda: grpcclient.InferenceServerClient(ctx["grpc"]).get_model_config("no_such_model"),
        "StatusCode.NOT_FOUND",
        ["Request for unknown model: 'no_such_model' is not found"],
    )


@case
def http_log_settings(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    settings = c.get_log_settings()
    assert settings["log_verbose_level"] == 0 and settings["log_format"] == "default", settings
    updated = c.update_log_settings({"log_verbose_level": 2, "log_format": "ISO8601"})
    assert updated["log_verbose_level"] == 2 and updated["log_format"] == "ISO8601", updated
    assert c.get_log_settings()["log_verbose_level"] == 2
    c.update_log_settings({"log_verbose_level": 0, "log_format": "default"})
    expect_error(lambda: c.update_log_settings({"log_format": "xml"}), None, ["log_format"])


@case
def grpc_log_settings(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    settings = c.get_log_settings(as_json=True)["settings"]
    assert settings["log_info"]["bool_param"] is True, settings
    c.update_log_settings({"log_verbose_level": 1, "log_info": True})
    settings = c.get_log_settings().settings
    assert settings["log_verbose_level"].uint32_param == 1, settings
    c.update_log_settings({"log_verbose_level": 0})
    assert httpclient.InferenceServerClient(ctx["http"]).get_log_settings()["log_verbose_level"] == 0


run()
