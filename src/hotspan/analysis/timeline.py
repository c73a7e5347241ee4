"""A timeline for any size: what a screen ``width`` pixels wide can show of a time window.

    view = timeline(spans, start_ns=a, end_ns=b, width=1200)
    for track in view["tracks"]:       # one per (rank, pid, thread_id, lane)
        track["spans"]                 # the spans at least a pixel long, exactly
        track["pixels"]                # the shorter ones, summarised per pixel

The answer's size is bounded by ``width`` and the tracks, never by the spans: a span one
pixel long or more is listed once, exactly (on one track, spans of one depth never overlap,
so there are at most about ``width`` of them a depth); the shorter spans are counted once,
in the pixel where they start (a span that starts before the window counts in pixel 0),
with the busiest name (the most time among them) and the outermost depth under that pixel.
A track with no more than ``width`` spans in the window lists them all exactly: zoomed in far
enough, every span is exact.

One kernel, fed batch by batch: a table in memory is cut into batches, a run's Parquet parts
are read in batches with the window pushed down to the reader (row groups whose
``start_ns``/``end_ns`` statistics lie outside it are skipped), so memory is that of one
batch plus the summary. ``hotspan serve`` answers ``GET /v1/traces/{id}/timeline`` with it.

The kernel and the answer's two forms (dicts, JSON text) are in ``timeline_kernel``, the
sources (Parquet parts, a window's spans) in ``timeline_source``, the index serve keeps per
run (levels of bins, span blocks, saved beside the run) in ``timeline_index``, the file it is
kept in (an ``.npz`` written member by member, memory-mapped back) in ``timeline_store``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ._timeline_index import TimelineIndex, run_version
from ._timeline_kernel import INDEX_BINS, TRACK_KEYS, Summary
from ._timeline_source import window_batches, checked_window, window_count, window_of, window_spans

__all__ = [
    "INDEX_BINS",
    "TRACK_KEYS",
    "TimelineIndex",
    "run_version",
    "timeline",
    "window_count",
    "window_of",
    "window_spans",
]


def timeline(
    spans: Any,
    start_ns: int | None = None,
    end_ns: int | None = None,
    width: int = 1200,
    *,
    ranks: Sequence[int] | None = None,
    encoded: bool = False,
) -> Any:
    """What a ``width``-pixel view of ``[start_ns, end_ns)`` shows of ``spans`` (a table, a
    Parquet file, a run directory, or any trace file): per track (``rank``, ``pid``,
    ``thread_id``, ``lane``), the spans at least a pixel long exactly (``spans``: span_id,
    name, start_ns, end_ns, depth) and the shorter ones summarised per pixel (``pixels``: x,
    count, the busiest name, the outermost depth, their time in the window); a track with at
    most ``width`` spans in the window lists them all. Each span is counted once. The window
    defaults to the whole run; ``ranks`` keeps only those ranks' tracks. ``encoded``: the same
    answer as JSON text (bytes), written from its columns (what ``hotspan serve`` sends)."""
    start_ns, end_ns = checked_window(spans, start_ns, end_ns, width, None)
    summary = Summary(start_ns, end_ns, width)
    for batch in window_batches(spans, start_ns, end_ns, ranks):
        summary.add(batch)
    return summary.result(ranks, encoded=encoded)
