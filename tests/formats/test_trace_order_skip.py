"""Rows already in trace order (a loaded trace, exported again) are written as they are,
without the sort: the same bytes as the same rows in another order that sorts to them."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import hotspan


def _interleaved(table: pa.Table) -> pa.Table:
    """The rows taken a thread at a time in turn: each thread's rows in their order, the
    threads first seen in the same order (so the stable trace sort gives back ``table``)."""
    keys = list(
        zip(
            table.column("pid").to_pylist(),
            table.column("rank").to_pylist(),
            table.column("thread_id").to_pylist(),
        )
    )
    rows: dict[tuple, list[int]] = {}
    for i, key in enumerate(keys):
        rows.setdefault(key, []).append(i)
    order, k = [], 0
    while len(order) < table.num_rows:
        order += [r[k] for r in rows.values() if k < len(r)]
        k += 1
    assert order != list(range(table.num_rows))  # really another order
    return table.take(pa.array(np.array(order)))


@pytest.mark.parametrize("extension", [".json", ".pftrace"])
def test_rows_in_trace_order_give_the_same_bytes(extension, spans, tmp_path):
    hotspan.export(spans, tmp_path / f"first{extension}")
    loaded = hotspan.load(tmp_path / f"first{extension}")  # its rows in trace order
    hotspan.export(loaded, tmp_path / f"as_loaded{extension}")
    hotspan.export(_interleaved(loaded), tmp_path / f"interleaved{extension}")
    as_loaded = (tmp_path / f"as_loaded{extension}").read_bytes()
    assert as_loaded == (tmp_path / f"interleaved{extension}").read_bytes()
    again = hotspan.load(tmp_path / f"as_loaded{extension}")
    assert again.column("span_id").to_pylist() == loaded.column("span_id").to_pylist()
