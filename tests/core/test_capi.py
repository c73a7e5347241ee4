"""The C API for native callers (hotspan.h), reached through the module's capsule."""

from __future__ import annotations

import ctypes
import threading
from pathlib import Path

import pytest

import hotspan
from hotspan import _native
from _util import rows

pytestmark = pytest.mark.usefixtures("fresh")


class HotspanApi(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("site", ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p)),
        ("begin", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int)),
        ("end", ctypes.CFUNCTYPE(None, ctypes.c_int)),
        ("instant", ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int)),
        ("enabled", ctypes.CFUNCTYPE(ctypes.c_int)),
    ]


@pytest.fixture(scope="module")
def api():
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    ptr = get(_native._C_API, b"hotspan._native._C_API")
    return ctypes.cast(ptr, ctypes.POINTER(HotspanApi)).contents


def test_get_include_points_at_the_header():
    header = Path(hotspan.get_include()) / "hotspan.h"
    text = header.read_text()
    assert "hotspan_api" in text and "HOTSPAN_CAPSULE_NAME" in text


def test_native_spans_nest_with_python_spans(api):
    assert api.version >= 1 and api.enabled() == 1
    gemm = api.site(b"gemm", b"compute")
    mark = api.site(b"launched", None)
    with hotspan.span("step", "sync"):
        assert api.begin(gemm, 1 << 20, 1) == 1
        api.instant(mark, 0, 0)
        api.end(0)
        api.begin(gemm, 0, 0)
        api.end(1)
    rs = rows(hotspan.drain())
    by = {(r["name"], r["error"]): r for r in rs}
    step = by[("step", False)]
    ok, failed, launched = by[("gemm", False)], by[("gemm", True)], by[("launched", False)]
    assert (
        ok["parent_id"] == step["span_id"]
        and ok["category"] == "sync/compute"
        and ok["arg"] == 1 << 20
    )
    assert failed["arg"] is None
    assert launched["parent_id"] == ok["span_id"] and launched["duration_ns"] == 0


def test_native_spans_from_other_threads(api):
    site = api.site(b"kernel", b"gpu")

    def work():
        for i in range(1000):
            api.begin(site, i, 1)
            api.end(0)

    threads = [threading.Thread(target=work) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t = hotspan.drain()
    assert t.num_rows == 3000
    assert sorted(t.column("arg").to_pylist()) == sorted(list(range(1000)) * 3)


def test_disabled_native_begin_returns_0(api):
    hotspan.disable()
    assert api.enabled() == 0
    assert api.begin(api.site(b"x", None), 0, 0) == 0
    api.end(0)
    hotspan.enable()
    assert hotspan.drain().num_rows == 0
