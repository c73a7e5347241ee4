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

__all__ = [
    "compare",
    "compare_rows",
    "judge_rows",
    "mann_whitney_u",
    "median_ratio_interval",
    "rows_table",
    "shift_of",
    "verdict",
]

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
    normalize: str | None = None,
    shift: bool = True,
) -> pa.Table:
    """Per span group (the distinct values of ``by`` in either side): counts, p50, mean and
    p99 before and after, the median's change (a fraction: ``p50_ns_change``) with its
    bootstrap interval (``change_low``, ``change_high``, at ``confidence``), the two-sided
    Mann-Whitney U p-value (``p_value``) and a verdict, as a ``pyarrow.Table``:

    ``slower``: ``p_value < alpha`` and the whole interval is above ``threshold`` (so the
    median rose by more than it; ``faster`` likewise downwards); ``same`` otherwise; ``new`` or
    ``gone``: the group is on one side only; ``few``: fewer than ``min_count`` spans on a
    side. Instants (spans of no duration) are not compared: a group of instants only is no
    row (``stats`` counts them), and a side where a group has instants only lacks it. A
    mean or p99 moved by one outlier does not make a verdict; their changes are reported for
    information.

    The machine, not the code: when most groups (three quarters, at least five) moved by
    about the same factor, past ``threshold``, that shift is the machine's (a loaded or slower
    host), said in the table's metadata (``hotspan.shift``: ``{"shift", "spread", "groups",
    "moved"}``), and each group is judged against it: its new durations divided by the
    common factor before the test and the interval (``judged_change`` is the median's change
    so judged). ``shift=False`` judges raw times. ``normalize=NAME`` divides instead by the
    reference span ``NAME``'s median on each side (a fixed workload timed in both runs).
    """
    check_options(alpha, confidence, resamples)
    return compare_rows(
        base,
        new,
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


def compare_rows(
    base: pa.Table,
    new: pa.Table,
    *,
    by: Sequence[str],
    threshold: float,
    min_count: int,
    alpha: float,
    confidence: float,
    resamples: int,
    seed: int,
    normalize: str | None = None,
    shift: bool = True,
) -> pa.Table:
    """``compare`` of two tables in memory."""
    by = tuple((by,) if isinstance(by, str) else by)
    before = durations_by_group(base, by)
    after = durations_by_group(new, by)
    empty = np.zeros(0, np.int64)

    def durations(keys: pa.Table):
        for row in keys.to_pylist():
            key = tuple(row[k] for k in by)
            yield key, before.get(key, empty), after.get(key, empty)

    reference = None
    if normalize is not None:
        reference = (
            reference_median(stats(base, by=("name",)), normalize, "base"),
            reference_median(stats(new, by=("name",)), normalize, "new"),
        )
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
        reference=reference,
        normalize=normalize,
        shift=shift,
    )


def reference_median(by_name: pa.Table, name: str, side: str) -> float:
    """The median duration of the spans named ``name`` (``by_name``: stats by name), for
    ``normalize``; ValueError when the side has none."""
    for row in by_name.to_pylist():
        if row["name"] == name and row["p50_ns"]:
            return float(row["p50_ns"])
    raise ValueError(f"normalize: no span named {name!r} with a duration in the {side} trace")


def check_options(alpha: float, confidence: float, resamples: int) -> None:
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), not {alpha}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), not {confidence}")
    if resamples < 100:
        raise ValueError(f"resamples must be at least 100, not {resamples}")


#: A shift is the machine's when at least this share of the judged groups (and 5) moved
#: together: within the threshold (or 5%) of the median factor.
SHIFT_SHARE = 0.75
SHIFT_MIN_GROUPS = (
    5  # fewer: a slower leaf moves its parents too, and three groups would look "shared"
)


def common_shift(ratios: np.ndarray, threshold: float) -> dict[str, Any] | None:
    """The factor most groups moved by (their medians' ratios, new over base), when it is
    shared and past ``threshold``: ``{"shift": factor - 1, "spread": the moved groups' spread
    (1.4826 x the median absolute deviation, a fraction), "groups", "moved"}``; else None."""
    ratios = ratios[np.isfinite(ratios) & (ratios > 0)]
    if len(ratios) < SHIFT_MIN_GROUPS:
        return None
    logs = np.log(ratios)
    centre = float(np.median(logs))
    near = np.abs(logs - centre) <= np.log1p(max(threshold, 0.05))
    if near.sum() < max(SHIFT_MIN_GROUPS, SHIFT_SHARE * len(ratios)):
        return None
    factor = float(np.exp(np.median(logs[near])))
    if abs(factor - 1) <= threshold:
        return None
    moved = ratios[near]
    spread = float(1.4826 * np.median(np.abs(moved - np.median(moved))))
    return {"shift": factor - 1, "spread": spread, "groups": len(ratios), "moved": int(near.sum())}


#: The columns of ``compare``'s table after the ``by`` keys.
COMPARE_FIELDS = [
    ("count_base", pa.int64()),
    ("count_new", pa.int64()),
    ("p50_ns_base", pa.float64()),
    ("mean_ns_base", pa.float64()),
    ("p99_ns_base", pa.float64()),
    ("p50_ns_new", pa.float64()),
    ("mean_ns_new", pa.float64()),
    ("p99_ns_new", pa.float64()),
    ("p50_ns_change", pa.float64()),
    ("mean_ns_change", pa.float64()),
    ("p99_ns_change", pa.float64()),
    ("judged_change", pa.float64()),
    ("change_low", pa.float64()),
    ("change_high", pa.float64()),
    ("p_value", pa.float64()),
    ("verdict", pa.string()),
]
#: Schema metadata key of ``compare``'s table: the shift or normalization it judged against (JSON).
META_SHIFT = b"hotspan.shift"


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
    reference: tuple[float, float] | None = None,
    normalize: str | None = None,
    shift: bool = True,
) -> pa.Table:
    """``compare``'s table from the two sides' ``stats`` and ``durations(keys)``, which yields
    (key, base durations, new durations) for each row of ``keys`` (the groups to judge, in
    order: the draws of the seeded bootstrap follow it); ``reference``: the medians of the
    ``normalize`` span on each side."""
    before_stats = {tuple(r[k] for k in by): r for r in base_stats.to_pylist()}
    after_stats = {tuple(r[k] for k in by): r for r in new_stats.to_pylist()}
    rng = np.random.default_rng(seed)
    rows = []
    judged = []
    for key in list(before_stats) + [k for k in after_stats if k not in before_stats]:
        # Instants (spans of no duration) have no time to compare: a group of instants only
        # is not a row, and a side holding only instants counts as absent.
        b, a = _timed(before_stats.get(key)), _timed(after_stats.get(key))
        if b is None and a is None:
            continue
        row: dict[str, Any] = dict(zip(by, key))
        for side, stat in (("base", b), ("new", a)):
            row[f"count_{side}"] = stat["count"] if stat else 0
            for column in ("p50_ns", "mean_ns", "p99_ns"):
                row[f"{column}_{side}"] = stat[column] if stat else None
        for column in ("p50_ns", "mean_ns", "p99_ns"):
            row[f"{column}_change"] = relative_change(row[f"{column}_base"], row[f"{column}_new"])
        row["judged_change"] = row["change_low"] = row["change_high"] = row["p_value"] = None
        if b is None:
            row["verdict"] = "new"
        elif a is None:
            row["verdict"] = "gone"
        elif min(b["count"], a["count"]) < min_count:
            row["verdict"] = "few"
        else:
            judged.append(row)
        rows.append(row)
    factor = 1.0
    said: dict[str, Any] | None = None
    if reference is not None:
        factor = reference[1] / reference[0]
        said = {
            "normalize": normalize,
            "reference_base_ns": reference[0],
            "reference_new_ns": reference[1],
            "shift": factor - 1,
        }
    elif shift and judged:
        ratios = np.array(
            [
                (r["p50_ns_new"] or 0) / r["p50_ns_base"] if r["p50_ns_base"] else np.nan
                for r in judged
            ],
            np.float64,
        )
        said = common_shift(ratios, threshold)
        if said is not None:
            factor = 1 + said["shift"]
    keys = pa.table(
        {k: pa.array([row[k] for row in judged], base_stats.schema.field(k).type) for k in by}
    )
    for row, (_key, x, y) in zip(judged, durations(keys)):
        if factor != 1.0:
            y = (
                np.asarray(y, np.float64) / factor
            )  # judged against the machine's (or the reference's) factor
        p = mann_whitney_u(x, y)
        low, high = median_ratio_interval(x, y, confidence=confidence, resamples=resamples, rng=rng)
        row["p_value"], row["change_low"], row["change_high"] = p, low, high
        change = row["p50_ns_change"]
        row["judged_change"] = None if change is None else (1 + change) / factor - 1
        row["verdict"] = verdict(p, low, high, threshold=threshold, alpha=alpha)
    return rows_table(rows, by, base_stats.schema, said)


def _timed(stat: dict[str, Any] | None) -> dict[str, Any] | None:
    """A side's statistics of a group, or None where it has no timed span (instants only)."""
    if stat is None or stat.get("instants") == stat["count"]:
        return None
    return stat


def verdict(p_value: float, low: float, high: float, *, threshold: float, alpha: float) -> str:
    """The one rule (span groups, benchmarks, a benchmark's spans): ``slower`` when the change
    is significant and its whole interval above ``threshold``, ``faster`` likewise below,
    else ``same``."""
    if p_value < alpha and low > threshold:
        return "slower"
    if p_value < alpha and high < -threshold:
        return "faster"
    return "same"


def rows_table(
    rows: list[dict], by: Sequence[str], key_schema: pa.Schema, said: dict | None = None
) -> pa.Table:
    """``compare``'s rows as a table: the keys (their types as in ``stats``), then
    :data:`COMPARE_FIELDS`; the shift it judged against in the metadata."""
    import json

    fields = [pa.field(k, key_schema.field(k).type) for k in by] + [
        pa.field(n, t) for n, t in COMPARE_FIELDS
    ]
    schema = pa.schema(fields, metadata={META_SHIFT: json.dumps(said).encode()} if said else None)
    columns = {f.name: [r.get(f.name) for r in rows] for f in fields}
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in fields}, schema=schema)


def shift_of(result: pa.Table) -> dict[str, Any] | None:
    """The shift (or normalization) ``compare`` judged against, from its table's metadata."""
    import json

    raw = (result.schema.metadata or {}).get(META_SHIFT)
    return json.loads(raw) if raw else None


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


def durations_by_group(table: pa.Table, by: Sequence[str]) -> dict[tuple, np.ndarray]:
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
