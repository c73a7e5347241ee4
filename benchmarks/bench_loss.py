"""Spans lost when the host is busy: N threads each record spans flat out.

    python benchmarks/bench_loss.py [--runs 20] [--spans 200000] [--threads 1,2,4,8,16]

For N = 1, 2, 4, 8, 16 threads each recording --spans spans (a reused span, as fast as the
interpreter goes), (a) with the main thread calling drain() every 2 ms and (b) with no
drain() until the threads are done; --runs runs of each, every run in a fresh interpreter
at the default settings. Prints, per case: runs with any span dropped, the most dropped in
one run, how many of those were at the memory cap, and whether recorded == drained +
dropped held in every run.

Target: 0 dropped in every run, except where the spans do not fit under the memory cap
(64 MiB: about 2.1 M spans held at once; case (b) with 16 threads records 3.2 M): those
drops are the cap doing its job, counted as such.
"""

from __future__ import annotations

import argparse
import json
import sys

from hotspan.testing import run_flat_out_threads


def run_case(n_threads: int, per_thread: int, every: float) -> dict:
    """One run in a fresh interpreter: the same workload as tests/core/test_blocks.py's."""
    try:
        return run_flat_out_threads(n_threads, per_thread, every)
    except RuntimeError as exc:
        raise SystemExit(f"bench_loss: a run failed:\n{exc}") from None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--spans", type=int, default=200_000, help="spans per thread")
    parser.add_argument("--threads", default="1,2,4,8,16", help="thread counts, comma-separated")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    counts = [int(x) for x in args.threads.split(",")]
    cases = [("drain every 2 ms", 0.002), ("no drain until the end", 0.0)]
    results = []
    print(f"{args.runs} runs per case, {args.spans:,} spans per thread, default settings")
    print(
        f"{'case':<24} {'threads':>7} {'runs dropping':>13} {'max dropped':>12} {'of which at cap':>15} "
        f"{'exact':>6} {'drains/run':>10}"
    )
    ok = True
    for label, every in cases:
        for n in counts:
            runs = [run_case(n, args.spans, every) for _ in range(args.runs)]
            recorded = n * args.spans
            exact = all(r["rows"] + r["dropped"] == recorded for r in runs)
            dropping = sum(1 for r in runs if r["dropped"])
            worst = max(runs, key=lambda r: r["dropped"])
            not_cap = sum(r["dropped"] - r["at_cap"] for r in runs)
            ok &= exact and not_cap == 0 and (dropping == 0 or recorded * 32 > 64 << 20)
            drains = sum(r["drains"] for r in runs) / len(runs)
            print(
                f"{label:<24} {n:>7} {dropping:>10}/{args.runs:<2} {worst['dropped']:>12,} {worst['at_cap']:>15,} "
                f"{'yes' if exact else 'NO':>6} {drains:>10.1f}"
            )
            results.append({"case": label, "threads": n, "runs": runs})
    print("verdict:", "ok (drops only at the memory cap, every run exact)" if ok else "MISSED")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
