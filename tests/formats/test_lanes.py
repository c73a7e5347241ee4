"""Lanes: asyncio tasks interleaving on one thread, exported so that Perfetto's own trace
processor shows every span, nested as the table says, with nothing overlapping on a track;
and the round trip gives back the real thread ids."""

from __future__ import annotations

import asyncio
import gzip
import json
import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_same_spans

import hotspan
from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.formats import _chrome_json as chrome_json, export, load, _perfetto as perfetto
from hotspan.formats._lanes import LANE_BASE, LANES_KEY, assign_lanes, restore_lanes

TASKS = 24
TRACES = [".json", ".json.gz", ".pftrace"]


def _record_gather(enclosing: bool) -> pa.Table:
    """A real recording: ``asyncio.gather`` of TASKS tasks, each with 3 nested spans around
    awaits of different lengths, so the tasks' trees overlap on the one thread."""
    hotspan.enable()
    hotspan.drain()  # what earlier tests left

    async def worker(i):
        with hotspan.span("task", "work"):
            await asyncio.sleep(0.001 * (i % 3))
            with hotspan.span("a"):
                await asyncio.sleep(0)
                with hotspan.span("b"):
                    await asyncio.sleep(0.001 * (i % 2))
                await asyncio.sleep(0.0005 * (i % 4))

    async def main():
        if enclosing:
            with hotspan.span("batch", "main"):
                await asyncio.gather(*(worker(i) for i in range(TASKS)))
        else:
            await asyncio.gather(*(worker(i) for i in range(TASKS)))

    asyncio.run(main())
    table = hotspan.drain()
    assert table.num_rows == 3 * TASKS + enclosing
    return table


@pytest.fixture(scope="module", params=["tasks at top level", "tasks under a span"])
def recorded(request) -> pa.Table:
    return _record_gather(enclosing=request.param == "tasks under a span")


@pytest.fixture(scope="module", params=TRACES)
def exported(request, recorded, tmp_path_factory):
    path = tmp_path_factory.mktemp("lanes") / f"gather{request.param}"
    export(recorded, path)
    return path


def test_the_recording_overlaps_on_its_thread(recorded):
    """The premise: one OS thread, and task trees that overlap without nesting there."""
    assert pc.count_distinct(recorded.column("thread_id")).as_py() == 1
    _, mapping = assign_lanes(recorded)
    assert mapping, "the tasks' trees should overlap on the thread"
    assert set(mapping.values()) == {recorded.column("thread_id")[0].as_py()}


@pytest.mark.slow
def test_perfetto_shows_every_span_nested_as_the_table_says(exported, recorded, perfetto_check):
    _, mapping = assign_lanes(recorded)
    result = perfetto_check(
        exported,
        slices=recorded.num_rows,
        sum_dur=pc.sum(recorded.column("duration_ns")).as_py(),
        threads=1 + len(mapping),
    )
    assert result["bad_stats"] == []  # slice_drop_overlapping_complete_event among them
    assert result["max_depth"] == pc.max(recorded.column("depth")).as_py()
    # Every lane is shown under the thread's own name, in the same process.
    names = {(row["pid"], row["name"]) for row in result["threads"]}
    assert names == {(recorded.column("pid")[0].as_py(), recorded.column("thread_name")[0].as_py())}


def test_load_gives_back_the_real_thread_ids(exported, recorded):
    loaded = load(exported)
    assert_same_spans(recorded, loaded, keep_order=False)
    assert LANES_KEY not in (loaded.schema.metadata or {})


def test_the_lanes_travel_in_the_file(exported):
    """Both formats carry the table's metadata, so the mapping is in the file."""
    data = exported.read_bytes()
    if exported.suffix == ".gz":
        data = gzip.decompress(data)
    assert b"hotspan.lanes" in data


# --------------------------------------------------------------------------- no overlap


@pytest.mark.parametrize("extension", TRACES)
def test_a_table_without_overlap_exports_as_before(spans, extension, tmp_path, monkeypatch):
    """The normal case: nothing moved, no lanes key, the very bytes the writer made before."""
    table, mapping = assign_lanes(spans)
    assert table is spans and mapping == {}
    (tmp_path / "now").mkdir()
    (tmp_path / "before").mkdir()
    export(spans, tmp_path / "now" / f"trace{extension}")
    module = perfetto if extension == ".pftrace" else chrome_json
    monkeypatch.setattr(module, "assign_lanes", lambda table: (table, {}))
    export(spans, tmp_path / "before" / f"trace{extension}")
    now, before = ((tmp_path / d / f"trace{extension}").read_bytes() for d in ("now", "before"))
    if extension == ".json.gz":  # the gzip header names the writer's temporary file
        now, before = gzip.decompress(now), gzip.decompress(before)
    assert now == before
    assert b"hotspan.lanes" not in now


# --------------------------------------------------------------------------- synthetic tables


def _table(spans, thread_id=4242, metadata=None) -> pa.Table:
    """Spans given as (span_id, parent_id, start, end, depth), all on one thread."""
    rows = [
        {
            "span_id": sid,
            "parent_id": parent,
            "name": f"s{sid}",
            "category": None,
            "start_ns": start,
            "end_ns": end,
            "duration_ns": end - start,
            "depth": depth,
            "thread_id": thread_id,
            "thread_name": "MainThread",
            "pid": 7,
            "rank": 0,
            "arg": None,
            "error": False,
        }
        for sid, parent, start, end, depth in spans
    ]
    return with_self_ns(pa.Table.from_pylist(rows, schema=TRACE_SCHEMA.with_metadata(metadata)))


def _lanes(table) -> dict[int, int]:
    """span_id -> thread id after assign_lanes."""
    laned, _ = assign_lanes(table)
    return dict(zip(laned.column("span_id").to_pylist(), laned.column("thread_id").to_pylist()))


def test_two_overlapping_trees_get_two_lanes():
    # Two tasks' trees: root 1 [0, 100) with child 2; root 3 [50, 150) with child 4.
    table = _table(
        [(1, None, 0, 100, 0), (2, 1, 10, 90, 1), (3, None, 50, 150, 0), (4, 3, 60, 140, 1)]
    )
    laned, mapping = assign_lanes(table)
    assert mapping == {LANE_BASE: 4242}
    assert _lanes(table) == {1: 4242, 2: 4242, 3: LANE_BASE, 4: LANE_BASE}
    assert json.loads(laned.schema.metadata[LANES_KEY]) == {str(LANE_BASE): 4242}
    restored = restore_lanes(laned)
    assert restored.equals(table) and restored.schema.metadata is None


def test_nested_and_touching_spans_stay_on_one_lane():
    nested = _table([(1, None, 0, 100, 0), (2, 1, 0, 100, 1), (3, 2, 10, 20, 2), (4, 2, 20, 30, 2)])
    assert assign_lanes(nested) == (nested, {})
    touching = _table([(1, None, 0, 100, 0), (2, None, 100, 200, 0), (3, 2, 200, 200, 1)])
    assert assign_lanes(touching) == (touching, {})


def test_task_roots_under_a_common_span_leave_it_on_its_lane():
    """Tasks created inside span 1: the first task's tree stays under 1 on the thread's own
    track (nested as the table says), the overlapping one moves, and a third that starts
    when the first has ended reuses the free lane... the thread's own."""
    table = _table(
        [
            (1, None, 0, 1000, 0),
            (2, 1, 10, 100, 1),
            (3, 2, 20, 90, 2),  # task A
            (4, 1, 50, 150, 1),
            (5, 4, 60, 140, 2),  # task B, overlaps A
            (6, 1, 120, 300, 1),  # task C: A ended, B still open
        ]
    )
    assert _lanes(table) == {1: 4242, 2: 4242, 3: 4242, 4: LANE_BASE, 5: LANE_BASE, 6: 4242}


def test_synthetic_ids_never_collide_with_real_ones():
    table = _table([(1, None, 0, 100, 0), (2, None, 50, 150, 0)], thread_id=LANE_BASE)
    laned, mapping = assign_lanes(table)
    assert mapping == {LANE_BASE + 1: LANE_BASE}
    assert restore_lanes(laned).equals(table)


def test_bad_lanes_metadata_is_a_clear_error(tmp_path):
    table = _table([(1, None, 0, 100, 0)], metadata={LANES_KEY: b"not json"})
    with pytest.raises(ValueError, match="hotspan.lanes"):
        restore_lanes(table)


def _overlaps(intervals) -> bool:
    """The trace processor's view, one span at a time: a span that starts inside the open
    span but ends after it."""
    stack = []
    for start, end in sorted(((s, e) for s, e in intervals if e > s), key=lambda x: (x[0], -x[1])):
        stack[:] = [e for e in stack if e > start]
        if stack and end > stack[-1]:
            return True
        stack.append(end)
    return False


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 12), st.integers(0, 6)), min_size=1, max_size=9))
def test_lanes_only_when_the_stack_walk_finds_overlap_and_then_none_is_left(intervals):
    spans = [(i + 1, None, start, start + length, 0) for i, (start, length) in enumerate(intervals)]
    table = _table(spans)
    laned, mapping = assign_lanes(table)
    assert bool(mapping) == _overlaps([(s, e) for _, _, s, e, _ in spans])
    by_lane: dict = {}
    for row in laned.to_pylist():
        by_lane.setdefault(row["thread_id"], []).append((row["start_ns"], row["end_ns"]))
    assert not any(_overlaps(lane) for lane in by_lane.values())
    assert restore_lanes(laned).equals(table)


def test_many_threads_only_the_overlapping_one_moves():
    rng = random.Random(3)
    rows = []
    for tid in (10, 11, 12):
        t = 0
        for k in range(50):
            sid = tid * 1000 + k
            rows.append((sid, None, t, t + 10, 0))
            t += 10 + rng.randrange(3)
    tables = [
        _table([r for r in rows if r[0] // 1000 == tid], thread_id=tid) for tid in (10, 11, 12)
    ]
    extra = _table([(99_001, None, 5, 25, 0)], thread_id=11)  # overlaps thread 11's first two
    table = pa.concat_tables(tables + [extra])
    laned, mapping = assign_lanes(table)
    assert mapping == {LANE_BASE: 11}
    moved = laned.filter(pc.equal(laned.column("thread_id"), LANE_BASE))
    assert moved.column("span_id").to_pylist() == [99_001]  # the first lane free at its start
    assert restore_lanes(laned).equals(table)


def test_only_tables_with_tasks_are_searched(fresh):
    # A recording without asyncio tasks nests on every thread: its metadata says so and the
    # exports skip the search; one with tasks says "hotspan.tasks" (sticky in the process).
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent("""
        import asyncio, hotspan
        from hotspan.formats._lanes import may_overlap
        for _ in range(3):
            with hotspan.span("sync"):
                pass
        table = hotspan.drain()
        print(may_overlap(table), b"hotspan.tasks" in table.schema.metadata)
        async def task(i):
            with hotspan.span("t"):
                await asyncio.sleep(0.001)
        async def main():
            await asyncio.gather(*(task(i) for i in range(3)))
        asyncio.run(main())
        table = hotspan.drain()
        print(may_overlap(table), b"hotspan.tasks" in table.schema.metadata)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "True", "True"]
