"""Two span tables compared group by group, as a careful benchmarker would: distributions,
not means, and the machine's drift told apart from the code's.

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

from .._columns import combined_codes, to_numpy
from ._options import CompareOptions, keys_of
from ._significance import bootstrap_medians
from ._significance import (
    mann_whitney_u,
    median_ratio_interval,
    welch_t_test,
)
from .statistics import stats

#: ``durations(keys)``: (key, base durations, new durations) for each row of ``keys``, in order.
Durations = Callable[[pa.Table], Iterator[tuple[tuple[Any, ...], np.ndarray, np.ndarray]]]

#: The bootstrap's draws (significance.py), under the name the tests read.
_bootstrap_medians = bootstrap_medians

__all__ = [
    "CompareOptions",
    "compare",
    "compare_rows",
    "drift_line",
    "drift_of",
    "judge_rows",
    "mann_whitney_u",
    "welch_t_test",
    "median_ratio_interval",
    "rows_table",
    "shift_of",
    "verdict",
]

#: The verdicts ``compare`` gives.
VERDICTS = ("slower", "faster", "same", "inconclusive", "new", "gone", "few")


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

    The machine's drift: every run keeps a measure of the machine's speed while it ran
    (``hotspan.machine``: a calibration loop and the CPU contention, see ``hotspan._machine``).
    When the two runs' measures differ by more than 10%, each group is judged against that
    drift, whatever the number of groups: a group whose raw times are slower is ``slower``
    only when its median's change passes what the drift explains (the drift to the power
    1.25), else ``inconclusive``, short spans as long ones. The drift is in the table's metadata
    (:func:`drift_of`; ``{"factor", "loop", "contention_base", "contention_new", "explains",
    "said", "measured"}``), :func:`drift_line` says it in words.

    The machine, not the code (where no drift is told): when most groups (three quarters, at
    least five) moved by about the same factor, past ``threshold``, that shift is the
    machine's (a loaded or slower host), said in the table's metadata (``hotspan.shift``:
    ``{"shift", "spread", "groups", "moved"}``), and each group is judged against it: its new
    durations divided by the common factor before the test and the interval
    (``judged_change`` is the median's change so judged). ``shift=False`` judges raw times
    (neither the drift nor a shared shift). ``normalize=NAME`` divides instead by the
    reference span ``NAME``'s median on each side (a fixed workload timed in both runs).
    """
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
    return compare_rows(base, new, options)


def compare_rows(
    base: pa.Table,
    new: pa.Table,
    options: CompareOptions,
    *,
    reference: tuple[float, float] | None = None,
    machine: tuple[Any, Any] | None = None,
) -> pa.Table:
    """``compare`` of two tables in memory; ``reference`` (the ``normalize`` span's medians)
    and ``machine`` (the runs' machine measures) found from the tables where not given."""
    by = options.by
    before = durations_by_group(base, by)
    after = durations_by_group(new, by)
    empty = np.zeros(0, np.int64)

    def durations(keys: pa.Table) -> Iterator[tuple[tuple[Any, ...], np.ndarray, np.ndarray]]:
        for row in keys.to_pylist():
            key = tuple(row[k] for k in by)
            yield key, before.get(key, empty), after.get(key, empty)

    if reference is None and options.normalize is not None:
        reference = (
            reference_median(stats(base, by=("name",)), options.normalize, "base"),
            reference_median(stats(new, by=("name",)), options.normalize, "new"),
        )
    return judge_rows(
        stats(base, by=by),
        stats(new, by=by),
        durations,
        options,
        reference=reference,
        machine=machine or (machine_of(base.schema.metadata), machine_of(new.schema.metadata)),
    )


def machine_of(meta: dict[bytes, bytes] | None) -> dict[str, Any] | None:
    """A run's machine measure (its ``hotspan.machine`` metadata), None when absent."""
    from .._schema import META_MACHINE, meta_dict

    return meta_dict(meta, META_MACHINE)


def reference_median(by_name: pa.Table, name: str, side: str) -> float:
    """The median duration of the spans named ``name`` (``by_name``: stats by name), for
    ``normalize``; ValueError when the side has none."""
    for row in by_name.to_pylist():
        if row["name"] == name and row["p50_ns"]:
            return float(row["p50_ns"])
    raise ValueError(f"normalize: no span named {name!r} with a duration in the {side} trace")


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
#: Schema metadata key of ``compare``'s table: the machine's drift between the runs (JSON,
#: :func:`machine_drift`), when either run measured its machine.
META_DRIFT = b"hotspan.drift"


def judge_rows(
    base_stats: pa.Table,
    new_stats: pa.Table,
    durations: Durations,
    options: CompareOptions,
    *,
    reference: tuple[float, float] | None = None,
    machine: tuple[Any, Any] | None = None,
) -> pa.Table:
    """``compare``'s table from the two sides' ``stats`` and ``durations(keys)``, which yields
    (key, base durations, new durations) for each row of ``keys`` (the groups to judge, in
    order: the draws of the seeded bootstrap follow it); ``reference``: the medians of the
    ``normalize`` span on each side; ``machine``: the two sides' machine measures (their
    ``hotspan.machine`` metadata, None where absent)."""
    by, threshold, min_count = options.by, options.threshold, options.min_count
    alpha, confidence, resamples = options.alpha, options.confidence, options.resamples
    shift, normalize = options.shift, options.normalize
    before_stats = {tuple(r[k] for k in by): r for r in base_stats.to_pylist()}
    after_stats = {tuple(r[k] for k in by): r for r in new_stats.to_pylist()}
    rng = np.random.default_rng(options.seed)
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
    drift = machine_drift(machine, threshold) if shift and reference is None else None
    if reference is not None:
        factor = reference[1] / reference[0]
        said = {
            "normalize": normalize,
            "reference_base_ns": reference[0],
            "reference_new_ns": reference[1],
            "shift": factor - 1,
        }
    elif shift and judged and not (drift and drift["said"]):
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
    drift_context = drift if drift is not None and drift["said"] else None

    def test(x: np.ndarray, y: np.ndarray, by_factor: float) -> tuple[float, float, float, str]:
        if by_factor != 1.0:  # judged against the machine's (or the reference's) factor
            y = np.asarray(y, np.float64) / by_factor
        p = mann_whitney_u(x, y)
        low, high = median_ratio_interval(x, y, confidence=confidence, resamples=resamples, rng=rng)
        return p, low, high, verdict(p, low, high, threshold=threshold, alpha=alpha)

    for row, (_key, x, y) in zip(judged, durations(keys)):
        used = factor
        p, low, high, said_verdict = test(x, y, used)
        if drift_context is not None:
            used, (p, low, high, said_verdict) = against_drift(x, y, drift_context, test)
        row["p_value"], row["change_low"], row["change_high"] = p, low, high
        change = row["p50_ns_change"]
        row["judged_change"] = None if change is None else (1 + change) / used - 1
        row["verdict"] = said_verdict
    return rows_table(rows, by, base_stats.schema, said, drift)


#: The machine's drift is told (and each group judged against it) when the two runs' speeds
#: differ by more than this fraction: below it, the measure's own wobble.
DRIFT_TOLERANCE = 0.10
#: What the drift explains, for calling a group slower: the factor raised to 1 + this (a
#: machine 2x slower explains up to 2^1.25 = 2.4x), since how much a busy CPU stretches a
#: span depends on the span (a short one may run between two turns of the other process).
DRIFT_MARGIN = 0.25


def machine_drift(machine: tuple[Any, Any] | None, threshold: float) -> dict[str, Any] | None:
    """The drift between the two sides' machine measures (``_machine.drift``), with ``said``
    (it is past :data:`DRIFT_TOLERANCE`) and ``explains`` (the factor a change must pass to be
    the code's); ``{"said": False, "measured": [base?, new?]}`` when a side has no measure;
    None when neither does."""
    from .. import _machine

    if machine is None:
        return None
    base, new = machine
    measured = [isinstance(base, dict), isinstance(new, dict)]
    if not any(measured):
        return None
    found = _machine.drift(base, new)
    if found is None:
        return {"said": False, "measured": measured}
    factor = found["factor"]
    said = abs(math.log(factor)) > math.log1p(DRIFT_TOLERANCE)
    explains = factor ** (1 + DRIFT_MARGIN)  # past the factor, either way
    return {**found, "said": said, "explains": explains, "measured": measured}


def against_drift(
    x: np.ndarray,
    y: np.ndarray,
    drift: dict[str, Any],
    test: Callable[[np.ndarray, np.ndarray, float], tuple[float, float, float, str]],
) -> tuple[float, tuple[float, float, float, str]]:
    """A group's test on a machine that drifted: (the factor its new times were divided by,
    (p, low, high, verdict)). A change the drift could have made is not the code's: a
    group is ``slower`` only when its raw times are and so are its times divided by what
    the drift explains (``explains``, when the new run's machine was slower), else
    ``inconclusive``; ``faster`` only when faster still against a machine that was faster
    for the new run; else ``same``. Short spans get no exception: a busy CPU slows even
    spans shorter than its turns (cold caches, a shared core; measured at +60-70% for an
    unchanged 80 us group), so their fastest durations do not tell the code's change
    apart."""
    raw = test(x, y, 1.0)
    factor = drift["factor"]
    if raw[3] == "slower":
        explains = max(drift["explains"], 1.0)
        beyond = test(x, y, explains) if explains > 1.0 else raw
        return explains, (*beyond[:3], "slower" if beyond[3] == "slower" else "inconclusive")
    if raw[3] == "faster" and factor < 1.0:
        explains = drift["explains"]
        beyond = test(x, y, explains)
        return explains, (*beyond[:3], "faster" if beyond[3] == "faster" else "same")
    return 1.0, raw


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
    rows: list[dict[str, Any]],
    by: Sequence[str],
    key_schema: pa.Schema,
    said: dict[str, Any] | None = None,
    drift: dict[str, Any] | None = None,
) -> pa.Table:
    """``compare``'s rows as a table: the keys (their types as in ``stats``), then
    :data:`COMPARE_FIELDS`; the shift it judged against and the machine's drift in the
    metadata."""
    import json

    fields = [pa.field(k, key_schema.field(k).type) for k in by] + [
        pa.field(n, t) for n, t in COMPARE_FIELDS
    ]
    metadata = {}
    if said:
        metadata[META_SHIFT] = json.dumps(said).encode()
    if drift:
        metadata[META_DRIFT] = json.dumps(drift).encode()
    schema = pa.schema(fields, metadata=metadata or None)
    columns = {f.name: [r.get(f.name) for r in rows] for f in fields}
    return pa.table({f.name: pa.array(columns[f.name], f.type) for f in fields}, schema=schema)


def shift_of(result: pa.Table) -> dict[str, Any] | None:
    """The shift (or normalization) ``compare`` judged against, from its table's metadata."""
    import json

    raw = (result.schema.metadata or {}).get(META_SHIFT)
    return json.loads(raw) if raw else None


def drift_of(result: pa.Table) -> dict[str, Any] | None:
    """The machine's drift ``compare`` judged against (:func:`machine_drift`), from its
    table's metadata; None when neither run measured its machine."""
    import json

    raw = (result.schema.metadata or {}).get(META_DRIFT)
    return json.loads(raw) if raw else None


def drift_line(drift: dict[str, Any] | None, base: str = "BASE", new: str = "NEW") -> str | None:
    """The machine's drift in one line, or None when there is nothing to say."""
    if not drift:
        return None
    measured = drift.get("measured") or [True, True]
    if not all(measured):
        missing = [name for name, has in zip((base, new), measured) if not has]
        return (
            f"{' and '.join(missing)} recorded no measure of the machine's speed: times judged as "
            f"they are (a busy machine cannot be told from slower code)"
        )
    if not drift.get("said"):
        return None
    factor = drift["factor"]
    which, ratio = (new, factor) if factor > 1 else (base, 1 / factor)
    cb, cn = drift.get("contention_base"), drift.get("contention_new")
    busy = (
        f"CPU contention {cb * 100:.0f}% -> {cn * 100:.0f}%, "
        if isinstance(cb, (int, float)) and isinstance(cn, (int, float))
        else ""
    )
    said = (
        f"a group is slower only past what that explains (x{drift['explains']:.2f}), else "
        f"inconclusive"
        if factor > 1
        else f"a group is faster only past what that explains (x{1 / drift['explains']:.2f})"
    )
    return (
        f"the machine was {ratio:.2f}x slower during {which} ({busy}calibration loop "
        f"{(drift['loop'] - 1) * 100:+.0f}%): {said}"
    )


def durations_by_group(table: pa.Table, by: Sequence[str]) -> dict[tuple[Any, ...], np.ndarray]:
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
