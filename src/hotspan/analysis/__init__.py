"""Analysis of span tables: statistics, phases and comparisons of two runs.

hotspan.stats(table)            # per (category, name): count, total, self, percentiles, ...
hotspan.phases(table)           # each top-level category per rank and its sub-categories
hotspan.compare(base, new)      # per span group: medians, their change with a bootstrap interval,
                                # a Mann-Whitney U p-value, and a verdict
"""

from __future__ import annotations

from .api import compare, phases, stats
from .statistics import PERCENTILES, PHASE_COLUMNS, STAT_COLUMNS

__all__ = ["PERCENTILES", "PHASE_COLUMNS", "STAT_COLUMNS", "compare", "phases", "stats"]
