"""The Python backend and decoupled models through tritonclient: Triton's add_sub model.py over
HTTP and gRPC; a decoupled model.py streamed over tritonclient.grpc and .grpc.aio."""
import asyncio
import os
import queue
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.grpc.aio as grpcaio  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402


def add_sub_inputs(module):
    a = np.array([1.5, 2.0, -3.0, 4.25], dtype=np.float32)
    b = np.array([0.5, 1.0, 1.0, 0.25], dtype=np.float32)
    inputs = [module.InferInput("INPUT0", [4], "FP32"), module.InferInput("INPUT1", [4], "FP32")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return inputs, a, b


@case
def http_add_sub(ctx):
    c = httpclient.InferenceServerClient(ctx["http"])
    inputs, a, b = add_sub_inputs(httpclient)
    result = c.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert c.get_model_metadata("add_sub")["platform"] == "python", c.get_model_metadata("add_sub")


@case
def grpc_add_sub(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    inputs, a, b = add_sub_inputs(grpcclient)
    result = c.infer("add_sub", inputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert c.get_model_config("add_sub").config.backend == "python"


def repeat_inputs(module, values):
    data = np.array(values, dtype=np.int32)
    inp = module.InferInput("IN", [len(values)], "INT32")
    inp.set_data_from_numpy(data)
    return [inp]


def is_final(result):
    return result.get_response().parameters["triton_final_response"].bool_param


@case
def grpc_decoupled_stream(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    done = queue.Queue()
    c.start_stream(callback=lambda result, error: done.put((result, error)))
    c.async_stream_infer("repeat", repeat_inputs(grpcclient, [3, 1, 4]), request_id="a", enable_empty_final_response=True)
    c.async_stream_infer("repeat", repeat_inputs(grpcclient, [7]), request_id="b")
    got = {"a": [], "b": []}
    # a: three data responses and the opted-in empty final one; b: one data response (its
    # flags-only final is not sent without the opt-in).
    for _ in range(5):
        result, error = done.get(timeout=30)
        assert error is None, error
        got[result.get_response().id].append(result)
    c.stop_stream()
    a = got["a"]
    assert [r.as_numpy("OUT").tolist() for r in a[:3]] == [[3], [1], [4]]
    assert [is_final(r) for r in a] == [False, False, False, True]
    assert len(a[3].get_response().outputs) == 0
    assert [r.as_numpy("OUT").tolist() for r in got["b"]] == [[7]]
    assert not is_final(got["b"][0])


@case
def grpc_decoupled_error_in_band(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    done = queue.Queue()
    c.start_stream(callback=lambda result, error: done.put((result, error)))
    c.async_stream_infer("repeat", repeat_inputs(grpcclient, [5, -1]), request_id="e")
    result, error = done.get(timeout=30)
    assert error is None and result.as_numpy("OUT").tolist() == [5], (result, error)
    result, error = done.get(timeout=30)
    assert error is not None and "negative value -1" in error.message(), error
    c.stop_stream()


@case
async def grpc_aio_decoupled_stream(ctx):
    c = grpcaio.InferenceServerClient(ctx["grpc"])
    try:
        async def requests():
            # The asyncio client has no enable_empty_final_response argument; the request
            # parameter it sets is the same on the wire.
            yield {"model_name": "repeat", "inputs": repeat_inputs(grpcaio, [2, 9]), "request_id": "x",
                   "parameters": {"triton_enable_empty_final_response": True}}

        received = []
        async for result, error in c.stream_infer(inputs_iterator=requests()):
            assert error is None, error
            received.append(result)
            if is_final(result):
                break
        assert [r.as_numpy("OUT").tolist() for r in received[:2]] == [[2], [9]]
        assert [is_final(r) for r in received] == [False, False, True]
    finally:
        await c.close()


@case
def decoupled_refused_on_unary_infer(ctx):
    expect_error(lambda: httpclient.InferenceServerClient(ctx["http"]).infer("repeat", repeat_inputs(httpclient, [1])),
                 contains=["decoupled"])
    expect_error(lambda: grpcclient.InferenceServerClient(ctx["grpc"]).infer("repeat", repeat_inputs(grpcclient, [1])),
                 status="StatusCode.UNIMPLEMENTED", contains=["decoupled"])


if __name__ == "__main__":
    run()
