"""``hotspan compare A.json B.json`` on two pytest-benchmark JSON files (``cmd_compare``
hands them here when it recognises them by their content): per benchmark and per span,
what got slower. The rule and the exit status are compare's: 1 when something is slower
(or, with --fail-on-missing, appeared or went), 2 when the files share no benchmark or
cannot be read, else 0. The comparison itself is ``analysis/benchmark_comparison.py``."""
from __future__ import annotations

import argparse
import json
import math

from ..analysis.benchmark_comparison import BenchmarkFileError, compare_benchmarks, is_benchmark_json, \
    load_benchmark_json
from ..units import human_ns
from .commands import CliError, console, fitted_table, fmt_change, fmt_interval

__all__ = ["benchmark_files", "cmd_compare_benchmarks"]

_STYLES = {"slower": "bold red", "faster": "green", "new": "cyan", "gone": "yellow", "few": "dim"}


def benchmark_files(base: str, new: str) -> bool:
    """Whether BASE and NEW are both pytest-benchmark files (then compare them as such); one
    of each kind is refused."""
    kinds = [is_benchmark_json(base), is_benchmark_json(new)]
    if kinds[0] != kinds[1]:
        which, other = (base, new) if kinds[0] else (new, base)
        raise CliError(f"{which} is a pytest-benchmark file and {other} is not: compare two traces or two "
                       f"pytest-benchmark files")
    return kinds[0]


def cmd_compare_benchmarks(args: argparse.Namespace) -> int:
    if args.by is not None:
        raise CliError("--by applies to traces; pytest-benchmark files are compared per benchmark and per span "
                       "(category, name)")
    try:
        base, new = load_benchmark_json(args.base), load_benchmark_json(args.new)
    except BenchmarkFileError as exc:
        raise CliError(str(exc)) from None
    result = compare_benchmarks(base, new, threshold=args.threshold, min_count=args.min_count, alpha=args.alpha)
    benches, spans = result["benchmarks"], result["spans"]
    if not any(r["verdict"] not in ("new", "gone") for r in benches):
        raise CliError(f"nothing to compare: {args.base} and {args.new} have no benchmark in common")
    rows = benches + spans
    slower = [r for r in rows if r["verdict"] == "slower"]
    missing = [r for r in rows if r["verdict"] in ("new", "gone")]
    if args.json:
        print(json.dumps({key: [_finite(r) for r in value] for key, value in result.items()}, indent=1))
    else:
        _print(args, benches, spans, slower, missing)
    return 1 if slower or (missing and args.fail_on_missing) else 0


def _finite(row: dict) -> dict:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}


def _print(args: argparse.Namespace, benches: list[dict], spans: list[dict], slower: list[dict],
           missing: list[dict]) -> None:
    out = console()
    keys = [("benchmark", [r["benchmark"] for r in benches])]
    values = [  # in priority order: the last ones go first when the terminal is narrow
        ("verdict", [r["verdict"] for r in benches]),
        ("Δmedian", [fmt_change(r["median_s_change"]) for r in benches]),
        ("median base", [_seconds(r["median_s_base"]) for r in benches]),
        ("median new", [_seconds(r["median_s_new"]) for r in benches]),
        ("95% interval", [fmt_interval(r["change_low"], r["change_high"]) for r in benches]),
        ("Δmean", [fmt_change(r["mean_s_change"]) for r in benches]),
        ("rounds", [f"{_count(r['rounds_base'])} → {_count(r['rounds_new'])}" for r in benches]),
    ]
    table, _ = fitted_table(keys, values, out.width, title="benchmarks (pytest-benchmark's timings)", order=[
        "median base", "median new", "Δmedian", "95% interval", "Δmean", "rounds", "verdict"])
    _style(table, benches)
    out.print(table)
    if spans:
        keys = [("benchmark", [r["benchmark"] for r in spans]),
                ("span", [f"{r['category']}/{r['name']}" if r["category"] else r["name"] for r in spans])]
        values = [
            ("verdict", [r["verdict"] for r in spans]),
            ("Δp50", [fmt_change(r["p50_ns_change"]) for r in spans]),
            ("p50 base", [human_ns(r["p50_ns_base"]) for r in spans]),
            ("p50 new", [human_ns(r["p50_ns_new"]) for r in spans]),
            ("Δp99", [fmt_change(r["p99_ns_change"]) for r in spans]),
            ("count", [f"{r['count_base']:,} → {r['count_new']:,}" for r in spans]),
        ]
        table, _ = fitted_table(keys, values, out.width, title="spans (pytest --hotspan's summaries)", order=[
            "p50 base", "p50 new", "Δp50", "Δp99", "count", "verdict"])
        _style(table, spans)
        out.print(table)
    else:
        out.print("no span summaries in these files (record them with pytest --hotspan)")
    out.print(f"{len(slower)} of {len(benches) + len(spans)} slower: a benchmark whose median rose significantly "
              f"(rank test p < {args.alpha:g}, or interquartile ranges apart where the rounds were not saved) by "
              f"more than +{args.threshold * 100:g}%; a span whose p50 rose by more than +{args.threshold * 100:g}%")
    if missing:
        out.print(f"{sum(r['verdict'] == 'gone' for r in missing)} gone, "
                  f"{sum(r['verdict'] == 'new' for r in missing)} new"
                  + (" (--fail-on-missing: failing)" if args.fail_on_missing else ""))


def _style(table, rows: list[dict]) -> None:
    for i, r in enumerate(rows):
        table.rows[i].style = _STYLES.get(r["verdict"])


def _seconds(value: float | None) -> str:
    return human_ns(None if value is None else value * 1e9)


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
