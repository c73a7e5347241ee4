"""Perfetto protobuf trace (TrackEvent), written and read by the compiled codec.

``_perfetto_codec`` (Cython) owns the wire format (see its docstring): one encoder, a typed
pass over the columns' buffers, and one streaming decoder, a block of the file at a time.
Here: the table's columns turned into the contiguous arrays the codec takes (dictionary
codes, thread and process tables), the few descriptor packets, and the decoder's columns
turned back into a span table. The table's schema metadata travels as a process label, so
a round trip keeps it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .._schema import META_ARGV, META_HOST, SPAN_SCHEMA, TRACE_SCHEMA
from .._selftime import note_self_wait
from . import _perfetto_codec as codec
from ._base import Exporter, Progress, TraceFileError, note_skipped, open_regular_file
from ._codec_inputs import (
    bool_values,
    collective_flows,
    column_values,
    device_flows,
    dictionary_codes,
    nullable_values,
    thread_table,
)
from ._lanes import assign_lanes, restore_lanes

__all__ = ["PerfettoExporter"]

#: Bytes read per block: the decoder never holds more of the file than this (plus one
#: packet, which is small in our traces and refused past 64 MiB in any).
_READ_BLOCK = 4 << 20
#: Bytes of encoded packets buffered between writes.
_WRITE_BUFFER = 4 << 20
_INT32_MAX = (1 << 31) - 1
#: The process label that carries the table's schema metadata (JSON, on the first process).
_META_LABEL = "hotspan.meta"


class PerfettoExporter(Exporter):
    keeps_metadata = True
    keeps_row_order = False
    writes_counters = True

    # ------------------------------------------------------------------ write

    def _write(self, table: pa.Table, path: Path, counters: pa.Table | None = None) -> None:
        # the spans of asyncio tasks: their self and wait times, which no loader can compute
        table = note_self_wait(table)
        table, _ = assign_lanes(table)  # overlapping asyncio task trees on their own tracks
        n = table.num_rows
        duration = column_values(table, "duration_ns", np.int64)
        start = column_values(table, "start_ns", np.int64)
        if n and duration.min() < 0:
            bad = int((duration < 0).sum())
            raise ValueError(f"{bad} span(s) have a negative duration_ns; a trace cannot show them")
        if n and start.min() < 0:
            raise ValueError("Perfetto timestamps cannot be negative; start_ns must be >= 0")
        name, names = dictionary_codes(table.column("name"))
        category, categories = dictionary_codes(table.column("category"))
        thread_name, thread_names = dictionary_codes(table.column("thread_name"))
        encoded = {
            what: [s.encode() for s in strings]
            for what, strings in (
                ("name", names),
                ("category", categories),
                ("thread name", thread_names),
            )
        }
        _refuse_oversized_packets(encoded)
        thread, threads, own_name = _threads(table, thread_name)
        processes = list(dict.fromkeys((pid, rank) for pid, rank, _ in threads))
        metadata = dict(table.schema.metadata or {})
        header = _descriptors(threads, processes, own_name, thread_names, metadata, n)
        parent_id, has_parent = nullable_values(table, "parent_id", np.uint64)
        arg, has_arg = nullable_values(table, "arg", np.int64)
        flow_out, flow_in = device_flows(table)  # host span -> its device row
        collective_flows(table, flow_out, flow_in)  # the ranks' spans of one collective
        if not (flow_out.any() or flow_in.any()):  # none (most tables): the codec reads none
            flow_out, flow_in = flow_out[:0], flow_in[:0]
        with open(path, "wb") as sink, Progress(n, f"writing {path.name}") as progress:
            codec.encode(
                sink.fileno(),
                header,
                _WRITE_BUFFER,
                start,
                duration,
                column_values(table, "depth", np.int32),
                column_values(table, "span_id", np.uint64),
                parent_id,
                has_parent,
                arg,
                has_arg,
                bool_values(table, "error"),
                flow_out,
                flow_in,
                name,
                category,
                thread,
                thread_name,
                own_name,
                encoded["name"],
                encoded["category"],
                encoded["thread name"],
                1 + len(processes),
                progress.advance,
            )
        if counters is not None and counters.num_rows:
            from ._perfetto_counters import counter_packets

            # after the spans, on a sequence of their own (perfetto_counters.py)
            packets = counter_packets(counters, {key: 1 + i for i, key in enumerate(processes)})
            with open(path, "ab") as sink:
                sink.write(packets)

    # ------------------------------------------------------------------ read

    def _read(self, path: Path) -> pa.Table:
        decoder = codec.Decoder()
        with open_regular_file(path) as stream:
            size = os.fstat(stream.fileno()).st_size
            if size == 0:
                raise TraceFileError(path, "empty file, not a Perfetto trace")
            try:
                decoder.read(stream.fileno(), _READ_BLOCK, size)
            except codec.CodecError as exc:
                raise TraceFileError(path, f"malformed Perfetto trace: {exc}") from exc
        return restore_lanes(_table(decoder, path))


# --------------------------------------------------------------------------- columns to the codec


def _refuse_oversized_packets(encoded: dict[str, list[bytes]]) -> None:
    """Refuse, before a byte is written, strings that would make a packet larger than a
    Perfetto reader takes (``PACKET_LIMIT``, 64 MiB; hotspan's reader refuses it past
    that): one packet interns a span's name with its category, and an event carries its
    thread's name when the thread was renamed."""
    limit = codec.PACKET_LIMIT - (1 << 10)  # the packet's own fields around the strings
    longest = {what: max(strings, key=len, default=b"") for what, strings in encoded.items()}
    if len(longest["name"]) + len(longest["category"]) > limit:
        what = "name" if len(longest["name"]) >= len(longest["category"]) else "category"
    elif len(longest["thread name"]) > limit:
        what = "thread name"
    else:
        return
    text = longest[what]
    raise ValueError(
        f"a span {what} of {len(text):,} bytes ({text[:40].decode('utf-8', 'replace')!r}...): "
        f"a Perfetto trace packet holds at most {codec.PACKET_LIMIT >> 20} MiB; "
        "export this table to .parquet, .arrow or .json instead"
    )


def _threads(
    table: pa.Table, thread_name: np.ndarray
) -> tuple[np.ndarray, list[tuple[int, int, int]], np.ndarray]:
    """Per row the index of its thread; the threads (pid, rank, tid) in trace order (by
    rank, then pid, then thread id); and each thread's name: the one most of its rows carry
    (ties: the smaller code), the others kept per span (a thread renamed mid-trace)."""
    codes, keys, name_rows = codec.thread_codes(
        column_values(table, "pid", np.int64),
        column_values(table, "rank", np.int32),
        column_values(table, "thread_id", np.int64),
        thread_name,
    )
    return thread_table(codes, keys, name_rows)


def _descriptors(
    threads: list[tuple[int, int, int]],
    processes: list[tuple[int, int]],
    own_name: np.ndarray,
    thread_names: list[str],
    metadata: dict[bytes, bytes],
    spans: int,
) -> bytes:
    """The track descriptor packets (sequence 1): processes, then threads. A process's
    pid is an int32 in Perfetto: real pids are renumbered when one does not fit or two
    ranks share one (the labels keep the real ones)."""
    pids = [pid for pid, _ in processes]
    if not all(0 <= pid <= _INT32_MAX for pid in pids) or len(set(pids)) != len(pids):
        descriptor_pid = list(range(1, len(pids) + 1))
    else:
        descriptor_pid = pids
    host = metadata.get(META_HOST, b"").decode("utf-8", "replace")
    argv = []
    if len(processes) == 1 and META_ARGV in metadata:
        try:
            argv = [str(a) for a in json.loads(metadata[META_ARGV])]
        except (ValueError, TypeError):
            argv = []
    meta_label = None
    if metadata:
        # surrogateescape + ASCII JSON: any bytes survive the round trip.
        meta_label = f"{_META_LABEL}=" + json.dumps(
            {
                k.decode("utf-8", "surrogateescape"): v.decode("utf-8", "surrogateescape")
                for k, v in metadata.items()
            }
        )
        if not processes:  # an empty table: a process with no threads carries it
            processes, descriptor_pid = [(0, 0)], [0]
    out = []
    for index, (pid, rank) in enumerate(processes):
        body = codec.field_varint(codec.PROCESS_PID, descriptor_pid[index])
        body += b"".join(codec.field_bytes(codec.PROCESS_CMDLINE, a) for a in argv)
        body += codec.field_bytes(
            codec.PROCESS_NAME, f"rank {rank} @ {host}" if host else f"rank {rank}"
        )
        body += codec.field_bytes(codec.PROCESS_LABELS, f"hotspan.rank={rank}")
        body += codec.field_bytes(codec.PROCESS_LABELS, f"hotspan.pid={pid}")
        if index == 0 and meta_label is not None:
            body += codec.field_bytes(codec.PROCESS_LABELS, meta_label)
        if index == 0:  # how many spans the trace holds: a load that finds fewer says so
            body += codec.field_bytes(codec.PROCESS_LABELS, f"hotspan.spans={spans}")
        track = codec.field_varint(codec.TRACK_UUID, 1 + index) + codec.field_bytes(
            codec.TRACK_PROCESS, body
        )
        out.append(
            codec.packet(
                codec.field_bytes(60, track) + codec.field_varint(10, codec.DESCRIPTOR_SEQUENCE)
            )
        )
    process_index = {key: i for i, key in enumerate(processes)}
    for index, (pid, rank, tid) in enumerate(threads):
        process = process_index[(pid, rank)]
        body = (
            codec.field_varint(codec.THREAD_PID, descriptor_pid[process])
            + codec.field_varint(codec.THREAD_TID, tid)
            + codec.field_bytes(codec.THREAD_NAME, thread_names[own_name[index]])
        )
        track = (
            codec.field_varint(codec.TRACK_UUID, 1 + len(processes) + index)
            + codec.field_varint(codec.TRACK_PARENT_UUID, 1 + process)
            + codec.field_bytes(codec.TRACK_THREAD, body)
        )
        out.append(
            codec.packet(
                codec.field_bytes(60, track) + codec.field_varint(10, codec.DESCRIPTOR_SEQUENCE)
            )
        )
    # An empty table still makes a non-empty file (one bare packet): an empty file is
    # what a failed or truncated write looks like.
    return b"".join(out) or codec.packet(codec.field_varint(10, codec.DESCRIPTOR_SEQUENCE))


# --------------------------------------------------------------------------- columns from the codec


def _table(decoder: codec.Decoder, path: Path) -> pa.Table:
    def fail(problem: str) -> TraceFileError:
        return TraceFileError(path, problem)

    metadata = _metadata(decoder.processes, fail)
    columns = decoder.columns()
    n = len(columns["start"])
    schema = TRACE_SCHEMA.with_metadata(metadata or None)
    # The span count the writer put in the first process's labels (older files: none).
    written = sum(
        int(p["spans"]) for p in decoder.processes.values() if str(p.get("spans") or "").isdigit()
    )
    missing = (
        {"span(s) missing: the trace was written with more (packets cut out?)": written - n}
        if written > n
        else {}
    )
    if n == 0:
        if missing:
            raise fail(f"no span left of the {written:,} it was written with (packets cut out?)")
        return SPAN_SCHEMA.with_metadata(metadata or None).empty_table()
    thread = _thread_columns(decoder, columns.pop("track_uuids"), columns.pop("track"), fail)
    flags = columns.pop("flags")
    start, end, duration = columns.pop("start"), columns.pop("end"), columns.pop("duration")

    def bits(flag: int) -> pa.Buffer:
        """The rows' flag as an Arrow bitmap (validity or booleans), without a copy of
        the values it goes with."""
        return pa.py_buffer(np.packbits(flags & flag, bitorder="little"))  # nonzero: 1

    arrays = {
        "span_id": pa.array(columns.pop("span_id"), pa.uint64()),
        "parent_id": pa.Array.from_buffers(
            pa.uint64(), n, [bits(codec.ROW_HAS_PARENT), pa.py_buffer(columns.pop("parent_id"))]
        ),
        "name": _strings(columns.pop("name"), decoder.names, flags, 0, None, "name", fail),
        "category": _strings(
            columns.pop("category"),
            decoder.categories,
            flags,
            codec.ROW_HAS_CATEGORY,
            bits(codec.ROW_HAS_CATEGORY),
            "category",
            fail,
        ),
        "start_ns": pa.array(start, pa.int64()),
        "end_ns": pa.array(end, pa.int64()),
        "duration_ns": pa.array(duration, pa.int64()),
        "depth": pa.array(columns.pop("depth"), pa.int32()),
        "thread_id": thread["tid"],
        "thread_name": thread["name"],
        "pid": thread["pid"],
        "rank": thread["rank"],
        "arg": pa.Array.from_buffers(
            pa.int64(), n, [bits(codec.ROW_HAS_ARG), pa.py_buffer(columns.pop("arg"))]
        ),
        "error": pa.Array.from_buffers(pa.bool_(), n, [None, bits(codec.ROW_ERROR)]),
    }
    # self_ns comes in conform_to_schema (Exporter.read), once the lanes are the real threads again
    return note_skipped(pa.table(arrays, schema=schema), path, missing)


def _metadata(
    processes: dict[Any, Any], fail: Callable[[str], TraceFileError]
) -> dict[bytes, bytes]:
    for process in processes.values():
        if process["meta"] is not None:
            try:
                meta = json.loads(process["meta"])
                return {
                    k.encode("utf-8", "surrogateescape"): v.encode("utf-8", "surrogateescape")
                    for k, v in meta.items()
                }
            except (ValueError, AttributeError, TypeError) as exc:
                raise fail(
                    f"the {_META_LABEL} label is not a JSON object of strings: {exc}"
                ) from exc
    return {}


def _thread_columns(
    decoder: codec.Decoder,
    track_uuids: np.ndarray,
    track: np.ndarray,
    fail: Callable[[str], TraceFileError],
) -> dict[str, Any]:
    """Per row: pid, rank, tid (from its track's thread and process descriptors) and the
    thread name (a dictionary array; a renamed span keeps its own)."""
    pid: list[int] = []
    rank: list[int] = []
    tid: list[int] = []
    name_code: list[int] = []
    names: dict[str, int] = {}
    for uuid in track_uuids.tolist():
        thread = decoder.threads.get(uuid)
        if thread is None:
            raise fail(f"an event on track {uuid}, which no thread descriptor declares")
        process = decoder.processes.get(thread["parent"])
        if process is None:
            raise fail(f"thread track {uuid} has no process descriptor")
        pid.append(process["pid"])
        rank.append(process["rank"])
        tid.append(thread["tid"])
        name_code.append(names.setdefault(thread["name"], len(names)))
    if any(not -(1 << 31) <= r <= _INT32_MAX for r in rank):
        raise fail("a rank label out of the int32 range")
    n = len(track)
    row_pid, row_rank, row_tid, row_name = codec.track_columns(
        track,
        np.array(pid, np.int64),
        np.array(rank, np.int32),
        np.array(tid, np.int64),
        np.array(name_code, np.int32),
    )
    if decoder.renamed:
        codes = np.frombuffer(row_name, np.int32, n)
        for row, text in decoder.renamed.items():
            codes[row] = names.setdefault(text, len(names))
    return {
        "pid": pa.Array.from_buffers(pa.int64(), n, [None, row_pid]),
        "rank": pa.Array.from_buffers(pa.int32(), n, [None, row_rank]),
        "tid": pa.Array.from_buffers(pa.int64(), n, [None, row_tid]),
        "name": pa.DictionaryArray.from_buffers(
            pa.dictionary(pa.int32(), pa.string()),
            n,
            [None, row_name],
            pa.array(list(names), pa.string()),
        ),
    }


def _strings(
    iids: np.ndarray,
    table: dict[Any, Any],
    flags: np.ndarray,
    flag: int,
    validity: pa.Buffer | None,
    what: str,
    fail: Callable[[str], TraceFileError],
) -> pa.Array:
    """Interned ids as a dictionary array, mapped in place (null where the row's flags
    lack ``flag``, which ``validity`` says as a bitmap; 0, None: none is null)."""
    keys = np.array(sorted(table), np.int64)
    dictionary = pa.array([table[k] for k in keys.tolist()], pa.string())
    # iid -> dictionary index, one slot past the largest for ids never interned. Our iids
    # are dense (code + 1); a sparse table (someone else's ids) maps through searchsorted.
    if len(keys) and keys[-1] > 4 * len(keys) + (1 << 20):
        dense = np.searchsorted(keys, iids.astype(np.int64))
        found = keys[np.minimum(dense, len(keys) - 1)] == iids
        iids[:] = np.where(found, dense + 1, 0)  # dense ids now: 1..len(keys), 0 never defined
        keys = np.arange(1, len(keys) + 1)
    lookup = np.full(int(keys[-1]) + 2 if len(keys) else 1, -1, np.int32)
    lookup[keys] = np.arange(len(keys), dtype=np.int32)
    missing = codec.lookup_codes(iids, lookup, flags, flag)
    if missing >= 0:
        raise fail(f"an event's {what} is an interned id never defined")
    return pa.DictionaryArray.from_buffers(
        pa.dictionary(pa.int32(), pa.string()),
        len(iids),
        [validity, pa.py_buffer(iids)],
        dictionary,
    )
