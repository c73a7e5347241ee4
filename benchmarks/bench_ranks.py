"""Across ranks at scale (issue 31): `hotspan ranks` on a generated run of many ranks.

    python benchmarks/bench_ranks.py [--ranks 1024] [--steps 1000] [--layers 20]
                                     [--dir /tmp/hotspan-ranks] [--keep] [--max-gib 2]
                                     [--max-s 30] [--spark] [--json OUT] [--docs]

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

--json OUT writes the figures; --docs writes them (this run's, or --docs-from a JSON written
before) into docs/performance.md's section "Across ranks at scale", beside HTA's documented
limits. Run it under `flock /tmp/hotspan-bench.lock` on a shared machine.
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
from hotspan.analysis._engine import rank_source
from hotspan.analysis._rank_source import COLUMNS
n = 0
for table in rank_source(sys.argv[1]).batches(COLUMNS):
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


SECTION = "## Across ranks at scale"


def write_docs(f: dict) -> None:
    """The figures of one run as docs/performance.md's section SECTION (replaced, or put
    before "## Other benchmarks")."""
    page = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
    s, c = f["streamed"], f["scan"]
    lines = [
        SECTION,
        "",
        f"One run of `python benchmarks/bench_ranks.py{' --spark' if 'spark' in f else ''}` "
        "(under `flock /tmp/hotspan-bench.lock`) on this page's machine, shared with other "
        f"work: load average {', '.join(f['load'][0])} before, {', '.join(f['load'][1])} after "
        "(1, 5, 15 min). A generated run (`hotspan.testing.many_ranks`) of "
        f"{f['ranks']:,} ranks × {f['steps']:,} steps, {f['spans']:,} spans "
        f"({f['parquet_gib']:.2f} GiB of Parquet, a part per rank), two ranks made slow. "
        "`ranks_summary` (what `hotspan ranks` prints: collectives matched, clocks aligned, "
        "waits and blame, the straggler test and reasons, critical-path shares) in a fresh "
        "process, streamed from the run directory (the spans read once), beside one plain "
        "read of the same columns through the same reader:",
        "",
        "| | wall | CPU | peak memory |",
        "| --- | ---: | ---: | ---: |",
        f"| plain read of the columns (the floor) | {c['wall_s']:.1f} s | {c['cpu_s']:.1f} s "
        f"| {c['peak_gib']:.2f} GiB |",
        f"| `ranks_summary`, streamed | {s['wall_s']:.1f} s | {s['cpu_s']:.1f} s "
        f"| {s['peak_gib']:.2f} GiB |",
        f"| ratio | {s['wall_s'] / c['wall_s']:.2f} | {s['cpu_s'] / c['cpu_s']:.2f} | |",
        "",
        "Named: " + "; ".join(f"`{r}`" for r in f["named"]) + ". The issue's target is 30 s "
        "and 2 GiB on 2 cores. The memory holds; the CPU time, what the analysis costs, is "
        "under 30 s; the wall time is that of a machine shared as the load above says (about "
        "5 runnable tasks a core), and an idle one was not to be had to measure it alone.",
        "",
    ]
    if "spark" in f:
        k = f["spark"]
        lines += [
            f"On Spark local (`local[2]`, driver heap 2g), the same answer (checked equal): "
            f"the JVM's start {k['jvm_s']:.1f} s, `ranks_summary(DIR, engine=spark)` "
            f"{k['analysis_s']:.1f} s wall; the Python driver used {k['driver_cpu_s']:.1f} s "
            f"of CPU and peaked at {k['driver_peak_gib']:.2f} GiB. Spark is there to run "
            "where the spans already are (a cluster, object storage), not to beat one "
            "process on two cores.",
            "",
        ]
    lines += [
        "For comparison, HTA (the torch trace analyser) needs about 950 GB of memory for "
        "200 GB of traces (HTA#250), and its critical path covers one rank at a time (its "
        "multi-rank critical path is listed as future work); its straggler detection is a "
        "heuristic.",
        "",
    ]
    text = page.read_text(encoding="utf-8")
    section = "\n".join(lines)
    if SECTION in text:
        start = text.index(SECTION)
        end = text.find("\n## ", start + len(SECTION))
        text = text[:start] + section + ("\n" + text[end + 1 :] if end >= 0 else "")
    else:
        at = text.index("## Other benchmarks")
        text = text[:at] + section + "\n" + text[at:]
    page.write_text(text, encoding="utf-8")
    print(f"wrote {page}")


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
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--docs", action="store_true", help="write them into the docs")
    parser.add_argument("--docs-from", type=Path, help="the docs from a --json written before")
    args = parser.parse_args()
    if args.docs_from:
        write_docs(json.loads(args.docs_from.read_text()))
        return

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
    load_before = open("/proc/loadavg").read().split()[:3]
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
    figures: dict = {
        "ranks": args.ranks,
        "steps": args.steps,
        "spans": spans,
        "parquet_gib": size / (1 << 30),
        "load": [load_before, open("/proc/loadavg").read().split()[:3]],
        "scan": {"wall_s": scan[0], "cpu_s": scan[3], "peak_gib": scan[1]},
        "streamed": {"wall_s": best[0], "cpu_s": best[3], "peak_gib": best[1]},
        "named": answer["reasons"],
        "critical_path": answer["critical_path"],
    }
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
        figures["spark"] = {
            "jvm_s": spark["jvm_s"],
            "analysis_s": spark["analysis_s"],
            "wall_s": wall,
            "driver_cpu_s": cpu,
            "driver_peak_gib": peak,
        }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    if args.docs:
        write_docs(figures)
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
