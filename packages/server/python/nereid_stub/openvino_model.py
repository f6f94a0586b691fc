"""The built-in runner of ``backend: "openvino"``: a model read by OpenVINO (an IR ``model.xml`` with
its ``model.bin``, or a ``model.onnx``) and compiled for the CPU; the server hands ``infer`` whole
batches (stub.py ``execute_batch``) and splits the outputs back per request (docs/backends.md).

It follows Triton's OpenVINO backend (triton-inference-server/openvino_backend):
  tensors     — configured names are the model's port names; each configured data type becomes
                the element type of its port (OpenVINO's pre/post-processing converts when the
                model's own type differs); shapes are checked against the model, or set from the
                configuration with RESHAPE_IO_LAYERS=YES;
  batching    — with max_batch_size > 0 the first dimension of every input is the batch: dynamic,
                so one infer runs each batch the scheduler forms; with
                SKIP_OV_DYNAMIC_BATCHSIZE=YES it is fixed at max_batch_size as in Triton, and a
                smaller batch is refused unless ENABLE_BATCH_PADDING=YES pads it with zeros;
  parameters  — NUM_STREAMS, INFERENCE_NUM_THREADS, COMPILATION_NUM_THREADS, PERFORMANCE_HINT,
                HINT_BF16, CPU_EXTENSION_PATH, TARGET_DEVICE (CPU only) with Triton's accepted
                values; a bad value is a load error naming the parameter and what it accepts.
``auto_complete(config, path)`` fills inputs, outputs and max_batch_size from the model by Triton's
rules (a batch dimension only where the model's layouts say so).
"""
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

# Triton's default-max-batch-size when auto-complete finds a model that can batch.
DEFAULT_MAX_BATCH_SIZE = 4

# Config data types ⇄ OpenVINO element type names (Triton's openvino_utils: no FP64, BF16, STRING).
_CONFIG_TO_OV = {
    "TYPE_BOOL": "boolean",
    "TYPE_UINT8": "u8",
    "TYPE_UINT16": "u16",
    "TYPE_UINT32": "u32",
    "TYPE_UINT64": "u64",
    "TYPE_INT8": "i8",
    "TYPE_INT16": "i16",
    "TYPE_INT32": "i32",
    "TYPE_INT64": "i64",
    "TYPE_FP16": "f16",
    "TYPE_FP32": "f32",
}
_OV_TO_CONFIG = {v: k for k, v in _CONFIG_TO_OV.items()}
_SUPPORTED_TYPES = "TYPE_BOOL, TYPE_UINT8/16/32/64, TYPE_INT8/16/32/64, TYPE_FP16, TYPE_FP32"

_BOOL_PARAMETERS = ("SKIP_OV_DYNAMIC_BATCHSIZE", "ENABLE_BATCH_PADDING", "RESHAPE_IO_LAYERS")


class _Refused(Exception):
    """A model or configuration the runner cannot serve; the message says why and what to do."""


def _openvino():
    try:
        import openvino as ov  # noqa: PLC0415
    except ImportError as err:
        raise pb_utils.TritonModelException(
            "the openvino backend needs OpenVINO (PyPI openvino) in the Python interpreter %s: %s "
            "(install it with: node scripts/setup.mjs runtimes)" % (sys.executable, err)) from err
    return ov


def _reason(err):
    """OpenVINO's reason: its message without the "Exception from src/...:NN:" lines of its call stack."""
    text = str(err).strip()
    lines = [line.strip() for line in text.splitlines()
             if line.strip() and not line.startswith("Exception from ") and line.strip() != "Please, check your environment"]
    return " ".join(lines) if lines else (text.splitlines()[0] if text else type(err).__name__)


def _read_model(ov, core, name, path):
    """The ov.Model of ``path``; an IR whose weights file is missing is refused with the fix."""
    if path.endswith(".xml"):
        weights = path[:-len(".xml")] + ".bin"
        if not os.path.isfile(weights):
            raise _Refused(
                "model '%s': the OpenVINO IR '%s' has no weights file '%s' beside it; put the model.bin that "
                "was saved with the model.xml (openvino.save_model writes both) into the same directory"
                % (name, path, weights))
    try:
        return core.read_model(path)
    except Exception as err:  # noqa: BLE001 (OpenVINO raises RuntimeError and its own types)
        raise _Refused(
            "model '%s': OpenVINO %s cannot read '%s' (an IR model.xml with its model.bin, or a model.onnx): %s"
            % (name, ov.get_version().split("-")[0], path, _reason(err))) from err


def _port_names(port):
    try:
        return set(port.get_names())
    except Exception:  # noqa: BLE001
        return set()


def _any_name(port):
    try:
        return port.get_any_name()
    except Exception:  # noqa: BLE001 (a port without a name)
        return None


def _shape_text(pshape):
    return "[%s]" % ", ".join(str(d.get_length()) if d.is_static else "-1" for d in pshape)


def _dims_text(dims):
    return "[%s]" % ", ".join(str(d) for d in dims)


def _config_dims(io):
    reshape = io.get("reshape")
    if isinstance(reshape, dict) and reshape.get("shape") is not None:
        return [int(d) for d in reshape.get("shape") or []]
    return [int(d) for d in io.get("dims") or []]


def _dim_accepts(dim, value):
    if dim.is_static:
        return dim.get_length() == value
    lo, hi = dim.get_min_length(), dim.get_max_length()
    return value >= lo and (hi < 0 or value <= hi)


def _type_name(ov_type):
    return ov_type.get_type_name()


def _parse_parameters(name, config):
    """The model's parameters as Triton's OpenVINO backend reads them: (flags, compile properties,
    CPU extension path, what was set for the log)."""
    params = {}
    for key, value in (config.get("parameters") or {}).items():
        params[key] = (value or {}).get("string_value", "") if isinstance(value, dict) else str(value)

    def bad(key, value, accepted):
        return _Refused(
            "model '%s': parameter %s is '%s'; the openvino backend accepts %s (set it in the parameters of "
            "config.pbtxt, or remove it)" % (name, key, value, accepted))

    flags = {}
    for key in _BOOL_PARAMETERS:
        value = params.get(key, "").strip()
        if value.lower() in ("", "no"):
            flags[key] = False
        elif value.lower() == "yes":
            flags[key] = True
        else:
            raise bad(key, value, "YES or NO")
    properties = {}
    for key in ("INFERENCE_NUM_THREADS", "COMPILATION_NUM_THREADS"):
        value = params.get(key, "").strip()
        if value == "":
            continue
        if not value.isdigit():
            raise bad(key, value, "a non-negative number")
        properties[key] = int(value)
    value = params.get("NUM_STREAMS", "").strip()
    if value != "":
        if value.upper() in ("AUTO", "NUMA"):
            properties["NUM_STREAMS"] = value.upper()
        elif value.isdigit():
            properties["NUM_STREAMS"] = int(value)
        else:
            raise bad("NUM_STREAMS", value, "AUTO, NUMA or a number of streams")
    value = params.get("PERFORMANCE_HINT", "").strip()
    if value != "":
        if value.upper() not in ("LATENCY", "THROUGHPUT", "CUMULATIVE_THROUGHPUT"):
            raise bad("PERFORMANCE_HINT", value, "LATENCY, THROUGHPUT or CUMULATIVE_THROUGHPUT")
        properties["PERFORMANCE_HINT"] = value.upper()
    value = params.get("HINT_BF16", "").strip()
    if value != "":
        if value.upper() != "YES":
            raise bad("HINT_BF16", value, "YES (or no HINT_BF16 parameter)")
        properties["INFERENCE_PRECISION_HINT"] = "bf16"
    device = params.get("TARGET_DEVICE", "").strip().upper() or "CPU"
    if device != "CPU":
        raise _Refused(
            "model '%s': parameter TARGET_DEVICE is '%s'; this server runs OpenVINO models on the CPU only: "
            "set TARGET_DEVICE to CPU or remove it" % (name, params.get("TARGET_DEVICE")))
    extension = params.get("CPU_EXTENSION_PATH", "").strip()
    return flags, properties, extension


class OpenVinoModel:
    def __init__(self, path):
        self._path = path

    def initialize(self, args):
        ov = _openvino()
        config = json.loads(args["model_config"])
        self._name = config["name"]
        try:
            self._initialize(ov, config, args)
        except _Refused as err:
            raise pb_utils.TritonModelException(str(err)) from None

    def _initialize(self, ov, config, args):
        name = self._name
        kind = args.get("model_instance_kind") or "CPU"
        if kind != "CPU":
            raise _Refused(
                "model '%s': instance '%s' has kind KIND_%s, and the openvino backend runs on the CPU only "
                "(as Triton's, which takes KIND_CPU): set kind: KIND_CPU in its instance_group"
                % (name, args.get("model_instance_name", ""), kind))
        self._max_batch_size = int(config.get("max_batch_size", 0) or 0)
        flags, properties, extension = _parse_parameters(name, config)
        self._static_batch = self._max_batch_size > 0 and flags["SKIP_OV_DYNAMIC_BATCHSIZE"]
        self._pad = flags["ENABLE_BATCH_PADDING"]
        if "INFERENCE_NUM_THREADS" not in properties:
            # The server's default, as for ONNX Runtime: the cores but the event loop's, shared by the
            # instances; at least one per stream asked for (OpenVINO runs fewer streams than asked
            # when it has fewer threads).
            threads = int(args.get("nereid_default_intra_op_threads") or 1)
            streams = properties.get("NUM_STREAMS")
            properties["INFERENCE_NUM_THREADS"] = max(threads, streams) if isinstance(streams, int) else threads
        core = ov.Core()
        if extension:
            try:
                core.add_extension(extension)
            except Exception as err:  # noqa: BLE001
                raise _Refused("model '%s': parameter CPU_EXTENSION_PATH: OpenVINO cannot load '%s': %s"
                               % (name, extension, _reason(err))) from err
        if "COMPILATION_NUM_THREADS" in properties and "COMPILATION_NUM_THREADS" not in core.get_property("CPU", "SUPPORTED_PROPERTIES"):
            # Triton's backend passes it on; OpenVINO's CPU plugin stopped taking it (2026.4 refuses it).
            # A configuration written for Triton still loads, and the log says what was left out.
            del properties["COMPILATION_NUM_THREADS"]
            print("WARNING: model '%s': parameter COMPILATION_NUM_THREADS is ignored: the CPU plugin of OpenVINO %s "
                  "has no such property (remove the parameter)" % (name, ov.__version__.split("-")[0]), file=sys.stderr, flush=True)
        model = _read_model(ov, core, name, self._path)
        model = self._configure(ov, model, config, flags["RESHAPE_IO_LAYERS"])
        try:
            self._compiled = core.compile_model(model, "CPU", properties)
        except Exception as err:  # noqa: BLE001
            raise _Refused("model '%s': OpenVINO cannot compile '%s' for the CPU with %s: %s (change or remove the "
                           "parameter it names)" % (name, self._path, ", ".join("%s=%s" % kv for kv in properties.items()),
                                                    _reason(err))) from err
        self._request = self._compiled.create_infer_request()
        self._inputs = [(io["name"], np.dtype(self._ports_in[io["name"]].get_element_type().to_dtype()))
                        for io in config.get("input", [])]
        self._outputs = [io["name"] for io in config.get("output", [])]
        self._output_ports = {n: self._compiled.output(self._ports_out[n].get_any_name()) for n in self._outputs}
        self._input_ports = [(n, self._compiled.input(self._ports_in[n].get_any_name())) for n, _ in self._inputs]
        self._ov = ov
        shown = []
        for key in ("NUM_STREAMS", "INFERENCE_NUM_THREADS", "PERFORMANCE_HINT", "INFERENCE_PRECISION_HINT"):
            try:
                value = self._compiled.get_property(key)
            except Exception:  # noqa: BLE001
                continue
            shown.append("%s=%s" % (key, value.get_type_name() if hasattr(value, "get_type_name") else value))
            asked = properties.get(key)
            if key == "NUM_STREAMS" and isinstance(asked, int) and str(value) != str(asked):
                pb_utils.Logger.log_warn("model '%s': OpenVINO runs %s stream(s), not the %d of NUM_STREAMS, with "
                                         "INFERENCE_NUM_THREADS %s" % (name, value, asked, properties.get("INFERENCE_NUM_THREADS")))
        batch = ("batch dimension fixed at %d" % self._max_batch_size) if self._static_batch else (
            "dynamic batch dimension" if self._max_batch_size > 0 else "no batch dimension")
        pb_utils.Logger.log_info("model '%s': OpenVINO %s compiled '%s' for CPU (%s): %s"
                                 % (name, ov.get_version().split("-")[0], os.path.basename(self._path), batch, ", ".join(shown)))

    def _configure(self, ov, model, config, reshape_io):
        """Checks the configuration against the model, reshapes it (the batch dimension, and the
        configured dims with RESHAPE_IO_LAYERS) and sets the configured element types."""
        name = self._name
        mbs = self._max_batch_size
        inputs = config.get("input", [])
        outputs = config.get("output", [])
        model_inputs = list(model.inputs)
        if len(model_inputs) != len(inputs):
            raise _Refused(
                "model '%s': the configuration has %d input(s), the model has %d (%s): configure one input per "
                "model input, named as the model names it" % (name, len(inputs), len(model_inputs),
                                                                ", ".join(_any_name(p) or "?" for p in model_inputs)))

        def find(ports, io, kind):
            for port in ports:
                if io["name"] in _port_names(port):
                    return port
            raise _Refused(
                "model '%s': %s '%s' is not an %s of the model; its %ss are: %s (name the configuration's %ss as "
                "the model does)" % (name, kind, io["name"], kind, kind,
                                     ", ".join(_any_name(p) or "(unnamed)" for p in ports), kind))

        def element(io, kind):
            ov_name = _CONFIG_TO_OV.get(io.get("data_type"))
            if ov_name is None:
                raise _Refused(
                    "model '%s': %s '%s' has data type %s, which the openvino backend does not support; use one of %s"
                    % (name, kind, io["name"], io.get("data_type"), _SUPPORTED_TYPES))
            return getattr(ov.Type, ov_name)

        self._ports_in = {}
        new_shapes = {}
        for io in inputs:
            port = find(model_inputs, io, "input")
            self._ports_in[io["name"]] = port
            element(io, "input")
            dims = _config_dims(io)
            pshape = port.get_partial_shape()
            if pshape.rank.is_dynamic:
                if not reshape_io:
                    raise _Refused(
                        "model '%s': input '%s' has a dynamic rank in the model; set RESHAPE_IO_LAYERS to YES so "
                        "that the configured dims give its shape" % (name, io["name"]))
                full = ([-1] if mbs > 0 else []) + dims
                new_shapes[port] = ov.PartialShape([ov.Dimension() if d == -1 else ov.Dimension(d) for d in full])
                continue
            model_dims = list(pshape)
            expected = len(dims) + (1 if mbs > 0 else 0)
            if len(model_dims) != expected:
                if mbs > 0 and not model_dims:
                    fix = "set max_batch_size to 0 (a scalar has no batch dimension)"
                else:
                    fix = "configure dims %s" % _shape_text(model_dims[1:] if mbs > 0 else model_dims)
                raise _Refused(
                    "model '%s': input '%s' has shape %s in the model (%d dimensions), but the configuration gives "
                    "dims %s%s: %s"
                    % (name, io["name"], _shape_text(pshape), len(model_dims), _dims_text(dims),
                       " after the batch dimension (max_batch_size > 0)" if mbs > 0 else "", fix))
            rest = model_dims[1:] if mbs > 0 else model_dims
            if reshape_io:
                for d in dims:
                    if d < -1 or d == 0:
                        raise _Refused(
                            "model '%s': input '%s' has dims %s; with RESHAPE_IO_LAYERS the dims must be -1 or positive"
                            % (name, io["name"], _dims_text(dims)))
                rest = [ov.Dimension() if d == -1 else ov.Dimension(d) for d in dims]
            else:
                for d, value in zip(rest, dims):
                    if value != -1 and not _dim_accepts(d, value):
                        raise _Refused(
                            "model '%s': input '%s' has shape %s in the model, but the configuration gives dims %s: "
                            "configure the model's dims (-1 where it takes any size), or set RESHAPE_IO_LAYERS to YES "
                            "to reshape the model to the configured dims"
                            % (name, io["name"], _shape_text(pshape), _dims_text(dims)))
            if mbs > 0:
                batch = ov.Dimension(mbs) if self._static_batch else ov.Dimension()
                new_shapes[port] = ov.PartialShape([batch] + list(rest))
            elif reshape_io:
                new_shapes[port] = ov.PartialShape(rest)
        if new_shapes:
            try:
                model.reshape(new_shapes)
            except Exception as err:  # noqa: BLE001
                what = ", ".join("'%s' %s" % (_any_name(p), _shape_text(s)) for p, s in new_shapes.items())
                fix = ("set SKIP_OV_DYNAMIC_BATCHSIZE to YES to fix the batch dimension at max_batch_size, or "
                       "set max_batch_size to 0" if mbs > 0 and not self._static_batch else
                       "configure the dims the model takes")
                raise _Refused("model '%s': OpenVINO cannot reshape the model to %s: %s; %s"
                               % (name, what, _reason(err), fix)) from err
        # Outputs after the reshape: their shapes follow the inputs'.
        model_outputs = list(model.outputs)
        self._ports_out = {}
        for io in outputs:
            port = find(model_outputs, io, "output")
            if _any_name(port) is None:
                raise _Refused("model '%s': output '%s' has no name in the model" % (name, io["name"]))
            self._ports_out[io["name"]] = port
            element(io, "output")
            dims = _config_dims(io)
            pshape = port.get_partial_shape()
            if pshape.rank.is_dynamic:
                continue
            model_dims = list(pshape)
            rest = model_dims[1:] if mbs > 0 and model_dims else model_dims
            ok = len(model_dims) == len(dims) + (1 if mbs > 0 else 0)
            if ok:
                for d, value in zip(rest, dims):
                    ok = ok and (d.is_dynamic if value == -1 else _dim_accepts(d, value))
            if ok and mbs > 0 and model_dims[0].is_static and not (self._static_batch and model_dims[0].get_length() == mbs):
                raise _Refused(
                    "model '%s': output '%s' has shape %s in the model: its first dimension does not follow the batch, "
                    "so it cannot be split per request; set max_batch_size to 0" % (name, io["name"], _shape_text(pshape)))
            if not ok:
                raise _Refused(
                    "model '%s': output '%s' has shape %s in the model%s, but the configuration gives dims %s%s: "
                    "configure dims %s"
                    % (name, io["name"], _shape_text(pshape), " (after its inputs' shapes)" if new_shapes else "",
                       _dims_text(dims), " after the batch dimension (max_batch_size > 0)" if mbs > 0 else "",
                       _shape_text(rest)))
        # The configured data types become the ports' element types (Triton does the same: OpenVINO
        # converts between them and the model's own).
        ppp = ov.preprocess.PrePostProcessor(model)
        converted = []
        for io in inputs:
            port = self._ports_in[io["name"]]
            wanted = element(io, "input")
            if port.get_element_type() != wanted:
                converted.append("input '%s' %s→%s" % (io["name"], _type_name(wanted), _type_name(port.get_element_type())))
            ppp.input(port.get_any_name()).tensor().set_element_type(wanted)
        for io in outputs:
            port = self._ports_out[io["name"]]
            wanted = element(io, "output")
            if port.get_element_type() != wanted:
                converted.append("output '%s' %s→%s" % (io["name"], _type_name(port.get_element_type()), _type_name(wanted)))
            ppp.output(port.get_any_name()).tensor().set_element_type(wanted)
        try:
            model = ppp.build()
        except Exception as err:  # noqa: BLE001
            raise _Refused("model '%s': OpenVINO cannot give the model's inputs and outputs the configured data "
                           "types: %s; configure the model's own data types" % (name, _reason(err))) from err
        if converted:
            pb_utils.Logger.log_info("model '%s': OpenVINO converts the data types of %s" % (name, ", ".join(converted)))
        # The ports of the model built: by the names the configuration uses.
        self._ports_in = {io["name"]: find(list(model.inputs), io, "input") for io in inputs}
        self._ports_out = {io["name"]: find(list(model.outputs), io, "output") for io in outputs}
        return model

    def infer(self, inputs):
        """One batch as the server sends it (stub.py ``execute_batch``): input name → the batch's
        array (the requests' rows back to back); returns output name → array. The arrays are views
        of the infer request's buffers, valid until the next infer (the stub writes them out first)."""
        name = self._name
        wire = pb_utils.numpy_to_wire_datatype
        for input_name, dtype in self._inputs:
            array = inputs.get(input_name)
            if array is None:
                raise pb_utils.TritonModelException(
                    "model '%s': input '%s' is missing from the request; send every configured input" % (name, input_name))
            if array.dtype != dtype:
                raise pb_utils.TritonModelException(
                    "model '%s': input '%s' has data type %s in the request, but the model takes %s; send it as %s"
                    % (name, input_name, wire(array.dtype), wire(dtype), wire(dtype)))
        first = inputs[self._inputs[0][0]] if self._inputs else None
        total = int(first.shape[0]) if self._max_batch_size > 0 and first is not None and first.ndim > 0 else 1
        pad = 0
        if self._static_batch and total != self._max_batch_size:
            if not self._pad or total > self._max_batch_size:
                raise pb_utils.TritonModelException(
                    "model '%s': the batch dimension is fixed at max_batch_size %d (SKIP_OV_DYNAMIC_BATCHSIZE), and "
                    "this batch has %d; send batches of %d, or set ENABLE_BATCH_PADDING to YES to pad smaller ones "
                    "at a performance cost" % (name, self._max_batch_size, total, self._max_batch_size))
            pad = self._max_batch_size - total
        request = self._request
        ov = self._ov
        # The request reads the inputs in place: ``held`` keeps every array (padded copies too)
        # alive until the infer is done.
        held = []
        try:
            for input_name, port in self._input_ports:
                array = inputs[input_name]
                if pad:
                    array = np.concatenate([array, np.zeros((pad,) + array.shape[1:], dtype=array.dtype)], axis=0)
                array = np.ascontiguousarray(array)
                held.append(array)
                request.set_tensor(port, ov.Tensor(array, shared_memory=True))
            # A synchronous infer: start_async() and wait() hand the work to another thread and back,
            # about 120 µs more per call on a 2-core machine (an MLP's batch of one: 39 µs against 165).
            request.infer()
        except Exception as err:  # noqa: BLE001
            raise pb_utils.TritonModelException("model '%s': OpenVINO inference failed: %s" % (name, _reason(err))) from err
        outputs = {}
        for output_name in self._outputs:
            array = request.get_tensor(self._output_ports[output_name]).data
            outputs[output_name] = array[:total] if pad else array
        return outputs


def _has_batch(ov, port):
    try:
        return bool(ov.layout_helpers.has_batch(ov.layout_helpers.get_layout(port)))
    except Exception:  # noqa: BLE001
        return False


def auto_complete(config, path):
    """Triton's OpenVINO auto-complete: max_batch_size from the layouts (every input and output
    has a batch dimension 'N'), inputs and outputs from the model when none are configured."""
    ov = _openvino()
    name = config.get("name", "")
    try:
        model = _read_model(ov, ov.Core(), name, path)
    except _Refused as err:
        raise pb_utils.TritonModelException(str(err)) from None
    ports = {"input": list(model.inputs), "output": list(model.outputs)}
    batching = all(_has_batch(ov, p) for p in ports["input"] + ports["output"]) and bool(ports["input"])
    mbs = int(config.get("max_batch_size", 0) or 0)
    if batching:
        if mbs == 0:
            mbs = int(os.environ.get("NEREID_DEFAULT_MAX_BATCH_SIZE") or DEFAULT_MAX_BATCH_SIZE)
            config["max_batch_size"] = mbs
            pb_utils.Logger.log_warn(
                "model '%s': auto-complete set max_batch_size to %d, as the model's layouts have a batch dimension; "
                "set max_batch_size in config.pbtxt to choose it" % (name, mbs))
        if mbs > 1 and not config.get("dynamic_batching") and not config.get("sequence_batching"):
            config["dynamic_batching"] = {}
    elif mbs != 0:
        pb_utils.Logger.log_warn(
            "model '%s': the model's layouts have no batch dimension, and max_batch_size is %d" % (name, mbs))
    for kind in ("input", "output"):
        if config.get(kind):
            continue
        entries = []
        for port in ports[kind]:
            port_name = _any_name(port)
            if port_name is None:
                raise pb_utils.TritonModelException(
                    "model '%s': an %s of the model has no name, so auto-complete cannot configure it; save the model "
                    "with named %ss" % (name, kind, kind))
            data_type = _OV_TO_CONFIG.get(_type_name(port.get_element_type()))
            if data_type is None:
                raise pb_utils.TritonModelException(
                    "model '%s': %s '%s' has element type %s, which the openvino backend does not support (%s)"
                    % (name, kind, port_name, _type_name(port.get_element_type()), _SUPPORTED_TYPES))
            pshape = port.get_partial_shape()
            if pshape.rank.is_dynamic:
                raise pb_utils.TritonModelException(
                    "model '%s': %s '%s' has a dynamic rank, so auto-complete cannot give its dims; configure it in "
                    "config.pbtxt" % (name, kind, port_name))
            dims = [d.get_length() if d.is_static else -1 for d in pshape]
            if mbs > 0:
                dims = dims[1:]
            if not dims:
                raise pb_utils.TritonModelException(
                    "model '%s': %s '%s' is a scalar, which the openvino backend does not support (as Triton's); "
                    "give it a dimension of size 1" % (name, kind, port_name))
            entries.append({"name": port_name, "data_type": data_type, "dims": dims})
        config[kind] = entries
    return config
