"""Export and load speed of every format, against what a typical Python exporter does.

    python benchmarks/bench_export.py [--spans 1000000] [--threads 8] [--repeat 1] [--no-reference]

Builds a realistic synthetic span table (training steps on 8 threads: nested forward /
backward / allreduce / data loading spans, a few names and categories, args on some,
rare errors, instants; dictionary-encoded strings as ``drain()`` makes them; rows in
drain order, i.e. per thread in end order), then times per format ``export`` and
``load`` (best of --repeat), and as the reference the same spans serialised the way a
typical Python exporter does: ``orjson.dumps(table.to_pylist())`` (both steps timed
together). Prints one table with throughputs and ratios, then the targets.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

# The installed package (pip install -e . or a wheel): what users run, not src/ by path.
import hotspan.formats as hotspan_export  # noqa: E402
from hotspan._schema import META_HOST, META_START, META_VERSION, TRACE_SCHEMA  # noqa: E402
from hotspan._selftime import with_self_ns  # noqa: E402
from hotspan.formats._chrome_json import WRITE_BLOCK  # noqa: E402  (the floor's blocks)

# One training step: (name, category, depth, offset, duration, arg kind) in ticks of a
# step scaled per step; children nest inside their parent by construction.
_STEP = [
    ("step", "train", 0, 0, 1000, None),
    ("load_batch", "io", 1, 0, 120, "items"),
    ("decode", None, 2, 5, 60, None),
    ("collate", None, 2, 70, 45, None),
    ("forward", "compute", 1, 125, 300, None),
    # each layer followed by its own matmul: a span's parent is the nearest row above it
    # one level up (listing the matmuls after every layer gave them all the last layer)
    *[
        span
        for i in range(8)
        for span in (
            (f"layer{i}", None, 2, 130 + 36 * i, 34, None),
            ("matmul", "kernel", 3, 132 + 36 * i, 20, None),
        )
    ],
    ("backward", "compute", 1, 430, 420, None),
    *[
        span
        for i in range(8)
        for span in (
            (f"layer{i}.grad", None, 2, 435 + 50 * i, 48, None),
            ("matmul", "kernel", 3, 437 + 50 * i, 30, None),
        )
    ],
    ("allreduce", "sync/comms", 1, 855, 130, "bytes"),
    ("checkpoint", None, 2, 985, 0, None),  # an instant at the allreduce's end
    ("optimizer", "compute", 1, 986, 14, None),
    ("lr_mark", None, 1, 1000, 0, None),  # an instant at the step's last tick
]


def _step_shape():
    """One step's columns: names and category paths (sorted, and each row's code), depth,
    offset and duration in ticks, and each row's parent (its row in the step, -1: none)."""
    per_step = len(_STEP)
    names = sorted({s[0] for s in _STEP})
    name_code = np.array([names.index(s[0]) for s in _STEP], np.int32)
    # Category paths: a span without a category inherits its parent's path.
    paths, stack = [], []
    for _name, category, depth, *_ in _STEP:
        del stack[depth:]
        parent_path = stack[-1] if stack else None
        path = "/".join(p for p in (parent_path, category) if p) or None
        paths.append(path)
        stack.append(path)
    categories = sorted({p for p in paths if p})
    category_code = np.array([categories.index(p) if p else -1 for p in paths], np.int32)
    depth = np.array([s[2] for s in _STEP], np.int32)
    offset = np.array([s[3] for s in _STEP], np.int64)
    duration = np.array([s[4] for s in _STEP], np.int64)
    parent_index = np.full(per_step, -1)
    for i in range(per_step):
        for j in range(i - 1, -1, -1):
            if depth[j] == depth[i] - 1:
                parent_index[i] = j
                break
    return names, name_code, categories, category_code, depth, offset, duration, parent_index


def synthetic_table(n_spans: int, n_threads: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    per_step = len(_STEP)
    steps = -(-n_spans // (per_step * n_threads))
    names, name_code, categories, category_code, depth, offset, duration, parent_index = (
        _step_shape()
    )

    tables = []
    base = 1_760_000_000_000_000_000
    next_id = 1
    for thread in range(n_threads):
        scale = rng.integers(900, 1400, steps)  # ns per tick: each step its own speed
        gap = rng.integers(0, 5000, steps)
        step_start = base + np.cumsum(np.r_[0, (1000 * scale + gap)[:-1]]) + thread * 777
        start = (step_start[:, None] + offset[None, :] * scale[:, None]).ravel()
        dur = (duration[None, :] * scale[:, None]).ravel()
        ids = next_id + np.arange(steps * per_step, dtype=np.int64)
        next_id += steps * per_step
        parent = np.where(
            parent_index[None, :] >= 0,
            ids.reshape(steps, per_step)[:, np.maximum(parent_index, 0)],
            -1,
        ).ravel()
        kinds = np.tile([s[5] for s in _STEP], steps)
        arg = np.where(
            kinds == "bytes",
            rng.integers(1 << 20, 1 << 28, len(kinds)),
            np.where(kinds == "items", 256, 0),
        )
        tables.append(
            {
                "span_id": ids,
                "parent_id": parent,
                "name": np.tile(name_code, steps),
                "category": np.tile(category_code, steps),
                "start_ns": start,
                "duration_ns": dur,
                "depth": np.tile(depth, steps),
                "thread_id": np.full(len(ids), 70000 + thread),
                "arg": arg,
                "has_arg": kinds != None,  # noqa: E711
                "error": (rng.random(len(ids)) < 0.001) & (dur > 0),
            }
        )
    columns = {key: np.concatenate([t[key] for t in tables]) for key in tables[0]}
    _assert_nested(columns)
    # Drain order: per thread by end time, threads taken in rounds of 4096 spans.
    end = columns["start_ns"] + columns["duration_ns"]
    thread = columns["thread_id"] - 70000
    order = np.lexsort((end, thread))
    rank_in_thread = np.arange(len(order)) - np.searchsorted(thread[order], thread[order])
    order = order[np.lexsort((thread[order], rank_in_thread // 4096))][:n_spans]
    c = {key: value[order] for key, value in columns.items()}
    thread_names = [f"worker-{i}" for i in range(n_threads)]
    thread_names[0] = "MainThread"
    # As a drained table: META_VERSION says hotspan recorded it (and no asyncio tasks did).
    metadata = {META_HOST: b"bench-host", META_START: str(base).encode(), META_VERSION: b"bench"}
    return with_self_ns(
        pa.table(
            {
                "span_id": pa.array(c["span_id"], pa.uint64()),
                "parent_id": pa.array(c["parent_id"], pa.uint64(), mask=c["parent_id"] < 0),
                "name": pa.DictionaryArray.from_arrays(
                    pa.array(c["name"], pa.int32()), pa.array(names)
                ),
                "category": pa.DictionaryArray.from_arrays(
                    pa.array(c["category"], pa.int32(), mask=c["category"] < 0),
                    pa.array(categories),
                ),
                "start_ns": pa.array(c["start_ns"], pa.int64()),
                "end_ns": pa.array(c["start_ns"] + c["duration_ns"], pa.int64()),
                "duration_ns": pa.array(c["duration_ns"], pa.int64()),
                "depth": pa.array(c["depth"], pa.int32()),
                "thread_id": pa.array(c["thread_id"], pa.int64()),
                "thread_name": pa.DictionaryArray.from_arrays(
                    pa.array(c["thread_id"] - 70000, pa.int32()), pa.array(thread_names)
                ),
                "pid": pa.array(np.full(len(order), 70000), pa.int64()),
                "rank": pa.array(np.zeros(len(order), np.int32), pa.int32()),
                "arg": pa.array(c["arg"], pa.int64(), mask=~c["has_arg"]),
                "error": pa.array(c["error"], pa.bool_()),
            },
            schema=TRACE_SCHEMA.with_metadata(metadata),
        )
    )


def _assert_nested(columns: dict[str, np.ndarray]) -> None:
    """Every child lies within its parent, on its parent's thread, one level below it."""
    ids, parent = columns["span_id"], columns["parent_id"]
    child = np.flatnonzero(parent >= 0)
    at = np.searchsorted(ids, parent[child])  # ids ascend: the parent's row
    assert (ids[at] == parent[child]).all(), "a parent missing"
    start, end = columns["start_ns"], columns["start_ns"] + columns["duration_ns"]
    assert (start[child] >= start[at]).all() and (end[child] <= end[at]).all(), (
        "a child outside its parent"
    )
    assert (columns["thread_id"][child] == columns["thread_id"][at]).all()
    assert (columns["depth"][child] == columns["depth"][at] + 1).all()


#: M spans a second each codec's export and load must reach (issue 35, item 2)
GOAL = 10.0


def _load_average() -> str:
    """The 1, 5 and 15 minute load averages (timings are only comparable at like load)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def _writeback_hint():
    """``sync_file_range(fd, offset, n, SYNC_FILE_RANGE_WRITE)`` through libc (Linux; else
    None): the codecs start each block's writeback as they write it, so the floor does too."""
    if not sys.platform.startswith("linux"):
        return None
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    call = libc.sync_file_range
    call.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    return lambda fd, offset, n: call(fd, offset, n, 2)  # SYNC_FILE_RANGE_WRITE


def disk_floor(data: bytes, path: Path, repeat: int, after_each=None) -> tuple[float, float]:
    """Best wall and CPU time to write ``data`` alone as an export writes a file: a new
    file, ``WRITE_BLOCK`` bytes a ``write(2)`` with each block's writeback started, then
    ``fsync`` and the rename over the last one (whose descriptor is held across it and
    closed after the timing, as the exporter does). No formatting: what the disk and the
    page cache take for these bytes on this machine now, the export's floor.
    ``after_each``: called after each run, outside its timing (the tests read the file)."""
    hint = _writeback_hint()
    held: list[int] = []
    view = memoryview(data)

    def write_alone():
        if path.exists():
            held.append(os.open(path, os.O_RDONLY))
        part = path.with_name(f".{path.name}.part")
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for block in range(0, len(view), WRITE_BLOCK):
                offset, end = block, min(block + WRITE_BLOCK, len(view))
                while offset < end:
                    offset += os.write(fd, view[offset:end])
                if hint is not None:
                    hint(fd, block, end - block)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(part, path)

    try:
        return best_of(repeat, write_alone, after_each)
    finally:
        for fd in held:
            os.close(fd)
        path.unlink(missing_ok=True)


def best_of(repeat: int, fn, after_each=None) -> tuple[float, float]:
    """The shortest wall time and the least CPU time of the process (every thread) over
    ``repeat`` runs: on a shared machine the CPU time is what the code itself costs.
    ``after_each`` (optional): called after each run, untimed."""
    times, cpu = [], []
    for _ in range(repeat):
        gc.collect()
        c0, t0 = time.process_time(), time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        if after_each is not None:
            after_each()
    return min(times), min(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--no-reference",
        dest="reference",
        action="store_false",
        help="skip the orjson reference (its --repeat runs take longer than every format's)",
    )
    parser.add_argument(
        "--no-floor",
        dest="floor",
        action="store_false",
        help="skip the disk floor (each file's bytes written alone, fsynced, per format)",
    )
    parser.add_argument(
        "--dir", default=None, help="where to write the files (default: a temporary folder)"
    )
    parser.add_argument(
        "--formats",
        default=".parquet,.arrow,.json,.json.gz,.pftrace,.csv,.jsonl",
        help="comma-separated extensions to time (default: all)",
    )
    args = parser.parse_args()

    t0 = time.perf_counter()
    table = synthetic_table(args.spans, args.threads)
    n = table.num_rows
    print(
        f"{n:,} spans over {args.threads} threads, built in {time.perf_counter() - t0:.1f} s; "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}, pyarrow {pa.__version__}; "
        f"load average {_load_average()}\n"
    )

    reference_bytes = 0

    def reference():
        import orjson  # the bench extra's: only the reference needs it (--no-reference)

        nonlocal reference_bytes
        reference_bytes = len(orjson.dumps(table.to_pylist()))

    reference_s = best_of(args.repeat, reference)[0] if args.reference else float("nan")

    rows = []
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for extension in args.formats.split(","):
            path = Path(directory) / f"bench{extension}"
            export_s, export_cpu = best_of(
                args.repeat,
                lambda: hotspan_export.export(table, path),  # noqa: B023
            )
            size = path.stat().st_size
            loaded = None

            def load():
                nonlocal loaded
                loaded = hotspan_export.load(path)  # noqa: B023

            load_s, load_cpu = best_of(args.repeat, load)
            assert loaded.num_rows == n, (extension, loaded.num_rows)
            floor_s = float("nan")
            if args.floor:
                floor_s = disk_floor(path.read_bytes(), path.with_suffix(".floor"), args.repeat)[0]
            rows.append((extension, export_s, size, load_s, export_cpu, load_cpu, floor_s))
            path.unlink()

    header = (
        f"{'format':<12}{'export s':>10}{'Mspans/s':>10}{'vs ref':>9}{'MB':>9}{'B/span':>8}"
        f"{'load s':>9}{'Mspans/s':>10}{'export cpu':>12}{'load cpu':>10}{'floor s':>9}"
    )
    print(header)
    print("-" * len(header))
    if args.reference:
        print(
            f"{'reference':<12}{reference_s:>10.3f}{n / reference_s / 1e6:>10.2f}{1:>8.1f}x"
            f"{reference_bytes / 1e6:>9.1f}{reference_bytes / n:>8.0f}{'':>9}{'':>10}   orjson.dumps(table.to_pylist())"
        )
    for extension, export_s, size, load_s, export_cpu, load_cpu, floor_s in rows:
        print(
            f"{extension:<12}{export_s:>10.3f}{n / export_s / 1e6:>10.2f}"
            + (f"{reference_s / export_s:>8.1f}x" if args.reference else f"{'':>9}")
            + f"{size / 1e6:>9.1f}{size / n:>8.0f}{load_s:>9.3f}{n / load_s / 1e6:>10.2f}"
            + f"{export_cpu:>12.3f}{load_cpu:>10.3f}{floor_s:>9.3f}"
        )
    print(
        "(s: the best wall time; cpu: the least process CPU time, every thread, in seconds;"
        "\n floor: the file's bytes alone written as the export writes them, fsync included)"
    )

    # per format: (export wall, export CPU), (load wall, load CPU), the disk floor
    by_format = {row[0]: ((row[1], row[4]), (row[3], row[5]), row[6]) for row in rows}
    # Issue 35: every codec at memory speed, export and load, on one core (wall time; the
    # CPU time's rate beside it, what the code costs whatever else the machine runs).
    print()
    failed = 0
    for extension, label in (
        (".json", "Chrome JSON"),
        (".pftrace", "Perfetto"),
        (".parquet", "Parquet"),
    ):
        if extension not in by_format:
            continue
        export, load, floor_s = by_format[extension]
        for step, (wall, cpu) in (("export", export), ("load", load)):
            value = n / wall / 1e6
            ok = value >= GOAL
            failed += not ok
            floor = ""
            if step == "export" and not math.isnan(floor_s):  # measured
                floor = (
                    f"; its bytes alone {n / floor_s / 1e6:.1f}, {wall / floor_s:.2f}x their time"
                )
            print(
                f"  [{'ok' if ok else 'MISSED'}] {label} {step} >= {GOAL:g} M spans/s: "
                f"{value:.1f} M spans/s ({n / cpu / 1e6:.1f} by CPU time{floor})"
            )
    print(f"\n  load average at the end: {_load_average()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
