"""The CUDA shared-memory helper (docs/resources.md, "CUDA shared memory").

One long-lived process per server, started at the first CUDA registration with the Python
backend's interpreter. It opens the clients' cudaIpcMemHandle_t handles through a CUDA runtime
(cupy, else torch; NEREID_CUDA_RUNTIME=cupy|torch picks one), copies byte ranges of the opened
regions device -> host for request inputs and host -> device for outputs, and closes the handles
when the server unregisters the regions. It speaks the stub's channel (transport.py): frames on
fd 3, bytes through the two shared-memory rings.

Messages (each carries ``call``; answers are ``{t: 'ok', call, value?, error?}``, except ``read``):
  probe                           -> {runtime, devices}; error: why no CUDA device is usable
  open {name, handle, device, size}
                                  -> {ok: true} | {ok: false, why, size: bool} (size: the
                                     allocation is smaller than ``size``)
  read {name, offset, size}       -> {t: 'data', call, outputs: [one UINT8 tensor]}
  write {name, offset} + 1 tensor -> ok
  close {name}                    -> ok
"""

import base64
import ctypes
import os
import sys

from nereid_stub.stub import _BOOT_ERROR, run

if _BOOT_ERROR is None:
    import numpy as np
    from nereid_stub.transport import Channel, RingReader, RingWriter


class _Failure(Exception):
    """An expected refusal, answered as ``{ok: false, why}``."""


class _Driver:
    """The CUDA driver API through ctypes, for what the runtimes do not expose."""

    def __init__(self):
        self._lib = ctypes.CDLL("libcuda.so.1")

    def allocation_size(self, ptr):
        base = ctypes.c_uint64()
        size = ctypes.c_size_t()
        result = self._lib.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr))
        if result != 0:
            raise _Failure("cuMemGetAddressRange failed with CUDA error %d" % result)
        return size.value - (ptr - base.value)


class _IpcHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * 64)]


class CupyRuntime:
    name = "cupy"

    def __init__(self):
        import cupy  # noqa: F401  (the import is the probe)
        from cupy.cuda import runtime
        self._rt = runtime
        self._driver = None
        self.devices = runtime.getDeviceCount()

    def open(self, handle, device):
        self._rt.setDevice(device)
        return self._rt.ipcOpenMemHandle(handle, 1)  # cudaIpcMemLazyEnablePeerAccess

    def allocation_size(self, ptr):
        import cupy
        driver = cupy.cuda.driver
        if hasattr(driver, "memGetAddressRange"):
            base, size = driver.memGetAddressRange(ptr)
            return size - (ptr - base)
        if self._driver is None:
            self._driver = _Driver()
        return self._driver.allocation_size(ptr)

    def close(self, ptr, device):
        self._rt.setDevice(device)
        self._rt.ipcCloseMemHandle(ptr)

    def to_host(self, host, ptr, size, device):
        self._rt.setDevice(device)
        self._rt.memcpy(host.ctypes.data, ptr, size, 2)  # cudaMemcpyDeviceToHost

    def to_device(self, ptr, host, size, device):
        self._rt.setDevice(device)
        self._rt.memcpy(ptr, host.ctypes.data, size, 1)  # cudaMemcpyHostToDevice


class TorchRuntime:
    """torch has no public cudaIpcOpenMemHandle: torch makes the device's primary context current
    and the driver API (which shares that context) opens, copies and closes."""

    name = "torch"

    def __init__(self):
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("torch %s sees no CUDA device" % torch.__version__)
        self._torch = torch
        self.devices = torch.cuda.device_count()
        self._driver = _Driver()
        lib = self._driver._lib
        self._open = lib.cuIpcOpenMemHandle_v2
        self._open.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcHandle, ctypes.c_uint]
        self._lib = lib

    def _use(self, device):
        self._torch.cuda.set_device(device)
        self._torch.cuda.synchronize(device)  # the primary context is current on this thread now

    def open(self, handle, device):
        self._use(device)
        ptr = ctypes.c_uint64()
        result = self._open(ctypes.byref(ptr), _IpcHandle(handle), 1)
        if result != 0:
            raise _Failure("cuIpcOpenMemHandle failed with CUDA error %d" % result)
        return ptr.value

    def allocation_size(self, ptr):
        return self._driver.allocation_size(ptr)

    def close(self, ptr, device):
        self._use(device)
        self._lib.cuIpcCloseMemHandle(ctypes.c_uint64(ptr))

    def to_host(self, host, ptr, size, device):
        self._use(device)
        result = self._lib.cuMemcpyDtoH_v2(ctypes.c_void_p(host.ctypes.data), ctypes.c_uint64(ptr), ctypes.c_size_t(size))
        if result != 0:
            raise RuntimeError("cuMemcpyDtoH failed with CUDA error %d" % result)

    def to_device(self, ptr, host, size, device):
        self._use(device)
        result = self._lib.cuMemcpyHtoD_v2(ctypes.c_uint64(ptr), ctypes.c_void_p(host.ctypes.data), ctypes.c_size_t(size))
        if result != 0:
            raise RuntimeError("cuMemcpyHtoD failed with CUDA error %d" % result)


def load_runtime():
    """(runtime, None) or (None, why no CUDA device is usable)."""
    wanted = os.environ.get("NEREID_CUDA_RUNTIME", "")
    kinds = [k for k in (CupyRuntime, TorchRuntime) if wanted in ("", k.name)]
    reasons = []
    for kind in kinds:
        try:
            runtime = kind()
        except Exception as err:  # ImportError, CUDA errors of a machine without a driver
            reasons.append("%s: %s" % (kind.name, str(err).strip() or type(err).__name__))
            continue
        if runtime.devices > 0:
            return runtime, None
        reasons.append("%s: no CUDA device" % kind.name)
    if not kinds:
        reasons.append("NEREID_CUDA_RUNTIME=%s names no runtime (cupy or torch)" % wanted)
    return None, "; ".join(reasons)


class Helper:
    def __init__(self, in_ring, out_ring, spill_base):
        self.channel = Channel()
        self.inbound = RingReader(in_ring)
        self.outbound = RingWriter(out_ring, spill_base)
        self.runtime, self.reason = load_runtime()
        self.regions = {}  # name -> (pointer, device, size)

    def answer(self, message, value=None, error=None):
        reply = {"t": "ok", "call": message["call"]}
        if error is not None:
            reply["error"] = error
        elif value is not None:
            reply["value"] = value
        self.channel.send(reply)

    def serve(self):
        while True:
            try:
                message = self.channel.receive()
            except EOFError:
                break
            try:
                self.handle(message)
            except Exception as err:
                self.answer(message, error="%s: %s" % (type(err).__name__, err))

    def handle(self, message):
        kind = message["t"]
        if kind == "probe":
            if self.runtime is None:
                self.answer(message, error=self.reason)
            else:
                self.answer(message, {"runtime": self.runtime.name, "devices": self.runtime.devices})
        elif kind == "open":
            self.answer(message, self.open(message))
        elif kind == "read":
            pointer, device, _ = self.regions[message["name"]]
            size = message["size"]
            host = np.empty(size, dtype=np.uint8)
            if size:
                self.runtime.to_host(host, pointer + message["offset"], size, device)
            reply = {"t": "data", "call": message["call"], "outputs": [{"d": "UINT8", "s": [size]}]}
            with self.channel.lock:
                shm, offsets = self.outbound.put([host])
                reply["shm"] = shm
                reply["outputs"][0]["o"] = offsets[0]
                reply["outputs"][0]["n"] = size
                self.channel.send_locked(reply)
        elif kind == "write":
            pointer, device, _ = self.regions[message["name"]]
            (data,), _ = self.inbound.take(message.get("shm"), message["inputs"])
            if data.nbytes:
                self.runtime.to_device(pointer + message["offset"], np.ascontiguousarray(data), data.nbytes, device)
            self.answer(message)
        elif kind == "close":
            region = self.regions.pop(message["name"], None)
            if region is not None:
                self.runtime.close(region[0], region[1])
            self.answer(message)
        else:
            self.answer(message, error="unknown message '%s'" % kind)

    def open(self, message):
        name, device, size = message["name"], message["device"], message["size"]
        if not 0 <= device < self.runtime.devices:
            return {"ok": False, "why": "device %d does not exist (%d CUDA devices)" % (device, self.runtime.devices), "size": False}
        try:
            pointer = self.runtime.open(base64.b64decode(message["handle"]), device)
        except Exception as err:
            return {"ok": False, "why": "failed to open CUDA IPC handle: %s" % err, "size": False}
        try:
            available = self.runtime.allocation_size(pointer)
        except Exception as err:
            available, why = -1, str(err)
        if available < size:
            self.runtime.close(pointer, device)
            detail = why if available < 0 else "the allocation holds %d bytes from the handle's address" % available
            return {"ok": False, "why": detail, "size": True}
        self.regions[name] = (pointer, device, size)
        return {"ok": True}


def main():
    return run(Helper)


if __name__ == "__main__":
    sys.exit(main())
