"""A timeline for any size: what a screen ``width`` pixels wide can show of a time window.

    view = timeline(spans, start_ns=a, end_ns=b, width=1200)
    for track in view["tracks"]:       # one per (rank, pid, thread_id, lane)
        track["spans"]                 # the spans at least a pixel long, exactly
        track["pixels"]                # the shorter ones, summarised per pixel

The answer's size is bounded by ``width`` and the tracks, never by the spans: a span one
pixel long or more is listed once, exactly (on one track, spans of one depth never overlap,
so there are at most about ``width`` of them a depth); the shorter spans are counted once,
in the pixel where they start (a span that starts before the window counts in pixel 0),
with the busiest name (the most time among them) and the outermost depth under that pixel.
A track with no more than ``width`` spans in the window lists them all exactly: zoomed in far
enough, every span is exact.

One kernel, fed batch by batch: a table in memory is cut into batches, a run's Parquet parts
are read in batches with the window pushed down to the reader (row groups whose
``start_ns``/``end_ns`` statistics lie outside it are skipped), so memory is that of one
batch plus the summary. ``hotspan serve`` answers ``GET /v1/traces/{id}/timeline`` with it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "INDEX_BINS",
    "TRACK_KEYS",
    "TimelineIndex",
    "run_version",
    "timeline",
    "window_count",
    "window_of",
    "window_spans",
]

#: The columns that tell tracks apart, in the answer's order.
TRACK_KEYS = ("rank", "pid", "thread_id", "lane")
#: The columns the timeline reads.
_COLUMNS = (
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
_BATCH_ROWS = 1 << 18
#: Widths a request may ask for (a 16k screen at most).
MAX_WIDTH = 16_384
#: Bins a track of a :class:`TimelineIndex` has over the run's window.
INDEX_BINS = 1 << 14


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, each value's index among them), by pyarrow's hash kernels: linear,
    where ``np.unique`` sorts (most of a batch's time when it did)."""
    array = pa.array(values)
    distinct = pc.unique(array)
    inverse = pc.index_in(array, value_set=distinct).to_numpy(zero_copy_only=False)
    return distinct.to_numpy(zero_copy_only=False), inverse.astype(np.int64, copy=False)


class _Summary:
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
        for attr, fill in (("counts", 0), ("times", 0), ("depths", _NO_DEPTH)):
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
            threads, inverse = _codes(thread)
            keys = [(int(rank[0]), int(pid[0]), int(t), int(lane[0])) for t in threads.tolist()]
        else:
            rows, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
            keys = [tuple(r) for r in rows.tolist()]
        mapping = np.array(
            [self.tracks.setdefault(key, len(self.tracks)) for key in keys], dtype=np.int64
        )
        return mapping[inverse.reshape(-1)]

    def add(self, batch: pa.RecordBatch) -> None:
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
        track = self._track_codes(batch)
        self._grow(len(self.tracks))
        self.seen += np.bincount(track, minlength=len(self.seen))
        for code in np.unique(track).tolist():
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
        local = pixel * _NAMES + names
        groups: list[tuple[int, Any]]
        if track.min() == track.max():  # one thread's rows (else each thread's apart)
            groups = [(int(track[0]), slice(None))]
        else:
            order = np.argsort(track, kind="stable")
            bounds = np.flatnonzero(np.diff(track[order])) + 1
            groups = [(int(track[rows[0]]), rows) for rows in np.split(order, bounds) if len(rows)]
        kinds = max(len(self.names), 1)
        dense = self.width * kinds <= _DENSE_CELLS
        for code, rows in groups:
            if dense:  # few names: a (pixel, name) array, two bincounts, no hash of the keys
                cells = pixel[rows] * kinds + names[rows]
                summed = np.bincount(cells, weights=time[rows], minlength=self.width * kinds)
                present = np.flatnonzero(np.bincount(cells, minlength=self.width * kinds))
                keys = (present // kinds) * _NAMES + present % kinds
                self.add_names(code, keys, summed[present])
                continue
            keys, inverse = _codes(local[rows])
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
                keys, inverse = _codes(np.concatenate([k for k, _t in parts]))
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
            pixel = keys // _NAMES
            if self.width * kinds <= _DENSE_CELLS:
                # a (pixel, name) array, no sort: absent -1, so a name present with no time
                # beats none; argmax takes the first largest: ties to the lowest name code
                grid = np.full((self.width, kinds), -1.0)
                grid[pixel, keys % _NAMES] = times
                best = grid.argmax(axis=1)
                seen = grid[np.arange(self.width), best] >= 0
                busiest[code, seen] = best[seen]
                continue
            # per pixel the largest time, ties to the lowest name code: by (pixel, -time)
            order = np.lexsort((keys % _NAMES, -times, pixel))
            first = np.ones(len(order), bool)
            first[1:] = pixel[order][1:] != pixel[order][:-1]
            chosen = order[first]
            busiest[code, pixel[chosen]] = keys[chosen] % _NAMES
        return busiest

    def result(self, ranks: Sequence[int] | None = None) -> dict[str, Any]:
        names = np.array(list(self.names) or [""], dtype=object)
        wide = pa.concat_tables(self.wide, promote_options="permissive") if self.wide else None
        busiest = self._busiest()
        tracks = []
        for key, code in sorted(self.tracks.items()):
            if ranks is not None and key[0] not in ranks:
                continue
            entry: dict[str, Any] = dict(zip(TRACK_KEYS, key))
            if code in self.few:  # at most width spans: every one of them, exactly
                few = pa.concat_tables(self.few[code], promote_options="permissive")
                lanes = _lanes(few)
                entry["spans"] = _span_rows(lanes[0])
                entry["pixels"] = []
                tracks.append(entry)
                tracks += [
                    {**entry, "lane": k, "spans": _span_rows(t)}
                    for k, t in enumerate(lanes[1:], start=1)
                ]
                continue
            mine = wide.filter(pc.equal(wide["track"], code)) if wide is not None else None
            lanes = _lanes(mine) if mine is not None and mine.num_rows else []
            entry["spans"] = _span_rows(lanes[0]) if lanes else []
            xs = np.flatnonzero(self.counts[code])
            entry["pixels"] = [
                {"x": x, "count": c, "name": str(names[n]), "depth": d, "time_ns": t}
                for x, c, n, d, t in zip(
                    xs.tolist(),
                    self.counts[code][xs].tolist(),
                    busiest[code][xs].tolist(),
                    self.depths[code][xs].tolist(),
                    self.times[code][xs].tolist(),
                )
            ]
            tracks.append(entry)
            tracks += [
                {**entry, "lane": k, "spans": _span_rows(t), "pixels": []}
                for k, t in enumerate(lanes[1:], start=1)
            ]
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "width": self.width,
            "ns_per_pixel": self.ns_per_pixel,
            "tracks": tracks,
        }


#: Name codes per cell key: a cell's key is cell * _NAMES + name code.
_NAMES = 1 << 24
#: The most (pixel, name) pairs the kernel adds up in a dense array (more: a hash of the pairs).
_DENSE_CELLS = 1 << 20
#: The least depth of a pixel with no span yet.
_NO_DEPTH = np.iinfo(np.int64).max


def _lanes(spans: pa.Table) -> list[pa.Table]:
    """A track's exact spans split into lanes, as the exports place asyncio tasks
    (``formats/lanes.py``): the spans of lane 0, of lane 1, .... Span trees of
    tasks that overlap on a thread move, whole, to further lanes; spans that nest stay on
    lane 0 (the usual case: one vectorised check)."""
    from .._schema import META_TASKS
    from ..formats.lanes import assign_lanes

    if spans.num_rows < 2 or "parent_id" not in spans.column_names:
        return [spans]
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


def _span_rows(table: pa.Table) -> list[dict[str, Any]]:
    table = table.sort_by([("start_ns", "ascending"), ("depth", "ascending")])
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


# --------------------------------------------------------------------------- sources


def _parquet_files(spans: Any) -> list[str] | None:
    """The Parquet files of ``spans`` (a Parquet file, a run directory, or a list of files),
    or None when it is a table or another format (read in memory)."""
    if isinstance(spans, (str, os.PathLike)):
        path = os.fspath(spans)
        if os.path.isdir(path):
            from ..formats.dataset import current_parts

            return [p for p, _size, _meta in current_parts(path)[1]]
        return [path] if path.lower().endswith(".parquet") else None
    if isinstance(spans, Sequence) and not isinstance(spans, (str, bytes)):
        files = [os.fspath(p) for p in spans]
        return files if all(f.lower().endswith(".parquet") for f in files) else None
    return None


def _batches(
    spans: Any, start_ns: int | None, end_ns: int | None, ranks: Sequence[int] | None
) -> Iterator[pa.RecordBatch]:
    """The spans overlapping the window, in batches (the window and ranks pushed down to
    the Parquet reader where the spans are Parquet files)."""
    files = _parquet_files(spans)
    if files is None:
        table = spans if isinstance(spans, pa.Table) else _load(spans)
        if ranks is not None:
            table = table.filter(pc.is_in(table["rank"], pa.array(list(ranks), pa.int32())))
        yield from table.to_batches(_BATCH_ROWS)
        return
    import pyarrow.parquet as pq

    # Why ParquetFile and not pyarrow.dataset: the row groups are picked here from their
    # start_ns/end_ns statistics (a part's footer), and pyarrow.dataset's import loads pandas.
    wanted = None if ranks is None else pa.array(list(ranks), pa.int32())
    for path in files:
        part = pq.ParquetFile(path)
        names = part.schema_arrow.names
        columns = [c for c in (*_COLUMNS, "lane") if c in names]
        groups = [
            g
            for g in range(part.metadata.num_row_groups)
            if _may_overlap(part.metadata.row_group(g), names, start_ns, end_ns)
        ]
        if not groups:
            continue
        rank_of_directory = None
        if "rank" not in names:  # an older rank=R/ part: its rank is its directory's
            from ..formats.dataset import RANK_DIR_RE

            found = RANK_DIR_RE.match(os.path.basename(os.path.dirname(path)))
            rank_of_directory = int(found.group(1)) if found else 0
        for batch in part.iter_batches(
            batch_size=_BATCH_ROWS, row_groups=groups, columns=columns, use_threads=False
        ):
            if rank_of_directory is not None:
                batch = batch.append_column(
                    "rank", pa.array(np.full(batch.num_rows, rank_of_directory, np.int32))
                )
            if wanted is not None:
                batch = batch.filter(pc.is_in(batch.column("rank"), value_set=wanted))
            if batch.num_rows:
                yield batch


def _may_overlap(group: Any, names: list[str], start_ns: int | None, end_ns: int | None) -> bool:
    """Whether a row group may hold spans of the window, by its statistics (none: maybe)."""
    if group.num_rows == 0:
        return False
    if start_ns is None or end_ns is None:
        return True
    bounds = {}
    for column in ("start_ns", "end_ns"):
        stats = group.column(names.index(column)).statistics
        if stats is None or not stats.has_min_max:
            return True
        bounds[column] = (stats.min, stats.max)
    # some span starts before the window's end, and some span ends after its start (or an
    # instant starts in it)
    return bounds["start_ns"][0] < end_ns and (
        bounds["end_ns"][1] > start_ns or bounds["start_ns"][1] >= start_ns
    )


# --------------------------------------------------------------------------- a window's spans


def _window_terms(start_ns: int | None, end_ns: int | None, ranks: Sequence[int] | None) -> list:
    """The span filter's terms for the spans overlapping ``[start_ns, end_ns)`` on ``ranks``."""
    from .filters import window_terms

    terms = window_terms(start_ns, end_ns, overlap=True)
    if ranks is not None:
        terms.append(("in", "rank", tuple(int(r) for r in ranks)))
    return terms


def _directory_rank(path: str) -> int:
    """The rank an older part without a rank column takes from its ``rank=R/`` directory."""
    from ..formats.dataset import RANK_DIR_RE

    found = RANK_DIR_RE.match(os.path.basename(os.path.dirname(path)))
    return int(found.group(1)) if found else 0


def _group_stats(group: Any, names: list[str], column: str) -> tuple[Any, Any] | None:
    if column not in names:
        return None
    stats = group.column(names.index(column)).statistics
    if stats is None or not stats.has_min_max:
        return None
    return stats.min, stats.max


def _may_hold_ranks(group: Any, names: list[str], path: str, wanted: set[int] | None) -> bool:
    """Whether a row group may hold spans of the ``wanted`` ranks, by its statistics."""
    if wanted is None:
        return True
    if "rank" not in names:
        return _directory_rank(path) in wanted
    bounds = _group_stats(group, names, "rank")
    return bounds is None or any(bounds[0] <= r <= bounds[1] for r in wanted)


def window_count(
    spans: Any,
    start_ns: int | None = None,
    end_ns: int | None = None,
    *,
    ranks: Sequence[int] | None = None,
) -> int:
    """How many spans of ``spans`` (a table, a Parquet file, a run directory, or a list of
    Parquet files) overlap ``[start_ns, end_ns)`` on ``ranks`` (None: every rank), as
    :func:`window_spans` returns them, without reading them: row groups are picked by their
    ``start_ns``/``end_ns`` statistics, one wholly inside the window (and of one wanted rank)
    counts its rows from the footer, and only those across its edges read three columns."""
    from .filters import arrow_mask

    terms = _window_terms(start_ns, end_ns, ranks)
    files = _parquet_files(spans)
    if files is None:
        table = spans if isinstance(spans, pa.Table) else _load(spans)
        mask = arrow_mask(table, terms)
        return table.num_rows if mask is None else int(pc.sum(mask).as_py() or 0)
    import pyarrow.parquet as pq

    wanted = None if ranks is None else {int(r) for r in ranks}
    total = 0
    for path in files:
        part = pq.ParquetFile(path)
        names = part.schema_arrow.names
        own_rank = None if "rank" in names else _directory_rank(path)
        if own_rank is not None and wanted is not None and own_rank not in wanted:
            continue
        for g in range(part.metadata.num_row_groups):
            group = part.metadata.row_group(g)
            if not _may_overlap(group, names, start_ns, end_ns):
                continue
            if not _may_hold_ranks(group, names, path, wanted):
                continue
            starts = _group_stats(group, names, "start_ns")
            inside = starts is not None and (
                (start_ns is None or starts[0] >= start_ns)
                and (end_ns is None or starts[1] < end_ns)
            )
            rank_range = (own_rank, own_rank) if own_rank is not None else None
            if rank_range is None and "rank" in names:
                rank_range = _group_stats(group, names, "rank")
            one_rank = wanted is None or (
                rank_range is not None
                and rank_range[0] == rank_range[1]
                and rank_range[0] in wanted
            )
            if inside and one_rank:
                total += group.num_rows
                continue
            columns = [c for c in ("start_ns", "end_ns", "rank") if c in names]
            table = part.read_row_group(g, columns=columns, use_threads=False)
            if own_rank is not None:
                table = table.append_column(
                    "rank", pa.array(np.full(table.num_rows, own_rank, np.int32))
                )
            mask = arrow_mask(table, terms)
            total += table.num_rows if mask is None else int(pc.sum(mask).as_py() or 0)
    return total


def window_spans(
    spans: Any,
    start_ns: int | None = None,
    end_ns: int | None = None,
    *,
    ranks: Sequence[int] | None = None,
) -> pa.Table:
    """The spans of ``spans`` that overlap ``[start_ns, end_ns)`` (epoch ns; None: unbounded)
    on ``ranks`` (None: every rank), every column: those a timeline of the window shows (a
    span begun before the window and ending in it too; an instant at ``start_ns``), each
    once. Where the spans are Parquet files, only the row groups whose statistics reach the
    window are read; the table's metadata is the run's. ``hotspan export --since/--until``
    and serve's "Open this window in Perfetto" export it."""
    from .filters import arrow_mask

    terms = _window_terms(start_ns, end_ns, ranks)
    files = _parquet_files(spans)
    if files is None:
        table = spans if isinstance(spans, pa.Table) else _load(spans)
        mask = arrow_mask(table, terms)
        return table if mask is None else table.filter(mask)
    import pyarrow.parquet as pq

    from ..formats.base import conform_to_schema
    from ..formats.dataset import merge_metadata

    wanted = None if ranks is None else {int(r) for r in ranks}
    tables = []
    metas = []
    for path in files:
        part = pq.ParquetFile(path)
        names = part.schema_arrow.names
        metas.append((dict(part.schema_arrow.metadata or {}), part.metadata.num_rows))
        groups = [
            g
            for g in range(part.metadata.num_row_groups)
            if _may_overlap(part.metadata.row_group(g), names, start_ns, end_ns)
            and _may_hold_ranks(part.metadata.row_group(g), names, path, wanted)
        ]
        if not groups:
            continue
        own_rank = None if "rank" in names else _directory_rank(path)
        keys = [c for c in ("start_ns", "end_ns", "rank") if c in names]
        kept = []
        # A row group at a time: its three key columns say which rows are in the window;
        # only a group holding some is read whole, and only those rows kept (copied out of
        # it), so memory is one row group and the window's spans, not the run.
        for g in groups:
            key = part.read_row_group(g, columns=keys, use_threads=False)
            if own_rank is not None:
                key = key.append_column("rank", pa.array(np.full(key.num_rows, own_rank, np.int32)))
            mask = arrow_mask(key, terms)
            rows = pc.indices_nonzero(mask) if mask is not None else None
            if rows is not None and len(rows) == 0:
                continue
            table = part.read_row_group(g, use_threads=False)
            if own_rank is not None:
                table = table.append_column(
                    "rank", pa.array(np.full(table.num_rows, own_rank, np.int32))
                )
            kept.append(table if rows is None else table.take(rows))
            del table
        if not kept:
            continue
        table = pa.concat_tables(kept)
        tables.append(conform_to_schema(table, path, metadata={}))
    if not tables:  # no span in the window: the parts' columns, no rows
        empty = pq.ParquetFile(files[0]).schema_arrow.empty_table()
        if "rank" not in empty.column_names:
            empty = empty.append_column("rank", pa.array([], pa.int32()))
        return conform_to_schema(empty, files[0], metadata=merge_metadata(metas))
    table = pa.concat_tables(tables).unify_dictionaries() if len(tables) > 1 else tables[0]
    return table.replace_schema_metadata(merge_metadata(metas))


def _load(spans: Any) -> pa.Table:
    from ..formats import load

    return load(spans)


def window_of(spans: Any) -> tuple[int, int]:
    """The run's whole window: (first start, last end), from the Parquet footers' statistics
    where the spans are Parquet files (no scan), else from the table."""
    files = _parquet_files(spans)
    if files is None:
        table = spans if isinstance(spans, pa.Table) else _load(spans)
        if table.num_rows == 0:
            return 0, 1
        return int(pc.min(table["start_ns"]).as_py()), int(pc.max(table["end_ns"]).as_py())
    import pyarrow.parquet as pq

    lows: list[int] = []
    highs: list[int] = []
    for path in files:
        meta = pq.ParquetFile(path).metadata
        names = meta.schema.to_arrow_schema().names
        for group in range(meta.num_row_groups):
            if meta.row_group(group).num_rows == 0:
                continue
            for column, into, pick in (("start_ns", lows, "min"), ("end_ns", highs, "max")):
                stats = meta.row_group(group).column(names.index(column)).statistics
                if stats is None or not stats.has_min_max:
                    table = pq.read_table(path, columns=["start_ns", "end_ns"])
                    into.append(getattr(pc, pick)(table[column]).as_py())
                else:
                    into.append(getattr(stats, pick))
    if not lows:
        return 0, 1
    return int(min(lows)), int(max(highs))


def _checked(
    spans: Any, start_ns: int | None, end_ns: int | None, width: int, window: tuple[int, int] | None
) -> tuple[int, int]:
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"width: {width!r} is not a number of pixels from 1 to {MAX_WIDTH}")
    if start_ns is None or end_ns is None:
        first, last = window if window is not None else window_of(spans)
        start_ns = first if start_ns is None else start_ns
        end_ns = max(last, start_ns + 1) if end_ns is None else end_ns
    if end_ns <= start_ns:
        raise ValueError(f"the window is empty: end_ns {end_ns} is not after start_ns {start_ns}")
    return int(start_ns), int(end_ns)


def timeline(
    spans: Any,
    start_ns: int | None = None,
    end_ns: int | None = None,
    width: int = 1200,
    *,
    ranks: Sequence[int] | None = None,
) -> dict[str, Any]:
    """What a ``width``-pixel view of ``[start_ns, end_ns)`` shows of ``spans`` (a table, a
    Parquet file, a run directory, or any trace file): per track (``rank``, ``pid``,
    ``thread_id``, ``lane``), the spans at least a pixel long exactly (``spans``: span_id,
    name, start_ns, end_ns, depth) and the shorter ones summarised per pixel (``pixels``: x,
    count, the busiest name, the outermost depth, their time in the window); a track with at
    most ``width`` spans in the window lists them all. Each span is counted once. The window
    defaults to the whole run; ``ranks`` keeps only those ranks' tracks."""
    start_ns, end_ns = _checked(spans, start_ns, end_ns, width, None)
    summary = _Summary(start_ns, end_ns, width)
    for batch in _batches(spans, start_ns, end_ns, ranks):
        summary.add(batch)
    return summary.result(ranks)


class TimelineIndex:
    """A run summarised once into ``bins`` bins a track over its whole window, so that a
    zoomed-out view (a pixel as long as a bin or longer) is answered from the bins, without
    reading the spans again: what ``hotspan serve`` keeps per run for its timeline.

    It is the kernel's own summary at ``bins`` pixels: per (track, bin) the count, time and
    outermost depth of the spans shorter than a bin, the time per name, and the spans a bin
    long or more as rows (a track with at most ``bins`` spans keeps all its rows). A view
    maps each bin to the pixel its start falls in: the spans of a bin that straddles two
    pixels count in the first, so a pixel's count is exact to a bin (exact outright where the
    view's pixels are whole bins); each span is still counted once. A view with pixels
    shorter than a bin is read from the spans: from the index's span blocks when it was built
    with ``blocks`` (a file: the spans' timeline columns in blocks of ``BLOCK_ROWS`` rows in
    the parts' order, LZ4-compressed Arrow IPC, with each block's first and last start, last
    end and ranks: a window reads only the blocks it reaches, where a Parquet row group of a
    million spans would be decoded whole), the kernel's answer exactly as :func:`timeline`
    gives it; without blocks ``view`` returns None (ask :func:`timeline`).

    Memory: three integers a (track, bin), the names' times, the long spans, and the blocks'
    directory (five integers a block)."""

    def __init__(
        self, spans: Any, bins: int = INDEX_BINS, *, blocks: str | os.PathLike | None = None
    ) -> None:
        self.window = window_of(spans)
        start, end = self.window
        self._summary = _Summary(start, max(end, start + 1), bins)
        writer = _BlockWriter(blocks, self._summary) if blocks is not None else None
        for batch in _batches(spans, None, None, None):
            self._summary.add(batch)
            if writer is not None:
                writer.add(batch)
        self._summary._merge_names()
        self.bins = bins
        self.bin_ns = self._summary.ns_per_pixel
        self.blocks = writer.close() if writer is not None else None

    #: The persisted form's version: an index file of another version is not read.
    FORMAT = 1

    def save(self, path: str | os.PathLike, version: str) -> None:
        """Write the index to ``path`` (a ``.npz`` file, written whole under another name
        and renamed, so a reader never sees half of one), with ``version``: the version of
        the run it summarises (see :func:`run_version`), which :meth:`load` checks."""
        import json
        import tempfile

        summary = self._summary
        merged = [summary._merge_track(code) for code in range(len(summary.tracks))]
        keys = np.concatenate([k for k, _t in merged] or [np.zeros(0, np.int64)])
        times = np.concatenate([t for _k, t in merged] or [np.zeros(0, np.float64)])
        offsets = np.cumsum([0] + [len(k) for k, _t in merged]).astype(np.int64)
        wide = [_plain(t) for t in summary.wide]
        few = [
            _plain(t).append_column("track", pa.array(np.full(t.num_rows, code, np.int64)))
            for code, tables in summary.few.items()
            for t in tables
        ]
        head = {
            "format": self.FORMAT,
            "version": version,
            "window": list(self.window),
            "bins": self.bins,
            "names": list(summary.names),
            "few": sorted(summary.few),
        }
        arrays: dict[str, np.ndarray] = {
            "tracks": np.array(list(summary.tracks), np.int64).reshape(-1, len(TRACK_KEYS)),
            "counts": summary.counts,
            "times": summary.times,
            "depths": summary.depths,
            "seen": summary.seen,
            "name_keys": keys,
            "name_times": times,
            "name_offsets": offsets,
            "wide": _ipc(wide),
            "few_rows": _ipc(few),
        }
        if self.blocks is not None:
            head["blocks"] = {
                "file": os.path.basename(self.blocks.path),
                "size": os.path.getsize(self.blocks.path),
            }
            arrays["blocks"] = self.blocks.directory
        arrays["head"] = np.frombuffer(json.dumps(head).encode(), np.uint8)
        path = os.fspath(path)
        folder = os.path.dirname(path) or "."
        handle, temporary = tempfile.mkstemp(prefix=".hotspan-tmp-", suffix=".npz", dir=folder)
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez(out, **arrays)  # type: ignore[arg-type]
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike, version: str) -> TimelineIndex | None:
        """The index saved at ``path`` if it is of this ``version`` of the run (and of this
        format), else None: an index of another version of the run is never used."""
        import json

        try:
            arrays = _mapped_npz(os.fspath(path))
            head = json.loads(arrays.pop("head").tobytes())
            if head.get("format") != cls.FORMAT or head.get("version") != version:
                return None
        except (OSError, ValueError, KeyError, EOFError):  # none, half-gone, or not an index
            return None
        index = cls.__new__(cls)
        index.window = (int(head["window"][0]), int(head["window"][1]))
        index.bins = int(head["bins"])
        start, end = index.window
        summary = _Summary(start, max(end, start + 1), index.bins)
        summary.names = {name: code for code, name in enumerate(head["names"])}
        summary.tracks = {
            (int(r), int(p), int(t), int(lane)): code
            for code, (r, p, t, lane) in enumerate(arrays["tracks"].tolist())
        }
        summary.counts, summary.times, summary.depths = (
            arrays["counts"],
            arrays["times"],
            arrays["depths"],
        )
        summary.seen = arrays["seen"]
        offsets = arrays["name_offsets"]
        for code in range(len(offsets) - 1):  # views of the arrays read, no copies
            low, high = int(offsets[code]), int(offsets[code + 1])
            summary.name_parts[code] = [
                (arrays["name_keys"][low:high], arrays["name_times"][low:high])
            ]
            summary.name_pending[code] = summary.name_merged[code] = high - low
        wide = _from_ipc(arrays["wide"])
        summary.wide = [wide] if wide is not None and wide.num_rows else []
        few = _from_ipc(arrays["few_rows"])
        summary.few = {int(code): [] for code in head["few"]}
        if few is not None:
            track = few["track"].to_numpy()
            rows = few.drop_columns(["track"])
            for code in summary.few:
                summary.few[code].append(rows.filter(pa.array(track == code)))
        index._summary = summary
        index.bin_ns = summary.ns_per_pixel
        index.blocks = None
        saved_blocks = head.get("blocks")
        if saved_blocks is not None:  # gone or not the one written with it: none
            where = os.path.join(os.path.dirname(os.fspath(path)), saved_blocks["file"])
            try:
                if os.path.getsize(where) == saved_blocks["size"]:
                    index.blocks = _Blocks(where, arrays["blocks"], summary)
            except (OSError, pa.ArrowInvalid):
                index.blocks = None
        return index

    def view(
        self,
        start_ns: int | None = None,
        end_ns: int | None = None,
        width: int = 1200,
        *,
        ranks: Sequence[int] | None = None,
    ) -> dict[str, Any] | None:
        """The timeline's answer for this window from the bins, or None when its pixels are
        shorter than a bin (then the spans must be read)."""
        start_ns, end_ns = _checked(None, start_ns, end_ns, width, self.window)
        index = self._summary
        out = _Summary(start_ns, end_ns, width)
        if out.ns_per_pixel < self.bin_ns:
            if self.blocks is None:
                return None
            for batch in self.blocks.batches(start_ns, end_ns, ranks):
                out.add(batch)
            return out.result(ranks)
        out.names = dict(index.names)  # the bins' name codes, kept
        # every track of the run, in its order; the tracks kept whole go through add()
        order = sorted(index.tracks.items(), key=lambda item: item[1])
        codes = np.array([out.tracks.setdefault(key, len(out.tracks)) for key, _c in order])
        out._grow(len(out.tracks))
        binned = np.array([code not in index.few for _key, code in order], bool)
        out.seen[codes[binned]] = width + 1  # summarised: never listed whole
        # the bins holding the window's first and last nanosecond, by the kernel's own rule
        lo = max(0, int(max(start_ns - index.start_ns, 0) / self.bin_ns))
        hi = min(self.bins, int(max(end_ns - 1 - index.start_ns, -1) / self.bin_ns) + 1)
        if end_ns <= index.start_ns:
            hi = 0
        if hi > lo and binned.any():
            # each bin's first nanosecond, as the kernel bins a span's start (float division):
            # a bin's pixel is then the one the kernel gives a span starting there
            bins = np.arange(lo, hi)
            offset = np.ceil(bins * self.bin_ns).astype(np.int64)
            offset -= ((offset - 1) / self.bin_ns).astype(np.int64) >= bins  # one too late
            offset += (offset / self.bin_ns).astype(np.int64) < bins  # one too early
            bin_start = index.start_ns + offset
            pixel = np.clip(
                ((np.maximum(bin_start, start_ns) - start_ns) / out.ns_per_pixel).astype(np.int64),
                0,
                width - 1,
            )
            # pixel is non-decreasing along the bins: each pixel's bins are one run of them
            first = np.flatnonzero(np.diff(pixel, prepend=-1))
            rows, cols = np.ix_(codes[binned], pixel[first])
            for name, reduce in (("counts", np.add), ("times", np.add), ("depths", np.minimum)):
                reduced = reduce.reduceat(getattr(index, name)[binned, lo:hi], first, axis=1)
                target = getattr(out, name)
                target[rows, cols] = reduce(target[rows, cols], reduced)
            kinds = max(len(index.names), 1)
            for code in np.flatnonzero(binned).tolist():
                keys, times = index._merge_track(code)
                bin_ = keys // _NAMES
                keep = (bin_ >= lo) & (bin_ < hi)
                if not keep.all():
                    keys, times, bin_ = keys[keep], times[keep], bin_[keep]
                if not len(keys):
                    continue
                named = keys % _NAMES
                moved = pixel[bin_ - lo]
                if width * kinds <= _DENSE_CELLS:
                    # few names: a (pixel, name) array, one bincount, no hash of the keys
                    dense = moved * kinds + named
                    summed = np.bincount(dense, weights=times, minlength=width * kinds)
                    present = np.flatnonzero(np.bincount(dense, minlength=width * kinds))
                    unique, added = (present // kinds) * _NAMES + present % kinds, summed[present]
                else:
                    unique, inverse = _codes(moved * _NAMES + named)
                    added = np.bincount(inverse, weights=times, minlength=len(unique))
                out.add_names(int(codes[code]), unique, added)
        # the long spans of the binned tracks (a whole track's rows include its long ones)
        whole = pa.array(sorted(index.few), pa.int64())
        rows_of_index = [
            t.filter(pc.invert(pc.is_in(t["track"], whole))).drop_columns(["track"])
            for t in index.wide
        ]
        for tables in index.few.values():
            rows_of_index += tables
        for table in rows_of_index:
            for batch in table.to_batches(_BATCH_ROWS):
                out.add(batch)
        return out.result(ranks)


def _mapped_npz(path: str) -> dict[str, np.ndarray]:
    """The arrays of an uncompressed ``.npz`` file (as ``np.savez`` writes it), memory-mapped
    read-only: reading an index back costs no copy of its hundreds of MB (``np.load`` reads
    and checks each member whole), and only the pages a view touches are read."""
    import struct
    import zipfile

    out: dict[str, np.ndarray] = {}
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile:
        raise ValueError(f"{path}: not an index") from None
    with archive, open(path, "rb") as raw:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError(f"{path}: not an index ({info.filename})")
            raw.seek(info.header_offset)
            local = raw.read(30)
            if local[:4] != b"PK\x03\x04":
                raise ValueError(f"{path}: not an index")
            name_length, extra_length = struct.unpack("<HH", local[26:30])
            raw.seek(info.header_offset + 30 + name_length + extra_length)
            major, _minor = np.lib.format.read_magic(raw)
            read_header = (
                np.lib.format.read_array_header_1_0
                if major == 1
                else np.lib.format.read_array_header_2_0
            )
            shape, fortran, dtype = read_header(raw)
            if dtype.hasobject:
                raise ValueError(f"{path}: not an index (objects)")
            count = int(np.prod(shape)) if shape else 1
            offset = raw.tell()
            if count == 0:
                array = np.zeros(shape, dtype)
            else:
                array = np.memmap(
                    path, dtype, "r", offset=offset, shape=shape, order="F" if fortran else "C"
                )
            out[info.filename[: -len(".npy")]] = np.asarray(array)
    return out


def _plain(table: pa.Table) -> pa.Table:
    """``table`` with dictionary columns decoded (parts may encode ``name`` either way)."""
    for i, field in enumerate(table.schema):
        if pa.types.is_dictionary(field.type):
            table = table.set_column(i, field.name, table.column(i).cast(field.type.value_type))
    return table


def _ipc(tables: list[pa.Table]) -> np.ndarray:
    """``tables`` as one Arrow IPC stream's bytes (empty: no tables)."""
    if not tables:
        return np.zeros(0, np.uint8)
    table = pa.concat_tables(tables, promote_options="permissive")
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return np.frombuffer(sink.getvalue(), np.uint8)


def _from_ipc(data: np.ndarray) -> pa.Table | None:
    if not len(data):
        return None
    return pa.ipc.open_stream(pa.py_buffer(data.tobytes())).read_all()


def run_version(files: Sequence[str | os.PathLike]) -> str:
    """A run's version for a persisted :class:`TimelineIndex`: a digest of its files' names,
    sizes and modification times (a part is never written over: a new, removed or compacted
    part changes it)."""
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(os.fspath(f) for f in files):
        st = os.stat(path)
        name = os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
        digest.update(f"{name}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:32]


#: Rows a block of a :class:`TimelineIndex`'s span blocks holds (at most).
BLOCK_ROWS = 1 << 14
#: The columns of the span blocks: the kernel's, the name and the track as codes.
_BLOCK_SCHEMA = pa.schema(
    [
        ("span_id", pa.uint64()),
        ("parent_id", pa.uint64()),
        ("name", pa.int32()),
        ("start_ns", pa.int64()),
        ("end_ns", pa.int64()),
        ("depth", pa.int32()),
        ("track", pa.int32()),
    ]
)


class _BlockWriter:
    """Writes the spans an index is built from as blocks (see :class:`TimelineIndex`), with
    the index's own name and track codes; a file that cannot be written leaves no blocks
    (the index still answers, the finer views from the spans)."""

    def __init__(self, path: str | os.PathLike, summary: _Summary) -> None:
        self.path = os.fspath(path)
        self.summary = summary
        self.rows: list[np.ndarray] = []  # per block: first start, last start, last end, ranks
        self.writer: Any = None
        try:
            self.sink = pa.OSFile(self.path, "wb")
            self.writer = pa.ipc.new_file(
                self.sink, _BLOCK_SCHEMA, options=pa.ipc.IpcWriteOptions(compression="lz4")
            )
        except (OSError, pa.ArrowException):
            self._drop()

    def _drop(self) -> None:
        self.writer = None
        try:
            self.sink.close()
        except Exception:  # noqa: BLE001  (never opened)
            pass
        try:
            os.unlink(self.path)
        except OSError:
            pass

    def add(self, batch: pa.RecordBatch) -> None:
        if self.writer is None or batch.num_rows == 0:
            return
        summary = self.summary
        track = summary._track_codes(batch)
        names = summary._name_codes(batch.column("name"))
        keys = np.array(list(summary.tracks), np.int64).reshape(-1, len(TRACK_KEYS))
        parent = batch.column("parent_id") if "parent_id" in batch.schema.names else None
        columns = [
            batch.column("span_id").cast(pa.uint64()),
            parent.cast(pa.uint64())
            if parent is not None
            else pa.nulls(batch.num_rows, pa.uint64()),
            pa.array(names.astype(np.int32)),
            batch.column("start_ns").cast(pa.int64()),
            batch.column("end_ns").cast(pa.int64()),
            batch.column("depth").cast(pa.int32()),
            pa.array(track.astype(np.int32)),
        ]
        table = pa.RecordBatch.from_arrays(columns, schema=_BLOCK_SCHEMA)
        start = batch.column("start_ns").to_numpy(zero_copy_only=False)
        end = batch.column("end_ns").to_numpy(zero_copy_only=False)
        rank = keys[track, 0]
        try:
            for at in range(0, batch.num_rows, BLOCK_ROWS):
                cut = slice(at, at + BLOCK_ROWS)
                self.writer.write_batch(table.slice(at, BLOCK_ROWS))
                self.rows.append(
                    np.array(
                        [
                            start[cut].min(),
                            start[cut].max(),
                            end[cut].max(),
                            rank[cut].min(),
                            rank[cut].max(),
                        ],
                        np.int64,
                    )
                )
        except (OSError, pa.ArrowException):  # a full disk: no blocks
            self._drop()

    def close(self) -> _Blocks | None:
        if self.writer is None:
            return None
        try:
            self.writer.close()
            self.sink.close()
        except (OSError, pa.ArrowException):
            self._drop()
            return None
        directory = np.array(self.rows, np.int64).reshape(-1, 5)
        return _Blocks(self.path, directory, self.summary)


class _Blocks:
    """A :class:`TimelineIndex`'s span blocks, read through a memory map: the blocks a
    window reaches, as the kernel's batches (only the rows in the window)."""

    def __init__(self, path: str, directory: np.ndarray, summary: _Summary) -> None:
        import threading

        self.path = path
        self.directory = directory
        self.names = pa.array(list(summary.names) or [""], pa.string())
        self.keys = np.array(list(summary.tracks), np.int64).reshape(-1, len(TRACK_KEYS))
        self.reader = pa.ipc.open_file(pa.memory_map(path))
        if self.reader.num_record_batches != len(directory):
            raise pa.ArrowInvalid(
                f"{path}: {self.reader.num_record_batches} blocks, not {len(directory)}"
            )
        self.lock = threading.Lock()

    def batches(
        self, start_ns: int, end_ns: int, ranks: Sequence[int] | None
    ) -> Iterator[pa.RecordBatch]:
        d = self.directory
        reach = (d[:, 0] < end_ns) & ((d[:, 2] > start_ns) | (d[:, 1] >= start_ns))
        if ranks is not None:
            wanted = np.array(sorted({int(r) for r in ranks}), np.int64)
            lo = np.searchsorted(wanted, d[:, 3])  # some wanted rank in [rank min, rank max]
            reach &= (lo < len(wanted)) & (wanted[np.minimum(lo, len(wanted) - 1)] <= d[:, 4])
        for i in np.flatnonzero(reach).tolist():
            with self.lock:
                block = self.reader.get_batch(i)
            start = block.column("start_ns").to_numpy()
            end = block.column("end_ns").to_numpy()
            inside = (start < end_ns) & ((end > start_ns) | (start >= start_ns))
            track = block.column("track").to_numpy()
            if ranks is not None:
                inside &= np.isin(self.keys[track, 0], wanted)
            rows = np.flatnonzero(inside)
            if not len(rows):
                continue
            block = block.take(pa.array(rows))
            track = track[rows]
            keys = self.keys[track]
            yield pa.RecordBatch.from_arrays(
                [
                    block.column("span_id"),
                    block.column("parent_id"),
                    pa.DictionaryArray.from_arrays(block.column("name"), self.names),
                    block.column("start_ns"),
                    block.column("end_ns"),
                    block.column("depth"),
                    pa.array(keys[:, 0].astype(np.int32)),
                    pa.array(keys[:, 1]),
                    pa.array(keys[:, 2]),
                    pa.array(keys[:, 3]),
                ],
                names=[*_COLUMNS, "lane"],
            )
