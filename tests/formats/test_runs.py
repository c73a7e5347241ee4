"""Runs kept apart: a run id drawn by a run's first process and inherited by its children
and ranks, or the launcher's job id (one job, one run); every part carries it; a directory
holding several runs reads the newest and says so in one line, another or all on request;
`hotspan runs DIR` lists them."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hotspan
from hotspan._schema import META_RUN
from hotspan.formats.dataset import META_RANKS, SeveralRunsWarning, list_runs, part_metadata  # noqa: F401

#: Every variable a run id can come from (hotspan._run), and what a test's recording sets.
LAUNCHER_VARS = (
    "HOTSPAN_RUN_ID",
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
    "HOTSPAN_OUT",
    "HOTSPAN_RECORD_CHILDREN",
    "RANK",
)

PROGRAM = textwrap.dedent("""
    import multiprocessing as mp, os, sys, hotspan

    def child():
        with hotspan.span("child"):
            pass

    if __name__ == "__main__":
        with hotspan.span("epoch"):
            p = mp.get_context("fork").Process(target=child)
            p.start(); p.join()
        print(os.environ.get("HOTSPAN_RUN_ID"))
""")


def _record(tmp_path, out, env=None):
    program = tmp_path / "prog.py"
    program.write_text(PROGRAM)
    full = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    full.update({"HOTSPAN_OUT": str(out) + os.sep, **(env or {})})
    done = subprocess.run(
        [sys.executable, str(program)], capture_output=True, text=True, timeout=300, env=full
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


@pytest.mark.slow
def test_two_runs_in_one_directory_stay_apart(tmp_path):
    out = tmp_path / "runs"
    first = _record(tmp_path, out)
    second = _record(tmp_path, out)
    assert first and second and first != second
    # every part carries its run: the forked child's too
    metas = [part_metadata(p) for p in out.glob("part-*.parquet")]
    assert len(metas) >= 4
    import pyarrow.parquet as pq

    runs_in_parts = {
        pq.read_schema(p).metadata[META_RUN].decode() for p in out.glob("part-*.parquet")
    }
    assert runs_in_parts == {first, second}
    # the newest run is read, and said so
    with pytest.warns(SeveralRunsWarning, match=f"reading run {second} \\(newest of 2;"):
        newest = hotspan.load(out)
    assert newest.num_rows == 2
    both = hotspan.load(out, run="all")
    assert both.num_rows == 4
    ranks = json.loads(both.schema.metadata[META_RANKS])
    assert {proc["run"] for procs in ranks.values() for proc in procs} == {first, second}
    one = hotspan.load(out, run=second)
    assert sorted(one.column("name").to_pylist()) == ["child", "epoch"]
    assert one.schema.metadata[META_RUN].decode() == second
    with pytest.raises(ValueError, match="no run"):
        hotspan.load(out, run="nope")
    listed = list_runs(out)
    assert [r["run"] for r in listed] == [first, second]
    assert all(r["processes"] == 2 and r["ranks"] == [0] and r["spans"] == 2 for r in listed)
    assert "prog.py" in listed[0]["command"]
    cli = subprocess.run(
        [sys.executable, "-m", "hotspan", "runs", str(out), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    assert [json.loads(line)["run"] for line in cli.stdout.splitlines()] == [first, second]


@pytest.mark.slow
def test_the_launchers_job_id_names_the_run(tmp_path):
    rid = _record(tmp_path, tmp_path / "job", env={"SLURM_JOB_ID": "4242"})
    assert rid in ("4242", "None")
    assert [r["run"] for r in list_runs(tmp_path / "job")] == ["4242"]


def test_a_drained_table_carries_the_run_id(fresh):
    with hotspan.span("x"):
        pass
    table = hotspan.drain()
    assert table.schema.metadata[META_RUN].decode() == os.environ["HOTSPAN_RUN_ID"]


RANK_PROGRAM = textwrap.dedent(
    """
    import sys, hotspan
    with hotspan.record(sys.argv[1]):
        for _ in range(10):
            with hotspan.span("step"):
                pass
    """
)


def _clean_env(**extra: str) -> dict[str, str]:
    full = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARS}
    full.update(extra)
    return full


def _ranks_apart(tmp_path, out, **launcher: str) -> None:
    """Rank 0, then rank 1, started apart (as a launcher does), each recording to ``out``."""
    program = tmp_path / "rank.py"
    program.write_text(RANK_PROGRAM)
    for rank in (0, 1):
        done = subprocess.run(
            [sys.executable, str(program), str(out) + os.sep],
            env=_clean_env(RANK=str(rank), **launcher),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr


def _read_in_a_program(out, *args: str) -> subprocess.CompletedProcess:
    code = (
        "import sys, hotspan\n"
        "print(hotspan.load(sys.argv[1], run=sys.argv[2] if sys.argv[2:] else None).num_rows)"
    )
    return subprocess.run(
        [sys.executable, "-c", code, str(out), *args],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_ranks_of_one_job_started_apart_share_its_run(tmp_path):
    # was: each rank drew its own id, two runs, a warning on every read
    out = tmp_path / "job"
    _ranks_apart(tmp_path, out, TORCHELASTIC_RUN_ID="elastic-7")
    assert [(r["run"], r["ranks"]) for r in list_runs(out)] == [("elastic-7", [0, 1])]
    read = _read_in_a_program(out)
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["20"] and read.stderr == ""  # both ranks, not a word


@pytest.mark.slow
def test_ranks_started_apart_without_a_job_are_two_runs_and_the_newest_is_read(tmp_path):
    out = tmp_path / "apart"
    _ranks_apart(tmp_path, out)
    runs = [r["run"] for r in list_runs(out)]
    assert len(runs) == 2
    read = _read_in_a_program(out)
    assert read.returncode == 0, read.stderr
    assert read.stdout.split() == ["10"]  # rank 1's run, the newest
    # one line, no source line of hotspan's (was: the warnings module's two lines)
    assert read.stderr.splitlines() == [
        f'hotspan: {out}: reading run {runs[1]} (newest of 2; run=ID, run="all" or --run ID '
        "for the others; hotspan runs DIR lists them)"
    ]
    every = _read_in_a_program(out, "all")
    assert every.stdout.split() == ["20"] and every.stderr == ""
    first = _read_in_a_program(out, runs[0])
    assert first.stdout.split() == ["10"] and first.stderr == ""
    # the CLI reads the same run by the same rule, and says it in the same line
    stats = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", str(out), "--json"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert stats.returncode == 0, stats.stderr
    assert [row["count"] for row in json.loads(stats.stdout)] == [10]
    assert stats.stderr.splitlines() == read.stderr.splitlines()
    every = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", str(out), "--json", "--run", "all"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert [row["count"] for row in json.loads(every.stdout)] == [20]
    assert every.stderr == ""


@pytest.mark.parametrize(
    "environment, expected",
    [
        ({"TORCHELASTIC_RUN_ID": "te-1", "SLURM_JOB_ID": "9"}, "te-1"),
        ({"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "3"}, "4242.3"),
        ({"SLURM_JOB_ID": "4242"}, "4242"),
        ({"OMPI_MCA_ess_base_jobid": "3735879681"}, "3735879681"),
        ({"PMIX_NAMESPACE": "prterun-host-12345@1"}, "prterun-host-12345@1"),
        ({"HOTSPAN_RUN_ID": "mine", "PMIX_NAMESPACE": "ns"}, "mine"),
    ],
)
def test_the_run_id_comes_from_the_launchers_job(monkeypatch, environment, expected):
    from hotspan._run import run_id

    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert run_id() == expected


def _readme_record_example() -> str:
    """The README's ```python example that records a run directory."""
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    (block,) = [b for b in blocks if 'hotspan.record("run/")' in b]
    return block


@pytest.mark.slow
def test_the_readmes_record_example_run_twice_prints_the_same_count(tmp_path):
    # was: 100, then 200 (the second run read together with the first)
    example = tmp_path / "example.py"
    example.write_text(_readme_record_example())
    printed = []
    for _ in range(2):
        done = subprocess.run(
            [sys.executable, str(example)],
            cwd=tmp_path,
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        printed.append(done.stdout.split())
    assert printed == [["100"], ["100"]]
    assert len(list_runs(tmp_path / "run")) == 2


@pytest.mark.slow
def test_serve_reads_the_run_the_library_reads(tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hotspan.serve import create_app

    served = tmp_path / "served"
    _ranks_apart(tmp_path, served / "apart")
    client = TestClient(create_app(served))
    (entry,) = client.get("/v1/traces").json()["traces"]
    assert entry["spans"] == 10  # the newest run's, as load() and stats read it (was 20)
    answer = client.get(f"/v1/traces/{entry['id']}/stats").json()
    assert [row["count"] for row in answer["rows"]] == [10]
