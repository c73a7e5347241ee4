"""``--by test``: the spans of a ``pytest --hotspan`` run grouped by the test they ran in."""

from __future__ import annotations

import json

# As in tests/test_pytest_plugin.py: imported before any pytester run, so they stay.
import pandas  # noqa: F401
import pyarrow.dataset  # noqa: F401
import pytest

import hotspan
import hotspan.cli._commands
from hotspan.cli import main

pytest_plugins = ["pytester"]

PROJECT = """
import hotspan


def test_fast():
    for _ in range(3):
        with hotspan.span("step", "work"):
            pass


def test_slow():
    for _ in range(5):
        with hotspan.span("step", "work"):
            sum(range(10_000))
"""


@pytest.fixture
def session(pytester):
    pytester.makepyfile(test_project=PROJECT)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:benchmark", "--hotspan=spans"
    )
    result.assert_outcomes(passed=2)
    (session,) = (pytester.path / "spans").iterdir()
    return session


@pytest.mark.slow  # a pytest run in a subprocess
def test_load_gives_each_span_its_test(session):
    table = hotspan.load(session)
    assert table.column("test").to_pylist().count("test_project.py::test_slow") == 5
    counts = {r["test"]: r["count"] for r in hotspan.stats(table, by=("test", "name")).to_pylist()}
    assert counts == {"test_project.py::test_fast": 3, "test_project.py::test_slow": 5}


@pytest.mark.slow
def test_stats_by_test_on_the_command_line(session, capsys):
    assert main(["stats", str(session), "--by", "test,name", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["test"], r["name"], r["count"]) for r in rows} == {
        ("test_project.py::test_fast", "step", 3),
        ("test_project.py::test_slow", "step", 5),
    }


def test_by_test_on_spans_that_name_no_test(tmp_path, capsys):
    with hotspan.span("step"):
        pass
    path = hotspan.export(hotspan.drain(), tmp_path / "plain.parquet")
    assert main(["stats", str(path), "--by", "test"]) == 2
    assert (
        "--by test: these spans name no test (a run written by pytest --hotspan does"
        in capsys.readouterr().err
    )
