"""Many ranks into one collector: RANKS processes on loopback record spans at RATE spans/s
each for SECONDS, streaming with hotspan.record("grpc://...") (the real recorder: flusher,
client, retries) into one `hotspan collect`; then every rank's count is checked exactly.

    python benchmarks/bench_ingest.py [--ranks 64] [--seconds 30] [--rate 20000]
                                      [--collectors 1] [--collector-nice 10] [--json out.json]

Printed: per rank, recorded (spans the rank made) = delivered (acknowledged by a collector)
= in the dataset (load(dir), per rank), with nothing dropped anywhere; the ingest rate (all
spans in the dataset / wall time from "go" until the last rank's recorder stopped, that is
until its last put was on disk), and the collector's CPU time per million spans (the figure
to size collectors by: it does not depend on what else the host runs). With --collectors N,
N collectors write into the one dataset and each rank sends to collector rank % N.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import hotspan
from bench_collector import start_collector  # the one way the benchmarks start a collector

RANK = textwrap.dedent(
    """
    import sys, time
    import hotspan

    print("imported", flush=True)
    url, rank, seconds, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
    hotspan.configure(rank=rank)
    step, fwd = hotspan.span("step", "train"), hotspan.span("fwd", "compute")
    rec = hotspan.record(url, stop_timeout=300).start()
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.monotonic()
    made = 0
    while True:
        elapsed = time.monotonic() - t0
        if elapsed >= seconds:
            break
        target = int(elapsed * rate)
        while made < target:  # spans come in pairs (step > fwd), in bursts of 1000
            for _ in range(500):
                with step:
                    with fwd:
                        pass
            made += 1000
        time.sleep(0.01)
    rec.stop()
    print("done", made, rec.spans, rec.dropped, hotspan.dropped(), flush=True)
    """
)


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(
    ranks: int,
    seconds: float,
    rate: float,
    collectors: int = 1,
    nice: int = 10,
    out: Path | None = None,
) -> dict:
    """Run it; return the figures (``exact``: every rank's recorded = delivered = in the dataset)."""
    import pyarrow.compute as pc

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run" if out is None else out
        servers = [start_collector(out, nice, duration=3600) for _ in range(collectors)]
        url = ",".join(u for _p, u in servers)
        env = {
            k: v for k, v in os.environ.items() if k not in ("HOTSPAN_OUT", "RANK", "HOTSPAN_RANK")
        }
        procs = []
        try:
            for r in range(ranks):
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-c", RANK, url, str(r), str(seconds), str(rate)],
                        env=env,
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                )
                # One import at a time: an editable install (-Ceditable.rebuild) runs its build
                # check on import, and dozens of those at once in one build directory collide.
                if procs[-1].stdout.readline().strip() != "imported":
                    raise SystemExit(f"rank {r} did not start")
            for r, p in enumerate(procs):
                if p.stdout.readline().strip() != "ready":
                    raise SystemExit(f"rank {r} did not start")
            cpu0 = sum(_cpu_seconds(p.pid) for p, _u in servers)
            t0 = time.perf_counter()
            for p in procs:
                p.stdin.write("go\n")
                p.stdin.flush()
            results = {}
            for r, p in enumerate(procs):
                line = p.stdout.readline().split()
                if not line or line[0] != "done":
                    raise SystemExit(f"rank {r} failed: {line}")
                results[r] = dict(
                    zip(("recorded", "delivered", "dropped", "core_dropped"), map(int, line[1:]))
                )
            wall = time.perf_counter() - t0
            collector_cpu = sum(_cpu_seconds(p.pid) for p, _u in servers) - cpu0
            for p in procs:
                p.wait(timeout=60)
            summaries = []
            for p, _u in servers:
                p.terminate()
                summaries.append(p.communicate(timeout=120)[0].strip())
        finally:
            for p in [*procs, *(s for s, _u in servers)]:
                if p.poll() is None:
                    p.kill()
        table = hotspan.load(out)
        values, counts = pc.value_counts(table.column("rank")).flatten()
        in_dataset = dict(zip(values.to_pylist(), counts.to_pylist()))
        unique_ids = pc.count_distinct(table.column("span_id")).as_py() == table.num_rows
    for r, res in results.items():
        res["in_dataset"] = in_dataset.get(r, 0)
    exact = unique_ids and all(
        res["recorded"] == res["delivered"] == res["in_dataset"]
        and not res["dropped"]
        and not res["core_dropped"]
        for res in results.values()
    )
    total = sum(in_dataset.values())
    return {
        "ranks": ranks,
        "collectors": collectors,
        "seconds": seconds,
        "rate_per_rank": rate,
        "recorded": sum(r["recorded"] for r in results.values()),
        "in_dataset": total,
        "exact": exact,
        "wall_s": wall,
        "spans_per_s": total / wall,
        "collector_cpu_s": collector_cpu,
        "collector_cpu_s_per_m_spans": collector_cpu / max(total / 1e6, 1e-9),
        "per_rank": results,
        "collector_summaries": summaries,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument(
        "--rate", type=float, default=20_000, help="spans per second each rank records"
    )
    parser.add_argument("--collectors", type=int, default=1)
    parser.add_argument("--collector-nice", type=int, default=10)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    print(
        f"python {sys.version.split()[0]}, hotspan {hotspan.__version__}, {os.cpu_count()} CPUs; "
        f"{args.ranks} ranks x {args.rate:,.0f} spans/s for {args.seconds:g} s into {args.collectors} collector(s)"
    )
    f = measure(args.ranks, args.seconds, args.rate, args.collectors, args.collector_nice)
    bad = {
        r: res
        for r, res in f["per_rank"].items()
        if not (res["recorded"] == res["delivered"] == res["in_dataset"])
        or res["dropped"]
        or res["core_dropped"]
    }
    print(
        f"recorded {f['recorded']:,} spans, in the dataset {f['in_dataset']:,}: "
        + (
            "every rank exact (recorded = delivered = in the dataset, nothing dropped, ids unique)"
            if f["exact"]
            else f"NOT EXACT: {bad or 'span ids repeat'}"
        )
    )
    print(
        f"ingest: {f['in_dataset']:,} spans in {f['wall_s']:.1f} s (go -> last rank's last put on disk) "
        f"= {f['spans_per_s'] / 1e6:.2f} M spans/s; collector CPU {f['collector_cpu_s']:.1f} s "
        f"= {f['collector_cpu_s_per_m_spans']:.2f} CPU-s per M spans"
    )
    for s in f["collector_summaries"]:
        print(f"  ({s})")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(f, fh, indent=1, default=str)
    return 0 if f["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
