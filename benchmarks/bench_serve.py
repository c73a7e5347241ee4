"""``hotspan serve`` on a large run: the time of GET /v1/traces and of
GET /v1/traces/{id}/stats, and the server's peak memory.

    python benchmarks/bench_serve.py [--spans 20000000] [--ranks 4] [--part-spans 1000000] [--dir DIR]
    python benchmarks/bench_serve.py --runs 5000   # the run list of a directory of many runs

The run is generated straight to a dataset directory (rank=R/part-*.parquet, as a
collector writes it), a million spans a part, never recorded nor held whole: steps of a
training loop per rank (step > forward, backward, allreduce with a byte count), with
durations drawn from log-normal distributions. Then ``hotspan serve`` starts in a process
of its own on a free port; its peak resident memory is read from /proc (VmHWM) once the
requests are answered. The target (issue 15): /stats of a 20 M-span run in at most 5 s,
the server at most 1.5 GiB.

With ``--runs N``: a directory of N small runs (a dataset directory each, one part of 200
spans), served; the time of the list (``GET /v1/traces`` and the page ``/``) just after
the server starts, and again once every run is summarised. The target (issue 33): 5,000
runs listed in under 1 s.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

NAMES = ("step", "forward", "backward", "allreduce")
CATEGORIES = ("train", "train/compute", "train/compute", "train/comms")


def part_table(
    rank: int, first_step: int, steps: int, rng: np.random.Generator, t0: int
) -> pa.Table:
    """``steps`` steps of rank ``rank`` (4 spans each), as the span table's schema has them."""
    from hotspan._schema import SPAN_SCHEMA

    fwd = rng.lognormal(np.log(3e6), 0.2, steps).astype(np.int64)
    bwd = rng.lognormal(np.log(6e6), 0.2, steps).astype(np.int64)
    comm = rng.lognormal(np.log(2e6), 0.5, steps).astype(np.int64)
    step = fwd + bwd + comm + 1000
    step_start = t0 + np.cumsum(np.concatenate(([0], step[:-1] + 500))) + first_step * 12_000_000
    starts = np.stack(
        [step_start, step_start + 100, step_start + 200 + fwd, step_start + 300 + fwd + bwd], axis=1
    )
    durations = np.stack([step, fwd, bwd, comm], axis=1)
    n = steps * 4
    base = (rank << 40) + first_step * 4 + 1
    span_id = (base + np.arange(n)).astype(np.uint64)
    step_id = span_id.reshape(steps, 4)[:, 0]
    parent = np.repeat(step_id, 4)
    parent_valid = np.tile([False, True, True, True], steps)
    code = np.tile(np.arange(4, dtype=np.int32), steps)
    arg_valid = code == 3
    columns = {
        "span_id": pa.array(span_id, pa.uint64()),
        "parent_id": pa.array(parent, pa.uint64(), mask=~parent_valid),
        "name": pa.DictionaryArray.from_arrays(pa.array(code), pa.array(NAMES)),
        "category": pa.DictionaryArray.from_arrays(
            pa.array(np.array([0, 1, 1, 2], np.int32)[code]),
            pa.array(["train", "train/compute", "train/comms"]),
        ),
        "start_ns": pa.array(starts.reshape(-1)),
        "end_ns": pa.array((starts + durations).reshape(-1)),
        "duration_ns": pa.array(durations.reshape(-1)),
        "depth": pa.array(np.where(parent_valid, 1, 0).astype(np.int32)),
        "thread_id": pa.array(np.full(n, 1000 + rank, np.int64)),
        "thread_name": pa.DictionaryArray.from_arrays(
            pa.array(np.zeros(n, np.int32)), pa.array(["MainThread"])
        ),
        "pid": pa.array(np.full(n, 1000 + rank, np.int64)),
        "rank": pa.array(np.full(n, rank, np.int32)),
        "arg": pa.array(np.full(n, 1 << 22, np.int64), mask=~arg_valid),
        "error": pa.array(np.zeros(n, np.bool_)),
    }
    return pa.Table.from_arrays(
        [columns[f.name].cast(f.type) for f in SPAN_SCHEMA], schema=SPAN_SCHEMA
    )


def generate(directory: Path, spans: int, ranks: int, part_spans: int) -> int:
    from hotspan.formats.dataset import write_part

    rng = np.random.default_rng(0)
    t0 = time.time_ns()
    steps_per_rank = spans // 4 // ranks
    per_part = max(part_spans // 4, 1)
    written = 0
    for rank in range(ranks):
        seq = 0
        for first in range(0, steps_per_rank, per_part):
            steps = min(per_part, steps_per_rank - first)
            table = part_table(rank, first, steps, rng, t0)
            write_part(table, directory, rank=rank, pid=1000 + rank, seq=seq)
            written += table.num_rows
            seq += 1
    return written


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def start_server(root: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "hotspan", "serve", str(root), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    match = re.search(r"(http://\S+/)", line)
    if not match:
        proc.terminate()
        raise SystemExit(f"server did not start: {line!r} {proc.stderr.read()}")
    return proc, match.group(1)


def many_runs(count: int, directory: str | None) -> int:
    """The run list of a directory of ``count`` runs: cold (just started) and warm."""
    import shutil

    import httpx

    import hotspan
    from hotspan.formats.dataset import write_part

    with tempfile.TemporaryDirectory(prefix="bench-serve-runs-") as tmp:
        root = Path(directory or tmp) / "runs"
        for _ in range(50):
            with hotspan.span("step", "train"):
                with hotspan.span("forward", "compute"):
                    pass
        write_part(hotspan.drain(), root / "r00000", rank=0, pid=1000, seq=0)
        for k in range(1, count):
            shutil.copytree(root / "r00000", root / f"r{k:05d}")
        proc, url = start_server(root)
        figures: dict[str, float | int] = {"runs": count}
        try:
            with httpx.Client(base_url=url, timeout=600, trust_env=False) as client:
                t = time.perf_counter()
                traces = client.get("/v1/traces").json()["traces"]
                figures["list_first_s"] = time.perf_counter() - t
                figures["listed_first"] = len(traces)
                figures["pending_first"] = sum(1 for e in traces if e["pending"])
                t = time.perf_counter()
                page = client.get("/")
                figures["page_first_s"] = time.perf_counter() - t
                assert page.status_code == 200
                t = time.perf_counter()
                while any(e["pending"] or e["spans"] is None for e in traces):
                    time.sleep(0.2)
                    traces = client.get("/v1/traces").json()["traces"]
                figures["all_summarised_after_s"] = time.perf_counter() - t
                for label, path in (("list_s", "/v1/traces"), ("page_s", "/")):
                    times = []
                    for _ in range(3):
                        t = time.perf_counter()
                        response = client.get(path)
                        times.append(time.perf_counter() - t)
                        assert response.status_code == 200
                    figures[label] = sorted(times)[1]
                assert len(client.get("/v1/traces").json()["traces"]) == count
        finally:
            proc.terminate()
            proc.wait(30)
    print(json.dumps({k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}))
    print(
        f"{count:,} runs: listed in {figures['list_first_s']:.2f} s just after the start "
        f"({figures['pending_first']:,} still being read), {figures['list_s']:.2f} s once all "
        f"are summarised; the page {figures['page_s']:.2f} s (target: under 1 s)"
    )
    return 0


def main() -> int:
    import httpx

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=20_000_000)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--part-spans", type=int, default=1_000_000)
    parser.add_argument("--dir", help="where to write the run (default: a temporary directory)")
    parser.add_argument("--runs", type=int, help="instead: the list of a directory of RUNS runs")
    args = parser.parse_args()
    if args.runs:
        return many_runs(args.runs, args.dir)

    with tempfile.TemporaryDirectory(prefix="bench-serve-") as tmp:
        root = Path(args.dir or tmp)
        run = root / "big"
        started = time.perf_counter()
        spans = generate(run, args.spans, args.ranks, args.part_spans)
        print(
            f"generated {spans:,} spans in {time.perf_counter() - started:.1f} s -> {run}",
            flush=True,
        )

        proc = subprocess.Popen(
            [sys.executable, "-m", "hotspan", "serve", str(root), "--port", "0"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            line = proc.stdout.readline()
            match = re.search(r"(http://\S+/)", line)
            if not match:
                print(f"server did not start: {line!r} {proc.stderr.read()}", file=sys.stderr)
                return 1
            idle = peak_rss(proc.pid)
            figures: dict[str, float | int] = {"spans": spans, "server_rss_at_start": idle}
            with httpx.Client(base_url=match.group(1), timeout=600, trust_env=False) as client:
                t = time.perf_counter()
                traces = client.get("/v1/traces").json()["traces"]
                figures["list_s"] = time.perf_counter() - t
                (entry,) = traces
                assert entry["spans"] == spans, entry
                for label, path in (
                    ("stats_s", f"/v1/traces/{entry['id']}/stats"),
                    ("stats_by_rank_s", f"/v1/traces/{entry['id']}/stats?by=rank,name"),
                    (
                        "spans_page_s",
                        f"/v1/traces/{entry['id']}/spans?offset={spans // 2}&limit=1000",
                    ),
                    (
                        "spans_filtered_s",
                        f"/v1/traces/{entry['id']}/spans?name=allreduce&min_ns=8000000",
                    ),
                ):
                    t = time.perf_counter()
                    response = client.get(path)
                    figures[label] = time.perf_counter() - t
                    assert response.status_code == 200, response.text
                t = time.perf_counter()
                client.get(f"/v1/traces/{entry['id']}/stats")
                figures["stats_again_s"] = time.perf_counter() - t
            figures["server_peak_rss"] = peak_rss(proc.pid)
        finally:
            proc.terminate()
            proc.wait(30)
    gib = figures["server_peak_rss"] / 2**30
    print(
        json.dumps(
            {k: round(v, 3) if isinstance(v, float) else v for k, v in figures.items()}, indent=1
        )
    )
    print(
        f"/stats of {spans:,} spans: {figures['stats_s']:.2f} s (target <= 5 s); server peak RSS {gib:.2f} GiB "
        f"(target <= 1.5 GiB)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
