"""Which spans are collectives, of which process group, and which spans of different ranks
are one instance of a collective: one rule below the formats and the analysis, for the
across-ranks analysis (analysis/_rank_kernel.py), ``hotspan hang`` (analysis/hang.py) and the
trace writers' flows between ranks (formats/_codec_inputs.py).

A collective span is one whose category's last part is ``want`` (``comms`` by default), or
``want:GROUP`` (the torch.distributed instrumentation's, marked with their process group).
Instance ``index`` of a key is the ``index``-th span of that key on each rank that has it,
in start order: the key is the span's (name, category), or
for ``want:GROUP`` its group (every collective of the group, whatever its name, in one
sequence); instances past the count of the rank that has fewest are not matched, and where
the ranks of a group disagree on a sequence number's collective (the same instance under two
names), nothing of that group is matched from there on.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Matching",
    "collective_pattern",
    "group_of",
    "is_collective",
    "match_instances",
]

#: A count of instances for a key no rank holds (none there: nothing to match).
NONE = np.iinfo(np.int64).max


def is_collective(category: str | None, want: str = "comms") -> bool:
    """Whether a span of ``category`` is a collective: the category's last part is ``want``
    (``train/comms``), or ``want:GROUP`` (``comms:world``: the torch.distributed
    instrumentation's collectives, marked with their process group)."""
    if category is None:
        return False
    last = category.rpartition("/")[2]
    return last == want or last.startswith(want + ":")


def group_of(category: str | None, want: str = "comms") -> str | None:
    """The process group a collective's category names (``comms:GROUP``), else None."""
    if category is None:
        return None
    last = category.rpartition("/")[2]
    return last[len(want) + 1 :] if last.startswith(want + ":") else None


def collective_pattern(want: str = "comms") -> str:
    """:func:`is_collective` as a regular expression over the category path (for a whole
    column at once: ``pyarrow.compute.match_substring_regex``)."""
    return f"(^|/){re.escape(want)}(:[^/]*)?$"


def _bounds(sorted_keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if not len(sorted_keys):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    starts = np.flatnonzero(np.r_[True, sorted_keys[1:] != sorted_keys[:-1]])
    return starts, np.diff(np.r_[starts, len(sorted_keys)])


@dataclass
class Matching:
    """The instances of collective spans (rows as given to :func:`match_instances`).

    ``key``, ``index``: per row its match key and its number among its key's spans on its
    rank. ``pairs``: per key (1 for a group else 0, the group's number or the name's code,
    0 or the category's code). ``groups``: the groups' names. ``n_instances``: per key the
    instances matched (:data:`NONE` for a key no rank holds). ``holders``, ``most``: per key
    how many ranks hold it and the most spans one of them has. ``first_rows``: per (key, rank)
    its first row. ``counts``: per (key, rank) its spans. ``disagreements``: per group whose
    ranks disagree, (key, the sequence number, the instances there were before, the rows at
    that number)."""

    key: np.ndarray
    index: np.ndarray
    pairs: np.ndarray
    groups: list[str]
    n_instances: np.ndarray
    holders: np.ndarray
    most: np.ndarray
    first_rows: np.ndarray
    counts: np.ndarray
    disagreements: list[tuple[int, int, int, np.ndarray]] = field(default_factory=list)

    def instances(self) -> tuple[np.ndarray, np.ndarray]:
        """Per row whether it is matched, and its instance's number (keys in order, each key's
        instances in order)."""
        keep = self.index < self.n_instances[self.key] if len(self.key) else np.zeros(0, bool)
        base = np.r_[0, np.cumsum(np.where(self.n_instances == NONE, 0, self.n_instances))]
        return keep, base[self.key] + self.index


def match_instances(
    names: np.ndarray,
    categories: np.ndarray,
    rank: np.ndarray,
    start: np.ndarray,
    values: Sequence[str | None],
    want: str = "comms",
) -> Matching:
    """Match the collective spans given (``names`` and ``categories``: codes into ``values``)
    into instances across ``rank``, each rank's spans of a key in ``start`` order (ties: in
    the rows' order); see the module doc."""
    names, cats = names.astype(np.int64), categories.astype(np.int64)
    rank = rank.astype(np.int64)
    # Each row's match key: its group where its category names one, else (name, category).
    found: dict[str, int] = {}
    group_code = np.full(len(values), -1, np.int64)
    for code, value in enumerate(values):
        group = group_of(value, want)
        if group is not None:
            group_code[code] = found.setdefault(group, len(found))
    row_group = group_code[cats] if len(cats) else np.zeros(0, np.int64)
    grouped = row_group >= 0
    # one integer per (name, category), past them one per group: unique in one dimension
    n_strings = len(values) + 1
    past = n_strings * n_strings
    codes = np.where(grouped, past + row_group, names * n_strings + cats)
    uniq, inverse = np.unique(codes, return_inverse=True)
    key = inverse.reshape(-1).astype(np.int64)
    is_group = uniq >= past
    # per key: (grouped, group or name, 0 or category)
    pairs = np.stack(
        [
            is_group.astype(np.int64),
            np.where(is_group, uniq - past, uniq // n_strings),
            np.where(is_group, 0, uniq % n_strings),
        ],
        1,
    ).reshape(-1, 3)
    n_keys = len(pairs)
    order = np.lexsort((start, rank, key))
    starts, counts = _bounds(key[order] * (int(rank.max(initial=0)) + 1) + rank[order])
    index = np.empty(len(order), np.int64)
    index[order] = np.arange(len(order)) - np.repeat(starts, counts)
    # instances per key: the fewest any rank of its group has
    group_key = key[order[starts]]
    n_instances = np.full(n_keys, NONE)
    np.minimum.at(n_instances, group_key, counts)
    holders = np.bincount(group_key, minlength=n_keys)
    most = np.zeros(n_keys, np.int64)
    np.maximum.at(most, group_key, counts)
    matching = Matching(
        key, index, pairs, list(found), n_instances, holders, most, order[starts], counts
    )
    if grouped.any():
        _disagreements(matching, names)
    return matching


def _disagreements(m: Matching, names: np.ndarray) -> None:
    """A group whose ranks disagree on the collective at some sequence number (one skipped a
    collective, or called another): matched up to there, nothing from there on."""
    key, index, n_instances = m.key, m.index, m.n_instances
    provisional = index < n_instances[key]
    base = np.r_[0, np.cumsum(np.where(n_instances == NONE, 0, n_instances))]
    inst = np.where(provisional, base[key] + index, 0)
    low = np.full(int(base[-1]), NONE)
    high = np.full(int(base[-1]), -1)
    np.minimum.at(low, inst[provisional], names[provisional])
    np.maximum.at(high, inst[provisional], names[provisional])
    for g in np.flatnonzero(m.pairs[:, 0] == 1):
        if n_instances[g] == NONE:
            continue
        span = slice(int(base[g]), int(base[g]) + int(n_instances[g]))
        bad = np.flatnonzero(low[span] != high[span])
        if not len(bad):
            continue
        seq = int(bad[0])
        rows = np.flatnonzero(provisional & (key == g) & (index == seq))
        m.disagreements.append((int(g), seq, int(n_instances[g]), rows))
    for group, seq, _before, _rows in m.disagreements:
        n_instances[group] = seq
