"""Ids and payloads survive pandas (issue 11 item 5): the natural ``table.to_pandas()`` path
gives pandas' nullable integer dtypes for ``parent_id`` and ``arg``, never float64, so ids
above 2**53 stay exact and a merge on ids matches the right rows."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pytest

import hotspan
from hotspan.formats._registry import READABLE_EXTENSIONS as EXTENSIONS


def _recorded() -> pa.Table:
    hotspan.drain()
    for i in range(50):
        with hotspan.span("step", "train"):
            with hotspan.span("allreduce", "comms", arg=(1 << 60) + i):
                pass
            hotspan.instant("mark")
    return hotspan.drain()


def _assert_exact(table: pa.Table) -> None:
    df = table.to_pandas()
    assert str(df["parent_id"].dtype) == "UInt64" and str(df["arg"].dtype) == "Int64"
    assert df["span_id"].dtype == "uint64"
    # Every child's parent_id matches its parent's span_id exactly (floats would round
    # these 64-bit ids to the same value and match the wrong rows).
    children = df[df["parent_id"].notna()]
    merged = children.merge(
        df[["span_id", "name"]],
        left_on="parent_id",
        right_on="span_id",
        suffixes=("", "_parent"),
        validate="many_to_one",
    )
    assert len(merged) == len(children) and (merged["name_parent"] == "step").all()
    expected = {int(r["span_id"]): r["parent_id"] for r in table.to_pylist()}
    assert {
        int(k): (None if pd.isna(v) else int(v)) for k, v in zip(df["span_id"], df["parent_id"])
    } == expected
    args = sorted(int(a) for a in df["arg"].dropna())
    assert args == [(1 << 60) + i for i in range(50)]


def test_drained_table_to_pandas_is_exact(fresh):
    table = _recorded()
    assert max(table.column("span_id").to_pylist()) > 1 << 53  # the case floats got wrong
    _assert_exact(table)


@pytest.mark.parametrize("extension", [e for e in EXTENSIONS if e != ".perfetto-trace"])
def test_every_format_loads_back_exact_in_pandas(fresh, tmp_path, extension):
    table = _recorded()
    path = tmp_path / f"trace{extension}"
    hotspan.export(table, path)
    _assert_exact(hotspan.load(path))


def test_pandas_read_parquet_of_an_export_is_exact(fresh, tmp_path):
    table = _recorded()
    hotspan.export(table, tmp_path / "t.parquet")
    df = pd.read_parquet(tmp_path / "t.parquet")
    assert str(df["parent_id"].dtype) == "UInt64" and str(df["arg"].dtype) == "Int64"
