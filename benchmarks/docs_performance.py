"""Writes docs/performance.md from one run of the overhead benchmark, with the machine named.

    python benchmarks/docs_performance.py                     # runs bench_overhead.py, writes the page
    python benchmarks/docs_performance.py --from out.json     # a run made before (bench_overhead --json)

The page holds the figures of that one run only (no hand-edited numbers), the machine it ran
on (CPU model, cores, memory, load average at the start, OS, Python), and the command, so
that anyone can make it again on their machine. Ratios are the result: absolute times wander
with the load, the ratios between cases measured in the same run hold.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent / "docs" / "performance.md"
RUN_ARGS = ["--n", "300000", "--rounds", "3", "--paired-rounds", "30"]


def machine(when: str = "at the start") -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = ""
    try:
        kib = int(
            next(
                line
                for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")
            ).split()[1]
        )
        memory = f"{kib / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "-"
    import hotspan

    return {
        "CPU": cpu,
        "cores": str(os.cpu_count()),
        "memory": memory,
        f"load average (1, 5, 15 min) {when}": load,
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "hotspan": hotspan.__version__,
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
    }


def render(figures: dict, host: dict[str, str], command: str) -> str:
    ns = figures["ns_per_iter"]
    floor = ns["floor: no-op C context manager"]
    paired = figures.get("paired_ratios", {})
    lines = [
        "# Performance",
        "",
        "The figures of **one run** of `benchmarks/bench_overhead.py`, written into this page by",
        "`benchmarks/docs_performance.py` (run it to make the page again on your machine). Every",
        "case runs the same `for` loop in the same run. Ratios are the result: absolute times",
        "wander with the machine's load, the ratios between cases measured side by side hold.",
        "The **floor** is a `with` on a C object whose `__enter__`/`__exit__` do nothing: what the",
        "interpreter itself charges for a `with` statement. Before Python 3.14 that includes two",
        "bound-method objects allocated and freed a pass, which a span avoids by binding its own",
        "`__enter__`/`__exit__` ([What a span costs](guides/span-cost.md)): a span can cost less.",
        "",
        "## The machine",
        "",
        "| | |",
        "| --- | --- |",
        *(f"| {k} | {v} |" for k, v in host.items()),
        f"| command | `{command}` |",
        "",
        "## Cost of one span",
        "",
        "| case | ns per iteration (best of) | × floor |",
        "| --- | ---: | ---: |",
        *(f"| {case} | {value:.1f} | {value / floor:.2f} |" for case, value in ns.items()),
        "",
        "## Ratios, two estimates",
        "",
        "**Best of**: interleaved rounds, each case's best. **Paired median**: each case run for a",
        "few milliseconds between two floor runs and divided by their mean, the median over the",
        "rounds; it holds still where best-of moves with the load.",
        "",
        "| ratio | best of | paired median |",
        "| --- | ---: | ---: |",
        *(
            f"| {name} | {value:.2f} | {paired[name]:.2f} |"
            if name in paired
            else f"| {name} | {value:.2f} | |"
            for name, value in figures["ratios"].items()
        ),
        "",
    ]
    drain = figures.get("drain")
    if drain:
        lines += [
            "## Drain",
            "",
            (
                f"{drain['spans']:,} spans drained into a `pyarrow.Table` at "
                f"{drain['drain_spans_per_s'] / 1e6:.1f} M spans/s (the first drain, on fresh memory: "
                f"{drain['drain_spans_per_s_first'] / 1e6:.1f} M spans/s); "
                f"{drain['bytes_per_drained_span_native']:.1f} bytes per span held natively until drained."
            ),
            "",
        ]
    flight = figures.get("flight")
    if flight:
        lines += [
            "## The flight file",
            "",
            ("Paired medians with the flight file off and on (child processes, alternating):"),
            "",
            "| ratio | off | on | on ÷ off |",
            "| --- | ---: | ---: | ---: |",
        ]
        lines += [
            f"| {name} | {off:.2f} | {flight['on'][name]:.2f} | {flight['on'][name] / off:.2f} |"
            for name, off in flight["off"].items()
        ]
        lines.append("")
    lines += [
        "## Other benchmarks",
        "",
        "Each prints its own figures; run them on the machine you care about:",
        "",
        "| script | measures |",
        "| --- | --- |",
        "| `benchmarks/bench_export.py` | export and load speed of every format, 1 M spans |",
        "| `benchmarks/bench_subscriber.py` | a subscriber's cost to the recording thread |",
        "| `benchmarks/bench_collector.py`, `bench_ingest.py` | streaming to collectors, ranks into one dataset |",
        "| `benchmarks/bench_big.py` | `hotspan stats` over 200 M spans in bounded memory |",
        "| `benchmarks/bench_serve.py` | `hotspan serve` on a 20 M-span run |",
        "| `benchmarks/bench_capi.py` | spans recorded from C through `hotspan.h` |",
        "| `benchmarks/bench_counter.py` | `hotspan.counter(name, value)` against a reused span, paired "
        "(2-vCPU VM, Python 3.11, load 6-10: 0.31× a span's cost, ~16 ns over the empty loop; "
        "target ≤ 1.5×) |",
        "| `benchmarks/bench_import.py` | what `import hotspan` adds to a program's start |",
        "| `benchmarks/gpu_check.py` | device spans against `torch.profiler` (a CUDA GPU) |",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--from", dest="source", help="a JSON written by bench_overhead.py --json")
    parser.add_argument("-o", "--output", default=str(PAGE))
    args = parser.parse_args()
    host = machine(
        "at the start" if not args.source else "when the page was written, right after the run"
    )
    command = "python benchmarks/bench_overhead.py " + " ".join(RUN_ARGS)
    if args.source:
        figures = json.loads(Path(args.source).read_text())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "overhead.json"
            subprocess.run(
                [sys.executable, str(HERE / "bench_overhead.py"), *RUN_ARGS, "--json", str(out)],
                check=True,
            )
            figures = json.loads(out.read_text())
    Path(args.output).write_text(render(figures, host, command), encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
