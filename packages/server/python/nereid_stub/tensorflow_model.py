"""The built-in runner of ``platform: "tensorflow_savedmodel"`` (a ``model.savedmodel/`` directory)
and ``platform: "tensorflow_graphdef"`` (a frozen ``model.graphdef``), run by TensorFlow in the
stub like Triton's TensorFlow backend runs them (docs/backends.md).

Tensor names follow Triton's TensorFlow backend:
  SavedModel — the configured names are the input and output keys of the signature
               ``serving_default``, or of the one the parameter ``TF_SIGNATURE_DEF`` names, in the
               MetaGraph tagged ``serve`` (parameter ``TF_GRAPH_TAG``);
  GraphDef   — the configured names are the graph's tensor names: ``NAME`` is ``NAME:0``; inputs are
               its Placeholder nodes, outputs any node.
The configuration is checked against the model at load (names, data types, dimensions: Triton's
rules). A batching model gets one call per batch (``infer``): the server sends the requests' inputs
concatenated along the first dimension and splits the outputs back by each request's batch size.

Parameters: ``TF_NUM_INTRA_THREADS`` (default: the server's share of the cores per instance,
``nereid_default_intra_op_threads``), ``TF_NUM_INTER_THREADS`` (default: none, the graph's operations
run one after another on the thread that calls it; see ``INLINE``), ``TF_GRAPH_TAG``, ``TF_SIGNATURE_DEF``,
``TF_INIT_OPS_FILE`` (GraphDef: operations run once after the graph is imported).

``auto_complete(config, path)`` fills a SavedModel's configuration from its signature as Triton's
backend does (``default-max-batch-size`` in ``NEREID_DEFAULT_MAX_BATCH_SIZE``); a GraphDef carries
no signature, so its configuration must list the inputs and outputs.
"""
import json
import os
import sys

import numpy as np
import triton_python_backend_utils as pb_utils

DEFAULT_SIGNATURE = "serving_default"
DEFAULT_TAG = "serve"

# TensorFlow dtype names -> Triton configuration data types.
_TF_TO_CONFIG = {
    "bool": "TYPE_BOOL",
    "uint8": "TYPE_UINT8",
    "uint16": "TYPE_UINT16",
    "uint32": "TYPE_UINT32",
    "uint64": "TYPE_UINT64",
    "int8": "TYPE_INT8",
    "int16": "TYPE_INT16",
    "int32": "TYPE_INT32",
    "int64": "TYPE_INT64",
    "float16": "TYPE_FP16",
    "float32": "TYPE_FP32",
    "float64": "TYPE_FP64",
    "string": "TYPE_STRING",
    "bfloat16": "TYPE_BF16",
}

_tf = None


def _verbose():
    return os.environ.get("NEREID_LOG_VERBOSE", "") not in ("", "0")


def _tensorflow():
    """TensorFlow, imported once. Unless the server logs verbosely, its start-up chatter (absl's
    banner and the oneDNN notice, printed before TF_CPP_MIN_LOG_LEVEL is read) is kept out of the
    server's log: stderr points at /dev/null while the library loads."""
    global _tf
    if _tf is not None:
        return _tf
    quiet = not _verbose()
    if quiet:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        sys.stderr.flush()
        saved = os.dup(2)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)
    try:
        import tensorflow as tf  # noqa: PLC0415
    except ImportError as err:
        raise pb_utils.TritonModelException(
            "the tensorflow backend needs TensorFlow for the Python interpreter %s: %s "
            "(node scripts/setup.mjs runtimes installs it into the runtimes environment)" % (sys.executable, err)) from err
    finally:
        if quiet:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(devnull)
    if quiet:
        tf.get_logger().setLevel("ERROR")
    _tf = tf
    return tf


def _fail(message):
    return pb_utils.TritonModelException(message)


def _first_line(err):
    """What an error says in one line. TensorFlow's op errors open with a header ("Graph execution
    error:", "Detected at node …") and put what went wrong after it: that line, with the node."""
    lines = [line.strip() for line in str(getattr(err, "message", None) or err).splitlines() if line.strip()]
    if not lines:
        return type(err).__name__
    if len(lines) > 1 and lines[0].endswith("error:"):
        node = next((line for line in lines if line.startswith("Node: ")), None)
        what = [line for line in lines[1:] if not line.startswith(("Detected at node", "Node: ", "[[", "File "))]
        if what:
            return what[0] + (" (%s)" % node[len("Node: "):] if node else "")
    return lines[0]


def _params(config):
    return {k: (v or {}).get("string_value", "") for k, v in (config.get("parameters") or {}).items()}


def _shape_text(shape):
    return "[" + ",".join(str(d) for d in shape) + "]" if shape is not None else "unknown"


def _config_dims(io):
    """The shape the model sees: the reshape's when there is one, else the dims."""
    reshape = io.get("reshape")
    if reshape is not None:
        return [int(d) for d in reshape.get("shape") or []]
    return [int(d) for d in io.get("dims") or []]


def _config_type(name):
    """A TensorFlow dtype (or its name) as a configuration data type."""
    return _TF_TO_CONFIG.get(name)


def _same_type(model_type, config_type):
    if config_type == "TYPE_BYTES":
        config_type = "TYPE_STRING"
    return model_type is not None and model_type == config_type


# ---- checking a configuration against the model (Triton's CompareDims) ------------------------

def _check_dims(model, kind, name, shape, dims, batching, exact, where):
    """``shape``: the model's (None when unknown: not checked); ``dims``: the configuration's."""
    if shape is None or len(shape) == 0:
        return
    if batching:
        if shape[0] != -1:
            raise _fail(
                "model '%s': %s '%s' has shape %s in %s, whose first dimension is not -1, so the model cannot "
                "batch; set max_batch_size: 0 in config.pbtxt (with dims %s), or export the model with a "
                "variable first dimension" % (model, kind, name, _shape_text(shape), where, _shape_text(shape)))
        full = [-1] + list(dims)
    else:
        full = list(dims)
    ok = len(shape) == len(full) and all(
        m == c for m, c in zip(shape, full) if exact or m != -1)
    if not ok:
        expected = list(shape[1:]) if batching else list(shape)
        why = (" (the first dimension, -1, is the batch dimension max_batch_size > 0 adds)" if batching else "")
        raise _fail(
            "model '%s': %s '%s' has shape %s in %s, but config.pbtxt gives dims %s%s, making %s; "
            "set dims: %s in config.pbtxt" % (
                model, kind, name, _shape_text(shape), where, _shape_text(dims), why, _shape_text(full),
                _shape_text(expected)))


# ---- SavedModel signatures --------------------------------------------------------------------

class _Tensor:
    __slots__ = ("key", "tensor", "dtype", "shape")

    def __init__(self, key, tensor, dtype, shape):
        self.key = key  # the signature key (the configuration's name)
        self.tensor = tensor  # the graph tensor it stands for
        self.dtype = dtype  # the configuration data type (None: one Triton has no type for)
        self.shape = shape  # list with -1 for unknown dimensions; None for an unknown rank


def _tensor_info(tf, key, info):
    dtype = tf.dtypes.as_dtype(info.dtype)
    shape = None
    if not info.tensor_shape.unknown_rank:
        shape = [int(d.size) if d.size >= 0 else -1 for d in info.tensor_shape.dim]
    return _Tensor(key, info.name, _config_type(dtype.name), shape)


def _read_saved_model(tf, path):
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415
    from google.protobuf import text_format  # noqa: PLC0415
    saved = saved_model_pb2.SavedModel()
    pb = os.path.join(path, "saved_model.pb")
    pbtxt = os.path.join(path, "saved_model.pbtxt")
    if os.path.isfile(pb):
        with open(pb, "rb") as f:
            saved.ParseFromString(f.read())
    elif os.path.isfile(pbtxt):
        with open(pbtxt, "r", encoding="utf-8") as f:
            text_format.Parse(f.read(), saved)
    else:
        raise FileNotFoundError("'%s' has no saved_model.pb" % path)
    return saved


def _signature(tf, model, path, params):
    """(tags, signature name, inputs, outputs) of the SavedModel's signature, as Triton chooses it."""
    try:
        saved = _read_saved_model(tf, path)
    except Exception as err:
        raise _fail(
            "model '%s': '%s' is not a SavedModel TensorFlow %s can read (save one with tf.saved_model.save): %s"
            % (model, path, tf.__version__, _first_line(err))) from err
    wanted_tag = params.get("TF_GRAPH_TAG") or ""
    graphs = list(saved.meta_graphs)
    chosen = [g for g in graphs if (wanted_tag or DEFAULT_TAG) in g.meta_info_def.tags]
    if not chosen and not wanted_tag and len(graphs) == 1:
        chosen = graphs
    if not chosen:
        tag_sets = ", ".join("[%s]" % ",".join(g.meta_info_def.tags) for g in graphs) or "none"
        raise _fail(
            "model '%s': the SavedModel '%s' has no MetaGraph tagged '%s' (its tag sets: %s); set the parameter "
            "TF_GRAPH_TAG to one of them" % (model, path, wanted_tag or DEFAULT_TAG, tag_sets))
    graph = chosen[0]
    name = params.get("TF_SIGNATURE_DEF") or DEFAULT_SIGNATURE
    signatures = graph.signature_def
    if name not in signatures:
        available = ", ".join(sorted(k for k in signatures if not k.startswith("__"))) or "none"
        fix = ("set the parameter TF_SIGNATURE_DEF to one of them" if not params.get("TF_SIGNATURE_DEF")
               else "correct the parameter TF_SIGNATURE_DEF")
        raise _fail(
            "model '%s': the SavedModel '%s' has no signature '%s' (its signatures: %s); %s"
            % (model, path, name, available, fix))
    sig = signatures[name]
    inputs = [_tensor_info(tf, k, sig.inputs[k]) for k in sorted(sig.inputs)]
    outputs = [_tensor_info(tf, k, sig.outputs[k]) for k in sorted(sig.outputs)]
    return list(graph.meta_info_def.tags), name, inputs, outputs


def _sequence_controls(config):
    return [c.get("name", "") for c in (config.get("sequence_batching") or {}).get("control_input") or [] if c.get("name")]


def _check_saved_model(config, name, signature, inputs, outputs):
    """Triton's checks of a configuration against a SavedModel signature, as load errors that
    say what the signature has and what to change."""
    batching = int(config.get("max_batch_size") or 0) > 0
    where = "signature '%s'" % signature
    by_key = {t.key: t for t in inputs}
    out_by_key = {t.key: t for t in outputs}
    fed = [i.get("name", "") for i in config.get("input") or []]
    controls = _sequence_controls(config)
    for key in fed + controls:
        if key not in by_key:
            raise _fail(
                "model '%s': input '%s' is not an input of %s (its inputs: %s); name the configuration's inputs "
                "by the signature's input keys" % (name, key, where, ", ".join(sorted(by_key)) or "none"))
    missing = [k for k in by_key if k not in fed and k not in controls]
    if missing:
        raise _fail(
            "model '%s': %s has %d input(s) and config.pbtxt lists %d: '%s' %s missing; add %s to the "
            "configuration's inputs (every input of the signature must be fed)" % (
                name, where, len(by_key), len(fed) + len(controls), "', '".join(missing),
                "is" if len(missing) == 1 else "are", "it" if len(missing) == 1 else "them"))
    for io in config.get("input") or []:
        t = by_key[io["name"]]
        _check_type(name, "input", io, t, where)
        if t.shape and not io.get("allow_ragged_batch"):
            _check_dims(name, "input", t.key, t.shape, _config_dims(io), batching, False, where)
    for io in config.get("output") or []:
        key = io.get("name", "")
        t = out_by_key.get(key)
        if t is None:
            raise _fail(
                "model '%s': output '%s' is not an output of %s (its outputs: %s); name the configuration's outputs "
                "by the signature's output keys" % (name, key, where, ", ".join(sorted(out_by_key)) or "none"))
        _check_type(name, "output", io, t, where)
        if t.shape:
            _check_dims(name, "output", key, t.shape, _config_dims(io), batching, True, where)


def _check_type(name, kind, io, t, where):
    configured = io.get("data_type", "")
    if t.dtype is None or t.dtype == "TYPE_BF16":
        raise _fail(
            "model '%s': %s '%s' of %s has a TensorFlow type this server cannot carry; export the model with "
            "another type" % (name, kind, t.key, where))
    if not _same_type(t.dtype, configured):
        raise _fail(
            "model '%s': %s '%s' is %s in %s, but config.pbtxt says %s; set data_type: %s" % (
                name, kind, t.key, t.dtype, where, configured, t.dtype))


# ---- GraphDef -----------------------------------------------------------------------------------

def _tensor_name(name):
    return name if ":" in name else name + ":0"


def _read_graphdef(tf, model, path):
    graph_def = tf.compat.v1.GraphDef()
    try:
        with open(path, "rb") as f:
            graph_def.ParseFromString(f.read())
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
    except Exception as err:
        raise _fail(
            "model '%s': '%s' is not a GraphDef TensorFlow %s can import (a frozen graph in binary protobuf form, "
            "as tf.io.write_graph(graph_def, dir, 'model.graphdef', as_text=False) writes it): %s"
            % (model, path, tf.__version__, _first_line(err))) from err
    return graph_def, graph


def _graph_shape(tensor):
    shape = tensor.shape
    if shape.rank is None:
        return None
    return [int(d) if d is not None else -1 for d in shape.as_list()]


def _check_graphdef(tf, config, name, graph):
    """The configured inputs must be Placeholders of the graph and the outputs tensors of it, with
    the configured data types (and dimensions where the graph knows them)."""
    if not config.get("input") or not config.get("output"):
        raise _fail(_graphdef_needs_config(name))
    batching = int(config.get("max_batch_size") or 0) > 0
    placeholders = sorted(op.name for op in graph.get_operations() if op.type in ("Placeholder", "PlaceholderWithDefault"))
    where = "the GraphDef"
    for io in config.get("input") or []:
        key = io.get("name", "")
        op_name = key.split(":")[0]
        if op_name not in placeholders:
            raise _fail(
                "model '%s': input '%s' is not a Placeholder of the GraphDef (its Placeholders: %s); name the "
                "configuration's inputs by the graph's placeholder names" % (name, key, ", ".join(placeholders) or "none"))
        tensor = graph.get_tensor_by_name(_tensor_name(key))
        t = _Tensor(key, tensor.name, _config_type(tensor.dtype.name), _graph_shape(tensor))
        _check_type(name, "input", io, t, where)
        if t.shape and not io.get("allow_ragged_batch"):
            _check_dims(name, "input", key, t.shape, _config_dims(io), batching, False, where)
    for io in config.get("output") or []:
        key = io.get("name", "")
        try:
            tensor = graph.get_tensor_by_name(_tensor_name(key))
        except (KeyError, ValueError) as err:
            raise _fail(
                "model '%s': output '%s' is not a tensor of the GraphDef (%s); name the configuration's outputs by "
                "the graph's node names (NAME means the tensor NAME:0)" % (name, key, _first_line(err))) from err
        t = _Tensor(key, tensor.name, _config_type(tensor.dtype.name), _graph_shape(tensor))
        _check_type(name, "output", io, t, where)


def _graphdef_needs_config(name):
    return ("model '%s': a tensorflow_graphdef model needs a config.pbtxt that lists its inputs and outputs (name, "
            "data_type, dims): a GraphDef does not carry enough metadata for the configuration to be completed "
            "from it, as in Triton" % name)


# ---- the runner -------------------------------------------------------------------------------

# TensorFlow's session runs a graph's operations on its inter-op thread pool, handing each step
# to a pool thread and waking the caller when it is done; an inter-op count below zero makes it run
# them on the calling thread instead (TensorFlow's "run in caller thread"). A stub instance runs one
# call at a time, so without TF_NUM_INTER_THREADS that is how it runs: for a small graph the
# hand-over to a pool thread that slept since the last request costs more than the graph (measured:
# an MLP 64-256-256-16 at batch 1, 0.5 ms between calls, 255-295 against 400-940 µs a call). The
# operations' own work still spreads over the intra-op threads. A graph with independent branches
# large enough to run side by side on several cores sets TF_NUM_INTER_THREADS.
INLINE = -1


def _session_config(tf, intra, inter):
    return tf.compat.v1.ConfigProto(intra_op_parallelism_threads=intra, inter_op_parallelism_threads=inter)


class TensorFlowModel:
    def __init__(self, path):
        self._path = path

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self._name = name = config["name"]
        self._graphdef = config.get("platform") == "tensorflow_graphdef"
        params = _params(config)
        threads = {}
        for key in ("TF_NUM_INTRA_THREADS", "TF_NUM_INTER_THREADS"):
            value = params.get(key, "")
            if value == "":
                continue
            try:
                threads[key] = int(value)
                if threads[key] < 0:
                    raise ValueError
            except ValueError:
                raise _fail("model '%s': parameter '%s' must be a non-negative integer, got '%s'" % (name, key, value)) from None
        default = int(args.get("nereid_default_intra_op_threads") or 1)
        intra = threads.get("TF_NUM_INTRA_THREADS") or default
        inter = threads.get("TF_NUM_INTER_THREADS") or INLINE
        tf = self._tf = _tensorflow()
        try:
            # The eager runtime of the fallback below (a SavedModel that no session loads) has no
            # caller-thread mode: there the inter-op pool has the server's share of the cores.
            tf.config.threading.set_intra_op_parallelism_threads(intra)
            tf.config.threading.set_inter_op_parallelism_threads(inter if inter > 0 else default)
        except RuntimeError:
            pass  # the runtime of this process is already initialised
        self._output_names = [o["name"] for o in config.get("output") or []]
        self._input_names = [i["name"] for i in config.get("input") or []] + _sequence_controls(config)
        self._call = None
        if self._graphdef:
            self._load_graphdef(tf, config, params, args, intra, inter)
        else:
            self._load_saved_model(tf, config, params, intra, inter)
        if self._call is not None:
            pb_utils.Logger.log_info(
                "model '%s': TensorFlow %s session: %d intra-op thread%s; %s" % (
                    name, tf.__version__, intra, "" if intra == 1 else "s",
                    "operations run on the calling thread" if inter == INLINE else "an inter-op pool of %d thread%s" % (
                        inter, "" if inter == 1 else "s")))

    def _load_saved_model(self, tf, config, params, intra, inter):
        name = self._name
        tags, signature, inputs, outputs = _signature(tf, name, self._path, params)
        _check_saved_model(config, name, signature, inputs, outputs)
        self._where = "signature '%s'" % signature
        self._specs = {t.key: t for t in inputs}
        # As Triton's TensorFlow backend (and TensorFlow Serving) run a SavedModel: its MetaGraph
        # loaded into a session, the signature's tensors fed and fetched by name. A session call
        # costs a fraction of an eager signature call's Python (measured: 288 against 436 µs for
        # a small MLP). A SavedModel that does not load that way runs through its signature
        # function instead.
        try:
            self._call = self._session_callable(tf, tags, inputs, outputs, intra, inter)
            return
        except Exception as err:  # noqa: BLE001 (any load failure falls back to the eager path)
            print("VERBOSE: model '%s': the SavedModel does not load into a TensorFlow session (%s); it runs through "
                  "its signature function" % (name, _first_line(err)), file=sys.stderr, flush=True)
        try:
            loaded = tf.saved_model.load(self._path, tags=tags)
            function = loaded.signatures[signature]
        except Exception as err:
            raise _fail(
                "model '%s': TensorFlow %s could not load the SavedModel '%s': %s"
                % (name, tf.__version__, self._path, _first_line(err))) from err
        self._loaded = loaded  # keeps the function's variables alive
        self._function = function

    def _session_callable(self, tf, tags, inputs, outputs, intra, inter):
        """A callable of the SavedModel's MetaGraph in a session of its own: the configured inputs
        in order in, the configured outputs in order out."""
        graph = tf.Graph()
        session = tf.compat.v1.Session(graph=graph, config=_session_config(tf, intra, inter))
        logger = tf.get_logger()
        level = logger.level
        logger.setLevel("ERROR")  # the v1 loader's deprecation notice
        try:
            with graph.as_default():
                tf.compat.v1.saved_model.loader.load(session, tags, self._path)
        finally:
            logger.setLevel(level)
        by_key = {t.key: t for t in list(inputs) + list(outputs)}
        feeds = [graph.get_tensor_by_name(by_key[k].tensor) for k in self._input_names]
        fetches = [graph.get_tensor_by_name(by_key[n].tensor) for n in self._output_names]
        self._session = session
        return session.make_callable(fetches, feed_list=feeds)

    def _load_graphdef(self, tf, config, params, args, intra, inter):
        name = self._name
        _, graph = _read_graphdef(tf, name, self._path)
        _check_graphdef(tf, config, name, graph)
        self._session = tf.compat.v1.Session(graph=graph, config=_session_config(tf, intra, inter))
        self._where = "the GraphDef"
        self._specs = {}
        for key in self._input_names:
            try:
                tensor = graph.get_tensor_by_name(_tensor_name(key))
            except (KeyError, ValueError) as err:
                raise _fail(
                    "model '%s': sequence control input '%s' is not a tensor of the GraphDef (%s); name it by a "
                    "Placeholder of the graph" % (name, key, _first_line(err))) from err
            self._specs[key] = _Tensor(key, tensor.name, _config_type(tensor.dtype.name), _graph_shape(tensor))
        init_file = params.get("TF_INIT_OPS_FILE", "")
        if init_file:
            self._run_init_ops(init_file, args)
        self._call = self._session.make_callable(
            [graph.get_tensor_by_name(_tensor_name(n)) for n in self._output_names],
            feed_list=[graph.get_tensor_by_name(_tensor_name(k)) for k in self._input_names])

    def _run_init_ops(self, init_file, args):
        """TF_INIT_OPS_FILE: {"init_ops": [...]}, in the version directory, else the model directory."""
        candidates = [os.path.join(os.path.dirname(self._path), init_file)]
        if args.get("model_repository"):
            candidates.append(os.path.join(args["model_repository"], init_file))
        found = next((c for c in candidates if os.path.isfile(c)), None)
        if found is None:
            raise _fail("model '%s': TF_INIT_OPS_FILE '%s' is in neither %s" % (self._name, init_file, " nor ".join(candidates)))
        try:
            with open(found, "r", encoding="utf-8") as f:
                ops = json.load(f)["init_ops"]
            self._session.run([self._session.graph.get_operation_by_name(op) for op in ops])
        except Exception as err:
            raise _fail("model '%s': running the init_ops of '%s' failed: %s" % (self._name, found, _first_line(err))) from err

    # ---- execution ------------------------------------------------------------------------

    def infer(self, inputs):
        """One TensorFlow call on a batch: ``inputs`` maps each input name to the batch's array (the
        requests' rows back to back; stub.py ``execute_batch``, the server splits the outputs back);
        returns each configured output's array."""
        feeds = {}
        for key in self._input_names:
            array = inputs.get(key)
            if array is None:
                raise _fail("model '%s': input '%s' is missing" % (self._name, key))
            spec = self._specs.get(key)
            if array.dtype.kind in "SU":
                array = array.astype(np.object_)
            want = pb_utils.triton_string_to_numpy(spec.dtype) if spec is not None and spec.dtype else None
            if want is not None and array.dtype != want:
                raise _fail(
                    "model '%s': input '%s' reached the model as %s, but %s takes %s" % (
                        self._name, key, pb_utils.numpy_to_wire_datatype(array.dtype) or array.dtype, self._where, spec.dtype))
            feeds[key] = array
        try:
            return self._run(feeds)
        except Exception as err:
            raise _fail("model '%s': TensorFlow failed to run %s: %s" % (self._name, self._where, _first_line(err))) from err

    def _run(self, feeds):
        if self._call is not None:
            return dict(zip(self._output_names, self._call(*[feeds[k] for k in self._input_names])))
        tf = self._tf
        result = self._function(**{k: tf.constant(v) for k, v in feeds.items()})
        return {n: result[n].numpy() for n in self._output_names}

    def finalize(self):
        session = getattr(self, "_session", None)
        if session is not None:
            session.close()


# ---- auto-complete (Triton's TensorFlow backend autofill) ------------------------------------

def _supports_batch(tensors):
    return all(t.shape is None or len(t.shape) == 0 or t.shape[0] == -1 for t in tensors)


def _batch_hint(config, name, inputs, outputs):
    """Whether the configuration's own tensors hint at batching (Triton's FixBatchingSupport):
    dims one shorter than the model's rank say yes, any other given dims say no."""
    configured = [(io, inputs) for io in config.get("input") or []] + [(io, outputs) for io in config.get("output") or []]
    if not configured:
        return True
    hint = False
    explicit = None
    for io, tensors in configured:
        if io.get("allow_ragged_batch"):
            return True
        t = next((t for t in tensors if t.key == io.get("name")), None)
        if t is None:
            continue
        dims = _config_dims(io)
        model_explicit = t.shape is not None and len(t.shape) > 0
        if model_explicit and not dims and explicit is None:
            hint = True
        elif model_explicit and dims:
            says = len(dims) == len(t.shape) - 1
            if explicit is not None and explicit != says:
                raise _fail(
                    "unable to autofill for '%s', model tensor configurations are contradicting each other in terms of "
                    "whether batching is supported; give every tensor's dims without the batch dimension (with "
                    "max_batch_size > 0) or with it (max_batch_size: 0)" % name)
            explicit = says
            hint = says
    return hint


def _fill(io, t, name, batching):
    """Fills what a configured (or new) tensor leaves out: name, data_type, dims (Triton's FillMissingValues)."""
    io.setdefault("name", t.key)
    if not io.get("name"):
        io["name"] = t.key
    if io.get("data_type") in (None, "", "TYPE_INVALID"):
        if t.dtype is None or t.dtype == "TYPE_BF16":
            raise _fail("model '%s': tensor '%s' has a TensorFlow type this server cannot carry" % (name, t.key))
        io["data_type"] = t.dtype
    if not io.get("dims"):
        if t.shape is None or len(t.shape) == 0:
            raise _fail(
                "Unable to autofill for '%s': the rank of model tensor '%s' is 0 and dimensions are not defined; "
                "give its dims in config.pbtxt" % (name, t.key))
        dims = list(t.shape[1:] if batching else t.shape)
        if not dims:
            dims = [1]
            io["reshape"] = {"shape": []}
        io["dims"] = dims
    return io


def auto_complete(config, path):
    """The configuration completed from the SavedModel's signature (None: nothing to add)."""
    name = config.get("name", "")
    if config.get("platform") == "tensorflow_graphdef":
        if not config.get("input") or not config.get("output"):
            raise _fail(_graphdef_needs_config(name))
        return None
    tf = _tensorflow()
    _, _, inputs, outputs = _signature(tf, name, path, _params(config))
    max_batch_size = int(config.get("max_batch_size") or 0)
    supports = _supports_batch(inputs + outputs)
    if not supports and max_batch_size > 0:
        raise _fail(
            "unable to autofill for '%s', configuration specified max-batch %d but model signature does not support "
            "batching (the first dimension of every input and output must be -1); set max_batch_size: 0"
            % (name, max_batch_size))
    default = int(os.environ.get("NEREID_DEFAULT_MAX_BATCH_SIZE") or 4)
    batching_model = supports and _batch_hint(config, name, inputs, outputs) and default > 0
    if max_batch_size == 0:
        max_batch_size = default if batching_model else 0
        config["max_batch_size"] = max_batch_size
        if batching_model:
            print("WARNING: autofilled max_batch_size to %d for model '%s' since batching is supported but no "
                  "max_batch_size is specified in model configuration. Must specify max_batch_size to utilize "
                  "autofill with a larger max batch size" % (max_batch_size, name), file=sys.stderr, flush=True)
    strip = batching_model and max_batch_size > 0
    # Inputs: fill the configured ones, add the signature's others.
    config_inputs = config.setdefault("input", [])
    taken = set(_sequence_controls(config))
    for target in config.get("batch_input") or []:
        taken.update(target.get("target_name") or [])
    for io in config_inputs:
        t = next((t for t in inputs if t.key == io.get("name")), None)
        if t is not None:
            _fill(io, t, name, strip)
            taken.add(t.key)
    for t in inputs:
        if t.key not in taken and t.key not in [io.get("name") for io in config_inputs]:
            config_inputs.append(_fill({}, t, name, strip))
    # Outputs: all of the signature's when none is configured, else only the configured ones.
    config_outputs = config.get("output") or []
    if not config_outputs:
        config["output"] = [_fill({}, t, name, strip) for t in outputs]
    else:
        for io in config_outputs:
            t = next((t for t in outputs if t.key == io.get("name")), None)
            if t is not None:
                _fill(io, t, name, strip)
    if max_batch_size > 1 and not config.get("sequence_batching") and not config.get("dynamic_batching"):
        config["dynamic_batching"] = {}
    return config
