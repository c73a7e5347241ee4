"""Two pytest-benchmark JSON files compared: per benchmark (pytest-benchmark's own timings)
and per span (the summaries ``pytest --hotspan`` put in each benchmark's ``extra_info``).

    pytest --hotspan --benchmark-json=base.json ...; (change); pytest --hotspan --benchmark-json=new.json ...
    hotspan compare base.json new.json

The verdicts and their rule are those of :func:`hotspan.compare` (``slower`` only when surely
above the threshold), as far as a file holds what the rule needs:

- A benchmark whose file keeps the time of every round (``--benchmark-json`` does, and
  ``--benchmark-autosave`` with ``--benchmark-save-data``): exactly the rule for span groups,
  the Mann-Whitney U test on the rounds and the bootstrap interval of the median's change.
- A benchmark with its summary only: ``slower`` when the median rose by more than the
  threshold *and* the interquartile ranges are apart (the new first quartile above the old
  third): half the rounds of the new run slower than three quarters of the old one.
- A span (category/name within a benchmark): its p50 is already a median over all its
  occurrences (thousands, in a benchmark); ``slower`` when it rose by more than the
  threshold, with at least ``min_count`` occurrences on both sides (else ``few``).

``new`` / ``gone``: a benchmark or span on one side only.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Any

__all__ = ["BenchmarkFileError", "compare_benchmarks", "is_benchmark_json", "load_benchmark_json"]

#: How far into a file its first key is looked for (pytest-benchmark writes ``machine_info``
#: first; a file re-written with sorted keys starts with ``benchmarks``).
_HEAD_BYTES = 4096
_HEAD_RE = re.compile(rb'^\s*\{\s*"(machine_info|commit_info|benchmarks)"\s*:')


class BenchmarkFileError(ValueError):
    """A pytest-benchmark JSON file that cannot be read; the message names the file."""

    def __init__(self, path: str | os.PathLike, problem: str):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {problem}")


def is_benchmark_json(path: str | os.PathLike) -> bool:
    """Whether ``path`` looks like a pytest-benchmark JSON file, from its first bytes (a JSON
    object whose first key is one of pytest-benchmark's): a trace, however large, is not
    read. A missing or unreadable file is not one (its loader says why)."""
    from ..formats.base import TraceFileError, open_regular_file

    try:
        with open_regular_file(path) as f:  # a FIFO is not one (and is never waited on)
            head = f.read(_HEAD_BYTES)
    except (OSError, TraceFileError):
        return False
    return _HEAD_RE.match(head.removeprefix(b"\xef\xbb\xbf")) is not None


def load_benchmark_json(path: str | os.PathLike) -> dict[str, Any]:
    """The file's contents, checked: an object with a ``benchmarks`` list whose entries have a
    name and ``stats`` with ``median`` and ``mean``. ``BenchmarkFileError`` otherwise."""
    from ..formats.base import TraceFileError, open_regular_file

    try:
        with open_regular_file(path) as f:
            doc = json.load(f)
    except TraceFileError as exc:
        raise BenchmarkFileError(path, exc.problem) from None
    except OSError as exc:
        raise BenchmarkFileError(path, exc.strerror or str(exc)) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BenchmarkFileError(path, f"not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("benchmarks"), list):
        raise BenchmarkFileError(path, "not a pytest-benchmark file (no list of benchmarks)")
    for i, bench in enumerate(doc["benchmarks"]):
        where = f"benchmark {i}"
        if not isinstance(bench, dict) or not isinstance(bench.get("fullname", bench.get("name")), str):
            raise BenchmarkFileError(path, f"{where}: no name")
        where = f"benchmark {_name(bench)!r}"
        stats = bench.get("stats")
        if not isinstance(stats, dict) or not all(_number(stats.get(k)) for k in ("median", "mean")):
            raise BenchmarkFileError(path, f"{where}: no stats with a median and a mean")
        data = stats.get("data")
        if data is not None and not (isinstance(data, list) and all(_number(v) for v in data)):
            raise BenchmarkFileError(path, f"{where}: stats.data is not a list of numbers")
        spans = _spans_of(bench)
        if spans is None:
            raise BenchmarkFileError(path, f"{where}: extra_info.hotspan.spans is not a list of span summaries")
    return doc


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _name(bench: dict) -> str:
    return bench.get("fullname") or bench["name"]


def _spans_of(bench: dict) -> dict[tuple[str, str], dict] | None:
    """The benchmark's span summaries by (category, name); {} when it has none; None when
    they are malformed."""
    extra = bench.get("extra_info")
    summary = extra.get("hotspan") if isinstance(extra, dict) else None
    if summary is None:
        return {}
    rows = summary.get("spans") if isinstance(summary, dict) else None
    if not isinstance(rows, list):
        return None
    out = {}
    for row in rows:
        if not (isinstance(row, dict) and isinstance(row.get("name"), str) and isinstance(row.get("count"), int)
                and all(row.get(k) is None or _number(row.get(k)) for k in ("p50_ns", "p99_ns", "total_ns"))):
            return None
        out[(row.get("category") or "", row["name"])] = row
    return out


def compare_benchmarks(base: dict[str, Any], new: dict[str, Any], *, threshold: float = 0.05, min_count: int = 1,
                       alpha: float = 0.05, confidence: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> dict[str, list[dict]]:
    """Two loaded files (:func:`load_benchmark_json`) compared: ``{"benchmarks": rows,
    "spans": rows}``, each row with a ``verdict`` (see the module's docstring).

    A benchmark row: ``benchmark``, ``rounds_base/new``, ``median_s_base/new``,
    ``mean_s_base/new`` and their ``_change`` (fractions), ``change_low``/``change_high``
    and ``p_value`` (when both files kept the rounds), ``verdict``, ``rule`` (``"rounds"`` or
    ``"quartiles"``). A span row: ``benchmark``, ``category``, ``name``, ``count_base/new``,
    ``p50_ns_base/new``, ``p99_ns_base/new``, ``total_ns_base/new``, the ``_change`` of p50
    and p99, ``verdict``.
    """
    import numpy as np

    from .comparison import mann_whitney_u, median_ratio_interval, relative_change, verdict

    rng = np.random.default_rng(seed)
    before = {_name(b): b for b in base["benchmarks"]}
    after = {_name(b): b for b in new["benchmarks"]}
    bench_rows: list[dict] = []
    span_rows: list[dict] = []
    for key in list(before) + [k for k in after if k not in before]:
        b, a = before.get(key), after.get(key)
        row: dict[str, Any] = {"benchmark": key}
        for side, bench in (("base", b), ("new", a)):
            stats = bench["stats"] if bench else {}
            row[f"rounds_{side}"] = stats.get("rounds")
            row[f"median_s_{side}"] = stats.get("median")
            row[f"mean_s_{side}"] = stats.get("mean")
        for column in ("median_s", "mean_s"):
            row[f"{column}_change"] = relative_change(row[f"{column}_base"], row[f"{column}_new"])
        row["change_low"] = row["change_high"] = row["p_value"] = None
        row["rule"] = None
        if b is None or a is None:
            row["verdict"] = "new" if b is None else "gone"
        else:
            x, y = b["stats"].get("data"), a["stats"].get("data")
            if x and y:
                row["rule"] = "rounds"
                if min(len(x), len(y)) < min_count:
                    row["verdict"] = "few"
                else:
                    p = mann_whitney_u(np.asarray(x), np.asarray(y))
                    low, high = median_ratio_interval(np.asarray(x), np.asarray(y), confidence=confidence,
                                                      resamples=resamples, rng=rng)
                    row["p_value"], row["change_low"], row["change_high"] = p, low, high
                    row["verdict"] = verdict(p, low, high, threshold=threshold, alpha=alpha)
            else:
                row["rule"] = "quartiles"
                row["verdict"] = _quartile_verdict(b["stats"], a["stats"], row["median_s_change"], threshold)
        bench_rows.append(row)
        span_rows.extend(_compare_spans(key, b, a, threshold, min_count, row))
    return {"benchmarks": bench_rows, "spans": span_rows}


def _quartile_verdict(b: dict, a: dict, change: float | None, threshold: float) -> str:
    q1b, q3b, q1a, q3a = b.get("q1"), b.get("q3"), a.get("q1"), a.get("q3")
    apart_up = apart_down = True  # without quartiles, the median's change alone decides
    if all(_number(v) for v in (q1b, q3b, q1a, q3a)):
        apart_up, apart_down = q1a > q3b, q3a < q1b
    if change is not None and change > threshold and apart_up:
        return "slower"
    if change is not None and change < -threshold and apart_down:
        return "faster"
    return "same"


def _span_interval(change: float, bench_row: dict) -> tuple[float, float]:
    """A span's interval of change: its benchmark's noise (the relative width of the
    benchmark's bootstrap interval around its own change) put around the span's change. A span
    summary holds no distribution of its own; its benchmark's rounds say how far a change that
    large can come from noise, so a benchmark and its only span get one verdict. Without
    rounds, the point change."""
    low, high, centre = bench_row.get("change_low"), bench_row.get("change_high"), bench_row.get("median_s_change")
    if low is None or high is None or centre is None or not math.isfinite(centre) or centre <= -1:
        return change, change
    return (1 + change) * (1 + low) / (1 + centre) - 1, (1 + change) * (1 + high) / (1 + centre) - 1


def _compare_spans(key: str, b: dict | None, a: dict | None, threshold: float, min_count: int,
                   bench_row: dict) -> list[dict]:
    from .comparison import relative_change, verdict

    before = _spans_of(b) if b else {}
    after = _spans_of(a) if a else {}
    if b is None or a is None:
        return []  # the benchmark's own row says new/gone
    rows = []
    for span in list(before) + [s for s in after if s not in before]:
        sb, sa = before.get(span), after.get(span)
        row: dict[str, Any] = {"benchmark": key, "category": span[0], "name": span[1]}
        for side, stat in (("base", sb), ("new", sa)):
            row[f"count_{side}"] = stat["count"] if stat else 0
            for column in ("p50_ns", "p99_ns", "total_ns"):
                row[f"{column}_{side}"] = stat.get(column) if stat else None
        for column in ("p50_ns", "p99_ns"):
            row[f"{column}_change"] = relative_change(row[f"{column}_base"], row[f"{column}_new"])
        change = row["p50_ns_change"]
        row["change_low"] = row["change_high"] = None
        if sb is None or sa is None:
            row["verdict"] = "new" if sb is None else "gone"
        elif min(sb["count"], sa["count"]) < min_count or change is None or not math.isfinite(change):
            row["verdict"] = "few"
        else:
            # compare's one rule (comparison.verdict): the interval wholly past the threshold;
            # significant when it leaves out no change at all
            low, high = _span_interval(change, bench_row)
            row["change_low"], row["change_high"] = low, high
            row["verdict"] = verdict(0.0 if low > 0 or high < 0 else 1.0, low, high, threshold=threshold, alpha=0.5)
        rows.append(row)
    return rows


