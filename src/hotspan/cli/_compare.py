"""``hotspan compare BASE NEW``: two traces (or two pytest-benchmark files) span group by span group;
exit status 1 on a slowdown, 3 when the machine's drift may explain one."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING, Any, Sequence

import pyarrow as pa

from .._units import human_ns
from ._common import add_command, add_filter_options, engine_of, open_spans_for, parse_by
from ._errors import CliError
from ._tables import fitted_table, new_console

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "benchmark_drift_line",
    "cmd_compare",
    "exit_status",
    "json_drift_line",
    "register",
    "shift_line",
]


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    """Add ``hotspan compare`` to the subcommands ``sub``."""
    parser = add_command(
        sub,
        "compare",
        "compare two traces span by span; exit 1 on a slowdown, 3 when inconclusive",
        "For each span group: the median (p50) before and after, its change with a 95% bootstrap "
        "interval, the Mann-Whitney U p-value, the mean's change, and a verdict. A group is slower only "
        "when the shift is significant (p < --alpha) and the whole interval of the median's change is "
        "above --threshold: one outlier moving a mean, or a noisy run, is not a regression. Every run "
        "records how fast the machine was (a calibration loop and the CPU contention): when it was "
        "slower for one run, that is said in one line and a group is slower only past what the "
        "drift explains, else 'inconclusive'. Exit status: 0 same or faster; 1 a group is slower "
        "(or, with --fail-on-missing, a group appeared or went); 2 an error (a file that cannot be "
        "read, traces with no group in common); 3 inconclusive: a group looks slower but the "
        "machine's drift may explain it (rerun on a quiet machine). "
        "Warns when the traces were recorded in different environments (host, Python, hotspan, "
        "configuration). Two dataset directories (or large Parquet files) are streamed, as for stats. "
        "Two pytest-benchmark JSON files (pytest --hotspan --benchmark-json=F) are "
        "compared per benchmark and per span, by the same rule and exit status (the rank test on "
        "their samples: rounds, span durations; Welch's t-test where a file kept only a summary).",
        "hotspan compare base.parquet new.parquet --threshold 0.10 --min-count 20\n"
        "hotspan compare .benchmarks/*/0001_base.json .benchmarks/*/0002_new.json",
        cmd_compare,
    )
    parser.add_argument("base", metavar="BASE")
    parser.add_argument("new", metavar="NEW")
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.05,
        help="slowdown that fails, as a fraction (default 0.05 = 5%%)",
    )
    parser.add_argument(
        "--by", metavar="KEYS", help="comma-separated columns to group by (default category,name)"
    )
    parser.add_argument(
        "--min-count",
        type=int,
        default=1,
        metavar="N",
        help="groups with fewer spans on either side are shown but not judged (default 1)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="significance level of the rank test (default 0.05)",
    )
    parser.add_argument(
        "--fail-on-missing",
        action="store_true",
        help="exit 1 when a span group is in one trace only",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the rows as JSON instead of a table"
    )
    parser.add_argument(
        "--normalize",
        metavar="NAME",
        help="judge each group against the reference span NAME: divide each side by NAME's "
        "median (a fixed workload timed in both runs)",
    )
    parser.add_argument(
        "--absolute",
        action="store_true",
        help="judge raw times, even when the machine drifted or every group moved together (by "
        "default each group is judged against the machine's measured drift, or a shared shift)",
    )
    parser.add_argument(
        "--flame",
        metavar="OUT",
        help="also write a flame graph of the change: OUT.html (the new run's flame graph, each "
        "frame coloured by its change under the verdicts' noise rule, its title saying it), or "
        "OUT.speedscope.json (both runs as one speedscope file, a profile each)",
    )
    parser.add_argument(
        "--engine",
        choices=("auto", "memory", "duckdb", "spark"),
        default="auto",
        help="who computes (as for stats)",
    )
    add_filter_options(parser)
    return parser


def _environment(meta: dict[bytes, bytes] | None) -> dict[str, Any] | None:
    from .._schema import META_ENV, meta_dict

    return meta_dict(meta, META_ENV)


def cmd_compare(args: argparse.Namespace) -> int:
    from ..analysis._benchmark_comparison import is_benchmark_json

    by = parse_by(args.by)
    if args.threshold < 0 or not math.isfinite(args.threshold):
        raise CliError(f"--threshold must be a fraction >= 0 (0.05 is 5%), not {args.threshold}")
    if args.min_count < 1:
        raise CliError(f"--min-count must be at least 1, not {args.min_count}")
    if not 0 < args.alpha < 1:
        raise CliError(f"--alpha must be between 0 and 1 (0.05 is 5%), not {args.alpha}")
    if is_benchmark_json(args.base) or is_benchmark_json(
        args.new
    ):  # pytest-benchmark JSON, told by content
        if args.flame:
            raise CliError("--flame draws traces, not pytest-benchmark JSON: give two traces")
        return _compare_benchmark_files(args)
    if args.flame and not args.flame.lower().endswith((".html", ".htm", ".speedscope.json")):
        raise CliError(f"--flame {args.flame}: name an .html or a .speedscope.json file")
    engine = engine_of(args)
    with (
        open_spans_for([args.base], args, engine) as base,
        open_spans_for([args.new], args, engine) as new,
    ):
        _warn_environments(args, _environment(base.metadata()), _environment(new.metadata()))
        from ..analysis._options import CompareOptions

        try:
            options = CompareOptions(
                by=by,
                threshold=args.threshold,
                min_count=args.min_count,
                alpha=args.alpha,
                normalize=args.normalize,
                shift=not args.absolute,
            )
            result = base.compare(new, options)
        except ValueError as exc:  # --normalize naming a span a trace lacks
            raise CliError(str(exc)) from None
    if args.flame:
        _write_flame(args, result, by)
    return _print_comparison(args, result, by)


def _write_flame(args: argparse.Namespace, result: pa.Table, by: Sequence[str]) -> None:
    """The flame graph of the change (report/diff_flame.py), coloured by ``result``'s verdicts."""
    from ..formats._base import atomic_path
    from ..report.diff_flame import diff_flame_html, diff_speedscope
    from ._common import load_filtered

    base, new = load_filtered(args.base, args), load_filtered(args.new, args)
    if tuple(by) == ("category", "name"):
        verdicts = {(r["category"], r["name"]): r["verdict"] for r in result.to_pylist()}
    else:  # the colours follow the (category, name) groups' verdicts
        verdicts = None
    with atomic_path(args.flame) as target:
        if args.flame.lower().endswith(".speedscope.json"):
            text = json.dumps(diff_speedscope(base, new), separators=(",", ":"))
        else:
            title = f"hotspan: {args.base} → {args.new}"
            text = diff_flame_html(base, new, verdicts=verdicts, title=title)
        with open(target, "w", encoding="utf-8") as out:
            out.write(text)
    print(f"hotspan compare: the flame graph of the change: {args.flame}", file=sys.stderr)


def _warn_environments(
    args: argparse.Namespace, env_base: dict[str, Any] | None, env_new: dict[str, Any] | None
) -> None:
    """A warning when the traces were recorded in different environments."""
    if env_base and env_new and env_base.get("digest") != env_new.get("digest"):
        differences = [
            f"{key} {env_base.get(key)!s} -> {env_new.get(key)!s}"
            for key in ("host", "python", "hotspan", "config")
            if env_base.get(key) != env_new.get(key)
        ]
        print(
            f"hotspan compare: warning: the traces were recorded in different environments "
            f"({'; '.join(differences) or 'digests differ'}): timings may not be comparable",
            file=sys.stderr,
        )
    elif not (env_base and env_new):
        missing = args.base if not env_base else args.new
        print(
            f"hotspan compare: note: {missing} records no environment digest; cannot check that the "
            f"environments match",
            file=sys.stderr,
        )


def shift_line(result: pa.Table) -> str | None:
    """What ``compare`` judged against, in words: the machine's shift or the reference span."""
    from ..analysis.comparison import shift_of

    said = shift_of(result)
    if not said:
        return None
    if said.get("normalize"):
        return (
            f"normalized by {said['normalize']!r}: its median moved {said['shift'] * 100:+.1f}%; every group "
            f"is judged against that"
        )
    return (
        f"every group moved {said['shift'] * 100:+.0f} ± {said['spread'] * 100:.0f}% ({said['moved']} of "
        f"{said['groups']}): the machine, not the code; each group is judged against that shift "
        f"(--absolute: raw times)"
    )


def _print_comparison(args: argparse.Namespace, result: pa.Table, by: Sequence[str]) -> int:
    rows = result.to_pylist()
    if not any(r["verdict"] not in ("new", "gone") for r in rows):
        raise CliError(
            f"nothing to compare: {args.base} and {args.new} have no span group "
            f"({', '.join(by)}) in common"
        )
    slower = [r for r in rows if r["verdict"] == "slower"]
    inconclusive = [r for r in rows if r["verdict"] == "inconclusive"]
    missing = [r for r in rows if r["verdict"] in ("new", "gone")]
    if args.json:
        print(
            json.dumps(
                [
                    {
                        k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                        for k, v in r.items()
                    }
                    for r in rows
                ],
                indent=1,
                default=str,
            )
        )
    else:
        console = new_console()
        keys = [(key, ["-" if r[key] is None else str(r[key]) for r in rows]) for key in by]
        values = [
            ("verdict", [r["verdict"] for r in rows]),
            ("p50 base", [human_ns(r["p50_ns_base"]) for r in rows]),
            ("p50 new", [human_ns(r["p50_ns_new"]) for r in rows]),
            ("Δp50", [_fmt_change(r["p50_ns_change"]) for r in rows]),
            *(
                [("judged", [_fmt_change(r["judged_change"]) for r in rows])]
                if shift_line(result)
                else []
            ),
            ("95% interval", [_fmt_interval(r["change_low"], r["change_high"]) for r in rows]),
            ("count", [f"{r['count_base']:,} → {r['count_new']:,}" for r in rows]),
            ("p", [_fmt_p(r["p_value"]) for r in rows]),
            ("Δmean", [_fmt_change(r["mean_ns_change"]) for r in rows]),
        ]
        # Fitted in priority order (the verdict first), shown in reading order (the verdict last).
        out, _ = fitted_table(
            keys,
            values,
            console.width,
            order=[
                "count",
                "p50 base",
                "p50 new",
                "Δp50",
                "judged",
                "95% interval",
                "p",
                "Δmean",
                "verdict",
            ],
        )
        styles = {
            "slower": "bold red",
            "faster": "green",
            "new": "cyan",
            "gone": "yellow",
            "few": "dim",
            "inconclusive": "yellow",
        }
        for i, r in enumerate(rows):
            out.rows[i].style = styles.get(r["verdict"])
        console.print(out)
        line = shift_line(result)
        if line:
            console.print(f"[bold]{line}[/bold]")
        line = _drift_line(args, result)
        if line:
            console.print(f"[bold]{line}[/bold]")
        console.print(
            f"{len(slower)} of {len(rows)} slower: median up significantly (Mann-Whitney U p < "
            f"{args.alpha:g}) and its whole 95% interval above +{args.threshold * 100:g}%"
        )
        if missing:
            console.print(
                f"{sum(r['verdict'] == 'gone' for r in rows)} gone, "
                f"{sum(r['verdict'] == 'new' for r in rows)} new"
                + (" (--fail-on-missing: failing)" if args.fail_on_missing else "")
            )
        if inconclusive:
            console.print(
                f"{len(inconclusive)} inconclusive: slower, but the machine's drift may explain it "
                f"(exit status 3)"
            )
    json_drift_line(args, result)
    return exit_status(slower, missing, inconclusive, args.fail_on_missing)


def json_drift_line(args: argparse.Namespace, result: pa.Table) -> bool:
    """With --json, the drift line goes to stderr (stdout stays JSON)."""
    if not args.json:
        return False
    line = _drift_line(args, result)
    if line:
        print(f"hotspan compare: {line}", file=sys.stderr)
    return bool(line)


def _drift_line(args: argparse.Namespace, result: pa.Table) -> str | None:
    from ..analysis.comparison import drift_line, drift_of

    return drift_line(drift_of(result), args.base, args.new)


def exit_status(
    slower: list[dict[str, Any]],
    missing: list[dict[str, Any]],
    inconclusive: list[dict[str, Any]],
    fail_on_missing: bool,
) -> int:
    """1 slower (or missing, with --fail-on-missing), else 3 inconclusive, else 0."""
    if slower or (missing and fail_on_missing):
        return 1
    return 3 if inconclusive else 0


def _fmt_change(change: float | None) -> str:
    if change is None:
        return "-"
    if math.isinf(change):
        return "+inf%"
    return f"{change * 100:+.1f}%"


def _fmt_interval(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "-"
    return f"[{_fmt_change(low)}, {_fmt_change(high)}]"


def _fmt_p(p: float | None) -> str:
    if p is None:
        return "-"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


_VERDICT_STYLES = {
    "slower": "bold red",
    "faster": "green",
    "new": "cyan",
    "gone": "yellow",
    "few": "dim",
    "inconclusive": "yellow",
}


def _compare_benchmark_files(args: argparse.Namespace) -> int:
    """``compare`` on two pytest-benchmark JSON files (analysis/_benchmark_comparison.py): per
    benchmark and per span, compare's rule and exit status."""
    from ..analysis._benchmark_comparison import (
        BenchmarkFileError,
        compare_benchmarks,
        is_benchmark_json,
        load_benchmark_json,
    )

    kinds = [is_benchmark_json(args.base), is_benchmark_json(args.new)]
    if kinds[0] != kinds[1]:
        which, other = (args.base, args.new) if kinds[0] else (args.new, args.base)
        raise CliError(
            f"{which} is a pytest-benchmark file and {other} is not: compare two traces or two "
            f"pytest-benchmark files"
        )
    if args.by is not None:
        raise CliError(
            "--by applies to traces; pytest-benchmark files are compared per benchmark and per span "
            "(category, name)"
        )
    try:
        base, new = load_benchmark_json(args.base), load_benchmark_json(args.new)
    except BenchmarkFileError as exc:
        raise CliError(str(exc)) from None
    result = compare_benchmarks(
        base,
        new,
        threshold=args.threshold,
        min_count=args.min_count,
        alpha=args.alpha,
        shift=not args.absolute,
    )
    benches, spans = result["benchmarks"], result["spans"]
    if not any(r["verdict"] not in ("new", "gone") for r in benches):
        raise CliError(
            f"nothing to compare: {args.base} and {args.new} have no benchmark in common"
        )
    rows = benches + spans
    slower = [r for r in rows if r["verdict"] == "slower"]
    inconclusive = [r for r in rows if r["verdict"] == "inconclusive"]
    missing = [r for r in rows if r["verdict"] in ("new", "gone")]
    line = benchmark_drift_line(args, result["machine"])
    if args.json:
        print(
            json.dumps(
                {
                    key: [_finite_values(r) for r in value]
                    for key, value in result.items()
                    if key != "machine"
                },
                indent=1,
            )
        )
        if line:
            print(f"hotspan compare: {line}", file=sys.stderr)
    else:
        _print_benchmark_comparison(args, benches, spans, slower, missing, line, inconclusive)
    return exit_status(slower, missing, inconclusive, args.fail_on_missing)


def benchmark_drift_line(args: argparse.Namespace, machine: dict[str, Any]) -> str | None:
    """The machine's drift over two pytest-benchmark files, in one line."""
    measured = machine["measured"]
    if not all(measured):
        missing = [name for name, has in zip((args.base, args.new), measured) if not has]
        return (
            f"{' and '.join(missing)} recorded no measure of the machine's speed (pytest-benchmark's "
            f"machine_info has none; pytest --hotspan records one per benchmark): times judged as they are"
        )
    drifts = machine["drifts"]
    if not drifts:
        return None
    worst = max(drifts, key=lambda f: abs(math.log(f)))
    which, ratio = (args.new, worst) if worst > 1 else (args.base, 1 / worst)
    return (
        f"the machine was up to {ratio:.2f}x slower during {which} ({len(drifts)} benchmarks ran on "
        f"a machine of another speed): those are slower only past what that explains, else inconclusive"
    )


def _finite_values(row: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()
    }


def _print_benchmark_comparison(
    args: argparse.Namespace,
    benches: list[dict[str, Any]],
    spans: list[dict[str, Any]],
    slower: list[dict[str, Any]],
    missing: list[dict[str, Any]],
    line: str | None = None,
    inconclusive: list[dict[str, Any]] | None = None,
) -> None:
    out = new_console()
    keys = [("benchmark", [r["benchmark"] for r in benches])]
    values = [  # in priority order: the last ones go first when the terminal is narrow
        ("verdict", [r["verdict"] for r in benches]),
        ("Δmedian", [_fmt_change(r["median_s_change"]) for r in benches]),
        ("median base", [_human_seconds(r["median_s_base"]) for r in benches]),
        ("median new", [_human_seconds(r["median_s_new"]) for r in benches]),
        ("95% interval", [_fmt_interval(r["change_low"], r["change_high"]) for r in benches]),
        ("Δmean", [_fmt_change(r["mean_s_change"]) for r in benches]),
        ("test", [r["rule"] or "-" for r in benches]),
        (
            "rounds",
            [
                f"{_count_or_dash(r['rounds_base'])} → {_count_or_dash(r['rounds_new'])}"
                for r in benches
            ],
        ),
    ]
    table, _ = fitted_table(
        keys,
        values,
        out.width,
        title="benchmarks (pytest-benchmark's timings)",
        order=[
            "median base",
            "median new",
            "Δmedian",
            "95% interval",
            "Δmean",
            "rounds",
            "test",
            "verdict",
        ],
    )
    _style_verdicts(table, benches)
    out.print(table)
    if spans:
        keys = [
            ("benchmark", [r["benchmark"] for r in spans]),
            (
                "span",
                [f"{r['category']}/{r['name']}" if r["category"] else r["name"] for r in spans],
            ),
        ]
        values = [
            ("verdict", [r["verdict"] for r in spans]),
            ("Δp50", [_fmt_change(r["p50_ns_change"]) for r in spans]),
            ("p50 base", [human_ns(r["p50_ns_base"]) for r in spans]),
            ("p50 new", [human_ns(r["p50_ns_new"]) for r in spans]),
            ("95% interval", [_fmt_interval(r["change_low"], r["change_high"]) for r in spans]),
            ("Δp99", [_fmt_change(r["p99_ns_change"]) for r in spans]),
            ("count", [f"{r['count_base']:,} → {r['count_new']:,}" for r in spans]),
            ("test", [r["rule"] or "-" for r in spans]),
        ]
        table, _ = fitted_table(
            keys,
            values,
            out.width,
            title="spans (pytest --hotspan's summaries)",
            order=[
                "p50 base",
                "p50 new",
                "Δp50",
                "95% interval",
                "Δp99",
                "count",
                "test",
                "verdict",
            ],
        )
        _style_verdicts(table, spans)
        out.print(table)
    else:
        out.print("no span summaries in these files (record them with pytest --hotspan)")
    if line:
        out.print(f"[bold]{line}[/bold]")
    out.print(
        f"{len(slower)} of {len(benches) + len(spans)} slower: one rule for benchmarks and spans, the "
        f"change significant (p < {args.alpha:g}) and its whole 95% interval above "
        f"+{args.threshold * 100:g}%: Mann-Whitney U and the median's bootstrap interval on the "
        f"samples (rounds, span durations), Welch's t-test on the means where a file kept only its "
        f"summary"
    )
    if inconclusive:
        out.print(
            f"{len(inconclusive)} inconclusive: slower, but the machine's drift may explain it "
            f"(exit status 3)"
        )
    if missing:
        out.print(
            f"{sum(r['verdict'] == 'gone' for r in missing)} gone, "
            f"{sum(r['verdict'] == 'new' for r in missing)} new"
            + (" (--fail-on-missing: failing)" if args.fail_on_missing else "")
        )


def _style_verdicts(table: Table, rows: list[dict[str, Any]]) -> None:
    for i, r in enumerate(rows):
        table.rows[i].style = _VERDICT_STYLES.get(r["verdict"])


def _human_seconds(value: float | None) -> str:
    return human_ns(None if value is None else value * 1e9)


def _count_or_dash(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
