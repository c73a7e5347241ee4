"""Across ranks at scale (issue 31): `hotspan ranks` on a generated run of many ranks.

    python benchmarks/bench_ranks.py [--ranks 1024] [--steps 1000] [--layers 20]
                                     [--dir /tmp/hotspan-ranks] [--keep] [--max-gib 2]
                                     [--max-s 30] [--spark]

1. Generates a run with hotspan.testing.many_ranks (49 spans a rank and step with
   --layers 20: 1,024 ranks x 1,000 steps is about 50 M spans), two ranks made slow
   (rank 7 in data.fetch, 812 of 1,000 steps' worth; rank R/2 in optimizer, less), each
   host's clock off by up to 0.5 ms, written as a run directory (one part per rank).
2. In fresh processes, alternately: the floor, one plain read of every column the
   analysis reads, through its reader (rank_source.py: a part at a time, each batch to
   numpy), and `hotspan.analysis.ranks.ranks_summary(DIR)`
   (matching, clocks, blame, the test, the reasons, the critical path: three passes over
   the parts). Prints both wall times, their ratio, the analysis's peak memory (ru_maxrss
   from os.wait4) and the load average; checks that exactly the injected ranks are named,
   and that it took at most --max-s seconds of CPU (the wall time on a machine shared with
   others is printed beside it, with the load) and --max-gib of memory.
3. With --spark: the same on Spark local (``engine=`` a local[2] session in a fresh process):
   the JVM's start and the analysis timed apart, the driver's peak memory (the JVM's heap
   is capped by spark.driver.memory, 2g here), and the answer checked equal to the
   streamed one.

Run it under `flock /tmp/hotspan-bench.lock` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

SCAN = """
import sys
from hotspan.analysis.rank_source import COLUMNS, RankSource
n = 0
for table in RankSource(sys.argv[1]).batches(COLUMNS):
    for column in table.columns:
        column.to_numpy()
    n += table.num_rows
print(n)
"""

ANALYSE = """
import json, sys
from hotspan.analysis.ranks import ranks_summary
answer = ranks_summary(sys.argv[1])
print(json.dumps({"named": [r["rank"] for r in answer["stragglers"] if r["straggler"]],
                  "reasons": [r["reason"] for r in answer["stragglers"] if r["straggler"]],
                  "instances": answer["instances"], "steps": answer["steps"],
                  "critical_path": answer["critical_path"][:3]}))
"""


SPARK = """
import json, sys, time
started = time.perf_counter()
from pyspark.sql import SparkSession
spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false").config("spark.driver.memory", "2g")
         .config("spark.sql.shuffle.partitions", "8").getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
jvm = time.perf_counter() - started
from hotspan.analysis.ranks import ranks_summary
started = time.perf_counter()
answer = ranks_summary(sys.argv[1], engine=spark)
seconds = time.perf_counter() - started
print(json.dumps({"jvm_s": jvm, "analysis_s": seconds, "answer": answer}))
"""

FULL = """
import json, sys
from hotspan.analysis.ranks import ranks_summary
print(json.dumps({"answer": ranks_summary(sys.argv[1])}))
"""


def timed(code: str, directory: Path) -> tuple[float, float, str, float]:
    """Wall seconds, peak GiB, stdout and CPU seconds of ``python -c code directory``, a
    fresh process."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", code, str(directory)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed: {code[:40]!r} (status {status})")
    return seconds, usage.ru_maxrss / (1 << 20), out, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--layers", type=int, default=20)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/hotspan-ranks"))
    parser.add_argument("--keep", action="store_true", help="reuse / keep the generated run")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--max-gib", type=float, default=2.0)
    parser.add_argument("--max-s", type=float, default=30.0, help="CPU seconds of the analysis")
    parser.add_argument("--spark", action="store_true", help="also on Spark local")
    args = parser.parse_args()

    from hotspan.testing import Straggler, many_ranks

    injected = [
        Straggler(7, "data.fetch", 30_000_000, 0.812),
        Straggler(args.ranks // 2, "optimizer", 8_000_000, 0.3),
    ]
    spans = args.ranks * args.steps * (8 + 2 * args.layers)
    marker = args.dir / ".generated.json"
    wanted = {"ranks": args.ranks, "steps": args.steps, "layers": args.layers}
    if not (args.keep and marker.exists() and json.loads(marker.read_text()) == wanted):
        shutil.rmtree(args.dir, ignore_errors=True)
        started = time.perf_counter()
        many_ranks(args.ranks, args.steps, injected, layers=args.layers, seed=31).write(args.dir)
        marker.write_text(json.dumps(wanted))
        print(f"generated {spans:,} spans in {time.perf_counter() - started:.1f} s")
    size = sum(p.stat().st_size for p in args.dir.glob("*.parquet"))
    print(
        f"{args.ranks} ranks x {args.steps} steps, {spans:,} spans, {size / (1 << 30):.2f} GiB "
        f"of Parquet; load {open('/proc/loadavg').read().split()[:3]}"
    )
    scans, analyses = [], []
    for _ in range(args.repeats):
        scans.append(timed(SCAN, args.dir))
        analyses.append(timed(ANALYSE, args.dir))
    scan = min(scans, key=lambda a: a[0])
    best = min(analyses, key=lambda a: a[0])
    answer = json.loads(best[2])
    print(
        f"plain scan of the columns: {scan[0]:.1f} s wall, {scan[3]:.1f} s CPU (peak {scan[1]:.2f} GiB)"
    )
    print(
        f"ranks_summary:             {best[0]:.1f} s wall, {best[3]:.1f} s CPU (peak {best[1]:.2f} GiB); "
        f"ratio {best[0] / scan[0]:.2f} wall, {best[3] / scan[3]:.2f} CPU"
    )
    print(f"load after: {open('/proc/loadavg').read().split()[:3]}")
    print(f"named {answer['named']}: " + "; ".join(answer["reasons"]))
    print(
        f"{answer['instances']:,} instances, {answer['steps']:,} steps; critical path {answer['critical_path']}"
    )
    assert sorted(answer["named"]) == sorted(s.rank for s in injected), answer["named"]
    assert best[1] <= args.max_gib, f"peak {best[1]:.2f} GiB over {args.max_gib}"
    assert best[3] <= args.max_s, f"{best[3]:.1f} s of CPU, over {args.max_s}"
    if args.spark:
        streamed = json.loads(timed(FULL, args.dir)[2])["answer"]
        print(f"load before Spark: {open('/proc/loadavg').read().split()[:3]}")
        wall, peak, out, cpu = timed(SPARK, args.dir)
        spark = json.loads(out)
        print(
            f"Spark local[2]: JVM start {spark['jvm_s']:.1f} s, ranks_summary "
            f"{spark['analysis_s']:.1f} s (process {wall:.1f} s wall, driver {cpu:.1f} s CPU, "
            f"driver peak {peak:.2f} GiB; JVM heap capped at 2g); "
            f"load after {open('/proc/loadavg').read().split()[:3]}"
        )
        assert spark["answer"] == streamed, "Spark's answer differs from the streamed one"
        print("Spark's answer equals the streamed one")
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
