"""The collector: ingest rate from 4 ranks on loopback, and the core's overhead ratios while
this process streams to a collector.

    python benchmarks/bench_collector.py [--ranks 4] [--batches 10] [--batch-spans 100000]
                                         [--n 1000000] [--rounds 5] [--json out.json]

1. Ingest: a `hotspan collect` process; RANKS processes each send BATCHES drained-like
   tables of BATCH_SPANS spans through hotspan's collector client (one do_put per batch, as a
   recorder's flush does), all at once. Spans/s = all spans / wall time from "go" until
   every rank has its last put acknowledged (written to disk by the collector).
2. Overhead: bench_overhead.measure() once as it is, once with hotspan.record("grpc://...")
   streaming this process's spans to a collector subprocess in the background (the drain()
   calls between cases left to the recorder). Both sets of ratios are printed side by side.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import hotspan  # noqa: E402

SENDER = textwrap.dedent(
    """
    import sys, time
    import pyarrow as pa
    import hotspan
    from hotspan.collector import CollectorClient

    url, rank, batches, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    hotspan.configure(rank=rank)
    s, c = hotspan.span("step", "train"), hotspan.span("fwd", "compute")
    tables = []
    for _ in range(batches):
        for _ in range(size // 2):
            with s:
                with c:
                    pass
        tables.append(hotspan.drain())
    client = CollectorClient(url, buffer_spans=1 << 30)
    client.pump()  # connect (and measure the clock) before the start line
    print("ready", sum(t.num_rows for t in tables), flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    for t in tables:
        client.send(t)
    client.close(timeout=60)
    print("sent", client.sent_spans, client.dropped, time.perf_counter() - t0, flush=True)
    """
)


def start_collector(out: Path) -> tuple[subprocess.Popen, str]:
    env = {k: v for k, v in os.environ.items() if k != "HOTSPAN_OUT"}
    proc = subprocess.Popen([sys.executable, "-m", "hotspan", "collect", "--listen", "grpc://127.0.0.1:0",
                             "--out", str(out), "--duration", "600"], stdout=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    match = re.search(r"(grpc://127\.0\.0\.1:\d+)", line)
    if not match:
        proc.kill()
        raise SystemExit(f"the collector did not start: {line!r}")
    return proc, match.group(1)


def stop_collector(proc: subprocess.Popen) -> str:
    proc.terminate()
    out, _ = proc.communicate(timeout=120)
    return out.strip()


def measure_ingest(ranks: int, batches: int, batch_spans: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        collector, url = start_collector(out)
        senders = []
        try:
            senders = [subprocess.Popen([sys.executable, "-c", SENDER, url, str(r), str(batches), str(batch_spans)],
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
                       for r in range(ranks)]
            total = 0
            for p in senders:
                line = p.stdout.readline().split()
                if not line or line[0] != "ready":
                    raise SystemExit(f"a sender failed: {line}")
                total += int(line[1])
            t0 = time.perf_counter()
            for p in senders:
                p.stdin.write("go\n")
                p.stdin.flush()
            results = [p.stdout.readline().split() for p in senders]
            wall = time.perf_counter() - t0
            for p in senders:
                p.wait(timeout=60)
            summary = stop_collector(collector)
        finally:
            for p in [collector, *senders]:
                if p.poll() is None:
                    p.kill()
        delivered = sum(int(r[1]) for r in results)
        dropped = sum(int(r[2]) for r in results)
        written = hotspan.load(out).num_rows
    return {"ranks": ranks, "spans": total, "delivered": delivered, "dropped": dropped, "written": written,
            "wall_s": wall, "spans_per_s": delivered / wall, "collector": summary}


def _no_drain_hotspan() -> types.ModuleType:
    """hotspan, as bench_overhead sees it while the recorder streams: drain() is the recorder's.
    (A copy of the module's namespace: a module __getattr__ would cost microseconds per lookup.)"""
    proxy = types.ModuleType("hotspan")
    proxy.__dict__.update(hotspan.__dict__)
    proxy.drain = lambda: None
    return proxy


def measure_overhead(n: int, rounds: int, flush_interval: float) -> dict:
    import bench_overhead

    def ratios_of(best: dict) -> dict:
        import collections

        drain = collections.defaultdict(float)  # report()'s drain line is not ours: zeros, unprinted
        with contextlib.redirect_stdout(io.StringIO()):
            return bench_overhead.report(best, drain)

    hotspan.drain()
    plain = bench_overhead.measure(n, rounds)
    with tempfile.TemporaryDirectory() as tmp:
        collector, url = start_collector(Path(tmp) / "run")
        try:
            dropped_before = hotspan.dropped()
            bench_overhead.hotspan = _no_drain_hotspan()
            try:
                with hotspan.record(url, flush_interval=flush_interval, stop_timeout=120) as rec:
                    streaming = bench_overhead.measure(n, rounds)
            finally:
                bench_overhead.hotspan = hotspan
            core_dropped = hotspan.dropped() - dropped_before
            summary = stop_collector(collector)
        finally:
            if collector.poll() is None:
                collector.kill()
    return {
        "plain": {"ns_per_iter": plain, "ratios": ratios_of(plain)},
        "streaming": {"ns_per_iter": streaming, "ratios": ratios_of(streaming), "spans_delivered": rec.spans,
                      "dropped_by_client": rec.dropped, "dropped_by_core": core_dropped, "collector": summary},
        "targets": {"reused / floor": "<= 1.2", "literal / floor": "<= 1.4", "begin+end / floor": "<= 0.8",
                    "traced added / with added": "<= 0.4", "naive / reused": ">= 20",
                    "nvtx reused / hotspan reused": ">= 1.5"},
    }


def _ok(value: float, target: str | None) -> str:
    if not target:
        return ""
    op, goal = target.split()
    return "ok" if (value <= float(goal) if op == "<=" else value >= float(goal)) else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--batches", type=int, default=10, help="puts per rank")
    parser.add_argument("--batch-spans", type=int, default=100_000, help="spans per put")
    parser.add_argument("--n", type=int, default=1_000_000, help="overhead: iterations per case and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--flush-interval", type=float, default=0.2)
    parser.add_argument("--skip-overhead", action="store_true")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()

    print(f"python {sys.version.split()[0]}, hotspan {hotspan.__version__}, {os.cpu_count()} CPUs\n")
    ingest = measure_ingest(args.ranks, args.batches, args.batch_spans)
    print(f"collector ingest: {ingest['delivered']:,} spans from {ingest['ranks']} ranks in {ingest['wall_s']:.2f} s "
          f"= {ingest['spans_per_s'] / 1e6:.2f} M spans/s (written {ingest['written']:,}, dropped {ingest['dropped']})")
    print(f"  ({ingest['collector']})\n")
    figures = {"ingest": ingest}
    if not args.skip_overhead:
        overhead = measure_overhead(args.n, args.rounds, args.flush_interval)
        figures["overhead"] = overhead
        plain, streaming = overhead["plain"]["ratios"], overhead["streaming"]["ratios"]
        print(f"{'ratio':32s} {'alone':>8s} {'streaming':>10s}  target")
        for name in plain:
            target = overhead["targets"].get(name)
            value = streaming.get(name, float("nan"))
            print(f"{name:32s} {plain[name]:8.2f} {value:10.2f}  {target or '':8s} "
                  f"{_ok(plain[name], target):6s} {_ok(value, target)}")
        s = overhead["streaming"]
        print(f"\nwhile streaming: {s['spans_delivered']:,} spans delivered to the collector, "
              f"{s['dropped_by_core']:,} dropped by the core (memory cap: the recorder drains every "
              f"{args.flush_interval:g} s), {s['dropped_by_client']:,} by the client")
        print(f"ns per iteration, alone -> streaming:")
        for name, ns in overhead["plain"]["ns_per_iter"].items():
            print(f"  {name:42s} {ns:8.1f} -> {overhead['streaming']['ns_per_iter'][name]:8.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
