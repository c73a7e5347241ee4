"""A loaded table is one pyarrow can group: its dictionaries are unified across chunks."""

from __future__ import annotations

import pyarrow as pa
import pytest

import hotspan
from hotspan.formats._base import conform_to_schema


def two_drains() -> pa.Table:
    hotspan.drain()
    with hotspan.span("a", "x"):
        pass
    first = hotspan.drain()
    with hotspan.span("b", "y"):
        pass
    return pa.concat_tables([first, hotspan.drain()])


def test_conform_unifies_dictionaries_so_group_by_works():
    table = two_drains()
    with pytest.raises(pa.ArrowException, match="dictionaries"):
        table.group_by("name").aggregate([("duration_ns", "sum")])  # what a reader got before
    conformed = conform_to_schema(table, "two.parquet")
    grouped = conformed.group_by("name").aggregate([("duration_ns", "sum")])
    assert sorted(grouped.column("name").to_pylist()) == ["a", "b"]
    assert conformed.column("name").to_pylist() == table.column("name").to_pylist()
