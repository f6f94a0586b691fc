"""The statistics extension through tritonclient: counts that follow known traffic exactly, the
HTTP and gRPC forms agreeing, and the field set perf_analyzer reads (protocol.md §7.3 item 5)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.grpc.aio as grpcaio  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.http.aio as httpaio  # noqa: E402

DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output", "cache_hit", "cache_miss")


def infer(module, client, batch):
    inputs = [module.InferInput("INPUT0", [batch, 16], "INT32"), module.InferInput("INPUT1", [batch, 16], "INT32")]
    for t in inputs:
        t.set_data_from_numpy(np.ones((batch, 16), dtype=np.int32))
    client.infer("simple", inputs)


def http_stats(ctx, model="simple", version=""):
    return httpclient.InferenceServerClient(ctx["http"]).get_inference_statistics(model, version)


def simple_entry(stats):
    entries = [m for m in stats["model_stats"] if m["name"] == "simple"]
    assert len(entries) == 1, stats
    return entries[0]


def as_int(v):
    # protobuf's JSON form writes uint64 as strings; HTTP writes numbers.
    return int(v)


@case
def counts_follow_traffic(ctx):
    before = simple_entry(http_stats(ctx))
    h = httpclient.InferenceServerClient(ctx["http"])
    g = grpcclient.InferenceServerClient(ctx["grpc"])
    for batch in (1, 2, 3):
        infer(httpclient, h, batch)
        infer(grpcclient, g, batch)
    after = simple_entry(http_stats(ctx))
    requests = 6
    inferences = 2 * (1 + 2 + 3)
    assert after["inference_count"] - before["inference_count"] == inferences, (before, after)
    assert after["execution_count"] - before["execution_count"] == requests, (before, after)
    s0, s1 = before["inference_stats"], after["inference_stats"]
    for key in ("success", "queue", "compute_input", "compute_infer", "compute_output"):
        assert s1[key]["count"] - s0[key]["count"] == requests, (key, s0[key], s1[key])
        assert s1[key]["ns"] > s0[key]["ns"], (key, s0[key], s1[key])
    assert s1["success"]["ns"] - s0["success"]["ns"] >= (s1["compute_infer"]["ns"] - s0["compute_infer"]["ns"])
    assert after["last_inference"] >= before["last_inference"] and after["last_inference"] > 0
    by_size = {b["batch_size"]: b for b in after["batch_stats"]}
    assert {1, 2, 3} <= set(by_size), after["batch_stats"]


@case
def every_field_perf_analyzer_reads(ctx):
    entry = simple_entry(http_stats(ctx))
    assert isinstance(entry["name"], str) and isinstance(entry["version"], str)
    for key in ("inference_count", "execution_count"):
        assert isinstance(entry[key], int) and entry[key] >= 0, key
    for key in DURATIONS:
        assert isinstance(entry["inference_stats"][key]["count"], int), key
        assert isinstance(entry["inference_stats"][key]["ns"], int), key


@case
def http_and_grpc_agree(ctx):
    h = simple_entry(http_stats(ctx, "simple", "1"))
    g = grpcclient.InferenceServerClient(ctx["grpc"]).get_inference_statistics("simple", "1", as_json=True)
    g = simple_entry(g)
    assert g["version"] == h["version"] == "1"
    assert as_int(g["inference_count"]) == h["inference_count"]
    assert as_int(g["execution_count"]) == h["execution_count"]
    for key in ("success", "compute_infer"):
        assert as_int(g["inference_stats"][key]["count"]) == h["inference_stats"][key]["count"], key
        assert as_int(g["inference_stats"][key]["ns"]) == h["inference_stats"][key]["ns"], key
    proto = grpcclient.InferenceServerClient(ctx["grpc"]).get_inference_statistics("simple")
    assert proto.model_stats[0].inference_stats.success.count == h["inference_stats"]["success"]["count"]


@case
def all_models(ctx):
    names = {m["name"] for m in http_stats(ctx, "")["model_stats"]}
    assert {"simple", "simple_string"} <= names, names
    names = {m.name for m in grpcclient.InferenceServerClient(ctx["grpc"]).get_inference_statistics("").model_stats}
    assert {"simple", "simple_string"} <= names, names


@case
async def aio_statistics(ctx):
    h = httpaio.InferenceServerClient(ctx["http"])
    g = grpcaio.InferenceServerClient(ctx["grpc"])
    try:
        hs = await h.get_inference_statistics("simple")
        gs = await g.get_inference_statistics("simple", as_json=True)
        assert simple_entry(hs)["inference_count"] == as_int(simple_entry(gs)["inference_count"])
    finally:
        await h.close()
        await g.close()


@case
def unknown_model_statistics(ctx):
    # protocol.md §3.14: 400 "requested model '<m>' is not available", as Triton words it.
    expect_error(lambda: http_stats(ctx, "no_such_model"), "400", ["requested model 'no_such_model' is not available"])
    expect_error(lambda: grpcclient.InferenceServerClient(ctx["grpc"]).get_inference_statistics("no_such_model"),
                 "StatusCode.INVALID_ARGUMENT", ["requested model 'no_such_model' is not available"])


run()
