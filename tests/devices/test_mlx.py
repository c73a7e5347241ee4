"""MLX on its CPU device: instrument("mlx") records the calls where lazy graphs run, and
hotspan.sync.mlx() makes a span cover the work that mx.async_eval started."""

from __future__ import annotations

import time

import pytest

mx = pytest.importorskip(
    "mlx.core", reason="MLX is not installed: pip install 'mlx[cpu]' (in the test extra on Linux)"
)

import hotspan  # noqa: E402
import hotspan.sync  # noqa: E402
from _util import rows, run_python  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh")

N = 1000


@pytest.fixture
def mlx_off():
    yield
    hotspan.uninstrument("mlx")


def test_instrument_records_eval_async_eval_synchronize(mlx_off):
    originals = (mx.eval, mx.async_eval, mx.synchronize)
    hotspan.instrument("mlx")
    hotspan.instrument("mlx")  # no-op: one span per call, not two
    a = mx.ones((64, 64))
    with hotspan.span("step", "train"):
        mx.eval(a @ a)
        mx.async_eval(a + 1)
        mx.synchronize()
    rs = rows(hotspan.drain())
    by = {r["name"]: r for r in rs}
    assert [r["name"] for r in sorted(rs, key=lambda r: r["start_ns"])] == [
        "step",
        "eval",
        "async_eval",
        "synchronize",
    ]
    for name in ("eval", "async_eval", "synchronize"):
        assert (
            by[name]["category"] == "train/mlx" and by[name]["parent_id"] == by["step"]["span_id"]
        )
    hotspan.uninstrument("mlx")
    hotspan.uninstrument("mlx")  # idempotent
    assert (mx.eval, mx.async_eval, mx.synchronize) == originals
    mx.eval(a @ a)
    assert hotspan.drain().num_rows == 0


def _operands():
    a = mx.random.normal((N, N))
    b = mx.random.normal((N, N))
    mx.eval(a, b)
    return a, b


def _timed_eval(a, b) -> int:
    t0 = time.perf_counter_ns()
    y = a @ b
    mx.eval(y)
    return time.perf_counter_ns() - t0


@pytest.mark.slow
def test_span_around_async_eval_measures_the_launch_and_sync_mlx_the_work():
    a, b = _operands()
    _timed_eval(a, b)  # warm-up
    # the work, timed with an explicit eval; the smallest of three (a loaded machine only
    # makes it longer, which makes the 0.8x bound below easier, not harder)
    work_ns = min(_timed_eval(a, b) for _ in range(3))

    with hotspan.span("launch", "mlx"):
        y = a @ b
        mx.async_eval(y)
    mx.synchronize()
    with hotspan.span("covered", "mlx"):
        y = a @ b
        mx.async_eval(y)
        hotspan.sync.mlx()
    by = {r["name"]: r for r in rows(hotspan.drain())}
    assert by["launch"]["duration_ns"] < work_ns / 10, (by["launch"]["duration_ns"], work_ns)
    assert by["covered"]["duration_ns"] >= 0.8 * work_ns, (by["covered"]["duration_ns"], work_ns)


def test_sync_mlx_does_not_record_a_nested_span_when_instrumented():
    # a fresh interpreter: sync.mlx() finds mx.synchronize for the first time after
    # instrument() replaced it, and must still call the original
    r = run_python(
        """
        import hotspan, mlx.core as mx
        hotspan.instrument("mlx")
        with hotspan.span("outer"):
            hotspan.sync.mlx()
        mx.synchronize()
        print([r["name"] for r in hotspan.drain().to_pylist()])
        """
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['outer', 'synchronize']"
