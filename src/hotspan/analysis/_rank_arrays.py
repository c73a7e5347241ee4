"""Grouped numpy arrays for the across-ranks kernel and its second pass (rank_kernel.py,
rank_reasons.py): runs of equal keys, a cheap sortedness check, times grouped by rank."""

from __future__ import annotations

from typing import Literal

import numpy as np

__all__ = ["PerRank", "group_bounds", "sorted_by"]


def group_bounds(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start and count of each run of equal values in ``sorted_keys``."""
    if not len(sorted_keys):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return starts, np.diff(np.r_[starts, len(sorted_keys)])


def sorted_by(*keys: np.ndarray) -> bool:
    """Whether the rows are already in the order ``np.lexsort(keys[::-1])`` would give
    (first key first): parts read in order usually are, and a check is O(n)."""
    if len(keys[0]) < 2:
        return True
    tied = np.ones(len(keys[0]) - 1, bool)
    for key in keys:
        step = np.diff(key.astype(np.int64) if key.dtype == np.uint64 else key)
        if (step[tied] < 0).any():
            return False
        tied &= step == 0
    return True


class PerRank:
    """Times grouped by rank and sorted, to ask many times where other times fall."""

    def __init__(self, rank: np.ndarray, time: np.ndarray) -> None:
        self.order = np.lexsort((time, rank))
        self.rank, self.time = rank[self.order], time[self.order]
        self.ranks, self.first = np.unique(self.rank, return_index=True)
        self.ends = np.r_[self.first[1:], len(self.rank)].astype(np.int64)

    def position(self, rank: np.ndarray, time: np.ndarray, strict: bool) -> np.ndarray:
        """For each (rank, time): the position, in this sorted order, of the first time of
        its rank at or after (``strict``: after) it; -1 for a rank with no times here.
        O(n log n): the queries are grouped by rank once, not scanned once per rank."""
        out = np.full(len(rank), -1, np.int64)
        side: Literal["left", "right"] = "right" if strict else "left"
        if len(rank) and rank[0] == rank[-1] and (rank == rank[0]).all():
            # one rank's batch (a run directory's part): no grouping needed
            i = int(np.searchsorted(self.ranks, rank[0]))
            if i < len(self.ranks) and self.ranks[i] == rank[0]:
                a, b = self.first[i], self.ends[i]
                out[:] = a + np.searchsorted(self.time[a:b], time, side=side)
            return out
        by = np.argsort(rank, kind="stable")
        asked, first = np.unique(rank[by], return_index=True)
        ends = np.r_[first[1:], len(by)]
        at = np.searchsorted(self.ranks, asked)
        for r, i, lo, hi in zip(asked, at, first, ends):
            if i >= len(self.ranks) or self.ranks[i] != r:
                continue
            a, b = self.first[i], self.ends[i]
            chosen = by[lo:hi]
            out[chosen] = a + np.searchsorted(self.time[a:b], time[chosen], side=side)
        return out
