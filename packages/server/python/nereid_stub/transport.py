"""The stub's side of the channel to the server (docs/backends.md, "How the stub talks to the
server").

Control messages are frames on one socket inherited as fd 3: a 4-byte little-endian length, then
UTF-8 JSON. Tensor bytes never cross the socket: each direction has a ring in a /dev/shm file
written by one side and read by the other. A message that carries tensors names the byte range
it used (``shm.end``: the ring position after it). The reader copies the bytes out when it
takes the message, or hands large tensors to the model as numpy views over the ring and gives
the range back once no view is left (``Hold``); given-back positions are published as the ring's
tail (the first 8 bytes of the file), which frees the space. Messages, and so ranges, are taken
in the order they were written, and the tail only moves past ranges that were all given back.
A message whose tensors do not fit in the ring's free space goes through a file of its own
(``shm.file``), which the reader deletes after reading.
"""

import collections
import json
import mmap
import os
import select
import socket
import struct
import threading
import time
import weakref

import numpy as np
import triton_python_backend_utils as _pb  # beside nereid_stub/ on the stub's path

HEADER = 64
_TAIL = struct.Struct("<Q")
_LEN = struct.Struct("<I")

def _frame_codec():
    """(encode, decode) of a frame's JSON body. The C encoder and scanner are made once: the
    standard library builds a new encoder per ``encode`` call and matches whitespace around each
    document, about a fifth of the cost of a small message. The frames are this module's own
    (no cycles to detect, no whitespace); without the C accelerator, the standard functions."""
    encoder = json.JSONEncoder(separators=(",", ":"))
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None or json.scanner.c_make_scanner is None:
        return (lambda message: encoder.encode(message).encode("utf-8")), json.loads
    c_encode = make(None, encoder.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
    scan = json.scanner.c_make_scanner(json.JSONDecoder())

    def encode_frame(message):
        return "".join(c_encode(message, 0)).encode("ascii")

    def decode_frame(body):
        try:
            return scan(body.decode("utf-8"), 0)[0]
        except StopIteration as err:
            raise ValueError("malformed frame at character %d" % err.value) from None

    return encode_frame, decode_frame


encode_frame, decode_frame = _frame_codec()


def _busy_poll_seconds():
    """How long an idle stub polls the channel before it sleeps (NEREID_STUB_BUSY_POLL_US, from the
    server's ``busy-poll-us`` setting); 0 on a single CPU, where polling only delays the server."""
    try:
        us = float(os.environ.get("NEREID_STUB_BUSY_POLL_US") or 0)
    except ValueError:
        us = 0.0
    if us <= 0 or len(os.sched_getaffinity(0)) < 2:
        return 0.0
    return us / 1e6


class Channel:
    """Frames over fd 3. ``send`` may be called from any thread; ``receive`` from one thread at a
    time (the stub's read lock).

    Busy polling: waking a sleeping process costs tens of microseconds on each side (more in a
    virtual machine, where it is an interrupt between CPUs), and a runtime that slept runs colder.
    When ``busy_poll`` is set, ``receive(poll=True)`` first polls the socket for up to that long,
    yielding the CPU to any other runnable thread between polls, and sleeps only if nothing came.
    It polls only while messages keep coming that soon: a wait that outlasted the window (an idle
    model, a slow client) makes the next one sleep at once, until a message again comes within the
    window of the wait's start."""

    #: Seconds this process's channels have spent polling, in all (what a model can read to see
    #: the cost of busy polling; the busy-polling tests do).
    polled_seconds = 0.0

    def __init__(self, fd=3):
        self._fd = fd
        self._buffer = bytearray()
        self.lock = threading.Lock()
        self.busy_poll = _busy_poll_seconds()
        self._poll_next = True
        self._sock = socket.socket(fileno=os.dup(fd)) if self.busy_poll else None

    def receive(self, timeout=None, poll=False):
        """The next message; None if ``timeout`` seconds pass first (None: wait). Raises EOFError
        at the end of the stream (the server closed it or died). ``poll``: busy-poll first (see
        the class), for a wait without a timeout."""
        poll = poll and timeout is None and self._sock is not None
        while True:
            buffer = self._buffer
            if len(buffer) >= 4:
                (length,) = _LEN.unpack_from(buffer, 0)
                if len(buffer) >= 4 + length:
                    body = bytes(buffer[4:4 + length])
                    del buffer[:4 + length]
                    return decode_frame(body)
            if timeout is not None and not select.select([self._fd], [], [], timeout)[0]:
                return None
            if poll:
                poll = False
                chunk = self._polled_read()
            else:
                chunk = os.read(self._fd, 1 << 16)
            if not chunk:
                raise EOFError
            buffer += chunk

    def _polled_read(self):
        """Bytes from the socket: polled for up to ``busy_poll`` when the last wait was that short,
        else (or when nothing came) a sleeping read."""
        start = time.perf_counter()
        deadline = start + self.busy_poll
        chunk = None
        if self._poll_next:
            recv, pause, now = self._sock.recv, os.sched_yield, time.perf_counter
            while True:
                try:
                    chunk = recv(1 << 16, socket.MSG_DONTWAIT)
                    break
                except BlockingIOError:
                    if now() >= deadline:
                        break
                    pause()
            Channel.polled_seconds += time.perf_counter() - start
        if chunk is None:
            chunk = os.read(self._fd, 1 << 16)
        self._poll_next = time.perf_counter() <= deadline
        return chunk

    def send_locked(self, message):
        """Sends one frame; the caller holds ``lock``."""
        body = encode_frame(message)
        data = memoryview(_LEN.pack(len(body)) + body)
        while data:
            n = os.write(self._fd, data)
            data = data[n:]

    def send(self, message):
        with self.lock:
            self.send_locked(message)


class Hold:
    """A ring range whose bytes numpy views still use. It is given back once every view is gone:
    the weak references to the arrays the views hang from call back when the last one dies,
    whether when ``execute`` returns or later, when a model lets go of inputs it kept."""

    __slots__ = ("end", "released", "refs")

    def __init__(self, end):
        self.end = end
        self.released = False
        self.refs = []


class RingReader:
    """The reading side of the server → stub ring. ``take`` is called by one thread at a time (the
    stub's read lock); ranges are given back from any thread, in any order, and the tail only
    moves past ranges that were all given back."""

    def __init__(self, path):
        fd = os.open(path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        # Ranges taken and not yet published, oldest first. Re-entrant: a weak reference's
        # callback (``release``) may run inside any allocation, the lock's holder's included.
        self._pending = collections.deque()
        self._lock = threading.RLock()

    def take(self, shm, tensors, view_min=None):
        """The message's tensors as numpy arrays, in order, and the ``Hold`` of its range (None
        when nothing holds it).

        Tensors of a fixed-size datatype and at least ``view_min`` bytes are views over the ring,
        valid as long as any array derived from them lives; the range is given back once they
        are all gone. Every other tensor is a copy, and a range no view uses is given back at
        once. A message that went through a file of its own is copied out of it."""
        if shm is not None and shm.get("file"):
            path = shm["file"]
            with open(path, "rb") as f:
                data = f.read()
            os.unlink(path)
            return [_decode(memoryview(data), t) for t in tensors], None
        mm = self._mm
        arrays = []
        hold = None
        for t in tensors:
            dtype = _WIRE_TO_NUMPY.get(t["d"]) if view_min is not None and t["n"] >= view_min else None
            if dtype is None:
                arrays.append(_decode(mm, t))
                continue
            # Derived views keep this array alive (numpy points them at it): it is the one
            # whose end frees the range.
            root = np.frombuffer(mm, dtype=dtype, count=t["n"] // dtype.itemsize, offset=t["o"])
            if hold is None:
                hold = Hold(None)
            hold.refs.append(weakref.ref(root, self._view_gone(hold)))
            arrays.append(root.reshape(t["s"]))
        if shm is None or "end" not in shm:
            return arrays, None
        with self._lock:
            if hold is None:
                if not self._pending:
                    _TAIL.pack_into(mm, 0, shm["end"])
                else:
                    done = Hold(shm["end"])
                    done.released = True
                    self._pending.append(done)
                return arrays, None
            hold.end = shm["end"]
            self._pending.append(hold)
        return arrays, hold

    def _view_gone(self, hold):
        def gone(_ref):
            if hold.end is not None and all(r() is None for r in hold.refs):
                self._release(hold)
        return gone

    def _release(self, hold):
        with self._lock:
            if hold.released:
                return
            hold.released = True
            hold.refs = []  # its weak references' callbacks refer to it: no cycle left behind
            end = None
            pending = self._pending
            while pending and pending[0].released:
                end = pending.popleft().end
            if end is not None:
                _TAIL.pack_into(self._mm, 0, end)


class RingWriter:
    """The writing side of the stub → server ring. Callers serialise through the channel lock."""

    def __init__(self, path, spill_base):
        fd = os.open(path, os.O_RDWR)
        try:
            self._mm = mmap.mmap(fd, 0)
        finally:
            os.close(fd)
        self._capacity = len(self._mm) - HEADER
        self._head = 0
        self._spill_base = spill_base
        self._spills = 0

    def put(self, arrays):
        """Writes encoded arrays (uint8, C-contiguous) contiguously; returns (shm, offsets)."""
        total = arrays[0].nbytes if len(arrays) == 1 else sum(a.nbytes for a in arrays)
        start = self._reserve(total)
        if start is None:
            self._spills += 1
            path = "%s.%d" % (self._spill_base, self._spills)
            offsets = []
            with open(path, "wb") as f:
                pos = 0
                for a in arrays:
                    offsets.append(pos)
                    f.write(memoryview(a))
                    pos += a.nbytes
            return {"file": path}, offsets
        pos = HEADER + (start % self._capacity if self._capacity else 0)
        offsets = []
        mm = self._mm
        for a in arrays:
            n = a.nbytes
            offsets.append(pos)
            if n:
                mm[pos:pos + n] = a
            pos += n
        return {"end": self._head}, offsets

    def _reserve(self, size):
        cap = self._capacity
        if size == 0:
            return self._head
        if size > cap:
            return None
        start = self._head
        pos = start % cap
        if pos + size > cap:
            start += cap - pos
        end = start + size
        (tail,) = _TAIL.unpack_from(self._mm, 0)
        if end - tail > cap:
            return None
        self._head = end
        return start


def _decode(buf, t):
    """A fresh numpy array from a tensor descriptor {d: datatype, s: shape, o: offset, n: size}."""
    datatype = t["d"]
    dtype = _WIRE_TO_NUMPY.get(datatype)
    if dtype is None:
        if datatype == "BYTES":
            offset = t["o"]
            return _pb.deserialize_bytes_tensor(bytes(buf[offset:offset + t["n"]])).reshape(t["s"])
        raise ValueError("datatype %s is not supported by the Python backend" % datatype)
    return np.frombuffer(buf, dtype=dtype, count=t["n"] // dtype.itemsize, offset=t["o"]).copy().reshape(t["s"])


def encode(array):
    """(wire datatype, shape, uint8 array) for a numpy array; raises ValueError if unsupported."""
    datatype = _NUMPY_TO_WIRE.get(array.dtype)
    if datatype is None:
        datatype = _pb.numpy_to_wire_datatype(array.dtype)
        if datatype is None:
            raise ValueError("numpy dtype %s has no Triton datatype" % array.dtype)
        if datatype == "BYTES":
            return datatype, [int(d) for d in array.shape], _pb.serialize_byte_tensor(array)
    if not array.flags.c_contiguous:
        array = np.ascontiguousarray(array)
    # A numpy shape holds Python ints; the bytes go out as a flat byte view (memoryview refuses
    # to cast an empty one).
    return datatype, list(array.shape), memoryview(array).cast("B") if array.size else _NO_BYTES


def _dtype_tables():
    """Wire datatype <-> numpy dtype for the fixed-size types (BYTES takes the slow path)."""
    wire_to_numpy = {name: d for name, d in _pb.WIRE_TO_NUMPY.items() if name != "BYTES"}
    return wire_to_numpy, {d: name for name, d in wire_to_numpy.items()}


_WIRE_TO_NUMPY, _NUMPY_TO_WIRE = _dtype_tables()
_NO_BYTES = np.zeros(0, dtype=np.uint8)
