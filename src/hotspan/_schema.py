"""The span table's schema: the contract every part of hotspan reads and writes.

See DESIGN.md ("The span table"). Dictionary-encoded string columns are allowed by the
contract; ``drain()`` produces them because names repeat millions of times.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

#: Column name -> Arrow type, in table order.
_DICT_STR = pa.dictionary(pa.int32(), pa.string())

SPAN_SCHEMA = pa.schema(
    [
        pa.field("span_id", pa.uint64(), nullable=False),
        pa.field("parent_id", pa.uint64(), nullable=True),
        pa.field("name", _DICT_STR, nullable=False),
        pa.field("category", _DICT_STR, nullable=True),
        pa.field("start_ns", pa.int64(), nullable=False),
        pa.field("end_ns", pa.int64(), nullable=False),
        pa.field("duration_ns", pa.int64(), nullable=False),
        pa.field("depth", pa.int32(), nullable=False),
        pa.field("thread_id", pa.int64(), nullable=False),
        pa.field("thread_name", _DICT_STR, nullable=False),
        pa.field("pid", pa.int64(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("arg", pa.int64(), nullable=True),
        pa.field("error", pa.bool_(), nullable=False),
        # the time its own code ran: duration minus the union of its children's intervals
        # (same thread, and the spans of asyncio tasks created under it), and for a span of an
        # asyncio task minus the time its task was suspended: statistics need no parent join
        # (see _selftime.py)
        pa.field("self_ns", pa.int64(), nullable=False),
        # the time its asyncio task spent suspended (awaiting) while it was the task's
        # innermost open span; 0 for sync code (DESIGN.md "Self and wait")
        pa.field("wait_ns", pa.int64(), nullable=False),
    ]
)

COLUMNS = tuple(SPAN_SCHEMA.names)

#: The counter table (hotspan.counter, configure(counters=)'s samples): a value at a time.
COUNTER_SCHEMA = pa.schema(
    [
        pa.field("time_ns", pa.int64(), nullable=False),  # nanoseconds since the Unix epoch
        pa.field("name", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
        pa.field("rank", pa.int32(), nullable=False),
        pa.field("pid", pa.int64(), nullable=False),
    ]
)

#: The columns a trace format (Chrome JSON, Perfetto) stores: ``self_ns`` and ``wait_ns``
#: are derived from them on load (``_selftime.with_self_ns``).
TRACE_SCHEMA = SPAN_SCHEMA.remove(SPAN_SCHEMA.get_field_index("wait_ns")).remove(
    SPAN_SCHEMA.get_field_index("self_ns")
)

#: Keys of the schema metadata (bytes -> bytes in Arrow; values are UTF-8, JSON where noted).
META_HOST = b"hotspan.host"
META_VERSION = b"hotspan.version"
META_PYTHON = b"hotspan.python"
META_CLOCK = b"hotspan.clock"  # JSON: source, ticks_per_ns, anchor
META_START = b"hotspan.start_ns"  # epoch ns when recording started in this process
META_ARGV = b"hotspan.argv"  # JSON list
META_DROPPED = (
    b"hotspan.dropped"  # JSON: {"total": n, "threads": {thread_id: n}, "names", "memory_cap": n}
)
META_RANK = b"hotspan.rank"
META_PID = b"hotspan.pid"
#: "1" when spans ran in asyncio tasks (copied contexts): trees may overlap on a thread, and
#: the trace exports lay them on lanes (formats/_lanes.py); absent otherwise.
META_TASKS = b"hotspan.tasks"
#: The run's id (see hotspan._run.run_id): every process of one run, every rank of one job,
#: carries the same; two runs written into one directory stay apart by it.
META_RUN = b"hotspan.run"
#: Per part of a run directory (JSON; formats/dataset.py writes it, formats/_rawlog.py reads
#: which raw log a converted part replaces).
META_PART = b"hotspan.part"
META_ID_BASE = b"hotspan.id_base"  # the process's random span id base (decimal): ids are base + k
# JSON: {"digest", "host", "python", "hotspan", "config": {...}}; `hotspan compare` warns when digests differ
META_ENV = b"hotspan.env"
# JSON: how fast the machine was while the run ran (_machine.measure: calibration loop,
# run-queue contention, their product "slowness"); `compare` tells machine drift by it
META_MACHINE = b"hotspan.machine"
# JSON: {"total": n, "reasons": {why: n}}: rows a loader left out of a damaged file
# (a truncated last line, ...), set by formats.base.note_skipped; absent when none were.
META_SKIPPED_ON_LOAD = b"hotspan.skipped_on_load"


# --------------------------------------------------------------------------- reading metadata
# The one parser of the metadata above: tolerant (a foreign or damaged file gives None,
# never an exception), so every reader treats a missing and an unreadable value alike.


def meta_json(meta: dict[bytes, bytes] | None, key: bytes) -> Any:
    """The JSON value stored under ``key``, or None when absent or not valid JSON."""
    raw = (meta or {}).get(key)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def meta_int(meta: dict[bytes, bytes] | None, key: bytes) -> int | None:
    """The integer stored under ``key``, or None when absent or not an integer."""
    raw = (meta or {}).get(key)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def meta_dict(meta: dict[bytes, bytes] | None, key: bytes) -> dict[str, Any] | None:
    """The JSON object stored under ``key``, or None when absent or not an object."""
    value = meta_json(meta, key)
    return value if isinstance(value, dict) else None


# --------------------------------------------------------------------------- pandas dtypes
#: pandas' own schema-metadata key. ``table.to_pandas()`` (and pandas' ``read_parquet``, and
#: DuckDB's ``.df()``) read it to choose dtypes: with it, the nullable ``parent_id`` and
#: ``arg`` become pandas' nullable ``UInt64``/``Int64`` instead of float64, so ids above
#: 2**53 (any rank >= 32) and payloads stay exact and merges on ids match the right rows.
META_PANDAS = b"pandas"
_PANDAS_DTYPES = json.dumps(
    {
        "index_columns": [],
        "column_indexes": [],
        "columns": [
            {
                "name": name,
                "field_name": name,
                "pandas_type": pandas_type,
                "numpy_type": dtype,
                "metadata": None,
            }
            for name, pandas_type, dtype in (
                ("parent_id", "uint64", "UInt64"),
                ("arg", "int64", "Int64"),
            )
        ],
        "creator": {"library": "hotspan"},
        "pandas_version": "2.0.0",
    }
).encode()


def with_pandas_dtypes(meta: dict[bytes, bytes] | None) -> dict[bytes, bytes]:
    """``meta`` plus the pandas dtypes of the span table's nullable integer columns."""
    out = dict(meta or {})
    out[META_PANDAS] = _PANDAS_DTYPES
    return out
