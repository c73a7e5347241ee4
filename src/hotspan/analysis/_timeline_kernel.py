"""The timeline's kernel (see :mod:`hotspan.analysis.timeline`): a view's summary, added up
batch by batch, and its answer."""

from __future__ import annotations

import json
import math

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "BATCH_ROWS",
    "COLUMNS",
    "DENSE_CELLS",
    "INDEX_BINS",
    "MAX_WIDTH",
    "NO_DEPTH",
    "NAMES",
    "Summary",
    "TRACK_KEYS",
    "value_codes",
]

#: The columns that tell tracks apart, in the answer's order.
TRACK_KEYS = ("rank", "pid", "thread_id", "lane")
#: The columns the timeline reads.
COLUMNS = (
    "span_id",
    "parent_id",
    "name",
    "start_ns",
    "end_ns",
    "depth",
    "rank",
    "pid",
    "thread_id",
)
#: Rows read from a Parquet part at a time.
BATCH_ROWS = 1 << 18
#: Widths a request may ask for (a 16k screen at most).
MAX_WIDTH = 16_384
#: Bins a track of a :class:`TimelineIndex` has over the run's window.
INDEX_BINS = 1 << 14


def value_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, each value's index among them), by pyarrow's hash kernels: linear,
    where ``np.unique`` sorts (most of a batch's time when it did)."""
    array = pa.array(values)
    distinct = pc.unique(array)
    inverse = pc.index_in(array, value_set=distinct).to_numpy(zero_copy_only=False)
    return distinct.to_numpy(zero_copy_only=False), inverse.astype(np.int64, copy=False)


class Summary:
    """The kernel: ``add`` one batch of spans at a time, ``result`` at the end.

    Why arrays indexed by (track, pixel): a view holds at most ``width`` pixels a track, so
    the count, time and least depth of the shorter spans are added with one ``bincount`` a
    batch, no sort and no Python loop over spans or tracks. The time per (track, pixel,
    name), for the busiest name, is kept sparse (few names share a pixel), reduced per batch
    and merged when it piles up. The spans a pixel long or more are taken as rows (a few a
    pixel at most); so are all the spans of a track while it has no more than ``width``."""

    def __init__(self, start_ns: int, end_ns: int, width: int) -> None:
        self.start_ns, self.end_ns, self.width = start_ns, end_ns, width
        self.ns_per_pixel = (end_ns - start_ns) / width
        self.names: dict[str, int] = {}
        self.tracks: dict[tuple[int, int, int, int], int] = {}
        self.counts = np.zeros((0, width), np.int64)
        self.times = np.zeros((0, width), np.int64)
        self.depths = np.zeros((0, width), np.int64)
        #: (cell * 2**24 + name, time) pairs, each list entry reduced; merged when long
        #: per track: (pixel * 2**24 + name, time) pairs, each list entry reduced; merged
        #: per track when they pile up (a track's pairs are few: at most its pixels x names)
        self.name_parts: dict[int, list[tuple[np.ndarray, np.ndarray]]] = {}
        self.name_pending: dict[int, int] = {}
        self.name_merged: dict[int, int] = {}
        #: per track: every span seen (for the "at most width spans: exact" rule)
        self.seen = np.zeros(0, np.int64)
        self.wide: list[pa.Table] = []
        #: the rows of tracks that may still be listed whole: track code -> tables
        self.few: dict[int, list[pa.Table]] = {}

    def _grow(self, tracks: int) -> None:
        old = len(self.counts)
        if tracks <= old:
            return
        for attr, fill in (("counts", 0), ("times", 0), ("depths", NO_DEPTH)):
            grown = np.full((tracks, self.width), fill, np.int64)
            grown[:old] = getattr(self, attr)
            setattr(self, attr, grown)
        seen = np.zeros(tracks, np.int64)
        seen[:old] = self.seen
        self.seen = seen

    def _name_codes(self, names: pa.Array) -> np.ndarray:
        if not pa.types.is_dictionary(names.type):
            names = pc.dictionary_encode(names)
        mapping = np.array(
            [self.names.setdefault(str(n), len(self.names)) for n in names.dictionary.to_pylist()],
            dtype=np.int64,
        )
        indices = names.indices.to_numpy(zero_copy_only=False)
        return mapping[indices] if len(mapping) else np.zeros(len(indices), np.int64)

    def _track_codes(self, batch: pa.RecordBatch) -> np.ndarray:
        columns = [
            batch.column(name).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
            if name in batch.schema.names
            else np.zeros(batch.num_rows, np.int64)
            for name in TRACK_KEYS
        ]
        rank, pid, thread, lane = columns
        if rank.min() == rank.max() and pid.min() == pid.max() and lane.min() == lane.max():
            # a recorder's part: one process, its threads apart (the usual case): a hash of
            # the thread ids, no sort
            threads, inverse = value_codes(thread)
            keys = [(int(rank[0]), int(pid[0]), int(t), int(lane[0])) for t in threads.tolist()]
        else:
            # rows of several processes (span blocks of many parts, a merged table): each
            # column's codes by a hash, combined into one code, hashed again; no sort
            coded = [value_codes(column) for column in columns]
            if math.prod(len(distinct) for distinct, _c in coded) < 1 << 62:
                combined = np.zeros(batch.num_rows, np.int64)
                for distinct, codes in coded:
                    combined = combined * len(distinct) + codes
                unique, inverse = value_codes(combined)
                rows = np.empty((len(unique), len(columns)), np.int64)
                rest = unique.astype(np.int64)
                for i in range(len(coded) - 1, -1, -1):
                    distinct = coded[i][0]
                    rows[:, i] = distinct[rest % len(distinct)]
                    rest //= len(distinct)
            else:  # too many distinct values to combine in 64 bits: sorted
                rows, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
            keys = [(int(r), int(p), int(t), int(k)) for r, p, t, k in rows.tolist()]
        mapping = np.array(
            [self.tracks.setdefault(key, len(self.tracks)) for key in keys], dtype=np.int64
        )
        tracks: np.ndarray = mapping[inverse.reshape(-1)]
        return tracks

    def _known_codes(self, codes: np.ndarray, keys: np.ndarray) -> np.ndarray:
        present = np.flatnonzero(np.bincount(codes))
        mapping = np.zeros(len(keys), np.int64)
        mapping[present] = [
            self.tracks.setdefault((int(r), int(p), int(t), int(k)), len(self.tracks))
            for r, p, t, k in keys[present].tolist()
        ]
        tracks: np.ndarray = mapping[codes]
        return tracks

    def add(
        self, batch: pa.RecordBatch, known: tuple[np.ndarray, np.ndarray] | None = None
    ) -> None:
        """Add a batch of spans; ``known``: each row's track as a code into a table of track
        keys (rank, pid, thread_id, lane: the index's), so that tracks need no hashing."""
        if batch.num_rows == 0:
            return
        start = batch.column("start_ns").to_numpy()
        end = batch.column("end_ns").to_numpy()
        inside = (start < self.end_ns) & ((end > self.start_ns) | (start >= self.start_ns))
        if not inside.all():
            batch = batch.filter(pa.array(inside))
            if batch.num_rows == 0:
                return
            start, end = start[inside], end[inside]
            if known is not None:
                known = (known[0][inside], known[1])
        track = self._track_codes(batch) if known is None else self._known_codes(*known)
        self._grow(len(self.tracks))
        self.seen += np.bincount(track, minlength=len(self.seen))
        for code in np.flatnonzero(np.bincount(track)).tolist():
            if self.seen[code] <= self.width:
                rows = batch.filter(pa.array(track == code))
                self.few.setdefault(code, []).append(pa.Table.from_batches([rows]))
            else:
                self.few.pop(code, None)  # more than a screen's worth: summarised
        wide = (end - start) >= self.ns_per_pixel
        depth = batch.column("depth").to_numpy(zero_copy_only=False).astype(np.int64)
        names = self._name_codes(batch.column("name"))
        if wide.any():
            rows = pa.Table.from_batches([batch.filter(pa.array(wide))])
            self.wide.append(rows.append_column("track", pa.array(track[wide])))
            short = ~wide
            start, end, track, names, depth = (
                start[short],
                end[short],
                track[short],
                names[short],
                depth[short],
            )
        if not len(start):
            return
        clipped = np.maximum(start, self.start_ns)
        pixel = np.minimum(
            ((clipped - self.start_ns) / self.ns_per_pixel).astype(np.int64), self.width - 1
        )
        cell = track * self.width + pixel
        size = self.counts.size
        time = (np.minimum(end, self.end_ns) - clipped).astype(np.float64)
        self.counts += np.bincount(cell, minlength=size).reshape(self.counts.shape)
        self.times += (
            np.bincount(cell, weights=time, minlength=size)
            .astype(np.int64)
            .reshape(self.times.shape)
        )
        np.minimum.at(self.depths.reshape(-1), cell, depth)
        local = pixel * NAMES + names
        groups: list[tuple[int, Any]]
        if track.min() == track.max():  # one thread's rows (else each thread's apart)
            groups = [(int(track[0]), slice(None))]
        else:
            order = np.argsort(track, kind="stable")
            bounds = np.flatnonzero(np.diff(track[order])) + 1
            groups = [(int(track[rows[0]]), rows) for rows in np.split(order, bounds) if len(rows)]
        kinds = max(len(self.names), 1)
        dense = self.width * kinds <= DENSE_CELLS
        for code, rows in groups:
            if dense:  # few names: a (pixel, name) array, two bincounts, no hash of the keys
                cells = pixel[rows] * kinds + names[rows]
                summed = np.bincount(cells, weights=time[rows], minlength=self.width * kinds)
                present = np.flatnonzero(np.bincount(cells, minlength=self.width * kinds))
                keys = (present // kinds) * NAMES + present % kinds
                self.add_names(code, keys, summed[present])
                continue
            keys, inverse = value_codes(local[rows])
            self.add_names(
                code, keys, np.bincount(inverse, weights=time[rows], minlength=len(keys))
            )

    def add_names(self, code: int, keys: np.ndarray, times: np.ndarray) -> None:
        """Add one track's (pixel * 2**24 + name, time) pairs, each key once."""
        self.name_parts.setdefault(code, []).append((keys, times))
        pending = self.name_pending.get(code, 0) + len(keys)
        self.name_pending[code] = pending
        # merged when the pending pairs outnumber those merged so far (and a few a pixel):
        # each pair is merged a bounded number of times
        if pending > 2 * self.name_merged.get(code, 0) + 4 * self.width + (1 << 16):
            self._merge_track(code)

    def _merge_track(self, code: int) -> tuple[np.ndarray, np.ndarray]:
        """The track's pairs, merged: (keys, times), each key once."""
        parts = self.name_parts.get(code, [])
        if len(parts) != 1:
            if parts:
                keys, inverse = value_codes(np.concatenate([k for k, _t in parts]))
                times = np.bincount(
                    inverse, weights=np.concatenate([t for _k, t in parts]), minlength=len(keys)
                )
            else:
                keys, times = np.zeros(0, np.int64), np.zeros(0, np.float64)
            parts[:] = [(keys, times)]
            self.name_parts[code] = parts
            self.name_pending[code] = self.name_merged[code] = len(keys)
        return parts[0]

    def _merge_names(self) -> None:
        for code in list(self.name_parts):
            self._merge_track(code)

    def _busiest(self) -> np.ndarray:
        """Per (track, pixel) cell, the code of the name with the most time (-1: none)."""
        busiest = np.full(self.counts.shape, -1, np.int64)
        kinds = max(len(self.names), 1)
        for code in list(self.name_parts):
            keys, times = self._merge_track(code)
            if not len(keys):
                continue
            pixel = keys // NAMES
            if self.width * kinds <= DENSE_CELLS:
                # a (pixel, name) array, no sort: absent -1, so a name present with no time
                # beats none; argmax takes the first largest: ties to the lowest name code
                grid = np.full((self.width, kinds), -1.0)
                grid[pixel, keys % NAMES] = times
                best = grid.argmax(axis=1)
                seen = grid[np.arange(self.width), best] >= 0
                busiest[code, seen] = best[seen]
                continue
            # per pixel the largest time, ties to the lowest name code: by (pixel, -time)
            order = np.lexsort((keys % NAMES, -times, pixel))
            first = np.ones(len(order), bool)
            first[1:] = pixel[order][1:] != pixel[order][:-1]
            chosen = order[first]
            busiest[code, pixel[chosen]] = keys[chosen] % NAMES
        return busiest

    def result(self, ranks: Sequence[int] | None = None, *, encoded: bool = False) -> Any:
        """The answer: a dict, or (``encoded``) the same as JSON text, in bytes."""
        answer = self.answer(ranks)
        return answer.to_json() if encoded else answer.to_dict()

    def answer(self, ranks: Sequence[int] | None = None) -> _Answer:
        """The answer's columns: per track its exact spans (a table) and its pixels (arrays)."""
        wide = pa.concat_tables(self.wide, promote_options="permissive") if self.wide else None
        bounds = np.zeros(len(self.tracks) + 1, np.int64)
        if wide is not None:
            # grouped by track once (a stable sort keeps each track's rows in their order),
            # each track's rows a slice: not a filter of every row once a track
            track = wide["track"].to_numpy()
            wide = wide.take(pa.array(np.argsort(track, kind="stable")))
            bounds = np.searchsorted(np.sort(track), np.arange(len(self.tracks) + 1))
        busiest = self._busiest()
        tracks: list[tuple[dict[str, int], pa.Table | None, tuple[np.ndarray, ...] | None]] = []
        for key, code in sorted(self.tracks.items()):
            if ranks is not None and key[0] not in ranks:
                continue
            entry: dict[str, int] = dict(zip(TRACK_KEYS, key))
            if code in self.few:  # at most width spans: every one of them, exactly
                few = pa.concat_tables(self.few[code], promote_options="permissive")
                lanes = _lanes(few)
                tracks.append((entry, lanes[0], None))
                tracks += [({**entry, "lane": k}, t, None) for k, t in enumerate(lanes[1:], 1)]
                continue
            mine = (
                wide.slice(int(bounds[code]), int(bounds[code + 1] - bounds[code]))
                if wide is not None
                else None
            )
            lanes = _lanes(mine) if mine is not None and mine.num_rows else []
            xs = np.flatnonzero(self.counts[code])
            pixels = (
                xs,
                self.counts[code][xs],
                busiest[code][xs],
                self.depths[code][xs],
                self.times[code][xs],
            )
            tracks.append((entry, lanes[0] if lanes else None, pixels))
            tracks += [({**entry, "lane": k}, t, None) for k, t in enumerate(lanes[1:], 1)]
        head = {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "width": self.width,
            "ns_per_pixel": self.ns_per_pixel,
        }
        return _Answer(head, list(self.names) or [""], tracks)


class _Answer:
    """A view's answer in columns, written out either as Python objects (:meth:`to_dict`) or
    straight from its columns as JSON text (:meth:`to_json`: pyarrow's string kernels, no
    Python object a pixel or span, where building and then serialising objects took seconds
    for a whole-run view of a large run). Both give the same document."""

    def __init__(
        self,
        head: dict[str, Any],
        names: list[str],
        tracks: list[tuple[dict[str, int], pa.Table | None, tuple[np.ndarray, ...] | None]],
    ) -> None:
        self.head, self.names, self.tracks = head, names, tracks

    def to_dict(self) -> dict[str, Any]:
        names = np.array(self.names, dtype=object)
        tracks = []
        for entry, spans, pixels in self.tracks:
            rows: list[dict[str, Any]] = []
            if pixels is not None:
                rows = [
                    {"x": x, "count": c, "name": str(names[n]), "depth": d, "time_ns": t}
                    for x, c, n, d, t in zip(*(column.tolist() for column in pixels))
                ]
            tracks.append(
                {
                    **entry,
                    "spans": _span_rows(spans) if spans is not None else [],
                    "pixels": rows,
                }
            )
        return {**self.head, "tracks": tracks}

    def to_json(self, **first: Any) -> bytes:
        """The answer as JSON text (``first``: members written before the answer's own).
        Every track's rows are written at once (one sort, one pass of the string kernels
        over all spans, one over all pixels), then cut per track: a view has up to hundreds
        of tracks, and kernels called per track cost more than the rows."""
        spans = [t for _e, t, _p in self.tracks if t is not None and t.num_rows]
        span_text, span_ends = b"", np.zeros(1, np.int64)
        if spans:
            table = pa.concat_tables(
                [
                    pa.table(
                        {
                            "order": pa.array(np.full(t.num_rows, i, np.int32)),
                            "span_id": t["span_id"],
                            "name": t["name"].cast(pa.string()),
                            "start_ns": t["start_ns"],
                            "end_ns": t["end_ns"],
                            "depth": t["depth"],
                        }
                    )
                    for i, t in enumerate(spans)
                ],
                promote_options="permissive",
            )
            table = table.sort_by(
                [("order", "ascending"), ("start_ns", "ascending"), ("depth", "ascending")]
            )
            span_text, span_ends = _json_rows(
                [
                    ("span_id", _text(table["span_id"])),
                    ("name", _json_names(table["name"])),
                    ("start_ns", _text(table["start_ns"])),
                    ("end_ns", _text(table["end_ns"])),
                    ("depth", _text(table["depth"])),
                ]
            )
        pixels = [p for _e, _t, p in self.tracks if p is not None and len(p[0])]
        pixel_text, pixel_ends = b"", np.zeros(1, np.int64)
        if pixels:
            x, count, name, depth, time = (np.concatenate(c) for c in zip(*pixels))
            names = pa.array([json.dumps(n) for n in self.names], pa.string())
            pixel_text, pixel_ends = _json_rows(
                [
                    ("x", _text(x)),
                    ("count", _text(count)),
                    ("name", names.take(pa.array(name % len(self.names)))),
                    ("depth", _text(depth)),
                    ("time_ns", _text(time)),
                ]
            )
        out = [json.dumps({**first, **self.head}, separators=(",", ":"))[:-1].encode()]
        out.append(b',"tracks":[')
        row_of_spans = row_of_pixels = 0
        for i, (entry, track_spans, track_pixels) in enumerate(self.tracks):
            out.append(b"," if i else b"")
            out.append(json.dumps(entry, separators=(",", ":"))[:-1].encode() + b',"spans":[')
            if track_spans is not None and track_spans.num_rows:
                row_of_spans += track_spans.num_rows
                a, b = span_ends[row_of_spans - track_spans.num_rows], span_ends[row_of_spans]
                out.append(span_text[a : b - 1])  # no last comma
            out.append(b'],"pixels":[')
            if track_pixels is not None and len(track_pixels[0]):
                row_of_pixels += len(track_pixels[0])
                a, b = pixel_ends[row_of_pixels - len(track_pixels[0])], pixel_ends[row_of_pixels]
                out.append(pixel_text[a : b - 1])
            out.append(b"]}")
        out.append(b"]}")
        return b"".join(out)


def _text(values: Any) -> pa.Array:
    """Integers as their JSON text."""
    if isinstance(values, np.ndarray):
        values = pa.array(values)
    elif isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return pc.cast(values, pa.string())


def _json_names(values: pa.ChunkedArray) -> pa.Array:
    """Strings as their JSON text (each distinct one escaped once)."""
    array = values.combine_chunks()
    if not pa.types.is_dictionary(array.type):
        array = pc.dictionary_encode(array)
    escaped = pa.array([json.dumps(str(v)) for v in array.dictionary.to_pylist()], pa.string())
    return escaped.take(array.indices)


def _json_rows(fields: list[tuple[str, pa.Array]]) -> tuple[bytes, np.ndarray]:
    """Rows as JSON objects, each followed by a comma: ``fields`` (member, each row's JSON
    text). Returns the text and where each row starts in it (and, last, its length)."""
    pieces: list[Any] = []
    for i, (member, text) in enumerate(fields):
        pieces.append(pa.scalar(("{" if i == 0 else ",") + json.dumps(member) + ":"))
        pieces.append(text)
    pieces.append(pa.scalar("},"))
    rows = pc.binary_join_element_wise(*pieces, "")
    if rows.type != pa.large_string():
        rows = rows.cast(pa.large_string())  # offsets of 64 bits: any size of answer
    offsets = np.frombuffer(rows.buffers()[1], np.int64, len(rows) + 1, rows.offset * 8)
    data = rows.buffers()[2]
    return data[int(offsets[0]) : int(offsets[-1])].to_pybytes(), offsets - offsets[0]


#: Name codes per cell key: a cell's key is cell * NAMES + name code.
NAMES = 1 << 24
#: The most (pixel, name) pairs the kernel adds up in a dense array (more: a hash of the pairs).
DENSE_CELLS = 1 << 20
#: The least depth of a pixel with no span yet.
NO_DEPTH = np.iinfo(np.int64).max


def _lanes(spans: pa.Table) -> list[pa.Table]:
    """A track's exact spans split into lanes, as the exports place asyncio tasks
    (``formats/_lanes.py``): the spans of lane 0, of lane 1, .... Span trees of
    tasks that overlap on a thread move, whole, to further lanes; spans that nest stay on
    lane 0 (the usual case: one vectorised check)."""
    from .._schema import META_TASKS
    from ..formats._lanes import intervals_nest, assign_lanes

    if spans.num_rows < 2 or "parent_id" not in spans.column_names:
        return [spans]
    if intervals_nest(spans["start_ns"].to_numpy(), spans["end_ns"].to_numpy()):
        return [spans]  # one thread's spans that nest: one lane (no search)
    # the search always runs: a window's rows carry no note that tasks ran
    searched = spans.replace_schema_metadata({META_TASKS: b"1"})
    if "track" in searched.column_names:
        searched = searched.drop_columns(["track"])
    laned, mapping = assign_lanes(searched)
    if not mapping:
        return [spans]
    tid = laned["thread_id"].to_numpy()
    out = [laned.filter(pa.array(~np.isin(tid, list(mapping))))]
    out += [laned.filter(pa.array(tid == synthetic)) for synthetic in sorted(mapping)]
    return out


def _sorted_spans(table: pa.Table) -> pa.Table:
    """A track's exact spans in the answer's order: by start, outer first."""
    return table.sort_by([("start_ns", "ascending"), ("depth", "ascending")])


def _span_rows(table: pa.Table) -> list[dict[str, Any]]:
    table = _sorted_spans(table)
    columns = {
        name: table[name].to_pylist() for name in ("span_id", "name", "start_ns", "end_ns", "depth")
    }
    return [
        {
            "span_id": span_id,
            "name": name,
            "start_ns": start,
            "end_ns": end,
            "depth": depth,
        }
        for span_id, name, start, end, depth in zip(
            columns["span_id"],
            columns["name"],
            columns["start_ns"],
            columns["end_ns"],
            columns["depth"],
        )
    ]
