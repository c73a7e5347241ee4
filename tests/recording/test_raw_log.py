"""The raw log of ``record(dir)`` (csrc/hs_rawlog.c, formats/_rawlog.py, recording/_rawlog.py):
while a run is live the native drain thread appends its records to ``DIR/_live/*.hsraw``; ``hotspan.load``
reads them there; ``stop()`` leaves only Parquet parts holding exactly what ``drain()`` gives;
a SIGKILL loses at most the last half second whatever the flush interval; ``hotspan compact``
converts what a killed process left; a damaged log reads up to the damage."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import asyncio
import textwrap
import threading
import time

import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats._base import TraceFileWarning
from hotspan.formats import _rawlog as rawlog
from hotspan.recording._rawlog import convert
from hotspan.schema import SPAN_SCHEMA

from _procs import DEADLINE_S, env, killed_at_random
from _util import wait_until


def _work(n: int) -> None:
    hotspan.set_thread_name(f"worker-{threading.get_native_id()}")
    try:
        with hotspan.span("root"):
            for i in range(n):
                with hotspan.span("outer", "a", arg=i):
                    with hotspan.span("inner", "b"):
                        pass
                    hotspan.instant("mark")
        try:
            with hotspan.span("failing", "c"):
                raise ZeroDivisionError
        except ZeroDivisionError:
            pass
    finally:  # some tests work on the main thread: its name is the later tests' too
        if threading.current_thread() is threading.main_thread():
            # only there: a worker renamed as it ends could give drain() (which names a
            # thread when it converts) another name than the raw log (named as written)
            hotspan.set_thread_name(threading.current_thread().name)


def _record_on_two_threads(run, spans_each: int):
    """Record ``spans_each`` spans on each of two threads into ``run`` (flushed only at
    stop), and give back what drain() then sees of them."""
    hotspan.drain()
    with hotspan.record(run, flush_interval=60):
        threads = [threading.Thread(target=_work, args=(spans_each,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return hotspan.drain()


def _same_rows(a, b) -> None:
    a, b = a.sort_by("span_id"), b.sort_by("span_id")
    assert a.num_rows == b.num_rows
    for name in SPAN_SCHEMA.names:
        assert a.column(name).to_pylist() == b.column(name).to_pylist(), name


def test_a_live_run_is_a_raw_log_and_stop_leaves_parquet_parts_equal_to_drain(tmp_path):
    run = tmp_path / "run"
    hotspan.drain()
    dropped_before = hotspan.dropped()  # a process's count: earlier tests' drops stay in it
    with hotspan.record(run, flush_interval=0.05) as rec:
        threads = [threading.Thread(target=_work, args=(3000,)) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        expected = 2 * (1 + 3000 * 3 + 1)
        # while live: the spans are in the raw log, which load() reads; no flush wrote them
        live = wait_until(
            lambda: (t := hotspan.load(run)).num_rows == expected and t,
            what="every span readable while the run is live",
        )
        (raw,) = os.listdir(run / "_live")
        assert raw.endswith(".hsraw")
        assert rec.spans == expected
        assert sorted(p.name for p in run.glob("*.parquet")) == [
            p.name for p in run.glob("*-000000.parquet")
        ]  # the start part only
    drained = hotspan.drain()  # the recorder took nothing from drain()'s cursor
    assert not (run / "_live").exists()  # only Parquet parts remain
    loaded = hotspan.load(run)
    _same_rows(loaded, drained)  # self_ns, category paths, args, errors, names: as drain()
    _same_rows(live, drained)
    assert rec.dropped == 0 and hotspan.dropped() == dropped_before
    import duckdb
    import pandas as pd
    import polars as pl

    assert len(pd.read_parquet(run)) == expected
    assert pl.scan_parquet(str(run / "*.parquet")).collect().height == expected
    assert duckdb.sql(f"select count(*) from '{run}/*.parquet'").fetchall() == [(expected,)]


def test_readers_of_parquet_leave_a_live_raw_log_alone(tmp_path):
    run = tmp_path / "run"
    with hotspan.record(run, flush_interval=0.05):
        _work(100)
        wait_until(lambda: hotspan.load(run).num_rows == 302, what="the spans in the raw log")
        import pandas as pd
        import pyarrow.dataset as ds

        assert len(pd.read_parquet(run)) == 0  # the start part: the live log is not Parquet
        assert ds.dataset(run, format="parquet").count_rows() == 0
    assert len(pd.read_parquet(run)) == 302


def test_a_second_recording_in_the_process_writes_parts_per_flush(tmp_path):
    with hotspan.record(tmp_path / "a", flush_interval=0.05) as first:
        with hotspan.record(tmp_path / "b", flush_interval=0.05) as second:
            _work(50)
            wait_until(
                lambda: len(list((tmp_path / "b").glob("*.parquet"))) > 1,
                what="a part of the second recording",
            )
            assert first._sink.raw and not second._sink.raw
    assert hotspan.load(tmp_path / "a").num_rows == hotspan.load(tmp_path / "b").num_rows == 152
    hotspan.drain()


KILLED = textwrap.dedent(
    """
    import os, struct, sys, threading, time
    import hotspan
    progress = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    def work(k):
        s, n = hotspan.span("w"), 0
        while True:
            with hotspan.span("w", arg=k * 100_000_000 + n):
                pass
            n += 1
            if n % 1000 == 0:  # (when, thread, spans recorded so far)
                os.write(progress, struct.pack("<qqq", time.monotonic_ns(), k, n))
    for k in range(2):
        threading.Thread(target=work, args=(k,), daemon=True).start()
    print("ready", flush=True)
    time.sleep(120)
    """
)


@pytest.mark.slow
@pytest.mark.parametrize("trial", range(int(os.environ.get("HOTSPAN_TEST_REPEAT", "2"))))
def test_a_sigkill_loses_at_most_half_a_second_whatever_the_flush_interval(tmp_path, trial):
    # flush_interval=30: with a part per flush the whole run would be lost; the raw log is
    # written by the drain thread every few ms
    script, progress, run = tmp_path / "killed.py", tmp_path / "progress.bin", tmp_path / "run"
    script.write_text(KILLED)
    killed_at, records = killed_at_random(
        script, progress, env(HOTSPAN_OUT=str(run), HOTSPAN_FLUSH_INTERVAL="30"), (1.5, 3.5)
    )
    cutoff = killed_at - 500_000_000
    table = hotspan.load(run)
    args = table.column("arg")
    for k in range(2):
        done = max((n for when, thread, n in records if thread == k and when <= cutoff), default=0)
        assert done > 0, "the program recorded nothing (a starved machine?)"
        mine = pc.filter(
            args,
            pc.and_(pc.greater_equal(args, k * 100_000_000), pc.less(args, (k + 1) * 100_000_000)),
        )
        # every span a thread had recorded half a second before the kill, none twice
        assert pc.count_distinct(mine).as_py() == len(mine) >= done
        assert pc.max(mine).as_py() - k * 100_000_000 == len(mine) - 1  # no hole
    # hotspan compact turns the killed process's raw log into Parquet, the same rows
    from hotspan.recording.compaction import compact

    compact(run, grace_s=0)
    assert not (run / "_live").exists()
    assert hotspan.load(run).sort_by("span_id").equals(table.sort_by("span_id"))


def _killed_run(tmp_path, spans: int = 2000):
    """A run whose process died with its raw log live (SIGKILL)."""
    run = tmp_path / "run"
    code = textwrap.dedent(
        f"""
        import hotspan, os, signal, time
        rec = hotspan.record({str(run)!r}, flush_interval=60).start()
        for i in range({spans}):
            with hotspan.span("x", "c", arg=i):
                pass
        deadline = time.monotonic() + 30
        while rec.spans < {spans} and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], env=env(), timeout=DEADLINE_S)
    assert proc.returncode == -signal.SIGKILL
    (raw,) = (run / "_live").iterdir()
    return run, raw


def test_a_damaged_raw_log_reads_up_to_the_damage_and_says_so(tmp_path):
    run, raw = _killed_run(tmp_path)
    assert hotspan.load(run).column("arg").to_pylist() == list(range(2000))
    data = bytearray(raw.read_bytes())
    parsed = rawlog.RawFile(raw)
    last = parsed.records[-1][0]  # the payload of the last records frame
    parsed.close()
    data[last + 40] ^= 0xFF  # a flipped bit in a record: the frame's checksum differs
    raw.write_bytes(bytes(data))
    with pytest.warns(TraceFileWarning, match="checksum"):
        table = hotspan.load(run)
    args = table.column("arg").to_pylist()
    assert 0 < len(args) < 2000 and args == list(range(len(args)))
    assert b"hotspan.skipped_on_load" in table.schema.metadata
    assert b"checksum" in table.schema.metadata[b"hotspan.skipped_on_load"]


def test_a_raw_log_cut_short_reads_its_whole_frames(tmp_path):
    run, raw = _killed_run(tmp_path)
    data = raw.read_bytes()
    raw.write_bytes(data[: len(data) - 100])  # the kill interrupted the last write
    args = hotspan.load(run).column("arg").to_pylist()
    assert 0 < len(args) < 2000 and args == list(range(len(args)))


def test_a_raw_log_whose_process_ended_before_its_header_holds_no_spans(tmp_path):
    # CI, stop 41: a spawn pool's worker terminated as its recording started left its raw log
    # created (open) but empty (the header's write not reached), and the whole run failed to
    # load. Such a log holds nothing: the run loads, and compact removes it. The state is made
    # here by cutting a killed process's log back to what that worker left.
    run, raw = _killed_run(tmp_path)
    header = raw.read_bytes()[: rawlog._HEADER.size]
    for cut in (0, 5, len(header) - 1):  # nothing, or part of the one header write
        raw.write_bytes(header[:cut])
        assert hotspan.load(run).num_rows == 0
        assert rawlog.read(raw).num_rows == 0
    from hotspan.recording.compaction import compact

    compact(run, grace_s=0)
    assert not (run / "_live").exists()
    assert hotspan.load(run).num_rows == 0


def test_a_file_that_is_not_a_raw_log_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "bad.hsraw"
    bad.write_bytes(b"NOTARAWLOG" + bytes(100))
    with pytest.raises(rawlog.RawLogError, match=r"bad\.hsraw: not a raw log"):
        rawlog.read(bad)
    bad.write_bytes(b"short")
    with pytest.raises(rawlog.RawLogError, match="no header"):
        rawlog.read(bad)


def _gathered(tasks: int) -> None:
    """An asyncio program: a span awaiting tasks, each of whose spans sleeps then works."""

    async def fetch(i: int) -> None:
        with hotspan.span("fetch", "io", arg=i):
            await asyncio.sleep(0.005)
            with hotspan.span("parse"):
                end = time.perf_counter_ns() + 200_000
                while time.perf_counter_ns() < end:
                    pass

    async def main() -> None:
        with hotspan.span("batch", "main"):
            await asyncio.sleep(0.002)
            await asyncio.gather(*(fetch(i) for i in range(tasks)))
        with hotspan.span("after"):
            pass

    asyncio.run(main())


@pytest.mark.parametrize("part_rows", [None, 7])
def test_asyncio_tasks_under_the_raw_log_have_drains_self_and_wait(
    tmp_path, monkeypatch, part_rows
):
    # issue 32's self and wait under record(dir) with the raw log on (the default): the parts
    # stop() converts, and the log read while live, hold drain()'s self_ns and wait_ns, also
    # when the pieces cut through the tasks (7 rows a piece: a parent's children in earlier
    # pieces); before, the raw log gave wait_ns 0 and the sync rule's self time
    if part_rows is not None:
        monkeypatch.setattr(rawlog, "PART_ROWS", part_rows)
    run = tmp_path / "run"
    hotspan.drain()
    with hotspan.record(run, flush_interval=60):
        _gathered(20)
        expected = 1 + 20 * 2 + 1
        live = wait_until(
            lambda: (t := hotspan.load(run)).num_rows == expected and t,
            what="every span readable while the run is live",
        )
        assert (run / "_live").exists()
    drained = hotspan.drain()
    assert not (run / "_live").exists()
    loaded = hotspan.load(run)
    _same_rows(loaded, drained)
    _same_rows(live, drained)
    fetch = loaded.filter(pc.equal(loaded.column("name"), "fetch"))
    waits = fetch.column("wait_ns").to_pylist()
    assert min(waits) >= 4_000_000  # each task slept 5 ms while "fetch" was innermost
    own = fetch.column("self_ns").to_pylist()
    durations = fetch.column("duration_ns").to_pylist()
    assert all(s + w <= d for s, w, d in zip(own, waits, durations))
    # the answers read the run as drain()'s table gives them
    assert hotspan.stats(str(run)).to_pylist() == hotspan.stats(drained).to_pylist()


def test_a_long_run_becomes_several_parts_equal_to_drain(tmp_path, monkeypatch):
    # pieces of 20,000 spans: self time across pieces (a root open over all of them), the
    # pieces written on a thread of their own while the next is decoded
    monkeypatch.setattr(rawlog, "PART_ROWS", 20_000)
    run = tmp_path / "run"
    drained = _record_on_two_threads(run, 10_000)
    parts = sorted(run.glob("*.parquet"))
    assert len(parts) >= 4 and not (run / "_live").exists()
    _same_rows(hotspan.load(run), drained)


def test_a_reader_during_the_conversion_reads_each_span_once(tmp_path, monkeypatch):
    # stop() was interrupted half-way: some pieces are parts (naming the log), the log is
    # still there; a reader takes the parts, and the other pieces from the log
    monkeypatch.setattr(rawlog, "PART_ROWS", 1_000)
    run, raw = _killed_run(tmp_path, spans=5000)
    expected = hotspan.load(run).column("arg").to_pylist()
    assert sorted(expected) == list(range(5000))
    from hotspan.formats.dataset import write_part

    def write(table, piece, pieces):
        if piece % 2 == 0:  # every other piece converted
            write_part(
                table,
                run,
                rank=0,
                pid=int(raw.name.split("-")[2]),
                seq=100 + piece,
                token=raw.name.split("-")[3].split(".")[0],
                part_meta={
                    "kind": "raw",
                    "replaces_live": [f"_live/{raw.name}"],
                    "piece": piece,
                    "pieces": pieces,
                },
            )

    import pyarrow.parquet as pq

    (start,) = run.glob("*-000000.parquet")
    meta = dict(pq.read_schema(start).metadata)  # the recording's, as stop() gives its parts
    del meta[b"hotspan.part"]
    convert(raw, write, meta)
    assert len(list(run.glob("*.parquet"))) > 2 and raw.exists()
    assert sorted(hotspan.load(run).column("arg").to_pylist()) == list(range(5000))


def test_the_parts_stop_converts_in_several_pieces_read_in_every_reader(tmp_path, monkeypatch):
    # several pieces (two writers, each piece decoded in chunks): only Parquet parts remain,
    # and pandas, polars and DuckDB read the folder as load() does (Spark:
    # tests/formats/test_dataset_readers.py, whose JVM must not get a sanitizer preloaded)
    monkeypatch.setattr(rawlog, "PART_ROWS", 20_000)
    monkeypatch.setattr(rawlog, "SUB_ROWS", 3_000)
    run = tmp_path / "run"
    drained = _record_on_two_threads(run, 10_000)
    assert not (run / "_live").exists()
    assert len(list(run.glob("*.parquet"))) >= 4
    _same_rows(hotspan.load(run), drained)
    ids = sorted(drained.column("span_id").to_pylist())
    import duckdb
    import pandas as pd
    import polars as pl

    assert sorted(pd.read_parquet(run)["span_id"].tolist()) == ids
    assert sorted(pl.scan_parquet(str(run / "*.parquet")).collect()["span_id"].to_list()) == ids
    query = f"select span_id from '{run}/*.parquet' order by 1"
    assert [r[0] for r in duckdb.sql(query).fetchall()] == ids
