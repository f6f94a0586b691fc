"""The trace extension through tritonclient, unchanged, against real Triton 2.51 and Nereid.

Each case makes the same calls on both servers (tritonclient.http and tritonclient.grpc:
get_trace_settings, update_trace_settings, errors) and compares the answers; the trace file
case turns tracing on through the API with log_frequency 1 (one file per trace), sends the same
HTTP, gRPC and ensemble requests to both and compares the traces' shapes (model, parent, the
timestamp names). Each server writes its own file, so trace_file is compared as '<trace file>'.
"""
import glob
import json
import os
import sys
import time

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from conformance import case, run  # noqa: E402

CTX = json.loads(sys.argv[1])
SERVERS = ("triton", "nereid")


def clients(name):
    ends = CTX[name]
    return {"http": httpclient.InferenceServerClient(ends["http"]), "grpc": grpcclient.InferenceServerClient(ends["grpc"])}


CLIENTS = {name: clients(name) for name in SERVERS}


def normalise(answer, name):
    """A settings answer in one form for both protocols, the server's own file path replaced."""
    if isinstance(answer, dict) and "settings" in answer:
        answer = {k: v.get("value", []) for k, v in answer["settings"].items()}
    out = {}
    for k, v in answer.items():
        values = v if isinstance(v, list) else [v]
        out[k] = ["<trace file>" if x == CTX["files"][name] else x for x in values]
    return out


def call(name, protocol, method, **kwargs):
    """The call's normalised answer, or its error as (status, message)."""
    client = CLIENTS[name][protocol]
    if protocol == "grpc":
        kwargs["as_json"] = True
    try:
        return normalise(getattr(client, method)(**kwargs), name)
    except InferenceServerException as err:
        return {"error": [str(err.status()), err.message()]}


def same(steps):
    """Runs `steps` (method, kwargs) in order on each server over each protocol; the answers must match."""
    for protocol in ("http", "grpc"):
        answers = {name: [call(name, protocol, m, **kw) for m, kw in steps] for name in SERVERS}
        for i, (t, n) in enumerate(zip(answers["triton"], answers["nereid"])):
            assert t == n, f"{protocol} step {i} {steps[i]}: triton {t} != nereid {n}"


@case
def global_and_model_settings(_ctx):
    same(
        [
            ("get_trace_settings", {}),
            ("get_trace_settings", {"model_name": "add_sub"}),
            ("update_trace_settings", {"model_name": "add_sub", "settings": {"trace_rate": "5", "trace_level": ["TIMESTAMPS", "TENSORS"]}}),
            ("update_trace_settings", {"settings": {"trace_count": "10", "log_frequency": "3"}}),
            ("get_trace_settings", {"model_name": "add_sub"}),
            ("get_trace_settings", {"model_name": "ens"}),
            ("update_trace_settings", {"model_name": "add_sub", "settings": {"trace_rate": None, "trace_level": None}}),
            ("get_trace_settings", {"model_name": "add_sub"}),
            ("update_trace_settings", {"settings": {"trace_count": None, "log_frequency": None}}),
            ("get_trace_settings", {}),
        ]
    )


@case
def refused_settings(_ctx):
    same(
        [
            ("update_trace_settings", {"settings": {"trace_file": "/tmp/elsewhere.json"}}),
            ("update_trace_settings", {"model_name": "add_sub", "settings": {"trace_file": "/tmp/elsewhere.json"}}),
            ("update_trace_settings", {"settings": {"trace_rate": "abc"}}),
            ("update_trace_settings", {"settings": {"trace_rate": "0"}}),
            ("update_trace_settings", {"settings": {"trace_count": "-2"}}),
            ("update_trace_settings", {"settings": {"trace_rate": "99999999999"}}),
            ("update_trace_settings", {"settings": {"log_frequency": "x"}}),
            ("update_trace_settings", {"settings": {"trace_level": ["OFF", "TIMESTAMPS"]}}),
            ("get_trace_settings", {"model_name": "nope"}),
            ("update_trace_settings", {"model_name": "nope", "settings": {"trace_rate": "2"}}),
            ("get_trace_settings", {}),
        ]
    )


def trace_shapes(name):
    """The traces of each file <file>.<k>: per trace, its model, whether it is a child, its timestamp names."""
    base = CTX["files"][name]
    deadline = time.time() + 30
    while True:
        files = sorted(glob.glob(base + ".*"), key=lambda f: int(f.rsplit(".", 1)[1]))
        try:
            if len(files) >= 3:
                traces = []
                for f in files:
                    by_id = {}
                    with open(f) as fh:
                        for event in json.load(fh):
                            t = by_id.setdefault(event["id"], {"stamps": set()})
                            if "model_name" in event:
                                t["model"] = event["model_name"]
                                t["request_id"] = event.get("request_id", "")
                                t["child"] = "parent_id" in event
                            for s in event.get("timestamps", []):
                                t["stamps"].add(s["name"])
                    traces.append(sorted((t["model"], t["request_id"], t["child"], sorted(t["stamps"])) for t in by_id.values()))
                return sorted(traces)
        except (ValueError, KeyError):
            pass  # a file being written
        if time.time() > deadline:
            raise AssertionError(f"{name} wrote {files}, expected three trace files")
        time.sleep(0.2)


@case
def trace_file_per_trace(_ctx):
    for name in SERVERS:
        c = CLIENTS[name]
        c["http"].update_trace_settings(settings={"trace_level": ["TIMESTAMPS"], "trace_rate": "1", "log_frequency": "1"})
        a = np.arange(16, dtype=np.float32)
        inputs = []
        for n in ("INPUT0", "INPUT1"):
            i = httpclient.InferInput(n, [16], "FP32")
            i.set_data_from_numpy(a)
            inputs.append(i)
        c["http"].infer("add_sub", inputs, request_id="h1")
        ginputs = []
        for n in ("INPUT0", "INPUT1"):
            i = grpcclient.InferInput(n, [16], "FP32")
            i.set_data_from_numpy(a)
            ginputs.append(i)
        c["grpc"].infer("add_sub", ginputs, request_id="g1")
        einputs = []
        for n in ("A", "B"):
            i = httpclient.InferInput(n, [16], "FP32")
            i.set_data_from_numpy(a)
            einputs.append(i)
        result = c["http"].infer("ens", einputs, request_id="e1")
        assert np.array_equal(result.as_numpy("S"), 2 * a), result.as_numpy("S")
        c["http"].update_trace_settings(settings={"trace_level": ["OFF"]})
    triton, nereid = trace_shapes("triton"), trace_shapes("nereid")
    assert triton == nereid, f"triton {triton}\nnereid {nereid}"


run()
