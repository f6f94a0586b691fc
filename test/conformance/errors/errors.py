"""Error paths as tritonclient users meet them: the client raises InferenceServerException with
Nereid's message and the protocol's status, and the server keeps serving."""
import asyncio
import os
import queue
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, expect_error_async, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.grpc.aio as grpcaio  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.http.aio as httpaio  # noqa: E402

CLIENTS = (("http", httpclient), ("grpc", grpcclient))
STATUS = {
    "http": {"NOT_FOUND": "404", "INVALID_ARG": "400", "UNSUPPORTED": "501"},
    "grpc": {"NOT_FOUND": "StatusCode.NOT_FOUND", "INVALID_ARG": "StatusCode.INVALID_ARGUMENT", "UNSUPPORTED": "StatusCode.UNIMPLEMENTED"},
}


def tensor(module, name, array, datatype):
    t = module.InferInput(name, list(array.shape), datatype)
    t.set_data_from_numpy(array)
    return t


def simple_inputs(module, shape=(1, 16), datatype="INT32", dtype=np.int32):
    a = np.ones(shape, dtype=dtype)
    return [tensor(module, "INPUT0", a, datatype), tensor(module, "INPUT1", a, datatype)]


def still_serves(module, client):
    result = client.infer("simple", simple_inputs(module))
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 16), 2, dtype=np.int32))


@case
def unknown_model(ctx):
    for proto, module in CLIENTS:
        c = module.InferenceServerClient(ctx[proto])
        expect_error(lambda: c.infer("no_such_model", simple_inputs(module)), STATUS[proto]["NOT_FOUND"],
                     ["Request for unknown model: 'no_such_model' is not found"])
        still_serves(module, c)


@case
def unknown_version(ctx):
    for proto, module in CLIENTS:
        c = module.InferenceServerClient(ctx[proto])
        expect_error(lambda: c.infer("simple", simple_inputs(module), model_version="7"), STATUS[proto]["NOT_FOUND"],
                     ["Request for unknown model: 'simple' version 7 is not found"])


@case
def wrong_shape(ctx):
    for proto, module in CLIENTS:
        c = module.InferenceServerClient(ctx[proto])
        expect_error(lambda: c.infer("simple", simple_inputs(module, shape=(1, 15))), STATUS[proto]["INVALID_ARG"],
                     ["unexpected shape for input 'INPUT0' for model 'simple'", "Expected [-1,16], got [1,15]"])
        still_serves(module, c)


@case
def wrong_datatype(ctx):
    for proto, module in CLIENTS:
        c = module.InferenceServerClient(ctx[proto])
        expect_error(lambda: c.infer("simple", simple_inputs(module, datatype="FP32", dtype=np.float32)), STATUS[proto]["INVALID_ARG"],
                     ["inference input 'INPUT0' data-type is 'FP32', but model 'simple' expects 'INT32'"])
        still_serves(module, c)


@case
def batch_too_large(ctx):
    for proto, module in CLIENTS:
        c = module.InferenceServerClient(ctx[proto])
        expect_error(lambda: c.infer("simple", simple_inputs(module, shape=(9, 16))), STATUS[proto]["INVALID_ARG"],
                     ["inference request batch-size must be <= 8 for 'simple', got 9"])


@case
def missing_input_and_unknown_output(ctx):
    for proto, module in CLIENTS:
        c = module.InferenceServerClient(ctx[proto])
        only_one = simple_inputs(module)[:1]
        expect_error(lambda: c.infer("simple", only_one), STATUS[proto]["INVALID_ARG"], ["missing required input(s) ['INPUT1']"])
        outputs = [module.InferRequestedOutput("OUTPUT9")]
        expect_error(lambda: c.infer("simple", simple_inputs(module), outputs=outputs), STATUS[proto]["INVALID_ARG"],
                     ["unexpected inference output 'OUTPUT9' for model 'simple'"])


@case
def bytes_the_backend_cannot_carry(ctx):
    data = np.array([[b"ok", b"\xff\xfe"]], dtype=np.object_)
    for proto, module in CLIENTS:
        c = module.InferenceServerClient(ctx[proto])
        expect_error(lambda: c.infer("simple_identity", [tensor(module, "INPUT0", data, "BYTES")]), STATUS[proto]["UNSUPPORTED"],
                     ["input 'INPUT0' of model 'simple_identity': element 1 is not valid UTF-8"])


@case
def async_infer_errors(ctx):
    c = httpclient.InferenceServerClient(ctx["http"], concurrency=2)
    pending = c.async_infer("simple", simple_inputs(httpclient, shape=(1, 15)))
    expect_error(pending.get_result, "400", ["unexpected shape for input 'INPUT0'"])
    c.close()
    g = grpcclient.InferenceServerClient(ctx["grpc"])
    done = queue.Queue()
    g.async_infer("no_such_model", simple_inputs(grpcclient), lambda result, error: done.put((result, error)))
    result, error = done.get(timeout=30)
    assert result is None and error is not None
    assert error.status() == "StatusCode.NOT_FOUND" and "no_such_model" in error.message(), error


@case
async def aio_errors(ctx):
    h = httpaio.InferenceServerClient(ctx["http"])
    g = grpcaio.InferenceServerClient(ctx["grpc"])
    try:
        await expect_error_async(h.infer("no_such_model", simple_inputs(httpclient)), "404", ["no_such_model"])
        await expect_error_async(g.infer("simple", simple_inputs(grpcclient, shape=(1, 15))), "StatusCode.INVALID_ARGUMENT", ["Expected [-1,16], got [1,15]"])
        await expect_error_async(h.get_model_metadata("no_such_model"), "404", ["no_such_model"])
        await expect_error_async(g.get_inference_statistics("no_such_model"), "StatusCode.INVALID_ARGUMENT", ["requested model 'no_such_model' is not available"])
    finally:
        await h.close()
        await g.close()


@case
def reserved_parameters(ctx):
    # The clients refuse reserved keys themselves; a triton_ key reaches the server and is refused there.
    c = httpclient.InferenceServerClient(ctx["http"])
    expect_error(lambda: c.infer("simple", simple_inputs(httpclient), parameters={"triton_x": 1}), "400", ["triton_"])
    g = grpcclient.InferenceServerClient(ctx["grpc"])
    expect_error(lambda: g.infer("simple", simple_inputs(grpcclient), parameters={"triton_x": 1}), "StatusCode.INVALID_ARGUMENT", ["triton_"])


run()
