"""gRPC streaming (ModelStreamInfer) for non-decoupled models through tritonclient.grpc and
tritonclient.grpc.aio: ordered responses, ids, compression, in-band errors, final-response flags."""
import asyncio
import os
import queue
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, check_error, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.grpc.aio as grpcaio  # noqa: E402


def simple_inputs(seed, cols=16):
    a = (np.arange(16, dtype=np.int32) + seed).reshape(1, 16)[:, :cols]
    b = np.full((1, cols), 100 * seed, dtype=np.int32)
    inputs = [grpcclient.InferInput("INPUT0", [1, cols], "INT32"), grpcclient.InferInput("INPUT1", [1, cols], "INT32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


def collect(n, done):
    got = []
    for _ in range(n):
        got.append(done.get(timeout=30))
    return got


@case
def stream_in_order(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    done = queue.Queue()
    c.start_stream(callback=lambda result, error: done.put((result, error)))
    expected = []
    for seed in range(20):
        inputs, a, b = simple_inputs(seed)
        c.async_stream_infer("simple", inputs, request_id=f"s{seed}", parameters={"custom": seed})
        expected.append((f"s{seed}", a, b))
    got = collect(len(expected), done)
    c.stop_stream()
    for (result, error), (rid, a, b) in zip(got, expected):
        assert error is None, error
        assert result.get_response().id == rid, (result.get_response().id, rid)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)


@case
def stream_compressed(ctx):
    for alg in ("gzip", "deflate"):
        c = grpcclient.InferenceServerClient(ctx["grpc"])
        done = queue.Queue()
        c.start_stream(callback=lambda result, error: done.put((result, error)), compression_algorithm=alg)
        inputs, a, b = simple_inputs(3)
        c.async_stream_infer("simple", inputs, request_id=alg)
        (result, error), = collect(1, done)
        c.stop_stream()
        assert error is None, error
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


@case
def stream_errors_in_band(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    done = queue.Queue()
    c.start_stream(callback=lambda result, error: done.put((result, error)))
    good, a, b = simple_inputs(1)
    bad_shape, _, _ = simple_inputs(2, cols=15)
    c.async_stream_infer("simple", good, request_id="first")
    c.async_stream_infer("no_such_model", good, request_id="unknown")
    c.async_stream_infer("simple", bad_shape, request_id="bad")
    c.async_stream_infer("simple", good, request_id="after")
    got = collect(4, done)
    c.stop_stream()
    assert got[0][1] is None and got[0][0].get_response().id == "first"
    assert got[1][0] is None
    check_error(got[1][1], None, ["Request for unknown model: 'no_such_model' is not found"])
    assert got[2][0] is None
    check_error(got[2][1], None, ["unexpected shape for input 'INPUT0' for model 'simple'"])
    # The stream survives its errors.
    assert got[3][1] is None and got[3][0].get_response().id == "after"
    np.testing.assert_array_equal(got[3][0].as_numpy("OUTPUT0"), a + b)


@case
def stream_final_response_flag(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    done = queue.Queue()
    c.start_stream(callback=lambda result, error: done.put((result, error)))
    inputs, a, b = simple_inputs(4)
    c.async_stream_infer("simple", inputs, request_id="flagged", enable_empty_final_response=True)
    (result, error), = collect(1, done)
    c.stop_stream()
    assert error is None, error
    response = result.get_response()
    assert response.parameters["triton_final_response"].bool_param is True, response.parameters
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)


@case
async def aio_stream_infer(ctx):
    c = grpcaio.InferenceServerClient(ctx["grpc"])
    expected = {}

    async def requests():
        for seed in range(8):
            inputs, a, b = simple_inputs(seed)
            expected[f"a{seed}"] = (a, b)
            yield {"model_name": "simple", "inputs": inputs, "request_id": f"a{seed}"}

    seen = []
    try:
        async for result, error in c.stream_infer(requests()):
            assert error is None, error
            rid = result.get_response().id
            a, b = expected[rid]
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
            seen.append(rid)
            if len(seen) == 8:
                break
    finally:
        await c.close()
    assert seen == [f"a{i}" for i in range(8)], seen


run()
