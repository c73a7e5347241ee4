"""Two pytest-benchmark JSON files compared: per benchmark (pytest-benchmark's own timings)
and per span (the summaries ``pytest --hotspan`` put in each benchmark's ``extra_info``).

    pytest --hotspan --benchmark-json=base.json ...; (change); pytest --hotspan --benchmark-json=new.json ...
    hotspan compare base.json new.json

One rule for every row, benchmark or span, that of :func:`hotspan.compare`: ``slower`` when
the change is significant (p < ``alpha``) and its whole interval (at ``confidence``) lies
above the threshold (``comparison.verdict``). The test depends only on what the file holds:

- **Samples** (``rule: "samples"``): a benchmark's rounds (``--benchmark-json`` keeps them,
  and ``--benchmark-autosave`` with ``--benchmark-save-data``), a span's durations
  (``pytest --hotspan`` keeps up to :data:`~hotspan.pytest_plugin.SPAN_SAMPLES` of them):
  the Mann-Whitney U test and the bootstrap interval of the median's change.
- **A summary** (``rule: "welch"``): Welch's t-test and its interval of the change, on the
  medians with their standard errors from the interquartile ranges
  (``sqrt(pi / 2) x IQR / 1.349 / sqrt(rounds)``: a round stalled by the machine moves a
  mean and a standard deviation, not these), or on the means and standard deviations where
  a summary has no quartiles (a span's: its count capped at the rounds, see below).

A span's occurrences within one benchmark are not independent repetitions (one slow round
slows all of its occurrences), the benchmark's rounds are: so a span counts as many samples
as its benchmark has rounds (its durations thinned to that many evenly spaced order
statistics, its summary's count capped at the rounds), and a benchmark's only span takes
its benchmark's verdict on whether it is slower (they measure one thing). A span summary
without its spread (a file written before hotspan 0.1's wave 4) is not judged: ``few``.

The machine's drift (``extra_info["hotspan"]["machine"]``, the measure ``pytest --hotspan``
takes around each benchmark): a benchmark (and its spans) is called slower only past what
the drift explains, else ``inconclusive`` (as for traces). pytest-benchmark's own
``machine_info`` holds no measure of speed: files written without ``--hotspan`` are judged
on their times as they are, and the comparison says so.

``new`` / ``gone``: a benchmark or span on one side only.
"""

from __future__ import annotations

import json
import math
import os
import re
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    import numpy as np

__all__ = ["BenchmarkFileError", "compare_benchmarks", "is_benchmark_json", "load_benchmark_json"]

#: How far into a file its first key is looked for (pytest-benchmark writes ``machine_info``
#: first; a file re-written with sorted keys starts with ``benchmarks``).
_HEAD_BYTES = 4096
_HEAD_RE = re.compile(rb'^\s*\{\s*"(machine_info|commit_info|benchmarks)"\s*:')


class BenchmarkFileError(ValueError):
    """A pytest-benchmark JSON file that cannot be read; the message names the file."""

    def __init__(self, path: str | os.PathLike[str], problem: str):
        self.path = os.fspath(path)
        super().__init__(f"{self.path}: {problem}")


def is_benchmark_json(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` looks like a pytest-benchmark JSON file, from its first bytes (a JSON
    object whose first key is one of pytest-benchmark's): a trace, however large, is not
    read. A missing or unreadable file is not one (its loader says why)."""
    from ..formats._base import TraceFileError, open_regular_file

    try:
        with open_regular_file(path) as f:  # a FIFO is not one (and is never waited on)
            head = f.read(_HEAD_BYTES)
    except (OSError, TraceFileError):
        return False
    return _HEAD_RE.match(head.removeprefix(b"\xef\xbb\xbf")) is not None


def load_benchmark_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The file's contents, checked: an object with a ``benchmarks`` list whose entries have a
    name and ``stats`` with ``median`` and ``mean``. ``BenchmarkFileError`` otherwise."""
    from ..formats._base import TraceFileError, open_regular_file

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
        if not isinstance(bench, dict) or not isinstance(
            bench.get("fullname", bench.get("name")), str
        ):
            raise BenchmarkFileError(path, f"{where}: no name")
        where = f"benchmark {_name(bench)!r}"
        stats = bench.get("stats")
        if not isinstance(stats, dict) or not all(
            _number(stats.get(k)) for k in ("median", "mean")
        ):
            raise BenchmarkFileError(path, f"{where}: no stats with a median and a mean")
        data = stats.get("data")
        if data is not None and not (isinstance(data, list) and all(_number(v) for v in data)):
            raise BenchmarkFileError(path, f"{where}: stats.data is not a list of numbers")
        spans = _spans_of(bench)
        if spans is None:
            raise BenchmarkFileError(
                path, f"{where}: extra_info.hotspan.spans is not a list of span summaries"
            )
    return doc


def _number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _name(bench: dict[str, Any]) -> str:
    return str(bench.get("fullname") or bench["name"])


def _spans_of(bench: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]] | None:
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
        if not (
            isinstance(row, dict)
            and isinstance(row.get("name"), str)
            and isinstance(row.get("count"), int)
            and all(
                row.get(k) is None or _number(row.get(k))
                for k in ("p50_ns", "p99_ns", "total_ns", "mean_ns", "stddev_ns")
            )
            and (
                row.get("data_ns") is None
                or (isinstance(row["data_ns"], list) and all(_number(v) for v in row["data_ns"]))
            )
        ):
            return None
        out[(row.get("category") or "", row["name"])] = row
    return out


def compare_benchmarks(
    base: dict[str, Any],
    new: dict[str, Any],
    *,
    threshold: float = 0.05,
    min_count: int = 1,
    alpha: float = 0.05,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = 0,
    shift: bool = True,
) -> dict[str, Any]:
    """Two loaded files (:func:`load_benchmark_json`) compared: ``{"benchmarks": rows,
    "spans": rows, "machine": {"measured": [base?, new?], "drifts": [...]}}``, each row with
    a ``verdict`` and the ``rule`` that judged it (see the module's docstring).

    A benchmark row: ``benchmark``, ``rounds_base/new``, ``median_s_base/new``,
    ``mean_s_base/new`` and their ``_change`` (fractions), ``change_low``/``change_high``
    and ``p_value`` (of the test the rule names), ``drift`` (the machine's, new over base,
    when both measured it), ``verdict``, ``rule`` (``"samples"``, ``"welch"``). A span row:
    ``benchmark``, ``category``, ``name``, ``count_base/new``, ``p50_ns_base/new``,
    ``p99_ns_base/new``, ``total_ns_base/new``, the ``_change`` of p50 and p99,
    ``change_low``/``change_high``, ``p_value``, ``verdict``, ``rule`` (also
    ``"benchmark"``: the only span of its benchmark). ``shift=False`` judges raw times.
    """
    import numpy as np

    from .comparison import relative_change

    rng = np.random.default_rng(seed)
    before = {_name(b): b for b in base["benchmarks"]}
    after = {_name(b): b for b in new["benchmarks"]}
    options = {
        "threshold": threshold,
        "alpha": alpha,
        "confidence": confidence,
        "resamples": resamples,
        "rng": rng,
    }
    bench_rows: list[dict[str, Any]] = []
    span_rows: list[dict[str, Any]] = []
    measured = [False, False]
    drifts: list[float] = []
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
        row["change_low"] = row["change_high"] = row["p_value"] = row["drift"] = None
        row["rule"] = None
        drift = None
        if b is None or a is None:
            row["verdict"] = "new" if b is None else "gone"
        else:
            machines = (_machine_of(b), _machine_of(a))
            measured = [m or bool(x) for m, x in zip(measured, machines)]
            drift = _drift(machines, threshold) if shift else None
            if drift is not None:
                row["drift"] = drift["factor"]
                if drift["said"]:
                    drifts.append(drift["factor"])
            x, y = b["stats"].get("data"), a["stats"].get("data")
            if x and y:
                samples = (np.asarray(x, np.float64), np.asarray(y, np.float64))
                _judge(row, samples, None, drift, min_count, options)
            else:
                summaries = (_summary_of(b["stats"]), _summary_of(a["stats"]))
                _judge(row, None, summaries, drift, min_count, options)
        bench_rows.append(row)
        span_rows.extend(_compare_spans(key, b, a, row, drift, min_count, options))
    return {
        "benchmarks": bench_rows,
        "spans": span_rows,
        "machine": {"measured": measured, "drifts": drifts},
    }


def _machine_of(bench: dict[str, Any]) -> dict[str, Any] | None:
    extra = bench.get("extra_info")
    summary = extra.get("hotspan") if isinstance(extra, dict) else None
    machine = summary.get("machine") if isinstance(summary, dict) else None
    return machine if isinstance(machine, dict) else None


def _drift(
    machines: tuple[dict[str, Any] | None, dict[str, Any] | None], threshold: float
) -> dict[str, Any] | None:
    from .comparison import machine_drift

    drift = machine_drift(machines, threshold)
    return drift if drift is not None and "factor" in drift else None


#: The standard error of a median of n normal samples is sqrt(pi / 2) sigma / sqrt(n); an
#: interquartile range is 1.349 sigma.
_MEDIAN_SE = math.sqrt(math.pi / 2) / 1.349


def _summary_of(stats: dict[str, Any]) -> tuple[float, float, int] | None:
    """What Welch's test takes of a benchmark's summary: (centre, spread, rounds) with
    spread / sqrt(rounds) the centre's standard error. The median and its spread from the
    interquartile range (robust: a round stalled by the machine moves a mean and a standard
    deviation, not them) when the file has quartiles, else the mean and standard deviation;
    None without either."""
    rounds = stats.get("rounds")
    if not isinstance(rounds, int):
        return None
    median, q1, q3 = stats.get("median"), stats.get("q1"), stats.get("q3")
    if _number(median) and _number(q1) and _number(q3) and q3 >= q1:
        return float(median), _MEDIAN_SE * float(q3 - q1), rounds
    mean, stddev = stats.get("mean"), stats.get("stddev")
    if _number(mean) and _number(stddev):
        return float(mean), float(stddev), rounds
    return None


def _judge(
    row: dict[str, Any],
    samples: tuple[Any, Any] | None,
    summaries: tuple[Any, Any] | None,
    drift: dict[str, Any] | None,
    min_count: int,
    options: dict[str, Any],
) -> None:
    """The one rule on a row: its samples when it has them, else its summaries (Welch);
    against the machine's drift when it was told (comparison.against_drift)."""
    from .comparison import (
        against_drift,
        mann_whitney_u,
        median_ratio_interval,
        verdict,
        welch_t_test,
    )

    threshold, alpha = options["threshold"], options["alpha"]
    if samples is not None:
        x, y = samples
        row["rule"] = "samples"
        if min(len(x), len(y)) < min_count:
            row["verdict"] = "few"
            return

        def test(x: Any, y: Any, factor: float) -> tuple[float, float, float, str]:
            if factor != 1.0:
                y = y / factor
            p = mann_whitney_u(x, y)
            low, high = median_ratio_interval(
                x,
                y,
                confidence=options["confidence"],
                resamples=options["resamples"],
                rng=options["rng"],
            )
            return p, low, high, verdict(p, low, high, threshold=threshold, alpha=alpha)

    elif summaries is not None and summaries[0] is not None and summaries[1] is not None:
        (mb, sb, nb), (ma, sa, na) = summaries
        row["rule"] = "welch"
        if min(nb, na) < min_count:
            row["verdict"] = "few"
            return
        x = y = None

        def test(x: Any, y: Any, factor: float) -> tuple[float, float, float, str]:
            p, low, high = welch_t_test(
                (mb, sb, nb), (ma / factor, sa / factor, na), confidence=options["confidence"]
            )
            return p, low, high, verdict(p, low, high, threshold=threshold, alpha=alpha)

    else:
        row["verdict"] = "few"  # neither samples nor a summary with a spread: not judged
        return
    p, low, high, said = test(x, y, 1.0)
    if drift is not None and drift["said"]:
        _used, (p, low, high, said) = against_drift(x, y, drift, test)
    row["p_value"], row["change_low"], row["change_high"] = p, low, high
    row["verdict"] = said


def _span_summary(stat: dict[str, Any], rounds: int) -> tuple[float, float, int] | None:
    """(mean, stddev, count capped at the benchmark's rounds) of a span summary; None without
    its spread."""
    mean, stddev = stat.get("mean_ns"), stat.get("stddev_ns")
    if not (_number(mean) and _number(stddev)):
        return None
    return float(mean), float(stddev), min(stat["count"], rounds or stat["count"])


def _thinned(values: list[Any], count: int) -> np.ndarray:
    """``count`` evenly spaced order statistics of ``values`` (all of them when fewer)."""
    import numpy as np

    ordered = np.sort(np.asarray(values, np.float64))
    if count <= 0 or len(ordered) <= count:
        return ordered
    return ordered[np.round(np.linspace(0, len(ordered) - 1, count)).astype(np.int64)]


def _compare_spans(
    key: str,
    b: dict[str, Any] | None,
    a: dict[str, Any] | None,
    bench_row: dict[str, Any],
    drift: dict[str, Any] | None,
    min_count: int,
    options: dict[str, Any],
) -> list[dict[str, Any]]:
    from .comparison import relative_change

    if b is None or a is None:
        return []  # the benchmark's own row says new/gone
    before, after = _spans_of(b), _spans_of(a)
    assert before is not None and after is not None  # malformed spans were refused on load
    rounds = (b["stats"].get("rounds") or 0, a["stats"].get("rounds") or 0)
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
        row["change_low"] = row["change_high"] = row["p_value"] = row["rule"] = None
        if sb is None or sa is None:
            row["verdict"] = "new" if sb is None else "gone"
        elif min(sb["count"], sa["count"]) < min_count:
            row["verdict"] = "few"
        elif sb.get("data_ns") and sa.get("data_ns"):
            samples = (
                _thinned(sb["data_ns"], rounds[0]),
                _thinned(sa["data_ns"], rounds[1]),
            )
            _judge(row, samples, None, drift, 1, options)
        else:
            summaries = (_span_summary(sb, rounds[0]), _span_summary(sa, rounds[1]))
            _judge(row, None, summaries, drift, 1, options)
        rows.append(row)
    judged = [r for r in rows if r["verdict"] not in ("new", "gone")]
    if (
        len(rows) == 1
        and len(judged) == 1
        and bench_row["verdict"] in ("slower", "faster", "same", "inconclusive")
        and (judged[0]["verdict"] == "slower") != (bench_row["verdict"] == "slower")
    ):
        # A benchmark's only span measures what the benchmark does: the rounds, independent
        # repetitions, say whether it is slower.
        judged[0]["verdict"], judged[0]["rule"] = bench_row["verdict"], "benchmark"
    return rows
