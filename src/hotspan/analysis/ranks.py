"""Across ranks: collectives matched between ranks, who makes the others wait (stragglers,
with the reason), and the critical path of each step. One kernel (:class:`RankAnalysis`)
over numpy columns gathered from Arrow batches (rank_source.py), so a run larger than
memory is read a batch at a time; ``hotspan.collectives``, ``hotspan.stragglers``,
``hotspan.critical_path`` and ``hotspan ranks`` all ask it.

Matching. A collective span is one whose category's last part is ``comms`` (``category=``).
Instance ``index`` of key ``key`` (the span's name; ``category:name`` when one name has
several collective categories) is the ``index``-th span of that key on each rank that has
it, in start order: its group. Spans whose category's last part is ``comms:GROUP`` (the
torch.distributed instrumentation's) are matched by group and sequence number instead:
every collective of the group on a rank, whatever its name, in one sequence, instance k
the k-th of each rank of the group, never across groups (key ``name@GROUP`` when the run
has several groups); where the ranks of a group disagree on a sequence number's
collective, nothing from there on is matched. Instances past the count of the rank that
has fewest are left out (``unmatched`` in the metadata); both are said in the metadata's
``match_problems``.

Clocks. Ranks on different hosts read different clocks. Every rank of a collective leaves
it at (nearly) the same true time, so each rank's offset is estimated as the median, over
its instances, of its end minus the instance's median end (``align=False`` turns this
off); arrivals and waits use the corrected times. ``arrival_error_ns``, a rank's error
bound, is the 95th percentile of how far its ends stray from that offset, plus the clock
calibration error the run's metadata states and, for a run directory written through a
collector, the offset uncertainty it measured for that rank (``offset_uncertainty_ns`` in
the parts' metadata); ``clock_error_ns=`` replaces those two.

Waits and blame. In an instance the last arriver's arrival is L; each rank waits
``L - arrival`` (clipped to its span), and the last arriver is blamed for the sum of the
others' waits: blame and wait each sum to the same total.

The straggler test. Were ranks alike, the last arriver of an instance would be any rank of
its group, each with chance 1/n, whatever the instance's blame B. A rank's blame S is then
a sum of independent terms bounded by max B, with mean sum(B/n) and variance
sum(B^2 (1/n)(1-1/n)); Bennett's inequality bounds the chance of a blame as high as the
one seen: p. A rank is a straggler when p <= alpha / ranks (Bonferroni; alpha 0.001) and
its blame exceeds its expected blame by at least ``min_share`` (0.05) of all blame. Then
step-down: the instances the stragglers named so far arrived last at are set aside, the
others' last arriver taken as uniform over the ranks not named, and the test runs again on
the rest, until it names no more (so that a rank late by a second does not hide another
late by milliseconds).

Engines. ``engine=`` as for ``stats`` (engine.py chooses alike): a table is read in memory,
paths are loaded or streamed a part at a time by size, ``"spark"`` or a SparkSession has
Spark pick the rows each pass keeps (collectives, top-level spans, the steps' children) and
sum the spans' self time per window before each collective (the heavy group-by), and hands
them to the same kernel: one definition of every answer, the same rows from every engine.

Steps. The spans named ``step`` (``step=``) at depth 0, else on each rank its most
frequent depth-0 span; the k-th step of every rank is step k.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from .filters import SpanFilter
from ._rank_kernel import META_RANKS, RankAnalysis, RankOptions

__all__ = [
    "RankAnalysis",
    "RankOptions",
    "collectives",
    "critical_path",
    "rank_steps",
    "ranks_summary",
    "stragglers",
]


def collectives(
    spans: Any,
    *,
    category: str = "comms",
    align: bool = True,
    clock_error_ns: int | None = None,
    filter: SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """A row per collective instance and rank: ``key`` (the span's name), ``index`` (its
    occurrence on each rank), ``rank``, ``arrival_ns`` (its start, on the common clock),
    ``arrival_error_ns`` (the error bound of the rank's clock), ``wait_ns`` (last arrival
    minus its own, within its span) and ``last`` (it arrived last). Rows in instance order.
    The metadata key ``hotspan.ranks`` (JSON) holds each rank's estimated clock offset."""
    options = RankOptions(category=category, align=align, clock_error_ns=clock_error_ns)
    with RankAnalysis(spans, options, filter, engine) as analysis:
        return analysis.collectives()


def stragglers(
    spans: Any,
    *,
    category: str = "comms",
    step: str | None = "step",
    align: bool = True,
    clock_error_ns: int | None = None,
    alpha: float = 0.001,
    min_share: float = 0.05,
    filter: SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """A row per rank: ``blame_ns`` (the waits it caused as the last arriver), ``wait_ns``
    (its own waits), ``steps_last`` (steps in which it arrived last at any collective),
    ``straggler`` (the test of the module doc), ``reason`` (for a straggler: the span it
    spent longest in, over the median rank, before arriving late) and ``step_ns_if_median``
    (the mean step time had it kept up with the second last). Blame and wait each sum to the
    same total."""
    from ._rank_reasons import straggler_table

    options = RankOptions(
        category=category,
        step=step,
        align=align,
        clock_error_ns=clock_error_ns,
        alpha=alpha,
        min_share=min_share,
    )
    with RankAnalysis(spans, options, filter, engine) as analysis:
        return straggler_table(analysis)


def critical_path(
    spans: Any,
    *,
    category: str = "comms",
    step: str | None = "step",
    align: bool = True,
    summary: bool = False,
    filter: SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """A row per segment of each step's critical path: ``step``, ``rank``, ``name``,
    ``start_ns``, ``end_ns`` (on that rank's own clock, clipped to the segment). Walking back
    from the step's last end: the tail of the rank that ends last, each collective from its
    last arrival to its end on the last arriver's rank, that rank's spans (the step's
    children) since its previous collective. ``summary=True``: per name, its time on the
    path (``critical_ns``) and ``share``."""
    from ._rank_reasons import critical_path_table, critical_summary

    options = RankOptions(category=category, step=step, align=align)
    with RankAnalysis(spans, options, filter, engine) as analysis:
        table = critical_path_table(analysis)
    return critical_summary(table) if summary else table


def rank_steps(
    spans: Any,
    *,
    category: str = "comms",
    step: str | None = "step",
    align: bool = True,
    filter: SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> pa.Table:
    """A row per (rank, step), in (rank, step) order: the cells of serve's rank x step
    heatmap. ``start_ns``/``end_ns`` (the step span, on the rank's own clock), ``step_ns``,
    ``wait_ns`` (the rank's waits in the collectives it arrived at in that step),
    ``blame_ns`` (the others' waits in the instances it arrived last at in that step: a
    rank's cells sum to its :func:`stragglers` ``blame_ns`` when every collective lies in a
    step) and ``last`` (how many instances those were). Metadata as :func:`collectives`."""
    options = RankOptions(category=category, step=step, align=align)
    with RankAnalysis(spans, options, filter, engine) as analysis:
        return analysis.step_cells()


def ranks_summary(
    spans: Any,
    *,
    category: str = "comms",
    step: str | None = "step",
    align: bool = True,
    clock_error_ns: int | None = None,
    alpha: float = 0.001,
    min_share: float = 0.05,
    filter: SpanFilter | dict[str, Any] | None = None,
    engine: Any = None,
) -> dict[str, Any]:
    """What ``hotspan ranks`` prints, from one reading of ``spans``: the run's figures
    (``ranks``, ``steps``, ``step_ns``, ``instances``, ``total_wait_ns``, clock offsets),
    ``stragglers`` (every rank's row of :func:`stragglers`, most blamed first, with its
    ``share`` of all blame) and ``critical_path`` (per name: ``critical_ns``, ``share``)."""
    from ._rank_reasons import (
        critical_path_table,
        critical_summary,
        second_pass,
        straggler_table,
        wanted_windows,
    )

    options = RankOptions(
        category=category,
        step=step,
        align=align,
        clock_error_ns=clock_error_ns,
        alpha=alpha,
        min_share=min_share,
    )
    with RankAnalysis(spans, options, filter, engine) as analysis:
        # one more reading of the spans serves both the reasons and the critical path
        _, _, flagged = analysis.straggler_test(analysis.blame()[0])
        wanted = wanted_windows(analysis, flagged) if flagged.any() else None
        second_pass(analysis, wanted, kids=True)
        table = straggler_table(analysis)
        path = critical_summary(critical_path_table(analysis)).to_pylist()
    meta = json.loads(table.schema.metadata[META_RANKS])
    rows = table.to_pylist()
    total = sum(r["blame_ns"] for r in rows)
    for row in rows:
        row["share"] = row["blame_ns"] / total if total else 0.0
        row["p"] = meta["p"][str(row["rank"])]
    rows.sort(key=lambda r: (-r["blame_ns"], r["rank"]))
    return {
        "ranks": meta["ranks"],
        "steps": meta["steps"],
        "step_ns": meta["step_ns"],
        "instances": meta["instances"],
        "unmatched": meta["unmatched"],
        "match_problems": [p["text"] for p in meta["match_problems"]],
        "total_wait_ns": total,
        "test": {"name": meta["test"], "alpha": alpha, "min_share": min_share},
        "clock_offset_ns": meta["clock_offset_ns"],
        "arrival_error_ns": meta["arrival_error_ns"],
        "stragglers": rows,
        "critical_path": path,
    }
