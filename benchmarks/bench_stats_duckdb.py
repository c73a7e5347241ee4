"""`hotspan stats` against DuckDB's own GROUP BY with quantile_cont, whole fresh commands in
pairs run back to back (issue 35 item 3: at most 1.0x on the 20 M-span run, median of 5 pairs).

    python benchmarks/bench_stats_duckdb.py DIR [--pairs 5] [--memory-limit 1GB]
                                            [--phases] [--installed /tmp/hotspan-installed]

    # the issue's figure (the run bench_big.py generates: 20 M spans, 16 ranks), measured
    # under the machine's benchmark lock
    flock /tmp/hotspan-bench.lock python benchmarks/bench_stats_duckdb.py big/20m --phases

Each pair: `python -m hotspan stats DIR --json` then DuckDB's query (`bench_big.DUCKDB_QUERY`:
count, sum, min, max and quantile_cont p50/p90/p99 of duration_ns by category and name, over
the same files, hive partitioning off) in `python -c`, each a fresh process with the same
memory limit (HOTSPAN_MEMORY_LIMIT, DuckDB's memory_limit), start-up included. Per pair the
wall times, CPU times (the child's own rusage) and the ratio; then the median of the pairs'
ratios and the load average before and after. With --phases, as many pairs of `hotspan
stats DIR --phases --json` against DuckDB's parent join (`bench_big.DUCKDB_PHASES_QUERY`: per
rank, the top-level and second-level category of each span and whether its parent shares
them). hotspan runs from a copy laid out and byte-compiled as a wheel installs it
(`bench_big.installed_copy`): a development checkout's editable install checks its build at
every import. Both commands' rows are checked once: the same groups and counts, and each
percentile DuckDB gives within 1e-9 of hotspan's (both are linear interpolation; hotspan's
are numpy's, to the bit).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_big  # noqa: E402


def hotspan_command(directory: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "hotspan", "stats", str(directory), "--json", *extra]


def duckdb_command(query: str, memory_limit: str) -> list[str]:
    code = (
        "import duckdb, json\n"
        f"con = duckdb.connect(config={{'memory_limit': {memory_limit!r}}})\n"
        "con.execute('SET enable_progress_bar = false')\n"  # (it draws on stdout)
        f"print(json.dumps(con.sql({query!r}).fetchall()))"
    )
    return [sys.executable, "-c", code]


def pairs(
    label: str, ours: list[str], theirs: list[str], count: int, env: dict[str, str]
) -> tuple[float, list[str], list[str]]:
    """``count`` pairs (hotspan, then DuckDB, back to back): prints each, returns the median
    of the pairs' wall ratios and the first pair's outputs."""
    ratios, cpu_ratios = [], []
    first: tuple[str, str] | None = None
    for i in range(count):
        out, t_ours, cpu_ours, peak_ours = bench_big._reaped_timed(ours, env)
        duck, t_duck, cpu_duck, peak_duck = bench_big._reaped_timed(theirs)
        first = first or (out, duck)
        ratios.append(t_ours / t_duck)
        cpu_ratios.append(cpu_ours / cpu_duck)
        print(
            f"  {label} pair {i + 1}: hotspan {t_ours:.2f} s (CPU {cpu_ours:.2f} s, "
            f"{peak_ours:.2f} GiB), DuckDB {t_duck:.2f} s (CPU {cpu_duck:.2f} s, "
            f"{peak_duck:.2f} GiB): {t_ours / t_duck:.2f}x (CPU {cpu_ours / cpu_duck:.2f}x)",
            flush=True,
        )
    median = statistics.median(ratios)
    print(
        f"{label}: median ratio of {count} pairs {median:.2f}x (CPU "
        f"{statistics.median(cpu_ratios):.2f}x)",
        flush=True,
    )
    assert first is not None
    return median, [first[0]], [first[1]]


def check_stats(ours: str, theirs: str) -> None:
    """hotspan's groups are DuckDB's, with the same counts, sums, extremes and percentiles
    (DuckDB's quantile_cont within 1e-9 relative of numpy's linear method)."""
    rows = {(r["category"], r["name"]): r for r in json.loads(ours)}
    duck = json.loads(theirs)
    assert len(rows) == len(duck), (len(rows), len(duck))
    for category, name, count, total, low, high, quantiles in duck:
        row = rows[(category, name)]
        assert (row["count"], row["total_ns"], row["min_ns"], row["max_ns"]) == (
            count,
            int(total),
            low,
            high,
        ), (category, name)
        for column, value in zip(("p50_ns", "p90_ns", "p99_ns"), quantiles):
            assert abs(row[column] - value) <= 1e-9 * max(abs(value), 1), (column, row, value)
    print(f"  rows checked: {len(rows)} groups, the same as DuckDB's", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dir", type=Path, help="a run directory (rank=R/part-*.parquet)")
    parser.add_argument("--pairs", type=int, default=5)
    parser.add_argument("--memory-limit", default="1GB")
    parser.add_argument("--phases", action="store_true", help="also phases vs DuckDB's join")
    parser.add_argument(
        "--installed",
        type=Path,
        default=Path("/tmp/hotspan-installed"),
        help="where to lay out the installed copy of hotspan",
    )
    args = parser.parse_args()
    directory = args.dir.resolve()
    env = {
        "COLUMNS": "160",
        "HOTSPAN_MEMORY_LIMIT": args.memory_limit,
        **bench_big.installed_copy(args.installed),
    }
    print(
        f"{directory}: load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, "
        f"{os.cpu_count()} cores",
        flush=True,
    )
    query = bench_big.DUCKDB_QUERY.format(dir=directory)
    _, ours, theirs = pairs(
        "stats",
        hotspan_command(directory),
        duckdb_command(query, args.memory_limit),
        args.pairs,
        env,
    )
    check_stats(ours[0], theirs[0])
    if args.phases:
        pairs(
            "phases",
            hotspan_command(directory, "--phases"),
            duckdb_command(bench_big.DUCKDB_PHASES_QUERY.format(dir=directory), args.memory_limit),
            args.pairs,
            env,
        )
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
