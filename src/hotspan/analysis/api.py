"""``stats``, ``phases`` and ``compare`` as hotspan exports them: of a table in memory, of
paths streamed through DuckDB, or on Spark, as the one layer (engine.py) decides. The CLI
and ``serve`` call these, with these defaults.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from . import comparison, statistics
from .engine import Spans, open_spans
from .filters import SpanFilter

__all__ = ["compare", "phases", "stats"]

SpansLike = Any  # a pyarrow.Table, a path (str / os.PathLike), or a list of paths


def stats(
    spans: SpansLike,
    by: str | Sequence[str] | None = None,
    *,
    filter: SpanFilter | dict | None = None,
    engine: Any = None,
) -> pa.Table:
    with open_spans(spans, filter, engine) as opened:
        return opened.stats(by)


def phases(
    spans: SpansLike, *, filter: SpanFilter | dict | None = None, engine: Any = None
) -> pa.Table:
    with open_spans(spans, filter, engine) as opened:
        return opened.phases()


def compare(
    base: SpansLike,
    new: SpansLike,
    *,
    by: str | Sequence[str] = ("category", "name"),
    threshold: float = 0.05,
    min_count: int = 1,
    alpha: float = 0.05,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    filter: SpanFilter | dict | None = None,
    normalize: str | None = None,
    shift: bool = True,
    engine: Any = None,
) -> pa.Table:
    comparison.check_options(alpha, confidence, resamples)
    by = tuple((by,) if isinstance(by, str) else by)
    with open_spans(base, filter, engine) as before, open_spans(new, filter, engine) as after:
        return compare_spans(
            before,
            after,
            by=by,
            threshold=threshold,
            min_count=min_count,
            alpha=alpha,
            confidence=confidence,
            resamples=resamples,
            seed=seed,
            normalize=normalize,
            shift=shift,
        )


def compare_spans(
    before: Spans,
    after: Spans,
    *,
    by: Sequence[str],
    threshold: float,
    min_count: int,
    alpha: float,
    confidence: float,
    resamples: int,
    seed: int,
    normalize: str | None,
    shift: bool,
) -> pa.Table:
    """``compare`` of two opened :class:`Spans` (the CLI opens them once for the environment
    check and the comparison)."""
    if (before.table is None) != (after.table is None) or before.kind != after.kind:
        # one side loaded (small, or another format), the other streamed: both in memory
        before, after = before.in_memory(), after.in_memory()
    reference = None
    if normalize is not None:
        reference = (
            comparison.reference_median(before.stats(("name",)), normalize, "base"),
            comparison.reference_median(after.stats(("name",)), normalize, "new"),
        )
    options: dict[str, Any] = {
        "threshold": threshold,
        "min_count": min_count,
        "alpha": alpha,
        "confidence": confidence,
        "resamples": resamples,
        "seed": seed,
        "normalize": normalize,
        "shift": shift,
        "machine": (
            comparison.machine_of(before.metadata()),
            comparison.machine_of(after.metadata()),
        ),
    }
    if before.table is not None and after.table is not None:
        from .statistics import stats as table_stats

        tables = (before.table, after.table)
        grouped = [comparison.durations_by_group(t, by) for t in tables]
        empty = np.zeros(0, np.int64)

        def durations(keys: pa.Table) -> Iterator[tuple[tuple, np.ndarray, np.ndarray]]:
            for row in keys.to_pylist():
                key = tuple(row[k] for k in by)
                yield key, grouped[0].get(key, empty), grouped[1].get(key, empty)

        return comparison.judge_rows(
            table_stats(tables[0], by),
            table_stats(tables[1], by),
            by,
            durations,
            reference=reference,
            **options,
        )
    if before.kind == "duckdb":
        from .streaming import stream_compare

        return stream_compare(before.source, after.source, by=by, reference=reference, **options)
    return before.source.compare(after.source, by=by, reference=reference, **options)


_MORE = (
    "\n\n    ``spans`` may be a table, a path (a Parquet file, a run directory, a URI pyarrow.fs reads) or "
    "a list of\n    paths: large Parquet is streamed through DuckDB with bounded memory, to the same result "
    '(analysis/engine.py);\n    ``engine="spark"`` or a SparkSession runs the same queries on Spark. '
    "``filter``: a SpanFilter (or a\n    dict of its fields): names, categories, ranks, threads, a time window "
    "(since/until), a minimum\n    duration, a run id.\n"
)
for _ours, _theirs in (
    (stats, statistics.stats),
    (phases, statistics.phases),
    (compare, comparison.compare),
):
    _ours.__doc__ = (_theirs.__doc__ or "").rstrip() + _MORE
del os
