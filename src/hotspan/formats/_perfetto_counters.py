"""Counters in a Perfetto trace: a counter track (``TrackDescriptor.counter``) per (process,
counter name) under the process's track, and a ``COUNTER`` ``TrackEvent`` per value, on a
trusted packet sequence of their own, appended after the spans' packets
(``hotspan.export(spans, "t.pftrace", counters=table)``); read back by
:func:`read_counters` (``hotspan.load_counters``). The span decoder skips them.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pyarrow as pa

from .._schema import COUNTER_SCHEMA
from . import _perfetto_codec as codec
from ._base import TraceFileError

__all__ = ["SEQUENCE", "counter_packets", "read_counters"]

#: The counters' packet sequence: past any the span encoder uses (2 + thread index).
SEQUENCE = 0x7FFF0001
#: Counter track uuids: past the process and thread tracks' (1 + index).
_UUID_BASE = 1 << 48
_TRACK_NAME, _TRACK_COUNTER = 2, 8
_EVENT_TYPE, _EVENT_TRACK, _COUNTER_VALUE, _DOUBLE_COUNTER_VALUE = 9, 11, 30, 44
_TYPE_COUNTER = 4
_TIMESTAMP, _SEQUENCE_ID, _TRACK_EVENT, _SEQUENCE_FLAGS, _TRACK_DESCRIPTOR = 8, 10, 11, 13, 60
#: The label a counter track's name carries the pid and rank in: "name" is what Perfetto shows.
_LABEL_PREFIX = "hotspan.counter"


def _field_double(number: int, value: float) -> bytes:
    return _varint((number << 3) | 1) + struct.pack("<d", value)


def _varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def counter_packets(counters: pa.Table, process_uuid: dict[tuple[int, int], int]) -> bytes:
    """The packets of ``counters``: a descriptor per (pid, rank, name) under its process's
    track (``process_uuid``; a process without one gets none: the track stands alone), then
    the values. NaN and infinities are written as doubles (Perfetto keeps them)."""
    if not counters.num_rows:
        return b""
    out = []
    tracks: dict[tuple[int, int, str], int] = {}
    # (time_ns, name, value, rank, pid): the schema's order
    rows = zip(*(counters.column(c).to_pylist() for c in COUNTER_SCHEMA.names))
    first = True
    for time_ns, name, value, rank, pid in rows:
        key = (pid, rank, name)
        uuid = tracks.get(key)
        if uuid is None:
            uuid = tracks[key] = _UUID_BASE + len(tracks)
            body = codec.field_varint(1, uuid) + codec.field_bytes(_TRACK_NAME, name)
            parent = process_uuid.get((pid, rank))
            if parent is not None:
                body += codec.field_varint(5, parent)
            # pid and rank for read_counters, in the descriptor's description (field 14):
            # Perfetto shows the track's name and ignores what it does not know
            body += codec.field_bytes(14, f"{_LABEL_PREFIX} pid={pid} rank={rank}")
            body += codec.field_bytes(_TRACK_COUNTER, b"")
            out.append(
                codec.packet(
                    codec.field_bytes(_TRACK_DESCRIPTOR, body)
                    + codec.field_varint(_SEQUENCE_ID, SEQUENCE)
                )
            )
        if time_ns < 0:
            raise ValueError("Perfetto timestamps cannot be negative; counter time_ns must be >= 0")
        if math.isfinite(value) and value.is_integer() and abs(value) < 2**63:
            number = codec.field_varint(_COUNTER_VALUE, int(value))
        else:
            number = _field_double(_DOUBLE_COUNTER_VALUE, value)
        event = (
            codec.field_varint(_EVENT_TYPE, _TYPE_COUNTER)
            + codec.field_varint(_EVENT_TRACK, uuid)
            + number
        )
        body = (
            codec.field_varint(_TIMESTAMP, time_ns)
            + codec.field_bytes(_TRACK_EVENT, event)
            + codec.field_varint(_SEQUENCE_ID, SEQUENCE)
        )
        if first:
            body += codec.field_varint(_SEQUENCE_FLAGS, 1)  # incremental state cleared
            first = False
        out.append(codec.packet(body))
    return b"".join(out)


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _ints(fields: list[tuple[int, int | bytes]], number: int) -> list[int]:
    return [v for k, v in fields if k == number and isinstance(v, int)]


def _bytes(fields: list[tuple[int, int | bytes]], number: int) -> list[bytes]:
    return [v for k, v in fields if k == number and isinstance(v, bytes)]


def _descriptor(d: list[tuple[int, int | bytes]]) -> tuple[int, tuple[str, int, int]]:
    """A counter track descriptor's uuid, and its (name, pid, rank)."""
    uuid = next(iter(_ints(d, 1)), 0)
    name = next(iter(_bytes(d, _TRACK_NAME)), b"").decode("utf-8", "replace")
    pid = rank = 0
    for label in _bytes(d, 14):
        if label.startswith(_LABEL_PREFIX.encode()):
            parts = dict(p.split("=", 1) for p in label.decode().split()[1:] if "=" in p)
            pid, rank = int(parts.get("pid", 0)), int(parts.get("rank", 0))
    return uuid, (name, pid, rank)


def read_counters(path: Path) -> pa.Table:
    """The counters of a Perfetto trace: every ``COUNTER`` event of a counter track (any
    writer's; pid and rank from hotspan's label, else 0)."""
    data = Path(path).read_bytes()
    names: dict[int, tuple[str, int, int]] = {}
    times: list[int] = []
    values: list[float] = []
    uuids: list[int] = []
    try:
        for packet in _bytes(codec.parse_fields(data), 1):
            if _TYPE_COUNTER_MARK not in packet and _COUNTER_DESCRIPTOR_MARK not in packet:
                continue  # a span's packet: no parse
            fields = codec.parse_fields(packet)
            ts = next(iter(_ints(fields, _TIMESTAMP)), None)
            for body in _bytes(fields, _TRACK_DESCRIPTOR):
                d = codec.parse_fields(body)
                if _bytes(d, _TRACK_COUNTER):
                    uuid, track = _descriptor(d)
                    names[uuid] = track
            for event in _bytes(fields, _TRACK_EVENT):
                e = codec.parse_fields(event)
                if _TYPE_COUNTER not in _ints(e, _EVENT_TYPE) or ts is None:
                    continue
                ints = _ints(e, _COUNTER_VALUE)
                value = float(_signed(ints[0])) if ints else _double_of(event, path)
                if value is None:
                    continue
                times.append(ts)
                values.append(value)
                uuids.append(next(iter(_ints(e, _EVENT_TRACK)), 0))
    except codec.CodecError as exc:
        raise TraceFileError(path, f"malformed Perfetto trace: {exc}") from exc
    except ValueError as exc:
        raise TraceFileError(path, f"malformed Perfetto counter track: {exc}") from exc
    named = [names.get(u, (f"track {u}", 0, 0)) for u in uuids]
    return pa.Table.from_arrays(
        [
            pa.array(times, pa.int64()),
            pa.array([n for n, _, _ in named], pa.string()),
            pa.array(values, pa.float64()),
            pa.array([r for _, _, r in named], pa.int32()),
            pa.array([p for _, p, _ in named], pa.int64()),
        ],
        schema=COUNTER_SCHEMA,
    )


#: Quick filters before parsing a packet: "type: COUNTER" in a TrackEvent, and an empty
#: CounterDescriptor in a TrackDescriptor.
_TYPE_COUNTER_MARK = bytes([(_EVENT_TYPE << 3), _TYPE_COUNTER])
_COUNTER_DESCRIPTOR_MARK = bytes([(_TRACK_COUNTER << 3) | 2])


def _double_of(event: bytes, path: Path) -> float | None:
    """The double_counter_value of an event (parse_fields skips fixed64 fields): a walk of
    its fields."""
    at, n = 0, len(event)
    while at < n:
        tag, at = _read_varint(event, at, path)
        wire = tag & 7
        if wire == 0:
            _, at = _read_varint(event, at, path)
        elif wire == 1:
            if at + 8 > n:
                break
            if tag >> 3 == _DOUBLE_COUNTER_VALUE:
                return float(struct.unpack_from("<d", event, at)[0])
            at += 8
        elif wire == 2:
            size, at = _read_varint(event, at, path)
            at += size
        elif wire == 5:
            at += 4
        else:
            break
    return None


def _read_varint(data: bytes, at: int, path: Path) -> tuple[int, int]:
    value = shift = 0
    while at < len(data):
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, at
        shift += 7
    raise TraceFileError(path, "malformed Perfetto counter: a varint runs past its event")
