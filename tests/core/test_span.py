"""hotspan.span: context manager, nesting, category paths, errors, decorator use."""

from __future__ import annotations

import sys
import threading

import pytest

import hotspan
from _util import CANNOT_SPAWN, CANNOT_SPAWN_WHY, TSAN_FORKED_POOLS, UNDER_TSAN, rows

pytestmark = pytest.mark.usefixtures("fresh")


def by_name(table):
    out = {}
    for r in rows(table):
        out.setdefault(r["name"], []).append(r)
    return out


def test_nested_spans_form_a_tree_with_category_paths():
    with hotspan.span("step", "sync"):
        with hotspan.span("forward", "compute", arg=3):
            with hotspan.span("matmul"):  # no category: inherits the parent's path
                pass
        with hotspan.span("allreduce", "comms", arg=1 << 20):
            pass
    with hotspan.span("plain"):
        pass
    t = hotspan.drain()
    assert t.num_rows == 5
    r = {k: v[0] for k, v in by_name(t).items()}
    step, fwd, mm, ar, plain = r["step"], r["forward"], r["matmul"], r["allreduce"], r["plain"]
    assert step["parent_id"] is None and step["depth"] == 0 and step["category"] == "sync"
    assert (
        fwd["parent_id"] == step["span_id"]
        and fwd["depth"] == 1
        and fwd["category"] == "sync/compute"
    )
    assert (
        mm["parent_id"] == fwd["span_id"] and mm["depth"] == 2 and mm["category"] == "sync/compute"
    )
    assert (
        ar["parent_id"] == step["span_id"]
        and ar["category"] == "sync/comms"
        and ar["arg"] == 1 << 20
    )
    assert fwd["arg"] == 3 and step["arg"] is None
    assert plain["category"] is None and plain["parent_id"] is None and plain["depth"] == 0
    assert len({x["span_id"] for x in rows(t)}) == 5
    # children lie inside their parents
    for child in (fwd, ar):
        assert step["start_ns"] <= child["start_ns"] <= child["end_ns"] <= step["end_ns"]
    assert fwd["start_ns"] <= mm["start_ns"] <= mm["end_ns"] <= fwd["end_ns"]
    for x in rows(t):
        assert x["duration_ns"] == x["end_ns"] - x["start_ns"] >= 0
        assert x["error"] is False


def test_same_site_under_different_parents_gets_each_path():
    inner = hotspan.span("io_wait", "io")
    for outer in ("sync", "comms", "sync"):
        with hotspan.span("outer", outer):
            with inner:
                pass
    with inner:
        pass
    t = hotspan.drain()
    cats = [r["category"] for r in rows(t) if r["name"] == "io_wait"]
    assert cats == ["sync/io", "comms/io", "sync/io", "io"]


def test_reused_span_object_is_reentrant_and_recursive():
    s = hotspan.span("rec", "c")

    def recurse(n):
        with s:
            if n:
                recurse(n - 1)

    recurse(4)
    t = hotspan.drain()
    rs = sorted(rows(t), key=lambda r: r["depth"])
    assert [r["depth"] for r in rs] == [0, 1, 2, 3, 4]
    for parent, child in zip(rs, rs[1:]):
        assert child["parent_id"] == parent["span_id"]
    assert {r["category"] for r in rs} == {"c"}  # a category equal to its parent's does not repeat


def test_one_span_object_entered_by_many_threads_at_once():
    s = hotspan.span("shared", "mt")
    barrier = threading.Barrier(4)

    def work():
        barrier.wait()
        for _ in range(500):
            with s:
                with s:
                    pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    t = hotspan.drain()
    assert t.num_rows == 4 * 500 * 2
    rs = rows(t)
    ids = {r["span_id"]: r for r in rs}
    assert len(ids) == len(rs)
    for r in rs:
        if r["depth"] == 1:
            parent = ids[r["parent_id"]]
            assert parent["thread_id"] == r["thread_id"] and parent["depth"] == 0
            assert r["category"] == "mt"
        else:
            assert r["parent_id"] is None and r["category"] == "mt"
    assert len({r["thread_id"] for r in rs}) == 4


def test_exception_marks_error_and_propagates_unchanged():
    err = ValueError("boom")
    with pytest.raises(ValueError) as info:
        with hotspan.span("fails", "x"):
            with hotspan.span("inner_ok"):
                pass
            raise err
    assert info.value is err
    t = hotspan.drain()
    r = {x["name"]: x for x in rows(t)}
    assert r["fails"]["error"] is True
    assert r["inner_ok"]["error"] is False


def test_span_as_decorator():
    @hotspan.span("decorated", "work", arg=7)
    def work(x, y=1):
        return x + y

    assert work(1, y=2) == 3
    assert work.__name__ == "work"
    t = hotspan.drain()
    (r,) = rows(t)
    assert (r["name"], r["category"], r["arg"]) == ("decorated", "work", 7)


def test_bad_arguments_raise_type_error_with_clear_message():
    with pytest.raises(TypeError, match="name must be a str, not int"):
        hotspan.span(3)
    with pytest.raises(TypeError, match="category must be a str or None, not bytes"):
        hotspan.span("x", b"c")
    with pytest.raises(TypeError, match="arg must be an int or None, not float"):
        hotspan.span("x", arg=1.5)
    with pytest.raises(TypeError, match="arg must be an int or None, not str"):
        hotspan.span("x", "c", arg="3")
    with pytest.raises(TypeError, match="missing required argument 'name'"):
        hotspan.span()
    with pytest.raises(TypeError, match="unexpected keyword argument 'colour'"):
        hotspan.span("x", colour=1)
    with pytest.raises(TypeError):
        hotspan.span("x", "c", "extra")
    with pytest.raises(OverflowError, match="64-bit"):
        hotspan.span("x", arg=1 << 70)
    assert hotspan.drain().num_rows == 0


def test_arg_extremes_and_negative_values():
    for v in (0, -1, (1 << 63) - 1, -(1 << 63)):
        with hotspan.span("a", arg=v):
            pass
    t = hotspan.drain()
    assert [r["arg"] for r in rows(t)] == [0, -1, (1 << 63) - 1, -(1 << 63)]


def test_span_properties_and_repr():
    s = hotspan.span("n", "c", arg=4)
    assert (s.name, s.category, s.arg) == ("n", "c", 4)
    assert repr(s) == "hotspan.span('n', 'c', arg=4)"
    assert hotspan.span("n").category is None
    assert hotspan.span(name="k", category="c").name == "k"


def test_unicode_names_survive():
    with hotspan.span("vorwärts ✓", "計算"):
        pass
    (r,) = rows(hotspan.drain())
    assert r["name"] == "vorwärts ✓" and r["category"] == "計算"


def test_deep_nesting_beyond_record_fields():
    # depth >= 256 no longer fits the record's 8-bit field: an extension record carries it
    spans = [hotspan.span(f"d{i}") for i in range(300)]

    def go(i):
        if i == 300:
            return
        with spans[i]:
            go(i + 1)

    go(0)
    t = hotspan.drain()
    rs = {r["name"]: r for r in rows(t)}
    assert len(rs) == 300
    for i in range(1, 300):
        assert rs[f"d{i}"]["depth"] == i
        assert rs[f"d{i}"]["parent_id"] == rs[f"d{i - 1}"]["span_id"]


def test_many_children_under_one_parent():
    # more than 2^24 would be too slow here; 70k children pass the 16-bit boundaries
    child = hotspan.span("child")
    with hotspan.span("parent", "p"):
        for _ in range(70_000):
            with child:
                pass
    t = hotspan.drain()
    rs = rows(t)
    parent = next(r for r in rs if r["name"] == "parent")
    kids = [r for r in rs if r["name"] == "child"]
    assert len(kids) == 70_000
    assert all(k["parent_id"] == parent["span_id"] and k["category"] == "p" for k in kids)
    assert len({k["span_id"] for k in kids}) == 70_000


def test_bound_enter_and_exit_keep_their_span_alive():
    # A span keeps its bound __enter__/__exit__ inside itself (no allocation per `with`): a
    # bound method outliving every other reference must keep the span alive and working.
    enter = hotspan.span("held", "bound").__enter__
    exit_ = enter.__self__.__exit__
    assert enter.__self__ is exit_.__self__
    assert enter() is enter.__self__
    del enter
    assert exit_(None, None, None) is False
    exit_ = None
    r = by_name(hotspan.drain())["held"]
    assert len(r) == 1 and r[0]["category"] == "bound" and r[0]["error"] is False


def test_bound_methods_do_not_leak_their_span():
    s = hotspan.span("counted")
    base = sys.getrefcount(s)
    held = [s.__enter__, s.__exit__, s.__enter__, s.__exit__]
    holding = sys.getrefcount(s)
    for _ in range(3):
        with s:
            pass
    assert sys.getrefcount(s) == holding
    del held
    assert sys.getrefcount(s) == base
    name = "counted_literal"
    with hotspan.span(name):  # its first sight: the literal cache keeps it from now on
        pass
    before = sys.getrefcount(name)
    for _ in range(100):
        with hotspan.span(name):
            pass
    assert sys.getrefcount(name) == before
    assert hotspan.drain().num_rows == 3 + 101


def test_methods_through_the_class_and_exit_stack():
    import contextlib

    s = hotspan.span("via_class", "c")
    assert type(s).__enter__(s) is s
    assert type(s).__exit__(s, ValueError, ValueError("x"), None) is False
    with contextlib.ExitStack() as stack:
        stack.enter_context(hotspan.span("via_stack"))
    names = by_name(hotspan.drain())
    assert names["via_class"][0]["error"] is True
    assert len(names["via_stack"]) == 1
    with pytest.raises(TypeError, match="doesn't apply to a 'object' object"):
        hotspan.span.__enter__(object())
    with pytest.raises(TypeError, match="needs an argument"):
        hotspan.span.__exit__()
    with pytest.raises(TypeError, match="takes no keyword arguments"):
        s.__exit__(exc=None)
    assert "__exit__" in repr(s.__exit__) and repr(hotspan.span.__enter__).startswith(
        "<method '__enter__'"
    )
    assert hotspan.span.__exit__.__doc__


# --------------------------------------------------------------------------- pickling


def flush_device():
    """A sync function that pickles (by reference)."""


class LoaderWithSpan:
    """The reused-span pattern: a span made once, kept on the object, entered per item
    (a Dataset handed to spawned DataLoader workers, a module deep-copied for an EMA)."""

    def __init__(self):
        self.span = hotspan.span("load_item", "data", arg=4)
        self.sync_span = hotspan.span("flush", sync=flush_device)

    def __call__(self, i):
        with self.span:
            with self.sync_span:
                pass
        return i


def test_a_span_pickles_and_copies_as_a_new_span_like_it():
    """An object holding a span pickles (spawned workers) and deep-copies: each span comes
    back as a new span with the same name, category, arg and sync, recording as the first
    did. Before, "cannot pickle 'hotspan.span' object"."""
    import copy
    import pickle

    loader = LoaderWithSpan()
    copies = [copy.copy(loader), copy.deepcopy(loader)] + [
        pickle.loads(pickle.dumps(loader, protocol))
        for protocol in range(pickle.HIGHEST_PROTOCOL + 1)
    ]
    for again in copies[1:]:
        assert again.span is not loader.span
        assert type(again.span) is type(loader.span)
        assert (again.span.name, again.span.category, again.span.arg) == ("load_item", "data", 4)
        assert type(again.sync_span) is type(loader.sync_span)
        assert again.sync_span.sync is flush_device
        assert again(7) == 7
    rs = rows(hotspan.drain())
    assert [(r["name"], r["category"], r["arg"]) for r in rs[::2]] == [("flush", "data", None)] * (
        len(copies) - 1
    )
    assert [(r["name"], r["category"], r["arg"]) for r in rs[1::2]] == [
        ("load_item", "data", 4)
    ] * (len(copies) - 1)


@pytest.mark.parametrize(
    "method",
    [
        pytest.param("spawn", marks=pytest.mark.skipif(CANNOT_SPAWN, reason=CANNOT_SPAWN_WHY)),
        pytest.param("fork", marks=pytest.mark.skipif(UNDER_TSAN, reason=TSAN_FORKED_POOLS)),
    ],
)
def test_a_pool_runs_an_object_holding_a_span(tmp_path, method):
    import multiprocessing as mp

    run = tmp_path / "run"
    with hotspan.record(run):
        with mp.get_context(method).Pool(2) as pool:
            assert pool.map(LoaderWithSpan(), range(5)) == list(range(5))
    names = hotspan.load(run).column("name").to_pylist()
    assert names.count("load_item") == 5 and names.count("flush") == 5
