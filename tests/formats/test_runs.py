"""Runs kept apart: a run id drawn by a run's first process and inherited by its children
and ranks; every part carries it; a directory holding two runs says so and loads one on
request; `hotspan runs DIR` lists them."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

import hotspan
from hotspan._schema import META_RUN
from hotspan.formats.dataset import META_RANKS, SeveralRunsWarning, list_runs, part_metadata  # noqa: F401

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
    full = {k: v for k, v in os.environ.items() if k not in ("HOTSPAN_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")}
    full.update({"HOTSPAN_OUT": str(out) + os.sep, **(env or {})})
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=300, env=full)
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

    runs_in_parts = {pq.read_schema(p).metadata[META_RUN].decode() for p in out.glob("part-*.parquet")}
    assert runs_in_parts == {first, second}
    with pytest.warns(SeveralRunsWarning, match=first):
        both = hotspan.load(out)
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
    cli = subprocess.run([sys.executable, "-m", "hotspan", "runs", str(out), "--json"], capture_output=True,
                         text=True, timeout=120)
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
