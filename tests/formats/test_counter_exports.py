"""Counters in exports and runs (issue 33 item 4): Chrome ``"ph":"C"`` events and Perfetto
counter tracks that Perfetto's own trace processor reads as counters (its reading of the
spans unchanged), loaded back exactly by load_counters; a run directory's ``_counters/``
folder, which leaves the run one span table in pandas, pyarrow, polars, DuckDB and Spark."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats import TraceFileError, export
from hotspan.schema import COUNTER_SCHEMA

PID, RANK = 4242, 3


def _counters(rows) -> pa.Table:
    return pa.Table.from_pylist(
        [{"time_ns": t, "name": n, "value": v, "rank": RANK, "pid": PID} for t, n, v in rows],
        schema=COUNTER_SCHEMA,
    )


@pytest.fixture(scope="module")
def counters(spans) -> pa.Table:
    """Values inside the spans' time range, ints and fractions, two names, one process that
    has spans (the fixture's first) and one that has none."""
    first = spans.slice(0, 1).to_pylist()[0]
    t0 = int(pc.min(spans.column("start_ns")).as_py())
    rows = [(t0 + 1_000 * i + 7, "rss", float(100_000 + 4096 * i)) for i in range(50)]
    rows += [(t0 + 333 * i, "queue depth", i / 4) for i in range(40)]
    table = _counters(rows)
    mine = pa.Table.from_pylist(
        [dict(r, pid=first["pid"], rank=first["rank"]) for r in table.to_pylist()],
        schema=COUNTER_SCHEMA,
    )
    other = _counters([(t0 + 5, "rss", 1.0), (t0 + 9, "rss", 2.0)])
    both = pa.concat_tables([mine, other])
    return both.take(pc.sort_indices(both, [("time_ns", "ascending"), ("pid", "ascending")]))


def _sorted(table: pa.Table) -> list[dict]:
    return sorted(table.to_pylist(), key=lambda r: (r["time_ns"], r["name"], r["pid"]))


@pytest.mark.parametrize("extension", [".json", ".json.gz", ".pftrace"])
def test_round_trip_exact_and_spans_unchanged(tmp_path, spans, counters, extension):
    path = tmp_path / f"t{extension}"
    export(spans, path, counters=counters)
    assert _sorted(hotspan.load_counters(path)) == _sorted(counters)
    plain = tmp_path / f"plain{extension}"
    export(spans, plain)
    assert hotspan.load(path).equals(hotspan.load(plain))


@pytest.mark.parametrize("extension", [".json", ".pftrace"])
def test_perfetto_reads_counter_tracks_and_the_same_slices(
    tmp_path, spans, counters, perfetto_check, extension
):
    import trace_processor

    path = tmp_path / f"t{extension}"
    export(spans, path, counters=counters)
    # its slices exactly as without counters, no error or data-loss stat
    perfetto_check(
        path,
        slices=spans.num_rows,
        sum_dur=pc.sum(spans.column("duration_ns")).as_py(),
        threads=None,
    )
    with trace_processor.open_trace(path) as tp:
        rows = tp.query(
            "select t.name as name, c.ts as ts, c.value as value from counter c "
            "join counter_track t on c.track_id = t.id order by c.ts"
        ).as_pandas_dataframe()
    if extension == ".json":
        # Chrome JSON: Perfetto names a series "<name> <arg>", times from the trace's start
        shift, suffix = int(pc.min(spans.column("start_ns")).as_py()), " value"
    else:
        shift, suffix = 0, ""
    assert all(str(n).endswith(suffix) for n in rows["name"])
    got = sorted(
        (str(n)[: len(str(n)) - len(suffix)], int(ts) + shift, float(v))
        for n, ts, v in zip(rows["name"], rows["ts"], rows["value"])
    )
    want = sorted(
        zip(
            counters.column("name").to_pylist(),
            counters.column("time_ns").to_pylist(),
            counters.column("value").to_pylist(),
        )
    )
    assert got == want


def test_export_of_counters_alone(tmp_path, spans, counters):
    """No spans: the trace still holds the counters (and loads as an empty span table)."""
    for extension in (".json", ".pftrace"):
        path = tmp_path / f"only{extension}"
        export(spans.slice(0, 0), path, counters=counters)
        assert _sorted(hotspan.load_counters(path)) == _sorted(counters)
        assert hotspan.load(path).num_rows == 0


def test_a_format_without_counters_refuses_them(tmp_path, spans, counters):
    with pytest.raises(ValueError, match="holds no counters"):
        export(spans, tmp_path / "t.csv", counters=counters)
    assert not (tmp_path / "t.csv").exists()


def test_load_counters_errors_name_the_file(tmp_path, spans):
    spans_file = tmp_path / "spans.parquet"
    export(spans, spans_file)
    with pytest.raises(TraceFileError, match="holds spans, not counters"):
        hotspan.load_counters(spans_file)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TraceFileError, match="bad.json"):
        hotspan.load_counters(bad)
    with pytest.raises(FileNotFoundError):
        hotspan.load_counters(tmp_path / "missing.json")
    with pytest.raises(TraceFileError, match="unknown counters file extension"):
        hotspan.load_counters(_touch(tmp_path / "x.txt"))


def _touch(path):
    path.write_text("")
    return path


def test_foreign_chrome_counters(tmp_path):
    """A Chrome trace from another tool: each numeric arg of a "C" event is a series."""
    path = tmp_path / "foreign.json"
    path.write_text(
        json.dumps(
            {
                "traceEvents": [
                    {
                        "ph": "C",
                        "ts": 1.5,
                        "pid": 7,
                        "name": "mem",
                        "args": {"heap": 10, "gpu": 2.5},
                    },
                    {"ph": "C", "ts": 2, "pid": 7, "name": "q", "args": {"value": 3}},
                ]
            }
        )
    )
    got = hotspan.load_counters(path).to_pylist()
    assert got == [
        {"time_ns": 1500, "name": "mem heap", "value": 10.0, "rank": 0, "pid": 7},
        {"time_ns": 1500, "name": "mem gpu", "value": 2.5, "rank": 0, "pid": 7},
        {"time_ns": 2000, "name": "q", "value": 3.0, "rank": 0, "pid": 7},
    ]
