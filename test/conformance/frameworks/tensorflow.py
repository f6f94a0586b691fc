"""TensorFlow models through tritonclient, as Triton's simple_http_infer_client,
simple_grpc_infer_client and simple_http/grpc_string_infer_client examples drive its `simple`
models: INPUT0 = 0..15, INPUT1 = ones, OUTPUT0 = sum and OUTPUT1 = difference, for the GraphDef
`simple`, the SavedModel `simple_savedmodel` and the BYTES `simple_string`."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from conformance import case, expect_error, run  # noqa: E402

import numpy as np  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402
import tritonclient.http as httpclient  # noqa: E402

MODELS = {"simple": "tensorflow_graphdef", "simple_savedmodel": "tensorflow_savedmodel"}


def simple_infer(module, client, model):
    input0_data = np.expand_dims(np.arange(start=0, stop=16, dtype=np.int32), axis=0)
    input1_data = np.ones(shape=(1, 16), dtype=np.int32)
    inputs = [module.InferInput("INPUT0", [1, 16], "INT32"), module.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(input0_data)
    inputs[1].set_data_from_numpy(input1_data)
    if module is httpclient:
        outputs = [module.InferRequestedOutput("OUTPUT0", binary_data=True), module.InferRequestedOutput("OUTPUT1", binary_data=False)]
    else:
        outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    results = client.infer(model_name=model, inputs=inputs, outputs=outputs)
    output0_data = results.as_numpy("OUTPUT0")
    output1_data = results.as_numpy("OUTPUT1")
    assert output0_data.shape == (1, 16) and output0_data.dtype == np.int32, (output0_data.shape, output0_data.dtype)
    for i in range(16):
        assert input0_data[0][i] + input1_data[0][i] == output0_data[0][i], ("sync infer error: incorrect sum", i)
        assert input0_data[0][i] - input1_data[0][i] == output1_data[0][i], ("sync infer error: incorrect difference", i)


def check_metadata(module, client, model):
    if module is httpclient:
        metadata = client.get_model_metadata(model)
        assert metadata["platform"] == MODELS[model], metadata
        assert [i["name"] for i in metadata["inputs"]] == ["INPUT0", "INPUT1"], metadata
        assert [i["datatype"] for i in metadata["inputs"]] == ["INT32", "INT32"], metadata
        assert [i["shape"] for i in metadata["inputs"]] == [[-1, 16], [-1, 16]], metadata
        config = client.get_model_config(model)
        assert config["platform"] == MODELS[model] and config["max_batch_size"] == 8, config
    else:
        metadata = client.get_model_metadata(model)
        assert metadata.platform == MODELS[model], metadata
        assert [list(i.shape) for i in metadata.inputs] == [[-1, 16], [-1, 16]], metadata
        config = client.get_model_config(model).config
        assert config.platform == MODELS[model] and config.backend == "tensorflow" and config.max_batch_size == 8, config


@case
def http_simple_graphdef(ctx):
    client = httpclient.InferenceServerClient(ctx["http"])
    assert client.is_model_ready("simple")
    check_metadata(httpclient, client, "simple")
    simple_infer(httpclient, client, "simple")


@case
def http_simple_savedmodel(ctx):
    client = httpclient.InferenceServerClient(ctx["http"])
    assert client.is_model_ready("simple_savedmodel")
    check_metadata(httpclient, client, "simple_savedmodel")
    simple_infer(httpclient, client, "simple_savedmodel")


@case
def grpc_simple_graphdef(ctx):
    client = grpcclient.InferenceServerClient(ctx["grpc"])
    assert client.is_model_ready("simple")
    check_metadata(grpcclient, client, "simple")
    simple_infer(grpcclient, client, "simple")


@case
def grpc_simple_savedmodel(ctx):
    client = grpcclient.InferenceServerClient(ctx["grpc"])
    check_metadata(grpcclient, client, "simple_savedmodel")
    simple_infer(grpcclient, client, "simple_savedmodel")


def string_infer(module, client):
    in0 = np.arange(start=0, stop=16, dtype=np.int32)
    in0 = np.expand_dims(in0, axis=0)
    in1 = np.ones(shape=(1, 16), dtype=np.int32)
    expected_sum = np.add(in0, in1)
    expected_diff = np.subtract(in0, in1)
    in0n = np.array([str(x).encode("utf-8") for x in in0.reshape(in0.size)], dtype=np.object_)
    input0_data = in0n.reshape(in0.shape)
    in1n = np.array([str(x).encode("utf-8") for x in in1.reshape(in1.size)], dtype=np.object_)
    input1_data = in1n.reshape(in1.shape)
    inputs = [module.InferInput("INPUT0", input0_data.shape, "BYTES"), module.InferInput("INPUT1", input1_data.shape, "BYTES")]
    inputs[0].set_data_from_numpy(input0_data)
    inputs[1].set_data_from_numpy(input1_data)
    outputs = [module.InferRequestedOutput("OUTPUT0"), module.InferRequestedOutput("OUTPUT1")]
    results = client.infer(model_name="simple_string", inputs=inputs, outputs=outputs)
    output0_data = results.as_numpy("OUTPUT0")
    output1_data = results.as_numpy("OUTPUT1")
    for i in range(16):
        r0 = int(output0_data[0][i])
        r1 = int(output1_data[0][i])
        assert expected_sum[0][i] == r0, ("error: incorrect sum", i, r0)
        assert expected_diff[0][i] == r1, ("error: incorrect difference", i, r1)


@case
def http_simple_string(ctx):
    string_infer(httpclient, httpclient.InferenceServerClient(ctx["http"]))


@case
def grpc_simple_string(ctx):
    string_infer(grpcclient, grpcclient.InferenceServerClient(ctx["grpc"]))


@case
def http_wrong_datatype_refused(ctx):
    client = httpclient.InferenceServerClient(ctx["http"])
    inputs = [httpclient.InferInput("INPUT0", [1, 16], "FP32"), httpclient.InferInput("INPUT1", [1, 16], "INT32")]
    inputs[0].set_data_from_numpy(np.zeros((1, 16), dtype=np.float32))
    inputs[1].set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    expect_error(lambda: client.infer("simple", inputs), contains=("INPUT0",))
    simple_infer(httpclient, client, "simple")


run()
