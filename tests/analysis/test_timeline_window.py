"""A window of a run (issue 33, item 2): ``window_count`` counts from the Parquet footers what
``window_spans`` returns, every span overlapping the window on the ranks asked, whichever row
groups lie inside the window, across its edges, or outside it."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hotspan
from hotspan.analysis.timeline import window_count, window_spans
from hotspan.formats.dataset import write_part
from hotspan.schema import SPAN_SCHEMA

T0 = 1_700_000_000_000_000_000


def _spans(rank: int, n: int = 200) -> pa.Table:
    """``n`` spans 1 us apart, 1.5 us long (each overlaps the next), and an instant every 10th."""
    starts = T0 + np.arange(n, dtype=np.int64) * 1_000
    durations = np.where(np.arange(n) % 10 == 0, 0, 1_500).astype(np.int64)
    columns = {
        "span_id": pa.array(np.arange(rank * 10_000 + 1, rank * 10_000 + 1 + n, dtype=np.uint64)),
        "parent_id": pa.nulls(n, pa.uint64()),
        "name": pa.array([f"s{i}" for i in range(n)]),
        "category": pa.array(["work"] * n),
        "start_ns": pa.array(starts),
        "end_ns": pa.array(starts + durations),
        "duration_ns": pa.array(durations),
        "depth": pa.array(np.zeros(n, np.int32)),
        "thread_id": pa.array(np.full(n, 7, np.int64)),
        "thread_name": pa.array(["main"] * n),
        "pid": pa.array(np.full(n, 100 + rank, np.int64)),
        "rank": pa.array(np.full(n, rank, np.int32)),
        "arg": pa.array(np.zeros(n, np.int64)),
        "error": pa.array(np.zeros(n, bool)),
        "self_ns": pa.array(durations),
    }
    schema = pa.schema([f for f in SPAN_SCHEMA if f.name in columns])
    return pa.table([columns[f.name] for f in schema], schema=schema)


def _by_hand(tables, low, high, ranks):
    out = set()
    for table in tables:
        for sid, rank, start, end in zip(
            table["span_id"].to_pylist(),
            table["rank"].to_pylist(),
            table["start_ns"].to_pylist(),
            table["end_ns"].to_pylist(),
        ):
            if (ranks is None or rank in ranks) and (high is None or start < high):
                if low is None or end > low or start >= low:
                    out.add(sid)
    return out


@pytest.mark.parametrize(
    "low, high, ranks",
    [
        (None, None, None),
        (T0 + 50_500, T0 + 120_000, None),  # edges inside row groups
        (T0 + 64_000, T0 + 128_000, [1]),  # on row-group edges, one rank
        (T0 + 10_000, T0 + 10_001, [0, 1]),  # an instant at the window's start
        (T0 + 999_000, None, None),  # past the end
        (None, T0 + 5_000, [2]),  # a rank with no spans
    ],
)
def test_the_count_is_the_spans_of_the_window(tmp_path, low, high, ranks):
    tables = [_spans(0), _spans(1)]
    # a file of small row groups (their statistics pick them) and a run directory
    pq.write_table(pa.concat_tables(tables), tmp_path / "run.parquet", row_group_size=32)
    for rank, table in enumerate(tables):
        write_part(table, tmp_path / "run", rank=rank, pid=100 + rank, seq=0)
    want = _by_hand(tables, low, high, ranks)
    for source in (tmp_path / "run.parquet", tmp_path / "run", pa.concat_tables(tables)):
        got = window_spans(source, low, high, ranks=ranks)
        assert set(got["span_id"].to_pylist()) == want and got.num_rows == len(want)
        assert window_count(source, low, high, ranks=ranks) == len(want)
    # what a window holds exports and loads back
    hotspan.export(window_spans(tmp_path / "run", low, high, ranks=ranks), tmp_path / "w.parquet")
    assert set(hotspan.load(tmp_path / "w.parquet")["span_id"].to_pylist()) == want
