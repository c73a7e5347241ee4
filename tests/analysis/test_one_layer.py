"""One analysis layer (issue 20 item 6): the same questions through every path get equal answers:
``hotspan.stats(table)``, ``hotspan.stats(path)`` streamed through DuckDB, ``hotspan stats --json``
below and above the streaming size, and serve's ``/stats``."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

import hotspan
from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.analysis.filters import SpanFilter
from hotspan.formats.dataset import write_part

pytest.importorskip("duckdb")


def spans_with_device_rows(seed: int = 3) -> pa.Table:
    """Two ranks, two host threads each, nested spans, a device row under a host span
    (negative thread id), instants, errors, args."""
    rng = np.random.default_rng(seed)
    rows = []
    next_id = 1
    for rank in (0, 1):
        for thread in (1, 2):
            t = 1_700_000_000_000_000_000 + rank * 1000
            for step in range(200):
                sid = next_id
                next_id += 3
                d_child = int(rng.integers(1_000, 50_000))
                d = d_child + int(rng.integers(100, 5_000))
                rows.append(
                    dict(
                        span_id=sid,
                        parent_id=None,
                        name="step",
                        category="train",
                        start_ns=t,
                        duration_ns=d,
                        depth=0,
                        thread_id=thread,
                        thread_name=f"t{thread}",
                        rank=rank,
                        pid=100 + rank,
                        arg=step if step % 3 == 0 else None,
                        error=step % 17 == 0,
                    )
                )
                rows.append(
                    dict(
                        span_id=sid + 1,
                        parent_id=sid,
                        name="matmul",
                        category="train/compute",
                        start_ns=t + 50,
                        duration_ns=d_child,
                        depth=1,
                        thread_id=thread,
                        thread_name=f"t{thread}",
                        rank=rank,
                        pid=100 + rank,
                        arg=None,
                        error=False,
                    )
                )
                if thread == 1 and step % 4 == 0:  # the matmul's kernel on the device
                    rows.append(
                        dict(
                            span_id=sid + 2,
                            parent_id=sid + 1,
                            name="matmul",
                            category="train/compute",
                            start_ns=t + 60,
                            duration_ns=d_child // 2,
                            depth=2,
                            thread_id=-7,
                            thread_name="cuda:0 stream 7",
                            rank=rank,
                            pid=100 + rank,
                            arg=None,
                            error=False,
                        )
                    )
                if step % 50 == 0:
                    rows.append(
                        dict(
                            span_id=next_id,
                            parent_id=None,
                            name="checkpoint",
                            category="train",
                            start_ns=t + d,
                            duration_ns=0,
                            depth=0,
                            thread_id=thread,
                            thread_name=f"t{thread}",
                            rank=rank,
                            pid=100 + rank,
                            arg=None,
                            error=False,
                        )
                    )
                    next_id += 1
                t += d + int(rng.integers(10, 1_000))
    for r in rows:
        r["end_ns"] = r["start_ns"] + r["duration_ns"]
    return with_self_ns(pa.Table.from_pylist(rows, schema=TRACE_SCHEMA))


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    table = spans_with_device_rows()
    root = tmp_path_factory.mktemp("one-layer")
    directory = root / "run"
    for rank in (0, 1):
        part = table.filter(pa.compute.equal(table.column("rank"), rank))
        write_part(part, directory, rank=rank, pid=100 + rank, seq=0)
    return table, directory


def clean(rows: list[dict]) -> list[dict]:
    """NaN as None, rows in key order (the paths agree on the order of equal totals too, but
    JSON and Arrow spell NaN differently)."""
    out = [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in rows
    ]
    return out


QUESTIONS = [
    (None, None),  # the default keys: category, name and device (the run has device rows)
    (("category", "name"), None),
    (("rank", "name"), None),
    (("device", "name"), None),
    (("category", "name"), SpanFilter(categories=("train",), ranks=(1,), min_ns=2_000)),
    (("rank", "name"), SpanFilter(threads=("t1",), since=0.0005, until=1e6)),
]


def cli_json(*args: object, env: dict | None = None) -> list[dict]:
    done = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def filter_args(span_filter: SpanFilter | None) -> list[str]:
    if span_filter is None:
        return []
    out: list[str] = []
    for c in span_filter.categories:
        out += ["--category", c]
    if span_filter.ranks is not None:
        out += ["--rank", ",".join(map(str, span_filter.ranks))]
    for t in span_filter.threads:
        out += ["--thread", t]
    if span_filter.min_ns is not None:
        out += ["--min-ms", str(span_filter.min_ns / 1e6)]
    if span_filter.since is not None:
        out += ["--since", repr(span_filter.since)]
    if span_filter.until is not None:
        out += ["--until", repr(float(span_filter.until))]
    return out


@pytest.mark.parametrize("by,span_filter", QUESTIONS)
def test_the_same_question_gets_the_same_answer_on_every_path(run, by, span_filter):
    table, directory = run
    in_memory = hotspan.stats(table, by=by, filter=span_filter)
    streamed = hotspan.stats(directory, by=by, filter=span_filter, engine="duckdb")
    assert streamed.schema == in_memory.schema
    assert clean(streamed.to_pylist()) == clean(in_memory.to_pylist())
    if by is None:
        assert (
            "device" in in_memory.column_names
        )  # the default keeps device rows apart, on both paths
    keys = [] if by is None else ["--by", ",".join(by)]
    below = cli_json(
        directory, *keys, *filter_args(span_filter), env={"HOTSPAN_STREAM_MIN_BYTES": str(1 << 40)}
    )
    above = cli_json(
        directory, *keys, *filter_args(span_filter), env={"HOTSPAN_STREAM_MIN_BYTES": "0"}
    )
    expected = clean(json.loads(json.dumps(in_memory.to_pylist())))
    assert clean(below) == expected
    assert clean(above) == expected


def test_serve_stats_answers_as_the_library(run, tmp_path):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from hotspan.serve import create_app

    table, directory = run
    import shutil

    shutil.copytree(
        directory, tmp_path / "run"
    )  # serve reads regular files inside its directory only
    client = TestClient(create_app(tmp_path))
    (entry,) = client.get("/v1/traces").json()["traces"]
    for by, span_filter in QUESTIONS:
        params: dict = {} if by is None else {"by": ",".join(by)}
        if span_filter is not None:
            params.update(
                {
                    k: v
                    for k, v in (
                        ("category", span_filter.categories[0] if span_filter.categories else None),
                        ("rank", span_filter.ranks[0] if span_filter.ranks else None),
                        ("thread", span_filter.threads[0] if span_filter.threads else None),
                        ("min_ns", span_filter.min_ns),
                        ("since", span_filter.since),
                        ("until", span_filter.until),
                    )
                    if v is not None
                }
            )
        answer = client.get(f"/v1/traces/{entry['id']}/stats", params=params)
        assert answer.status_code == 200, answer.text
        expected = hotspan.stats(table, by=by, filter=span_filter)
        assert answer.json()["by"] == list(expected.column_names[: len(answer.json()["by"])])
        assert clean(answer.json()["rows"]) == clean(json.loads(json.dumps(expected.to_pylist())))


def test_the_rule_and_the_engine_option(run, monkeypatch):
    from hotspan.analysis._engine import choose

    table, directory = run
    assert choose(table) == "memory"
    monkeypatch.setenv("HOTSPAN_STREAM_MIN_BYTES", "0")
    assert choose(directory) == "duckdb"
    monkeypatch.setenv("HOTSPAN_STREAM_MIN_BYTES", str(1 << 40))
    assert choose(directory) == "memory"
    assert choose(directory, "duckdb") == "duckdb"
    with pytest.raises(ValueError, match="engine"):
        choose(directory, "trino")


def test_instants_are_counted_apart_and_compare_is_a_table(run):
    table, _directory = run
    result = hotspan.stats(table, by=("name",))
    checkpoint = next(r for r in result.to_pylist() if r["name"] == "checkpoint")
    assert checkpoint["instants"] == checkpoint["count"] > 0 and checkpoint["total_ns"] == 0
    compared = hotspan.compare(table, table, by=("name",))
    assert isinstance(compared, pa.Table)
    assert compared.schema.field("count_base").type == pa.int64()
    verdicts = {r["name"]: r["verdict"] for r in compared.to_pylist()}
    assert "checkpoint" not in verdicts and verdicts["step"] == "same"  # instants: no row
    phases = hotspan.phases(table)
    assert (
        phases.schema.field("steps").type == pa.int64()
        and phases.schema.field("time_ns").type == pa.int64()
    )


def test_a_bad_filter_is_one_clear_error(run):
    table, _ = run
    with pytest.raises(ValueError, match="regular expression"):
        hotspan.stats(table, filter={"where": [("name", "~", "(")]})
    with pytest.raises(ValueError, match="no column"):
        hotspan.stats(table, filter={"where": [("nope", "=", "x")]})


def test_one_run_of_a_directory_on_every_path(tmp_path, monkeypatch):
    """A directory holding two runs: the filter's run id selects one, in memory and streamed alike."""
    from hotspan._schema import META_RUN

    table = spans_with_device_rows()
    for run_id, ranks in (("first", (0,)), ("second", (0, 1))):
        for rank in ranks:
            part = table.filter(pa.compute.equal(table.column("rank"), rank))
            part = part.replace_schema_metadata(
                {**(part.schema.metadata or {}), META_RUN: run_id.encode()}
            )
            write_part(
                part,
                tmp_path / "runs",
                rank=rank,
                pid=(100 if run_id == "first" else 200) + rank,
                seq=0,
            )
    only = SpanFilter(run="second")
    expected = hotspan.stats(table, by=("rank", "name"))
    in_memory = hotspan.stats(tmp_path / "runs", by=("rank", "name"), filter=only, engine="memory")
    streamed = hotspan.stats(tmp_path / "runs", by=("rank", "name"), filter=only, engine="duckdb")
    assert (
        clean(in_memory.to_pylist()) == clean(streamed.to_pylist()) == clean(expected.to_pylist())
    )
    first = hotspan.stats(tmp_path / "runs", by=("rank",), filter={"run": "first"}, engine="duckdb")
    assert first.column("rank").to_pylist() == [0]
    below = cli_json(
        tmp_path / "runs",
        "--by",
        "rank,name",
        "--run",
        "second",
        env={"HOTSPAN_STREAM_MIN_BYTES": str(1 << 40)},
    )
    above = cli_json(
        tmp_path / "runs",
        "--by",
        "rank,name",
        "--run",
        "second",
        env={"HOTSPAN_STREAM_MIN_BYTES": "0"},
    )
    assert clean(below) == clean(above) == clean(json.loads(json.dumps(expected.to_pylist())))
