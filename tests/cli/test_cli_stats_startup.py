"""A fresh ``hotspan stats`` loads what its answer needs and no more: never pandas, which
pyarrow would import on its first array (about 0.8 s of the command's start-up), on either
engine, in every output; and the answer is still the library's. Each check runs in a fresh
interpreter (this one has pandas loaded already)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap

import pytest

import hotspan
from hotspan.formats.dataset import write_part

#: Runs the command in a fresh interpreter, then prints whether pandas was loaded.
COMMAND = textwrap.dedent(
    """
    import json, sys
    from hotspan.cli import main
    code = main(sys.argv[1:])
    print(json.dumps({"exit": code, "pandas": "pandas" in sys.modules}))
    """
)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """Two ranks of steps (train > compute, comms) as a run directory of parts."""
    hotspan.enable()
    directory = tmp_path_factory.mktemp("startup") / "run"
    for rank in (0, 1):
        hotspan.configure(rank=rank)
        hotspan.drain()
        for _ in range(20):
            with hotspan.span("step", "train"):
                with hotspan.span("forward", "compute"):
                    sum(range(2_000 * (rank + 1)))
                with hotspan.span("allreduce", "comms", arg=1 << 20):
                    sum(range(500))
        write_part(hotspan.drain(), directory, rank=rank, pid=1000 + rank, seq=0, token="ab12")
    hotspan.configure(rank=0)
    return directory


def fresh_stats(*args: str) -> tuple[str, dict]:
    """``hotspan stats ARGS`` in a fresh interpreter: (its output, {exit, pandas})."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTSPAN_")}
    env["COLUMNS"] = "160"
    result = subprocess.run(
        [sys.executable, "-c", COMMAND, "stats", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    output, _, last = result.stdout.rstrip("\n").rpartition("\n")
    return output, json.loads(last)


@pytest.mark.parametrize("engine", ["duckdb", "memory"])
def test_stats_json_loads_no_pandas_and_answers_as_the_library(run_dir, engine):
    output, state = fresh_stats(str(run_dir), "--engine", engine, "--json")
    assert state == {"exit": 0, "pandas": False}
    expected = [
        {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}
        for row in hotspan.stats(run_dir, engine=engine).to_pylist()
    ]
    key = lambda row: (row["category"], row["name"])  # noqa: E731
    assert sorted(json.loads(output), key=key) == sorted(expected, key=key)


def test_stats_table_with_phases_loads_no_pandas(run_dir):
    output, state = fresh_stats(str(run_dir), "--engine", "duckdb", "--phases")
    assert state == {"exit": 0, "pandas": False}
    assert "allreduce" in output and "train/compute" in output  # the stats, then the phases


def test_pandas_stays_usable_after_the_command_in_the_same_process(run_dir):
    """The refusal lasts the command: a program that runs it (a notebook, a script) and then
    wants pandas gets it."""
    code = textwrap.dedent(
        f"""
        import sys
        from hotspan.cli import main
        assert main(["stats", {str(run_dir)!r}, "--engine", "duckdb", "--json"]) == 0
        import pandas, pyarrow as pa
        frame = pa.table({{"a": [1, 2]}}).to_pandas()
        print(type(frame).__name__, int(frame["a"].sum()))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "DataFrame 3"
