"""`hotspan export DIR OUT --run ID` exports that run only (issue 30, item 5); an export ended
by a signal leaves no partial file, and a command given a file where it needs a directory
says so in one line (issue 30, item 4)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pyarrow as pa
import pytest

import hotspan
from hotspan._schema import META_RUN
from hotspan.formats import export
from hotspan.formats.dataset import write_part
from hotspan.schema import SPAN_SCHEMA


def _cli(*args, cwd=None, timeout=120):
    return subprocess.run(
        [sys.executable, "-m", "hotspan", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=timeout,
    )


def _spans(
    n: int, name: str, run: str | None = None, start: int = 1_700_000_000_000_000_000, ids: int = 1
):
    """``n`` root spans named ``name`` on one thread, 1 us each; the run id in the metadata."""
    starts = start + np.arange(n, dtype=np.int64) * 2_000
    durations = np.full(n, 1_000, np.int64)
    columns = {
        "span_id": pa.array(np.arange(ids, ids + n, dtype=np.uint64)),
        "parent_id": pa.nulls(n, pa.uint64()),
        "name": pa.array([name] * n),
        "category": pa.array(["work"] * n),
        "start_ns": pa.array(starts),
        "end_ns": pa.array(starts + durations),
        "duration_ns": pa.array(durations),
        "depth": pa.array(np.zeros(n, np.int32)),
        "thread_id": pa.array(np.full(n, 7, np.int64)),
        "thread_name": pa.array(["main"] * n),
        "pid": pa.array(np.full(n, 100, np.int64)),
        "rank": pa.array(np.zeros(n, np.int32)),
        "arg": pa.array(np.arange(n, dtype=np.int64)),
        "error": pa.array(np.zeros(n, bool)),
        "self_ns": pa.array(durations),
    }
    schema = pa.schema([f for f in SPAN_SCHEMA if f.name in columns])
    table = pa.table([columns[f.name] for f in schema], schema=schema)
    if run is not None:
        table = table.replace_schema_metadata({META_RUN: run.encode()})
    return table


def test_export_run_selects_that_run(tmp_path):
    # was: every run of the directory exported (5 + 3 spans), --run ignored
    directory = tmp_path / "runs"
    write_part(_spans(5, "first", "run-a"), directory, rank=0, pid=100, seq=0)
    write_part(
        _spans(3, "second", "run-b", start=1_800_000_000_000_000_000, ids=1_000),
        directory,
        rank=0,
        pid=101,
        seq=0,
    )
    for run, name, count in (("run-a", "first", 5), ("run-b", "second", 3)):
        out = tmp_path / f"{run}.parquet"
        done = _cli("export", directory, out, "--run", run)
        assert done.returncode == 0, done.stderr
        table = hotspan.load(out)
        assert table.num_rows == count and set(table.column("name").to_pylist()) == {name}
        assert table.schema.metadata[META_RUN].decode() == run
    unknown = _cli("export", directory, tmp_path / "x.parquet", "--run", "nope")
    assert unknown.returncode == 2 and len(unknown.stderr.strip().splitlines()) == 1
    assert "nope" in unknown.stderr and not (tmp_path / "x.parquet").exists()


@pytest.mark.parametrize("command", ["runs", "compact"])
def test_a_file_where_a_directory_is_needed_is_one_line(tmp_path, command):
    # was: "hotspan runs: [Errno 20] Cannot list directory '...'. Detail: [errno 20] Not a directory"
    trace = tmp_path / "t.parquet"
    export(_spans(3, "s"), trace)
    done = _cli(command, trace)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and str(trace) in lines[0], done.stderr
    assert "not a dataset directory" in lines[0] and "Errno" not in lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGUSR1], ids=["SIGTERM", "SIGUSR1"])
def test_an_export_ended_by_a_signal_leaves_no_partial_file(tmp_path, signum):
    # was: a hidden `.big.json.XXXX.part` of 56-250 MB left beside the output
    big = tmp_path / "big.parquet"
    export(_spans(1_500_000, "step"), big)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "hotspan", "export", str(big), str(out_dir / "big.json")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        partial = []
        while time.monotonic() < deadline and proc.poll() is None:  # mid-export: the file grows
            partial = [p for p in out_dir.iterdir() if p.name.endswith(".part")]
            if partial and partial[0].stat().st_size > 0:
                break
            time.sleep(0.005)
        assert partial and proc.poll() is None, "the export ended before it could be signalled"
        proc.send_signal(signum)
        _out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == -signum, err  # it dies of the signal, as without the cleanup
    assert os.listdir(out_dir) == [], os.listdir(out_dir)  # nothing left, hidden or not
    assert f"ended by {signal.Signals(signum).name}" in err
