"""``stats``, ``phases`` and ``compare`` as hotspan exports them: of a table in memory
(statistics.py, comparison.py), or of a path (a Parquet file, a dataset directory, a URI)
streamed through DuckDB with bounded memory, to the same result (streaming.py).

The dispatch lives here, above both, so that neither imports the other's module.
"""

from __future__ import annotations

import os
from typing import Sequence

import pyarrow as pa

from . import comparison, statistics
from .statistics import is_path

__all__ = ["compare", "phases", "stats"]


def stats(table: pa.Table | str | os.PathLike, by: str | Sequence[str] | None = None) -> pa.Table:
    if is_path(table):
        from .streaming import stream_stats

        # streamed: by (category, name) unless told (device rows are not told apart there)
        return stream_stats(table, ("category", "name") if by is None else by)
    return statistics.stats(table, by)


def phases(table: pa.Table | str | os.PathLike) -> pa.Table:
    if is_path(table):
        from .streaming import stream_phases

        return stream_phases(table)
    return statistics.phases(table)


def compare(
    base: pa.Table | str | os.PathLike,
    new: pa.Table | str | os.PathLike,
    *,
    by: Sequence[str] = ("category", "name"),
    threshold: float = 0.05,
    min_count: int = 1,
    alpha: float = 0.05,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> list[dict]:
    options = dict(
        by=by,
        threshold=threshold,
        min_count=min_count,
        alpha=alpha,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )
    if is_path(base) or is_path(new):
        from .streaming import stream_compare

        comparison.check_options(alpha, confidence, resamples)
        by = tuple((by,) if isinstance(by, str) else by)
        return stream_compare(base, new, **{**options, "by": by})
    return comparison.compare(base, new, **options)


_PATHS = (
    "\n\n    Also takes a path (a Parquet file, a run directory, or a URI pyarrow.fs reads): "
    "streamed through DuckDB\n    with bounded memory, to the same result (see analysis/streaming.py).\n"
)
for _ours, _theirs in (
    (stats, statistics.stats),
    (phases, statistics.phases),
    (compare, comparison.compare),
):
    _ours.__doc__ = (_theirs.__doc__ or "").rstrip() + _PATHS
