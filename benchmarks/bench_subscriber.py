"""What a subscriber costs the recording thread: a reused span's ns/iter without one, with a
fast one and with one whose callback sleeps (it falls behind: its queue drops its oldest).

    python benchmarks/bench_subscriber.py [--n 300000] [--rounds 7] [--sleep 0.05]

Rounds are interleaved (none, fast, slow, none, ...) and each case keeps its best round;
the hub's pump thread and the callbacks' threads compete for the CPU with the recording
thread, so on a machine with few cores the figure includes that competition.
"""
from __future__ import annotations

import argparse
import gc
import time

import hotspan


def loop(n: int) -> float:
    reused = hotspan.span("x", "c")
    t0 = time.perf_counter_ns()
    for _ in range(n):
        with reused:
            pass
    return (time.perf_counter_ns() - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=300_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--sleep", type=float, default=0.05, help="seconds the slow callback sleeps per batch")
    args = parser.parse_args()

    def fast(batch) -> None:
        batch.num_rows  # noqa: B018 - touches the batch, nothing more

    def slow(batch) -> None:
        time.sleep(args.sleep)

    best = {"none": float("inf"), "fast subscriber": float("inf"), "slow subscriber": float("inf")}
    dropped = {"fast subscriber": 0, "slow subscriber": 0}
    gc.disable()
    for _ in range(args.rounds):
        for case in best:
            hotspan.drain()
            if case == "none":
                best[case] = min(best[case], loop(args.n))
                continue
            with hotspan.subscribe(fast if case.startswith("fast") else slow) as sub:
                best[case] = min(best[case], loop(args.n))
            dropped[case] += sub.dropped
    gc.enable()
    base = best["none"]
    for case, ns in best.items():
        extra = f"  ({dropped[case]:,} spans dropped by it over all rounds)" if case in dropped else ""
        print(f"{case:<16} {ns:6.1f} ns/iter  x{ns / base:4.2f}{extra}")


if __name__ == "__main__":
    main()
