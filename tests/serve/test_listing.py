"""What ``hotspan serve`` lists: runs and trace files only (issue 33, item 3). A project
folder holds a virtual environment, installed packages and data files that share extensions
with trace formats; none of them is a run, and none becomes an error row. A trace that is
damaged stays listed with what is wrong. A run is titled by its folder's name."""

from __future__ import annotations

import gzip
import json
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hotspan.formats import export
from hotspan.formats.dataset import write_part
from hotspan.serve._runs import Catalog

from _util import wait_until

from ._serving import Server, record_steps, with_rank

#: The runs of the project folder, and whether each is damaged.
RUNS = {
    "run": False,
    "traces/t.json": False,
    "traces/t.json.gz": False,
    "traces/t.csv": False,
    "traces/t.jsonl": False,
    "traces/t.arrow": False,
    "traces/t.parquet": False,
    "traces/array.json": False,  # the Chrome format's array form, from another tool
    "traces/cut.json": True,  # a trace cut short
    "traces/cut.parquet": True,
}


def project(root: Path) -> Path:
    """A project folder as people serve it: runs beside a venv, packages and data files."""
    table = record_steps(4)
    write_part(table, root / "run", rank=0, pid=1000, seq=0)
    write_part(with_rank(record_steps(3), 1), root / "run", rank=1, pid=1001, seq=0)
    traces = root / "traces"
    traces.mkdir()
    for ext in ("json", "json.gz", "csv", "jsonl", "arrow", "parquet"):
        export(table, traces / f"t.{ext}")
    (traces / "array.json").write_text(
        json.dumps([{"name": "a", "ph": "X", "ts": 1, "dur": 2, "pid": 1, "tid": 1}])
    )
    whole = (traces / "t.json").read_bytes()
    (traces / "cut.json").write_bytes(whole[: len(whole) // 2])
    whole = (traces / "t.parquet").read_bytes()
    (traces / "cut.parquet").write_bytes(whole[: len(whole) // 2])

    # Not runs: a venv (its traces too: a package's test data), installed packages, data.
    venv = root / "venv"
    packages = venv / "lib" / "python3.11" / "site-packages"
    for k in range(40):
        (packages / f"pkg{k}").mkdir(parents=True)
        (packages / f"pkg{k}" / "data.json").write_text('{"name": "pkg"}')
        (packages / f"pkg{k}" / "table.csv").write_text("a,b\n1,2\n")
    export(table, packages / "pkg0" / "fixture.json")  # a trace, but inside the venv
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    conda = root / "envs" / "py311"
    (conda / "conda-meta").mkdir(parents=True)
    (conda / "conda-meta" / "history.json").write_text("{}")
    export(table, conda / "fixture.parquet")
    modules = root / "web" / "node_modules" / "left-pad"
    modules.mkdir(parents=True)
    (modules / "package.json").write_text('{"name": "left-pad", "version": "1.3.0"}')
    (modules / "trace.json").write_text('{"traceEvents": []}')
    (root / "web" / "package.json").write_text('{"name": "web", "private": true}')
    (root / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {}}')
    (root / "config.json").write_text('["a", "b"]')
    (root / "empty.json").write_text("")
    data = root / "data"
    data.mkdir()
    (data / "prices.csv").write_text("date,price\n2024-01-01,3\n")
    (data / "events.jsonl").write_text('{"user": 1, "event": "click"}\n')
    pq.write_table(pa.table({"user": [1, 2], "score": [0.5, 0.7]}), data / "frame.parquet")
    with pa.OSFile(str(data / "frame.arrow"), "wb") as sink:
        with pa.ipc.new_file(sink, pa.schema([("x", pa.int64())])) as writer:
            writer.write_table(pa.table({"x": [1]}))
    with gzip.open(data / "dump.json.gz", "wt") as f:
        f.write('{"rows": [1, 2, 3]}')
    hidden = root / ".cache"
    hidden.mkdir()
    export(table, hidden / "old.parquet")
    return root


@pytest.fixture(scope="module")
def project_dir(tmp_path_factory) -> Path:
    return project(tmp_path_factory.mktemp("project"))


def test_a_project_folder_lists_its_runs_and_nothing_else(project_dir, tmp_path):
    runs = {r.path: r for r in Catalog(project_dir, tmp_path / "cache").scan()}
    assert set(runs) == set(RUNS), sorted(runs)
    for path, damaged in RUNS.items():
        run = runs[path]
        if damaged:
            assert run.error and run.summary is None, path
        else:
            assert run.error is None and run.summary["spans"] > 0, (path, run.error)
    assert runs["run"].summary["ranks"] == [0, 1]


def test_a_damaged_trace_says_what_is_wrong(project_dir, tmp_path):
    runs = {r.path: r for r in Catalog(project_dir, tmp_path / "cache").scan()}
    cut = runs["traces/cut.parquet"].error
    assert "cut.parquet" in cut or "Parquet" in cut or "parquet" in cut.lower(), cut
    assert runs["traces/cut.json"].error, "a trace cut short is listed with its problem"


def test_a_foreign_parquet_with_span_columns_missing_is_still_a_damaged_trace(tmp_path):
    """A table that has a trace's time columns but lacks others is a trace gone wrong (an
    error row naming the missing column); a table with none of them is not a trace."""
    root = tmp_path / "runs"
    root.mkdir()
    pq.write_table(pa.table({"a": [1], "start_ns": [1], "end_ns": [2]}), root / "half.parquet")
    pq.write_table(pa.table({"a": [1]}), root / "other.parquet")
    runs = {r.path: r for r in Catalog(root, tmp_path / "cache").scan()}
    assert set(runs) == {"half.parquet"}
    assert "missing column(s) span_id" in runs["half.parquet"].error


def test_the_served_run_itself_is_titled_by_its_folder(tmp_path):
    run = tmp_path / "run"
    write_part(record_steps(2), run, rank=0, pid=1000, seq=0)
    (entry,) = [r.entry() for r in Catalog(run, tmp_path / "cache").scan()]
    assert entry["path"] == "." and entry["title"] == "run" and entry["name"] == "run"
    server = Server(run)
    try:
        with server.client() as client:
            listed = client.get("/").text
            assert f'<a href="/runs/{entry["id"]}">run</a>' in listed
            page = client.get(f"/runs/{entry['id']}").text
            assert "<h1>run</h1>" in page and "<title>run · hotspan serve</title>" in page
            ranks = client.get(f"/runs/{entry['id']}/ranks").text
            assert "<h1>run: across ranks</h1>" in ranks, ranks
            compare = client.get(f"/compare?base={entry['id']}&new={entry['id']}").text
            assert f'<a href="/runs/{entry["id"]}">run</a> → ' in compare, compare
            assert ">.<" not in ranks + compare
    finally:
        server.stop()


def test_a_part_from_before_wait_ns_is_listed_and_served(tmp_path):
    """A part written before ``wait_ns`` joined the schema (hotspan 0.3) is still a span
    table: the listing reads it, and its pages answer, with no error row."""
    run = tmp_path / "runs" / "old"
    table = record_steps(2)
    write_part(table, run, rank=0, pid=1000, seq=0)
    (part,) = run.rglob("*.parquet")
    old = pq.read_table(part)
    pq.write_table(old.drop_columns(["wait_ns"]), part)
    (entry,) = [r.entry() for r in Catalog(tmp_path / "runs", tmp_path / "cache").scan()]
    assert entry["error"] is None, entry
    server = Server(tmp_path / "runs")
    try:
        with server.client() as client:
            assert client.get(f"/runs/{entry['id']}").status_code == 200
            stats = client.get(f"/v1/traces/{entry['id']}/stats").json()
            assert sum(row["count"] for row in stats["rows"]) == table.num_rows, stats
    finally:
        server.stop()


def test_many_runs_are_listed_fast(tmp_path):
    """A test-sized check of "5,000 runs listed in under 1 s" (benchmarks/bench_serve.py
    --runs 5000 measures the whole figure): 400 runs, listed at first within the listing's
    budget (the rest summarised in the background, each row saying so), then in full."""
    from hotspan.serve import _runs as runs_module

    root = tmp_path / "many"
    write_part(record_steps(1, threads=1), root / "r0000", rank=0, pid=1, seq=0)
    for k in range(1, 400):
        shutil.copytree(root / "r0000", root / f"r{k:04d}")
    catalog = Catalog(root, tmp_path / "cache")
    began = time.perf_counter()
    first = catalog.scan()
    took = time.perf_counter() - began
    assert len(first) == 400
    # the walk plus the budget, with room for a loaded machine
    assert took < runs_module.LIST_BUDGET_S + 2.0, took
    entries = [r.entry() for r in first]
    assert all(e["pending"] or e["spans"] for e in entries)

    wait_until(lambda: all(r.summary for r in catalog.scan()), 60, what="the background summaries")
    began = time.perf_counter()
    again = catalog.scan()
    took = time.perf_counter() - began
    assert len(again) == 400 and not any(r.entry()["pending"] for r in again)
    # An unchanged tree is only walked and stat'ed: 400 runs well under the 80 ms share of
    # a second they get in the 5,000-run figure, with room for a loaded machine.
    assert took < 0.5, took
