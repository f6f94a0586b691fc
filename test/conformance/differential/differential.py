"""The differential test: the same requests to real Triton and to Nereid, answers compared.

argv[1] is a JSON object {"triton": {"http", "grpc"}, "nereid": {"http", "grpc"}, "repositories":
{"triton": path, "nereid": path}, "model_py": the source of the models' model.py}. Both servers
serve copies of the same repository of Python models (differential.test.ts writes it) in model
control mode explicit with every model loaded. Each case is a function of one server that sends
its requests (raw HTTP with http.client, raw gRPC with the generated stubs, no client library
logic in between) and returns what it got, normalised: ids of requests are fixed by the case,
timings become "was it positive", error messages are cut to their common prefix (the text before
the first quote or colon), since the detail after it is each server's own. A case runs against
Triton first, then Nereid, so stateful cases (load, unload, statistics) see the same history.

A case passes when both answers are equal. ALLOWED lists the cases whose answers differ on
purpose, each with the reason docs/differences.md gives; such a case passes only while the
answers still differ (an entry that no longer applies fails, so the list stays true).

Prints "CONFORMANCE-RESULTS <json>" as the other scripts of the tier do (lib/conformance.py);
a failing case's error holds both answers.
"""
import base64
import http.client
import json
import os
import re
import struct
import sys
import time
import traceback

import grpc
import numpy as np
from google.protobuf.json_format import MessageToDict
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg

# Differences that are deliberate; docs/differences.md states each.
CLIENT_SHM = "client shared memory is off unless the server is started with --allow-client-shm=true (501 / UNIMPLEMENTED)"
MALFORMED = "a malformed request body (not JSON, or a value of the wrong JSON type) is a client error: Nereid answers 400 naming the field where Triton answers 500 with its JSON parser's message"
ALLOWED = {
    "shm_register_default": CLIENT_SHM,
    "shm_unregister_default": CLIENT_SHM,
    "shm_register_bad": CLIENT_SHM,
    "statistics_memory_usage": "memory_usage holds what a model holds: a CPU entry with a Python model's stub memory; Triton's Python backend reports none ([])",
    "infer_bad_json": MALFORMED,
    "infer_parameter_wrong_type": MALFORMED,
    "repository_parameters_malformed": MALFORMED + " (Triton ignores an unload_dependents that is not a bool)",
    "repository_load_unknown_parameter": "an unknown load parameter is a client error: Nereid answers 400 naming it and the parameters a load takes; Triton 2.51 answers 500 'unexpected error on creating Triton parameter'",
    "infer_version_not_integer": "a version string that is not an integer ('1.0') is refused (INVALID_ARGUMENT); Triton 2.51 reads its leading digits as the version",
    "log_settings_bad_json": MALFORMED,
    "repository_config_override_not_string": MALFORMED,
    "statistics_model_error_response": (
        "a model's own error response (InferenceResponse(error=...)) counts as a failed request in Nereid; "
        "Triton 2.51's Python backend counts it as a success, against its own statistics reporter "
        "(a request whose response carries an error is reported unsuccessful)"
    ),
    "statistics_response_stats": "Nereid fills response_stats for every model; Triton 2.51's Python backend reports them for no model that is not decoupled",
    "repository_file_override_absolute": "Nereid refuses an absolute file override name; Triton 2.51 accepts the load and then fails it for lack of a version (400)",
    "repository_file_override_not_base64": "Nereid refuses a file override whose value is not base64; Triton 2.51 loads what it decodes",
}

_cases = []


def case(fn):
    _cases.append(fn)
    return fn


class Server:
    def __init__(self, endpoints, repository, shm_endpoints=None):
        self.repository = repository
        # Where the client shared-memory cases go: Triton itself; for Nereid a second server started
        # with --allow-client-shm=true (the first runs with the default, client shared memory off).
        self.shm = self if shm_endpoints is None else Server(shm_endpoints, repository)
        host, port = endpoints["http"].rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.channel = grpc.insecure_channel(endpoints["grpc"])
        self.stub = pbg.GRPCInferenceServiceStub(self.channel)

    def http(self, method, path, body=None, headers=None):
        """(status, JSON body or text) of one request on a fresh connection."""
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            if isinstance(body, (dict, list)):
                body = json.dumps(body).encode()
            conn.request(method, path, body=body, headers=headers or {})
            r = conn.getresponse()
            data = r.read()
            header_length = r.getheader("Inference-Header-Content-Length")
            if header_length is not None:
                head = json.loads(data[: int(header_length)])
                return r.status, {"json": normalise_body(head), "binary": base64.b64encode(data[int(header_length) :]).decode()}
            try:
                return r.status, normalise_body(json.loads(data)) if data else None
            except ValueError:
                return r.status, data.decode(errors="replace")
        finally:
            conn.close()

    def grpc(self, method, request):
        """("OK", response as a dict) or (status code name, message prefix)."""
        try:
            response = getattr(self.stub, method)(request, timeout=60)
        except grpc.RpcError as err:
            return err.code().name, prefix(err.details())
        return "OK", normalise_body(MessageToDict(response, preserving_proto_field_name=True))


FULL_MESSAGES = os.environ.get("NEREID_DIFFERENTIAL_FULL_MESSAGES") == "1"


def prefix(message):
    """The common prefix of an error message: the text before the first quote or colon (the
    whole message with NEREID_DIFFERENTIAL_FULL_MESSAGES=1, to read both servers' wording)."""
    message = re.sub(r"^\[request id: [^\]]*\] ", "", message or "")
    if FULL_MESSAGES:
        return message
    return re.split(r"[:'\"]", message or "", maxsplit=1)[0].strip()


def normalise_body(body):
    if isinstance(body, dict):
        out = {}
        for k, v in body.items():
            if k == "error" and isinstance(v, str):
                out[k] = prefix(v)
            elif k == "ns" or k.endswith("_ns") or k in ("last_inference",):
                out[k] = "positive" if int(v) > 0 else "zero"
            else:
                out[k] = normalise_body(v)
        return out
    if isinstance(body, list):
        return [normalise_body(v) for v in body]
    return body


def differences(triton, nereid, path="answer"):
    """One line per place where the answers differ: its path, then Triton's and Nereid's value."""
    if isinstance(triton, dict) and isinstance(nereid, dict):
        out = []
        for k in sorted(set(triton) | set(nereid), key=str):
            out += differences(triton.get(k, "<absent>"), nereid.get(k, "<absent>"), f"{path}.{k}")
        return out
    if isinstance(triton, list) and isinstance(nereid, list) and len(triton) == len(nereid):
        out = []
        for i, (t, n) in enumerate(zip(triton, nereid)):
            out += differences(t, n, f"{path}[{i}]")
        return out
    if triton == nereid:
        return []
    return [f"{path}: triton {json.dumps(triton, default=str)} | nereid {json.dumps(nereid, default=str)}"]


def run():
    ctx = json.loads(sys.argv[1])
    servers = {
        "triton": Server(ctx["triton"], ctx["repositories"]["triton"]),
        "nereid": Server(ctx["nereid"], ctx["repositories"]["nereid"], ctx["nereid_shm"]),
    }
    results = {}
    for fn in _cases:
        name = fn.__name__
        try:
            answers = {}
            for side in ("triton", "nereid"):
                try:
                    answers[side] = fn(servers[side])
                except Exception:  # noqa: B902 - the case's own failure is an answer to compare
                    answers[side] = {"raised": traceback.format_exc().strip().splitlines()[-1]}
            same = answers["triton"] == answers["nereid"]
            shown = "\n".join(differences(answers["triton"], answers["nereid"])) or json.dumps(answers, sort_keys=True, default=str)
            if name in ALLOWED:
                if same:
                    raise AssertionError(f"allow-listed ({ALLOWED[name]}) but the answers are now the same; remove it from ALLOWED and docs/differences.md\n{shown}")
            elif not same:
                raise AssertionError(f"the answers differ\n{shown}")
            results[name] = {"status": "pass"}
        except BaseException:  # noqa: B902
            results[name] = {"status": "fail", "error": traceback.format_exc()}
    if _shm_handle is not None:
        import tritonclient.utils.shared_memory as shm

        shm.destroy_shared_memory_region(_shm_handle)
    print("CONFORMANCE-RESULTS " + json.dumps(results), flush=True)


# --- requests -------------------------------------------------------------------------------

VALUES = [float(i) for i in range(16)]


def json_infer(model, inputs=None, outputs=None, version=None, **extra):
    body = {"id": "diff-1", "inputs": inputs if inputs is not None else [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": VALUES}]}
    if outputs is not None:
        body["outputs"] = outputs
    body.update(extra)
    path = f"/v2/models/{model}" + (f"/versions/{version}" if version is not None else "") + "/infer"
    return path, body


def grpc_infer(model, shape=(1, 16), datatype="FP32", name="INPUT0", outputs=(), version="", data=None, raw=True):
    req = pb.ModelInferRequest(model_name=model, model_version=version, id="diff-1")
    tensor = req.inputs.add()
    tensor.name, tensor.datatype = name, datatype
    tensor.shape.extend(shape)
    count = int(np.prod(shape)) if len(shape) else 1
    array = np.arange(count, dtype=np.float32) if data is None else data
    if raw:
        req.raw_input_contents.append(array.tobytes())
    else:
        tensor.contents.fp32_contents.extend(array.tolist())
    for o in outputs:
        req.outputs.add().name = o
    return req


def infer_both(s, model, http_inputs=None, grpc_request=None, outputs=None, version=None):
    path, body = json_infer(model, http_inputs, outputs, version)
    return {"http": s.http("POST", path, body), "grpc": s.grpc("ModelInfer", grpc_request or grpc_infer(model, version=str(version or "")))}


# --- health and metadata --------------------------------------------------------------------


@case
def health(s):
    return {
        "live": s.http("GET", "/v2/health/live"),
        "ready": s.http("GET", "/v2/health/ready"),
        "grpc_live": s.grpc("ServerLive", pb.ServerLiveRequest()),
        "grpc_ready": s.grpc("ServerReady", pb.ServerReadyRequest()),
    }


@case
def model_ready(s):
    return {
        "http": s.http("GET", "/v2/models/ident/ready"),
        "http_version": s.http("GET", "/v2/models/ident/versions/1/ready"),
        "grpc": s.grpc("ModelReady", pb.ModelReadyRequest(name="ident")),
        "grpc_version": s.grpc("ModelReady", pb.ModelReadyRequest(name="ident", version="1")),
    }


@case
def model_ready_unknown(s):
    return {
        "http_model": s.http("GET", "/v2/models/nope/ready"),
        "http_version": s.http("GET", "/v2/models/ident/versions/9/ready"),
        "http_bad_version": s.http("GET", "/v2/models/ident/versions/x/ready"),
        "grpc_model": s.grpc("ModelReady", pb.ModelReadyRequest(name="nope")),
        "grpc_version": s.grpc("ModelReady", pb.ModelReadyRequest(name="ident", version="9")),
    }


@case
def server_metadata(s):
    status, body = s.http("GET", "/v2")
    code, g = s.grpc("ServerMetadata", pb.ServerMetadataRequest())
    return {"http": [status, sorted(body.keys())], "grpc": [code, sorted(g.keys())]}


@case
def server_metadata_extensions(s):
    _, body = s.http("GET", "/v2")
    _, g = s.grpc("ServerMetadata", pb.ServerMetadataRequest())
    return {"http": sorted(body["extensions"]), "grpc": sorted(g["extensions"])}


@case
def server_metadata_sequence_extension(s):
    _, body = s.http("GET", "/v2")
    return "sequence" in body["extensions"]


@case
def model_metadata(s):
    return {
        "http": s.http("GET", "/v2/models/ident"),
        "http_version": s.http("GET", "/v2/models/ident/versions/1"),
        "grpc": s.grpc("ModelMetadata", pb.ModelMetadataRequest(name="ident")),
    }


@case
def model_metadata_unknown(s):
    return {
        "http": s.http("GET", "/v2/models/nope"),
        "http_version": s.http("GET", "/v2/models/ident/versions/9"),
        "grpc": s.grpc("ModelMetadata", pb.ModelMetadataRequest(name="nope")),
        "grpc_version": s.grpc("ModelMetadata", pb.ModelMetadataRequest(name="ident", version="9")),
    }


CONFIG_FIELDS = ("name", "backend", "max_batch_size", "input", "output", "version_policy")


def config_subset(answer):
    status, body = answer
    if status != 200 and status != "OK":
        return answer
    config = body.get("config", body)
    out = {k: config.get(k) for k in CONFIG_FIELDS}
    for tensors in ("input", "output"):
        out[tensors] = [{k: t.get(k) for k in ("name", "data_type", "dims")} for t in out[tensors] or []]
    return [status, out]


@case
def versioned_metadata(s):
    out = {}
    for v in ("", "1", "2", "3"):
        out[f"grpc_metadata_{v}"] = s.grpc("ModelMetadata", pb.ModelMetadataRequest(name="versioned", version=v))
        out[f"grpc_config_{v}"] = config_subset(s.grpc("ModelConfig", pb.ModelConfigRequest(name="versioned", version=v)))
        out[f"grpc_ready_{v}"] = s.grpc("ModelReady", pb.ModelReadyRequest(name="versioned", version=v))
    return out


@case
def model_config(s):
    return {
        "http": config_subset(s.http("GET", "/v2/models/ident/config")),
        "grpc": config_subset(s.grpc("ModelConfig", pb.ModelConfigRequest(name="ident"))),
        "http_unknown": s.http("GET", "/v2/models/nope/config"),
        "grpc_unknown": s.grpc("ModelConfig", pb.ModelConfigRequest(name="nope")),
    }


# --- inference ------------------------------------------------------------------------------


@case
def infer_good(s):
    return infer_both(s, "ident")


@case
def infer_requested_outputs(s):
    return infer_both(s, "ident", outputs=[{"name": "OUTPUT1"}], grpc_request=grpc_infer("ident", outputs=["OUTPUT1"]))


@case
def infer_output_named_twice(s):
    return infer_both(s, "ident", outputs=[{"name": "OUTPUT0"}, {"name": "OUTPUT0"}], grpc_request=grpc_infer("ident", outputs=["OUTPUT0", "OUTPUT0"]))


@case
def infer_unknown_output(s):
    return infer_both(s, "ident", outputs=[{"name": "NOPE"}], grpc_request=grpc_infer("ident", outputs=["NOPE"]))


@case
def infer_binary_data(s):
    head = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}], "outputs": [{"name": "OUTPUT0", "parameters": {"binary_data": True}}]}
    raw = json.dumps(head).encode()
    body = raw + np.arange(16, dtype=np.float32).tobytes()
    return s.http("POST", "/v2/models/ident/infer", body, {"Inference-Header-Content-Length": str(len(raw)), "Content-Type": "application/octet-stream"})


@case
def infer_binary_size_mismatch(s):
    head = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 60}}]}
    raw = json.dumps(head).encode()
    return s.http("POST", "/v2/models/ident/infer", raw + bytes(60), {"Inference-Header-Content-Length": str(len(raw))})


@case
def infer_wrong_datatype(s):
    inputs = [{"name": "INPUT0", "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}]
    return infer_both(s, "ident", inputs, grpc_infer("ident", datatype="INT32", data=np.arange(16, dtype=np.int32)))


@case
def infer_wrong_shape(s):
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 8], "data": VALUES[:8]}]
    return infer_both(s, "ident", inputs, grpc_infer("ident", shape=(1, 8)))


@case
def infer_zero_batch(s):
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [0, 16], "data": []}]
    return infer_both(s, "ident", inputs, grpc_infer("ident", shape=(0, 16), data=np.zeros(0, dtype=np.float32)))


@case
def infer_batch_too_large(s):
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [9, 16], "data": VALUES * 9}]
    return infer_both(s, "ident", inputs, grpc_infer("ident", shape=(9, 16)))


@case
def infer_unknown_input(s):
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": VALUES}, {"name": "EXTRA", "datatype": "FP32", "shape": [1, 16], "data": VALUES}]
    req = grpc_infer("ident")
    extra = req.inputs.add()
    extra.name, extra.datatype = "EXTRA", "FP32"
    extra.shape.extend([1, 16])
    req.raw_input_contents.append(np.zeros(16, dtype=np.float32).tobytes())
    return infer_both(s, "ident", inputs, req)


@case
def infer_input_wrong_name(s):
    inputs = [{"name": "INPUTX", "datatype": "FP32", "shape": [1, 16], "data": VALUES}]
    return infer_both(s, "ident", inputs, grpc_infer("ident", name="INPUTX"))


@case
def infer_missing_input(s):
    return infer_both(s, "ident", [], pb.ModelInferRequest(model_name="ident"))


@case
def infer_data_count_mismatch(s):
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "data": VALUES[:15]}]
    return infer_both(s, "ident", inputs, grpc_infer("ident", data=np.zeros(15, dtype=np.float32)))


@case
def infer_unknown_model(s):
    return infer_both(s, "nope", grpc_request=grpc_infer("nope"))


@case
def infer_unknown_version(s):
    return infer_both(s, "ident", version=9, grpc_request=grpc_infer("ident", version="9"))


@case
def infer_bad_json(s):
    return {
        "truncated": s.http("POST", "/v2/models/ident/infer", b'{"inputs": [', {"Content-Type": "application/json"}),
        "not_object": s.http("POST", "/v2/models/ident/infer", b"[1, 2]"),
        "inputs_not_array": s.http("POST", "/v2/models/ident/infer", {"inputs": 3}),
        "empty": s.http("POST", "/v2/models/ident/infer", b""),
    }


@case
def infer_grpc_typed_contents(s):
    both = grpc_infer("ident")
    both.inputs[0].contents.fp32_contents.extend([0.0] * 16)
    return {
        "contents": s.grpc("ModelInfer", grpc_infer("ident", raw=False)),
        "contents_short": s.grpc("ModelInfer", grpc_infer("ident", raw=False, data=np.zeros(15, dtype=np.float32))),
        "raw_and_contents": s.grpc("ModelInfer", both),
    }


@case
def infer_parameters(s):
    out = {}
    for name, value in (("custom", {"a": 1}), ("sequence_id", 5), ("binary_data_output", True), ("priority", 0), ("timeout", 0)):
        path, body = json_infer("ident", parameters={name: value})
        out[name] = s.http("POST", path, body)
    return out


@case
def infer_parameter_wrong_type(s):
    out = {}
    for name, value in (("priority", "high"), ("timeout", -1)):
        path, body = json_infer("ident", parameters={name: value})
        out[name] = s.http("POST", path, body)
    return out


@case
def infer_version_strings(s):
    out = {}
    for v in ("abc", "0", "-1"):
        out[f"http_{v}"] = s.http("POST", *json_infer("ident", version=v))
        out[f"grpc_{v}"] = s.grpc("ModelInfer", grpc_infer("ident", version=v))
        out[f"grpc_metadata_{v}"] = s.grpc("ModelMetadata", pb.ModelMetadataRequest(name="ident", version=v))
    return out


@case
def infer_version_not_integer(s):
    return {
        "grpc": s.grpc("ModelInfer", grpc_infer("ident", version="1.0")),
        "grpc_metadata": s.grpc("ModelMetadata", pb.ModelMetadataRequest(name="ident", version="1.0")),
    }


@case
def infer_binary_framing(s):
    head = {"inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"binary_data_size": 64}}]}
    raw = json.dumps(head).encode()
    return {
        "header_longer_than_body": s.http("POST", "/v2/models/ident/infer", raw, {"Inference-Header-Content-Length": str(len(raw) + 10)}),
        "data_missing": s.http("POST", "/v2/models/ident/infer", raw, {"Inference-Header-Content-Length": str(len(raw))}),
        "extra_bytes": s.http("POST", "/v2/models/ident/infer", raw + bytes(80), {"Inference-Header-Content-Length": str(len(raw))}),
    }


@case
def infer_classification(s):
    outputs = [{"name": "OUTPUT0", "parameters": {"classification": 3}}]
    req = grpc_infer("ident")
    o = req.outputs.add()
    o.name = "OUTPUT0"
    o.parameters["classification"].int64_param = 3
    return {"http": s.http("POST", *json_infer("ident", outputs=outputs)), "grpc": s.grpc("ModelInfer", req)}


@case
def infer_model_error(s):
    return infer_both(s, "failing", grpc_request=grpc_infer("failing"))


@case
def infer_model_raises(s):
    return infer_both(s, "raising", grpc_request=grpc_infer("raising"))


# --- version selection ----------------------------------------------------------------------


@case
def version_selection(s):
    out = {}
    for v in (None, 1, 2, 3):
        path, body = json_infer("versioned", version=v)
        out[f"infer_{v}"] = s.http("POST", path, body)
        out[f"grpc_{v}"] = s.grpc("ModelInfer", grpc_infer("versioned", version="" if v is None else str(v)))
        out[f"ready_{v}"] = s.http("GET", "/v2/models/versioned" + ("" if v is None else f"/versions/{v}") + "/ready")
    out["metadata"] = s.http("GET", "/v2/models/versioned")
    out["version_0"] = s.http("GET", "/v2/models/versioned/versions/0/ready")
    out["version_negative"] = s.http("GET", "/v2/models/versioned/versions/-1")
    return out


@case
def version_policy_latest(s):
    out = {"metadata": s.http("GET", "/v2/models/latest")}
    for v in (None, 1, 2, 3, 4):
        path, body = json_infer("latest", version=v)
        out[f"infer_{v}"] = s.http("POST", path, body)
        out[f"ready_{v}"] = s.http("GET", "/v2/models/latest" + ("" if v is None else f"/versions/{v}") + "/ready")
    return out


@case
def infer_without_batching(s):
    def infer(shape, count):
        return s.http("POST", *json_infer("nobatch", inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": shape, "data": VALUES[:1] * count}]))

    return {
        "two_rows": infer([2, 16], 32),
        "no_rows": infer([0, 16], 0),
        "wrong_rank": infer([16], 16),
        "grpc_no_rows": s.grpc("ModelInfer", grpc_infer("nobatch", shape=(0, 16), data=np.zeros(0, dtype=np.float32))),
        "metadata": s.http("GET", "/v2/models/nobatch"),
    }


# --- statistics -----------------------------------------------------------------------------


def stats(s, model, response_stats=False):
    """The model's statistics over HTTP (the gRPC call's status only: the same figures); without
    `response_stats`, that field is left out (see statistics_response_stats). Read until two reads
    0.2 s apart agree: Triton records a request's statistics after sending its response, so a read
    right after the last answer may not count it yet."""
    status, body = s.http("GET", f"/v2/models/{model}/stats")
    for _ in range(25):
        time.sleep(0.2)
        again = s.http("GET", f"/v2/models/{model}/stats")
        if again == (status, body):
            break
        status, body = again
    code, g = s.grpc("ModelStatistics", pb.ModelStatisticsRequest(name=model))
    for entry in body.get("model_stats", []) if isinstance(body, dict) else []:
        entry.pop("memory_usage", None)  # compared by statistics_memory_usage
        if response_stats:
            return entry.get("response_stats", {})
        entry.pop("response_stats", None)
    return {"http": [status, body], "grpc": code}


@case
def statistics_after_good_and_errors(s):
    for _ in range(2):
        infer_both(s, "counted")
    path, body = json_infer("counted", inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [1, 8], "data": VALUES[:8]}])
    s.http("POST", path, body)
    return stats(s, "counted")


@case
def statistics_model_error_response(s):
    infer_both(s, "failing")
    return stats(s, "failing")


@case
def statistics_model_raises(s):
    infer_both(s, "raising")
    return stats(s, "raising")


@case
def statistics_response_stats(s):
    return stats(s, "counted", response_stats=True)


@case
def statistics_versions(s):
    out = {}
    for v in (1, 2, 3):
        status, body = s.http("GET", f"/v2/models/versioned/versions/{v}/stats")
        for entry in body.get("model_stats", []) if isinstance(body, dict) else []:
            entry.pop("response_stats", None)
            entry.pop("memory_usage", None)  # compared by statistics_memory_usage
        out[str(v)] = [status, body]
    return out


@case
def statistics_memory_usage(s):
    """`memory_usage` of a Python model that has served: its entries with the size reduced to
    positive or zero (the figure is the process's own and differs from run to run)."""
    status, body = s.http("GET", "/v2/models/counted/stats")
    entries = [e.get("memory_usage", []) for e in body.get("model_stats", [])] if isinstance(body, dict) else []
    return [status, [[{**m, "byte_size": "positive" if int(m.get("byte_size", 0)) > 0 else "zero"} for m in usage] for usage in entries]]


@case
def statistics_unknown(s):
    return {"http": s.http("GET", "/v2/models/nope/stats"), "grpc": s.grpc("ModelStatistics", pb.ModelStatisticsRequest(name="nope")), "version": s.http("GET", "/v2/models/ident/versions/9/stats")}


# --- repository -----------------------------------------------------------------------------


@case
def repository_index(s):
    status, body = s.http("POST", "/v2/repository/index", {})
    code, g = s.grpc("RepositoryIndex", pb.RepositoryIndexRequest())
    return {"http": [status, sorted(body, key=lambda m: (m["name"], m.get("version", "")))], "grpc": [code, sorted(g.get("models", []), key=lambda m: (m["name"], m.get("version", "")))]}


@case
def repository_unload_load(s):
    out = {"unload": s.http("POST", "/v2/repository/models/spare/unload", {})}
    out["ready_after_unload"] = s.http("GET", "/v2/models/spare/ready")
    out["infer_after_unload"] = s.http("POST", *json_infer("spare"))
    out["grpc_ready_after_unload"] = s.grpc("ModelReady", pb.ModelReadyRequest(name="spare"))
    out["load"] = s.http("POST", "/v2/repository/models/spare/load", {})
    out["infer_after_load"] = s.http("POST", *json_infer("spare"))
    out["grpc_unload"] = s.grpc("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="spare"))
    out["grpc_load"] = s.grpc("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="spare"))
    return out


@case
def repository_parameters(s):
    return {
        "index_ready": s.http("POST", "/v2/repository/index", {"ready": True}),
        "unload_dependents": s.http("POST", "/v2/repository/models/nope/unload", {"parameters": {"unload_dependents": True}}),
    }


@case
def repository_parameters_malformed(s):
    return {
        "index_ready_not_bool": s.http("POST", "/v2/repository/index", {"ready": "yes"}),
        "unload_dependents_not_bool": s.http("POST", "/v2/repository/models/nope/unload", {"parameters": {"unload_dependents": "yes"}}),
    }


@case
def repository_load_unknown_parameter(s):
    return s.http("POST", "/v2/repository/models/spare/load", {"parameters": {"colour": "blue"}})


@case
def repository_unknown(s):
    return {
        "load": s.http("POST", "/v2/repository/models/nope/load", {}),
        "unload": s.http("POST", "/v2/repository/models/nope/unload", {}),
        "grpc_load": s.grpc("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="nope")),
        "grpc_unload": s.grpc("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="nope")),
    }


SPARE_CONFIG = {
    "name": "spare",
    "backend": "python",
    "max_batch_size": 4,
    "input": [{"name": "INPUT0", "data_type": "TYPE_FP32", "dims": [16]}],
    "output": [{"name": "OUTPUT0", "data_type": "TYPE_FP32", "dims": [16]}, {"name": "OUTPUT1", "data_type": "TYPE_FP32", "dims": [16]}],
}


def load(s, model, parameters):
    return s.http("POST", f"/v2/repository/models/{model}/load", {"parameters": parameters})


@case
def repository_config_override(s):
    out = {"load": load(s, "spare", {"config": json.dumps(SPARE_CONFIG)})}
    out["config"] = config_subset(s.http("GET", "/v2/models/spare/config"))
    out["infer_batch_5"] = s.http("POST", *json_infer("spare", inputs=[{"name": "INPUT0", "datatype": "FP32", "shape": [5, 16], "data": VALUES * 5}]))
    out["reload"] = load(s, "spare", {})
    return out


BROKEN_CONFIG = 'name: "broken"\nbackend: "python"\nmax_batch_size: {\n'


@case
def repository_load_broken_config(s):
    directory = os.path.join(s.repository, "broken")
    os.makedirs(os.path.join(directory, "1"), exist_ok=True)
    with open(os.path.join(directory, "config.pbtxt"), "w") as f:
        f.write(BROKEN_CONFIG)
    with open(os.path.join(directory, "1", "model.py"), "w") as f:
        f.write(MODEL_PY)
    return {
        "load": s.http("POST", "/v2/repository/models/broken/load", {}),
        "grpc_load": s.grpc("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="broken")),
        "ready": s.http("GET", "/v2/models/broken/ready"),
    }


@case
def repository_invalid_config_override(s):
    return {
        "negative_batch": load(s, "spare", {"config": json.dumps({**SPARE_CONFIG, "max_batch_size": -1})}),
        "no_inputs": load(s, "spare", {"config": json.dumps({**SPARE_CONFIG, "input": []})}),
        "reload": load(s, "spare", {}),
    }


@case
def repository_grpc_errors(s):
    def grpc_load(model, **params):
        req = pb.RepositoryModelLoadRequest(model_name=model)
        for key, value in params.items():
            key = key.replace("__", ":").replace("_SLASH_", "/").replace("_DOT_", ".")
            if isinstance(value, bytes):
                req.parameters[key].bytes_param = value
            else:
                req.parameters[key].string_param = value
        return s.grpc("RepositoryModelLoad", req)

    return {
        "not_json": grpc_load("spare", config="{not json"),
        "wrong_name": grpc_load("spare", config=json.dumps({**SPARE_CONFIG, "name": "other"})),
        "escape": grpc_load("spare", config=json.dumps(SPARE_CONFIG), file___DOT__DOT__SLASH_x=b"x"),
        "without_config": grpc_load("spare", file__1_SLASH_model_DOT_py=b"x"),
        "unload_unknown": s.grpc("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="nope")),
        "reload": grpc_load("spare"),
    }


@case
def repository_config_override_not_string(s):
    return load(s, "spare", {"config": {"name": "spare"}})


@case
def repository_bad_config_override(s):
    return {
        "not_json": load(s, "spare", {"config": "{not json"}),
        "unknown_field": load(s, "spare", {"config": json.dumps({**SPARE_CONFIG, "no_such_field": 1})}),
        "wrong_name": load(s, "spare", {"config": json.dumps({**SPARE_CONFIG, "name": "other"})}),
        "bad_dtype": load(s, "spare", {"config": json.dumps({**SPARE_CONFIG, "input": [{"name": "INPUT0", "data_type": "TYPE_NOPE", "dims": [16]}]})}),
        "ready_after": s.http("GET", "/v2/models/spare/ready"),
        "reload": load(s, "spare", {}),
    }


def b64(text):
    return base64.b64encode(text.encode()).decode()


@case
def repository_file_override(s):
    model_py = MODEL_PY.replace("OUTPUT1", "OUTPUT1").replace("x * 2", "x * 3")
    out = {"load": load(s, "spare", {"config": json.dumps(SPARE_CONFIG), "file:1/model.py": b64(model_py)})}
    out["ready"] = s.http("GET", "/v2/models/spare/ready")
    out["infer"] = s.http("POST", *json_infer("spare", outputs=[{"name": "OUTPUT1"}]))
    out["without_config"] = load(s, "spare", {"file:1/model.py": b64(model_py)})
    out["escape"] = load(s, "spare", {"config": json.dumps(SPARE_CONFIG), "file:../escape.py": b64("x")})
    out["nested_escape"] = load(s, "spare", {"config": json.dumps(SPARE_CONFIG), "file:1/../../escape.py": b64("x")})
    out["ready_after"] = s.http("GET", "/v2/models/spare/ready")
    out["reload"] = load(s, "spare", {})
    out["infer_after_reload"] = s.http("POST", *json_infer("spare", outputs=[{"name": "OUTPUT1"}]))
    return out


@case
def repository_file_override_content(s):
    model_py = MODEL_PY.replace("x * 2", "x * 3")
    out = {"load": load(s, "spare", {"config": json.dumps(SPARE_CONFIG), "file:1/model.py": b64(model_py)})}
    out["infer"] = s.http("POST", *json_infer("spare", outputs=[{"name": "OUTPUT1"}]))
    out["reload"] = load(s, "spare", {})
    return out


@case
def repository_file_override_absolute(s):
    return {"load": load(s, "spare", {"config": json.dumps(SPARE_CONFIG), "file:/nereid-differential-absolute.py": b64("x")}), "reload": load(s, "spare", {})}


@case
def repository_file_override_not_base64(s):
    return {"load": load(s, "spare", {"config": json.dumps(SPARE_CONFIG), "file:1/model.py": "%%%"}), "reload": load(s, "spare", {})}


# --- shared memory --------------------------------------------------------------------------


@case
def shm_status(s):
    return {
        "status": s.http("GET", "/v2/systemsharedmemory/status"),
        "status_unknown": s.http("GET", "/v2/systemsharedmemory/region/nope/status"),
        "grpc_status": s.grpc("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest()),
        "cuda_status": s.http("GET", "/v2/cudasharedmemory/status"),
        "grpc_cuda_status": s.grpc("CudaSharedMemoryStatus", pb.CudaSharedMemoryStatusRequest()),
    }


@case
def shm_unregister_default(s):
    return {
        "unregister_unknown": s.http("POST", "/v2/systemsharedmemory/region/nope/unregister", {}),
        "unregister_all": s.http("POST", "/v2/systemsharedmemory/unregister", {}),
        "grpc_unregister": s.grpc("SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest(name="nope")),
    }


@case
def shm_register_bad(s):
    return {
        "missing_key": s.http("POST", "/v2/systemsharedmemory/region/r/register", {"offset": 0, "byte_size": 64}),
        "not_json": s.http("POST", "/v2/systemsharedmemory/region/r/register", b"{"),
    }


SHM_KEY = "/nereid-differential-%d" % os.getpid()
SHM_BYTES = 256


def shm_region():
    """One system shared-memory object both servers map: 64 bytes of FP32 input at offset 0."""
    global _shm_handle
    if _shm_handle is None:
        import tritonclient.utils.shared_memory as shm

        _shm_handle = shm.create_shared_memory_region("diff", SHM_KEY, SHM_BYTES)
        shm.set_shared_memory_region(_shm_handle, [np.arange(16, dtype=np.float32)])
    return _shm_handle


_shm_handle = None


@case
def shm_register_infer_unregister(s):
    shm_region()
    t = s.shm
    region = {"key": SHM_KEY, "offset": 0, "byte_size": SHM_BYTES}
    out = {"register": t.http("POST", "/v2/systemsharedmemory/region/diff/register", region)}
    out["duplicate"] = t.http("POST", "/v2/systemsharedmemory/region/diff/register", region)
    out["status"] = t.http("GET", "/v2/systemsharedmemory/region/diff/status")
    inputs = [{"name": "INPUT0", "datatype": "FP32", "shape": [1, 16], "parameters": {"shared_memory_region": "diff", "shared_memory_byte_size": 64}}]
    outputs = [{"name": "OUTPUT1", "parameters": {"shared_memory_region": "diff", "shared_memory_byte_size": 64, "shared_memory_offset": 64}}]
    out["infer"] = t.http("POST", *json_infer("ident", inputs=inputs, outputs=outputs))
    out["infer_past_end"] = t.http("POST", *json_infer("ident", inputs=[{**inputs[0], "parameters": {**inputs[0]["parameters"], "shared_memory_offset": 224}}]))
    out["infer_unknown_region"] = t.http("POST", *json_infer("ident", inputs=[{**inputs[0], "parameters": {**inputs[0]["parameters"], "shared_memory_region": "nope"}}]))
    out["grpc_status"] = t.grpc("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(name="diff"))
    out["unregister"] = t.http("POST", "/v2/systemsharedmemory/region/diff/unregister", {})
    out["status_after"] = t.http("GET", "/v2/systemsharedmemory/status")
    out["grpc_register"] = t.grpc("SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(name="g", key=SHM_KEY, offset=0, byte_size=SHM_BYTES))
    out["grpc_register_past_end"] = t.grpc("SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(name="h", key=SHM_KEY, offset=SHM_BYTES, byte_size=SHM_BYTES))
    out["grpc_register_no_object"] = t.grpc("SystemSharedMemoryRegister", pb.SystemSharedMemoryRegisterRequest(name="i", key="/nereid-differential-none", offset=0, byte_size=64))
    out["grpc_unregister_all"] = t.grpc("SystemSharedMemoryUnregister", pb.SystemSharedMemoryUnregisterRequest())
    out["status_end"] = t.http("GET", "/v2/systemsharedmemory/status")
    return out


@case
def shm_register_default(s):
    return s.http("POST", "/v2/systemsharedmemory/region/r/register", {"key": "/nereid-diff-none", "offset": 0, "byte_size": 64})


# --- trace and logging ----------------------------------------------------------------------


INIT_FAILS_PY = """
class TritonPythonModel:
    def initialize(self, args):
        raise RuntimeError("initialize fails on purpose")

    def execute(self, requests):
        return []
"""


@case
def repository_load_initialize_fails(s):
    directory = os.path.join(s.repository, "init_fails")
    os.makedirs(os.path.join(directory, "1"), exist_ok=True)
    with open(os.path.join(directory, "config.pbtxt"), "w") as f:
        f.write(json.loads(sys.argv[1])["init_fails_config"])
    with open(os.path.join(directory, "1", "model.py"), "w") as f:
        f.write(INIT_FAILS_PY)
    out = {"load": s.http("POST", "/v2/repository/models/init_fails/load", {})}
    out["ready"] = s.http("GET", "/v2/models/init_fails/ready")
    out["infer"] = s.http("POST", *json_infer("init_fails"))
    out["unload"] = s.http("POST", "/v2/repository/models/init_fails/unload", {})
    return out


@case
def trace_setting(s):
    return {"http": s.http("GET", "/v2/trace/setting"), "grpc": s.grpc("TraceSetting", pb.TraceSettingRequest())}


@case
def log_settings(s):
    status, body = s.http("GET", "/v2/logging")
    code, g = s.grpc("LogSettings", pb.LogSettingsRequest())
    return {"http": [status, sorted(body)], "grpc": [code, sorted(g.get("settings", {}))]}


@case
def log_settings_bad_json(s):
    return s.http("POST", "/v2/logging", b"{")


MODEL_PY = ""

if __name__ == "__main__":
    MODEL_PY = json.loads(sys.argv[1])["model_py"]
    run()
