"""span(..., sync=fn): the sync runs right before the span ends, only while recording;
span(..., device="cuda"): refused when the span object is made."""
from __future__ import annotations

import asyncio
import importlib.util
import time

import pytest

import hotspan
from hotspan import _native
from _util import rows

pytestmark = pytest.mark.usefixtures("fresh")


def _sleeper(seconds, calls):
    def sync():
        calls.append(1)
        time.sleep(seconds)
    return sync


def test_sync_runs_before_the_end_timestamp():
    calls = []
    with hotspan.span("s", "dev", sync=_sleeper(0.02, calls)):
        pass
    (r,) = rows(hotspan.drain())
    assert calls == [1] and r["duration_ns"] >= 20_000_000 and not r["error"]


def test_sync_does_not_run_while_disabled():
    calls = []
    s = hotspan.span("s", sync=_sleeper(0, calls))
    hotspan.disable()
    try:
        with s:
            pass
    finally:
        hotspan.enable()
    assert calls == [] and hotspan.drain().num_rows == 0


def test_sync_that_raises_propagates_and_marks_the_error():
    def bad():
        raise ValueError("device lost")

    with pytest.raises(ValueError, match="device lost"):
        with hotspan.span("s", sync=bad):
            pass
    (r,) = rows(hotspan.drain())
    assert r["name"] == "s" and r["error"]


def test_configure_sync_for_sync_true():
    calls = []
    with pytest.raises(RuntimeError, match="configure\\(sync=fn\\)"):
        hotspan.span("s", sync=True)
    hotspan.configure(sync=_sleeper(0.01, calls))
    try:
        with hotspan.span("s", sync=True):
            pass
        tok = hotspan.begin("b", sync=True)
        hotspan.end(tok)
    finally:
        hotspan.configure(sync=None)
    with pytest.raises(TypeError, match="sync"):
        hotspan.configure(sync=3)
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert calls == [1, 1] and rs["s"]["duration_ns"] >= 10_000_000 and rs["b"]["duration_ns"] >= 10_000_000


def test_traced_and_begin_with_sync():
    calls = []

    @hotspan.traced("f", sync=_sleeper(0.01, calls))
    def f(x):
        return x + 1

    @hotspan.traced("g", sync=_sleeper(0.01, calls))
    async def g():
        await asyncio.sleep(0)
        return 2

    @hotspan.span("h", sync=_sleeper(0.01, calls))
    def h():
        return 3

    assert f(1) == 2 and asyncio.run(g()) == 2 and h() == 3
    tok = hotspan.begin("b", sync=_sleeper(0.01, calls))
    hotspan.end(tok)

    def bad():
        raise OSError("sync failed")

    tok = hotspan.begin("bad", sync=bad)
    with pytest.raises(OSError, match="sync failed"):
        hotspan.end(tok)
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert len(calls) == 4
    assert all(rs[n]["duration_ns"] >= 10_000_000 for n in "fghb")
    assert rs["bad"]["error"] and not rs["b"]["error"]


def test_sync_argument_checks():
    with pytest.raises(TypeError, match="sync must be a callable"):
        hotspan.span("s", sync=3)
    with pytest.raises(TypeError, match="unexpected keyword argument 'sync'"):
        hotspan.instant("s", sync=print)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("mlx") is None, reason="mlx is not installed (pip install 'mlx[cpu]')")
def test_sync_mlx_covers_the_work_started_by_async_eval():
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    a = mx.random.normal((1000, 1000))
    b = mx.random.normal((1000, 1000))
    mx.eval(a, b)
    mx.eval(a @ b)  # warm up

    def timed_eval():
        t0 = time.perf_counter_ns()
        y = a @ b
        mx.eval(y)
        return time.perf_counter_ns() - t0

    best_eval = min(timed_eval() for _ in range(5))
    for _ in range(5):
        with hotspan.span("matmul", "mlx", sync=hotspan.sync.mlx):
            y = a @ b
            mx.async_eval(y)
        with hotspan.span("launch", "mlx"):
            z = a @ b
            mx.async_eval(z)
        mx.eval(z)
    rs = rows(hotspan.drain())
    synced = sorted(r["duration_ns"] for r in rs if r["name"] == "matmul")
    assert synced[len(synced) // 2] >= 0.8 * best_eval, (synced, best_eval)


def test_device_cuda_without_cuda_raises_at_creation(tmp_path, monkeypatch):
    # No CUDA driver (a path that does not exist): refused when the span object is made.
    monkeypatch.setenv("HOTSPAN_LIBCUDA", str(tmp_path / "libcuda.so.1"))
    _native._cuda_reset(False)
    try:
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            hotspan.span("k", "gpu", device="cuda")
    finally:
        monkeypatch.delenv("HOTSPAN_LIBCUDA")
        _native._cuda_reset(False)
    with pytest.raises(ValueError, match="device must be 'cuda'"):
        hotspan.span("k", device="tpu")
    s = hotspan.span("k", "gpu", device=None)  # None: a host span
    with s:
        pass
    assert hotspan.drain().num_rows == 1
