"""Recording to a directory from real processes: HOTSPAN_OUT, exit, SIGTERM, SIGKILL, spawn, fork."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.schema import SPAN_SCHEMA
from hotspan.formats.dataset import META_RANKS

from _procs import DEADLINE_S, check_tree, env, finish, kill, read_line, spans_per_rank, start_rank

ROOT = Path(__file__).resolve().parents[2]


def _parts(directory: Path) -> dict[Path, int]:
    import pyarrow.parquet as pq

    return {p: pq.ParquetFile(p).metadata.num_rows for p in directory.glob("part-*.parquet")}


@pytest.mark.slow
def test_four_ranks_into_a_directory(tmp_path):
    out = tmp_path / "run"
    procs = [
        start_rank(rank, str(out), HOTSPAN_FLUSH_INTERVAL="0.1", T_PAUSE="0.03")
        for rank in range(4)
    ]
    try:
        for proc in procs:
            code, _out, err = finish(proc)
            assert code == 0, err
            assert "Traceback" not in err
    finally:
        kill(*procs)
    table = hotspan.load(out)
    assert table.schema.equals(SPAN_SCHEMA)
    counts = dict(zip(*pc.value_counts(table.column("rank")).flatten()))
    assert {r.as_py(): c.as_py() for r, c in counts.items()} == {
        r: spans_per_rank() for r in range(4)
    }
    assert len(list(out.glob("part-*.parquet"))) > 4  # flushed as it went
    ranks = json.loads(table.schema.metadata[META_RANKS])
    assert sorted(ranks) == ["0", "1", "2", "3"]
    assert all("anchor_real_ns" in procs_[0]["clock"] for procs_ in ranks.values())
    check_tree(table)


@pytest.mark.slow
def test_sigterm_flushes_then_dies_of_sigterm(tmp_path):
    out = tmp_path / "run"
    # A long interval: nothing is flushed before the signal.
    proc = start_rank(0, str(out), HOTSPAN_FLUSH_INTERVAL="600", T_WAIT="1")
    try:
        read_line(proc, r"recorded 300")
        assert sum(_parts(out).values()) == 0  # the metadata part only (written at start)
        proc.send_signal(signal.SIGTERM)
        code, _out, err = finish(proc)
    finally:
        kill(proc)
    assert code == -signal.SIGTERM, err
    assert hotspan.load(out).num_rows == 300


@pytest.mark.slow
def test_sigterm_leaves_the_programs_own_handler_alone(tmp_path):
    code = (
        "import signal, sys\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        "import hotspan\n"
        "assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL\n"
        "with hotspan.span('x'): pass\n"
        "print('ready', flush=True)\n"
        "import time; time.sleep(60)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env(HOTSPAN_OUT=str(tmp_path / "run")),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read_line(proc, "ready")
        proc.send_signal(signal.SIGTERM)
        status, _out, err = finish(proc)
    finally:
        kill(proc)
    assert status == 7, err  # the program's handler ran; its sys.exit ran atexit, which flushed
    assert hotspan.load(tmp_path / "run").num_rows == 1


@pytest.mark.slow
def test_sigkill_keeps_everything_flushed_before(tmp_path):
    # with a part per flush (HOTSPAN_RAW_LOG=0): the parts written before the kill stay whole
    out = tmp_path / "run"
    proc = start_rank(
        3,
        str(out),
        HOTSPAN_FLUSH_INTERVAL="0.05",
        T_LOOP="1",
        T_STEPS="200",
        T_PAUSE="0.0002",
        HOTSPAN_RAW_LOG="0",
    )
    try:
        deadline = time.monotonic() + DEADLINE_S
        while len(_parts(out)) < 4:
            assert time.monotonic() < deadline, "the rank flushed fewer than 4 parts in time"
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        before = _parts(out)
        proc.kill()
        proc.wait(timeout=DEADLINE_S)
    finally:
        kill(proc)
    after = _parts(out)
    assert set(before) <= set(after)
    assert all(after[p] == rows for p, rows in before.items())  # untouched by the kill
    table = hotspan.load(out)  # a torn part (if any) stays invisible
    assert table.num_rows == sum(after.values()) >= sum(before.values()) > 0
    assert set(table.column("rank").to_pylist()) == {3}


def _rows(out) -> int:
    try:
        return hotspan.load(out).num_rows
    except (OSError, ValueError):  # not there yet
        return 0


@pytest.mark.slow
def test_sigkill_keeps_every_span_read_before(tmp_path):
    # the raw log (the default): what a reader read while the run was live is still there
    # after the kill, and more
    out = tmp_path / "run"
    proc = start_rank(3, str(out), T_LOOP="1", T_STEPS="200", T_PAUSE="0.0002")
    try:
        deadline = time.monotonic() + DEADLINE_S
        while _rows(out) < 1000:
            assert time.monotonic() < deadline, "the rank wrote fewer than 1,000 spans in time"
            assert proc.poll() is None, proc.stderr.read()
            time.sleep(0.05)
        before = set(hotspan.load(out).column("span_id").to_pylist())
        proc.kill()
        proc.wait(timeout=DEADLINE_S)
    finally:
        kill(proc)
    table = hotspan.load(out)
    after = table.column("span_id").to_pylist()
    assert before <= set(after) and len(after) == len(set(after)) >= len(before)
    assert set(table.column("rank").to_pylist()) == {3}


@pytest.mark.slow
def test_bad_hotspan_out_warns_and_the_program_runs(tmp_path):
    code = "import hotspan\nwith hotspan.span('x'): pass\nprint('ran')\n"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env(HOTSPAN_OUT="ftp://nowhere/x"),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0 and result.stdout == "ran\n"
    assert "HOTSPAN_OUT=ftp://nowhere/x: not recording" in result.stderr


@pytest.mark.slow
def test_multiprocessing_spawn_example(tmp_path):
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "multiprocess_spawn.py"), str(out), "3", "10"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    table = hotspan.load(out)
    assert sorted(set(table.column("rank").to_pylist())) == [0, 1, 2]
    assert table.num_rows == 3 * 10 * 3
    check_tree(table)


@pytest.mark.slow
def test_fork_children_record_into_the_same_directory(tmp_path):
    code = (
        "import multiprocessing as mp, os, hotspan\n"
        "def child(i):\n"
        "    with hotspan.span('child'): pass\n"
        "if __name__ == '__main__':\n"
        "    with hotspan.span('parent'): pass\n"
        "    ps = [mp.get_context('fork').Process(target=child, args=(i,)) for i in range(2)]\n"
        "    [p.start() for p in ps]; [p.join(30) for p in ps]\n"
        "    assert all(p.exitcode == 0 for p in ps)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env(HOTSPAN_OUT=str(tmp_path / "run")),
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert result.returncode == 0, result.stderr
    table = hotspan.load(tmp_path / "run")
    assert sorted(table.column("name").to_pylist()) == ["child", "child", "parent"]
    assert len(set(table.column("pid").to_pylist())) == 3
