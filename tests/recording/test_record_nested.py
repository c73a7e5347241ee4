"""record() wherever a program runs: blocks nest and overlap (each its own cursor), and a
program's own record(dest) works under `hotspan run` (-o FILE and -o DIR/) and HOTSPAN_OUT,
the launcher's destination still getting every span."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow.compute as pc
import pytest

import hotspan


def _names(table) -> list[str]:
    return sorted(table.column("name").to_pylist())


def test_two_overlapping_records_each_get_what_ran_while_they_ran(fresh, tmp_path):
    outer = hotspan.record(tmp_path / "outer.parquet").start()
    with hotspan.span("before"):
        pass
    with hotspan.record(tmp_path / "inner.parquet"):  # nested inside outer
        with hotspan.span("both"):
            pass
        with hotspan.record(tmp_path / "run"):  # and a third, a directory
            with hotspan.span("all_three"):
                pass
    with hotspan.span("after"):
        pass
    outer.stop()
    assert _names(hotspan.load(tmp_path / "outer.parquet")) == ["after", "all_three", "before", "both"]
    assert _names(hotspan.load(tmp_path / "inner.parquet")) == ["all_three", "both"]
    assert _names(hotspan.load(tmp_path / "run")) == ["all_three"]


PROGRAM = textwrap.dedent("""
    import sys, hotspan
    with hotspan.span("outside"):
        pass
    with hotspan.record(sys.argv[1]):
        for _ in range(3):
            with hotspan.span("inside"):
                pass
    print("done")
""")


def _run(args: list[str], env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    out = subprocess.run(args, capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}, cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert "done" in out.stdout
    assert "already recording" not in out.stderr
    return out


@pytest.mark.slow
@pytest.mark.parametrize("launcher_output", ["trace.parquet", "rundir/"])
def test_program_records_itself_under_hotspan_run(tmp_path, launcher_output):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    own = tmp_path / "own.parquet"
    _run([sys.executable, "-m", "hotspan", "run", "-o", f"{tmp_path}/{launcher_output}", str(program), str(own)])
    assert _names(hotspan.load(own)) == ["inside"] * 3
    launcher = hotspan.load(tmp_path / launcher_output)
    assert _names(launcher) == ["inside"] * 3 + ["outside"]
    if launcher_output.endswith("/"):
        assert list((tmp_path / "rundir").glob("part-r0-*.parquet"))  # a run directory, left as it is


@pytest.mark.slow
def test_program_records_itself_under_hotspan_out(tmp_path):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    own = tmp_path / "own.parquet"
    _run([sys.executable, str(program), str(own)], env={"HOTSPAN_OUT": str(tmp_path / "env") + os.sep})
    assert _names(hotspan.load(own)) == ["inside"] * 3
    env = hotspan.load(tmp_path / "env")
    assert pc.sum(pc.equal(env.column("name"), "inside")).as_py() == 3
    assert _names(env) == ["inside"] * 3 + ["outside"]
