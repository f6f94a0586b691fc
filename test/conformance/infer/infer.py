"""Inference through tritonclient as a user writes it: sync and async, HTTP and gRPC, the aio
clients, every datatype ONNX Runtime serves, BYTES, binary and JSON tensors, classification,
request ids and parameters, compression."""
import os
import queue
import sys
from functools import partial

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.grpc.aio as grpcaio  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.http.aio as httpaio  # noqa: E402

# Every datatype the identity models carry (testkit ORT_NODE_DATATYPES), numpy dtype per name.
DATATYPES = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}


def sample(datatype, shape=(2, 5)):
    """Values that exercise each type's range: extremes of the integer types (beyond 2^53 for
    the 64-bit ones), fractions and negatives for floats, multi-byte UTF-8 and empty elements for
    BYTES (the onnxruntime backend refuses non-UTF-8 content: errors/errors.py)."""
    n = int(np.prod(shape))
    dtype = DATATYPES[datatype]
    if datatype == "BOOL":
        values = np.array([i % 3 == 0 for i in range(n)], dtype=dtype)
    elif datatype == "BYTES":
        values = np.array([b"" if i % 4 == 3 else ("v%d-\u00e9\u4e2d" % i).encode() for i in range(n)], dtype=dtype)
    elif datatype.startswith("FP"):
        values = (np.arange(n, dtype=np.float64) * -1.25 + 0.5).astype(dtype)
    else:
        info = np.iinfo(dtype)
        base = [info.min, info.max, 0, 1, info.max - 1]
        values = np.array([base[i % len(base)] for i in range(n)], dtype=dtype)
    return values.reshape(shape)


def simple_inputs(module, batch=1, seed=0, binary=True):
    a = (np.arange(16 * batch, dtype=np.int32) + seed).reshape(batch, 16)
    b = (np.full(16 * batch, 1000, dtype=np.int32) - 3 * np.arange(16 * batch, dtype=np.int32)).reshape(batch, 16)
    inputs = [module.InferInput("INPUT0", [batch, 16], "INT32"), module.InferInput("INPUT1", [batch, 16], "INT32")]
    if module is httpclient:
        inputs[0].set_data_from_numpy(a, binary_data=binary)
        inputs[1].set_data_from_numpy(b, binary_data=binary)
    else:
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def check_simple(result, a, b):
    out0 = result.as_numpy("OUTPUT0")
    out1 = result.as_numpy("OUTPUT1")
    assert out0.dtype == np.int32 and out0.shape == a.shape, (out0.dtype, out0.shape)
    np.testing.assert_array_equal(out0, a + b)
    np.testing.assert_array_equal(out1, a - b)


@case
def http_infer_simple_binary_and_json(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    for binary_in in (True, False):
        for binary_out in (True, False):
            inputs, a, b = simple_inputs(httpclient, batch=3, seed=4, binary=binary_in)
            outputs = [httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary_out), httpclient.InferRequestedOutput("OUTPUT1", binary_data=binary_out)]
            result = c.infer("simple", inputs, outputs=outputs)
            check_simple(result, a, b)
            out = result.get_output("OUTPUT0")
            if binary_out:
                assert out["parameters"]["binary_data_size"] == a.size * 4, out
                assert "data" not in out
            else:
                assert "parameters" not in out and len(out["data"]) == a.size, out
            response = result.get_response()
            assert response["model_name"] == "simple" and response["model_version"] == "1", response


@case
def http_infer_without_requested_outputs(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    inputs, a, b = simple_inputs(httpclient, batch=2)
    check_simple(c.infer("simple", inputs), a, b)
    # Only OUTPUT1 asked for: only OUTPUT1 comes back.
    result = c.infer("simple", inputs, outputs=[httpclient.InferRequestedOutput("OUTPUT1")])
    assert [o["name"] for o in result.get_response()["outputs"]] == ["OUTPUT1"]
    assert result.as_numpy("OUTPUT0") is None
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@case
def http_request_id_version_and_parameters(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    inputs, a, b = simple_inputs(httpclient)
    result = c.infer("simple", inputs, model_version="1", request_id="req-42", priority=1, timeout=5_000_000,
                     parameters={"custom_str": "x", "custom_int": 7, "custom_bool": True})
    check_simple(result, a, b)
    assert result.get_response()["id"] == "req-42"
    # No id sent: none in the response.
    assert "id" not in c.infer("simple", inputs).get_response()


@case
def http_compression(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    for request_alg in (None, "gzip", "deflate"):
        for response_alg in (None, "gzip", "deflate"):
            inputs, a, b = simple_inputs(httpclient, batch=8, seed=1)
            result = c.infer("simple", inputs, request_compression_algorithm=request_alg, response_compression_algorithm=response_alg)
            check_simple(result, a, b)


@case
def http_async_infer(ctx):
    c = httpclient.InferenceServerClient(ctx["http"], concurrency=4)
    pending = []
    for seed in range(12):
        inputs, a, b = simple_inputs(httpclient, batch=1 + seed % 4, seed=seed)
        pending.append((c.async_infer("simple", inputs, request_id=str(seed)), a, b, seed))
    for request, a, b, seed in pending:
        result = request.get_result()
        check_simple(result, a, b)
        assert result.get_response()["id"] == str(seed)
    c.close()


@case
async def http_aio_infer(ctx):
    c = httpaio.InferenceServerClient(ctx["http"])
    try:
        inputs, a, b = simple_inputs(httpclient, batch=2, seed=9)
        result = await c.infer("simple", inputs, request_id="aio", outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False), httpclient.InferRequestedOutput("OUTPUT1")])
        check_simple(result, a, b)
        assert result.get_response()["id"] == "aio"
        result = await c.infer("simple", inputs, request_compression_algorithm="gzip", response_compression_algorithm="deflate")
        check_simple(result, a, b)
    finally:
        await c.close()


@case
def grpc_infer_simple(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    inputs, a, b = simple_inputs(grpcclient, batch=4, seed=2)
    outputs = [grpcclient.InferRequestedOutput("OUTPUT0"), grpcclient.InferRequestedOutput("OUTPUT1")]
    result = c.infer("simple", inputs, outputs=outputs, request_id="g-1", model_version="1",
                     priority=2, timeout=5_000_000, parameters={"custom_str": "x", "custom_int": 7, "custom_bool": True, "custom_double": 0.5})
    check_simple(result, a, b)
    response = result.get_response()
    assert response.id == "g-1" and response.model_name == "simple" and response.model_version == "1"
    as_json = result.get_response(as_json=True)
    assert [o["name"] for o in as_json["outputs"]] == ["OUTPUT0", "OUTPUT1"]
    check_simple(c.infer("simple", inputs), a, b)


@case
def grpc_compression(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    for alg in (None, "gzip", "deflate"):
        inputs, a, b = simple_inputs(grpcclient, batch=8, seed=3)
        check_simple(c.infer("simple", inputs, compression_algorithm=alg), a, b)


@case
def grpc_async_infer(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    done = queue.Queue()
    expected = {}
    for seed in range(12):
        inputs, a, b = simple_inputs(grpcclient, batch=1 + seed % 4, seed=seed)
        expected[str(seed)] = (a, b)
        c.async_infer("simple", inputs, partial(lambda q, result, error: q.put((result, error)), done), request_id=str(seed))
    for _ in range(len(expected)):
        result, error = done.get(timeout=30)
        assert error is None, error
        a, b = expected.pop(result.get_response().id)
        check_simple(result, a, b)
    assert not expected


@case
async def grpc_aio_infer(ctx):
    c = grpcaio.InferenceServerClient(ctx["grpc"])
    try:
        inputs, a, b = simple_inputs(grpcclient, batch=2, seed=5)
        result = await c.infer("simple", inputs, request_id="aio-g", compression_algorithm="gzip")
        check_simple(result, a, b)
        assert result.get_response().id == "aio-g"
    finally:
        await c.close()


def identity_roundtrip_http(c, datatype, binary):
    data = sample(datatype)
    inp = httpclient.InferInput("INPUT0", list(data.shape), datatype)
    inp.set_data_from_numpy(data, binary_data=binary)
    result = c.infer("identity_" + datatype.lower(), [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary)])
    out = result.as_numpy("OUTPUT0")
    assert result.get_output("OUTPUT0")["datatype"] == datatype
    return data, out


def assert_same(datatype, data, out):
    assert out.shape == data.shape, (datatype, out.shape)
    if datatype == "BYTES":
        assert [bytes(x) for x in out.flatten()] == [bytes(x) for x in data.flatten()], (out, data)
    else:
        assert out.dtype == data.dtype, (datatype, out.dtype)
        np.testing.assert_array_equal(out, data)


@case
def http_every_datatype_binary(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    for datatype in DATATYPES:
        data, out = identity_roundtrip_http(c, datatype, True)
        assert_same(datatype, data, out)


@case
def http_every_datatype_json(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    for datatype in DATATYPES:
        if datatype == "FP16":
            continue  # FP16 has no JSON form (protocol.md §2.2); the client refuses it as well
        data = sample(datatype)
        if datatype == "BYTES":
            # JSON carries BYTES as strings: UTF-8 content only (protocol.md §7.5).
            data = np.array([("s%d-\u00e9" % i).encode() for i in range(data.size)], dtype=np.object_).reshape(data.shape)
        inp = httpclient.InferInput("INPUT0", list(data.shape), datatype)
        inp.set_data_from_numpy(data, binary_data=False)
        result = c.infer("identity_" + datatype.lower(), [inp], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=False)])
        out = result.as_numpy("OUTPUT0")
        if datatype == "BYTES":
            assert [x if isinstance(x, bytes) else x.encode() for x in out.flatten()] == list(data.flatten()), out
        else:
            assert_same(datatype, data, out)


@case
def grpc_every_datatype(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    for datatype in DATATYPES:
        data = sample(datatype)
        inp = grpcclient.InferInput("INPUT0", list(data.shape), datatype)
        inp.set_data_from_numpy(data)
        result = c.infer("identity_" + datatype.lower(), [inp])
        assert result.get_output("OUTPUT0").datatype == datatype
        assert_same(datatype, data, result.as_numpy("OUTPUT0"))


@case
def strings_simple_string(ctx):
    a = np.array([str(i).encode() for i in range(16)], dtype=np.object_).reshape(1, 16)
    b = np.array([str(3 * i - 7).encode() for i in range(16)], dtype=np.object_).reshape(1, 16)
    want_sum = [str(i + 3 * i - 7).encode() for i in range(16)]
    want_diff = [str(i - (3 * i - 7)).encode() for i in range(16)]
    for module, url in ((httpclient, ctx["http"]), (grpcclient, ctx["grpc"])):
        c = module.InferenceServerClient(url)
        inputs = [module.InferInput("INPUT0", [1, 16], "BYTES"), module.InferInput("INPUT1", [1, 16], "BYTES")]
        inputs[0].set_data_from_numpy(a)
        inputs[1].set_data_from_numpy(b)
        result = c.infer("simple_string", inputs)
        assert list(result.as_numpy("OUTPUT0").flatten()) == want_sum
        assert list(result.as_numpy("OUTPUT1").flatten()) == want_diff


@case
def strings_simple_identity(ctx):
    # Variable-length and empty elements, and a zero-length string dimension.
    data = np.array([[b"", b"\x01\x02\x7f", b"x" * 3000, "na\u00efve \U0001f600".encode()]], dtype=np.object_)
    empty = np.zeros((1, 0), dtype=np.object_)
    for module, url in ((httpclient, ctx["http"]), (grpcclient, ctx["grpc"])):
        c = module.InferenceServerClient(url)
        for tensor in (data, empty):
            inp = module.InferInput("INPUT0", list(tensor.shape), "BYTES")
            inp.set_data_from_numpy(tensor)
            out = c.infer("simple_identity", [inp]).as_numpy("OUTPUT0")
            assert out.shape == tensor.shape, (module.__name__, out.shape)
            assert [bytes(x) for x in out.flatten()] == [bytes(x) for x in tensor.flatten()]


@case
def classification(ctx):
    scores = np.array([[0.1, 0.7, 0.05, 0.15]], dtype=np.float32)
    inp_h = httpclient.InferInput("INPUT0", [1, 4], "FP32")
    inp_h.set_data_from_numpy(scores)
    for binary in (True, False):
        result = httpclient.InferenceServerClient(ctx["http"]).infer(
            "labelled", [inp_h], outputs=[httpclient.InferRequestedOutput("OUTPUT0", binary_data=binary, class_count=3)])
        top = [x.decode() if isinstance(x, bytes) else x for x in result.as_numpy("OUTPUT0").flatten()]
        assert top == ["0.700000:1:dog", "0.150000:3:fish", "0.100000:0:cat"], top
    inp_g = grpcclient.InferInput("INPUT0", [1, 4], "FP32")
    inp_g.set_data_from_numpy(scores)
    result = grpcclient.InferenceServerClient(ctx["grpc"]).infer(
        "labelled", [inp_g], outputs=[grpcclient.InferRequestedOutput("OUTPUT0", class_count=2)])
    assert [x.decode() for x in result.as_numpy("OUTPUT0").flatten()] == ["0.700000:1:dog", "0.150000:3:fish"]


run()
