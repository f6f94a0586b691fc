"""Sequences (the sequence batcher) through tritonclient.http and tritonclient.grpc: sequence_id
(integers and strings), sequence_start/sequence_end, per-sequence state on the server, gRPC
streams, and the errors for requests outside a sequence."""
import os
import queue
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402


def value_input(module, value):
    inp = module.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return [inp]


def interleaved(client, module, model, ids):
    """Three requests per sequence, interleaved across sequences; returns the OUTPUT of each."""
    got = {sid: [] for sid in ids}
    for step in range(3):
        for n, sid in enumerate(ids):
            result = client.infer(
                model,
                value_input(module, 10 * n + step),
                sequence_id=sid,
                sequence_start=step == 0,
                sequence_end=step == 2,
            )
            got[sid].append(int(result.as_numpy("OUTPUT")[0][0]))
            corrid = result.as_numpy("OUT_CORRID")[0][0]
            corrid = corrid.decode() if isinstance(corrid, bytes) else int(corrid)
            assert corrid == sid, (corrid, sid)
    for n, sid in enumerate(ids):
        base = 10 * n
        assert got[sid] == [base, 2 * base + 1, 3 * base + 3], (sid, got[sid])


@case
def http_sequence_integer_ids(ctx):
    interleaved(httpclient.InferenceServerClient(ctx["http"]), httpclient, "sequence_accumulator", [11, 12, 2**40])


@case
def grpc_sequence_integer_ids(ctx):
    interleaved(grpcclient.InferenceServerClient(ctx["grpc"]), grpcclient, "sequence_accumulator", [21, 22, 23])


@case
def http_and_grpc_sequence_string_ids(ctx):
    interleaved(httpclient.InferenceServerClient(ctx["http"]), httpclient, "sequence_string", ["a-seq", "b-seq"])
    interleaved(grpcclient.InferenceServerClient(ctx["grpc"]), grpcclient, "sequence_string", ["c-seq", "d-seq"])


@case
def grpc_stream_sequences(ctx):
    c = grpcclient.InferenceServerClient(ctx["grpc"])
    done = queue.Queue()
    c.start_stream(callback=lambda result, error: done.put((result, error)))
    ids = [31, 32, 33, 34]
    for step in range(3):
        for n, sid in enumerate(ids):
            c.async_stream_infer(
                "sequence_accumulator",
                value_input(grpcclient, n + step),
                sequence_id=sid,
                sequence_start=step == 0,
                sequence_end=step == 2,
            )
    got = [done.get(timeout=30) for _ in range(3 * len(ids))]
    c.stop_stream()
    totals = [0] * len(ids)
    for k, (result, error) in enumerate(got):
        assert error is None, error
        step, n = divmod(k, len(ids))
        totals[n] += n + step
        assert int(result.as_numpy("OUTPUT")[0][0]) == totals[n], (k, totals)


@case
def sequence_errors(ctx):
    h = httpclient.InferenceServerClient(ctx["http"])
    g = grpcclient.InferenceServerClient(ctx["grpc"])
    expect_error(
        lambda: h.infer("sequence_accumulator", value_input(httpclient, 1)),
        "400",
        ["must specify a non-zero or non-empty correlation ID"],
    )
    expect_error(
        lambda: g.infer("sequence_accumulator", value_input(grpcclient, 1), sequence_id=4242),
        "StatusCode.INVALID_ARGUMENT",
        ["must specify the START flag"],
    )
    expect_error(
        lambda: h.infer("sequence_accumulator", value_input(httpclient, 1), sequence_id=4243, sequence_end=True),
        "400",
        ["must specify the START flag"],
    )


run()
