"""A recording into a directory writes its counters under ``_counters/`` (issue 33 item 4):
load_counters(run) gives them back, known values inside known spans give known statistics
(library and ``hotspan stats --counter``), and the run still reads as one span table in
pandas, pyarrow, polars, DuckDB and Spark."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from _util import run_python

import hotspan
from hotspan.counters import RUN_FOLDER, SUFFIX

PROGRAM = """
import hotspan
rec = hotspan.record({out!r})
step, forward = hotspan.span("step"), hotspan.span("forward")
for i in range(10):
    with step:
        hotspan.counter("queue", i)          # in effect for step i: i-1 (from before), i
        with forward:
            hotspan.counter("queue", 100 + i)
    rec.flush()                              # counters of several flushes: several files
rec.stop()
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("counters") / "run"
    done = run_python(PROGRAM.format(out=str(out)))
    assert done.returncode == 0, done.stderr
    return out


def test_counters_are_written_under_their_folder_and_load_back(run):
    files = sorted((run / RUN_FOLDER).iterdir())
    assert files and all(f.name.startswith("_") and f.name.endswith(SUFFIX) for f in files)
    assert not list(run.glob("*.counters"))  # none beside the span parts
    table = hotspan.load_counters(run)
    assert table.column("name").to_pylist() == ["queue"] * 20
    assert table.column("value").to_pylist() == [float(v) for i in range(10) for v in (i, 100 + i)]
    assert hotspan.load(run).num_rows == 20  # the spans as they were


def test_counter_stats_known_answers(run):
    rows = {r["name"]: r for r in hotspan.counter_stats(run, run).to_pylist()}
    forward = rows["forward"]
    # forward i: i in effect at its start (set just before it), then 100+i
    assert (forward["spans"], forward["values"], forward["min"], forward["max"]) == (10, 20, 0, 109)
    assert forward["mean"] == pytest.approx((45 + 1045) / 20)
    step = rows["step"]
    # step 0: 0, 100; step i>0: 100+i-1 (from the step before), i, 100+i
    assert (step["spans"], step["values"], step["min"], step["max"]) == (10, 29, 0, 109)
    expected = [0, 100] + [v for i in range(1, 10) for v in (99 + i, i, 100 + i)]
    assert step["mean"] == pytest.approx(sum(expected) / len(expected))


def test_cli_stats_counter_prints_the_library_answer(run):
    done = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", str(run), "--counter", "queue", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    import json

    printed = {r["name"]: r for r in json.loads(done.stdout)}
    library = {r["name"]: r for r in hotspan.counter_stats(run, run, counter="queue").to_pylist()}
    assert printed == library
    missing = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", str(run), "--counter", "nope"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert missing.returncode == 2
    assert "no counter named 'nope'" in missing.stderr


def _span_ids(values) -> list[int]:
    return sorted(int(v) for v in values)


def test_the_run_reads_as_one_span_table_in_each_reader(run):
    import duckdb
    import pandas as pd
    import pyarrow.dataset as ds
    import pyarrow.parquet as pq

    want = _span_ids(hotspan.load(run).column("span_id").to_pylist())
    assert _span_ids(pd.read_parquet(run)["span_id"]) == want
    assert _span_ids(pq.read_table(run).column("span_id").to_pylist()) == want
    assert _span_ids(ds.dataset(run).to_table().column("span_id").to_pylist()) == want
    for glob in ("*.parquet", "**/*.parquet"):
        rows = duckdb.sql(f"SELECT span_id FROM read_parquet('{run}/{glob}')").fetchall()
        assert _span_ids(r[0] for r in rows) == want
    pl = pytest.importorskip("polars")
    for source in (str(run / "*.parquet"), str(run / "**/*.parquet")):
        assert _span_ids(pl.scan_parquet(source).collect()["span_id"]) == want
    # the bare directory: polars lists every file under it; "_" files are the counters'
    got = pl.scan_parquet(run, hidden_file_prefix="_").collect()["span_id"]
    assert _span_ids(got) == want


@pytest.mark.slow
def test_spark_skips_the_counters_folder(run):
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("hotspan-counters")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    try:
        rows = session.read.parquet(str(run)).select("span_id").collect()
    finally:
        session.stop()
    assert _span_ids(r[0] for r in rows) == _span_ids(
        hotspan.load(run).column("span_id").to_pylist()
    )


def test_recover_leaves_counters_out_of_a_dead_processs_spans(tmp_path):
    """Counter records share the flight file's blocks with the spans: recover() skips them
    (they take no span id) and rebuilds the spans' ids and tree exactly."""
    import os
    import signal

    from hotspan.recording.flight import recover

    flight = tmp_path / "counters.flight"
    code = """
import os, signal, sys, hotspan
hotspan.configure(flight=sys.argv[1], drain_thread=False)
outer, inner = hotspan.span("outer"), hotspan.span("inner")
for i in range(200):
    with outer:
        hotspan.counter("queue", i)
        with inner:
            hotspan.counter("queue", -i)
        hotspan.counter("queue", 2 * i)
print("killing", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run(
        [sys.executable, "-c", code, str(flight)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -signal.SIGKILL and done.stdout.strip() == "killing", done.stderr
    rows = recover(flight).to_pylist()
    assert sorted({r["name"] for r in rows}) == ["inner", "outer"]
    assert len(rows) == 400
    outer_ids = {r["span_id"] for r in rows if r["name"] == "outer"}
    assert len(outer_ids) == 200
    assert all(
        r["parent_id"] in outer_ids and r["depth"] == 1 for r in rows if r["name"] == "inner"
    )
    assert os.path.exists(flight)


def test_a_consumer_that_stops_taking_holds_at_most_its_bound(tmp_path):
    """drain_counters() called once, then a long recording into a directory: the recording
    gets every value, drain_counters()'s own queue keeps the oldest up to its bound
    (MAX_QUEUED_ROWS, here lowered) and drops the rest, counted: recorded = drained +
    dropped, and the process does not grow with the recording's length."""
    out = tmp_path / "run"
    done = run_python(
        f"""
        import json, hotspan
        from hotspan import counters
        counters.MAX_QUEUED_ROWS = 1000
        hotspan.drain_counters()                     # the user's queue, from now on
        rec = hotspan.record({str(out)!r})
        for i in range(5000):
            hotspan.counter("queue", i)
            if i % 500 == 499:
                rec.flush()                          # the recording takes as it goes
        rec.stop()
        mine = hotspan.drain_counters()
        print(json.dumps({{"values": mine.column("value").to_pylist(),
                          "dropped": hotspan.dropped(detail=True)["counters"]}}))
        """
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["values"] == [float(i) for i in range(1000)]  # the oldest, in order
    assert got["dropped"] == 4000
    assert hotspan.load_counters(out).column("value").to_pylist() == [float(i) for i in range(5000)]
