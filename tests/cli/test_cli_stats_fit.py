"""`hotspan stats`: tables that fit the terminal with whole numbers, and the options users
look for (filter, category, rank, sort by header, ascending, instants apart, phases)."""

from __future__ import annotations

import json
import re

import pytest

import hotspan
from hotspan.formats import export

NUMBER = re.compile(
    r"^(-|\d[\d,]*|\d+\.\d\d (s|ms|us)|\d+ ns|\d+\.\d%|\d+\.\d\d [kMG]/s|\d+\.\d /s)$"
)


@pytest.fixture
def cli(capsys, monkeypatch):
    from hotspan.cli import main

    def run(*args, columns=None):
        if columns is not None:
            monkeypatch.setenv("COLUMNS", str(columns))
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Two ranks of steps (sync) holding compute and comms, plus instants."""
    hotspan.enable()
    parts = []
    for rank in (0, 1):
        hotspan.configure(rank=rank)
        hotspan.drain()
        for _ in range(5):
            with hotspan.span("training_step_with_a_long_name", "sync"):
                with hotspan.span("forward", "compute"):
                    sum(range(20_000 * (rank + 1)))
                with hotspan.span("allreduce", "comms", arg=1 << 20):
                    sum(range(5_000))
                hotspan.instant("checkpoint_marker")
        parts.append(hotspan.drain())
    hotspan.configure(rank=0)
    path = tmp_path_factory.mktemp("stats") / "t.parquet"
    import pyarrow as pa

    export(pa.concat_tables([parts[0], parts[1].cast(parts[0].schema)]), path)
    return path


def data_rows(out: str) -> list[list[str]]:
    """The cells of the main table's data rows (the lines before the first blank one after
    the header rule), split on runs of two or more spaces."""
    lines = out.splitlines()
    rule = next(i for i, line in enumerate(lines) if set(line.strip()) == {"─"})
    rows = []
    for line in lines[rule + 1 :]:
        if not line.strip() or line.startswith("("):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


@pytest.mark.parametrize("columns", [80, 120])
def test_stats_fit_the_width_and_numbers_are_whole(cli, trace, columns):
    code, out, err = cli("stats", trace, columns=columns)
    assert code == 0, err
    assert max(len(line) for line in out.splitlines()) <= columns
    header = re.split(r"\s{2,}", out.splitlines()[0].strip())
    assert header[:2] == ["category", "name"]
    # what must come first is there at either width: self before the percentiles
    assert {"count", "total", "self", "p50", "p99"} <= set(header)
    rows = data_rows(out)
    assert rows
    for cells in rows:
        numbers = cells[-(len(header) - 2) :]
        assert all(NUMBER.match(cell) for cell in numbers), cells
    if columns == 120:
        assert "self %" in header and "mean" in header


def test_stats_all_and_columns(cli, trace):
    code, out, _ = cli("stats", trace, "--columns", "count,p99_ns,arg/s", columns=100)
    assert code == 0
    assert out.splitlines()[0].split() == ["category", "name", "count", "p99", "arg/s"]
    code, out, _ = cli("stats", trace, "--all", columns=250)
    header = out.splitlines()[0].split()
    assert {"total", "min", "errors", "sum", "%"} <= set(header)  # "arg sum", "total %": two words
    code, _, err = cli("stats", trace, "--columns", "p77")
    assert code == 2 and "p77" in err


def test_share_adds_up_and_is_named_in_help(cli, trace, capsys):
    code, out, _ = cli("stats", trace, "--json")
    rows = json.loads(out)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    code, out, _ = cli("stats", trace, "--by", "rank,name", "--json")
    for rank in (0, 1):
        assert sum(r["share"] for r in json.loads(out) if r["rank"] == rank) == pytest.approx(1.0)
    with pytest.raises(SystemExit):
        from hotspan.cli import build_parser

        build_parser().parse_args(["stats", "--help"])
    assert "adds up to 100%" in " ".join(capsys.readouterr().out.split())


def test_filter_category_rank_sort_asc(cli, trace):
    code, out, err = cli("stats", trace, "--filter", "name~^(for|all)", "--json")
    assert code == 0, err
    assert {r["name"] for r in json.loads(out)} == {"forward", "allreduce"}
    code, out, _ = cli("stats", trace, "--category", "sync/comms", "--json")
    assert {r["name"] for r in json.loads(out)} == {"allreduce"}
    code, out, _ = cli("stats", trace, "--category", "sync", "--json")  # sync and below
    assert {r["name"] for r in json.loads(out)} == {
        "training_step_with_a_long_name",
        "forward",
        "allreduce",
        "checkpoint_marker",
    }
    code, out, _ = cli("stats", trace, "--rank", "1", "--by", "rank,name", "--json")
    assert {r["rank"] for r in json.loads(out)} == {1}
    code, out, _ = cli("stats", trace, "--sort", "p99", "--json")
    p99 = [r["p99_ns"] for r in json.loads(out)]
    assert p99 == sorted(p99, reverse=True)
    code, out, _ = cli("stats", trace, "--sort", "p99_ns", "--asc", "--json")
    p99 = [r["p99_ns"] for r in json.loads(out)]
    assert p99 == sorted(p99)
    code, out, _ = cli("stats", trace, "--jsonl")
    lines = out.splitlines()
    assert len(lines) == 4 and all(json.loads(line)["count"] > 0 for line in lines)
    for bad, word in (
        (["--filter", "name"], "--filter"),
        (["--filter", "nope~x"], "nope"),
        (["--filter", "name~("], "regular expression"),
        (["--rank", "x"], "--rank"),
        (["--sort", "p77"], "p77"),
    ):
        code, _, err = cli("stats", trace, *bad)
        assert code == 2 and word in err, (bad, err)


def test_instants_apart_and_phases_only_with_steps(cli, trace, tmp_path):
    code, out, _ = cli("stats", trace, columns=120)
    main, _, rest = out.partition("instants")
    assert "checkpoint_marker" not in main
    assert "checkpoint_marker" in rest and "phases" in rest
    instants_line = next(line for line in rest.splitlines() if "checkpoint_marker" in line)
    assert "10" in instants_line.split() and " ns" not in instants_line  # a count, no zero times
    # No step structure (one flat category): no phases unless asked for.
    hotspan.drain()
    for _ in range(3):
        with hotspan.span("flat", "io"):
            pass
    export(hotspan.drain(), tmp_path / "flat.parquet")
    code, out, _ = cli("stats", tmp_path / "flat.parquet")
    assert code == 0 and "phases" not in out
    code, out, _ = cli("stats", tmp_path / "flat.parquet", "--phases")
    assert "phases" in out


def test_stats_say_how_many_spans_were_dropped(cli, tmp_path):
    hotspan.drain()
    with hotspan.span("x"):
        pass
    table = hotspan.drain()
    meta = dict(table.schema.metadata)
    meta[b"hotspan.dropped"] = json.dumps({"total": 25576, "threads": {}}).encode()
    export(table.replace_schema_metadata(meta), tmp_path / "t.parquet")
    code, out, _ = cli("stats", tmp_path / "t.parquet", columns=120)
    assert code == 0 and "25,576 spans were dropped" in out
    # none dropped (whatever tests before this one in the process dropped at their caps)
    meta[b"hotspan.dropped"] = json.dumps({"total": 0, "threads": {}}).encode()
    export(table.replace_schema_metadata(meta), tmp_path / "clean.parquet")
    code, out, _ = cli("stats", tmp_path / "clean.parquet", columns=120)
    assert code == 0 and "dropped" not in out
