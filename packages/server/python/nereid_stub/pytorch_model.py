"""The built-in runner of ``backend: "pytorch"`` / ``platform: "pytorch_libtorch"``: a TorchScript
``model.pt`` loaded with ``torch.jit.load`` (docs/backends.md).

Tensor names follow Triton's PyTorch backend:
  inputs  — if every configured input name is an argument name of ``forward``, by name; else if
            every name has the form ``<name>__<index>``, ``index`` is the argument position; else
            the configuration order is the argument order;
  outputs — if every configured output name has the form ``<name>__<index>``, ``index`` picks the
            element of the returned tuple; else the configuration order is the tuple order.
A batching model gets one forward call per batch: the server sends the requests' inputs
concatenated along the first dimension and splits the outputs back by each request's batch size
(``infer``; stub.py ``execute_batch``).
On a KIND_GPU instance the module and the inputs move to the instance's CUDA device (the server
says which in ``nereid_cuda_device``: 0 when the stub sees only its own device) and the outputs
come back to the CPU.
"""
import ctypes
import os
import sys

import json
import re

import numpy as np
import triton_python_backend_utils as pb_utils

_INDEXED = re.compile(r"^(.*)__(\d+)$")


# What sets an OpenBLAS build's thread count, by build: the plain library, the 64-bit-integer one
# (numpy's wheels), and SciPy's renamed copy.
_OPENBLAS_SETTERS = ("openblas_set_num_threads", "openblas_set_num_threads64_", "scipy_openblas_set_num_threads64_")


def cap_openblas_threads(threads):
    """Caps every OpenBLAS loaded in this process at ``threads`` threads; returns the libraries
    capped. A torch built without MKL (Debian's) multiplies matrices with OpenBLAS, whose pthreads
    build keeps a pool of its own, one thread per core, that ``torch.set_num_threads`` does not
    reach: the instance would compute on every core (its idle threads spinning), taking the CPU
    the server's event loop and the other instances were left. ``OPENBLAS_NUM_THREADS`` in the
    server's environment is the user's own choice and is kept."""
    if os.environ.get("OPENBLAS_NUM_THREADS"):
        return []
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({fields[5].strip() for fields in (line.split(None, 5) for line in maps)
                            if len(fields) == 6 and "openblas" in os.path.basename(fields[5]).lower()})
    except OSError:
        return []
    capped = []
    for path in paths:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in _OPENBLAS_SETTERS:
            setter = getattr(library, symbol, None)
            if setter is not None:
                setter(ctypes.c_int(threads))
                capped.append(path)
                break
    return capped


def _indices(names):
    found = [_INDEXED.match(n) for n in names]
    if names and all(found):
        return [int(m.group(2)) for m in found]
    return None


class TorchScriptModel:
    def __init__(self, path):
        self._path = path

    def initialize(self, args):
        try:
            import torch  # noqa: PLC0415
        except ImportError as err:
            raise pb_utils.TritonModelException(
                "the pytorch backend needs torch for this interpreter: %s (install python3-torch or pip install torch)" % err) from err
        self._torch = torch
        config = json.loads(args["model_config"])
        self._name = config["name"]
        params = {k: v.get("string_value", "") for k, v in (config.get("parameters") or {}).items()}
        # Without INTRA_OP_THREAD_COUNT, the server's default (as for ONNX Runtime: the cores but one,
        # the event loop's, divided among the instances).
        intra = int(params.get("INTRA_OP_THREAD_COUNT") or 0) or int(args.get("nereid_default_intra_op_threads") or 1)
        torch.set_num_threads(intra)
        blas = cap_openblas_threads(intra)
        inter = int(params.get("INTER_OP_THREAD_COUNT") or 0)
        if inter > 0:
            try:
                torch.set_num_interop_threads(inter)
            except RuntimeError:
                pass  # already set in this process
        self._inference_mode = params.get("INFERENCE_MODE", "true").lower() not in ("false", "0", "off", "no")
        self._device = None
        if args.get("model_instance_kind") == "GPU":
            if not torch.cuda.is_available():
                raise pb_utils.TritonModelException(
                    "model '%s': instance '%s' has kind KIND_GPU, but torch %s of the Python interpreter %s has no CUDA "
                    "(torch.cuda.is_available() is false): install a CUDA build of torch for that interpreter "
                    "(or name another with --backend-config=pytorch,python-executable=...), or use KIND_CPU"
                    % (self._name, args.get("model_instance_name", ""), torch.__version__, sys.executable))
            self._device = torch.device("cuda", int(args.get("nereid_cuda_device") or 0))
        try:
            self._module = torch.jit.load(self._path, map_location="cpu")
        except Exception as err:
            raise pb_utils.TritonModelException(
                "model '%s': '%s' is not a TorchScript model that torch %s can load (save it with torch.jit.save): %s"
                % (self._name, self._path, torch.__version__, str(err).splitlines()[0] if str(err) else type(err).__name__)) from err
        if self._device is not None:
            self._module.to(self._device)
        self._module.eval()
        self._input_names = [i["name"] for i in config.get("input", [])]
        self._output_names = [o["name"] for o in config.get("output", [])]
        self._input_dtypes = {i["name"]: pb_utils.triton_string_to_numpy(i["data_type"]) for i in config.get("input", [])}
        self._output_dtypes = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in config.get("output", [])}
        for name, dtype in list(self._input_dtypes.items()) + list(self._output_dtypes.items()):
            if dtype is None or dtype == np.object_:
                raise pb_utils.TritonModelException(
                    "model '%s': tensor '%s' has a data type the pytorch backend does not support here (%s)"
                    % (self._name, name, dtype))
        self._input_order = self._map_inputs()
        self._output_order = _indices(self._output_names) or list(range(len(self._output_names)))
        pb_utils.Logger.log_info("model '%s': torch %s: %d intra-op thread%s%s" % (
            self._name, torch.__version__, intra, "" if intra == 1 else "s",
            "; OpenBLAS capped at the same (%s)" % ", ".join(os.path.basename(p) for p in blas) if blas else ""))

    def _map_inputs(self):
        """Position of each configured input among forward()'s arguments."""
        arguments = []
        try:
            schema = self._module.forward.schema
            arguments = [a.name for a in schema.arguments][1:]  # drop self
        except AttributeError:
            pass
        names = self._input_names
        if arguments and all(n in arguments for n in names):
            return [arguments.index(n) for n in names]
        indices = _indices(names)
        if indices is not None:
            return indices
        return list(range(len(names)))

    def infer(self, inputs):
        """One forward call on the batch: ``inputs`` maps each configured input name to the batch's
        array (the requests' rows back to back, stub.py ``execute_batch``); returns each configured
        output's array."""
        torch = self._torch
        args = [None] * (max(self._input_order) + 1 if self._input_order else 0)
        for name, position in zip(self._input_names, self._input_order):
            array = inputs.get(name)
            if array is None:
                raise pb_utils.TritonModelException("model '%s': input '%s' is missing" % (self._name, name))
            args[position] = torch.from_numpy(np.ascontiguousarray(array))
            if self._device is not None:
                args[position] = args[position].to(self._device, non_blocking=True)
        if any(a is None for a in args):
            raise pb_utils.TritonModelException(
                "model '%s': the configured inputs do not cover forward()'s arguments %s" % (self._name, self._input_order))
        guard = torch.inference_mode() if self._inference_mode else torch.no_grad()
        with guard:
            result = self._module(*args)
        if isinstance(result, torch.Tensor):
            result = (result,)
        elif isinstance(result, dict):
            result = tuple(result[n] for n in self._output_names)
        results = list(result)
        outputs = {}
        for name, index in zip(self._output_names, self._output_order):
            if index >= len(results):
                raise pb_utils.TritonModelException(
                    "model '%s': output '%s' refers to element %d, but forward() returned %d tensor(s)"
                    % (self._name, name, index, len(results)))
            outputs[name] = results[index].detach().cpu().numpy()
        return outputs
