"""The Python stub: one long-lived process per model instance, started by the server
(packages/server/src/backends/python/). Usage (the server's, not a person's):

    python3 -m nereid_stub.stub <in-ring> <out-ring> <spill-base>

It reads control messages from fd 3 (see transport.py), loads the model (a ``model.py`` defining
``TritonPythonModel``, or the built-in TorchScript runner), and runs its executes on the main
thread one at a time. One thread reads the channel at a time: the main thread while it is idle,
otherwise any thread waiting for an answer (BLS, model control); coroutines (``async def execute``, ``async_exec``) share one event loop on a
thread of its own. The model's stdout and stderr are the process's own (fds 1 and 2), which the
server copies into its log; nothing else is written there.

The stub ends when the server closes fd 3, when the server process is gone (parent-death
signal, and a watchdog for systems without one), or after ``finalize``.
"""

import asyncio
import collections
import ctypes
import importlib.util
import inspect
import json
import os
import signal
import sys
import threading
import time
import traceback

_BOOT_ERROR = None
try:
    import numpy as np  # noqa: F401
except ImportError as err:  # reported to the server as a load error
    _BOOT_ERROR = "numpy cannot be imported by %s (%s); install numpy for that interpreter" % (sys.executable, err)

if _BOOT_ERROR is None:
    import triton_python_backend_utils as pb_utils  # noqa: E402
    from nereid_stub.transport import Channel, RingReader, RingWriter, encode  # noqa: E402


# Inputs this large reach a model as views over the shared-memory ring instead of copies (below
# it a copy costs less than the bookkeeping of a view).
VIEW_MIN_BYTES = 64 * 1024


def _die_with_parent():
    """Asks Linux to kill this process when the server dies (even by SIGKILL); a watchdog thread
    covers systems without PR_SET_PDEATHSIG."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(1)

    def watch():
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="nereid-parent-watch", daemon=True).start()


def _error_text(err):
    if isinstance(err, LoadError):
        return str(err)
    if _BOOT_ERROR is None and isinstance(err, (pb_utils.TritonModelException, pb_utils.TritonError)):
        return err.message()
    return "%s: %s" % (type(err).__name__, err)


_STUB_DIR = os.path.dirname(os.path.abspath(__file__))


def _model_frames(err):
    """Where ``err`` was raised in the model's own code, innermost first, as Triton's python
    backend shows it (``At:`` then ``file(line): function``); the stub's frames are left out."""
    frames = [f for f in traceback.extract_tb(err.__traceback__)
              if not os.path.abspath(f.filename).startswith(_STUB_DIR + os.sep)]
    if not frames:
        return ""
    return "\n\nAt:\n" + "\n".join("  %s(%s): %s" % (f.filename, f.lineno, f.name) for f in reversed(frames))


class LoadError(Exception):
    """A model file that cannot be used; the message says why, without a traceback of ours."""


def _load_module(path):
    directory = os.path.dirname(path)
    if directory not in sys.path:
        sys.path.insert(0, directory)
    spec = importlib.util.spec_from_file_location("model", path)
    if spec is None or spec.loader is None:
        raise RuntimeError("cannot import '%s'" % path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["model"] = module
    spec.loader.exec_module(module)
    return module


def _model_class(path):
    try:
        module = _load_module(path)
    except SyntaxError as err:
        raise LoadError("'%s' has a syntax error at line %s: %s" % (path, err.lineno, err.msg)) from err
    except Exception as err:
        raise LoadError("importing '%s' failed: %s%s" % (path, _error_text(err), _model_frames(err))) from err
    cls = getattr(module, "TritonPythonModel", None)
    if cls is None or not inspect.isclass(cls):
        raise LoadError("'%s' does not define class TritonPythonModel" % path)
    if not callable(getattr(cls, "execute", None)):
        raise LoadError("class TritonPythonModel in '%s' has no execute method" % path)
    return cls


class Stub:
    def __init__(self, in_ring, out_ring, spill_base):
        self.channel = Channel(3)
        self.inbound = RingReader(in_ring)
        self.outbound = RingWriter(out_ring, spill_base)
        self.model = None
        self.decoupled = False
        self._preemptible = False
        # Inputs of at least this many bytes reach execute as views over the ring (None: copies).
        # Set once the model is known not to be decoupled; cleared for good when the model keeps
        # inputs past execute (``_dispatch``).
        self._view_min = None
        self._last_hold = None
        self.output_names = []
        self._work = collections.deque()
        self._reading = threading.Lock()
        self._calls = {}
        self._next_call = 1
        self._calls_lock = threading.Lock()
        self._cancelled = set()
        # Requests the server preempted (a higher-priority request waits for this instance): key ->
        # the server's message. The server already sent their final (error) response. The most
        # recent ones only: a model that keeps sending long after is told "already final".
        self._preempted = collections.OrderedDict()
        # Keys (exec id, index) of requests that have not received their final response.
        self._open = set()
        self._loop = None
        self._loop_lock = threading.Lock()

    # ---- reading ---------------------------------------------------------------------------

    def _dispatch(self, message):
        """Handles one message from the server: decodes tensors at once (ring space frees in
        order), answers calls and cancellations, and queues the rest for the main thread."""
        kind = message.get("t")
        if kind == "exec":
            requests = message["requests"]
            last = self._last_hold
            if last is not None and not last.released and self._view_min is not None:
                # The previous execute has returned but its input views are still alive: the
                # model keeps its inputs. They stay valid (their range stays reserved until they
                # are gone), but views would keep reserving ring space, so copies from now on.
                self._view_min = None
                print("VERBOSE: the model keeps input tensors after execute returns; its inputs are copied "
                      "out of shared memory from now on", file=sys.stderr, flush=True)
            arrays, self._last_hold = self.inbound.take(
                message.get("shm"), [t for r in requests for t in r["inputs"]], self._view_min)
            start = 0
            for request in requests:
                count = len(request["inputs"])
                request["arrays"] = arrays[start:start + count]
                start += count
            self._work.append(message)
        elif kind == "bexec":
            # A built-in runner's batch: one tensor per input, the requests' rows back to back.
            message["arrays"], self._last_hold = self.inbound.take(message.get("shm"), message["inputs"], self._view_min)
            self._work.append(message)
        elif kind == "cancel":
            key = (message["x"], message["r"])
            preempted = message.get("preempted")
            if preempted is None:
                self._cancelled.add(key)
            else:
                self._open.discard(key)
                self._preempted[key] = preempted
                if len(self._preempted) > 1024:
                    self._preempted.popitem(last=False)
        elif kind == "reply":
            self._answer(message)
        else:
            self._work.append(message)

    def _read_one(self, timeout, poll=False):
        """Reads and dispatches one message; False if none came within ``timeout``. The caller
        holds ``_reading``. The stub ends when the server closes the channel. ``poll``: the idle
        main thread's wait, which may busy-poll (transport.Channel)."""
        try:
            message = self.channel.receive(timeout, poll)
        except (EOFError, OSError):
            os._exit(0)
        if message is None:
            return False
        try:
            self._dispatch(message)
        except Exception:  # a malformed message from the server is a bug; make it visible
            traceback.print_exc()
            os._exit(3)
        return True

    def _next_work(self):
        """The main thread's next message. While idle it reads the channel itself (no hand-over
        between threads on the way to ``execute``); threads waiting for answers read it while
        the main thread is busy (``_await``)."""
        while True:
            if self._work:
                return self._work.popleft()
            with self._reading:
                if not self._work:
                    self._read_one(None, True)

    def _await(self, done):
        """Waits for ``done``, reading the channel whenever no other thread is."""
        while not done.is_set():
            if self._reading.acquire(blocking=False):
                try:
                    if not done.is_set():
                        self._read_one(0.05)
                finally:
                    self._reading.release()
            else:
                done.wait(0.05)

    # ---- calls to the server (BLS, model control) --------------------------------------------

    def _answer(self, message):
        arrays = None
        if message.get("outputs"):
            arrays, _ = self.inbound.take(message.get("shm"), message["outputs"])
        with self._calls_lock:
            waiter = self._calls.pop(message["call"], None)
        if waiter is None:
            return
        waiter(message, arrays)

    def _call(self, message, arrays, on_answer):
        with self._calls_lock:
            call = self._next_call
            self._next_call += 1
            self._calls[call] = on_answer
        message["call"] = call
        self._send(message, arrays)

    def _start_call(self, message, arrays):
        """Sends a call; returns the event set once its answer arrived and the box holding it."""
        done = threading.Event()
        box = {}

        def on_answer(answer, outputs):
            box["answer"] = answer
            box["outputs"] = outputs
            done.set()

        self._call(message, list(arrays), on_answer)
        return done, box

    def _call_blocking(self, message, arrays=()):
        done, box = self._start_call(message, arrays)
        self._await(done)
        return box["answer"], box["outputs"]

    def _bls_message(self, request):
        arrays = []
        inputs = []
        for tensor in request.inputs():
            datatype, shape, data = encode(tensor.as_numpy())
            inputs.append({"name": tensor.name(), "d": datatype, "s": shape})
            arrays.append(data)
        version = request.model_version()
        return {
            "t": "bls",
            "model": request.model_name(),
            "version": "" if version in (None, -1, "-1", "") else str(version),
            "id": request.request_id() or "",
            "outputs": request.requested_output_names(),
            "parameters": request.parameters(),
            "timeout": request.timeout(),
            "inputs": inputs,
        }, arrays

    @staticmethod
    def _bls_response(answer, outputs):
        if answer.get("error"):
            err = answer["error"]
            return pb_utils.InferenceResponse(error=pb_utils.TritonError(err["message"], err.get("code", pb_utils.TritonError.INTERNAL)))
        tensors = [pb_utils.Tensor(t["name"], a) for t, a in zip(answer["outputs"], outputs or [])]
        return pb_utils.InferenceResponse(output_tensors=tensors, parameters=answer.get("parameters") or {})

    @staticmethod
    def _bls_responses(answer, outputs):
        """A decoupled call's responses: ``answer["responses"]`` gives, per response, how many of
        the output tensors are its own (``k``) and its parameters; a trailing error becomes an
        error response."""
        responses = []
        at = 0
        for entry in answer.get("responses") or []:
            k = entry["k"]
            descriptors = answer["outputs"][at:at + k]
            arrays = (outputs or [])[at:at + k]
            at += k
            tensors = [pb_utils.Tensor(t["name"], a) for t, a in zip(descriptors, arrays)]
            responses.append(pb_utils.InferenceResponse(output_tensors=tensors, parameters=entry.get("parameters") or {}))
        if answer.get("error"):
            err = answer["error"]
            responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(err["message"], err.get("code", pb_utils.TritonError.INTERNAL))))
        return responses

    def _bls_prepare(self, request, decoupled):
        try:
            message, arrays = self._bls_message(request)
        except Exception as err:
            return None, pb_utils.InferenceResponse(error=pb_utils.TritonError(_error_text(err), pb_utils.TritonError.INVALID_ARG))
        if decoupled:
            message["decoupled"] = True
        return (message, arrays), None

    def bls(self, request):
        prepared, failed = self._bls_prepare(request, False)
        if failed is not None:
            return failed
        answer, outputs = self._call_blocking(*prepared)
        return self._bls_response(answer, outputs)

    def bls_decoupled(self, request):
        prepared, failed = self._bls_prepare(request, True)
        if failed is not None:
            return [failed]
        answer, outputs = self._call_blocking(*prepared)
        return self._bls_responses(answer, outputs)

    async def _bls_call_async(self, prepared):
        done, box = self._start_call(*prepared)
        # Waiting happens on a pool thread, which reads the channel if no one else does.
        await asyncio.get_running_loop().run_in_executor(None, self._await, done)
        return box["answer"], box["outputs"]

    async def bls_async(self, request):
        prepared, failed = self._bls_prepare(request, False)
        if failed is not None:
            return failed
        answer, outputs = await self._bls_call_async(prepared)
        return self._bls_response(answer, outputs)

    async def bls_decoupled_async(self, request):
        prepared, failed = self._bls_prepare(request, True)
        if failed is not None:
            return [failed]
        answer, outputs = await self._bls_call_async(prepared)
        return self._bls_responses(answer, outputs)

    def control(self, op, **fields):
        answer, _ = self._call_blocking(dict({"t": "control", "op": op}, **fields))
        if answer.get("error"):
            raise pb_utils.TritonModelException(answer["error"]["message"])
        return answer.get("value")

    # ---- responses --------------------------------------------------------------------------

    def _poll(self):
        """Reads the messages already waiting, unless another thread is reading."""
        if self._reading.acquire(blocking=False):
            try:
                while self._read_one(0):
                    pass
            finally:
                self._reading.release()

    def is_cancelled(self, request):
        key = request._key
        if key not in self._cancelled and key not in self._preempted:
            self._poll()
        return key in self._cancelled or key in self._preempted

    def _response_entry(self, request, response, final, outputs, arrays):
        """The entry of one response, its output descriptors and arrays appended to ``outputs``
        and ``arrays``; marks the request final."""
        key = request._key
        preempted = self._preempted.get(key) if self._preempted else None
        if preempted is not None:
            self._open.discard(key)
            raise pb_utils.TritonModelException(
                "request '%s' was preempted and has ended; send nothing more for it (%s)" % (request.request_id(), preempted))
        if key not in self._open:
            raise pb_utils.TritonModelException(
                "request '%s' already received its final response; nothing more can be sent for it" % request.request_id())
        if response is not None and not isinstance(response, pb_utils.InferenceResponse):
            raise pb_utils.TritonModelException(
                "send() expects a pb_utils.InferenceResponse, got %s" % type(response).__name__)
        entry = {"r": key[1], "f": final}
        k = 0
        if response is not None:
            if response.has_error():
                err = response.error()
                entry["error"] = {"message": err.message(), "code": err.code()}
            else:
                wanted = request.requested_output_names()
                output_names = self.output_names
                mark = len(outputs)
                for tensor in response.output_tensors():
                    if not isinstance(tensor, pb_utils.Tensor):
                        entry["error"] = {"message": "response output is a %s, not a pb_utils.Tensor" % type(tensor).__name__,
                                          "code": pb_utils.TritonError.INTERNAL, "stub": True}
                        break
                    name = tensor.name()
                    if wanted and name not in wanted and name in output_names:
                        continue
                    try:
                        datatype, shape, data = encode(tensor.as_numpy())
                    except ValueError as err:
                        entry["error"] = {"message": "output '%s': %s" % (name, err), "code": pb_utils.TritonError.INTERNAL, "stub": True}
                        break
                    outputs.append({"name": name, "d": datatype, "s": shape})
                    arrays.append(data)
                if "error" in entry:
                    del outputs[mark:]
                    del arrays[mark:]
                else:
                    k = len(outputs) - mark
                    # The dict InferenceResponse keeps (checked when it was made); no JSON round trip.
                    params = getattr(response, "_parameters", None)
                    if not isinstance(params, dict):
                        params = json.loads(response.parameters())
                    if params:
                        entry["parameters"] = params
            entry["has_response"] = True
        entry["k"] = k
        if final:
            self._open.discard(key)
            if self._cancelled:
                self._cancelled.discard(key)
        return entry

    def send_response(self, request, response, final):
        if self._preemptible:
            # A preemption waiting in the channel must stop this send even when the model never
            # asks is_cancelled().
            self._poll()
        outputs, arrays = [], []
        entry = self._response_entry(request, response, bool(final), outputs, arrays)
        entry["t"] = "resp"
        entry["x"] = request._key[0]
        entry["outputs"] = outputs
        self._send(entry, arrays)

    def _send(self, message, arrays):
        with self.channel.lock:
            if arrays:
                shm, offsets = self.outbound.put(arrays)
                message["shm"] = shm
                descriptors = message.get("outputs") if message["t"] != "bls" else message["inputs"]
                for descriptor, offset, data in zip(descriptors, offsets, arrays):
                    descriptor["o"] = offset
                    descriptor["n"] = data.nbytes
            self.channel.send_locked(message)

    # ---- coroutines -------------------------------------------------------------------------

    def event_loop(self):
        with self._loop_lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                started = threading.Event()

                def run():
                    asyncio.set_event_loop(loop)
                    loop.call_soon(started.set)
                    loop.run_forever()

                threading.Thread(target=run, name="nereid-asyncio", daemon=True).start()
                started.wait()
                self._loop = loop
            return self._loop

    def run_coroutine(self, coroutine):
        """Runs a coroutine on the instance's event loop and waits for it, reading the channel
        meanwhile (the coroutine may wait for answers)."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.event_loop())
        done = threading.Event()
        future.add_done_callback(lambda _: done.set())
        self._await(done)
        return future.result()

    # ---- model lifecycle --------------------------------------------------------------------

    def initialize(self, message):
        args = message["args"]
        config = json.loads(args["model_config"])
        self.decoupled = pb_utils.using_decoupled_model_transaction_policy(config)
        # The model parameter ``preemption`` (docs/resources.md): with "running", the server may end
        # a request while execute sends for it, so every send first reads what the server sent.
        preemption = config.get("parameters", {}).get("preemption", {}).get("string_value", "")
        self._preemptible = self.decoupled and "running" in preemption
        # A decoupled model may use its inputs from other threads after execute returns: copies.
        self._view_min = None if self.decoupled else VIEW_MIN_BYTES
        self.output_names = [o["name"] for o in config.get("output", [])]
        runner = message["runner"]
        if runner == "pytorch":
            from nereid_stub.pytorch_model import TorchScriptModel  # noqa: PLC0415
            self.model = TorchScriptModel(message["path"])
        elif runner == "tensorflow":
            from nereid_stub.tensorflow_model import TensorFlowModel  # noqa: PLC0415
            self.model = TensorFlowModel(message["path"])
        elif runner == "openvino":
            from nereid_stub.openvino_model import OpenVinoModel  # noqa: PLC0415
            self.model = OpenVinoModel(message["path"])
        else:
            self.model = _model_class(message["path"])()
        init = getattr(self.model, "initialize", None)
        if callable(init):
            result = init(args)
            if inspect.iscoroutine(result):
                self.run_coroutine(result)

    def execute(self, message):
        x = message["x"]
        model_name = message.get("model")
        open_keys = self._open
        tensor = pb_utils.Tensor._received
        received = pb_utils.InferenceRequest._received
        requests = []
        for index, r in enumerate(message["requests"]):
            tensors = [tensor(t["name"], a) for t, a in zip(r["inputs"], r.pop("arrays"))]
            correlation_id = r.get("correlation_id", 0)
            if "correlation_id_int" in r:
                correlation_id = int(correlation_id)
            key = (x, index)
            requests.append(received(model_name, r["outputs"], tensors, r["id"], correlation_id, r.get("flags", 0),
                                     r.get("parameters") or "{}", key))
            open_keys.add(key)
        try:
            result = self.model.execute(requests)
            if inspect.iscoroutine(result):
                if self.decoupled:
                    self._run_detached(result, requests)
                    result = None
                else:
                    result = self.run_coroutine(result)
            done = {"t": "done", "x": x}
            arrays = []
            # Iterative sequences: requests released with RESCHEDULE run again (no final response now).
            rescheduled = None
            for i, request in enumerate(requests):
                if request._release_flags & pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE and request._key in open_keys:
                    open_keys.discard(request._key)
                    self._cancelled.discard(request._key)
                    if rescheduled is None:
                        rescheduled = []
                    rescheduled.append(i)
            if rescheduled:
                done["rs"] = rescheduled
            if not self.decoupled:
                done["responses"], done["outputs"], arrays = self._respond_all(requests, result)
            self._send(done, arrays)
        except Exception as err:
            traceback.print_exc()
            self.channel.send({"t": "done", "x": x, "error": _error_text(err)})
            for request in requests:
                open_keys.discard(request._key)
                self._cancelled.discard(request._key)
        finally:
            if not self.decoupled:
                cancelled = self._cancelled
                for request in requests:
                    open_keys.discard(request._key)
                    if cancelled:
                        cancelled.discard(request._key)

    def execute_batch(self, message):
        """A built-in runner's batch (``bexec``): ``infer`` maps input names to the batch's arrays
        and returns output names to arrays; the outputs the server asked for go back in ``done``
        as one tensor each, which the server splits among the requests."""
        x = message["x"]
        try:
            inputs = {t["name"]: a for t, a in zip(message["inputs"], message.pop("arrays"))}
            result = self.model.infer(inputs)
            outputs, arrays = [], []
            for name in message["outputs"]:
                array = result.get(name)
                if array is None:
                    raise pb_utils.TritonModelException(
                        "the model produced no output '%s' (it produced: %s)" % (name, ", ".join(sorted(result)) or "none"))
                datatype, shape, data = encode(array)
                outputs.append({"name": name, "d": datatype, "s": shape})
                arrays.append(data)
            self._send({"t": "done", "x": x, "outputs": outputs}, arrays)
        except Exception as err:
            self.channel.send({"t": "done", "x": x, "error": _error_text(err)})

    def _respond_all(self, requests, result):
        """Non-decoupled: one response per request, in order, unless it used its sender. Returns
        the responses as (entries, output descriptors, arrays) for the ``done`` message."""
        entries, outputs, arrays = [], [], []
        open_keys = self._open
        if result is None:
            if all(r._key not in open_keys for r in requests):
                return entries, outputs, arrays
            raise pb_utils.TritonModelException(
                "execute returned None; a model that is not decoupled must return a list of %d "
                "pb_utils.InferenceResponse (one per request)" % len(requests))
        if not isinstance(result, (list, tuple)):
            raise pb_utils.TritonModelException(
                "execute returned a %s; it must return a list of %d pb_utils.InferenceResponse (one per request)"
                % (type(result).__name__, len(requests)))
        if len(result) != len(requests):
            raise pb_utils.TritonModelException(
                "execute returned %d response(s) for %d request(s); return exactly one per request, in order"
                % (len(result), len(requests)))
        InferenceResponse = pb_utils.InferenceResponse
        for request, response in zip(requests, result):
            if request._key not in open_keys:
                # Answered through its sender, or rescheduled (its entry is None then).
                continue
            if response is None:
                raise pb_utils.TritonModelException(
                    "execute returned None for request '%s'; every request needs a pb_utils.InferenceResponse"
                    % request.request_id())
            if not isinstance(response, InferenceResponse):
                raise pb_utils.TritonModelException(
                    "execute returned a %s where a pb_utils.InferenceResponse belongs" % type(response).__name__)
        # Nothing is marked final before every response passed the checks above (an error fails
        # the whole execute).
        for request, response in zip(requests, result):
            if request._key in open_keys:
                entries.append(self._response_entry(request, response, True, outputs, arrays))
        return entries, outputs, arrays

    def _run_detached(self, coroutine, requests):
        """A decoupled ``async def execute``: runs on the event loop; if it raises, requests
        without a final response get the error."""
        future = asyncio.run_coroutine_threadsafe(coroutine, self.event_loop())

        def finished(f):
            err = f.exception()
            if err is None:
                return
            for request in requests:
                if request._key in self._open:
                    try:
                        self.send_response(request, pb_utils.InferenceResponse(error=pb_utils.TritonError(_error_text(err))), True)
                    except Exception:
                        traceback.print_exc()

        future.add_done_callback(finished)

    def is_ready(self):
        """The model's ``is_ready()`` (sync or async) as a bool."""
        result = self.model.is_ready()
        if inspect.iscoroutine(result):
            result = self.run_coroutine(result)
        return bool(result)

    def finalize(self):
        fin = getattr(self.model, "finalize", None)
        if callable(fin):
            result = fin()
            if inspect.iscoroutine(result):
                self.run_coroutine(result)

    def auto_complete(self, message):
        runner = message.get("runner", "python")
        if runner != "python":
            # A built-in runner completes the configuration from the model file's own signature.
            module = importlib.import_module("nereid_stub.%s_model" % runner)
            return module.auto_complete(message["config"], message["path"])
        cls = _model_class(message["path"])
        method = getattr(cls, "auto_complete_config", None)
        if not callable(method):
            return None
        result = method(pb_utils.ModelConfig(message["config"]))
        if not isinstance(result, pb_utils.ModelConfig):
            raise pb_utils.TritonModelException(
                "auto_complete_config returned a %s; it must return the pb_utils.ModelConfig it was given" % type(result).__name__)
        return result._config

    def serve(self):
        while True:
            message = self._next_work()
            kind = message["t"]
            if kind == "exec":
                self.execute(message)
                continue
            if kind == "bexec":
                self.execute_batch(message)
                continue
            try:
                if kind == "init":
                    self.initialize(message)
                    has_is_ready = callable(getattr(self.model, "is_ready", None))
                    # A built-in runner with ``infer`` takes whole batches (``bexec``, execute_batch).
                    batched = message["runner"] != "python" and callable(getattr(self.model, "infer", None))
                    self.channel.send({"t": "ok", "call": message["call"], "value": {"is_ready": has_is_ready, "batched": batched}})
                elif kind == "is_ready":
                    self.channel.send({"t": "ok", "call": message["call"], "value": self.is_ready()})
                elif kind == "auto_complete":
                    self.channel.send({"t": "ok", "call": message["call"], "value": self.auto_complete(message)})
                elif kind == "finalize":
                    self.finalize()
                    self.channel.send({"t": "ok", "call": message["call"]})
                    return
                else:
                    raise RuntimeError("unknown message '%s'" % kind)
            except BaseException as err:  # noqa: BLE001 (SystemExit from a model is an error too)
                detail = _error_text(err)
                if kind in ("init", "auto_complete") and not isinstance(err, LoadError):
                    detail += _model_frames(err)
                self.channel.send({"t": "ok", "call": message["call"], "error": detail})
                if kind == "finalize":
                    return


# glibc reserves 64 MiB of address space (counted in the data segment, mostly never touched) for
# the malloc arena of each thread that allocates; threads the model starts after the cap is set
# would otherwise eat the cap's headroom.
_ARENA_SLACK = 64 << 20


def _cap_data_segment():
    """The backstop of the model's memory limit (NEREID_MEMORY_LIMIT_BYTES, docs/resources.md):
    the data segment (private writable memory: the heap, anonymous mappings such as numpy's and
    torch's buffers, thread stacks) may grow by at most twice the limit from what it is now, so
    that a runaway allocation faster than the server's samples fails at once (numpy raises
    MemoryError) instead of taking the machine's memory. The server's samples stop the model once
    it is over its limit; twice leaves room for memory reserved but never touched, and
    ``_ARENA_SLACK`` for the malloc arena a thread started after this reserves."""
    limit = os.environ.get("NEREID_MEMORY_LIMIT_BYTES", "")
    if not limit:
        return
    try:
        import resource

        with open("/proc/self/status") as status:
            data = next((int(line.split()[1]) * 1024 for line in status if line.startswith("VmData:")), None)
        if data is not None:
            hard = resource.getrlimit(resource.RLIMIT_DATA)[1]
            soft = data + 2 * int(limit) + _ARENA_SLACK
            if hard != resource.RLIM_INFINITY:
                soft = min(soft, hard)
            resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    except (OSError, ValueError, ImportError):
        pass


def run(start):
    """A process on the server's channel (argv: the two rings and the spill-file base): dies with
    the server, reports a boot error (no numpy) or boots what ``start(in_ring, out_ring,
    spill_base)`` returns (with ``channel`` and ``serve``), serves until the server closes the
    channel, and exits."""
    _die_with_parent()
    in_ring, out_ring, spill_base = sys.argv[1:4]
    if _BOOT_ERROR is not None:
        body = json.dumps({"t": "boot", "error": _BOOT_ERROR}).encode("utf-8")
        os.write(3, len(body).to_bytes(4, "little") + body)
        return 1
    served = start(in_ring, out_ring, spill_base)
    served.channel.send({"t": "boot"})
    served.serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _start_stub(in_ring, out_ring, spill_base):
    stub = Stub(in_ring, out_ring, spill_base)
    pb_utils._runtime = stub
    _cap_data_segment()
    return stub


def main():
    return run(_start_stub)


if __name__ == "__main__":
    sys.exit(main())
