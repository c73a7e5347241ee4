"""drain(): the span table's schema, metadata, timestamps and ids."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import time

import pyarrow as pa
import pytest

import hotspan
from hotspan import _native
from hotspan._schema import SPAN_SCHEMA
from hotspan.testing import set_fake_clock
from _util import rows, run_python

pytestmark = pytest.mark.usefixtures("fresh")

EXPECTED_TYPES = {
    "span_id": pa.uint64(),
    "parent_id": pa.uint64(),
    "start_ns": pa.int64(),
    "end_ns": pa.int64(),
    "duration_ns": pa.int64(),
    "depth": pa.int32(),
    "thread_id": pa.int64(),
    "pid": pa.int64(),
    "rank": pa.int32(),
    "arg": pa.int64(),
    "error": pa.bool_(),
    "self_ns": pa.int64(),
    "wait_ns": pa.int64(),
}
STRING_COLUMNS = ("name", "category", "thread_name")


def test_schema_is_exactly_the_contract():
    with hotspan.span("a", "b", arg=1):
        pass
    t = hotspan.drain()
    assert t.schema.names == [
        "span_id",
        "parent_id",
        "name",
        "category",
        "start_ns",
        "end_ns",
        "duration_ns",
        "depth",
        "thread_id",
        "thread_name",
        "pid",
        "rank",
        "arg",
        "error",
        "self_ns",
        "wait_ns",
    ]
    for name, typ in EXPECTED_TYPES.items():
        assert t.schema.field(name).type == typ, name
    for name in STRING_COLUMNS:
        typ = t.schema.field(name).type
        assert typ == pa.string() or (
            pa.types.is_dictionary(typ) and typ.value_type == pa.string()
        ), name
    assert t.schema.remove_metadata() == SPAN_SCHEMA
    t.validate(full=True)


def test_empty_drain_has_the_schema():
    t = hotspan.drain()
    assert t.num_rows == 0
    assert t.schema.remove_metadata() == SPAN_SCHEMA
    assert hotspan.drain().num_rows == 0


def test_drain_returns_each_span_once():
    with hotspan.span("once"):
        pass
    assert hotspan.drain().num_rows == 1
    assert hotspan.drain().num_rows == 0


def test_timestamps_lie_inside_time_ns_bounds():
    # Spans are timed on the CPU's counter and mapped to CLOCK_REALTIME by a map steered
    # towards it (hs_clock.c): they lie inside time.time_ns() bounds taken around them, to
    # within the map's own error at its last check against the real clock (in the table's
    # clock metadata) and a microsecond for the anchor's bracket and rounding (one run of a
    # loaded machine found an end 1 ns past its bound).
    for _ in range(20):
        t0 = time.time_ns()
        with hotspan.span("timed"):
            with hotspan.span("inner"):
                pass
        t1 = time.time_ns()
        table = hotspan.drain()
        clock = json.loads(table.schema.metadata[b"hotspan.clock"])
        slack = abs(clock["last_error_ns"]) + 1_000
        assert slack < 1_000_000, clock  # the map never strays a millisecond
        for r in rows(table):
            assert t0 - slack <= r["start_ns"] <= r["end_ns"] <= t1 + slack, (t0, r, t1, clock)


def test_timestamps_track_real_time_after_a_sleep():
    t0 = time.time_ns()
    with hotspan.span("sleep"):
        time.sleep(0.05)
    t1 = time.time_ns()
    (r,) = rows(hotspan.drain())
    assert t0 <= r["start_ns"] and r["end_ns"] <= t1
    assert 45_000_000 <= r["duration_ns"] <= t1 - t0


def test_parent_drained_after_its_children_still_contains_them():
    # the parent is converted in a later drain than its children: the clock map must
    # give the same nanoseconds to ticks whichever drain converts them
    with hotspan.span("long_parent"):
        for _ in range(30):
            with hotspan.span("child"):
                time.sleep(0.001)
            kids = rows(hotspan.drain())
            assert len(kids) == 1
            last = kids[0]
    (parent,) = rows(hotspan.drain())
    assert parent["start_ns"] <= last["start_ns"] <= last["end_ns"] <= parent["end_ns"]
    assert last["parent_id"] == parent["span_id"]


def test_fake_clock_gives_exact_durations():
    set_fake_clock(1_700_000_000_000_000_000, 10)
    with hotspan.span("a"):  # enter reads t, exit reads t + 10
        pass
    with hotspan.span("b"):
        with hotspan.span("c"):
            pass
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert rs["a"]["start_ns"] == 1_700_000_000_000_000_000
    assert rs["a"]["duration_ns"] == 10
    assert rs["c"]["duration_ns"] == 10 and rs["b"]["duration_ns"] == 30
    assert rs["c"]["start_ns"] == rs["b"]["start_ns"] + 10


def test_to_pandas():
    with hotspan.span("p", "cat", arg=9):
        pass
    df = hotspan.drain().to_pandas()
    assert list(df.columns) == SPAN_SCHEMA.names
    assert df.loc[0, "name"] == "p" and df.loc[0, "category"] == "cat" and df.loc[0, "arg"] == 9
    assert df.loc[0, "thread_name"] == "MainThread"
    assert df.loc[0, "pid"] == os.getpid()


def test_metadata_describes_the_run():
    with hotspan.span("m"):
        pass
    t = hotspan.drain()
    meta = t.schema.metadata
    assert meta[b"hotspan.host"].decode() == socket.gethostname()
    assert meta[b"hotspan.version"].decode() == hotspan.__version__
    assert meta[b"hotspan.python"].decode() == ".".join(map(str, sys.version_info[:3]))
    clock = json.loads(meta[b"hotspan.clock"])
    assert clock["source"] in {"tsc", "monotonic", "cntvct"}
    assert clock["ns_per_tick"] > 0
    assert int(meta[b"hotspan.start_ns"]) <= t.column("start_ns")[0].as_py()
    assert json.loads(meta[b"hotspan.argv"]) == sys.argv
    dropped = json.loads(meta[b"hotspan.dropped"])
    assert dropped["total"] == hotspan.dropped()
    assert int(meta[b"hotspan.pid"]) == os.getpid()


@pytest.mark.slow
def test_rank_from_configure_and_environment():
    proc = run_python(
        """
        import hotspan
        with hotspan.span("r"):
            pass
        print(hotspan.drain().column("rank")[0].as_py())
        hotspan.configure(rank=3)
        with hotspan.span("r"):
            pass
        print(hotspan.drain().column("rank")[0].as_py())
        """,
        env={"RANK": "5", "HOTSPAN_RANK": "7"},
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["7", "3"]
    proc = run_python(
        "import hotspan; print(hotspan.rank())",
        env={"SLURM_PROCID": "2", "RANK": "", "HOTSPAN_RANK": ""},
    )
    assert proc.stdout.strip() == "2"


def test_configure_rejects_bad_values():
    with pytest.raises(TypeError, match="capacity must be an int"):
        hotspan.configure(capacity="big")
    with pytest.raises(ValueError, match="capacity must be at least 2"):
        hotspan.configure(capacity=1)
    with pytest.raises(ValueError, match="rank must be >= 0"):
        hotspan.configure(rank=-1)
    with pytest.raises(ValueError, match="drain_interval"):
        hotspan.configure(drain_interval=0)


def test_thread_name_can_be_set():
    hotspan.set_thread_name("trainer")
    try:
        with hotspan.span("n"):
            pass
        (r,) = rows(hotspan.drain())
        assert r["thread_name"] == "trainer"
    finally:
        hotspan.set_thread_name("MainThread")
    with pytest.raises(TypeError):
        hotspan.set_thread_name(3)


@pytest.mark.slow
def test_span_ids_come_from_a_random_per_process_base_kept_in_the_metadata():
    code = """
        import hotspan
        hotspan.configure(rank={rank})
        with hotspan.span("a"):
            with hotspan.span("b"):
                pass
        t = hotspan.drain()
        print(t.schema.metadata[b"hotspan.id_base"].decode(), t.schema.metadata[b"hotspan.rank"].decode())
        print(*t.column("span_id").to_pylist(), *t.column("parent_id").to_pylist())
        """
    ids = {}
    for rank in (0, 1, 7):
        proc = run_python(code.format(rank=rank))
        assert proc.returncode == 0, proc.stderr
        head, body = proc.stdout.splitlines()
        base, meta_rank = (int(x) for x in head.split())
        child_id, parent_id, child_parent, parent_parent = body.split()
        assert int(child_parent) == int(parent_id) and parent_parent == "None" and meta_rank == rank
        ids[rank] = {int(child_id), int(parent_id)}
        # a thread's ids: a range of 2^20 from the process's base (never 0: 0 is "no parent")
        assert all(0 < i and (i - base) % 2**64 < 2**20 * 4 for i in ids[rank])
    assert not (ids[0] & ids[1]) and not (ids[0] & ids[7]) and not (ids[1] & ids[7])


def test_records_are_32_bytes():
    # the contract of the rings: fixed-size records of at most 32 bytes
    assert _native.RECORD_BYTES == 32


@pytest.mark.slow
def test_segment_memory_is_reused_then_given_back_when_idle():
    # Blocks come back to a bounded pool when drain() has converted them, the next burst
    # takes its blocks from there (warm pages: no fault per 128 records), and a second of
    # idleness hands the pool back to the system. A forked child starts with its own pool
    # and records exactly.
    proc = run_python(
        """
        import os, time, hotspan
        from hotspan import _native
        outer, inner = hotspan.span("outer"), hotspan.span("inner")

        def burst(n):
            for _ in range(n // 2):
                with outer:
                    with inner:
                        pass
            # the drain thread moves the records into segments (waited for, not slept)
            deadline = time.monotonic() + 30
            while _native._pending()["spans"] < n and time.monotonic() < deadline:
                time.sleep(0.001)
            assert _native._pending()["spans"] >= n, _native._pending()

        burst(400_000)
        assert hotspan.drain().num_rows == 400_000
        pooled = _native._pending()["pool_bytes"]
        assert 2 << 20 <= pooled <= 64 << 20, pooled

        pid = os.fork()
        if pid == 0:
            burst(100_000)
            os._exit(0 if hotspan.drain().num_rows == 100_000 and hotspan.dropped() == 0 else 1)
        assert os.waitpid(pid, 0)[1] == 0

        burst(200_000)
        assert _native._pending()["pool_bytes"] < pooled  # taken back out of the pool
        assert hotspan.drain().num_rows == 200_000
        assert _native._pending()["pool_bytes"] > 0
        deadline = time.monotonic() + 30  # idle for a second: given back (waited for, not slept)
        while _native._pending()["pool_bytes"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _native._pending()["pool_bytes"] == 0  # idle: given back
        assert hotspan.dropped() == 0
        print("ok")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "ok"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RUSAGE_THREAD is Linux's")
def test_a_smaller_drain_reuses_the_column_buffers_of_a_larger_one():
    # A recorder's drains differ in size from flush to flush: the column buffers a drain gave
    # back are taken again by the next one up to half as large again, not only at exactly
    # their size (each miss faulted in fresh pages: half the drain's CPU while recording).
    # Page faults of the draining thread, counted: no clock involved.
    out = run_python(
        textwrap.dedent("""
        import resource, hotspan
        def faults():
            return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
        def drain_faults(n):
            for _ in range(n):
                with hotspan.span("x"):
                    pass
            before = faults()
            table = hotspan.drain()
            assert table.num_rows == n, table.num_rows
            return faults() - before
        print(drain_faults(1_000_000), drain_faults(700_000))
        """)
    )
    assert out.returncode == 0, out.stderr
    first, second = map(int, out.stdout.split())
    # 8-byte columns: 8 MiB buffers for 1 M spans, 6 MiB ones for 0.7 M (2 MiB steps). The
    # first drain faults in ~80 bytes a span (~20,000 pages); the second takes them back
    assert first > 5_000, (first, second)
    assert second * 10 < first, (first, second)
