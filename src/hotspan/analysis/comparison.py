"""Two span tables compared group by group: what got slower, faster, appeared or went."""
from __future__ import annotations

import math
from typing import Any, Sequence

import pyarrow as pa

from .statistics import stats

__all__ = ["compare"]


def compare(base: pa.Table, new: pa.Table, *, by: Sequence[str] = ("category", "name"), threshold: float = 0.05,
                   min_count: int = 1) -> list[dict]:
    """Per span group: count, p50, mean and p99 before and after, their change (a fraction)
    and a verdict: ``slower`` (p50 or mean up by more than ``threshold``), ``faster`` (p50
    or mean down by more, neither up), ``same``, ``new``, ``gone``, or ``few`` (fewer than
    ``min_count`` spans on either side: not judged)."""
    before = {tuple(r[k] for k in by): r for r in stats(base, by=by).to_pylist()}
    after = {tuple(r[k] for k in by): r for r in stats(new, by=by).to_pylist()}
    rows = []
    for key in list(before) + [k for k in after if k not in before]:
        b, a = before.get(key), after.get(key)
        row: dict[str, Any] = dict(zip(by, key))
        for side, stat in (("base", b), ("new", a)):
            row[f"count_{side}"] = stat["count"] if stat else 0
            for column in ("p50_ns", "mean_ns", "p99_ns"):
                row[f"{column}_{side}"] = stat[column] if stat else None
        for column in ("p50_ns", "mean_ns", "p99_ns"):
            row[f"{column}_change"] = _change(row[f"{column}_base"], row[f"{column}_new"])
        if b is None:
            verdict = "new"
        elif a is None:
            verdict = "gone"
        elif min(b["count"], a["count"]) < min_count:
            verdict = "few"
        else:
            changes = [row["p50_ns_change"], row["mean_ns_change"]]
            if any(c is not None and c > threshold for c in changes):
                verdict = "slower"
            elif any(c is not None and c < -threshold for c in changes):
                verdict = "faster"
            else:
                verdict = "same"
        row["verdict"] = verdict
        rows.append(row)
    return rows


def _change(before: float | None, after: float | None) -> float | None:
    if before is None or after is None:
        return None
    if before == 0:
        return 0.0 if after == 0 else math.inf
    return (after - before) / before
