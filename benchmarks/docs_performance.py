"""Writes the head of docs/performance.md from one run of the overhead benchmark, with the
machine named.

    python benchmarks/docs_performance.py                     # runs bench_overhead.py, writes the page
    python benchmarks/docs_performance.py --from out.json     # a run made before (bench_overhead --json)

The head holds the figures of that one run only (no hand-edited numbers), the machine it ran
on (CPU model, cores, memory, load average at the start, OS, Python), and the command, so
that anyone can make it again on their machine. Ratios are the result: absolute times wander
with the load, the ratios between cases measured in the same run hold.

Only the text between the page's two markers (:data:`BEGIN`, :data:`END`) is written; the
sections after them (statistics, the flusher, the codecs: each measured and written by
hand) stay as they are. A page without the markers is refused, not overwritten; a new file
(``-o``) gets the head alone.
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
#: The markers around the part of the page this script writes.
BEGIN = "<!-- written by benchmarks/docs_performance.py from one run: from here -->"
END = "<!-- written by benchmarks/docs_performance.py: to here; the rest is written by hand -->"


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
        "`benchmarks/docs_performance.py` (run it to write them again on your machine). Every",
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
    output = Path(args.output)
    try:
        page = splice(
            output.read_text(encoding="utf-8") if output.exists() else None,
            render(figures, host, command),
        )
    except ValueError as error:
        print(f"docs_performance.py: {output}: {error}", file=sys.stderr)
        return 2
    output.write_text(page, encoding="utf-8")
    print(f"wrote {args.output}")
    return 0


def splice(page: str | None, head: str) -> str:
    """``page`` with the text between its markers replaced by ``head`` (``None``: no page
    yet, the head alone); ``ValueError`` for a page without both markers in order."""
    block = f"{BEGIN}\n{head.rstrip()}\n\n{END}\n"
    if page is None:
        return block
    start, end = page.find(BEGIN), page.find(END)
    if start < 0 or end < start:
        raise ValueError(
            "no markers around the generated part; not overwriting the hand-written sections "
            f"(put {BEGIN!r} before it and {END!r} after it)"
        )
    rest = page[end + len(END) :]
    return page[:start] + block + rest.removeprefix("\n")


if __name__ == "__main__":
    sys.exit(main())
