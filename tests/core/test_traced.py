"""@hotspan.traced: bare, named, methods, async, toggling, errors."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess

import pyarrow.compute as pc
import pytest

import hotspan
from _procs import env
from _util import (
    CANNOT_SPAWN,
    CANNOT_SPAWN_WHY,
    TSAN_FORKED_POOLS,
    UNDER_TSAN,
    python_command,
    rows,
    run_python,
)

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


class Registry:
    scale = 10

    @hotspan.traced
    @staticmethod
    def parse(x):
        return int(x)

    @hotspan.traced("Registry.build", "setup")
    @classmethod
    def build(cls, x):
        return cls.scale * x

    @hotspan.span("Registry.fetch", "io")
    @staticmethod
    async def fetch(x):
        return x

    @hotspan.span("Registry.make")
    @classmethod
    def make(cls):
        return cls.__name__


def test_traced_over_staticmethod_and_classmethod_keeps_their_binding():
    """``@traced`` (or a span as a decorator) above ``@staticmethod`` or ``@classmethod``:
    the method binds as the descriptor under it says (no instance passed to a static
    method; the class to a class method), and each call is a span under the function's
    qualified name. Before, a static method called on an instance got the instance as its
    first argument, and a class method could not be decorated at all."""
    registry = Registry()
    assert Registry.parse("3") == 3 and registry.parse("4") == 4
    assert Registry.build(2) == 20 and registry.build(3) == 30
    assert asyncio.run(registry.fetch(7)) == 7
    assert registry.make() == "Registry" and Registry.make() == "Registry"
    rs = rows(hotspan.drain())
    assert [(r["name"], r["category"]) for r in rs] == [
        ("Registry.parse", None),
        ("Registry.parse", None),
        ("Registry.build", "setup"),
        ("Registry.build", "setup"),
        ("Registry.fetch", "io"),
        ("Registry.make", None),
        ("Registry.make", None),
    ]
    assert not any(r["error"] for r in rs)
    assert isinstance(Registry.__dict__["parse"], staticmethod)
    assert isinstance(Registry.__dict__["build"], classmethod)


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


# --------------------------------------------------------------------------- pickling


@hotspan.traced("pooled", "work", arg=7)
def pooled(x):
    return x * 3


def square(x):
    return x * x


def test_a_traced_function_pickles_by_reference_as_a_function_does():
    """multiprocessing sends a Pool's function to its workers pickled: a decorated function
    is its module's attribute, so it pickles as its name and comes back as the same object
    (as a function, or functools.lru_cache's wrapper, does)."""
    import pickle

    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(load_batch, protocol)) is load_batch
        assert pickle.loads(pickle.dumps(Model.forward, protocol)) is Model.forward
    bound = pickle.loads(pickle.dumps(Model().fused))
    assert bound(1) == 2
    assert [r["name"] for r in rows(hotspan.drain())] == ["Model.fused"]


def test_a_traced_function_under_another_name_pickles_by_value():
    """traced(f) kept elsewhere (``pool.map(hotspan.traced(f), ...)``): its name is f's,
    another object, so it travels as f (by reference) and its span, wrapped again."""
    import pickle

    wrapped = hotspan.traced(square, name="sq", category="math", arg=5)
    plain = hotspan.traced(square)
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        again = pickle.loads(pickle.dumps(wrapped, protocol))
        assert type(again) is type(wrapped) and again is not wrapped
        assert (again.span_name, again.span_category, again.__wrapped__) == ("sq", "math", square)
        assert again(4) == 16
        assert pickle.loads(pickle.dumps(plain, protocol))(3) == 9
    rs = rows(hotspan.drain())
    assert len(rs) == 2 * (pickle.HIGHEST_PROTOCOL + 1)
    by_value = rs[::2]
    assert all((r["name"], r["category"], r["arg"]) == ("sq", "math", 5) for r in by_value)
    assert all((r["name"], r["category"], r["arg"]) == ("square", None, None) for r in rs[1::2])


def test_a_traced_function_that_cannot_be_found_again_says_why():
    """A local function pickles no more than the function itself would: a clear error."""
    import pickle

    @hotspan.traced
    def local(x):
        return x

    with pytest.raises((pickle.PicklingError, AttributeError), match="local"):
        pickle.dumps(local)


@pytest.mark.parametrize(
    "method",
    [
        pytest.param("fork", marks=pytest.mark.skipif(UNDER_TSAN, reason=TSAN_FORKED_POOLS)),
        pytest.param("spawn", marks=pytest.mark.skipif(CANNOT_SPAWN, reason=CANNOT_SPAWN_WHY)),
    ],
)
def test_a_pool_maps_a_traced_function_and_every_call_is_a_span(tmp_path, method):
    """The case that failed: ``Pool.map`` over a ``@traced`` function raised "cannot pickle
    'hotspan.traced_function' object" before any worker ran it."""
    import multiprocessing as mp

    run = tmp_path / "run"
    with hotspan.record(run):
        with mp.get_context(method).Pool(2) as pool:
            assert pool.map(pooled, range(6)) == [0, 3, 6, 9, 12, 15]
            assert pool.map(hotspan.traced(square, name="sq"), range(4)) == [0, 1, 4, 9]
    table = hotspan.load(run)
    names = table.column("name").to_pylist()
    assert names.count("pooled") == 6 and names.count("sq") == 4
    # every span from a worker: the parent only handed the function out
    workers = set(table.column("pid").to_pylist())
    assert workers and os.getpid() not in workers


#: A script's own traced functions, as a notebook or a Spark driver program defines them.
MAIN_PROGRAM = """
import base64, pickle, sys
import hotspan

@hotspan.traced(category="math", arg=7)
def square(x):
    return x * x

class Model:
    @hotspan.traced
    def forward(self, x):
        return x + 1

if __name__ == "__main__":
    if sys.argv[1] == "cloudpickle":
        from pyspark import cloudpickle  # the copy Spark sends its tasks with
        sent = cloudpickle.dumps((square, Model.forward), protocol=pickle.HIGHEST_PROTOCOL)
        print(base64.b64encode(sent).decode())
    else:
        import multiprocessing as mp
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
            again = pickle.loads(pickle.dumps(square, protocol))
            assert again(3) == 9 and again.__qualname__ == "square", (protocol, again)
            assert pickle.loads(pickle.dumps(Model.forward, protocol))(Model(), 1) == 2
        assert pickle.loads(pickle.dumps(square)).span_category == "math"
        assert square.__qualname__ == "square" and square(2) == 4  # the script's own, as it was
        hotspan.drain()  # the calls above: not the pool's
        with hotspan.record(sys.argv[2]):
            with mp.get_context("fork").Pool(2) as pool:  # each task's function pickled
                assert pool.map(square, range(5)) == [0, 1, 4, 9, 16]
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
@pytest.mark.skipif(UNDER_TSAN, reason=TSAN_FORKED_POOLS)
def test_a_traced_function_of_main_pickles_for_a_pool_under_every_protocol(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(MAIN_PROGRAM)
    done = subprocess.run(
        [*python_command(), str(script), "pickle", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env(),
    )
    assert done.returncode == 0, done.stderr
    table = hotspan.load(tmp_path / "run")
    squares = table.filter(pc.equal(table.column("name"), "square"))
    assert squares.num_rows == 5 and set(squares.column("arg").to_pylist()) == {7}


def test_a_traced_function_of_main_goes_to_spark_workers_by_value(tmp_path):
    """Was: cloudpickle (Spark, Dask, Ray) sent a ``@traced`` function of the driver's
    ``__main__`` by name, and Spark's workers failed with "Can't get attribute 'square' on
    <module 'pyspark.daemon'>" (a plain function goes by value). Sent by cloudpickle from a
    script, loaded by another interpreter with no such script: it runs, and records."""
    pytest.importorskip("pyspark")
    script = tmp_path / "driver.py"
    script.write_text(MAIN_PROGRAM)
    sent = subprocess.run(
        [*python_command(), str(script), "cloudpickle"],
        capture_output=True,
        text=True,
        timeout=240,
        env=env(),
    )
    assert sent.returncode == 0, sent.stderr
    worker = run_python(
        f"""
        import base64, json, pickle, hotspan
        square, forward = pickle.loads(base64.b64decode({sent.stdout.strip()!r}))
        results = [square(4), forward(None, 1)]
        spans = hotspan.drain().select(["name", "category", "arg"]).to_pylist()
        print(json.dumps({{"results": results, "spans": spans}}))
        """
    )
    assert worker.returncode == 0, worker.stderr
    got = json.loads(worker.stdout.strip().splitlines()[-1])
    assert got["results"] == [16, 2]
    assert got["spans"] == [
        {"name": "square", "category": "math", "arg": 7},
        {"name": "Model.forward", "category": None, "arg": None},
    ]
