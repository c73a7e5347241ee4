"""What a subscriber costs the recording thread: a reused span's ns/iter without one, with a
fast one and with one whose callback sleeps (it falls behind: its queue drops its oldest).

    python benchmarks/bench_subscriber.py [--n 300000] [--rounds 7] [--sleep 0.05]

Rounds are interleaved (none, fast, slow, none, ...) and each case keeps its best round.
Two figures per case: wall time, which includes waiting for the GIL and the CPU while the
hub's pump thread builds tables (the real cost on a machine with few cores), and the
recording thread's own CPU time (``time.thread_time``), which a loaded machine disturbs less.
"""

from __future__ import annotations

import argparse
import gc
import time

import hotspan


def loop(n: int) -> tuple[float, float]:
    """(wall ns, this thread's CPU ns) per iteration."""
    reused = hotspan.span("x", "c")
    c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
    for _ in range(n):
        with reused:
            pass
    t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
    return (t1 - t0) / n, (c1 - c0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--sleep", type=float, default=0.05, help="seconds the slow callback sleeps per batch"
    )
    args = parser.parse_args()

    def fast(batch) -> None:
        batch.num_rows  # noqa: B018 - touches the batch, nothing more

    def slow(batch) -> None:
        time.sleep(args.sleep)

    cases = ("none", "fast subscriber", "slow subscriber")
    best = {case: float("inf") for case in cases}
    best_cpu = {case: float("inf") for case in cases}
    dropped = {"fast subscriber": 0, "slow subscriber": 0}
    gc.disable()
    for _ in range(args.rounds):
        for case in best:
            hotspan.drain()
            if case == "none":
                wall, cpu = loop(args.n)
            else:
                with hotspan.subscribe(fast if case.startswith("fast") else slow) as sub:
                    wall, cpu = loop(args.n)
                dropped[case] += sub.dropped
            best[case] = min(best[case], wall)
            best_cpu[case] = min(best_cpu[case], cpu)
    gc.enable()
    base, base_cpu = best["none"], best_cpu["none"]
    print(f"{'':<16} {'wall ns/iter':>12} {'ratio':>6} {'cpu ns/iter':>12} {'ratio':>6}")
    for case in cases:
        extra = (
            f"  ({dropped[case]:,} spans dropped by it over all rounds)" if case in dropped else ""
        )
        print(
            f"{case:<16} {best[case]:12.1f} {best[case] / base:6.2f} {best_cpu[case]:12.1f} "
            f"{best_cpu[case] / base_cpu:6.2f}{extra}"
        )


if __name__ == "__main__":
    main()
