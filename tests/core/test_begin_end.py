"""Explicit begin/end pairs and instants."""

from __future__ import annotations

import pytest

import hotspan
from _util import rows

pytestmark = pytest.mark.usefixtures("fresh")


def test_begin_end_records_a_span_with_arg():
    tok = hotspan.begin("phase", "io", arg=4096)
    assert isinstance(tok, int)
    hotspan.end(tok)
    (r,) = rows(hotspan.drain())
    assert (r["name"], r["category"], r["arg"], r["depth"]) == ("phase", "io", 4096, 0)


def test_begin_end_nest_with_with_blocks():
    with hotspan.span("outer", "sync"):
        tok = hotspan.begin("mid", "comms")
        with hotspan.span("leaf"):
            pass
        hotspan.end(tok)
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert (
        rs["mid"]["parent_id"] == rs["outer"]["span_id"] and rs["mid"]["category"] == "sync/comms"
    )
    assert (
        rs["leaf"]["parent_id"] == rs["mid"]["span_id"] and rs["leaf"]["category"] == "sync/comms"
    )


def test_end_closes_spans_left_open_inside():
    a = hotspan.begin("a")
    hotspan.begin("b")  # never ended explicitly
    hotspan.end(a)
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert set(rs) == {"a", "b"}
    assert rs["b"]["parent_id"] == rs["a"]["span_id"]
    assert rs["b"]["end_ns"] <= rs["a"]["end_ns"]


def test_end_with_a_stale_or_bad_token_raises():
    tok = hotspan.begin("x")
    hotspan.end(tok)
    with pytest.raises(RuntimeError, match="does not match"):
        hotspan.end(tok)
    with pytest.raises(TypeError, match="token must be the int"):
        hotspan.end("x")
    with hotspan.span("w"):
        with pytest.raises(RuntimeError, match="does not match"):
            hotspan.end(0)  # frame 0 is a with-block, not begin()
    assert [r["name"] for r in rows(hotspan.drain())] == ["x", "w"]


def test_begin_while_disabled_returns_a_token_end_ignores():
    hotspan.disable()
    tok = hotspan.begin("off")
    hotspan.enable()
    hotspan.end(tok)
    assert hotspan.drain().num_rows == 0


def test_begin_bad_arguments():
    with pytest.raises(TypeError, match="begin\\(\\): name must be a str"):
        hotspan.begin(None)
    with pytest.raises(TypeError, match="begin\\(\\): arg must be an int"):
        hotspan.begin("x", arg=[1])


def test_instants_are_zero_duration_rows_under_the_current_span():
    hotspan.instant("start", "marks")
    with hotspan.span("step", "sync"):
        hotspan.instant("checkpoint", arg=12)
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert rs["start"]["duration_ns"] == 0 and rs["start"]["category"] == "marks"
    assert rs["start"]["parent_id"] is None and rs["start"]["depth"] == 0
    cp = rs["checkpoint"]
    assert cp["duration_ns"] == 0 and cp["start_ns"] == cp["end_ns"] and cp["arg"] == 12
    assert (
        cp["parent_id"] == rs["step"]["span_id"] and cp["depth"] == 1 and cp["category"] == "sync"
    )
    assert rs["step"]["start_ns"] <= cp["start_ns"] <= rs["step"]["end_ns"]


def test_instant_bad_arguments():
    with pytest.raises(TypeError, match="instant\\(\\): name must be a str"):
        hotspan.instant(1)
