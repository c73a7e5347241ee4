"""``stats``, ``phases`` and ``compare`` as hotspan exports them: of a table in memory, of
paths streamed through DuckDB, or on Spark, as the one layer (engine.py) decides. The CLI
and ``serve`` call these, with these defaults.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pyarrow as pa

from . import comparison, statistics
from ._engine import open_spans
from .filters import SpanFilter
from ._options import CompareOptions, StatsRequest, keys_of

__all__ = ["compare", "phases", "stats"]

SpansLike = Any  # a pyarrow.Table, a path (str / os.PathLike), or a list of paths


def stats(
    spans: SpansLike,
    by: str | Sequence[str] | None = None,
    *,
    filter: SpanFilter | Mapping[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    request = StatsRequest.of(by, filter)
    with open_spans(spans, request.filter, engine) as opened:
        return opened.engine.stats(request)


def phases(
    spans: SpansLike, *, filter: SpanFilter | Mapping[str, Any] | None = None, engine: Any = None
) -> pa.Table:
    with open_spans(spans, filter, engine) as opened:
        return opened.engine.phases()


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
    filter: SpanFilter | Mapping[str, Any] | None = None,
    normalize: str | None = None,
    shift: bool = True,
    engine: Any = None,
) -> pa.Table:
    options = CompareOptions(
        by=keys_of(by),
        threshold=threshold,
        min_count=min_count,
        alpha=alpha,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
        normalize=normalize,
        shift=shift,
    )
    with open_spans(base, filter, engine) as before, open_spans(new, filter, engine) as after:
        return before.compare(after, options)


_MORE = (
    "\n\n    ``spans`` may be a table, a path (a Parquet file, a run directory, a URI pyarrow.fs reads) or "
    "a list of\n    paths: large Parquet is streamed through DuckDB with bounded memory, to the same result "
    '(analysis/_engine.py);\n    ``engine="spark"`` or a SparkSession runs the same queries on Spark. '
    "``filter``: a SpanFilter (or a\n    dict of its fields): names, categories, ranks, threads, a time window "
    "(since/until), a minimum\n    duration, a run id.\n"
)
for _ours, _theirs in (
    (stats, statistics.stats),
    (phases, statistics.phases),
    (compare, comparison.compare),
):
    _ours.__doc__ = (_theirs.__doc__ or "").rstrip() + _MORE
