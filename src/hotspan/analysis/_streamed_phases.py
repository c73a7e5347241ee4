"""``phases`` of Parquet spans without loading them: each process's parts read in order
(process_phases.py) where they allow it, else DuckDB joining each span to its parent
(the query of ``queries.phases_sql``, shared with Spark). See streaming.py's module doc."""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa

from ._duckdb_source import NEEDED, SpanSource
from ._phase_kernel import category_levels
from ._streaming import load_trace, open_source, other_format, reading

__all__ = ["stream_phases"]


def stream_phases(path: str | os.PathLike[str] | SpanSource) -> pa.Table:
    """``statistics.phases`` of the spans in ``path``, streamed (see the module doc)."""
    if other_format(path):
        from .statistics import phases

        return phases(load_trace(path))
    source, owned = open_source(path)
    try:
        with reading(source):
            return _phases(source)
    finally:
        if owned:
            source.close()


def _phases(source: SpanSource) -> pa.Table:
    from ._queries import DUCKDB, finish_phases, phases_sql

    source.check_columns((), NEEDED + ("category", "rank"))
    waits = {"self_ns", "wait_ns"} <= set(source.columns)
    if waits:
        # spans that awaited (asyncio tasks) make the phases' time their self time
        # (_phase_kernel.phase_times): their self and wait times are summed too
        waits = (source.column_range("wait_ns")[1] or 0) > 0
    if not source.filtered and source.filesystem is None:
        # Each process's parts read in order, parents found among them: no join (see
        # process_phases); None where the parts are not as it needs, then the join below.
        from ._process_phases import phases_of_parts

        streamed = phases_of_parts(
            source.files, source.footers(), source.memory_bytes(), source.unique_ids, waits=waits
        )
        if streamed is not None:
            return streamed
    categories = [
        row[0]
        for row in source.sql(
            "SELECT DISTINCT category FROM spans WHERE category IS NOT NULL ORDER BY category"
        ).fetchall()
    ]
    levels = category_levels(categories)
    source.con.register(
        "hs_levels",
        pa.table(
            {"category": pa.array(categories, pa.string()), "top": levels[2], "sub": levels[3]}
        ),
    )
    try:
        rows = source.arrow(
            phases_sql(DUCKDB, "spans", "hs_levels", unique_ids=source.unique_ids(), waits=waits)
        )
        rank_values = np.array(
            sorted(r[0] for r in source.sql("SELECT DISTINCT rank FROM spans").fetchall()), np.int64
        )
    finally:
        source.con.unregister("hs_levels")
    return finish_phases(rows, rank_values, levels)
