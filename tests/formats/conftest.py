"""Fixtures for the export tests: a synthetic span table and Perfetto's own checker.

``hotspan.export`` works on plain pyarrow tables; the synthetic table lets these tests
cover what the recorder cannot produce on demand (several processes and ranks, names with
quotes and newlines, exact nanosecond ties).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow as pa
import pytest


from hotspan._schema import (
    META_ARGV,
    META_DROPPED,
    META_HOST,
    META_START,
    META_VERSION,
    SPAN_SCHEMA,
    TRACE_SCHEMA,
    with_pandas_dtypes,
)
from hotspan._selftime import with_self_ns
from hotspan.formats import _perfetto_codec as perfetto_codec


# --------------------------------------------------------------------------- synthetic spans

#: (pid, rank, thread id, thread name) of the synthetic threads. Rank 1's worker reuses
#: rank 0's thread id number in another process; one name is not ASCII.
THREADS = [
    (4242, 0, 4242, "MainThread"),
    (4242, 0, 4250, "loader-ü数据"),
    (4242, 0, 4251, "compute"),
    (5151, 1, 5151, "MainThread"),
    (5151, 1, 4250, "Rank 1 worker"),
]
#: The compute thread was called this before set_thread_name() renamed it.
EARLY_NAME = "compute-early"
NAMES = ["step", "forward", "backward", "allreduce", "load_batch", "checkpoint", 'élan "quoted"\n']
CATEGORIES = [None, "compute", "sync", "io", "comms"]


def build_spans(
    seed: int = 7, roots_per_thread: int = 3, longest_root_ns: int = 30_000
) -> pa.Table:
    """A trace as the recorder drains it: every span once, children before parents (a span
    is recorded when it ends), consistent parent_id/depth/category paths, instants
    (also at a parent's first and last nanosecond), errors, nulls, a renamed thread."""
    rng = random.Random(seed)
    rows: list[dict] = []
    next_id = iter(range(1, 1 << 30))

    def span(thread, parent, depth, path, start, end, instant=False):
        span_id = next(next_id)
        name = rng.choice(NAMES)
        own = rng.choice(CATEGORIES)
        category = "/".join(p for p in (path, own) if p) or None
        if not instant and depth < 4 and end - start > 40:
            t = (
                start if rng.random() < 0.3 else start + rng.randrange(1, 6)
            )  # sometimes at the parent's start
            while t < end - 10:
                if rng.random() < 0.2:
                    span(thread, span_id, depth + 1, category, t, t, instant=True)
                length = rng.randrange(1, max(2, (end - t) // 2))
                span(thread, span_id, depth + 1, category, t, min(end, t + length))
                t = min(end, t + length) + (
                    0 if rng.random() < 0.3 else rng.randrange(1, 5)
                )  # siblings may touch
            if rng.random() < 0.3:
                span(thread, span_id, depth + 1, category, end, end, instant=True)  # at its last ns
        pid, rank, tid, thread_name = thread
        if thread_name == "compute" and start < base + longest_root_ns:
            thread_name = EARLY_NAME
        rows.append(
            {
                "span_id": span_id,
                "parent_id": parent,
                "name": name if not instant else "checkpoint",
                "category": category,
                "start_ns": start,
                "end_ns": end,
                "duration_ns": end - start,
                "depth": depth,
                "thread_id": tid,
                "thread_name": thread_name,
                "pid": pid,
                "rank": rank,
                "arg": rng.choice([None, None, 0, 4096, -7, 1 << 40, (1 << 63) - 1]),
                "error": (not instant) and rng.random() < 0.05,
            }
        )

    base = 1_732_000_000_123_456_789
    for thread in THREADS:
        t = base + rng.randrange(0, 1000)
        for _ in range(roots_per_thread):
            length = rng.randrange(50, longest_root_ns)
            span(thread, None, 0, None, t, t + length)
            t += length + rng.randrange(0, 3000)
        span(thread, None, 0, "io", t + 5, t + 5, instant=True)  # a root instant
    rng.shuffle(rows)  # drain interleaves threads; keep each thread in end order
    rows.sort(key=lambda r: (r["thread_id"] % 3, r["end_ns"]))
    parents = {row["parent_id"] for row in rows}
    leaf = next(row for row in rows if row["span_id"] not in parents)
    leaf["span_id"] = (1 << 64) - 2  # span ids are uint64: the largest still work
    metadata = {
        META_HOST: b"node-07.example",
        META_VERSION: b"0.1.0",
        META_START: str(base).encode(),
        META_ARGV: json.dumps(["train.py", "--epochs", "1"]).encode(),
        META_DROPPED: json.dumps({"total": 0, "threads": {}}).encode(),
    }
    # As drain() makes it: the pandas dtypes of the nullable integer columns included.
    table = pa.Table.from_pylist(
        rows, schema=TRACE_SCHEMA.with_metadata(with_pandas_dtypes(metadata))
    )
    return with_self_ns(table)  # as drain() computes it (checked against it in test_self_time.py)


@pytest.fixture(scope="session")
def spans() -> pa.Table:
    """The synthetic trace with dictionary-encoded strings (as ``drain()`` makes it)."""
    return build_spans()


@pytest.fixture(scope="session")
def plain_spans(spans) -> pa.Table:
    """The same trace with plain string columns (also allowed by the contract)."""
    return plain(spans)


def plain(table: pa.Table) -> pa.Table:
    """Dictionary columns cast to plain strings: how round trips are compared."""
    columns = [
        column.cast(column.type.value_type) if pa.types.is_dictionary(column.type) else column
        for column in table.columns
    ]
    return pa.Table.from_arrays(columns, names=table.column_names)


def assert_same_spans(expected: pa.Table, actual: pa.Table, keep_order: bool = True) -> None:
    """Column by column, strings compared as plain strings; rows by span_id unless ordered."""
    assert actual.schema.remove_metadata() == SPAN_SCHEMA.remove_metadata()
    expected, actual = plain(expected), plain(actual)
    if not keep_order:
        expected = expected.sort_by("span_id")
        actual = actual.sort_by("span_id")
    assert actual.num_rows == expected.num_rows
    for name in SPAN_SCHEMA.names:
        left, right = expected.column(name).to_pylist(), actual.column(name).to_pylist()
        if left != right:
            first = next(i for i, (a, b) in enumerate(zip(left, right)) if a != b)
            raise AssertionError(
                f"column {name!r} differs first at row {first}: {left[first]!r} != {right[first]!r}"
            )


# --------------------------------------------------------------------------- perfetto-check


@pytest.fixture(scope="session")
def perfetto_check():
    """Run Perfetto's own trace processor (tests/formats/trace_processor) on a trace:
    ``check(path, slices, sum_dur, threads)`` returns its report, every problem asserted away."""
    import trace_processor

    # Failures, not skips: an export that nobody checked with Perfetto is not done, and
    # everything the checker needs comes with the test extra.
    try:
        trace_processor.node_executable()
        trace_processor.wasm_dir()
    except trace_processor.Unavailable as exc:
        pytest.fail(str(exc))

    def check(path: Path, slices: int, sum_dur: int, threads: int) -> dict:
        report = trace_processor.check(path, slices=slices, sum_dur=sum_dur, threads=threads)
        assert not report["problems"], json.dumps(report, indent=1, default=str)
        return report

    return check


# Protobuf fields by hand, for Perfetto traces written field by field (the decoder's tests)


def pb_varint(number: int, value: int) -> bytes:
    """Field ``number`` holding the varint ``value``."""
    return perfetto_codec.field_varint(number, value)


def pb_bytes(number: int, data: bytes | str) -> bytes:
    """Field ``number`` holding ``data`` (length-delimited)."""
    return perfetto_codec.field_bytes(number, data)


def pb_annotation(iid: int, value: int, tag: int = 3) -> bytes:
    """A debug annotation (field 4) naming interned ``iid`` with ``value`` in field ``tag``."""
    return pb_bytes(4, pb_varint(1, iid) + pb_varint(tag, value))
