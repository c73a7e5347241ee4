"""Turning the column buffers drained by the C core into a ``pyarrow.Table``.

The C side has already done the per-row work (ids, parents, tick conversion, dictionary
indices); here every column is wrapped without a copy (``pa.py_buffer`` over the native
memory) and only the small dictionaries are built from Python lists.
"""

from __future__ import annotations

import json
import platform
import socket
import sys
from typing import Any, Sequence

import numpy as np
import pyarrow as pa

from . import _machine
from ._run import run_id
from ._schema import (
    META_ARGV,
    META_CLOCK,
    META_DROPPED,
    META_ENV,
    META_HOST,
    META_ID_BASE,
    META_MACHINE,
    META_TASKS,
    META_PID,
    META_PYTHON,
    META_RANK,
    META_RUN,
    META_START,
    META_VERSION,
    SPAN_SCHEMA,
    with_pandas_dtypes,
)


def _fixed(
    raw: dict[str, Any], key: str, typ: pa.DataType, n: int, valid: str | None = None
) -> pa.Array:
    validity = pa.py_buffer(raw[valid]) if valid is not None else None
    return pa.Array.from_buffers(
        typ, n, [validity, pa.py_buffer(raw[key])], null_count=-1 if valid else 0
    )


def _strings(raw: dict[str, Any], prefix: str) -> pa.Array:
    """A dictionary's values, from the offsets and UTF-8 bytes the C side wrote."""
    count = int(raw[f"n_{prefix}"])
    return pa.StringArray.from_buffers(
        count, pa.py_buffer(raw[f"{prefix}_offsets"]), pa.py_buffer(raw[f"{prefix}_data"])
    )


def string_array(values: Sequence[str | None]) -> pa.Array:
    """A small string array built by hand (None: null): pa.array() on Python objects imports
    pandas (a second or so) the first time, inside a drain or a streamed answer."""
    encoded = [b"" if v is None else v.encode("utf-8", "surrogatepass") for v in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    valid = np.array([v is not None for v in values], np.bool_)
    bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.StringArray.from_buffers(
        len(encoded),
        pa.py_buffer(offsets),
        pa.py_buffer(b"".join(encoded)),
        bitmap,
        int(len(values) - valid.sum()),
    )


def _dictionary(
    raw: dict[str, Any], key: str, values: pa.Array, n: int, valid: str | None = None
) -> pa.DictionaryArray:
    indices = _fixed(raw, key, pa.int32(), n, valid)
    # safe=False: the C side wrote every index from the same dictionary it returned.
    return pa.DictionaryArray.from_arrays(indices, values, safe=False)


def metadata(
    *,
    rank: int,
    pid: int,
    clock: dict[str, Any],
    all_threads: list[tuple[int, str, int, int]],
    version: str,
    id_base: int | None = None,
    tasks: bool = False,
    machine: dict[str, Any] | None = None,
) -> dict[bytes, bytes]:
    """all_threads: (thread id, name, spans dropped, of which at the memory cap) per thread."""
    dropped_threads = {str(tid): count for tid, _name, count, _cap in all_threads if count}
    meta = {
        META_HOST: socket.gethostname().encode(),
        META_VERSION: version.encode(),
        META_PYTHON: platform.python_version().encode(),
        META_CLOCK: json.dumps(clock).encode(),
        META_START: str(clock.get("anchor_real_ns", 0)).encode(),
        META_ARGV: json.dumps(list(sys.argv)).encode(),
        META_DROPPED: json.dumps(
            {
                "total": sum(c for _t, _n, c, _m in all_threads),
                "threads": dropped_threads,
                "names": {str(tid): name for tid, name, c, _m in all_threads if c},
                # of the total, those dropped because the memory cap was reached
                "memory_cap": sum(m for _t, _n, _c, m in all_threads),
            }
        ).encode(),
        META_RANK: str(rank).encode(),
        META_PID: str(pid).encode(),
        META_RUN: run_id().encode(),
        META_ENV: json.dumps(environment(version)).encode(),
        META_MACHINE: json.dumps(machine or _machine.measure()).encode(),
    }
    if id_base is not None:
        meta[META_ID_BASE] = str(id_base).encode()
    if tasks:
        meta[META_TASKS] = b"1"
    return with_pandas_dtypes(meta)


def environment(version: str) -> dict[str, Any]:
    """What a run's timings depend on besides the code: host, versions, recorder configuration,
    with a digest of it all so that two traces can be checked for comparability at a glance."""
    from . import _native

    pending = _native._pending()
    # drain_period_us is left out: it adapts to the load while recording, so it would make
    # every run look different.
    config = {key: pending[key] for key in ("capacity", "memory_cap", "drain_thread")}
    env = {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "hotspan": version,
        "config": config,
    }
    env["digest"] = _sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:16]
    return env


def table_from_raw(raw: dict[str, Any], *, meta: dict[bytes, bytes]) -> pa.Table:
    """Build the span table (exactly ``SPAN_SCHEMA``) from one ``_native._drain()`` result."""
    n = int(raw["n"])
    thread_names = string_array([name for _tid, name in raw["threads"]])
    columns = [
        _fixed(raw, "span_id", pa.uint64(), n),
        _fixed(raw, "parent_id", pa.uint64(), n, "parent_valid"),
        _dictionary(raw, "name_idx", _strings(raw, "names"), n),
        _dictionary(raw, "category_idx", _strings(raw, "categories"), n, "category_valid"),
        _fixed(raw, "start_ns", pa.int64(), n),
        _fixed(raw, "end_ns", pa.int64(), n),
        _fixed(raw, "duration_ns", pa.int64(), n),
        _fixed(raw, "depth", pa.int32(), n),
        _fixed(raw, "thread_id", pa.int64(), n),
        _dictionary(raw, "thread_idx", thread_names, n),
        _fixed(raw, "pid", pa.int64(), n),
        _fixed(raw, "rank", pa.int32(), n),
        _fixed(raw, "arg", pa.int64(), n, "arg_valid"),
        _fixed(raw, "error", pa.bool_(), n),
        _fixed(raw, "self_ns", pa.int64(), n),
        _fixed(raw, "wait_ns", pa.int64(), n),
    ]
    return pa.Table.from_arrays(columns, schema=SPAN_SCHEMA.with_metadata(meta))


def _sha256(data: bytes) -> Any:
    """A SHA-256 object: CPython's own implementation where it has one (``_sha2``, 3.12 on;
    ``_sha256`` before), hashlib's otherwise. Why not hashlib first: its import loads
    OpenSSL, and under an address-space limit (a recording stopping out of memory, whose
    metadata names this digest) that fails and logs a traceback for every algorithm."""
    import sys

    if "hashlib" not in sys.modules:
        try:
            from _sha2 import sha256  # type: ignore[import-not-found]
        except ImportError:
            try:
                from _sha256 import sha256  # type: ignore[import-not-found]
            except ImportError:
                from hashlib import sha256
        return sha256(data)
    import hashlib

    return hashlib.sha256(data)
