"""System and CUDA shared memory as tritonclient users drive it: regions made with
tritonclient.utils.shared_memory, registered over HTTP and gRPC, inference with inputs and outputs
in the regions (simple_http_shm_client.py's steps), status, unregister, misuse errors, and the
CUDA endpoints of a server without GPUs."""
import base64
import os
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402
import tritonclient.utils.shared_memory as shm  # noqa: E402
from tritonclient import utils  # noqa: E402

CLIENTS = (("http", httpclient), ("grpc", grpcclient))
STATUS = {
    "http": {"NOT_FOUND": "404", "INVALID_ARG": "400", "ALREADY_EXISTS": "400", "INTERNAL": "500"},
    "grpc": {"NOT_FOUND": "StatusCode.NOT_FOUND", "INVALID_ARG": "StatusCode.INVALID_ARGUMENT",
             "ALREADY_EXISTS": "StatusCode.ALREADY_EXISTS", "INTERNAL": "StatusCode.INTERNAL"},
}
BYTE_SIZE = 64


def regions(proto):
    """Input region holding INPUT0 then INPUT1, and two output regions; names and handles."""
    tag = uuid.uuid4().hex[:8]
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.ones((1, 16), dtype=np.int32)
    names = {k: f"{proto}_{k}_{tag}" for k in ("input", "output0", "output1")}
    handles = {
        "input": shm.create_shared_memory_region(names["input"], f"/{names['input']}", 2 * BYTE_SIZE),
        "output0": shm.create_shared_memory_region(names["output0"], f"/{names['output0']}", BYTE_SIZE),
        "output1": shm.create_shared_memory_region(names["output1"], f"/{names['output1']}", BYTE_SIZE),
    }
    shm.set_shared_memory_region(handles["input"], [a, b])
    return names, handles, a, b


def destroy(handles):
    for h in handles.values():
        shm.destroy_shared_memory_region(h)


def shm_infer(module, client, names, input_offset=BYTE_SIZE, output0_size=BYTE_SIZE):
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_shared_memory(names["input"], BYTE_SIZE)
    inputs[1].set_shared_memory(names["input"], BYTE_SIZE, offset=input_offset)
    if module is httpclient:
        outputs = [module.InferRequestedOutput("OUTPUT0", binary_data=True), module.InferRequestedOutput("OUTPUT1", binary_data=True)]
    else:
        outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    outputs[0].set_shared_memory(names["output0"], output0_size)
    outputs[1].set_shared_memory(names["output1"], BYTE_SIZE)
    return client.infer("simple", inputs, outputs=outputs)


def output_array(result, handle, name, proto):
    out = result.get_output(name)
    if proto == "http":
        datatype, shape = out["datatype"], out["shape"]
        assert "data" not in out and "parameters" not in out, f"{name} came with data: {out}"
    else:
        datatype, shape = out.datatype, list(out.shape)
    return shm.get_contents_as_numpy(handle, utils.triton_to_np_dtype(datatype), shape)


def register_all(client, names, handles):
    client.register_system_shared_memory(names["input"], f"/{names['input']}", 2 * BYTE_SIZE)
    client.register_system_shared_memory(names["output0"], f"/{names['output0']}", BYTE_SIZE)
    client.register_system_shared_memory(names["output1"], f"/{names['output1']}", BYTE_SIZE)


@case
def system_shm_simple(ctx):
    for proto, module in CLIENTS:
        client = module.InferenceServerClient(ctx[proto])
        client.unregister_system_shared_memory()
        client.unregister_cuda_shared_memory()
        names, handles, a, b = regions(proto)
        try:
            register_all(client, names, handles)
            result = shm_infer(module, client, names)
            np.testing.assert_array_equal(output_array(result, handles["output0"], "OUTPUT0", proto), a + b)
            np.testing.assert_array_equal(output_array(result, handles["output1"], "OUTPUT1", proto), a - b)
            client.unregister_system_shared_memory()
        finally:
            destroy(handles)


@case
def system_shm_status_and_unregister(ctx):
    for proto, module in CLIENTS:
        client = module.InferenceServerClient(ctx[proto])
        names, handles, _, _ = regions(proto)
        try:
            register_all(client, names, handles)
            status = client.get_system_shared_memory_status()
            if proto == "http":
                got = {r["name"]: (r["key"], int(r["offset"]), int(r["byte_size"])) for r in status}
            else:
                got = {k: (r.key, r.offset, r.byte_size) for k, r in status.regions.items()}
            assert got[names["input"]] == (f"/{names['input']}", 0, 2 * BYTE_SIZE), got
            assert len(got) == 3, got
            client.unregister_system_shared_memory(names["output0"])
            one = client.get_system_shared_memory_status(names["input"])
            assert (len(one) if proto == "http" else len(one.regions)) == 1, one
            expect_error(lambda: client.get_system_shared_memory_status(names["output0"]), STATUS[proto]["NOT_FOUND"],
                         [f"Unable to find system shared memory region: '{names['output0']}'"])
            client.unregister_system_shared_memory()
            status = client.get_system_shared_memory_status()
            assert (len(status) if proto == "http" else len(status.regions)) == 0, status
        finally:
            destroy(handles)


@case
def system_shm_misuse(ctx):
    for proto, module in CLIENTS:
        client = module.InferenceServerClient(ctx[proto])
        names, handles, a, b = regions(proto)
        try:
            register_all(client, names, handles)
            expect_error(lambda: client.register_system_shared_memory(names["input"], f"/{names['input']}", BYTE_SIZE),
                         STATUS[proto]["ALREADY_EXISTS"], [f"shared memory region '{names['input']}' already in manager"])
            expect_error(lambda: client.register_system_shared_memory("bad", "../../etc/passwd", BYTE_SIZE),
                         STATUS[proto]["INVALID_ARG"], ["is not a POSIX shared memory object name"])
            expect_error(lambda: shm_infer(module, client, names, input_offset=2 * BYTE_SIZE),
                         STATUS[proto]["INVALID_ARG"], ["Invalid offset for shared memory region"])
            expect_error(lambda: shm_infer(module, client, names, input_offset=BYTE_SIZE + 4),
                         STATUS[proto]["INVALID_ARG"], ["Invalid offset + byte size for shared memory region"])
            expect_error(lambda: shm_infer(module, client, names, output0_size=32), STATUS[proto]["INTERNAL"],
                         ["shared memory size specified with the request for output 'OUTPUT0' (32 bytes) should be at least 64 bytes"])
            client.unregister_system_shared_memory(names["input"])
            expect_error(lambda: shm_infer(module, client, names), STATUS[proto]["NOT_FOUND"],
                         [f"Unable to find shared memory region: '{names['input']}'"])
            # The server keeps serving.
            client.register_system_shared_memory(names["input"], f"/{names['input']}", 2 * BYTE_SIZE)
            result = shm_infer(module, client, names)
            np.testing.assert_array_equal(output_array(result, handles["output0"], "OUTPUT0", proto), a + b)
            client.unregister_system_shared_memory()
        finally:
            destroy(handles)


@case
def cuda_shm_without_gpus(ctx):
    handle = base64.b64encode(bytes(64))
    for proto, module in CLIENTS:
        client = module.InferenceServerClient(ctx[proto])
        raw = handle.decode() if proto == "http" else handle
        expect_error(lambda: client.register_cuda_shared_memory("gpu_region", raw, 0, 1024), STATUS[proto]["INVALID_ARG"],
                     ["failed to register CUDA shared memory region: 'gpu_region', GPUs not supported"])
        status = client.get_cuda_shared_memory_status()
        assert (len(status) if proto == "http" else len(status.regions)) == 0, status
        client.unregister_cuda_shared_memory()


run()
