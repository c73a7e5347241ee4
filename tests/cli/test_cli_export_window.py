"""`hotspan export SRC OUT --since/--until --rank R[,R...]` exports a window of a run: every span
that overlaps the window on those ranks (one that starts before --since and ends after it too,
as a timeline shows it), none other (issue 33, item 2). `stats` keeps its meaning: a span is in
its window when it starts there."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

import hotspan
from hotspan.formats.dataset import write_part
from hotspan.schema import SPAN_SCHEMA

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def _cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "hotspan", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _rank(rank: int) -> pa.Table:
    """One rank's spans: an outer span over the whole run (0-10 s), a step every 100 ms (60 ms
    long), a span ending exactly at 2 s, one across 2 s, and an instant at 2 s."""
    rows = [("outer", 0, 0, 10_000 * MS)]
    rows += [(f"step{k}", 1, k * 100 * MS, k * 100 * MS + 60 * MS) for k in range(100)]
    rows += [
        ("touching", 2, 1_950 * MS, 2_000 * MS),
        ("straddling", 2, 1_970 * MS, 2_030 * MS),
        ("instant", 2, 2_000 * MS, 2_000 * MS),
    ]
    n = len(rows)
    starts = np.array([T0 + r[2] for r in rows], np.int64)
    ends = np.array([T0 + r[3] for r in rows], np.int64)
    ids = np.arange(rank * 1000 + 1, rank * 1000 + 1 + n, dtype=np.uint64)
    parents = [None] + [int(ids[0])] * (n - 1)
    columns = {
        "span_id": pa.array(ids),
        "parent_id": pa.array(parents, pa.uint64()),
        "name": pa.array([r[0] for r in rows]),
        "category": pa.array(["work"] * n),
        "start_ns": pa.array(starts),
        "end_ns": pa.array(ends),
        "duration_ns": pa.array(ends - starts),
        "depth": pa.array(np.array([min(r[1], 1) for r in rows], np.int32)),
        "thread_id": pa.array(np.full(n, 7, np.int64)),
        "thread_name": pa.array(["main"] * n),
        "pid": pa.array(np.full(n, 100 + rank, np.int64)),
        "rank": pa.array(np.full(n, rank, np.int32)),
        "arg": pa.array(np.zeros(n, np.int64)),
        "error": pa.array(np.zeros(n, bool)),
        "self_ns": pa.array(ends - starts),
    }
    schema = pa.schema([f for f in SPAN_SCHEMA if f.name in columns])
    return pa.table([columns[f.name] for f in schema], schema=schema)


def _expected(ranks, low, high):
    """(rank, name) of the spans overlapping [low, high) ns from the run's start, by hand."""
    out = set()
    for rank in ranks:
        table = _rank(rank)
        for name, start, end in zip(
            table["name"].to_pylist(), table["start_ns"].to_pylist(), table["end_ns"].to_pylist()
        ):
            start, end = start - T0, end - T0
            if start < high and (end > low or start >= low):
                out.add((rank, name))
    return out


@pytest.fixture()
def run_dir(tmp_path):
    directory = tmp_path / "run"
    for rank in (0, 1, 2):
        write_part(_rank(rank), directory, rank=rank, pid=100 + rank, seq=0)
    return directory


@pytest.mark.parametrize("suffix", [".parquet", ".pftrace"])
def test_export_a_window_of_some_ranks_holds_every_span_overlapping_it(run_dir, tmp_path, suffix):
    out = tmp_path / f"window{suffix}"
    done = _cli("export", run_dir, out, "--since", "2", "--until", "3.03", "--rank", "0,2")
    assert done.returncode == 0, done.stderr
    table = hotspan.load(out)
    got = list(zip(table["rank"].to_pylist(), table["name"].to_pylist()))
    assert len(got) == len(set(got))  # each span once
    want = _expected((0, 2), 2_000 * MS, 3_030 * MS)
    assert set(got) == want
    # the spans the window's edges test: the outer span (begun before, ends after), the one
    # across --since, the instant at it; the one ending exactly at --since is not in it
    names = {name for _rank, name in got}
    assert {"outer", "straddling", "instant", "step20", "step30"} <= names
    assert not names & {"touching", "step19", "step31"}
    assert f"{len(want):,} spans" in done.stdout


def test_export_window_in_epoch_ns(run_dir, tmp_path):
    out = tmp_path / "window.parquet"
    since, until = T0 + 5_000 * MS, T0 + 5_001 * MS
    done = _cli("export", run_dir, out, "--since", since, "--until", until, "--rank", "1")
    assert done.returncode == 0, done.stderr
    table = hotspan.load(out)
    assert set(zip(table["rank"].to_pylist(), table["name"].to_pylist())) == {
        (1, "outer"),
        (1, "step50"),
    }


def test_stats_window_still_means_starts_in_it(run_dir):
    """The library's filter: starts-in by default (stats' meaning), overlap on request."""
    table = hotspan.load(run_dir)
    starts = hotspan.SpanFilter(since=2, until=3.03, ranks=(0,))
    overlaps = hotspan.SpanFilter(since=2, until=3.03, ranks=(0,), overlap=True)
    started = hotspan.stats(table, by=("name",), filter=starts)
    overlapping = hotspan.stats(table, by=("name",), filter=overlaps)
    assert set(overlapping["name"].to_pylist()) == {n for _r, n in _expected((0,), 2e9, 3.03e9)}
    assert "outer" not in started["name"].to_pylist()
    assert "straddling" not in started["name"].to_pylist()
    assert "instant" in started["name"].to_pylist()


def test_a_bad_window_is_one_line_and_exit_2(run_dir, tmp_path):
    done = _cli("export", run_dir, tmp_path / "w.parquet", "--since", "soon")
    assert done.returncode == 2
    assert "--since" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "w.parquet").exists()


def test_every_source_gives_the_same_window(run_dir, tmp_path):
    """A run directory (the window read from the row groups reaching it), a Parquet file, a
    Chrome JSON trace (loaded whole, then filtered), and the window with a filter besides:
    the same spans."""
    whole = hotspan.load(run_dir)
    hotspan.export(whole, tmp_path / "run.parquet")
    hotspan.export(whole, tmp_path / "run.json")
    want = _expected((0, 2), 2_000 * MS, 3_030 * MS)
    window = ("--since", "2", "--until", "3.03", "--rank", "0,2")
    for source, extra in (
        (run_dir, ()),
        (tmp_path / "run.parquet", ()),
        (tmp_path / "run.json", ()),
        (run_dir, ("--filter", "name~.")),
    ):
        out = tmp_path / "out.parquet"
        done = _cli("export", source, out, *window, *extra)
        assert done.returncode == 0, done.stderr
        table = hotspan.load(out)
        assert set(zip(table["rank"].to_pylist(), table["name"].to_pylist())) == want, source
        assert table.num_rows == len(want)
        out.unlink()
