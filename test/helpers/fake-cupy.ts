/**
 * A stand-in for cupy, for the CUDA shared-memory tests on machines without a GPU: a tiny `cupy`
 * package, put on the CUDA helper's PYTHONPATH by a wrapper interpreter, whose "device memory" is
 * a host shared-memory object (/dev/shm/<name>) and whose 64-byte "IPC handle" is a magic prefix
 * and that object's name. It implements only what Nereid's helper calls (getDeviceCount,
 * setDevice, ipcOpenMemHandle, ipcCloseMemHandle, memcpy, driver.memGetAddressRange), checks
 * every copy against the opened allocations, and appends `open`/`close` lines to FAKE_CUDA_LOG.
 * It stands in for the GPU this machine lacks; scripts/gpu-check.sh runs the real path.
 */
import { randomUUID } from 'node:crypto';
import { chmod, mkdir, mkdtemp, writeFile } from 'node:fs/promises';
import { closeSync, ftruncateSync, openSync, readSync, unlinkSync, writeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PYTHON } from './python.js';

const MAGIC = 'NEREIDFAKECUDA\0\0';

const RUNTIME_PY = String.raw`
import ctypes
import mmap
import os

MAGIC = b"NEREIDFAKECUDA\0\0"
_current = 0
_opened = {}  # pointer -> (mmap, ctypes buffer, size, name)


class CUDARuntimeError(RuntimeError):
    pass


def _log(line):
    path = os.environ.get("FAKE_CUDA_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


def getDeviceCount():
    return int(os.environ.get("FAKE_CUDA_DEVICES", "1"))


def setDevice(device):
    global _current
    if not 0 <= device < getDeviceCount():
        raise CUDARuntimeError("cudaErrorInvalidDevice: invalid device ordinal")
    _current = device


def ipcOpenMemHandle(handle, flags=1):
    if len(handle) != 64 or handle[:16] != MAGIC:
        raise CUDARuntimeError("cudaErrorInvalidValue: invalid argument")
    name = handle[16:].rstrip(b"\0").decode()
    try:
        fd = os.open("/dev/shm/" + name, os.O_RDWR)
    except OSError:
        raise CUDARuntimeError("cudaErrorInvalidValue: invalid argument")
    try:
        mm = mmap.mmap(fd, 0)
    finally:
        os.close(fd)
    buf = (ctypes.c_char * len(mm)).from_buffer(mm)
    pointer = ctypes.addressof(buf)
    _opened[pointer] = (mm, buf, len(mm), name)
    _log("open %s device %d" % (name, _current))
    return pointer


def ipcCloseMemHandle(pointer):
    mm, buf, size, name = _opened.pop(pointer)
    del buf
    mm.close()
    _log("close %s" % name)


def _allocation(pointer, size):
    for base, (_, _, length, _) in _opened.items():
        if base <= pointer and pointer + size <= base + length:
            return base, length
    raise CUDARuntimeError("cudaErrorInvalidValue: %d bytes at %#x are not device memory" % (size, pointer))


def memcpy(dst, src, size, kind):
    if kind == 2:
        _allocation(src, size)
    elif kind == 1:
        _allocation(dst, size)
    else:
        raise CUDARuntimeError("unexpected memcpy kind %d" % kind)
    ctypes.memmove(dst, src, size)
`;

const DRIVER_PY = String.raw`
from .runtime import _allocation


def memGetAddressRange(pointer):
    return _allocation(pointer, 0)
`;

export interface FakeCupy {
  /** An interpreter (a wrapper of /usr/bin/python3) that imports the stand-in as cupy. */
  readonly python: string;
  /** Where the stand-in logs `open <name> device <d>` and `close <name>`. */
  readonly log: string;
}

/** Writes the stand-in package and its wrapper interpreter into a fresh directory. */
export async function installFakeCupy(devices = 1): Promise<FakeCupy> {
  const dir = await mkdtemp(join(tmpdir(), 'nereid-fake-cupy-'));
  await mkdir(join(dir, 'site', 'cupy', 'cuda'), { recursive: true });
  await writeFile(join(dir, 'site', 'cupy', '__init__.py'), '"""Stand-in for cupy (Nereid tests without a GPU)."""\nfrom . import cuda  # noqa: F401\n');
  await writeFile(join(dir, 'site', 'cupy', 'cuda', '__init__.py'), 'from . import driver, runtime  # noqa: F401\n');
  await writeFile(join(dir, 'site', 'cupy', 'cuda', 'runtime.py'), RUNTIME_PY);
  await writeFile(join(dir, 'site', 'cupy', 'cuda', 'driver.py'), DRIVER_PY);
  const log = join(dir, 'cuda.log');
  const python = join(dir, 'python3');
  await writeFile(
    python,
    `#!/bin/sh\nPYTHONPATH="${join(dir, 'site')}\${PYTHONPATH:+:$PYTHONPATH}" FAKE_CUDA_LOG="${log}" FAKE_CUDA_DEVICES=${devices} exec ${PYTHON} "$@"\n`,
  );
  await chmod(python, 0o755);
  return { python, log };
}

/** "Device memory" of the stand-in: a /dev/shm object and the IPC handle that names it. */
export class FakeDeviceBuffer {
  readonly name = `nereid_fake_cuda_${randomUUID().slice(0, 8)}`;
  readonly path = `/dev/shm/${this.name}`;
  readonly byteSize: number;
  readonly handle: Uint8Array;

  constructor(byteSize: number, fill = 0) {
    this.byteSize = byteSize;
    const fd = openSync(this.path, 'w+', 0o600);
    ftruncateSync(fd, byteSize);
    writeSync(fd, new Uint8Array(byteSize).fill(fill), 0, byteSize, 0);
    closeSync(fd);
    this.handle = new Uint8Array(64);
    this.handle.set(Buffer.from(MAGIC, 'latin1'));
    this.handle.set(Buffer.from(this.name), 16);
  }

  write(data: ArrayBufferView, offset = 0): void {
    const fd = openSync(this.path, 'r+');
    writeSync(fd, new Uint8Array(data.buffer, data.byteOffset, data.byteLength), 0, data.byteLength, offset);
    closeSync(fd);
  }

  read(byteSize: number, offset = 0): Uint8Array {
    const out = new Uint8Array(byteSize);
    const fd = openSync(this.path, 'r');
    readSync(fd, out, 0, byteSize, offset);
    closeSync(fd);
    return out;
  }

  destroy(): void {
    unlinkSync(this.path);
  }
}
