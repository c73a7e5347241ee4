"""Two span tables compared group by group, as a careful benchmarker would: distributions,
not means.

Re-running one program twice moves a mean by 10% or more whenever one outlier lands on
one side; the medians barely move. So a group is called ``slower`` only when the shift is
significant (a Mann-Whitney U rank test rejects "same distribution" at ``alpha``) and
surely above the threshold: the whole bootstrap interval of the median's change lies above
it. On a loaded machine a run can really be slower for a while; its interval is then wide
and the verdict stays ``same``, where a point estimate past the threshold would cry wolf. Everything is numpy (no scipy): the U test uses the normal
approximation with the tie correction, the bootstrap is seeded, so the verdicts of two
runs on the same files are the same.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from .statistics import combined_codes, stats, to_numpy

__all__ = ["compare", "mann_whitney_u", "median_ratio_interval"]

#: The verdicts ``compare`` gives.
VERDICTS = ("slower", "faster", "same", "new", "gone", "few")


def compare(
    base: pa.Table,
    new: pa.Table,
    *,
    by: Sequence[str] = ("category", "name"),
    threshold: float = 0.05,
    min_count: int = 1,
    alpha: float = 0.05,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
) -> list[dict]:
    """Per span group (the distinct values of ``by`` in either table): counts, p50, mean and
    p99 before and after, the median's change (a fraction: ``p50_ns_change``) with its
    bootstrap interval (``change_low``, ``change_high``, at ``confidence``), the two-sided
    Mann-Whitney U p-value (``p_value``) and a verdict:

    ``slower``: ``p_value < alpha`` and the whole interval is above ``threshold`` (so the
    median rose by more than it; ``faster`` likewise downwards); ``same`` otherwise; ``new`` or
    ``gone``: the group is on one side only; ``few``: fewer than ``min_count`` spans on a
    side (not judged). A mean or p99 moved by one outlier does not make a verdict; their
    changes are reported for information.

    ``hotspan.compare`` also takes paths (analysis/api.py): streamed, to the same result.
    """
    check_options(alpha, confidence, resamples)
    by = tuple((by,) if isinstance(by, str) else by)
    before = _durations_by_group(base, by)
    after = _durations_by_group(new, by)
    empty = np.zeros(0, np.int64)

    def durations(keys: pa.Table):
        for row in keys.to_pylist():
            key = tuple(row[k] for k in by)
            yield key, before.get(key, empty), after.get(key, empty)

    return judge_rows(
        stats(base, by=by),
        stats(new, by=by),
        by,
        durations,
        threshold=threshold,
        min_count=min_count,
        alpha=alpha,
        confidence=confidence,
        resamples=resamples,
        seed=seed,
    )


def check_options(alpha: float, confidence: float, resamples: int) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), not {alpha}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    if resamples < 100:
        raise ValueError(f"resamples must be at least 100, not {resamples}")


def judge_rows(
    base_stats: pa.Table,
    new_stats: pa.Table,
    by: Sequence[str],
    durations: Callable[[pa.Table], Iterator[tuple[tuple, np.ndarray, np.ndarray]]],
    *,
    threshold: float,
    min_count: int,
    alpha: float,
    confidence: float,
    resamples: int,
    seed: int,
) -> list[dict]:
    """``compare``'s rows from the two sides' ``stats`` and ``durations(keys)``, which yields
    (key, base durations, new durations) for each row of ``keys`` (the groups to judge, in
    order: the draws of the seeded bootstrap follow it)."""
    before_stats = {tuple(r[k] for k in by): r for r in base_stats.to_pylist()}
    after_stats = {tuple(r[k] for k in by): r for r in new_stats.to_pylist()}
    rng = np.random.default_rng(seed)
    rows = []
    judged = []
    for key in list(before_stats) + [k for k in after_stats if k not in before_stats]:
        b, a = before_stats.get(key), after_stats.get(key)
        row: dict[str, Any] = dict(zip(by, key))
        for side, stat in (("base", b), ("new", a)):
            row[f"count_{side}"] = stat["count"] if stat else 0
            for column in ("p50_ns", "mean_ns", "p99_ns"):
                row[f"{column}_{side}"] = stat[column] if stat else None
        for column in ("p50_ns", "mean_ns", "p99_ns"):
            row[f"{column}_change"] = relative_change(row[f"{column}_base"], row[f"{column}_new"])
        row["change_low"] = row["change_high"] = row["p_value"] = None
        if b is None:
            row["verdict"] = "new"
        elif a is None:
            row["verdict"] = "gone"
        elif min(b["count"], a["count"]) < min_count:
            row["verdict"] = "few"
        else:
            judged.append(row)
        rows.append(row)
    keys = pa.table(
        {k: pa.array([row[k] for row in judged], base_stats.schema.field(k).type) for k in by}
    )
    for row, (_key, x, y) in zip(judged, durations(keys)):
        p = mann_whitney_u(x, y)
        low, high = median_ratio_interval(x, y, confidence=confidence, resamples=resamples, rng=rng)
        row["p_value"], row["change_low"], row["change_high"] = p, low, high
        significant = p < alpha
        if significant and low > threshold:
            verdict = "slower"
        elif significant and high < -threshold:
            verdict = "faster"
        else:
            verdict = "same"
        row["verdict"] = verdict
    return rows


def mann_whitney_u(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test that ``x`` and ``y`` come from one
    distribution: the normal approximation with continuity and tie corrections (what
    ``scipy.stats.mannwhitneyu(method="asymptotic")`` computes). 1.0 when a side is empty or
    every value is the same."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return 1.0
    both = np.concatenate((x, y))
    values, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    # Average rank of each distinct value: the ranks it spans, 1-based, averaged (ties).
    first_rank = np.cumsum(counts) - counts + 1
    average_rank = first_rank + (counts - 1) / 2.0
    rank_sum_y = float(average_rank[inverse[n1:]].sum())
    u_y = rank_sum_y - n2 * (n2 + 1) / 2.0
    n = n1 + n2
    ties = float(((counts.astype(np.float64) ** 3) - counts).sum())
    variance = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return 1.0
    mean = n1 * n2 / 2.0
    z = (abs(u_y - mean) - 0.5) / math.sqrt(variance)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def median_ratio_interval(
    x: np.ndarray,
    y: np.ndarray,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator | None = None,
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``median(y) / median(x) - 1``.

    Resampling n values and taking their median costs O(n) per resample, too much at a
    million spans; but the median of a resample *is* an order statistic of the sorted sample,
    whose index has a known law. The k-th smallest of n uniform indices is
    ``floor(n * U_(k))`` with ``U_(k) ~ Beta(k, n + 1 - k)``, and the next one up is
    ``U_(k) + (1 - U_(k)) * Beta(1, n - k)`` (the least of the n - k draws above it). So each
    resampled median is drawn in O(1), exactly as the resampling would give it.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    xs = np.sort(np.asarray(x, np.float64))
    ys = np.sort(np.asarray(y, np.float64))
    mx = _bootstrap_medians(xs, resamples, rng)
    my = _bootstrap_medians(ys, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mx > 0, my / mx - 1.0, np.where(my > 0, np.inf, 0.0))
    tail = (1.0 - confidence) / 2.0 * 100
    low, high = np.percentile(ratio, [tail, 100 - tail])
    return float(low), float(high)


def _bootstrap_medians(
    sorted_values: np.ndarray, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    n = len(sorted_values)
    if n == 1:
        return np.full(resamples, sorted_values[0])
    k = (n + 1) // 2  # 1-based rank of the (lower) median
    lower_u = rng.beta(k, n + 1 - k, resamples)
    lower = sorted_values[np.minimum((lower_u * n).astype(np.int64), n - 1)]
    if n % 2:
        return lower
    upper_u = lower_u + (1.0 - lower_u) * rng.beta(1, n - k, resamples)
    upper = sorted_values[np.minimum((upper_u * n).astype(np.int64), n - 1)]
    return (lower + upper) / 2.0


def _durations_by_group(table: pa.Table, by: Sequence[str]) -> dict[tuple, np.ndarray]:
    """Per group key, the durations of its spans."""
    if table.num_rows == 0:
        return {}
    code, representative = combined_codes(table, by)
    duration = to_numpy(table.column("duration_ns"), np.int64)
    order = np.argsort(code, kind="stable")
    bounds = np.cumsum(np.bincount(code, minlength=len(representative)))[:-1]
    keys = [
        tuple(row[k] for k in by)
        for row in table.select(list(by)).take(pa.array(representative)).to_pylist()
    ]
    return dict(zip(keys, np.split(duration[order], bounds)))


def relative_change(before: float | None, after: float | None) -> float | None:
    """(after - before) / before; 0 for 0 -> 0, inf for 0 -> more, None where one is missing."""
    if before is None or after is None:
        return None
    if before == 0:
        return 0.0 if after == 0 else math.inf
    return (after - before) / before
