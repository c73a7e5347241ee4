"""Flight files (``configure(flight=PATH)``, ``HOTSPAN_FLIGHT``): the spans a dead process
completed and never drained, and the stacks of open spans of a dead or running one.

    recover(path) -> pyarrow.Table     # after a crash: undrained spans + the open ones
    stacks(path) -> FlightProcess      # open spans now, read without stopping the writer
    snapshot() -> pyarrow.Table        # this process's open spans, from its own flight file

The file is written by the C core; its reader lives with the formats
(``hotspan.formats._flight``: every count and offset checked, a bad file a
``FlightFileError`` naming it), below the analysis that reads it too (``hotspan hang``).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from ..formats._flight import (
    META_OPEN_SPANS,
    FlightFileError,
    FlightProcess as FlightProcess,
    FlightThread as FlightThread,
    Frame as Frame,
    flight_processes,
    is_flight_file,
    mapped_flight_files,
    pid_alive,
    recover,
    stacks,
)

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "FlightFileError",
    "META_OPEN_SPANS",
    "recover",
    "stacks",
    "snapshot",
    "flight_processes",
    "mapped_flight_files",
    "is_flight_file",
    "pid_alive",
]


def snapshot() -> "pa.Table":
    """The spans open now in this process, per thread (outermost first): pid, rank,
    thread_id, thread_name, depth, name, category, start_ns, elapsed_ns, span_id. Read from
    the flight file, as ``hotspan top`` reads it from outside."""
    import pyarrow as pa

    from .. import _native

    path = _native._flight_path()
    if path is None:
        raise RuntimeError(
            "snapshot() reads the flight file: configure(flight=PATH) (or HOTSPAN_FLIGHT=PATH) "
            "before the first span"
        )
    proc = stacks(path)
    now = time.time_ns()
    schema = __getattr__("SNAPSHOT_SCHEMA")
    rows: dict[str, list[Any]] = {k: [] for k in schema.names}
    for t in proc.threads:
        for fr in t.stack:
            for k, v in (
                ("pid", proc.pid),
                ("rank", proc.rank),
                ("thread_id", t.thread_id),
                ("thread_name", t.thread_name),
                ("depth", fr.depth),
                ("name", fr.name),
                ("category", fr.category),
                ("start_ns", fr.start_ns),
                ("elapsed_ns", max(0, now - fr.start_ns)),
                ("span_id", fr.span_id),
            ):
                rows[k].append(v)
    return pa.table(rows, schema=schema)


def __getattr__(name: str) -> Any:
    if name == "SNAPSHOT_SCHEMA":  # pyarrow on first use only
        import pyarrow as pa

        schema = pa.schema(
            [
                ("pid", pa.int64()),
                ("rank", pa.int32()),
                ("thread_id", pa.int64()),
                ("thread_name", pa.string()),
                ("depth", pa.int32()),
                ("name", pa.string()),
                ("category", pa.string()),
                ("start_ns", pa.int64()),
                ("elapsed_ns", pa.int64()),
                ("span_id", pa.uint64()),
            ]
        )
        globals()["SNAPSHOT_SCHEMA"] = schema
        return schema
    from ..formats import _flight

    if hasattr(_flight, name):  # the reader's layout (_HEADER, _NAMES), for tests of damage
        return getattr(_flight, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
