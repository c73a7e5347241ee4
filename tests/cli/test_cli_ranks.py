"""``hotspan ranks DIR`` (issue 31): prints what hotspan.analysis.ranks.ranks_summary
answers, fitted to the terminal, or as JSON; bad input is one line and exit 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import hotspan
from hotspan.testing import Straggler, many_ranks


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = many_ranks(
        16,
        60,
        [Straggler(3, "data.fetch", 20_000_000, 0.8), Straggler(11, "optimizer", 3_000_000, 0.5)],
        seed=3,
    )
    return run, run.write(tmp_path_factory.mktemp("ranks") / "run")


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def hotspan_cli(capsys, monkeypatch):
    """``hotspan.cli.main`` in this process (the command's code path, without an
    interpreter's start-up a test); the terminal ``columns`` wide."""
    from hotspan.cli import main

    def run(*args, columns=100):
        monkeypatch.setenv("COLUMNS", str(columns))
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return run


@pytest.mark.slow
def test_the_command_runs_as_a_program(run_dir):
    _, directory = run_dir
    done = subprocess.run(
        [sys.executable, "-m", "hotspan", "ranks", str(directory), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["ranks"] == 16


def test_ranks_names_the_stragglers_and_why(hotspan_cli, run_dir):
    run, directory = run_dir
    done = hotspan_cli("ranks", directory)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.startswith("16 ranks, 60 steps of ")
    assert "stragglers (2):" in out
    expected = hotspan.stragglers(directory)
    for row in expected.filter(expected.column("straggler")).to_pylist():
        assert row["reason"] in out
    assert "rank 3: data.fetch +" in out and "rank 11: optimizer +" in out
    assert "critical path" in out and "data.fetch" in out
    for line in out.splitlines():
        assert len(line) <= 100


def test_ranks_fits_a_narrow_terminal_by_leaving_columns_out(hotspan_cli, run_dir):
    _, directory = run_dir
    done = hotspan_cli("ranks", directory, "--top", "4", columns=48)
    assert done.returncode == 0, done.stderr
    header = next(
        line for line in done.stdout.splitlines() if line.split()[:2] == ["rank", "blame"]
    )
    assert "blame" in header and "step if median" not in header
    assert "…" not in done.stdout  # columns left out, not cut
    assert all(len(line) <= 48 for line in done.stdout.splitlines())
    assert "(12 more ranks: --top 16 or --json)" in done.stdout


def test_ranks_json_is_the_librarys_answer(hotspan_cli, run_dir):
    _, directory = run_dir
    done = hotspan_cli("ranks", directory, "--json")
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    from hotspan.analysis.ranks import ranks_summary

    assert answer == json.loads(json.dumps(ranks_summary(directory)))
    assert [r["rank"] for r in answer["stragglers"] if r["straggler"]] == [3, 11]
    assert sum(r["blame_ns"] for r in answer["stragglers"]) == answer["total_wait_ns"]
    assert sum(r["wait_ns"] for r in answer["stragglers"]) == answer["total_wait_ns"]


def test_ranks_without_a_straggler_says_so(hotspan_cli, tmp_path):
    directory = many_ranks(8, 30, [], seed=11).write(tmp_path / "run")
    done = hotspan_cli("ranks", directory)
    assert done.returncode == 0, done.stderr
    assert "no straggler" in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["ranks", "/nonexistent/run"], "/nonexistent/run: no such trace file or directory"),
        (["ranks", "{dir}", "--alpha", "3"], "alpha: expected a number between 0 and 1"),
        (["ranks", "{dir}", "--top", "-1"], "--top: expected a count of 0 or more"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(hotspan_cli, run_dir, args, message):
    _, directory = run_dir
    done = hotspan_cli(*(a.replace("{dir}", str(directory)) for a in args))
    assert done.returncode == 2
    assert message in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_a_corrupt_part_is_one_line_naming_it(hotspan_cli, tmp_path):
    directory = many_ranks(4, 5, [], seed=1).write(tmp_path / "run")
    bad = sorted(directory.glob("*.parquet"))[0]
    bad.write_bytes(b"PAR1 not really")
    done = hotspan_cli("ranks", directory)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_rank_that_skipped_a_collective_of_its_group_is_said(tmp_path, hotspan_cli):
    import pyarrow as pa

    run = many_ranks(4, 12, [], seed=5)
    rows = run.table().to_pylist()
    for row in rows:  # as torch.distributed's instrumentation marks them: one group
        if row["category"] == "train/comms":
            row["category"] = "train/comms:world"
    # rank 2 skips step 3's all_reduce (collective #6 of the group)
    rows = [
        r
        for r in rows
        if not (
            r["rank"] == 2 and r["name"] == "all_reduce" and r["start_ns"] == run.start_ns[3, 2, 3]
        )
    ]
    path = tmp_path / "run.parquet"
    hotspan.export(pa.Table.from_pylist(rows, schema=run.table().schema), str(path))
    result = hotspan_cli("ranks", path)
    assert result.returncode == 0, result.stderr
    assert "6 collectives matched" in result.stdout
    assert (
        "group world: ranks disagree at collective #6 (rank 2 in all_gather; ranks 0, 1, 3 in "
        "all_reduce)" in result.stdout
    )


@pytest.mark.parametrize("engine", ["memory", "duckdb"])
def test_ranks_engine_gives_the_same_answer(hotspan_cli, run_dir, engine):
    """``--engine`` picks who reads the run, as for ``stats``; every engine answers alike."""
    _, directory = run_dir
    default = hotspan_cli("ranks", directory, "--json")
    chosen = hotspan_cli("ranks", directory, "--json", "--engine", engine)
    assert chosen.returncode == 0, chosen.stderr
    assert json.loads(chosen.stdout) == json.loads(default.stdout)


@pytest.mark.slow
def test_ranks_on_spark_gives_the_same_answer(run_dir):
    """``hotspan ranks --engine spark`` (a local Spark session) prints the library's answer."""
    _, directory = run_dir
    done = subprocess.run(
        [sys.executable, "-m", "hotspan", "ranks", str(directory), "--json", "--engine", "spark"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    from hotspan.analysis.ranks import ranks_summary

    assert json.loads(done.stdout) == json.loads(json.dumps(ranks_summary(directory)))
