"""``pytest --hotspan`` (hotspan.pytest_plugin) on small pytest projects run by ``pytester``,
in a fresh interpreter each (the plugin loads through its ``pytest11`` entry point there),
with and without pytest-benchmark; and ``hotspan compare`` on the JSON they save."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import hotspan
from hotspan.formats.dataset import part_metadata

# pytester restores sys.modules after each test: a module first imported inside one (pandas
# through to_pandas, a hotspan module through load() or the CLI) would be dropped, and the
# next test would meet a second copy of its classes (pandas' isinstance checks then fail).
# Imported here, before any pytester, they stay.
import pandas  # noqa: E402,F401
import pyarrow.dataset  # noqa: E402,F401
import hotspan.cli._commands  # noqa: E402,F401

pytest_plugins = ["pytester"]

PROJECT = """
import sys

import pytest

import hotspan

with hotspan.span("at-import", "collect"):  # before any test: in no test's part
    pass


def test_plugin_loaded_lazily():
    # Loaded (entry point) and, without --hotspan, nothing heavy imported for it (first:
    # the tests below drain, which loads pyarrow).
    assert "hotspan.pytest_plugin" in sys.modules
    if not any(a.startswith("--hotspan") for a in sys.argv):
        assert "pyarrow" not in sys.modules and "numpy" not in sys.modules


@pytest.fixture
def resource():
    with hotspan.span("open", "fixture"):
        pass
    yield
    with hotspan.span("close", "fixture"):
        pass


def test_work(resource):
    for _ in range(10):
        with hotspan.span("work", "compute"):
            pass


def test_drains_itself():
    hotspan.drain()  # what came before this test
    with hotspan.span("mine", "compute"):
        pass
    assert hotspan.drain().column("name").to_pylist() == ["mine"]  # the test's own drain still works


def test_no_spans():
    pass


def test_fails():
    with hotspan.span("before-failing", "compute"):
        pass
    assert False, "on purpose"

"""


def _parts(session: Path) -> dict[str, tuple[dict, list[str]]]:
    """Per test node id: its part's metadata and the names of its spans."""
    out = {}
    for path in sorted(session.glob("part-*.parquet")):
        meta = part_metadata(path)
        names = hotspan.load(path).column("name").to_pylist()
        assert meta["test"] not in out, f"two parts for {meta['test']}"
        out[meta["test"]] = (meta, names)
    return out


@pytest.mark.slow
def test_off_by_default_writes_nothing(pytester):
    pytester.makepyfile(test_project=PROJECT)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)
    assert not (pytester.path / ".hotspan").exists()
    assert not list(pytester.path.rglob("*.parquet"))


@pytest.mark.slow
def test_each_test_gets_a_part_named_by_its_node_id_without_pytest_benchmark(pytester):
    pytester.makepyfile(test_project=PROJECT)
    runs = []
    for _ in range(2):
        result = pytester.runpytest_subprocess(
            "-p", "no:cacheprovider", "-p", "no:benchmark", "--hotspan=spans"
        )
        result.assert_outcomes(passed=4, failed=1)
        result.stdout.fnmatch_lines(["hotspan: 14 spans of 3 tests -> spans*"])
        runs.append(result)
    sessions = sorted((pytester.path / "spans").iterdir())
    assert len(sessions) == 2  # a second run never writes over the first

    for session in sessions:
        parts = _parts(session)
        assert set(parts) == {
            "test_project.py::test_work",
            "test_project.py::test_drains_itself",
            "test_project.py::test_fails",
        }
        meta, names = parts["test_project.py::test_work"]
        assert names == ["open"] + ["work"] * 10 + ["close"]  # setup, call and teardown, in order
        assert meta["outcome"] == "passed" and meta["test_dropped"] == 0
        assert parts["test_project.py::test_drains_itself"][1] == ["mine"]
        meta, names = parts["test_project.py::test_fails"]
        assert names == ["before-failing"] and meta["outcome"] == "failed"
        whole = hotspan.load(session)  # the session reads as one run too
        assert whole.num_rows == 14 and "at-import" not in whole.column("name").to_pylist()


def test_a_directory_of_tests_is_not_taken_for_the_output(pytester):
    pytester.makepyfile(test_project=PROJECT)
    tests = pytester.mkdir("suite")
    (tests / "test_x.py").write_text("def test_x():\n    pass\n")
    result = pytester.runpytest("--hotspan", "suite")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hotspan took 'suite' as its directory, which holds tests*"])
    assert sorted(p.name for p in tests.iterdir()) == ["test_x.py"]


BENCH_PROJECT = """
import os
import time

import hotspan

import pytest

SLOW = os.environ.get("BENCH_SLOW") == "1"


def wait(ns):
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


def step():
    with hotspan.span("steady", "bench"):
        wait(20_000)
    with hotspan.span("hot", "bench"):
        wait(150_000 if SLOW else 30_000)


@pytest.fixture
def prepared():
    with hotspan.span("prepare", "setup"):  # the test's setup: in its part, not in the benchmark's summary
        pass


def test_step(prepared, benchmark):
    benchmark(step)
"""

BENCH_ARGS = (
    "-p",
    "no:cacheprovider",
    "--hotspan=spans",
    "--benchmark-min-rounds=15",
    "--benchmark-max-time=0.05",
    "--benchmark-warmup=off",
    "--benchmark-disable-gc",
)


@pytest.mark.slow
def test_benchmark_spans_land_in_the_saved_json_and_compare_names_the_slower_span(
    pytester, monkeypatch, capsys
):
    from hotspan.cli import main

    pytester.makepyfile(test_bench=BENCH_PROJECT)
    monkeypatch.delenv("BENCH_SLOW", raising=False)
    pytester.runpytest_subprocess(
        *BENCH_ARGS,
        "--benchmark-autosave",
        "--benchmark-storage=file://stored",
    ).assert_outcomes(passed=1)
    (saved,) = (pytester.path / "stored").glob("*/0001_*.json")
    monkeypatch.setenv("BENCH_SLOW", "1")
    pytester.runpytest_subprocess(*BENCH_ARGS, "--benchmark-json=new.json").assert_outcomes(
        passed=1
    )

    for path in (saved, pytester.path / "new.json"):
        (bench,) = json.loads(path.read_text())["benchmarks"]
        summary = bench["extra_info"]["hotspan"]
        spans = {(s["category"], s["name"]): s for s in summary["spans"]}
        assert set(spans) == {("bench", "steady"), ("bench", "hot")}  # not the setup's span
        assert summary["dropped"] == 0
        # the machine's speed while the benchmark ran (issue 32): loop and contention
        assert summary["machine"]["loop_ns"] > 0 and summary["machine"]["samples"] >= 1
        rounds = bench["stats"]["rounds"]
        for s in spans.values():
            assert s["count"] >= rounds  # every timed round, and the calibration's
            assert s["p50_ns"] <= s["p99_ns"] and s["total_ns"] >= s["count"] * 20_000
            assert s["mean_ns"] >= 20_000 and s["stddev_ns"] >= 0
            assert 0 < len(s["data_ns"]) <= min(s["count"], 200) and min(s["data_ns"]) >= 20_000
        assert spans[("bench", "steady")]["p50_ns"] >= 20_000
    # The dataset is written too, the benchmark's part named by its node id.
    sessions = sorted((pytester.path / "spans").iterdir())
    assert len(sessions) == 2
    (part,) = _parts(sessions[1]).items()
    assert part[0] == "test_bench.py::test_step" and part[1][1][0] == "prepare"

    def compare(*args):
        capsys.readouterr()
        code = main(["compare", *map(str, args)])
        return code, capsys.readouterr()

    monkeypatch.setenv("COLUMNS", "200")  # the table's width: names in full
    code, said = compare(saved, pytester.path / "new.json", "--threshold", "0.5")
    assert code == 1, said
    hot_lines = [line for line in said.out.splitlines() if "bench/hot" in line]
    assert len(hot_lines) == 1 and "slower" in hot_lines[0], said.out
    assert "slower" not in next(line for line in said.out.splitlines() if "bench/steady" in line)

    code, said = compare(saved, pytester.path / "new.json", "--threshold", "0.5", "--json")
    rows = json.loads(said.out)
    assert code == 1
    assert [r["verdict"] for r in rows["benchmarks"]] == ["slower"]
    assert rows["benchmarks"][0]["rule"] == "welch"  # autosave keeps no rounds: the summary
    verdicts = {r["name"]: r["verdict"] for r in rows["spans"]}
    assert verdicts == {"hot": "slower", "steady": "same"}

    code, said = compare(pytester.path / "new.json", pytester.path / "new.json")
    assert code == 0 and "0 of 3 slower" in said.out
