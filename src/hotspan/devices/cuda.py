"""CUDA device spans: an event pair per span, resolved at drain without stalling the host.

``hotspan.span(name, category, device="cuda")`` is a span object of the C core whose enter
and exit also call the :class:`DeviceRecorder` here:

* **enter** (:meth:`DeviceRecorder.start`): after the host span opens, a start event
  (``torch.cuda.Event(enable_timing=True)``) is recorded on the current stream;
* **exit** (:meth:`DeviceRecorder.stop`): an end event on the same stream, before the host
  span's end timestamp; the pair (host span id, device, stream, events) waits in a queue of
  its stream.

Events come from a free list per device and go back to it when their pair is resolved:
once warm, a device span creates no event.

**Drain** (``hotspan.drain()`` and every consumer's flush, through ``_api.core_table``):
:meth:`DeviceRecorder.resolve` turns the pairs whose end event has completed
(``event.query()``, never a wait) into **device rows**; a pair not complete yet waits for a
later drain, in order on its stream. ``hotspan.drain(wait_device=True)`` first
synchronizes each device with pending pairs once (:meth:`DeviceRecorder.synchronize`).

A device row has the conventions below (README, "GPU, MLX and collectives"):

* ``name``, ``category`` (the full path), ``arg`` and ``error``: the host span's;
* ``parent_id``: the host span's ``span_id``; ``depth``: the host span's depth + 1;
* ``span_id``: a fresh id from the core's id ranges (never one a thread uses);
* ``thread_name``: ``cuda:<device> stream <stream id>`` (torch's ``Stream.stream_id``; 0
  for the default stream);
* ``thread_id``: :func:`device_thread_id`, ``-1 - (device * 2**20 + stream id)``:
  negative, so never an OS thread id, the same for a (device, stream) in every run, and
  within int32 (Perfetto's thread ids);
* ``start_ns``/``end_ns``: on the host clock of the table, through a calibration taken at
  the first device span of each device: an event recorded on a side stream (idle, so it
  waits for none of the program's work) and synchronized, then the host clock read right
  after. A row's times are the calibration's host time plus the event times elapsed since
  the calibration event (``cal.elapsed_time(event)``), both ends from the same
  calibration, so rows of nested spans nest exactly. The calibration is re-taken when it
  is older than :data:`RECALIBRATE_NS` (CUDA's elapsed times are float32 milliseconds:
  ~1 µs steps at 10 s) at a device span's start while no device span of that device is
  open (nested spans share one calibration). A row that a new calibration would start
  inside the previous row of its stream, without nesting in it, starts at that row's end.

The CUDA runtime is an object with the ``torch.cuda.Event`` interface behind it
(:class:`TorchCuda`); tests install another with :func:`install`.
"""

from __future__ import annotations

import _thread
import os
import time
from collections import deque
from typing import Any

from .. import _native

__all__ = [
    "DeviceRecorder",
    "RECALIBRATE_NS",
    "TorchCuda",
    "device_thread_id",
    "device_thread_name",
    "install",
    "recorder",
    "resolve_table",
    "start",
    "stop",
    "synchronize_pending",
    "uninstall",
]

#: A calibration older than this (host monotonic ns) is re-taken at the next device span.
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


class TorchCuda:
    """The CUDA runtime as the recorder uses it, through torch (imported by the caller)."""

    def __init__(self, torch: Any):
        self._torch = torch
        self._side: dict[int, Any] = {}

    def event(self) -> Any:
        """A new timing event (``torch.cuda.Event(enable_timing=True)``)."""
        return self._torch.cuda.Event(enable_timing=True)

    def current_stream(self) -> tuple[int, int, Any]:
        """(device index, stream id, stream) of the current stream."""
        stream = self._torch.cuda.current_stream()
        return stream.device.index, stream.stream_id, stream

    def calibration_stream(self, device: int) -> Any:
        """A stream of our own on ``device``: idle, so an event there completes at once."""
        stream = self._side.get(device)
        if stream is None:
            stream = self._side[device] = self._torch.cuda.Stream(device=device)
        return stream

    def synchronize(self, device: int) -> None:
        """Wait for all work queued on ``device``."""
        self._torch.cuda.synchronize(device)


class _Calibration:
    """An event completed on the device and the host clock read right after it."""

    __slots__ = ("event", "ticks", "mono_ns", "host_ns")

    def __init__(self, event: Any, ticks: int, mono_ns: int):
        self.event = event
        self.ticks = ticks  # the core's raw ticks: converted at drain by the spans' own map
        self.mono_ns = mono_ns
        self.host_ns: int | None = None

    def host(self) -> int:
        if self.host_ns is None:  # the map converts a tick to the same ns ever after
            self.host_ns = _native._ticks_ns(self.ticks)
        return self.host_ns


class _Pair:
    __slots__ = (
        "host_id",
        "depth",
        "pair",
        "device",
        "stream_id",
        "stream",
        "start",
        "end",
        "cal",
        "arg",
        "error",
    )


class DeviceRecorder:
    """Event pairs of device spans, from their start to their resolution into rows."""

    def __init__(self, runtime: Any):
        self.runtime = runtime
        self._lock = _thread.allocate_lock()
        self._free: dict[int, list[Any]] = {}  # per device: events ready to record again
        self._open: dict[int, _Pair] = {}  # host span id -> pair whose span is still open
        self._open_per_device: dict[int, int] = {}
        self._queues: dict[
            tuple[int, int], deque[_Pair]
        ] = {}  # per (device, stream), in stop order
        self._cal: dict[int, _Calibration] = {}
        self._last: dict[
            tuple[int, int], tuple[int, int]
        ] = {}  # per stream: the last row's (start, end)
        self._strings: dict[int, tuple[str, str | None]] = {}
        self._ids = 0
        self._ids_end = 0
        #: Events created so far (a warm recorder creates none: they are pooled).
        self.events_created = 0

    # ------------------------------------------------------------------ enter / exit (from C)

    def _event(self, device: int) -> Any:
        free = self._free.get(device)
        if free:
            return free.pop()
        self.events_created += 1
        return self.runtime.event()

    def _calibration(self, device: int) -> _Calibration:
        cal = self._cal.get(device)
        now = time.monotonic_ns()
        if cal is not None and (
            now - cal.mono_ns < RECALIBRATE_NS or self._open_per_device.get(device)
        ):
            return cal
        # Taken on a side stream: the event waits for none of the program's queued work,
        # so synchronizing it costs one round trip to the device, not a stall.
        event = self.runtime.event()
        self.events_created += 1
        event.record(self.runtime.calibration_stream(device))
        event.synchronize()
        cal = self._cal[device] = _Calibration(event, _native._now_ticks(), now)
        return cal

    def start(self, host_id: int, depth: int, pair: int) -> None:
        """The host span ``host_id`` (at ``depth``, with the record pair ``pair``) opened:
        record its start event on the current stream."""
        device, stream_id, stream = self.runtime.current_stream()
        with self._lock:
            cal = self._calibration(device)
            p = _Pair()
            p.host_id, p.depth, p.pair = host_id, depth, pair
            p.device, p.stream_id, p.stream, p.cal = device, stream_id, stream, cal
            p.start = self._event(device)
            p.end = None
            self._open[host_id] = p
            self._open_per_device[device] = self._open_per_device.get(device, 0) + 1
        try:
            p.start.record(stream)
        except BaseException:
            # The span closes as an error without a stop(): forget the pair, or it would
            # hold the device "open" (no recalibration) for good.
            with self._lock:
                if self._open.pop(host_id, None) is not None:
                    self._open_per_device[device] -= 1
                    self._free.setdefault(device, []).append(p.start)
            raise

    def stop(self, host_id: int, arg: int | None = None, error: bool = False) -> None:
        """The host span ``host_id`` is closing: record its end event on the stream of its
        start, and queue the pair for resolution."""
        # One lock for all of it, the record included: queued in the order the end events
        # are recorded, which is the order a stream completes them.
        with self._lock:
            p = self._open.pop(host_id, None)
            if p is None:
                return  # opened before a fork or a reset: nothing of it here
            self._open_per_device[p.device] -= 1
            p.end = self._event(p.device)
            p.arg, p.error = arg, error
            p.end.record(p.stream)
            queue = self._queues.get((p.device, p.stream_id))
            if queue is None:
                queue = self._queues[(p.device, p.stream_id)] = deque()
            queue.append(p)

    # ------------------------------------------------------------------ drain side

    def calibration(self, device: int) -> tuple[Any, int] | None:
        """The calibration of ``device`` in effect: (its event, the host ns read right after
        it completed), or ``None`` before the device's first span."""
        cal = self._cal.get(device)
        return None if cal is None else (cal.event, cal.host())

    def pending(self) -> int:
        """Pairs closed and not yet resolved."""
        with self._lock:
            return sum(len(q) for q in self._queues.values())

    def synchronize(self) -> None:
        """Wait once for each device that has pairs waiting (``drain(wait_device=True)``)."""
        with self._lock:
            devices = sorted({device for (device, _), q in self._queues.items() if q})
        for device in devices:
            self.runtime.synchronize(device)

    def _span_ids(self, n: int) -> list[int]:
        out = []
        while len(out) < n:
            if self._ids == self._ids_end:
                first, count = _native._take_id_range()
                self._ids, self._ids_end = first, first + count
            take = min(n - len(out), self._ids_end - self._ids)
            out.extend(range(self._ids, self._ids + take))
            self._ids += take
        return out

    def resolve(self, rank: int = 0) -> dict[str, list]:
        """The completed pairs as device rows (columns of the span table, as lists; ``rank``
        for their rank column, the drain's); their events go back to the pool. Never waits:
        an incomplete pair stays queued, and the pairs behind it on its stream (they
        complete after it) too."""
        done: list[_Pair] = []
        with self._lock:
            for queue in self._queues.values():
                while queue and queue[0].end.query():
                    done.append(queue.popleft())
        columns: dict[str, list] = {
            name: []
            for name in (
                "span_id",
                "parent_id",
                "name",
                "category",
                "start_ns",
                "end_ns",
                "duration_ns",
                "depth",
                "thread_id",
                "thread_name",
                "pid",
                "rank",
                "arg",
                "error",
            )
        }
        if not done:
            return columns
        pid, r = os.getpid(), rank
        ids = self._span_ids(len(done))
        for span_id, p in zip(ids, done):
            cal = p.cal
            base = cal.host()
            start = base + round(cal.event.elapsed_time(p.start) * 1e6)
            end = base + round(cal.event.elapsed_time(p.end) * 1e6)
            end = max(end, start)
            key = (p.device, p.stream_id)
            last = self._last.get(key)
            if last is not None and last[0] < start < last[1] < end:
                start = last[1]  # a calibration change, not the device, made them overlap
            self._last[key] = (start, end)
            strings = self._strings.get(p.pair)
            if strings is None:
                strings = self._strings[p.pair] = _native._pair_strings(p.pair)
            columns["span_id"].append(span_id)
            columns["parent_id"].append(p.host_id)
            columns["name"].append(strings[0])
            columns["category"].append(strings[1])
            columns["start_ns"].append(start)
            columns["end_ns"].append(end)
            columns["duration_ns"].append(end - start)
            columns["depth"].append(p.depth + 1)
            columns["thread_id"].append(device_thread_id(p.device, p.stream_id))
            columns["thread_name"].append(device_thread_name(p.device, p.stream_id))
            columns["pid"].append(pid)
            columns["rank"].append(r)
            columns["arg"].append(p.arg)
            columns["error"].append(bool(p.error))
        with self._lock:
            for p in done:
                free = self._free.setdefault(p.device, [])
                free.append(p.start)
                free.append(p.end)
                p.start = p.end = p.stream = None
        return columns


# --------------------------------------------------------------------------- the process's recorder

_recorder: DeviceRecorder | None = None


def recorder(fn: str = "span") -> DeviceRecorder:
    """The process's CUDA recorder, made on the first device span (device spans call this
    module's :func:`start`/:func:`stop`, which go to it). Raises RuntimeError naming CUDA
    when there is none (no torch, or torch without a CUDA device)."""
    global _recorder
    if _recorder is not None:
        return _recorder
    try:
        import torch
    except ImportError:
        raise RuntimeError(
            f"{fn}(device='cuda'): CUDA is not available (torch is not installed); device "
            f"spans need PyTorch with a CUDA GPU"
        ) from None
    if not torch.cuda.is_available():
        raise RuntimeError(
            f"{fn}(device='cuda'): CUDA is not available (torch.cuda.is_available() is False: no "
            f"CUDA GPU or driver here)"
        )
    _recorder = DeviceRecorder(TorchCuda(torch))
    return _recorder


def install(runtime: Any) -> DeviceRecorder:
    """Use ``runtime`` (an object with :class:`TorchCuda`'s methods) for device spans from
    now on; returns the new recorder. For tests, and runtimes other than torch."""
    global _recorder
    _recorder = DeviceRecorder(runtime)
    return _recorder


def uninstall() -> None:
    """Forget the recorder and its pending pairs (making a device span looks for CUDA
    again; spans made before record host spans only)."""
    global _recorder
    _recorder = None


def active() -> DeviceRecorder | None:
    """The recorder, if any device span was made (``None`` costs drain nothing)."""
    return _recorder


def synchronize_pending() -> None:
    """``drain(wait_device=True)``: wait once for each device with pending pairs."""
    if _recorder is not None:
        _recorder.synchronize()


def resolve_table(meta: dict[bytes, bytes] | None, rank: int = 0):
    """The completed device pairs as a span table (``SPAN_SCHEMA``, ``meta`` as metadata,
    ``rank`` in the rank column), or ``None`` when there are none."""
    if _recorder is None:
        return None
    columns = _recorder.resolve(rank)
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


def start(host_id: int, depth: int, pair: int) -> None:
    """Called by a device span's ``__enter__`` (the C core): the recorder's start."""
    if _recorder is not None:
        _recorder.start(host_id, depth, pair)


def stop(host_id: int, arg: int | None, error: bool) -> None:
    """Called by a device span's ``__exit__`` (the C core): the recorder's stop."""
    if _recorder is not None:
        _recorder.stop(host_id, arg, error)


def _after_fork_child() -> None:
    # The parent's CUDA context and events are not the child's: its pairs are not ours.
    global _recorder
    if _recorder is not None:
        _recorder = DeviceRecorder(_recorder.runtime)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_child)
