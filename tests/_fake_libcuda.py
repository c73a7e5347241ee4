"""The CUDA driver, the one thing these machines lack: a stand-in ``libcuda.so`` built from
``tests/devices/fake_libcuda.c`` and loaded by hotspan's CUDA plug-in through
``HOTSPAN_LIBCUDA``; the test drives the same library (one dlopen'ed path) through ctypes.

Its model: devices 0 and 1 with clocks in ns that only the test moves (``advance``), started
far from the host's; work queued on a stream (``launch``) runs in order; an event completes
when its device's clock passes the point where its stream reached it; ``pending(True)``
holds every event back, ``fail_next(call, code)`` makes the next such call return an error.
Everything else (spans, the C plug-in, drain, exports, stats) is the real thing.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

from hotspan import _native

SOURCE = Path(__file__).parent / "devices" / "fake_libcuda.c"


def build(directory: Path) -> Path:
    """Compile the stand-in into ``directory``; its path."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or "cc"
    out = directory / "libcuda-standin.so"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-O1", "-o", str(out), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return out


class FakeDriver:
    """The stand-in, loaded: its controls and counters."""

    def __init__(self, path: Path):
        self.path = path
        self.lib = ctypes.CDLL(str(path))
        lib = self.lib
        lib.fake_reset.argtypes = [ctypes.c_int]
        lib.fake_advance.argtypes = [ctypes.c_int, ctypes.c_int64]
        lib.fake_now.argtypes = [ctypes.c_int]
        lib.fake_now.restype = ctypes.c_int64
        lib.fake_launch.argtypes = [ctypes.c_int, ctypes.c_uint64, ctypes.c_int64]
        lib.fake_set_device.argtypes = [ctypes.c_int]
        lib.fake_pending.argtypes = [ctypes.c_int]
        lib.fake_follow_host.argtypes = [ctypes.c_int]
        lib.fake_fail_next.argtypes = [ctypes.c_char_p, ctypes.c_int]
        lib.fake_event_time.argtypes = [ctypes.c_uint64]
        lib.fake_event_time.restype = ctypes.c_int64
        lib.fake_counter.argtypes = [ctypes.c_char_p]
        lib.fake_counter.restype = ctypes.c_int64
        lib.fake_set_memory_used.argtypes = [ctypes.c_int, ctypes.c_int64]

    def start(self, devices: int = 2) -> None:
        """A fresh driver state and a fresh plug-in that loads this file at the next device span."""
        os.environ["HOTSPAN_LIBCUDA"] = str(self.path)
        _native._cuda_reset(False)
        self.lib.fake_reset(devices)

    def stop(self) -> None:
        """The plug-in forgets this driver (the next device span looks for libcuda.so.1 again)."""
        os.environ.pop("HOTSPAN_LIBCUDA", None)
        _native._cuda_reset(False)

    def advance(self, ns: int, device: int = 0) -> None:
        self.lib.fake_advance(device, ns)

    def now(self, device: int = 0) -> int:
        return self.lib.fake_now(device)

    def launch(self, ns: int, stream: int = 0, device: int = 0) -> None:
        """Queue a kernel of ``ns`` device nanoseconds on ``stream`` of ``device``."""
        self.lib.fake_launch(device, stream, ns)

    def set_device(self, device: int) -> None:
        """Make ``device``'s context current (``cudaSetDevice``); -1: none."""
        self.lib.fake_set_device(device)

    def pending(self, on: bool) -> None:
        self.lib.fake_pending(int(on))

    def follow_host(self, on: bool = True) -> None:
        self.lib.fake_follow_host(int(on))

    def fail_next(self, call: str, code: int) -> None:
        self.lib.fake_fail_next(call.encode(), code)

    def event_time(self, handle: int) -> int:
        return self.lib.fake_event_time(handle)

    def set_memory_used(self, device: int, nbytes: int) -> None:
        """cuMemGetInfo's memory in use on ``device`` (of 16 GiB) from now on."""
        self.lib.fake_set_memory_used(device, nbytes)

    def counter(self, name: str) -> int:
        value = self.lib.fake_counter(name.encode())
        assert value >= 0, name
        return value
