"""Machine instructions per loop pass for the span forms bench_overhead.py times, counted by
valgrind's callgrind: deterministic, so usable on a loaded machine where wall-clock ratios wander.

Each case runs in a fresh interpreter under callgrind twice, with --small and --large passes;
(Ir(large) - Ir(small)) / (large - small) is what one pass costs, start-up and warm-up cancel.
The ratios are per pass as bench_overhead.py reports them (a loop pass included, as in its
paired medians), so "literal / floor" here reads like "literal / floor" there.

    python benchmarks/instr_count.py            # all cases, needs valgrind on PATH
    python benchmarks/instr_count.py --large 50000
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Short label -> bench_overhead.make_cases key.
CASES = {
    "empty loop": "empty loop",
    "floor": "floor: no-op C context manager",
    "reused": "hotspan: reused span",
    "literal": 'hotspan: with hotspan.span("x", "c")',
    "begin+end": "hotspan: begin()/end()",
    "bare call": "bare call",
    "traced": "hotspan: @traced call",
}


def child(case: str, n: int) -> None:
    """Run one case's loop of n passes (under callgrind, started by main)."""
    sys.path.insert(0, str(HERE))
    from bench_overhead import make_cases

    make_cases(n, peers=False)[CASES[case]]()


def instructions(case: str, n: int) -> int:
    """Instructions (callgrind's Ir) the main thread of a fresh interpreter spends running case
    for n passes. The main thread alone: the background drainer wakes on a wall-clock timer,
    so its share changes with how long the run took (by +-100 instructions a pass here)."""
    with tempfile.TemporaryDirectory() as directory:
        out = Path(directory) / "callgrind.out"
        result = subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                "--separate-threads=yes",
                f"--callgrind-out-file={out}",
                sys.executable,
                __file__,
                "--child",
                case,
                str(n),
            ],
            check=False,
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        main_thread = sorted(Path(directory).glob("callgrind.out-*"))[:1]
        found = main_thread and re.search(
            r"^(?:summary|totals):\s*(\d+)", main_thread[0].read_text(), re.MULTILINE
        )
        if result.returncode != 0 or not found:
            raise SystemExit(f"callgrind failed for {case!r}: {result.stderr[-2000:]}")
        return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--small", type=int, default=2_000)
    parser.add_argument("--large", type=int, default=12_000)
    parser.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    parser.add_argument("--child", nargs=2, metavar=("CASE", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    if not shutil.which("valgrind"):
        print("instr_count: valgrind is not on PATH; nothing measured")
        return
    per_pass: dict[str, float] = {}
    for case in args.cases:
        small, large = instructions(case, args.small), instructions(case, args.large)
        per_pass[case] = (large - small) / (args.large - args.small)
        print(f"{case:>12}: {per_pass[case]:8.0f} instructions a pass", flush=True)
    floor = per_pass.get("floor")
    if floor:
        for case in ("reused", "literal", "begin+end"):
            if case in per_pass:
                print(f"{case + ' / floor':>20}: {per_pass[case] / floor:.3f}")
        if {"traced", "bare call", "empty loop"} <= per_pass.keys():
            added = (per_pass["traced"] - per_pass["bare call"]) / (floor - per_pass["empty loop"])
            print(f"{'traced added / with added':>20}: {added:.3f}")


if __name__ == "__main__":
    main()
