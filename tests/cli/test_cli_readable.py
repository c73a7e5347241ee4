"""Tables a person can read at any width (issue 32, item 4): names lose their middle, never
their start or their distinguishing end, and never so much that two rows read alike; run ids
are never shortened; ``self`` outlives the less useful columns; the share columns say what
they divide. At 80, 120 and 200 columns, on the demo run and on a run of long test ids, for
``stats`` (and its phases), ``compare`` and ``runs``."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

import hotspan
from hotspan.formats import export

WIDTHS = (80, 120, 200)

TEST_IDS = (
    "tests/very/long/path/test_module.py::test_matmul[param]",
    "tests/very/long/path/test_module.py::test_matmul[other_param]",
    "tests/very/long/path/test_module_two.py::test_matmul[param]",
    "tests/very/other/path/test_module.py::test_matmul[param]",
    "tests/very/long/path/test_module.py::test_conv2d[param]",
)


@pytest.fixture
def cli(capsys, monkeypatch):
    from hotspan.cli import main

    def run(*args, columns):
        monkeypatch.setenv("COLUMNS", str(columns))
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        assert code == 0, err
        return out

    return run


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    """The demo's workload (what ``hotspan demo`` records), small."""
    from hotspan import _demo as demo

    hotspan.enable()
    hotspan.drain()
    demo.run(threads=2, steps=4)
    path = tmp_path_factory.mktemp("demo") / "hotspan-demo.parquet"
    export(hotspan.drain(), path)
    return path


@pytest.fixture(scope="module")
def long_ids_run(tmp_path_factory):
    """Spans named by pytest-style test ids that differ at the end, in the middle or deep in
    the path; ``forward`` under two categories that end alike (``train/compute`` and
    ``eval/compute``); a long step name; a step structure for the phases."""
    hotspan.enable()
    hotspan.drain()
    for _ in range(3):
        with hotspan.span("optimizer_step_with_gradient_accumulation", "train"):
            with hotspan.span("forward", "compute"):
                sum(range(2_000))
            with hotspan.span("allreduce_gradients", "communication_over_the_network"):
                sum(range(1_000))
            hotspan.instant("optimizer_step")
        with hotspan.span("evaluation", "eval"):
            with hotspan.span("forward", "compute"):
                sum(range(1_000))
        for test_id in TEST_IDS:
            with hotspan.span(test_id, "pytest"):
                sum(range(500))
    path = tmp_path_factory.mktemp("ids") / "ids.parquet"
    export(hotspan.drain(), path)
    return path


def tables(out: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each table printed: its header line and its rows' cells (split on two spaces or more)."""
    lines = out.splitlines()
    found = []
    for r, line in enumerate(lines):
        if not line.strip() or set(line.strip()) != {"─"}:
            continue
        rows = []
        for row in lines[r + 1 :]:
            cells = re.split(r"\s{2,}", row.strip())
            if len(cells) < 2 or row.startswith("(") or set(row.strip()) == {"─"}:
                break  # a blank line, a note, the next table's title
            rows.append(cells)
        found.append((re.split(r"\s{2,}", lines[r - 1].strip()), rows))
    return found


def stands_for(cell: str, values: set[str]) -> set[str]:
    """The values a printed cell could be: itself, or those keeping its start and end."""
    if cell in values:
        return {cell}
    head, cut, tail = cell.partition("…")
    assert cut, f"{cell!r} is none of {sorted(values)} and not cut"
    assert head and tail, f"{cell!r} lost its start or its end"
    return {v for v in values if v.startswith(head) and v.endswith(tail) and len(v) > len(cell)}


def check_keys(rows: list[list[str]], keys: int, values: list[set[str]]) -> None:
    """Every key cell stands for exactly one value, and no two rows print the same keys."""
    printed = [tuple(cells[:keys]) for cells in rows]
    assert len(set(printed)) == len(printed), printed
    for cells in printed:
        for cell, column in zip(cells, values):
            assert len(stands_for(cell.strip(), column)) == 1, (cell, sorted(column))


def key_values(path, *columns) -> list[set[str]]:
    table = hotspan.load(path)
    return [{str(v) for v in table.column(c).to_pylist() if v is not None} for c in columns]


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("run", ["demo_run", "long_ids_run"])
def test_stats_and_phases_read_at_any_width(cli, request, run, columns):
    path = request.getfixturevalue(run)
    out = cli("stats", path, "--phases", columns=columns)
    assert max(len(line) for line in out.splitlines()) <= columns, out
    categories, names = key_values(path, "category", "name")
    found = tables(out)
    (header, rows), *rest = found
    assert header[:2] == ["category", "name"]
    check_keys(rows, 2, [categories, names])
    # self outlives the percentiles; the shares say what they divide
    assert {"count", "total", "self"} <= set(header), header
    assert "share" not in header and "busy" not in header
    if run == "demo_run" or columns >= 120:
        assert "p50" in header, header
    if columns >= 120:
        assert "self %" in header, header
    instants = [t for t in rest if t[0][:2] == ["category", "name"]]
    for _, instant_rows in instants:
        check_keys(instant_rows, 2, [categories, names])
    phases = [t for t in rest if t[0][:2] == ["rank", "phase"]]
    assert phases, out
    (phase_header, phase_rows), *_ = phases
    assert "% of phase" in phase_header and "share" not in phase_header
    check_keys(phase_rows, 2, [{"0", "mean"}, categories])


def test_the_issue_s_names_stay_apart_at_120_columns(cli, long_ids_run):
    """``optimizer_step`` whole, the two ``forward`` rows apart, the test ids' ends kept."""
    out = cli("stats", long_ids_run, columns=120)
    assert re.search(r"^train\s+optimizer_step\s", out, re.M), out  # the instant, whole
    forward = [cells for cells in tables(out)[0][1] if cells[1] == "forward"]
    assert len(forward) == 2 and forward[0][0] != forward[1][0]
    shown = [cells[1] for cells in tables(out)[0][1] if cells[0] == "pytest"]
    assert len(shown) == len(TEST_IDS)
    for cell in shown:
        assert cell.startswith("tests/") and cell.endswith("]"), cell


def test_share_headers_name_their_denominators(cli, long_ids_run):
    out = cli("stats", long_ids_run, "--all", columns=250)
    header = tables(out)[0][0]
    assert "self %" in header and "total %" in header
    # the old names still choose the columns (they are the JSON's)
    out = cli("stats", long_ids_run, "--columns", "count,share,busy", columns=120)
    assert tables(out)[0][0] == ["category", "name", "count", "self %", "total %"]
    out = cli("stats", long_ids_run, "--columns", "count,self %,total %", columns=120)
    assert tables(out)[0][0] == ["category", "name", "count", "self %", "total %"]


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("run", ["demo_run", "long_ids_run"])
def test_compare_reads_at_any_width(cli, request, run, columns):
    path = request.getfixturevalue(run)
    out = cli("compare", path, path, columns=columns)
    assert max(len(line) for line in out.splitlines()) <= columns, out
    (header, rows), *_ = tables(out)
    assert header[:2] == ["category", "name"]
    check_keys(rows, 2, key_values(path, "category", "name"))


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A dataset directory holding two runs: one with a long id of the user's choosing, one
    with a drawn id, the second started with a long command line."""
    out = tmp_path_factory.mktemp("runs") / "ds"
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("HOTSPAN_RUN_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID", "COLUMNS")
    }
    env["HOTSPAN_OUT"] = str(out) + os.sep
    program = "import hotspan\nwith hotspan.span('x'):\n    pass\n"
    long_id = "2026-12-06T04:01:22-train-resnet50-lr0.1-seed1234-a9f3e2c1"
    for extra, args in (({"HOTSPAN_RUN_ID": long_id}, []), ({}, ["--config=" + "x/" * 40])):
        subprocess.run(
            [sys.executable, "-c", program, *args],
            env={**env, **extra},
            check=True,
            timeout=120,
        )
    return out, long_id


@pytest.mark.parametrize("columns", WIDTHS)
def test_runs_never_shortens_a_run_id(cli, two_runs, columns):
    from hotspan.formats.dataset import list_runs

    out, long_id = two_runs
    ids = [r["run"] for r in list_runs(out)]
    assert long_id in ids and len(ids) == 2
    printed = cli("runs", out, columns=columns)
    for run_id in ids:
        assert re.search(rf"^\s*{re.escape(run_id)}\s", printed, re.M), printed
