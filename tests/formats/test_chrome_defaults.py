"""Chrome JSON args that hold their default are left out of our files (a root's
``"parent_id":null``, ``"depth":0``, ``"arg":null``, ``"error":false``) and times are written
as short as exact allows (``1136`` for ``1136.000``): a file with and without each of them
loads identically, through the fast path and the general one, and Perfetto still sees every
slice with its args."""

from __future__ import annotations

import json
import re
from decimal import Decimal
from pathlib import Path

import pyarrow.compute as pc
import pytest

from conftest import assert_same_spans

from hotspan.formats import export, load

#: Each default the writer leaves out, as older files wrote it.
DEFAULTS = {"parent_id": None, "depth": 0, "arg": None, "error": False}


def _spelled_out(line: bytes, keys: tuple[str, ...], times: bool) -> bytes:
    """One of our event lines with the defaults in ``keys`` written out (in the order and
    spelling older files used) and, when ``times``, ts and dur with three decimals."""
    event = json.loads(line, parse_float=Decimal)
    args = event["args"]
    full = {"span_id": args.pop("span_id")}
    for key, default in DEFAULTS.items():
        if key in args or key in keys:
            full[key] = args.pop(key, default)
    full.update(args)  # thread_name, when the span's thread was renamed
    event["args"] = full
    for key in ("ts", "dur"):
        if key in event:  # kept as text (no float on the way)
            event[key] = f"@{Decimal(event[key]):.3f}@" if times else f"@{event[key]}@"
    text = json.dumps(event, ensure_ascii=False, separators=(",", ":"))
    return re.sub(r'"@([-0-9.]+)@"', r"\1", text).encode()


def _rewrite(path: Path, out: Path, keys: tuple[str, ...], times: bool) -> int:
    """``path`` with every span event line spelled out; how many lines changed."""
    lines = path.read_bytes().split(b"\n")
    changed = 0
    for i, line in enumerate(lines):
        if not line.startswith(b'{"ph":"X"') and not line.startswith(b'{"ph":"i"'):
            continue
        body = line.removesuffix(b",")
        spelled = _spelled_out(body, keys, times)
        if spelled != body:
            changed += 1
        lines[i] = spelled + line[len(body) :]
    out.write_bytes(b"\n".join(lines))
    return changed


def _load_general(path: Path):
    """The same document on one line with other blanks: only the general parser reads it."""
    other = path.with_name("general-" + path.name)
    other.write_text(json.dumps(json.loads(path.read_bytes())))
    return load(other)


def test_our_file_leaves_the_defaults_out(spans, tmp_path):
    path = tmp_path / "trace.json"
    export(spans, path)
    text = path.read_bytes()
    for default in (
        b'"parent_id":null',
        b'"depth":0,',
        b'"depth":0}',
        b'"arg":null',
        b'"error":false',
    ):
        assert default not in text
    assert re.search(rb'"(ts|dur)":[0-9]+\.[0-9]*0[,}]', text) is None  # no trailing zero
    # ... and the spans have each default somewhere, so that every case is covered
    assert spans.column("parent_id").null_count and spans.column("arg").null_count
    assert pc.sum(pc.equal(spans.column("depth"), 0)).as_py()
    assert pc.sum(pc.invert(spans.column("error"))).as_py()


@pytest.mark.parametrize(
    "keys, times",
    [((key,), False) for key in DEFAULTS] + [((), True), (tuple(DEFAULTS), True)],
    ids=[*DEFAULTS, "times", "all"],
)
def test_a_file_with_and_without_each_default_loads_identically(spans, tmp_path, keys, times):
    path = tmp_path / "trace.json"
    export(spans, path)
    spelled = tmp_path / "spelled.json"
    assert _rewrite(path, spelled, keys, times) > 0
    assert spelled.stat().st_size > path.stat().st_size
    ours = load(path)
    assert_same_spans(spans, ours, keep_order=False)
    assert_same_spans(ours, load(spelled))
    assert_same_spans(ours, _load_general(spelled))
    assert load(spelled).schema.metadata == ours.schema.metadata


@pytest.mark.parametrize("scale", [1, 10, 100, 1000])
def test_short_times_at_every_number_of_decimals(spans, tmp_path, scale):
    """Times scaled by 10, 100, 1000 from the trace's start end in 1, 2, 3 zero digits of
    nanoseconds: written with at most 2, 1, 0 decimals, read back to the nanosecond."""
    start = pc.min(spans.column("start_ns"))
    table = spans
    for name in ("start_ns", "end_ns", "duration_ns", "self_ns", "wait_ns"):
        values = table.column(name)
        if name in ("start_ns", "end_ns"):
            values = pc.add(pc.multiply(pc.subtract(values, start), scale), start)
        else:
            values = pc.multiply(values, scale)
        table = table.set_column(table.schema.get_field_index(name), name, values)
    path = tmp_path / "scaled.json"
    export(table, path)
    decimals = {
        len(fraction)
        for fraction in re.findall(rb'"(?:ts|dur)":[0-9]+(?:\.([0-9]*))?[,}]', path.read_bytes())
    }
    assert max(decimals) == {1: 3, 10: 2, 100: 1, 1000: 0}[scale]
    assert_same_spans(table, load(path), keep_order=False)
    assert_same_spans(load(path), _load_general(path))


@pytest.mark.slow
def test_perfetto_sees_the_args_and_their_absence(spans, tmp_path, perfetto_check):
    """Perfetto's trace processor: every slice with its span_id, a parent_id exactly on
    the children, an arg where there is one, error only where true."""
    import trace_processor

    path = tmp_path / "trace.json"
    export(spans, path)
    perfetto_check(
        path,
        slices=spans.num_rows,
        sum_dur=pc.sum(spans.column("duration_ns")).as_py(),
        threads=len(
            {(r["pid"], r["thread_id"]) for r in spans.select(["pid", "thread_id"]).to_pylist()}
        ),
    )
    with trace_processor.open_trace(path) as tp:
        rows = tp.query(
            "select a.key as key, count(*) as n from slice s join args a using(arg_set_id) "
            "where a.key like 'args.%' group by a.key"
        ).as_pandas_dataframe()
    seen = dict(zip(rows["key"], rows["n"], strict=True))
    column = spans.column
    assert seen["args.span_id"] == spans.num_rows
    assert seen["args.parent_id"] == spans.num_rows - column("parent_id").null_count
    assert seen["args.depth"] == pc.sum(pc.not_equal(column("depth"), 0)).as_py()
    assert seen["args.arg"] == spans.num_rows - column("arg").null_count
    assert seen["args.error"] == pc.sum(column("error")).as_py()
