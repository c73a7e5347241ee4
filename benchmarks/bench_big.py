"""Analysis larger than memory: `hotspan stats` on a generated run of 200 M spans over 64 ranks.

    python benchmarks/bench_big.py [--spans 200000000] [--ranks 64] [--dir /tmp/hotspan-big]
                                   [--keep] [--check-spans 2000000] [--max-gib 2]
                                   [--repeats 3] [--memory-limit 1GB] [--no-duckdb]
                                   [--phases] [--serve] [--as-installed]

    # issue 23's cases, the runs generated once and reused (--keep):
    python benchmarks/bench_big.py --spans 20e6 --ranks 16 --dir big/20m --keep \
        --as-installed --phases --serve
    python benchmarks/bench_big.py --spans 200e6 --ranks 64 --dir big/200m --keep \
        --as-installed --repeats 1 --check-spans 0
    # issue 35's billion: generated on both cores with hotspan's own Parquet options, then
    # timed alone (DuckDB cannot answer it within 1 GB)
    nice python benchmarks/bench_big.py --spans 1e9 --ranks 256 --dir big/1b --keep \
        --jobs 2 --writer hotspan --generate-only
    python benchmarks/bench_big.py --dir big/1b --keep --as-installed --no-duckdb \
        --check-spans 0 --max-gib 1

1. Generates a run (a hive dataset, rank=R/part-<pid>-<token>-<n>.parquet, as
   hotspan.record("dir/") and the collector write it) straight with pyarrow, no recording:
   per rank a training loop (step > load / forward > layers > matmul, backward, allreduce,
   optimizer on the main thread; fetch / decode on a data-loader thread; now and then a
   checkpoint instant and a failed span), log-normal leaf durations, parents as long as
   their children plus gaps, ids base + k per rank as the recorder draws them.
2. Times `hotspan stats DIR --json` and DuckDB's own GROUP BY (count, sum, min, max,
   quantile_cont p50/p90/p99 by category, name) on the same files with the same memory
   limit, both as whole fresh commands (start-up counts), alternating, --repeats pairs:
   both times and their ratio (issue 23: at most 1.5x); and how many of DuckDB's
   quantile_cont values differ from the exact (numpy linear) percentiles hotspan gives.
   (hotspan reads the parts with pyarrow, analysis/_parquet_scan.py: at 20 M spans each
   group's durations are held, 4 bytes a span; at 200 M, past the 1 GB limit, the parts are
   read twice, the second time keeping only the durations of the buckets that hold the
   percentiles' order statistics. DuckDB answers neither 200 M query within 1 GB: its
   quantile_cont holds a group's values.)
   Then `hotspan stats DIR --json` once more, printing its elapsed time and peak memory
   (ru_maxrss of that child, from os.wait4), and asserts the peak is at most --max-gib.
   With --phases: `hotspan.phases(DIR)` and the plain `hotspan stats DIR` (its table) in
   fresh processes, each beside DuckDB's GROUP BY run right after it (issue 23: at most
   1.5x); and phases against DuckDB's own parent join over the same files (per rank, the
   top-level and second-level category of each span and whether its parent shares them: the
   time and steps of each), same memory limit.
   With --serve: `hotspan serve DIR` in a process of its own; once it listens, the time of
   GET /v1/traces, of the first GET /v1/traces/{id}/stats (issue 23: at most 2 s on the 20 M
   run) and of a second one.
   Last, the table: case, hotspan's time, DuckDB's, their ratio, hotspan's peak memory.
3. Checks that the streaming path's result equals the in-memory path's
   (hotspan.stats(hotspan.load(subset))) on a subset of the run of about --check-spans
   spans (the parts of the first ranks, linked into a directory of their own); phases too.
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

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# The step: (name, category, parent index or -1, thread, mean leaf ns, repeats). Parents'
# durations are their children's plus gaps; leaves draw log-normal durations.
LAYERS = 6
TEMPLATE: list[tuple[str, str | None, int, int, float]] = []


def _node(name, category, parent, thread, mean_ns):
    TEMPLATE.append((name, category, parent, thread, mean_ns))
    return len(TEMPLATE) - 1


_step = _node("step", "train", -1, 0, 0)
_node("load", "train/data", _step, 0, 40_000)
_forward = _node("forward", "train/compute", _step, 0, 0)
for _i in range(LAYERS):
    _layer = _node(f"layer{_i}", "train/compute", _forward, 0, 0)
    _node("matmul", "train/compute/gemm", _layer, 0, 300_000 * (1 + _i % 3))
    _node("activation", "train/compute", _layer, 0, 20_000)
_node("backward", "train/compute", _step, 0, 2_500_000)
_node("allreduce", "train/comms", _step, 0, 900_000)
_node("optimizer", "train/compute", _step, 0, 150_000)
_fetch = _node("fetch", "data", -1, 1, 0)
_node("read", "data/io", _fetch, 1, 500_000)
_node("decode", "data/cpu", _fetch, 1, 700_000)
_node("checkpoint", None, -1, 0, 0)  # an instant: no duration
T = len(TEMPLATE)
PARENT = np.array([p for _, _, p, _, _ in TEMPLATE])
ARG_BYTES = {"load": 1 << 20, "allreduce": 64 << 20, "read": 4 << 20}


def _rank_table(
    rank: int, steps: int, step0: int, rng: np.random.Generator, base: int, t0: int
) -> pa.Table:
    """``steps`` steps of one rank as a span table (rows in step order, template order)."""
    n_children = np.bincount(PARENT[PARENT >= 0], minlength=T)
    duration = np.zeros((steps, T), np.int64)
    for j in reversed(range(T)):  # children come after their parents in the template
        name, _, _, _, mean = TEMPLATE[j]
        if name == "checkpoint":
            continue
        if n_children[j] == 0:
            sigma = 0.35
            duration[:, j] = np.maximum(
                rng.lognormal(np.log(mean) - sigma**2 / 2, sigma, steps), 1
            ).astype(np.int64)
        kids = np.flatnonzero(PARENT == j)
        if len(kids):
            gaps = rng.integers(200, 3_000, (steps, len(kids) + 1)).sum(axis=1)
            duration[:, j] = duration[:, kids].sum(axis=1) + gaps
    # Self time: a parent's duration minus its children's (they run one after another).
    self_time = duration.copy()
    for j in range(T):
        kids = np.flatnonzero(PARENT == j)
        if len(kids):
            self_time[:, j] -= duration[:, kids].sum(axis=1)
    # Starts: the step after the previous one; a child after its earlier siblings.
    start = np.zeros((steps, T), np.int64)
    step_len = duration[:, _step] + rng.integers(1_000, 50_000, steps)
    start[:, _step] = t0 + np.concatenate(([0], np.cumsum(step_len)[:-1]))
    start[:, _fetch] = start[:, _step] + rng.integers(0, 100_000, steps)
    start[:, T - 1] = start[:, _step] + duration[:, _step]
    for j in range(T):
        kids = np.flatnonzero(PARENT == j)
        offset = start[:, j] + rng.integers(10, 150, steps)
        for k in kids:
            start[:, k] = offset
            offset = offset + duration[:, k] + rng.integers(10, 150, steps)
    # One checkpoint instant every 50 steps (the others are cut out below).
    keep = np.ones((steps, T), bool)
    keep[:, T - 1] = (np.arange(step0, step0 + steps) % 50) == 49
    ids = base + (np.arange(step0, step0 + steps)[:, None] * T + np.arange(T)[None, :])
    parent_ids = np.where(
        PARENT[None, :] >= 0,
        base + np.arange(step0, step0 + steps)[:, None] * T + PARENT[None, :],
        0,
    )
    depth = np.zeros(T, np.int32)
    for j in range(T):
        depth[j] = depth[PARENT[j]] + 1 if PARENT[j] >= 0 else 0
    flat = keep.ravel()
    n = int(flat.sum())
    name_codes = np.broadcast_to(np.arange(T, dtype=np.int32), (steps, T)).ravel()[flat]
    # Dictionaries of distinct values, as a drain makes them: one with repeats (matmul in
    # every layer) is written plain, not dictionary-encoded, by pyarrow's Parquet writer,
    # and every reader then decodes each row's string
    names, name_of = np.unique([t[0] for t in TEMPLATE], return_inverse=True)
    categories, category_of = np.unique([t[1] or "" for t in TEMPLATE], return_inverse=True)
    names, categories = pa.array(names.tolist()), pa.array(categories.tolist(), pa.string())
    no_category = np.array([t[1] is None for t in TEMPLATE])[name_codes]
    thread = np.array([t[3] for t in TEMPLATE])[name_codes]
    arg_of = np.array([ARG_BYTES.get(t[0], -1) for t in TEMPLATE], np.int64)[name_codes]
    error = rng.random(n) < 1e-4
    has_parent = PARENT[name_codes] >= 0
    s = start.ravel()[flat]
    d = duration.ravel()[flat]
    thread_names = pa.array(["MainThread", "loader"])
    columns = {
        "span_id": pa.array(ids.ravel()[flat].astype(np.uint64)),
        "parent_id": pa.array(parent_ids.ravel()[flat].astype(np.uint64), mask=~has_parent),
        "name": pa.DictionaryArray.from_arrays(
            pa.array(name_of.astype(np.int32)[name_codes]), names
        ),
        "category": pa.DictionaryArray.from_arrays(  # "" unused: null indices
            pa.array(category_of.astype(np.int32)[name_codes], mask=no_category), categories
        ),
        "start_ns": pa.array(s),
        "end_ns": pa.array(s + d),
        "duration_ns": pa.array(d),
        "depth": pa.array(depth[name_codes]),
        "thread_id": pa.array(np.where(thread == 0, 1000 + rank, 2000 + rank).astype(np.int64)),
        "thread_name": pa.DictionaryArray.from_arrays(
            pa.array(thread.astype(np.int32)), thread_names
        ),
        "pid": pa.array(np.full(n, 40_000 + rank, np.int64)),
        "rank": pa.array(np.full(n, rank, np.int32)),
        "arg": pa.array(arg_of, mask=arg_of < 0),
        "error": pa.array(error),
    }
    from hotspan._schema import SPAN_SCHEMA, TRACE_SCHEMA

    # Self time computed here from the template (children one after another), not by
    # with_self_ns' sort: generating 200 M spans stays quick; the two agree (same rule).
    columns["self_ns"] = pa.array(self_time.ravel()[flat])
    # no asyncio task: no span waits suspended (hotspan serve refuses parts without the column)
    columns["wait_ns"] = pa.array(np.zeros(n, np.int64))
    schema = TRACE_SCHEMA.append(SPAN_SCHEMA.field("self_ns")).append(SPAN_SCHEMA.field("wait_ns"))
    return pa.Table.from_pydict(columns, schema=schema)


def _write_rank(
    directory: Path,
    rank: int,
    steps_per_rank: int,
    steps_per_part: int,
    seed: int,
    writer: str,
) -> int:
    """One rank's parts (its own random stream: ranks are written in any order, on any
    number of processes, and give the same files); the spans written."""
    rng = np.random.default_rng([seed, rank])
    base = int(rng.integers(1, 1 << 20)) << 40  # as the recorder: a random base a process
    pid, token = 40_000 + rank, f"{0x65000000 + rank:08x}{rank:08x}"
    out = directory / f"rank={rank}"
    out.mkdir(parents=True, exist_ok=True)
    t0 = 1_700_000_000_000_000_000 + int(rng.integers(0, 1_000_000))
    if writer == "hotspan":  # the options hotspan's own Parquet files are written with
        from hotspan.formats._parquet import ParquetExporter

        options = dict(ParquetExporter.writer_options)
    else:  # pyarrow's defaults, zstd
        options = {"compression": "zstd"}
    written = 0
    for seq, step0 in enumerate(range(0, steps_per_rank, steps_per_part)):
        steps = min(steps_per_part, steps_per_rank - step0)
        table = _rank_table(rank, steps, step0, rng, base, t0)
        t0 = int(table.column("end_ns").to_numpy().max()) + 10_000
        pq.write_table(
            table,
            out / f"part-{pid}-{token}-{seq:06d}.parquet",
            row_group_size=1 << 20,
            **options,
        )
        written += table.num_rows
    return written


def generate(
    directory: Path,
    spans: int,
    ranks: int,
    part_spans: int = 1 << 20,
    seed: int = 0,
    jobs: int = 1,
    writer: str = "pyarrow",
) -> int:
    """Write a run of about ``spans`` spans over ``ranks`` ranks into ``directory``; return
    the number of spans written. ``jobs`` processes write the ranks; ``writer``: the Parquet
    options, ``pyarrow`` (its defaults, zstd) or ``hotspan`` (hotspan's own file options:
    dictionaries on the strings only, delta and byte-stream-split encodings; about 3x faster
    to write and smaller). Memory: one part at a time a process."""
    per_step = T - 1 + 1 / 50  # the checkpoint instant every 50 steps
    steps_per_rank = max(int(spans / ranks / per_step), 1)
    steps_per_part = max(int(part_spans / per_step), 50)
    args = [(directory, r, steps_per_rank, steps_per_part, seed, writer) for r in range(ranks)]
    if jobs <= 1:
        return sum(_write_rank(*a) for a in args)
    from multiprocessing import get_context

    with get_context("spawn").Pool(jobs) as pool:
        return sum(pool.starmap(_write_rank, args, chunksize=1))


def subset(directory: Path, target: Path, spans: int) -> int:
    """Link the parts of the first ranks, about ``spans`` spans, into ``target``."""
    shutil.rmtree(target, ignore_errors=True)
    total = 0
    for rank_dir in sorted(directory.glob("rank=*"), key=lambda p: int(p.name.split("=")[1])):
        if total >= spans:
            break
        (target / rank_dir.name).mkdir(parents=True)
        for part in sorted(rank_dir.glob("part-*.parquet")):
            os.symlink(part.resolve(), target / rank_dir.name / part.name)
            total += pq.ParquetFile(part).metadata.num_rows
    return total


def _reaped_timed(command: list[str], env: dict | None = None) -> tuple[str, float, float, float]:
    """Run ``command`` (a whole command: its start-up counts), once: (stdout, seconds, CPU seconds,
    peak RSS in GiB), the child reaped by os.wait4 itself, so the rusage is its own."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        child = subprocess.Popen(
            command, stdout=out, stderr=err, text=True, env={**os.environ, **(env or {})}
        )
        _, status, usage = os.wait4(child.pid, 0)
        elapsed = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if child.returncode:
            raise SystemExit(
                f"{' '.join(command[:4])}... failed ({child.returncode}): {err.read()}"
            )
        return out.read(), elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / (1 << 20)


def installed_copy(target: Path) -> dict[str, str]:
    """hotspan as a wheel installs it (the sources and the built extensions in one package
    directory), and the environment that imports it from there: a development checkout's
    editable install checks its CMake build at every import (about a second, more on a loaded
    machine), which a user's installed hotspan does not."""
    import hotspan

    source = Path(hotspan.__file__).parent
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target / "hotspan", ignore=shutil.ignore_patterns("__pycache__"))
    finder = next(
        (f for f in sys.meta_path if type(f).__module__.startswith("_editable_skbc")), None
    )
    # every compiled module the build installs (an editable install's finder knows them all:
    # a list written here missed hotspan._span_tree when it came)
    compiled = [
        m for m in getattr(finder, "known_wheel_files", {}) if m.startswith("hotspan.")
    ] or [
        "hotspan._native",
        "hotspan._span_tree",
        "hotspan.formats._chrome_codec",
        "hotspan.formats._perfetto_codec",
    ]
    for module in compiled:
        built = Path(__import__("importlib").util.find_spec(module).origin)
        relative = Path(*module.split(".")[1:-1], built.name)
        shutil.copy2(built, target / "hotspan" / relative)
    include = Path(hotspan.get_include())
    shutil.copytree(include, target / "hotspan" / "include", dirs_exist_ok=True)
    # Byte-compiled, as pip compiles a wheel's modules when it installs them: a run under
    # PYTHONDONTWRITEBYTECODE=1 would otherwise compile every module it imports, every time
    # (50-100 ms of a 1 s command here)
    import compileall

    compileall.compile_dir(target / "hotspan", quiet=1)
    build = os.environ.get("SKBUILD_EDITABLE_SKIP", "")
    if finder is not None:  # the editable finder stands aside for its own build directory only
        build = os.pathsep.join(p for p in (build, str(getattr(finder, "path", "") or "")) if p)
    return {
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(target), os.environ.get("PYTHONPATH", "")) if p
        ),
        "SKBUILD_EDITABLE_SKIP": build,
    }


#: The environment hotspan's commands run in (``--as-installed``: ``installed_copy``'s).
HOTSPAN_ENV: dict[str, str] = {}


#: DuckDB's own GROUP BY, the figure to be within 1.5x of (issue 23).
DUCKDB_QUERY = (
    "SELECT category, name, count(*), sum(duration_ns), min(duration_ns), max(duration_ns), "
    "quantile_cont(duration_ns, [0.5, 0.9, 0.99]) FROM read_parquet('{dir}/*/*.parquet', "
    "hive_partitioning=false) GROUP BY ALL"
)


def run_stats(directory: Path, memory_limit: str = "1GB") -> tuple[list[dict], float, float, float]:
    """``hotspan stats DIR --json`` in a fresh process, once: (rows, seconds, CPU seconds,
    peak RSS in GiB)."""
    out, elapsed, cpu, peak = _reaped_timed(
        [sys.executable, "-m", "hotspan", "stats", str(directory), "--json"],
        {"COLUMNS": "160", "HOTSPAN_MEMORY_LIMIT": memory_limit, **HOTSPAN_ENV},
    )
    rows = json.loads(out)
    for row in rows[:10]:
        print(
            f"  {row.get('category')!s:>16} {row.get('name')!s:<16} count {row.get('count'):>12,} "
            f"p50 {row.get('p50_ns')} ns  p99 {row.get('p99_ns')} ns"
        )
    return rows, elapsed, cpu, peak


def run_duckdb(directory: Path, memory_limit: str = "1GB") -> tuple[list, float, float, float]:
    """DuckDB's own GROUP BY (``DUCKDB_QUERY``) in a fresh process, same memory limit, once."""
    code = (
        "import duckdb, json, sys\n"
        f"con = duckdb.connect(config={{'memory_limit': {memory_limit!r}}})\n"
        "con.execute('SET enable_progress_bar = false')\n"  # (it draws on stdout)
        f"rows = con.sql({DUCKDB_QUERY.format(dir=directory)!r}).fetchall()\n"
        "print(json.dumps(rows))"
    )
    out, elapsed, cpu, peak = _reaped_timed([sys.executable, "-c", code])
    return json.loads(out), elapsed, cpu, peak


def _first_error(text: str) -> str:
    """The line of a failed command's output that names its error (DuckDB's "Out of Memory
    Error: ..."), else its end."""
    return next((line for line in text.splitlines() if "Error:" in line), text[-300:])


def compare_with_duckdb(
    run: Path, repeats: int, memory_limit: str
) -> tuple[float, float | None, float, float | None]:
    """Both whole commands, alternating, ``repeats`` times: their times, the ratio of the
    medians and each pair's ratio; then how many of DuckDB's quantile_cont values differ
    from hotspan's (numpy's linear method) at all. DuckDB's query may fail (its
    quantile_cont holds every value of a group: past the memory limit it stops): then
    hotspan's times alone, DuckDB's as None."""
    import statistics

    ours, theirs, ratios, peaks, duck_peaks = [], [], [], [], []
    first_rows, first_duck = None, None
    for i in range(repeats):
        rows, t_ours, cpu_ours, peak_ours = (
            run_stats(run, memory_limit) if i == 0 else _quiet(run, memory_limit)
        )
        ours.append(t_ours)
        peaks.append(peak_ours)
        try:
            duck, t_duck, cpu_duck, peak_duck = run_duckdb(run, memory_limit)
        except SystemExit as failed:
            print(
                f"  pair {i + 1}: hotspan stats {t_ours:.2f} s (CPU {cpu_ours:.1f} s, peak "
                f"{peak_ours:.2f} GiB); DuckDB's query failed: {_first_error(str(failed))}",
                flush=True,
            )
            if i == 0:
                first_rows = rows
            continue
        theirs.append(t_duck)
        ratios.append(t_ours / t_duck)
        duck_peaks.append(peak_duck)
        print(
            f"  pair {i + 1}: hotspan stats {t_ours:.2f} s (CPU {cpu_ours:.1f} s, peak {peak_ours:.2f} GiB), "
            f"DuckDB {t_duck:.2f} s (CPU {cpu_duck:.1f} s, peak {peak_duck:.2f} GiB): {t_ours / t_duck:.2f}x",
            flush=True,
        )
        if i == 0:
            first_rows, first_duck = rows, duck
    if not theirs:
        return statistics.median(ours), None, max(peaks), None
    print(
        f"hotspan stats --json vs DuckDB's GROUP BY (count/sum/min/max/quantile_cont by category, name), "
        f"whole commands, memory limit {memory_limit}: median {statistics.median(ours):.2f} s vs "
        f"{statistics.median(theirs):.2f} s: {statistics.median(ours) / statistics.median(theirs):.2f}x "
        f"(paired ratios {', '.join(f'{r:.2f}' for r in ratios)})",
        flush=True,
    )
    if first_rows is not None and first_duck is not None:
        ours_q = {
            (r["category"], r["name"]): (r["p50_ns"], r["p90_ns"], r["p99_ns"]) for r in first_rows
        }
        differ = sum(
            1 for c, n, *_rest, q in first_duck for a, b in zip(ours_q[(c, n)], q) if a != b
        )
        print(
            f"  DuckDB's quantile_cont differs from hotspan's exact (numpy linear) percentile in {differ} of "
            f"{3 * len(first_duck)} values",
            flush=True,
        )
    return statistics.median(ours), statistics.median(theirs), max(peaks), max(duck_peaks)


def _quiet(run: Path, memory_limit: str) -> tuple[list, float, float, float]:
    out, elapsed, cpu, peak = _reaped_timed(
        [sys.executable, "-m", "hotspan", "stats", str(run), "--json"],
        {"COLUMNS": "160", "HOTSPAN_MEMORY_LIMIT": memory_limit, **HOTSPAN_ENV},
    )
    return json.loads(out), elapsed, cpu, peak


#: DuckDB's own answer to phases: each span's parent by a join on its id, per rank the time
#: and steps of the spans whose parent is not in the same top-level (sub-)category.
DUCKDB_PHASES_QUERY = """
    WITH s AS (
        SELECT span_id, parent_id, rank, duration_ns AS d, split_part(category, '/', 1) AS top,
               split_part(category, '/', 1) || '/' || split_part(category, '/', 2) AS sub
        FROM read_parquet('{dir}/*/*.parquet', hive_partitioning=false))
    SELECT c.rank, c.top, c.sub, coalesce(p.top = c.top, FALSE), coalesce(p.sub = c.sub, FALSE),
           sum(c.d), count_if(c.d > 0)
    FROM s AS c LEFT JOIN s AS p ON p.span_id = c.parent_id GROUP BY ALL"""


def run_phases(directory: Path, memory_limit: str) -> tuple[int, float, float, float]:
    """``hotspan.phases(DIR)`` in a fresh process, once: (rows, seconds, CPU seconds, peak GiB)."""
    code = f"import sys, hotspan\nprint(hotspan.phases({str(directory)!r}).num_rows)"
    out, elapsed, cpu, peak = _reaped_timed(
        [sys.executable, "-c", code], {"HOTSPAN_MEMORY_LIMIT": memory_limit, **HOTSPAN_ENV}
    )
    return int(out.strip().splitlines()[-1]), elapsed, cpu, peak


def run_stats_table(directory: Path, memory_limit: str) -> tuple[str, float, float, float]:
    """``hotspan stats DIR`` (the table, as a user types it) in a fresh process, once:
    (output, seconds, CPU seconds, peak GiB)."""
    return _reaped_timed(
        [sys.executable, "-m", "hotspan", "stats", str(directory)],
        {"COLUMNS": "160", "HOTSPAN_MEMORY_LIMIT": memory_limit, **HOTSPAN_ENV},
    )


def duckdb_reference(directory: Path, memory_limit: str) -> tuple[float | None, float | None]:
    """DuckDB's GROUP BY (``DUCKDB_QUERY``, the figure of issue 23) once more, to pair with the
    command timed just before it: (seconds, peak GiB), or (None, None) where it fails."""
    try:
        _rows, elapsed, _cpu, peak = run_duckdb(directory, memory_limit)
    except SystemExit as failed:
        print(f"DuckDB's GROUP BY failed: {_first_error(str(failed))}", flush=True)
        return None, None
    return elapsed, peak


def run_duckdb_phases(directory: Path, memory_limit: str) -> tuple[int, float, float, float]:
    """``DUCKDB_PHASES_QUERY`` in a fresh process, same memory limit, once."""
    code = (
        "import duckdb\n"
        f"con = duckdb.connect(config={{'memory_limit': {memory_limit!r}}})\n"
        "con.execute('SET enable_progress_bar = false')\n"
        f"print(len(con.sql({DUCKDB_PHASES_QUERY.format(dir=directory)!r}).fetchall()))"
    )
    out, elapsed, cpu, peak = _reaped_timed([sys.executable, "-c", code])
    return int(out.strip()), elapsed, cpu, peak


def serve_first_stats(directory: Path, memory_limit: str, delay: float = 0) -> dict[str, float]:
    """``hotspan serve DIR`` in a process of its own: once it listens (and ``delay`` seconds
    later: the time a user takes to open the page), the seconds of GET /v1/traces, of the
    first GET /v1/traces/{id}/stats and of a second one."""
    import re
    import urllib.request

    server = subprocess.Popen(
        [sys.executable, "-m", "hotspan", "serve", str(directory), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HOTSPAN_MEMORY_LIMIT": memory_limit, **HOTSPAN_ENV},
    )
    try:
        started = time.perf_counter()
        line = server.stdout.readline() if server.stdout else ""
        match = re.search(r"(http://\S+/)", line)
        if not match:
            raise SystemExit(f"hotspan serve did not start: {line!r}")
        figures = {"start_s": time.perf_counter() - started}
        time.sleep(delay)
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # no proxy

        def get(path: str) -> tuple[float, dict]:
            t = time.perf_counter()
            with opener.open(match.group(1) + path.lstrip("/"), timeout=600) as response:
                body = json.loads(response.read())
            return time.perf_counter() - t, body

        figures["list_s"], listing = get("/v1/traces")
        (entry,) = listing["traces"]
        figures["first_stats_s"], _ = get(f"/v1/traces/{entry['id']}/stats")
        figures["second_stats_s"], _ = get(f"/v1/traces/{entry['id']}/stats")
        return figures
    finally:
        server.terminate()
        server.wait(30)


def check_subset(directory: Path) -> None:
    """The streaming path equals the in-memory path on ``directory``: stats by the default
    and by lane keys, and phases."""
    import hotspan
    from hotspan.analysis._streaming import canonical_rows

    table = hotspan.load(directory)
    for by in (("category", "name"), ("rank", "thread_name", "name")):
        streamed, in_memory = hotspan.stats(directory, by=by), hotspan.stats(table, by=by)
        assert streamed.schema == in_memory.schema, (streamed.schema, in_memory.schema)
        assert canonical_rows(streamed, by) == canonical_rows(in_memory, by), by
    assert hotspan.phases(directory).to_pylist() == hotspan.phases(table).to_pylist()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spans", type=float, default=200e6)
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/hotspan-big"))
    parser.add_argument(
        "--keep", action="store_true", help="reuse (and keep) an existing run in --dir"
    )
    parser.add_argument("--check-spans", type=float, default=2e6)
    parser.add_argument(
        "--jobs", type=int, default=1, help="processes generating the run (a rank at a time each)"
    )
    parser.add_argument(
        "--generate-only", action="store_true", help="generate the run (or reuse it) and stop"
    )
    parser.add_argument(
        "--writer",
        choices=("pyarrow", "hotspan"),
        default="pyarrow",
        help="the generated parts' Parquet options: pyarrow's defaults (zstd) or hotspan's own",
    )
    parser.add_argument("--max-gib", type=float, default=2.0)
    parser.add_argument(
        "--duckdb",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time DuckDB's own GROUP BY on the same files and print the ratio",
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="pairs of (hotspan, DuckDB) runs, alternating"
    )
    parser.add_argument(
        "--memory-limit", default="1GB", help="HOTSPAN_MEMORY_LIMIT and DuckDB's memory_limit"
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="also time hotspan.phases(DIR) against DuckDB's own parent join",
    )
    parser.add_argument(
        "--serve",
        action="store_true",
        help="also time hotspan serve's first /stats of the run",
    )
    parser.add_argument(
        "--as-installed",
        action="store_true",
        help="run hotspan from a copy laid out as a wheel installs it (not through a development "
        "checkout's editable install, which checks its build at every import)",
    )
    args = parser.parse_args()
    run = args.dir / "run"
    if not (args.keep and run.is_dir()):
        shutil.rmtree(run, ignore_errors=True)
        start = time.perf_counter()
        n = generate(run, int(args.spans), args.ranks, jobs=args.jobs, writer=args.writer)
        size = sum(p.stat().st_size for p in run.rglob("*.parquet"))
        print(
            f"generated {n:,} spans over {args.ranks} ranks in {time.perf_counter() - start:.1f} s "
            f"({size / 2**30:.2f} GiB of Parquet) -> {run}",
            flush=True,
        )
    else:
        n = sum(pq.ParquetFile(p).metadata.num_rows for p in run.rglob("*.parquet"))
        args.ranks = len(list(run.glob("rank=*"))) or args.ranks  # the run's, not --ranks'
        print(f"reusing {n:,} spans over {args.ranks} ranks in {run}", flush=True)
    if args.generate_only:
        return
    if args.as_installed:
        HOTSPAN_ENV.update(installed_copy(args.dir / "installed"))
        check = subprocess.run(
            [sys.executable, "-c", "import hotspan; print(hotspan.__file__)"],
            check=False,
            capture_output=True,
            text=True,
            env={**os.environ, **HOTSPAN_ENV},
        )
        print(f"hotspan as installed: {check.stdout.strip() or check.stderr.strip()}", flush=True)
    table: list[tuple[str, float, float | None, float, float | None]] = []
    label = f"{n / 1e6:.0f} M spans, {args.ranks} ranks"
    if args.duckdb:
        ours, theirs, peak, duck_peak = compare_with_duckdb(run, args.repeats, args.memory_limit)
        table.append((f"stats, {label}", ours, theirs, peak, duck_peak))
    else:
        rows, elapsed, cpu, peak = run_stats(run, args.memory_limit)
        print(
            f"hotspan stats --json: {n:,} spans, {len(rows)} groups in {elapsed:.1f} s "
            f"({n / elapsed / 1e6:.2f} M spans/s; {cpu:.1f} s of CPU on {os.cpu_count()} cores), "
            f"peak memory {peak:.2f} GiB",
            flush=True,
        )
        table.append((f"stats, {label}", elapsed, None, peak, None))
    if args.phases:
        # phases and the plain `hotspan stats DIR` (a table: on a streamed run it names
        # --phases instead of computing them), each beside DuckDB's GROUP BY, the figure
        rows_ours, t_ours, cpu_ours, peak = run_phases(run, args.memory_limit)
        t_ref, ref_peak = duckdb_reference(run, args.memory_limit)
        print(
            f"hotspan.phases(DIR) {t_ours:.2f} s (CPU {cpu_ours:.1f} s, {rows_ours} rows, peak "
            f"{peak:.2f} GiB) vs DuckDB's GROUP BY "
            + (f"{t_ref:.2f} s: {t_ours / t_ref:.2f}x" if t_ref else "-"),
            flush=True,
        )
        table.append((f"phases, {label} (vs DuckDB's GROUP BY)", t_ours, t_ref, peak, ref_peak))
        _out, t_table, cpu_table, table_peak = run_stats_table(run, args.memory_limit)
        t_ref, ref_peak = duckdb_reference(run, args.memory_limit)
        print(
            f"hotspan stats DIR (table) {t_table:.2f} s (CPU {cpu_table:.1f} s, peak "
            f"{table_peak:.2f} GiB) vs DuckDB's GROUP BY "
            + (f"{t_ref:.2f} s: {t_table / t_ref:.2f}x" if t_ref else "-"),
            flush=True,
        )
        table.append((f"stats table, {label}", t_table, t_ref, table_peak, ref_peak))
        try:
            rows_duck, t_duck, _cpu, duck_peak = run_duckdb_phases(run, args.memory_limit)
        except SystemExit as failed:
            print(f"DuckDB's parent join failed: {_first_error(str(failed))}", flush=True)
            table.append((f"phases, {label} (vs DuckDB's parent join)", t_ours, None, peak, None))
        else:
            print(
                f"hotspan.phases(DIR) {t_ours:.2f} s ({rows_ours} rows, peak {peak:.2f} GiB) vs "
                f"DuckDB's parent join {t_duck:.2f} s ({rows_duck} rows): {t_ours / t_duck:.2f}x",
                flush=True,
            )
            table.append(
                (f"phases, {label} (vs DuckDB's parent join)", t_ours, t_duck, peak, duck_peak)
            )
    served = serve_first_stats(run, args.memory_limit) if args.serve else None
    # The same, asked 10 s after the server starts (its statistics computed meanwhile).
    served_later = serve_first_stats(run, args.memory_limit, 10) if args.serve else None
    load = os.getloadavg()
    print(
        "\n| case | hotspan | DuckDB | ratio | hotspan peak RSS | DuckDB peak RSS |\n"
        "| --- | --- | --- | --- | --- | --- |",
        flush=True,
    )
    for case, ours_s, duck_s, peak, duck_peak in table:
        print(
            f"| {case} | {ours_s:.2f} s | "
            + (f"{duck_s:.2f} s | {ours_s / duck_s:.2f}x" if duck_s else "- | -")
            + f" | {peak:.2f} GiB | "
            + (f"{duck_peak:.2f} GiB |" if duck_peak is not None else "- |"),
            flush=True,
        )
    if served is not None and served_later is not None:
        print(
            f"\nhotspan serve on {label}: up in {served['start_s']:.2f} s; GET /v1/traces "
            f"{served['list_s']:.2f} s; first GET /v1/traces/ID/stats {served['first_stats_s']:.2f} s "
            f"(issue 23: at most 2 s); again {served['second_stats_s']:.3f} s; a fresh server "
            f"asked 10 s after it starts: list {served_later['list_s']:.2f} s, first /stats "
            f"{served_later['first_stats_s']:.3f} s",
            flush=True,
        )
    print(
        f"(load average at the end: {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; {os.cpu_count()} cores)"
    )
    for case, _ours, _duck, peak, _duck_peak in table:
        assert peak <= args.max_gib, f"{case}: peak memory {peak:.2f} GiB > {args.max_gib} GiB"
    if args.check_spans > 0:
        sub = args.dir / "subset"
        m = subset(run, sub, int(args.check_spans))
        start = time.perf_counter()
        check_subset(sub)
        print(
            f"subset of {m:,} spans: streaming == in-memory (stats, phases), checked in "
            f"{time.perf_counter() - start:.1f} s",
            flush=True,
        )
    if not args.keep:
        shutil.rmtree(args.dir, ignore_errors=True)


if __name__ == "__main__":
    main()
