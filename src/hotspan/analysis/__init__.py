"""Analysis of span tables: statistics, phases and comparisons of two runs.

hotspan.stats(table)            # per (category, name): count, total, self, percentiles, ...
hotspan.phases(table)           # each top-level category per rank and its sub-categories
hotspan.compare(base, new)      # per span group: medians, their change with a bootstrap interval,
                                # a Mann-Whitney U p-value, and a verdict
hotspan.collectives(table)      # per collective instance and rank: arrival, wait, last
hotspan.stragglers(table)       # per rank: blame, wait, steps last, straggler and why
hotspan.critical_path(table)    # per step: the (rank, span) segments that set its length
hotspan.rank_steps(table)       # per rank and step: step time, wait, blame
"""

from __future__ import annotations

from ._api import compare, phases, stats
from .ranks import collectives, critical_path, rank_steps, stragglers
from .statistics import PERCENTILES, PHASE_COLUMNS, STAT_COLUMNS

__all__ = [
    "PERCENTILES",
    "PHASE_COLUMNS",
    "STAT_COLUMNS",
    "collectives",
    "compare",
    "critical_path",
    "phases",
    "rank_steps",
    "stats",
    "stragglers",
]
