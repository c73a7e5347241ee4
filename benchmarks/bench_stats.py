"""hotspan.stats (and phases) on a million recorded spans: prints the time each takes.

    python benchmarks/bench_stats.py [--spans 1000000] [--repeat 5]

The spans are recorded by hotspan itself (two threads of training-like steps: nested
compute, communication with byte counts, data loading), so ids, nesting and dictionary
columns are what a real drain produces.
"""

from __future__ import annotations

import argparse
import threading
import time

import hotspan

SPANS_PER_STEP = 8  # step, load, forward, 4 x matmul, allreduce


def record(spans: int, threads: int = 2):
    def work(k: int, steps: int) -> None:
        hotspan.set_thread_name(f"worker-{k}")
        step, load = hotspan.span("step", "train"), hotspan.span("load", "data", arg=1 << 16)
        forward, matmul = hotspan.span("forward", "compute"), hotspan.span("matmul")
        allreduce = hotspan.span("allreduce", "comms", arg=1 << 22)
        for _ in range(steps):
            with step:
                with load:
                    pass
                with forward:
                    for _ in range(4):
                        with matmul:
                            pass
                with allreduce:
                    pass

    hotspan.configure(capacity=1 << 20)
    hotspan.enable()
    hotspan.drain()
    steps = spans // SPANS_PER_STEP // threads
    workers = [threading.Thread(target=work, args=(k, steps)) for k in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    table = hotspan.drain()
    if hotspan.dropped():
        print(f"note: {hotspan.dropped():,} spans dropped while recording")
    return table


def best_of(repeat: int, fn) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    table = record(args.spans)
    print(f"{table.num_rows:,} spans recorded")
    cases = {
        "stats(by=category,name)": lambda: hotspan.stats(table),
        "stats(by=rank,thread_name,name)": lambda: hotspan.stats(
            table, by=("rank", "thread_name", "name")
        ),
        "phases()": lambda: hotspan.phases(table),
    }
    for label, fn in cases.items():
        seconds = best_of(args.repeat, fn)
        print(
            f"{label:34s} {seconds * 1e3:8.1f} ms  ({seconds / table.num_rows * 1e9:.0f} ns/span)"
        )


if __name__ == "__main__":
    main()
