"""Perfetto protobuf trace (TrackEvent), written with a vectorised encoder.

The file is a stream of ``TracePacket``s:

* a ``TrackDescriptor`` per process (pid, name ``rank N @ host``, labels
  ``hotspan.rank=N`` and ``hotspan.pid=P``: the descriptor's pid is an int32 and is
  renumbered when the real one does not fit or two ranks share it) and per thread (tid,
  thread name);
* per thread one trusted packet sequence: its first packet clears the incremental state
  and interns the names, categories and debug annotation names the thread uses; later
  packets intern what later batches add;
* per span a ``SLICE_BEGIN``/``SLICE_END`` pair, per instant (``duration_ns == 0``) an
  ``INSTANT``, in order on the thread's track, with debug annotations ``span_id``,
  ``parent_id``, ``depth``, ``arg``, ``error`` (only when true) and ``thread_name`` (only
  for the rare span whose thread was renamed mid-trace).

The ``perfetto`` package's builder takes ~7 s per million spans; here each batch of
packets is sized and written by numpy (``_protobuf``), ends of spans still open at a
batch's boundary carried to the next batch. :meth:`PerfettoExporter.read` reads back the
traces written here (not arbitrary Perfetto traces).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .._schema import META_ARGV, SPAN_SCHEMA
from . import _protobuf as pb
from .base import Exporter, Progress, TraceFileError
from ._spans import TraceLayout

# TracePacket fields
_TIMESTAMP, _SEQUENCE_ID, _TRACK_EVENT, _INTERNED_DATA, _SEQUENCE_FLAGS, _TRACK_DESCRIPTOR = 8, 10, 11, 12, 13, 60
_INCREMENTAL_STATE_CLEARED, _NEEDS_INCREMENTAL_STATE = 1, 2
# TrackEvent fields and types
_EVENT_CATEGORY_IIDS, _EVENT_ANNOTATIONS, _EVENT_TYPE, _EVENT_NAME_IID, _EVENT_TRACK_UUID = 3, 4, 9, 10, 11
_SLICE_BEGIN, _SLICE_END, _INSTANT = 1, 2, 3
# DebugAnnotation fields
_ANNOTATION_NAME_IID, _ANNOTATION_BOOL, _ANNOTATION_UINT, _ANNOTATION_INT, _ANNOTATION_STRING = 1, 2, 3, 4, 6
# InternedData fields
_INTERNED_CATEGORIES, _INTERNED_NAMES, _INTERNED_ANNOTATION_NAMES = 1, 2, 3
# TrackDescriptor / ProcessDescriptor / ThreadDescriptor fields
_TRACK_UUID, _TRACK_PARENT_UUID, _TRACK_PROCESS, _TRACK_THREAD = 1, 5, 3, 4
_PROCESS_PID, _PROCESS_CMDLINE, _PROCESS_NAME, _PROCESS_LABELS = 1, 2, 6, 8
_THREAD_PID, _THREAD_TID, _THREAD_NAME = 1, 2, 5

#: Debug annotation names and the interned ids every sequence gives them.
_ANNOTATIONS = ("span_id", "parent_id", "depth", "arg", "error", "thread_name")
_ANNOTATION_IID = {name: iid for iid, name in enumerate(_ANNOTATIONS, start=1)}
_INT32_MAX = (1 << 31) - 1
_DESCRIPTOR_SEQUENCE = 1


class PerfettoExporter(Exporter):
    keeps_metadata = False
    keeps_row_order = False

    # ------------------------------------------------------------------ write

    def _write(self, table: pa.Table, path: Path) -> None:
        layout = TraceLayout(table)
        if layout.num_rows and layout.start_ns < 0:
            raise ValueError("Perfetto timestamps cannot be negative; start_ns must be >= 0")
        process_uuid = 1 + np.arange(layout.num_processes, dtype=np.int64)
        thread_uuid = 1 + layout.num_processes + np.arange(layout.num_threads, dtype=np.int64)
        thread_sequence = _DESCRIPTOR_SEQUENCE + 1 + np.arange(layout.num_threads, dtype=np.int64)
        names = [name.encode() for name in layout.names]
        categories = [category.encode() for category in layout.categories]
        thread_names = [name.encode() for name in layout.thread_names]

        with open(path, "wb") as sink, Progress(layout.num_rows, f"writing {path.name}") as progress:
            # An empty table still makes a non-empty file (one bare packet): an empty
            # file is what a failed or truncated write looks like.
            sink.write(self._descriptors(layout, process_uuid, thread_uuid) or _packet(
                pb.field_varint(_SEQUENCE_ID, _DESCRIPTOR_SEQUENCE)))
            interned = _Interning(layout, thread_sequence, names, categories)
            pending = _Ends.none()
            batches = layout.batches()
            batch = next(batches, None)
            while batch is not None:
                following = next(batches, None)
                n = batch.rows.num_rows
                start = batch.rows.column("start_ns").to_numpy()
                duration = batch.rows.column("duration_ns").to_numpy()
                depth = batch.rows.column("depth").to_numpy().astype(np.int64)
                spans = np.flatnonzero(duration > 0)
                # Opening events (begins, instants) in row order, ends of this batch's spans,
                # and ends carried from earlier batches, merged into trace order.
                kind = np.concatenate([np.full(len(pending), _SLICE_END),
                                       np.where(duration > 0, _SLICE_BEGIN, _INSTANT),
                                       np.full(len(spans), _SLICE_END)]).astype(np.int64)
                thread = np.concatenate([pending.thread, batch.thread, batch.thread[spans]]).astype(np.int64)
                time = np.concatenate([pending.time, start, (start + duration)[spans]])
                tie = np.concatenate([pending.tie, batch.tie, -2 * depth[spans]])
                row = np.concatenate([np.full(len(pending), -1), np.arange(n), np.full(len(spans), -1)])
                order = np.lexsort((tie, time, thread))
                kind, thread, time, tie, row = kind[order], thread[order], time[order], tie[order], row[order]
                if following is not None:
                    # Ends at or after the next batch's first event wait for that batch.
                    t0, s0, k0 = int(following.thread[0]), int(following.rows.column("start_ns")[0].as_py()), int(following.tie[0])
                    before = (thread < t0) | ((thread == t0) & ((time < s0) | ((time == s0) & (tie < k0))))
                    now = before | (row >= 0)
                    pending = _Ends(thread[~now], time[~now], tie[~now])
                    kind, thread, time, row = kind[now], thread[now], time[now], row[now]
                else:
                    pending = _Ends.none()
                sink.write(interned.packets(batch, duration == 0))
                sink.write(self._events(batch, kind, thread, time, row, thread_uuid, thread_sequence, thread_names).tobytes())
                progress.advance(n)
                batch = following

    @staticmethod
    def _descriptors(layout: TraceLayout, process_uuid: np.ndarray, thread_uuid: np.ndarray) -> bytes:
        pids = layout.process_pid
        if len(pids) and pids.min() >= 0 and pids.max() <= _INT32_MAX and len(np.unique(pids)) == len(pids):
            descriptor_pid = pids
        else:
            descriptor_pid = np.arange(1, len(pids) + 1, dtype=np.int64)
        argv = []
        if layout.num_processes == 1 and META_ARGV in layout.metadata:
            try:
                argv = [str(a) for a in json.loads(layout.metadata[META_ARGV])]
            except (ValueError, TypeError):
                argv = []
        out = bytearray()
        for process in range(layout.num_processes):
            body = pb.field_varint(_PROCESS_PID, int(descriptor_pid[process]))
            body += b"".join(pb.field_bytes(_PROCESS_CMDLINE, a) for a in argv)
            body += pb.field_bytes(_PROCESS_NAME, layout.process_name(process))
            body += pb.field_bytes(_PROCESS_LABELS, f"hotspan.rank={int(layout.process_rank[process])}")
            body += pb.field_bytes(_PROCESS_LABELS, f"hotspan.pid={int(layout.process_pid[process])}")
            track = pb.field_varint(_TRACK_UUID, int(process_uuid[process])) + pb.field_bytes(_TRACK_PROCESS, body)
            out += _packet(pb.field_bytes(_TRACK_DESCRIPTOR, track) + pb.field_varint(_SEQUENCE_ID, _DESCRIPTOR_SEQUENCE))
        for thread in range(layout.num_threads):
            process = int(layout.thread_process[thread])
            body = (pb.field_varint(_THREAD_PID, int(descriptor_pid[process]))
                    + pb.field_varint(_THREAD_TID, int(layout.thread_tid[thread]))
                    + pb.field_bytes(_THREAD_NAME, layout.thread_names[layout.thread_name[thread]]))
            track = (pb.field_varint(_TRACK_UUID, int(thread_uuid[thread]))
                     + pb.field_varint(_TRACK_PARENT_UUID, int(process_uuid[process]))
                     + pb.field_bytes(_TRACK_THREAD, body))
            out += _packet(pb.field_bytes(_TRACK_DESCRIPTOR, track) + pb.field_varint(_SEQUENCE_ID, _DESCRIPTOR_SEQUENCE))
        return bytes(out)

    @staticmethod
    def _events(batch, kind, thread, time, row, thread_uuid, thread_sequence, thread_names) -> np.ndarray:
        """The packets of one batch's events, in order, as bytes."""
        n = len(kind)
        opening = row >= 0
        source = np.where(opening, row, 0)
        rows = batch.rows

        def column(name: str) -> tuple[np.ndarray, np.ndarray]:
            values = rows.column(name).combine_chunks()
            valid = values.is_valid().to_numpy(zero_copy_only=False)
            filled = pc.fill_null(values, False if pa.types.is_boolean(values.type) else 0).to_numpy(zero_copy_only=False)
            return filled[source], valid[source]

        span_id, _ = column("span_id")
        parent_id, has_parent = column("parent_id")
        depth, _ = column("depth")
        arg, has_arg = column("arg")
        error, _ = column("error")
        category = batch.category[source]
        renamed = batch.thread_name[source]

        def annotation(name: str, value: pb.Node, present: np.ndarray) -> pb.Message:
            return pb.Message(_EVENT_ANNOTATIONS, [pb.Varint(_ANNOTATION_NAME_IID, _ANNOTATION_IID[name]), value], present)

        track_event = pb.Message(_TRACK_EVENT, [
            pb.Varint(_EVENT_TYPE, kind),
            pb.Varint(_EVENT_TRACK_UUID, thread_uuid[thread]),
            pb.Varint(_EVENT_CATEGORY_IIDS, category.astype(np.int64) + 1, opening & (category >= 0)),
            pb.Varint(_EVENT_NAME_IID, batch.name[source].astype(np.int64) + 1, opening),
            annotation("span_id", pb.Varint(_ANNOTATION_UINT, span_id.astype(np.uint64)), opening),
            annotation("parent_id", pb.Varint(_ANNOTATION_UINT, parent_id.astype(np.uint64)), opening & has_parent),
            annotation("depth", pb.Varint(_ANNOTATION_INT, depth.astype(np.int64)), opening),
            annotation("arg", pb.Varint(_ANNOTATION_INT, arg.astype(np.int64)), opening & has_arg),
            annotation("error", pb.Varint(_ANNOTATION_BOOL, 1), opening & error.astype(bool)),
            annotation("thread_name", pb.Bytes(_ANNOTATION_STRING, thread_names, np.maximum(renamed, 0)), opening & (renamed >= 0)),
        ])
        packet = pb.Message(1, [
            pb.Varint(_TIMESTAMP, time.astype(np.uint64)),
            track_event,
            pb.Varint(_SEQUENCE_ID, thread_sequence[thread]),
            pb.Varint(_SEQUENCE_FLAGS, _NEEDS_INCREMENTAL_STATE),
        ])
        return pb.encode(packet, n)

    # ------------------------------------------------------------------ read

    def _read(self, path: Path) -> pa.Table:
        try:
            table = _StreamReader(path).read()
        except pb.ProtobufError:
            table = None
        if table is not None:
            return table
        return self._read_whole(path)

    @staticmethod
    def _read_whole(path: Path) -> pa.Table:
        """Any trace (and the precise complaint about a broken one): the whole file at once."""
        data = path.read_bytes()
        if not data:
            raise TraceFileError(path, "empty file, not a Perfetto trace")
        starts, ends = _frame(data, path)
        buffer = np.frombuffer(data, np.uint8)
        try:
            return _Decoder(path, buffer, data).table(starts, ends)
        except pb.ProtobufError as exc:
            raise TraceFileError(path, f"malformed Perfetto trace: {exc}") from exc


def _packet(body: bytes) -> bytes:
    return pb.field_bytes(1, body)


class _Ends:
    """Ends of spans still open at a batch boundary: thread, time, tie."""

    def __init__(self, thread: np.ndarray, time: np.ndarray, tie: np.ndarray):
        self.thread, self.time, self.tie = thread, time, tie

    @classmethod
    def none(cls) -> "_Ends":
        return cls(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64))

    def __len__(self) -> int:
        return len(self.thread)


class _Interning:
    """Which names and categories each thread's sequence has been sent; the packets that
    send what a batch adds (the first one on a sequence also clears its state)."""

    def __init__(self, layout: TraceLayout, thread_sequence: np.ndarray, names: list[bytes], categories: list[bytes]):
        self.layout = layout
        self.thread_sequence = thread_sequence
        self.names = names
        self.categories = categories
        self.started: set[int] = set()
        self.sent_names: set[tuple[int, int]] = set()
        self.sent_categories: set[tuple[int, int]] = set()

    def packets(self, batch, instant: np.ndarray) -> bytes:
        wanted: dict[int, tuple[list[int], list[int]]] = {}
        for codes, sent, slot in ((batch.name, self.sent_names, 0), (batch.category, self.sent_categories, 1)):
            stride = max(len(self.names), len(self.categories), 1) + 1
            pairs = np.unique(batch.thread.astype(np.int64) * stride + codes)
            for thread, code in zip((pairs // stride).tolist(), (pairs % stride).tolist()):
                if code >= stride - 1 or (thread, code) in sent:  # -1 (no category) wraps to stride-1
                    continue
                sent.add((thread, code))
                wanted.setdefault(thread, ([], []))[slot].append(code)
        for thread in np.unique(batch.thread).tolist():
            wanted.setdefault(thread, ([], []))
        out = bytearray()
        for thread, (name_codes, category_codes) in sorted(wanted.items()):
            first = thread not in self.started
            if not first and not name_codes and not category_codes:
                continue
            self.started.add(thread)
            interned = b"".join(
                pb.field_bytes(_INTERNED_CATEGORIES, pb.field_varint(1, code + 1) + pb.field_bytes(2, self.categories[code]))
                for code in category_codes)
            interned += b"".join(
                pb.field_bytes(_INTERNED_NAMES, pb.field_varint(1, code + 1) + pb.field_bytes(2, self.names[code]))
                for code in name_codes)
            if first:
                interned += b"".join(
                    pb.field_bytes(_INTERNED_ANNOTATION_NAMES, pb.field_varint(1, iid) + pb.field_bytes(2, name))
                    for name, iid in _ANNOTATION_IID.items())
            flags = _INCREMENTAL_STATE_CLEARED if first else _NEEDS_INCREMENTAL_STATE
            out += _packet(pb.field_varint(_SEQUENCE_ID, int(self.thread_sequence[thread]))
                           + pb.field_varint(_SEQUENCE_FLAGS, flags)
                           + pb.field_bytes(_INTERNED_DATA, interned))
        return bytes(out)


# --------------------------------------------------------------------------- reading


def _packet_bounds(data: bytes, size: int) -> tuple[list[int], list[int], int, str | None]:
    """The TracePackets (field 1 of the Trace message) whole within ``data[:size]``: their
    starts and ends, where the scan stopped, and what stopped it when not a packet cut off
    by the end (None)."""
    starts: list[int] = []
    ends: list[int] = []
    pos = 0
    while pos < size:
        if data[pos] != 0x0A:
            return starts, ends, pos, "not a TracePacket (not a Perfetto trace?)"
        length, shift, at = 0, 0, pos + 1
        while True:
            if at >= size:
                return starts, ends, pos, None
            byte = data[at]
            at += 1
            length |= (byte & 0x7F) << shift
            if byte < 0x80:
                break
            shift += 7
            if shift > 63:
                return starts, ends, pos, "packet length is not a varint"
        if at + length > size:
            break
        starts.append(at)
        ends.append(at + length)
        pos = at + length
    return starts, ends, pos, None


def _frame(data: bytes, path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Start and end of every TracePacket of a whole trace."""
    starts, ends, pos, problem = _packet_bounds(data, len(data))
    if problem is not None:
        raise TraceFileError(path, f"byte {pos}: {problem}")
    if pos < len(data):
        raise TraceFileError(path, "truncated: the last packet runs past the end of the file")
    return np.array(starts, np.int64), np.array(ends, np.int64)


class _Decoder:
    def __init__(self, path: Path, buffer: np.ndarray, data: bytes):
        self.path = path
        self.buffer = buffer
        self.data = data

    def fail(self, problem: str) -> TraceFileError:
        return TraceFileError(self.path, problem)

    def table(self, starts: np.ndarray, ends: np.ndarray) -> pa.Table:
        packets = pb.walk(self.buffer, starts, ends)
        count = len(starts)
        timestamp, _ = packets.last_varint(_TIMESTAMP, count)
        sequence, _ = packets.last_varint(_SEQUENCE_ID, count)
        tracks = self._tracks(packets)
        names, categories, annotation_names = self._interned(packets, sequence)

        if _TRACK_EVENT not in packets.length:
            return SPAN_SCHEMA.empty_table()
        event_packet, event_start, event_end = packets.length[_TRACK_EVENT]
        order = np.argsort(event_packet, kind="stable")
        event_packet, event_start, event_end = event_packet[order], event_start[order], event_end[order]
        n_events = len(event_packet)
        events = pb.walk(self.buffer, event_start, event_end)
        kind, _ = events.last_varint(_EVENT_TYPE, n_events)
        track, has_track = events.last_varint(_EVENT_TRACK_UUID, n_events)
        name_iid, _ = events.last_varint(_EVENT_NAME_IID, n_events)
        category_iid, has_category = events.last_varint(_EVENT_CATEGORY_IIDS, n_events)
        time = timestamp[event_packet].astype(np.int64)
        kind = kind.astype(np.int64)
        if not has_track.all() or not np.isin(kind, (_SLICE_BEGIN, _SLICE_END, _INSTANT)).all():
            raise self.fail("has track events this reader does not know (not a trace hotspan wrote?)")

        # Each track's events in file order; a begin and its end share a nesting level.
        by_track = np.lexsort((event_packet, track))
        step = np.select([kind == _SLICE_BEGIN, kind == _SLICE_END], [1, -1], 0)[by_track]
        track_sorted = track[by_track]
        first_of_track = np.r_[True, track_sorted[1:] != track_sorted[:-1]]
        running = np.cumsum(step)
        track_begins = np.maximum.accumulate(np.where(first_of_track, np.arange(len(step)), 0))
        running -= (running - step)[track_begins]  # the count within each track only
        level = np.where(step < 0, running + 1, running)
        if (running < 0).any():
            raise self.fail("a slice ends that never began")
        slices = np.flatnonzero(step != 0)
        pairs = slices[np.lexsort((slices, level[slices], track_sorted[slices]))]
        if len(pairs) % 2 or not ((step[pairs[0::2]] == 1).all() and (step[pairs[1::2]] == -1).all()
                                   and (track_sorted[pairs[0::2]] == track_sorted[pairs[1::2]]).all()
                                   and (level[pairs[0::2]] == level[pairs[1::2]]).all()):
            raise self.fail("a slice begins and never ends")
        begin_event = by_track[pairs[0::2]]
        end_event = by_track[pairs[1::2]]
        span_event = np.concatenate([begin_event, np.flatnonzero(kind == _INSTANT)])
        span_end = np.concatenate([time[end_event], time[kind == _INSTANT]])
        # Rows in trace order: by track, then where the span opens in the file.
        row_order = np.lexsort((event_packet[span_event], track[span_event]))
        span_event, span_end = span_event[row_order], span_end[row_order]
        n = len(span_event)

        annotations = self._annotations(events, annotation_names, span_event)
        thread = self._thread_rows(tracks, track[span_event])
        start = time[span_event]
        columns = {
            "span_id": pa.array(annotations["span_id"][0].astype(np.uint64), pa.uint64()),
            "parent_id": pa.array(annotations["parent_id"][0].astype(np.uint64), pa.uint64(), mask=~annotations["parent_id"][1]),
            "name": _strings(name_iid[span_event], names, np.ones(n, bool), self.fail),
            "category": _strings(category_iid[span_event], categories, has_category[span_event], self.fail),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(span_end, pa.int64()),
            "duration_ns": pa.array(span_end - start, pa.int64()),
            "depth": pa.array(annotations["depth"][0].view(np.int64).astype(np.int32), pa.int32()),
            "thread_id": pa.array(thread["tid"], pa.int64()),
            "thread_name": self._thread_names(thread["name"], annotations["thread_name"]),
            "pid": pa.array(thread["pid"], pa.int64()),
            "rank": pa.array(thread["rank"].astype(np.int32), pa.int32()),
            "arg": pa.array(annotations["arg"][0].view(np.int64), pa.int64(), mask=~annotations["arg"][1]),
            "error": pa.array(annotations["error"][0] != 0, pa.bool_()),
        }
        if not annotations["span_id"][1].all():
            raise self.fail("a slice without a span_id annotation (not a trace hotspan wrote?)")
        return pa.table(columns, schema=SPAN_SCHEMA)

    def _tracks(self, packets: pb.Fields) -> dict:
        """uuid -> process or thread descriptor fields."""
        processes: dict[int, dict] = {}
        threads: dict[int, dict] = {}
        if _TRACK_DESCRIPTOR not in packets.length:
            return {"processes": processes, "threads": threads}
        for _, start, end in zip(*(column.tolist() for column in packets.length[_TRACK_DESCRIPTOR])):
            fields = pb.parse_fields(self.data[start:end])
            uuid = _one(fields, _TRACK_UUID, 0)
            process = _one(fields, _TRACK_PROCESS, None)
            thread = _one(fields, _TRACK_THREAD, None)
            if isinstance(process, bytes):
                body = pb.parse_fields(process)
                labels = dict(
                    label.decode().split("=", 1) for number, _, label in body
                    if number == _PROCESS_LABELS and isinstance(label, bytes) and b"=" in label)
                pid = _one(body, _PROCESS_PID, 0)
                processes[uuid] = {
                    "pid": int(labels.get("hotspan.pid", pid)),
                    "rank": int(labels.get("hotspan.rank", 0)),
                }
            elif isinstance(thread, bytes):
                body = pb.parse_fields(thread)
                name = _one(body, _THREAD_NAME, b"")
                threads[uuid] = {
                    "parent": _one(fields, _TRACK_PARENT_UUID, None),
                    "tid": _signed(_one(body, _THREAD_TID, 0)),
                    "name": name.decode() if isinstance(name, bytes) else str(name),
                }
        return {"processes": processes, "threads": threads}

    def _interned(self, packets: pb.Fields, sequence: np.ndarray) -> tuple[dict, dict, dict]:
        """iid -> string for names, categories and annotation names (the same ids on every
        sequence in our traces; a conflict means a trace we did not write)."""
        tables: tuple[dict, dict, dict] = ({}, {}, {})
        if _INTERNED_DATA not in packets.length:
            return tables
        slots = {_INTERNED_NAMES: 0, _INTERNED_CATEGORIES: 1, _INTERNED_ANNOTATION_NAMES: 2}
        for _, start, end in zip(*(column.tolist() for column in packets.length[_INTERNED_DATA])):
            for number, _, entry in pb.parse_fields(self.data[start:end]):
                if number not in slots or not isinstance(entry, bytes):
                    continue
                fields = pb.parse_fields(entry)
                iid, text = _one(fields, 1, None), _one(fields, 2, b"")
                if not isinstance(iid, int) or not isinstance(text, bytes):
                    raise self.fail("malformed interned string")
                table = tables[slots[number]]
                value = text.decode()
                if table.setdefault(iid, value) != value:
                    raise self.fail("interned ids differ between sequences (not a trace hotspan wrote?)")
        return tables

    def _annotations(self, events: pb.Fields, annotation_names: dict, span_event: np.ndarray) -> dict:
        """Per span: (value, present) of each debug annotation we write."""
        result = {}
        where = np.full(max(int(span_event.max(initial=-1)) + 1, 1), -1, np.int64)
        where[span_event] = np.arange(len(span_event))
        if _EVENT_ANNOTATIONS in events.length:
            event_index, start, end = events.length[_EVENT_ANNOTATIONS]
            annotations = pb.walk(self.buffer, start, end)
            count = len(event_index)
            name_iid, _ = annotations.last_varint(_ANNOTATION_NAME_IID, count)
            values = {number: annotations.last_varint(number, count)
                      for number in (_ANNOTATION_BOOL, _ANNOTATION_UINT, _ANNOTATION_INT)}
            strings = annotations.length.get(_ANNOTATION_STRING)
        else:
            event_index, name_iid, values, strings = np.empty(0, np.int64), np.empty(0, np.uint64), {}, None
        iid_of = {name: iid for iid, name in annotation_names.items()}
        fields = {"span_id": _ANNOTATION_UINT, "parent_id": _ANNOTATION_UINT, "depth": _ANNOTATION_INT,
                  "arg": _ANNOTATION_INT, "error": _ANNOTATION_BOOL}
        n = len(span_event)
        for name, number in fields.items():
            value = np.zeros(n, np.uint64)
            present = np.zeros(n, bool)
            if name in iid_of and number in values:
                mine = (name_iid == iid_of[name]) & values[number][1]
                mine &= event_index < len(where)
                rows = where[np.minimum(event_index[mine], len(where) - 1)]
                keep = rows >= 0
                value[rows[keep]] = values[number][0][mine][keep]
                present[rows[keep]] = True
            result[name] = (value, present)
        renamed: dict[int, str] = {}
        if "thread_name" in iid_of and strings is not None:
            annotation_index, start, end = strings
            for a, s, e in zip(annotation_index.tolist(), start.tolist(), end.tolist()):
                if name_iid[a] == iid_of["thread_name"] and event_index[a] < len(where) and where[event_index[a]] >= 0:
                    renamed[int(where[event_index[a]])] = self.data[s:e].decode()
        result["thread_name"] = renamed
        return result

    def _thread_rows(self, tracks: dict, track_of_row: np.ndarray) -> dict[str, np.ndarray]:
        threads, processes = tracks["threads"], tracks["processes"]
        uuids = sorted(threads)
        known = np.array(uuids, np.uint64)
        at = np.searchsorted(known, track_of_row) if len(known) else np.zeros(len(track_of_row), np.int64)
        if len(track_of_row) and (not len(known) or not (known[np.minimum(at, len(known) - 1)] == track_of_row).all()):
            raise self.fail("an event on a track no thread descriptor declares")
        info = []
        for uuid in uuids:
            thread = threads[uuid]
            process = processes.get(thread["parent"])
            if process is None:
                raise self.fail(f"thread track {uuid} has no process descriptor")
            info.append((process["pid"], process["rank"], thread["tid"], thread["name"]))
        return {
            "pid": np.array([i[0] for i in info], np.int64)[at] if info else np.empty(0, np.int64),
            "rank": np.array([i[1] for i in info], np.int64)[at] if info else np.empty(0, np.int64),
            "tid": np.array([i[2] for i in info], np.int64)[at] if info else np.empty(0, np.int64),
            "name": (np.array([i[3] for i in info], object)[at] if info else np.empty(0, object)),
        }

    @staticmethod
    def _thread_names(own: np.ndarray, renamed: dict[int, str]) -> pa.Array:
        names = own.copy()
        for row, name in renamed.items():
            names[row] = name
        return pc.dictionary_encode(pa.array(names.tolist(), pa.string()))


def _one(fields: list, number: int, default):
    value = default
    for field_number, _, field_value in fields:
        if field_number == number:
            value = field_value
    return value


def _signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def _strings(iids: np.ndarray, table: dict, present: np.ndarray, fail) -> pa.Array:
    """Interned ids as a dictionary array (null where not present)."""
    if not table:
        if present.any():
            raise fail("an event names a string that was never interned")
        return pa.DictionaryArray.from_arrays(pa.nulls(len(iids), pa.int32()), pa.array([], pa.string()))
    keys = np.array(sorted(table), np.uint64)
    at = np.searchsorted(keys, iids)
    clipped = np.minimum(at, len(keys) - 1)
    if not (keys[clipped][present] == iids[present]).all():
        raise fail("an event names a string that was never interned")
    dictionary = pa.array([table[int(k)] for k in keys], pa.string())
    return pa.DictionaryArray.from_arrays(pa.array(clipped.astype(np.int32), pa.int32(), mask=~present), dictionary)



# --------------------------------------------------------------------------- streaming reader

_READ_BLOCK = 4 << 20
_PAD = 16  # zero bytes after a block, so that a varint read never indexes past it
_EVENT_PACKET_START = 0x40  # our event packets begin with their timestamp (field 8, varint)
#: Per annotation name id we write: the wire tag of its value.
_ANNOTATION_VALUE_TAG = {1: 0x18, 2: 0x18, 3: 0x20, 4: 0x20, 5: 0x10, 6: 0x32}


class _NotOurs(pb.ProtobufError):
    """The streaming reader meets a packet outside our own layout: the whole-file reader
    takes the trace (and words the complaint when it is broken)."""


def _varints(buffer: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The varint at each position (the buffer is padded) and the position after it."""
    byte = buffer[positions]
    value = (byte & 0x7F).astype(np.uint64)
    more = np.flatnonzero(byte >= 0x80)
    if not len(more):
        return value, positions + 1
    after = positions + 1
    for k in range(1, 10):
        at = after[more]
        byte = buffer[at]
        value[more] |= (byte & 0x7F).astype(np.uint64) << np.uint64(7 * k)
        after[more] = at + 1
        more = more[byte >= 0x80]
        if not len(more):
            return value, after
    raise _NotOurs("varint longer than ten bytes")


def _frame_block(buffer: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """(body starts, body ends) of the whole packets in ``buffer[:size]`` and where the
    first incomplete one begins (``size`` when none).

    Every 0x0A byte is a candidate packet start, linked to where its packet would end;
    the true chain is what is reachable from byte 0: candidates nothing links to are
    dropped until none is (misaligned ones die within a few rounds).
    """
    candidate = np.flatnonzero(buffer[:size] == 0x0A)
    if not len(candidate) or candidate[0] != 0:
        raise _NotOurs("not a TracePacket")
    length, body = _varints(buffer, candidate + 1)
    end = body + np.minimum(length, np.uint64(1 << 40)).astype(np.int64)
    inside = end < size
    target = np.full(len(candidate), -2, np.int64)  # -2: ends at or past the block's end
    at = np.searchsorted(candidate, end[inside])
    hit = at < len(candidate)
    hit[hit] = candidate[at[hit]] == end[inside][hit]
    target[inside] = np.where(hit, at, -1)  # -1: ends where no packet begins
    alive = np.ones(len(candidate), bool)
    count = len(candidate)
    for _ in range(16):
        edges = target[alive]
        linked = np.bincount(edges[edges >= 0], minlength=len(candidate)) > 0
        linked[0] = True
        alive &= linked
        remaining = int(alive.sum())
        if remaining == count:
            break
        count = remaining
    else:
        return _frame_block_slowly(buffer, size)
    chain = np.flatnonzero(alive)
    links = target[chain]
    if not (links[:-1] == chain[1:]).all() or links[-1] != -2:
        raise _NotOurs("a packet ends where no packet begins")
    starts, ends = body[chain], end[chain]
    if ends[-1] > size:  # the last packet continues in the next block
        return starts[:-1], ends[:-1], int(candidate[chain[-1]])
    return starts, ends, size


def _frame_block_slowly(buffer: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`_frame_block` one packet at a time (when misaligned candidates keep linking up)."""
    starts, ends, pos, problem = _packet_bounds(buffer[:size].tobytes(), size)
    if problem is not None:
        raise _NotOurs(problem)
    return np.array(starts, np.int64), np.array(ends, np.int64), pos


class _StreamReader:
    """Our own traces, a few MB of packets at a time: event packets decoded field by field
    in the order the writer puts them (vectorised over the block), kept as compact columns;
    descriptors and interned strings (a few packets) decoded at the end with _Decoder."""

    def __init__(self, path: Path):
        self.path = path
        self.kind: list[np.ndarray] = []
        self.track: list[np.ndarray] = []
        self.time: list[np.ndarray] = []
        self.opening: dict[str, list[np.ndarray]] = {}
        self.renamed: dict[int, str] = {}
        self.other: list[bytes] = []
        self.openings = 0

    def read(self) -> pa.Table | None:
        with open(self.path, "rb") as stream:
            rest = b""
            while True:
                chunk = stream.read(_READ_BLOCK)
                if not chunk:
                    if rest:
                        raise _NotOurs("truncated")
                    break
                data = rest + chunk if rest else chunk
                buffer = np.zeros(len(data) + _PAD, np.uint8)
                buffer[: len(data)] = np.frombuffer(data, np.uint8)
                starts, ends, cut = _frame_block(buffer, len(data))
                rest = data[cut:]
                if len(starts):
                    self._block(buffer, starts, ends)
        if not self.kind and not self.other:
            return None  # an empty file: the whole-file reader says so
        return self._table()

    def _block(self, buffer: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> None:
        event = buffer[starts] == _EVENT_PACKET_START
        for s, e in zip(starts[~event].tolist(), ends[~event].tolist()):
            self.other.append(buffer[s:e].tobytes())
        p, end = starts[event], ends[event]
        n = len(p)
        if not n:
            return

        def expect(positions: np.ndarray, tag: int) -> np.ndarray:
            if not (buffer[positions] == tag).all():
                raise _NotOurs("an event packet outside our layout")
            return positions + 1

        time, p = _varints(buffer, p + 1)
        length, p = _varints(buffer, expect(p, (_TRACK_EVENT << 3) | 2))
        event_end = p + length.astype(np.int64)
        kind, p = _varints(buffer, expect(p, _EVENT_TYPE << 3))
        track, p = _varints(buffer, expect(p, _EVENT_TRACK_UUID << 3))

        def optional(positions: np.ndarray, tag: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            present = (buffer[positions] == tag) & (positions < event_end)
            values = np.zeros(n, np.uint64)
            rows = np.flatnonzero(present)
            if len(rows):
                positions = positions.copy()
                values[rows], positions[rows] = _varints(buffer, positions[rows] + 1)
            return values, present, positions

        category, has_category, p = optional(p, _EVENT_CATEGORY_IIDS << 3)
        name, _, p = optional(p, _EVENT_NAME_IID << 3)
        values = {iid: np.zeros(n, np.uint64) for iid in _ANNOTATION_VALUE_TAG}
        present = {iid: np.zeros(n, bool) for iid in _ANNOTATION_VALUE_TAG}
        active = np.flatnonzero(p < event_end)
        while len(active):
            q = expect(p[active], (_EVENT_ANNOTATIONS << 3) | 2)
            length, q = _varints(buffer, q)
            annotation_end = q + length.astype(np.int64)
            iid, q = _varints(buffer, expect(q, (_ANNOTATION_NAME_IID << 3)))
            tag = buffer[q]
            wanted = np.array([_ANNOTATION_VALUE_TAG.get(i, -1) for i in range(8)])[np.minimum(iid, 7).astype(np.intp)]
            if not (tag == wanted).all():
                raise _NotOurs("a debug annotation outside our layout")
            value, q = _varints(buffer, q + 1)
            string = tag == 0x32
            if string.any():
                q = q.copy()
                q[string] += value[string].astype(np.int64)
                for row, s, e in zip(active[string].tolist(), (q[string] - value[string].astype(np.int64)).tolist(),
                                     q[string].tolist()):
                    self.renamed[row] = buffer[s:e].tobytes().decode()
            if not (q == annotation_end).all():
                raise _NotOurs("a debug annotation outside our layout")
            for number in np.unique(iid).tolist():
                mine = iid == number
                values[number][active[mine]] = value[mine]
                present[number][active[mine]] = True
            p[active] = annotation_end
            active = active[annotation_end < event_end[active]]
        if not (p == event_end).all():
            raise _NotOurs("a track event runs past its length")
        _, p = _varints(buffer, expect(p, _SEQUENCE_ID << 3))
        _, p = _varints(buffer, expect(p, _SEQUENCE_FLAGS << 3))
        if not (p == end).all():
            raise _NotOurs("an event packet outside our layout")
        if not np.isin(kind, (_SLICE_BEGIN, _SLICE_END, _INSTANT)).all():
            raise _NotOurs("an unknown track event type")

        opening = kind != _SLICE_END
        # Renamed threads: keyed by the opening's number in the whole file.
        if self.renamed and any(row >= 0 for row in self.renamed):
            rank = np.cumsum(opening) - 1 + self.openings
            self.renamed = {(row if row < 0 else -1 - int(rank[row])): text for row, text in self.renamed.items()}
        columns = {
            "name": name, "category": category, "has_category": has_category,
            "span_id": values[1], "has_span_id": present[1], "parent_id": values[2], "has_parent_id": present[2],
            "depth": values[3], "arg": values[4], "has_arg": present[4], "error": present[5] & (values[5] != 0),
        }
        for key, column in columns.items():
            self.opening.setdefault(key, []).append(column[opening])
        self.openings += int(opening.sum())
        self.kind.append(kind.astype(np.int8))
        self.track.append(track)
        self.time.append(time.astype(np.int64))

    def _table(self) -> pa.Table | None:
        other = b"".join(_packet(body) for body in self.other)
        starts, ends = _frame(other, self.path)
        buffer = np.frombuffer(other, np.uint8)
        packets = pb.walk(buffer, starts, ends)
        decoder = _Decoder(self.path, buffer, other)
        if _TRACK_EVENT in packets.length:
            return None  # event packets in another layout
        tracks = decoder._tracks(packets)
        names, categories, annotation_names = decoder._interned(packets, None)
        if not self.kind:
            return SPAN_SCHEMA.empty_table()
        if annotation_names != {iid: name for name, iid in _ANNOTATION_IID.items()}:
            return None
        kind = np.concatenate(self.kind)
        self.kind.clear()
        track = np.concatenate(self.track)
        self.track.clear()
        time = np.concatenate(self.time)
        self.time.clear()
        opening = {key: np.concatenate(parts) for key, parts in self.opening.items()}
        self.opening.clear()
        fail = decoder.fail

        # Each track's events in file order; a begin and its end share a nesting level.
        by_track = np.argsort(track, kind="stable")
        step = np.select([kind == _SLICE_BEGIN, kind == _SLICE_END], [1, -1], 0).astype(np.int64)[by_track]
        track_sorted = track[by_track]
        first_of_track = np.r_[True, track_sorted[1:] != track_sorted[:-1]]
        running = np.cumsum(step)
        track_begins = np.maximum.accumulate(np.where(first_of_track, np.arange(len(step)), 0))
        running -= (running - step)[track_begins]
        level = np.where(step < 0, running + 1, running)
        if (running < 0).any():
            raise fail("a slice ends that never began")
        slices = np.flatnonzero(step != 0)
        pairs = slices[np.lexsort((slices, level[slices], track_sorted[slices]))]
        if len(pairs) % 2 or not ((step[pairs[0::2]] == 1).all() and (step[pairs[1::2]] == -1).all()
                                   and (track_sorted[pairs[0::2]] == track_sorted[pairs[1::2]]).all()
                                   and (level[pairs[0::2]] == level[pairs[1::2]]).all()):
            raise fail("a slice begins and never ends")
        del step, level, running, track_begins, first_of_track, track_sorted, slices
        end_time = time.copy()  # an instant ends where it starts
        end_time[by_track[pairs[0::2]]] = time[by_track[pairs[1::2]]]
        del pairs
        is_opening = kind != _SLICE_END
        # Rows in trace order: by track, then where the span opens in the file.
        span_event = by_track[is_opening[by_track]]
        del by_track
        row = np.cumsum(is_opening) - 1  # event -> its opening number
        which = row[span_event]
        start = time[span_event]
        span_end = end_time[span_event]
        n = len(span_event)
        if not opening["has_span_id"][which].all():
            raise fail("a slice without a span_id annotation (not a trace hotspan wrote?)")

        def take(key: str) -> np.ndarray:
            return opening.pop(key)[which]

        renamed = {}
        if self.renamed:
            where = np.full(self.openings, -1, np.int64)
            where[which] = np.arange(n)
            renamed = {int(where[-1 - key]): text for key, text in self.renamed.items()}
        thread = decoder._thread_rows(tracks, track[span_event])
        del time, end_time, track, kind, span_event, row
        parent_id, has_parent = take("parent_id"), take("has_parent_id")
        arg, has_arg = take("arg"), take("has_arg")
        columns = {
            "span_id": pa.array(take("span_id"), pa.uint64()),
            "parent_id": pa.array(parent_id, pa.uint64(), mask=~has_parent),
            "name": _strings(take("name"), names, np.ones(n, bool), fail),
            "category": _strings(take("category"), categories, take("has_category"), fail),
            "start_ns": pa.array(start, pa.int64()),
            "end_ns": pa.array(span_end, pa.int64()),
            "duration_ns": pa.array(span_end - start, pa.int64()),
            "depth": pa.array(take("depth").view(np.int64).astype(np.int32), pa.int32()),
            "thread_id": pa.array(thread["tid"], pa.int64()),
            "thread_name": decoder._thread_names(thread["name"], renamed),
            "pid": pa.array(thread["pid"], pa.int64()),
            "rank": pa.array(thread["rank"].astype(np.int32), pa.int32()),
            "arg": pa.array(arg.view(np.int64), pa.int64(), mask=~has_arg),
            "error": pa.array(take("error"), pa.bool_()),
        }
        return pa.table(columns, schema=SPAN_SCHEMA)
