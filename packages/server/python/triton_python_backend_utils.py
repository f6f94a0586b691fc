"""Nereid's implementation of Triton's ``triton_python_backend_utils`` (``pb_utils``).

The API of models-and-scheduling.md §8.5, so that a Triton ``model.py`` runs unchanged. Tensors
are numpy arrays (BYTES: ``object`` arrays of ``bytes``). Calls that reach the server (BLS,
model control, response senders) go through the stub's connection, set by ``nereid_stub.stub``.
"""

import json

import numpy as np

TRITONSERVER_RESPONSE_COMPLETE_FINAL = 1
TRITONSERVER_REQUEST_RELEASE_ALL = 1
TRITONSERVER_REQUEST_RELEASE_RESCHEDULE = 2
TRITONSERVER_REQUEST_FLAG_SEQUENCE_START = 1
TRITONSERVER_REQUEST_FLAG_SEQUENCE_END = 2

# The stub's connection to the server; None in a process that is not a Nereid stub.
_runtime = None

_CONFIG_TO_NUMPY = {
    "TYPE_BOOL": np.bool_,
    "TYPE_UINT8": np.uint8,
    "TYPE_UINT16": np.uint16,
    "TYPE_UINT32": np.uint32,
    "TYPE_UINT64": np.uint64,
    "TYPE_INT8": np.int8,
    "TYPE_INT16": np.int16,
    "TYPE_INT32": np.int32,
    "TYPE_INT64": np.int64,
    "TYPE_FP16": np.float16,
    "TYPE_FP32": np.float32,
    "TYPE_FP64": np.float64,
    "TYPE_STRING": np.object_,
}

# Wire datatype (protocol.md §2.3) ↔ numpy dtype.
WIRE_TO_NUMPY = {
    "BOOL": np.dtype(np.bool_),
    "UINT8": np.dtype(np.uint8),
    "UINT16": np.dtype(np.uint16),
    "UINT32": np.dtype(np.uint32),
    "UINT64": np.dtype(np.uint64),
    "INT8": np.dtype(np.int8),
    "INT16": np.dtype(np.int16),
    "INT32": np.dtype(np.int32),
    "INT64": np.dtype(np.int64),
    "FP16": np.dtype(np.float16),
    "FP32": np.dtype(np.float32),
    "FP64": np.dtype(np.float64),
    "BYTES": np.dtype(np.object_),
}


# The native-byte-order dtypes, for the common case of numpy_to_wire_datatype (one lookup per output).
_NUMPY_TO_WIRE = {d: name for name, d in WIRE_TO_NUMPY.items() if name != "BYTES"}


def triton_string_to_numpy(triton_type_string):
    """``"TYPE_FP32"`` → ``numpy.float32``; None for unknown names."""
    return _CONFIG_TO_NUMPY.get(triton_type_string)


def numpy_to_wire_datatype(dtype):
    """The wire datatype of a numpy dtype (``bytes``/``str``/``object`` arrays are BYTES)."""
    if not isinstance(dtype, np.dtype):
        dtype = np.dtype(dtype)
    name = _NUMPY_TO_WIRE.get(dtype)
    if name is not None:
        return name
    if dtype.kind in ("O", "S", "U"):
        return "BYTES"
    for name, d in WIRE_TO_NUMPY.items():
        if d == dtype and name != "BYTES":
            return name
    return None


def serialize_byte_tensor(input_tensor):
    """A BYTES tensor as one uint8 array of 4-byte little-endian length-prefixed elements."""
    if input_tensor.size == 0:
        return np.empty([0], dtype=np.uint8)
    parts = []
    for obj in np.nditer(input_tensor, flags=["refs_ok"], order="C"):
        item = obj.item()
        if isinstance(item, str):
            item = item.encode("utf-8")
        elif not isinstance(item, (bytes, bytearray)):
            item = str(item).encode("utf-8")
        parts.append(len(item).to_bytes(4, "little"))
        parts.append(bytes(item))
    return np.frombuffer(b"".join(parts), dtype=np.uint8)


def deserialize_bytes_tensor(encoded_tensor):
    """The inverse of ``serialize_byte_tensor``: a flat ``object`` array of ``bytes``."""
    data = bytes(encoded_tensor)
    out = []
    offset = 0
    while offset < len(data):
        length = int.from_bytes(data[offset:offset + 4], "little")
        offset += 4
        out.append(data[offset:offset + length])
        offset += length
    return np.array(out, dtype=np.object_)


class TritonError(Exception):
    """An error carried by a response (or raised); ``code()`` is one of the class constants."""

    UNKNOWN = 0
    INTERNAL = 1
    NOT_FOUND = 2
    INVALID_ARG = 3
    UNAVAILABLE = 4
    UNSUPPORTED = 5
    ALREADY_EXISTS = 6
    CANCELLED = 7

    _NAMES = {0: "UNKNOWN", 1: "INTERNAL", 2: "NOT_FOUND", 3: "INVALID_ARG", 4: "UNAVAILABLE",
              5: "UNSUPPORTED", 6: "ALREADY_EXISTS", 7: "CANCELLED"}

    def __init__(self, message, code=INTERNAL):
        super().__init__(message)
        self._message = str(message)
        self._code = code

    def message(self):
        return self._message

    def code(self):
        return self._code

    def __repr__(self):
        return "TritonError(%r, %s)" % (self._message, self._NAMES.get(self._code, self._code))


class TritonModelException(Exception):
    """Raised by a model's initialize/execute/finalize to signal failure."""

    def __init__(self, message=""):
        super().__init__(message)
        self._message = str(message)

    def message(self):
        return self._message


class Tensor:
    """A named tensor over a numpy array (BYTES: an ``object`` array of ``bytes``)."""

    def __init__(self, name, tensor, *_args, **_kwargs):
        if not isinstance(tensor, np.ndarray):
            raise TritonModelException(
                "Tensor '%s': expected a numpy array, got %s" % (name, type(tensor).__name__))
        if tensor.dtype.kind in ("S", "U"):
            tensor = tensor.astype(np.object_)
        self._name = name
        self._array = tensor

    @classmethod
    def _received(cls, name, array):
        """A tensor the server sent (a numpy array of a known datatype): no checks to make."""
        tensor = cls.__new__(cls)
        tensor._name = name
        tensor._array = array
        return tensor

    def name(self):
        return self._name

    def as_numpy(self):
        return self._array

    def is_cpu(self):
        return True

    def shape(self):
        return list(self._array.shape)

    def triton_dtype(self):
        return numpy_to_wire_datatype(self._array.dtype)

    def to_dlpack(self):
        if self._array.dtype == np.object_:
            raise TritonModelException("Tensor '%s': BYTES tensors cannot be exported to DLPack" % self._name)
        return self._array.__dlpack__()

    @staticmethod
    def from_dlpack(name, capsule):
        if hasattr(np, "from_dlpack"):
            return Tensor(name, np.from_dlpack(capsule))
        try:
            import torch.utils.dlpack as tdl  # noqa: PLC0415
            return Tensor(name, tdl.from_dlpack(capsule).numpy())
        except ImportError as err:
            raise TritonModelException("Tensor.from_dlpack needs numpy >= 1.22 or torch") from err

    def __repr__(self):
        return "Tensor(%r, %s %s)" % (self._name, self._array.dtype, list(self._array.shape))


class InferenceResponse:
    """A response: output tensors, or an error (then the tensors are ignored), and parameters."""

    def __init__(self, output_tensors=None, error=None, parameters=None):
        if error is not None and not isinstance(error, TritonError):
            error = TritonError(str(error))
        self._error = error
        self._outputs = [] if error is not None else list(output_tensors or [])
        if isinstance(parameters, str):
            parameters = json.loads(parameters) if parameters else {}
        self._parameters = dict(parameters or {})
        for key, value in self._parameters.items():
            if not isinstance(value, (bool, int, str)):
                raise TritonModelException(
                    "response parameter '%s' must be bool, int or str, got %s" % (key, type(value).__name__))

    def output_tensors(self):
        return self._outputs

    def has_error(self):
        return self._error is not None

    def error(self):
        return self._error

    def parameters(self):
        return json.dumps(self._parameters)


class InferenceResponseSender:
    """Sends responses for one request (decoupled models; optional otherwise)."""

    def __init__(self, request):
        self._request = request

    def send(self, response=None, flags=0):
        if response is None and flags != TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            raise TritonModelException("send() without a response must carry TRITONSERVER_RESPONSE_COMPLETE_FINAL")
        _runtime.send_response(self._request, response, bool(flags & TRITONSERVER_RESPONSE_COMPLETE_FINAL))

    def is_cancelled(self):
        return self._request.is_cancelled()


class InferenceRequest:
    """A request: received by ``execute``, or built by a model to call another model (BLS)."""

    def __init__(self, model_name=None, requested_output_names=None, inputs=None, request_id="",
                 correlation_id=0, model_version=-1, flags=0, timeout=0, preferred_memory=None,
                 parameters=None, **_kwargs):
        self._model_name = model_name
        self._requested_output_names = list(requested_output_names or [])
        self._inputs = list(inputs or [])
        self._request_id = request_id
        self._correlation_id = correlation_id
        self._model_version = model_version
        self._flags = flags
        self._timeout = timeout
        if isinstance(parameters, dict):
            parameters = json.dumps(parameters)
        self._parameters = parameters or "{}"
        self._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        # Set by the stub for requests it received.
        self._key = None
        self._cancelled = False
        self._sender = None

    @classmethod
    def _received(cls, model_name, requested_output_names, inputs, request_id, correlation_id, flags, parameters, key):
        """A request the server sent to ``execute`` (``key``: the stub's (execute, index)); the
        fields are already what the constructor would make of them."""
        request = cls.__new__(cls)
        request._model_name = model_name
        request._requested_output_names = requested_output_names
        request._inputs = inputs
        request._request_id = request_id
        request._correlation_id = correlation_id
        request._model_version = -1
        request._flags = flags
        request._timeout = 0
        request._parameters = parameters
        request._release_flags = TRITONSERVER_REQUEST_RELEASE_ALL
        request._key = key
        request._cancelled = False
        request._sender = None
        return request

    def inputs(self):
        return self._inputs

    def requested_output_names(self):
        return self._requested_output_names

    def request_id(self):
        return self._request_id

    def correlation_id(self):
        return self._correlation_id

    def model_name(self):
        return self._model_name

    def model_version(self):
        return self._model_version

    def flags(self):
        return self._flags

    def timeout(self):
        return self._timeout

    def parameters(self):
        return self._parameters

    def set_release_flags(self, flags):
        self._release_flags = flags

    def is_cancelled(self):
        if self._key is None:
            return False
        return _runtime.is_cancelled(self)

    def get_response_sender(self):
        if self._key is None:
            raise TritonModelException("get_response_sender() is only available on requests passed to execute()")
        if self._sender is None:
            self._sender = InferenceResponseSender(self)
        return self._sender

    def exec(self, decoupled=False):
        """Runs this request on another model and blocks for the response. With
        ``decoupled=True`` it returns an iterator over the model's responses, the last one final
        (an empty response when the model ended with a flags-only final); it returns once that
        final response arrived. Errors come back as responses with ``has_error()``."""
        runtime = _require_runtime("InferenceRequest.exec")
        if decoupled:
            return iter(runtime.bls_decoupled(self))
        return runtime.bls(self)

    async def async_exec(self, decoupled=False):
        """``exec`` as a coroutine; other coroutines of the instance run meanwhile. With
        ``decoupled=True`` it returns an async iterator over the responses."""
        runtime = _require_runtime("InferenceRequest.async_exec")
        if decoupled:
            responses = await runtime.bls_decoupled_async(self)

            async def each():
                for response in responses:
                    yield response
            return each()
        return await runtime.bls_async(self)


def _require_runtime(what):
    if _runtime is None:
        raise TritonModelException("%s is only available inside a model served by Nereid" % what)
    return _runtime


def get_input_tensor_by_name(inference_request, name):
    for tensor in inference_request.inputs():
        if tensor.name() == name:
            return tensor
    return None


def get_output_tensor_by_name(inference_response, name):
    for tensor in inference_response.output_tensors():
        if tensor.name() == name:
            return tensor
    return None


def get_input_config_by_name(model_config, name):
    for entry in model_config.get("input", []):
        if entry.get("name") == name:
            return entry
    return None


def get_output_config_by_name(model_config, name):
    for entry in model_config.get("output", []):
        if entry.get("name") == name:
            return entry
    return None


def using_decoupled_model_transaction_policy(model_config):
    policy = model_config.get("model_transaction_policy") or {}
    return bool(policy.get("decoupled", False))


def load_model(model_name, config=None, files=None):
    """Loads or reloads ``model_name`` (explicit model control mode only)."""
    if isinstance(config, dict):
        config = json.dumps(config)
    _require_runtime("load_model").control("load", model=model_name, config=config,
                                           files={k: bytes(v).hex() for k, v in (files or {}).items()})


def unload_model(model_name, unload_dependents=False):
    _require_runtime("unload_model").control("unload", model=model_name, unload_dependents=bool(unload_dependents))


def is_model_ready(model_name, model_version=""):
    return bool(_require_runtime("is_model_ready").control("ready", model=model_name, version=str(model_version)))


class ModelConfig:
    """The configuration handed to ``auto_complete_config`` (models-and-scheduling.md §3.5)."""

    def __init__(self, model_config):
        self._config = json.loads(model_config) if isinstance(model_config, str) else model_config

    def as_dict(self):
        return json.loads(json.dumps(self._config))

    def _name(self):
        return self._config.get("name", "")

    def set_max_batch_size(self, max_batch_size):
        current = int(self._config.get("max_batch_size", 0) or 0)
        if current != 0 and current > max_batch_size:
            raise ValueError(
                "configuration specified max_batch_size %d for model '%s', but the model wants %d: "
                "set max_batch_size to at most %d" % (current, self._name(), max_batch_size, max_batch_size))
        self._config["max_batch_size"] = int(max_batch_size)

    def set_dynamic_batching(self):
        if self._config.get("sequence_batching") is not None:
            raise ValueError("model '%s': dynamic batching cannot be added, the configuration has sequence_batching" % self._name())
        if self._config.get("ensemble_scheduling") is not None:
            raise ValueError("model '%s': dynamic batching cannot be added, the configuration has ensemble_scheduling" % self._name())
        if self._config.get("dynamic_batching") is None:
            self._config["dynamic_batching"] = {}

    def _add_tensor(self, kind, tensor, allowed):
        if not isinstance(tensor, dict):
            raise ValueError("model '%s': add_%s expects a dict" % (self._name(), kind))
        for key in tensor:
            if key not in allowed:
                raise ValueError("model '%s': add_%s: key '%s' is not allowed (allowed: %s)"
                                 % (self._name(), kind, key, ", ".join(allowed)))
        for key in ("name", "data_type", "dims"):
            if key not in tensor:
                raise ValueError("model '%s': add_%s: '%s' is required" % (self._name(), kind, key))
        entries = self._config.setdefault(kind, [])
        dims = [int(d) for d in tensor["dims"]]
        for entry in entries:
            if entry.get("name") != tensor["name"]:
                continue
            what = "%s '%s' of model '%s'" % (kind, tensor["name"], self._name())
            dt = entry.get("data_type")
            if dt and dt != "TYPE_INVALID" and dt != tensor["data_type"]:
                raise ValueError("%s has data_type %s in the configuration, auto_complete_config says %s"
                                 % (what, dt, tensor["data_type"]))
            have = [int(d) for d in entry.get("dims", [])]
            if have and have != dims:
                raise ValueError("%s has dims %s in the configuration, auto_complete_config says %s" % (what, have, dims))
            if "optional" in tensor and "optional" in entry and bool(entry["optional"]) != bool(tensor["optional"]):
                raise ValueError("%s has optional %s in the configuration, auto_complete_config says %s"
                                 % (what, entry["optional"], tensor["optional"]))
            entry["data_type"] = tensor["data_type"]
            entry["dims"] = dims
            if "optional" in tensor:
                entry["optional"] = bool(tensor["optional"])
            return
        added = {"name": tensor["name"], "data_type": tensor["data_type"], "dims": dims}
        if "optional" in tensor:
            added["optional"] = bool(tensor["optional"])
        entries.append(added)

    def add_input(self, input):  # noqa: A002 (Triton's parameter name)
        self._add_tensor("input", input, ("name", "data_type", "dims", "optional"))

    def add_output(self, output):
        self._add_tensor("output", output, ("name", "data_type", "dims"))

    def set_model_transaction_policy(self, transaction_policy_dict):
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError("model '%s': set_model_transaction_policy: key '%s' is not allowed (allowed: decoupled)"
                                 % (self._name(), key))
        decoupled = bool(transaction_policy_dict.get("decoupled", False))
        current = self._config.get("model_transaction_policy")
        if current is not None and "decoupled" in current and bool(current["decoupled"]) != decoupled:
            raise ValueError("model '%s': the configuration sets decoupled to %s, auto_complete_config says %s"
                             % (self._name(), bool(current["decoupled"]), decoupled))
        self._config["model_transaction_policy"] = {"decoupled": decoupled}


class Logger:
    """Triton's ``pb_utils.Logger``: lines go to the server log, tagged with the model instance."""

    @staticmethod
    def log(message, level=None):
        _log(level or "INFO", message)

    @staticmethod
    def log_info(message):
        _log("INFO", message)

    @staticmethod
    def log_warn(message):
        _log("WARNING", message)

    @staticmethod
    def log_error(message):
        _log("ERROR", message)

    @staticmethod
    def log_verbose(message):
        _log("VERBOSE", message)


def _log(level, message):
    import sys  # noqa: PLC0415
    sys.stderr.write("%s: %s\n" % (level, message))
    sys.stderr.flush()
