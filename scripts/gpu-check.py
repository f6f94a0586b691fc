"""The Python half of scripts/gpu-check.sh (docs/testing.md, "The GPU check").

  gpu-check.py repo <dir>                 writes the check's model repository
  gpu-check.py client <http-port> <grpc-port> <report.json> [label]
                                          runs the checks against a started server, merges its
                                          findings into the JSON report

Every step prints one line (`gpu-check: ...`); a failed step prints `gpu-check: FAILED: ...` and
is recorded in the report, and the next steps still run where they can. Exit status 1 if any step
failed. Needs numpy; torch and cupy where present (a step that needs a missing one says so and
is recorded as skipped, with the reason). The HTTP side uses only the standard library; gRPC is
spoken with hand-encoded protobuf over grpcio when grpcio is importable.
"""

import base64
import http.client
import json
import os
import statistics
import subprocess
import sys
import time
import traceback

import numpy as np

N = 4096  # elements of the FP32 test tensors
RUNS = 100


def say(line):
    print("gpu-check: " + line, flush=True)


def probe_gpu():
    """(torch module or None, cupy module or None, why there is no GPU or None)."""
    torch = cupy = None
    reasons = []
    try:
        import torch as torch_module
        torch = torch_module
        if not torch.cuda.is_available():
            reasons.append("torch %s: torch.cuda.is_available() is False" % torch.__version__)
    except ImportError as err:
        reasons.append("torch: %s" % err)
    try:
        import cupy as cupy_module
        cupy_module.cuda.runtime.getDeviceCount()
        cupy = cupy_module
    except Exception as err:  # ImportError, or a CUDA error without a driver
        reasons.append("cupy: %s" % str(err).strip())
    has_gpu = torch is not None and torch.cuda.is_available()
    return torch, cupy, None if has_gpu else "; ".join(reasons) or "no GPU"


# ---- the repository ----------------------------------------------------------------------------

IDENTITY_PY = '''
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy())])
                for r in requests]
'''


def first_mig_of_gpu0():
    """The UUID of GPU 0's first MIG instance when GPU 0 is in MIG mode (nvidia-smi -L), else None."""
    try:
        listing = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    in_gpu0 = False
    for line in listing.splitlines():
        if line.startswith("GPU "):
            in_gpu0 = line.startswith("GPU 0:")
        elif in_gpu0 and line.strip().startswith("MIG ") and "(UUID: " in line:
            uuid = line.split("(UUID: ", 1)[1].rstrip(")").strip()
            say("GPU 0 is in MIG mode: the TorchScript model goes on its MIG instance %s" % uuid)
            return uuid
    return None


def make_repo(root):
    torch, _, no_gpu = probe_gpu()
    ident = os.path.join(root, "identity_py", "1")
    os.makedirs(ident, exist_ok=True)
    with open(os.path.join(ident, "model.py"), "w") as f:
        f.write(IDENTITY_PY)
    with open(os.path.join(root, "identity_py", "config.pbtxt"), "w") as f:
        f.write('name: "identity_py"\nbackend: "python"\nmax_batch_size: 0\n'
                'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                'instance_group [ { kind: KIND_CPU count: 1 } ]\n')
    say("wrote identity_py (Python, KIND_CPU)")
    if torch is None:
        say("no torch here: the TorchScript model is not written (%s)" % no_gpu)
        return 0

    class Scale(torch.nn.Module):
        def forward(self, x):
            # The device index the input is on (-1: the CPU) proves where the model ran.
            return x * 2.0, torch.tensor([x.get_device()], dtype=torch.int64)

    scale = os.path.join(root, "gpu_scale", "1")
    os.makedirs(scale, exist_ok=True)
    torch.jit.save(torch.jit.script(Scale()), os.path.join(scale, "model.pt"))
    kind = "KIND_CPU" if no_gpu else "KIND_GPU gpus: [ 0 ]"
    mig = None if no_gpu else first_mig_of_gpu0()
    # A GPU in MIG mode runs CUDA work only in its MIG instances: place the model on the first one.
    params = '' if mig is None else 'parameters { key: "mig_devices" value { string_value: "%s" } }\n' % mig
    with open(os.path.join(root, "gpu_scale", "config.pbtxt"), "w") as f:
        f.write('name: "gpu_scale"\nplatform: "pytorch_libtorch"\nmax_batch_size: 0\n'
                'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
                'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ -1 ] }, '
                '{ name: "DEVICE__1" data_type: TYPE_INT64 dims: [ 1 ] } ]\n'
                'instance_group [ { kind: %s } ]\n%s' % (kind, params))
    say("wrote gpu_scale (TorchScript by torch.jit %s, %s)%s" % (torch.__version__, kind.split()[0],
                                                                 "" if not no_gpu else ": no GPU (%s)" % no_gpu))
    return 0


# ---- HTTP --------------------------------------------------------------------------------------

class Http:
    def __init__(self, port):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)

    def request(self, method, path, body=None, headers=None):
        self.conn.request(method, path, body=body, headers=headers or {})
        res = self.conn.getresponse()
        data = res.read()
        return res.status, data, res

    def json(self, method, path, doc=None):
        status, data, _ = self.request(method, path, None if doc is None else json.dumps(doc).encode())
        return status, (json.loads(data) if data else None)

    def infer(self, model, inputs, outputs):
        """inputs: [(name, datatype, shape, ndarray or shm params dict)]; outputs: [(name, params dict)].
        Returns (status, header doc, {output name: raw bytes})."""
        header = {"inputs": [], "outputs": []}
        blobs = []
        for name, datatype, shape, value in inputs:
            entry = {"name": name, "datatype": datatype, "shape": shape}
            if isinstance(value, dict):
                entry["parameters"] = value
            else:
                raw = np.ascontiguousarray(value).tobytes()
                entry["parameters"] = {"binary_data_size": len(raw)}
                blobs.append(raw)
            header["inputs"].append(entry)
        for name, params in outputs:
            header["outputs"].append({"name": name, "parameters": params})
        head = json.dumps(header).encode()
        status, data, res = self.request("POST", "/v2/models/%s/infer" % model, head + b"".join(blobs),
                                         {"Inference-Header-Content-Length": str(len(head)),
                                          "Content-Type": "application/octet-stream"})
        length = res.getheader("Inference-Header-Content-Length")
        doc = json.loads(data[:int(length)] if length else data)
        raw = {}
        if status == 200 and length:
            at = int(length)
            for out in doc.get("outputs", []):
                size = (out.get("parameters") or {}).get("binary_data_size")
                if size is not None:
                    raw[out["name"]] = data[at:at + size]
                    at += size
        return status, doc, raw


# ---- gRPC, hand-encoded ------------------------------------------------------------------------

def _varint(n):
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number, value):
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    if isinstance(value, str):
        value = value.encode()
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _param(key, value):
    """A map<string, InferParameter> entry."""
    inner = _field(3, value) if isinstance(value, str) else _field(2, value)
    return _field(1, key) + _field(2, inner)


def _decode(data):
    """{field number: [values]} of one message (varints as ints, length-delimited as bytes)."""
    fields, i = {}, 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
        elif wire == 2:
            length, i = _read_varint(data, i)
            value, i = data[i:i + length], i + length
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        fields.setdefault(number, []).append(value)
    return fields


def _read_varint(data, i):
    shift = result = 0
    while True:
        b = data[i]
        i += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, i
        shift += 7


class Grpc:
    SERVICE = "/inference.GRPCInferenceService/"

    def __init__(self, port):
        import grpc
        self.grpc = grpc
        self.channel = grpc.insecure_channel("127.0.0.1:%d" % port)

    def call(self, method, body):
        fn = self.channel.unary_unary(self.SERVICE + method, request_serializer=lambda b: b, response_deserializer=lambda b: b)
        return fn(body, timeout=60)

    def register_cuda(self, name, handle, device, size):
        return self.call("CudaSharedMemoryRegister", _field(1, name) + _field(2, handle) + _field(3, device) + _field(4, size))

    def cuda_status(self, name=""):
        doc = _decode(self.call("CudaSharedMemoryStatus", _field(1, name) if name else b""))
        regions = []
        for entry in doc.get(1, []):
            status = _decode(_decode(entry)[2][0])
            regions.append({"name": status[1][0].decode(), "device_id": status.get(2, [0])[0], "byte_size": status.get(3, [0])[0]})
        return regions

    def unregister_cuda(self, name=""):
        return self.call("CudaSharedMemoryUnregister", _field(1, name) if name else b"")

    def infer_shm(self, model, input_name, input_region, output_name, output_region, size):
        shape = _varint(N)
        tensor = (_field(1, input_name) + _field(2, "FP32") + _varint(3 << 3 | 2) + _varint(len(shape)) + shape
                  + _field(4, _param("shared_memory_region", input_region)) + _field(4, _param("shared_memory_byte_size", size)))
        out = (_field(1, output_name) + _field(2, _param("shared_memory_region", output_region))
               + _field(2, _param("shared_memory_byte_size", size)))
        return _decode(self.call("ModelInfer", _field(1, model) + _field(5, tensor) + _field(6, out)))


# ---- the checks --------------------------------------------------------------------------------

class Checks:
    def __init__(self, http_port, grpc_port, report, label):
        self.http = Http(http_port)
        self.grpc_port = grpc_port
        self.report = report
        self.label = label
        self.steps = report.setdefault("steps", [])
        self.figures = report.setdefault("figures", {})
        self.failed = False

    def step(self, name, fn):
        name = "%s: %s" % (self.label, name) if self.label else name
        say(name + " ...")
        started = time.perf_counter()
        try:
            result = fn()
        except Skip as skip:
            say("%s: skipped: %s" % (name, skip))
            self.steps.append({"step": name, "result": "skipped", "why": str(skip)})
            return None
        except Exception as err:  # every failure is a line, then the next step
            self.failed = True
            say("FAILED: %s: %s" % (name, err))
            traceback.print_exc()
            self.steps.append({"step": name, "result": "failed", "error": "%s: %s" % (type(err).__name__, err)})
            return None
        seconds = time.perf_counter() - started
        say("%s: ok (%.2f s)%s" % (name, seconds, "" if result is None else ": %s" % (result,)))
        self.steps.append({"step": name, "result": "ok", "seconds": round(seconds, 3), **({"detail": result} if result is not None else {})})
        return result

    def figure(self, name, samples_ms):
        key = "%s %s" % (self.label, name) if self.label else name
        value = {"p50_ms": round(statistics.median(samples_ms), 3), "mean_ms": round(statistics.fmean(samples_ms), 3), "runs": len(samples_ms)}
        self.figures[key] = value
        say("%s: %.3f ms p50, %.3f ms mean over %d runs" % (key, value["p50_ms"], value["mean_ms"], value["runs"]))


class Skip(Exception):
    pass


def timed(fn, runs=RUNS):
    fn()  # warm-up
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def run_client(http_port, grpc_port, report_path, label):
    report = json.load(open(report_path)) if os.path.exists(report_path) else {}
    torch, cupy, no_gpu = probe_gpu()
    report.setdefault("gpu", no_gpu is None)
    if no_gpu:
        report["no_gpu"] = no_gpu
    c = Checks(http_port, grpc_port, report, label)
    x = np.arange(N, dtype=np.float32)

    def ready():
        models = ("identity_py", "gpu_scale") if torch is not None else ("identity_py",)
        for model in models:
            status, doc = c.http.json("GET", "/v2/models/%s/ready" % model)
            if status != 200:
                _, index = c.http.json("POST", "/v2/repository/index", {})
                raise RuntimeError("model %s is not ready (HTTP %d); repository index: %s" % (model, status, json.dumps(index)))
        return " and ".join(models) + " ready"

    c.step("models ready", ready)

    def identity_plain():
        status, doc, raw = c.http.infer("identity_py", [("INPUT0", "FP32", [N], x)], [("OUTPUT0", {"binary_data": True})])
        assert status == 200, doc
        assert np.array_equal(np.frombuffer(raw["OUTPUT0"], dtype=np.float32), x), "identity output differs"
        c.figure("identity_py HTTP binary infer", timed(lambda: c.http.infer("identity_py", [("INPUT0", "FP32", [N], x)], [("OUTPUT0", {"binary_data": True})])))

    c.step("identity_py over HTTP (binary)", identity_plain)

    def scale():
        if torch is None:
            raise Skip("torch is not importable: no TorchScript model")
        status, doc, raw = c.http.infer("gpu_scale", [("INPUT__0", "FP32", [N], x)],
                                        [("OUTPUT__0", {"binary_data": True}), ("DEVICE__1", {"binary_data": True})])
        assert status == 200, doc
        assert np.array_equal(np.frombuffer(raw["OUTPUT__0"], dtype=np.float32), x * 2), "gpu_scale output differs"
        device = int(np.frombuffer(raw["DEVICE__1"], dtype=np.int64)[0])
        c.report["gpu_scale_device"] = device
        c.figure("gpu_scale HTTP binary infer", timed(lambda: c.http.infer("gpu_scale", [("INPUT__0", "FP32", [N], x)], [("OUTPUT__0", {"binary_data": True})])))
        if no_gpu is None and device < 0:
            raise RuntimeError("the KIND_GPU TorchScript model ran on the CPU (x.get_device() = %d)" % device)
        return "the model saw its input on %s" % ("cuda:%d" % device if device >= 0 else "the CPU")

    c.step("gpu_scale (TorchScript) over HTTP, and where it ran", scale)

    def refusal_without_gpu():
        if no_gpu is None:
            raise Skip("this machine has a GPU")
        status, doc = c.http.json("POST", "/v2/cudasharedmemory/region/r/register",
                                  {"raw_handle": {"b64": base64.b64encode(bytes(64)).decode()}, "device_id": 0, "byte_size": 64})
        expected = "failed to register CUDA shared memory region: 'r', GPUs not supported"
        assert status == 400 and doc == {"error": expected}, (status, doc)
        return "400 %s" % expected

    c.step("CUDA registration refused without a GPU", refusal_without_gpu)

    def gpu_metrics():
        port = os.environ.get("METRICS_PORT")
        if not port:
            raise Skip("METRICS_PORT is not set")
        conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=30)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        families = sorted({line.split()[2] for line in text.splitlines() if line.startswith("# TYPE nv_gpu_")})
        c.report["nv_gpu_families"] = families
        if no_gpu is not None:
            raise Skip("no GPU (families found: %s)" % (", ".join(families) or "none"))
        if not families:
            raise RuntimeError("/metrics has no nv_gpu_* family on a machine with a GPU")
        return ", ".join(families)

    c.step("GPU metrics (nv_gpu_* families on /metrics)", gpu_metrics)

    def cuda_round_trip():
        if no_gpu is not None:
            raise Skip("no GPU: %s" % no_gpu)
        if cupy is None:
            raise Skip("cupy is not importable")
        rt = cupy.cuda.runtime
        size = x.nbytes
        pointers = [rt.malloc(size) for _ in range(2)]
        try:
            rt.memcpy(pointers[0], x.ctypes.data, size, 1)
            rt.memset(pointers[1], 0, size)
            handles = [rt.ipcGetMemHandle(p) for p in pointers]
            for name, handle in zip(("gc_in", "gc_out"), handles):
                status, doc = c.http.json("POST", "/v2/cudasharedmemory/region/%s/register" % name,
                                          {"raw_handle": {"b64": base64.b64encode(handle).decode()}, "device_id": 0, "byte_size": size})
                assert status == 200, (status, doc)
            status, doc = c.http.json("GET", "/v2/cudasharedmemory/status")
            assert status == 200 and sorted((d["name"], d["device_id"], d["byte_size"]) for d in doc) == [("gc_in", 0, size), ("gc_out", 0, size)], doc
            status, doc = c.http.json("POST", "/v2/cudasharedmemory/region/bad/register",
                                      {"raw_handle": {"b64": base64.b64encode(bytes(64)).decode()}, "device_id": 0, "byte_size": size})
            assert status == 400 and doc == {"error": "failed to register shared memory region: invalid args"}, (status, doc)
            status, doc = c.http.json("POST", "/v2/cudasharedmemory/region/big/register",
                                      {"raw_handle": {"b64": base64.b64encode(handles[0]).decode()}, "device_id": 0, "byte_size": size * 1024})
            assert status == 400 and doc == {"error": "failed to register shared memory region 'big': invalid args"}, (status, doc)

            def infer(model, input_name, output_name):
                status, doc, _ = c.http.infer(model, [(input_name, "FP32", [N], {"shared_memory_region": "gc_in", "shared_memory_byte_size": size})],
                                              [(output_name, {"shared_memory_region": "gc_out", "shared_memory_byte_size": size})])
                assert status == 200, doc
                out = np.empty(N, dtype=np.float32)
                rt.memcpy(out.ctypes.data, pointers[1], size, 2)
                return out

            assert np.array_equal(infer("identity_py", "INPUT0", "OUTPUT0"), x), "identity_py through CUDA regions differs"

            def scale_through_regions():
                if torch is None:
                    raise Skip("no TorchScript model")
                assert np.array_equal(infer("gpu_scale", "INPUT__0", "OUTPUT__0"), x * 2), "gpu_scale through CUDA regions differs"

            c.step("gpu_scale (TorchScript) with input and output in CUDA regions", scale_through_regions)

            def round_trip():
                rt.memcpy(pointers[0], x.ctypes.data, size, 1)
                infer("identity_py", "INPUT0", "OUTPUT0")

            c.figure("CUDA shm round trip (H2D, identity_py infer over CUDA regions, D2H)", timed(round_trip))

            def over_grpc():
                try:
                    g = Grpc(c.grpc_port)
                except ImportError:
                    raise Skip("grpcio is not importable")
                g.register_cuda("gc_g", handles[0], 0, size)
                assert {"name": "gc_g", "device_id": 0, "byte_size": size} in g.cuda_status(), g.cuda_status()
                rt.memset(pointers[1], 0, size)
                g.infer_shm("identity_py", "INPUT0", "gc_g", "OUTPUT0", "gc_out", size)
                out = np.empty(N, dtype=np.float32)
                rt.memcpy(out.ctypes.data, pointers[1], size, 2)
                assert np.array_equal(out, x), "identity_py over gRPC through CUDA regions differs"
                g.unregister_cuda("gc_g")
                return "register, status, infer, unregister"

            c.step("the same over gRPC", over_grpc)
            for name in ("gc_in", "gc_out"):
                status, _ = c.http.json("POST", "/v2/cudasharedmemory/region/%s/unregister" % name)
                assert status == 200
            status, doc = c.http.json("GET", "/v2/cudasharedmemory/status")
            assert status == 200 and doc == [], doc
            return "HTTP register, status, refusals, identity_py infer, unregister"
        finally:
            for p in pointers:
                rt.free(p)

    c.step("CUDA shared-memory round trip (cupy client)", cuda_round_trip)
    with open(report_path, "w") as f:
        json.dump(report, f, indent=2)
    return 1 if c.failed else 0


def main(argv):
    if len(argv) >= 3 and argv[1] == "repo":
        return make_repo(argv[2])
    if len(argv) >= 5 and argv[1] == "client":
        return run_client(int(argv[2]), int(argv[3]), argv[4], argv[5] if len(argv) > 5 else "")
    if len(argv) >= 2 and argv[1] == "probe":
        torch, cupy, no_gpu = probe_gpu()
        say("torch %s, cupy %s, %s" % (getattr(torch, "__version__", "missing"), getattr(cupy, "__version__", "missing"),
                                        "GPU: %s" % torch.cuda.get_device_name(0) if no_gpu is None else "no GPU (%s)" % no_gpu))
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
