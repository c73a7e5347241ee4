"""What hotspan.counter(name, value) costs next to a reused span (issue 33 item 4: within
1.5x a span's), in one run, as ratios.

    python benchmarks/bench_counter.py [--n 20000] [--rounds 60] [--json out.json]

bench_overhead.py's paired method: each round runs short loops (--n iterations, a few ms)
of an empty body, ``with span: pass`` (one span object, reused), ``counter("queue", i)``
and ``with floor: pass`` (the benchmark floor) back to back; a case's cost is its time per
iteration minus the empty loop's, and each ratio is the median over rounds of the ratio in
that round (adjacent short runs see the same host). Drained between rounds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import hotspan
from hotspan.testing import NoopContext


def _empty(n: int) -> int:
    t = time.perf_counter_ns()
    for _i in range(n):
        pass
    return time.perf_counter_ns() - t


_STEP = hotspan.span("step")
_FLOOR = NoopContext()


def _span(n: int, s=_STEP) -> int:
    t = time.perf_counter_ns()
    for _i in range(n):
        with s:
            pass
    return time.perf_counter_ns() - t


def _counter(n: int, counter=hotspan.counter) -> int:
    t = time.perf_counter_ns()
    for i in range(n):
        counter("queue", i)
    return time.perf_counter_ns() - t


def _floor(n: int, f=_FLOOR) -> int:
    t = time.perf_counter_ns()
    for _i in range(n):
        with f:
            pass
    return time.perf_counter_ns() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    n = args.n
    for fn in (_empty, _span, _counter, _floor):  # warm up (site caches, blocks)
        fn(n)
    hotspan.drain()
    hotspan.drain_counters()
    per: dict[str, list[float]] = {"span": [], "counter": [], "floor": []}
    ratios: dict[str, list[float]] = {"counter / span": [], "span / floor": []}
    for _ in range(args.rounds):
        empty = (_empty(n) + _empty(n)) / 2 / n
        span = _span(n) / n - empty
        counter = _counter(n) / n - empty
        floor = _floor(n) / n - empty
        per["span"].append(span)
        per["counter"].append(counter)
        per["floor"].append(floor)
        ratios["counter / span"].append(counter / span)
        ratios["span / floor"].append(span / floor)
        hotspan.drain()
        hotspan.drain_counters()
    result = {
        "n": n,
        "rounds": args.rounds,
        "ns": {k: round(statistics.median(v), 1) for k, v in per.items()},
        "ratios": {k: round(statistics.median(v), 3) for k, v in ratios.items()},
    }
    with open("/proc/loadavg") as f:
        result["loadavg"] = f.read().split()[:3]
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()
