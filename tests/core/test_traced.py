"""@hotspan.traced: bare, named, methods, async, toggling, errors."""

from __future__ import annotations

import asyncio
import inspect

import pytest

import hotspan
from _util import rows

pytestmark = pytest.mark.usefixtures("fresh")


@hotspan.traced
def load_batch(n):
    """Load n items."""
    return list(range(n))


class Model:
    @hotspan.traced
    def forward(self, x):
        return x * 2

    @hotspan.traced("Model.fused", "compute", arg=64)
    def fused(self, x):
        return x + 1


def test_bare_traced_uses_qualname_and_keeps_metadata():
    assert load_batch(3) == [0, 1, 2]
    assert load_batch.__name__ == "load_batch"
    assert load_batch.__doc__ == "Load n items."
    assert load_batch.__wrapped__(2) == [0, 1]  # the undecorated function: not recorded
    assert inspect.signature(load_batch) == inspect.signature(load_batch.__wrapped__)
    (r,) = rows(hotspan.drain())
    assert r["name"] == "load_batch" and r["category"] is None and r["arg"] is None


def test_methods_bind_and_record_qualname():
    m = Model()
    assert m.forward(4) == 8
    assert Model.forward(m, 1) == 2
    assert m.fused(1) == 2
    rs = rows(hotspan.drain())
    assert [r["name"] for r in rs] == ["Model.forward", "Model.forward", "Model.fused"]
    assert rs[2]["category"] == "compute" and rs[2]["arg"] == 64


def test_traced_with_keywords_and_nesting():
    @hotspan.traced(name="inner", category="io")
    def inner():
        return 1

    @hotspan.traced("outer", "sync")
    def outer():
        return inner() + inner()

    assert outer() == 2
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert rs["inner"]["category"] == "sync/io"
    assert rs["inner"]["parent_id"] == rs["outer"]["span_id"]


def test_exception_in_traced_function():
    @hotspan.traced
    def broken():
        raise KeyError("k")

    with pytest.raises(KeyError, match="k"):
        broken()
    (r,) = rows(hotspan.drain())
    assert r["error"] is True


def test_toggling_affects_already_decorated_functions():
    hotspan.disable()
    load_batch(1)
    assert hotspan.drain().num_rows == 0
    hotspan.enable()
    load_batch(1)
    assert hotspan.drain().num_rows == 1


def test_async_function_span_covers_the_awaited_body():
    @hotspan.traced("fetch", "io")
    async def fetch():
        await asyncio.sleep(0.02)
        return 5

    assert inspect.iscoroutinefunction(fetch)
    assert asyncio.run(fetch()) == 5
    (r,) = rows(hotspan.drain())
    assert r["name"] == "fetch" and r["duration_ns"] >= 15_000_000


def test_traced_rejects_non_callables_and_bad_names():
    with pytest.raises(TypeError, match="expected a function or a name"):
        hotspan.traced(3)
    with pytest.raises(TypeError, match="name must be a str"):
        hotspan.traced(name=5)(lambda: None)
    with pytest.raises(TypeError, match="takes one callable"):
        hotspan.span("x")(42)


def test_traced_function_passes_args_kwargs_and_returns():
    @hotspan.traced
    def f(*args, **kwargs):
        return args, kwargs

    assert f(1, 2, a=3) == ((1, 2), {"a": 3})
    assert hotspan.drain().num_rows == 1
