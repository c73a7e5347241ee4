"""CUDA device spans: an event pair per span, resolved at drain without stalling the host.

``hotspan.span(name, category, device="cuda")`` is a span object of the C core whose enter
and exit also go to its CUDA plug-in (``csrc/hs_cuda.c``), which speaks to the CUDA driver
API itself: ``libcuda.so.1`` is loaded at the first device span made (``$HOTSPAN_LIBCUDA``
names another file: the tests' stand-in), so neither torch nor a CUDA toolkit is needed,
and a program written against CuPy, JAX, numba or a C++ extension has device rows too.

* **enter**: after the host span opens, a start event is recorded (``cuEventRecord``) on
  the span's stream: ``stream=`` when given (an int ``CUstream`` handle, or an object with
  ``cuda_stream`` or ``__cuda_stream__``: torch, CuPy, numba), else torch's current stream
  when torch is loaded (read in C, no Python call), else the default stream;
* **exit**: an end event on the same stream, before the host span's end timestamp; the
  pair (host span id, device, stream, events) waits in a queue of its stream.

Events come from a pool per CUDA context and go back to it when their pair is resolved:
once warm, a device span creates no event and allocates nothing. No Python runs per device
span: its host cost over the two event records is a few hundred nanoseconds.

**Drain** (``hotspan.drain()`` and every consumer's flush, through ``_api.core_table``):
:func:`resolve_table` turns the pairs whose end event has completed (``cuEventQuery``, never
a wait) into **device rows**; a pair not complete yet waits for a later drain, in order on
its stream. ``hotspan.drain(wait_device=True)`` first waits for the last pair queued on each
stream (``cuEventSynchronize``), once per stream.

A device row has the conventions below (README, "GPU, MLX and collectives"):

* ``name``, ``category`` (the full path), ``arg`` and ``error``: the host span's;
* ``parent_id``: the host span's ``span_id``; ``depth``: the host span's depth + 1;
* ``span_id``: a fresh id from the core's id ranges (never one a thread uses);
* ``thread_name``: ``cuda:<device> stream <stream id>``: torch's ``Stream.stream_id`` for
  torch's streams (0 for the default stream), else the stream's handle;
* ``thread_id``: :func:`device_thread_id`, ``-1 - (device * 2**20 + stream id)``:
  negative, so never an OS thread id, the same for a (device, stream) in every run, and
  within int32 (Perfetto's thread ids);
* ``start_ns``/``end_ns``: on the host clock of the table, through a calibration taken at
  the first device span of each device: an event recorded on a side stream of ours (idle,
  so it waits for none of the program's work) and synchronized, then the host clock read
  right after. A row's times are the calibration's host time plus the event times elapsed
  since the calibration event (``cuEventElapsedTime``), both ends from the same
  calibration, so rows of nested spans nest exactly. The calibration is re-taken when it
  is older than :data:`RECALIBRATE_NS` (CUDA's elapsed times are float32 milliseconds:
  ~1 µs steps at 10 s) at a device span's start while no device span of that device is
  open (nested spans share one calibration). A row that a new calibration would start
  inside the previous row of its stream, without nesting in it, starts at that row's end.

Errors from the driver are one line naming the call and its ``CUresult``; without a
driver or a device, making a device span raises a RuntimeError naming CUDA.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from .. import _native

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "RECALIBRATE_NS",
    "calibration",
    "device_thread_id",
    "device_thread_name",
    "info",
    "pending",
    "reset",
    "resolve_table",
    "set_recalibrate_ns",
    "synchronize_pending",
]

#: A calibration older than this (host monotonic ns) is re-taken at the next device span
#: (the C plug-in's default; :func:`set_recalibrate_ns` changes it).
RECALIBRATE_NS = 10_000_000_000
#: Bits of a device row's thread id given to the stream (torch's own stream ids are small:
#: 0 for the default stream, pool streams a few bits): ids under 2**19 are kept as they
#: are, larger ones (external streams: a pointer) are hashed into [2**19, 2**20). The
#: device gets the bits above, up to 2**10 devices: every id fits in int32, as Perfetto's
#: thread descriptor needs.
STREAM_BITS = 20
_DIRECT = 1 << (STREAM_BITS - 1)


def device_thread_id(device: int, stream: int) -> int:
    """The ``thread_id`` of a device stream's rows: ``-1 - (device * 2**20 + s)``, where
    ``s`` is the stream id when under 2**19, else 2**19 + crc32 of its 8 bytes mod 2**19.

    Negative (never an OS thread id), one per (device, stream), the same in every run,
    within int32; the default stream of ``cuda:0`` is -1."""
    stream = int(stream)
    if not 0 <= stream < _DIRECT:
        import zlib

        stream = _DIRECT + zlib.crc32((stream & ((1 << 64) - 1)).to_bytes(8, "little")) % _DIRECT
    return -1 - ((int(device) << STREAM_BITS) | stream)


def device_thread_name(device: int, stream: int) -> str:
    """The ``thread_name`` of a device stream's rows: ``cuda:<device> stream <stream>``."""
    return f"cuda:{device} stream {stream}"


def set_recalibrate_ns(ns: int) -> int:
    """Re-take a device's calibration when older than ``ns`` (at a device span's start, no
    span of the device open); returns the previous period."""
    return int(_native._cuda_set_recalibrate_ns(int(ns)))


def info() -> dict[str, Any]:
    """The plug-in's state: the driver loaded (its path, or None), pairs pending and open,
    events created and pooled, how torch's current stream is read."""
    return dict(_native._cuda_info())


def pending() -> int:
    """Pairs closed and not yet resolved."""
    return int(_native._cuda_info()["pending"])


def calibration(device: int) -> tuple[int, int] | None:
    """The calibration of ``device`` in effect: (its event's handle, the host ns read right
    after it completed), or ``None`` before the device's first span."""
    return _native._cuda_calibration(int(device))


def reset() -> None:
    """Forget every pending pair and calibration (their events go back to the pool)."""
    _native._cuda_reset(True)


def synchronize_pending() -> None:
    """``drain(wait_device=True)``: wait for the last pair queued on each stream."""
    _native._cuda_synchronize()


class _Ids:
    """Span ids for device rows, from the core's id ranges (never one a thread uses)."""

    next = 0
    end = 0

    @classmethod
    def take(cls, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            if cls.next == cls.end:
                first, count = _native._take_id_range()
                cls.next, cls.end = first, first + count
            take = min(n - len(out), cls.end - cls.next)
            out.extend(range(cls.next, cls.next + take))
            cls.next += take
        return out


_strings: dict[int, tuple[str, str | None]] = {}


def resolve_columns(rank: int = 0) -> dict[str, list[Any]]:
    """The completed pairs as device rows (columns of the span table, as lists; ``rank`` for
    their rank column, the drain's). Never waits: an incomplete pair stays queued, and the
    pairs behind it on its stream (they complete after it) too."""
    from .._schema import SPAN_SCHEMA

    done = _native._cuda_resolve()
    columns: dict[str, list[Any]] = {name: [] for name in SPAN_SCHEMA.names}
    if not done:
        return columns
    pid = os.getpid()
    ids = _Ids.take(len(done))
    for span_id, (host_id, depth, pair, device, stream_id, start, end, arg, error) in zip(
        ids, done, strict=True
    ):
        strings = _strings.get(pair)
        if strings is None:
            strings = _strings[pair] = _native._pair_strings(pair)
        columns["span_id"].append(span_id)
        columns["parent_id"].append(host_id)
        columns["name"].append(strings[0])
        columns["category"].append(strings[1])
        columns["start_ns"].append(start)
        columns["end_ns"].append(end)
        columns["duration_ns"].append(end - start)
        columns["depth"].append(depth + 1)
        columns["thread_id"].append(device_thread_id(device, stream_id))
        columns["thread_name"].append(device_thread_name(device, stream_id))
        columns["pid"].append(pid)
        columns["rank"].append(rank)
        columns["arg"].append(arg)
        columns["error"].append(error)
        columns["self_ns"].append(end - start)  # a device track's row has no children
        columns["wait_ns"].append(0)  # nor a task to await in
    return columns


def resolve_table(meta: dict[bytes, bytes] | None, rank: int = 0) -> pa.Table | None:
    """The completed device pairs as a span table (``SPAN_SCHEMA``, ``meta`` as metadata,
    ``rank`` in the rank column), or ``None`` when there are none."""
    columns = resolve_columns(rank)
    if not columns["span_id"]:
        return None
    import pyarrow as pa

    from .._schema import SPAN_SCHEMA

    arrays = []
    for field in SPAN_SCHEMA:
        values = columns[field.name]
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, pa.string()).dictionary_encode().cast(field.type))
        else:
            arrays.append(pa.array(values, field.type))
    return pa.Table.from_arrays(
        arrays, schema=SPAN_SCHEMA.with_metadata(meta) if meta else SPAN_SCHEMA
    )
