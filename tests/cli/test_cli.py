"""The ``hotspan`` command line: the demo (the main job), help, bad input."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from hotspan._schema import SPAN_SCHEMA


def hotspan_cli(*args, cwd=None, columns=None):
    env = dict(os.environ)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    return subprocess.run(
        [sys.executable, "-m", "hotspan", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
        env=env,
    )


@pytest.mark.slow
def test_demo_writes_parquet_and_prints_a_summary(tmp_path):
    proc = hotspan_cli("demo", "--threads", "3", "--steps", "10", cwd=tmp_path, columns=160)
    assert proc.returncode == 0, proc.stderr
    assert max(len(line) for line in proc.stdout.splitlines()) <= 160
    out = tmp_path / "hotspan-demo.parquet"
    assert out.exists()
    assert stat.S_IMODE(out.stat().st_mode) & 0o044  # readable by others, like any file written
    t = pq.read_table(out)
    assert t.schema.remove_metadata().names == SPAN_SCHEMA.names
    assert t.schema.metadata[b"hotspan.version"]
    names = t.column("name").to_pylist()
    assert names.count("step") == 30 and names.count("allreduce") == 30
    assert names.count("matmul") == 30 * 12
    threads = set(t.column("thread_name").to_pylist())
    assert {"worker-0", "worker-1", "worker-2"} <= threads
    cats = {(r["name"], r["category"]) for r in t.select(["name", "category"]).to_pylist()}
    assert ("allreduce", "train/comms") in cats and ("matmul", "train/compute") in cats
    args = [r["arg"] for r in t.select(["name", "arg"]).to_pylist() if r["name"] == "allreduce"]
    assert all(a and a > 0 for a in args)
    # the summary: spans, threads, dropped, per-name count and mean
    assert (
        f"{t.num_rows:,} spans" in proc.stdout
        and "4 threads" in proc.stdout
        and "0 dropped" in proc.stdout
    )
    assert "allreduce" in proc.stdout and "mean" in proc.stdout
    # the stats table and the Gantt chart, one row per worker
    assert "p99" in proc.stdout and "self" in proc.stdout and "self %" in proc.stdout
    assert sum(1 for line in proc.stdout.splitlines() if line.startswith("r0 worker-")) == 3
    # a Chrome JSON copy beside the Parquet, for Perfetto UI, with the same spans
    beside = tmp_path / "hotspan-demo.json"
    from hotspan.formats import load

    assert load(beside).num_rows == t.num_rows
    assert sorted(tmp_path.iterdir()) == [beside, out]  # no temporary file left behind


@pytest.mark.slow
def test_demo_output_option(tmp_path):
    target = tmp_path / "sub" / "d.parquet"
    proc = hotspan_cli("demo", "--threads", "1", "--steps", "2", "-o", str(target))
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(target).num_rows > 0


@pytest.mark.slow
def test_help_has_examples():
    proc = hotspan_cli("--help")
    assert proc.returncode == 0 and "example" in proc.stdout
    proc = hotspan_cli("demo", "--help")
    assert proc.returncode == 0 and "example" in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, message",
    [
        (["demo", "--threads", "0"], "--threads and --steps must be at least 1"),
        (["demo", "--threads", "many"], "invalid int value"),
        (["nosuchcommand"], "invalid choice"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_no_traceback(args, message, tmp_path):
    proc = hotspan_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_demo_refuses_a_directory_as_output(tmp_path):
    proc = hotspan_cli("demo", "-o", str(tmp_path))
    assert proc.returncode == 2
    assert str(tmp_path) in proc.stderr and "Traceback" not in proc.stderr


def test_console_script_is_installed():
    import shutil
    from pathlib import Path

    beside = Path(sys.executable).parent / "hotspan"
    exe = str(beside) if beside.exists() else shutil.which("hotspan")
    assert exe, "pip install should put a hotspan script beside the interpreter or on PATH"
    proc = subprocess.run([exe, "--version"], capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.startswith("hotspan ")
