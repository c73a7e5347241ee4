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
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["TRACK_KEYS", "timeline", "window_of"]

#: The columns that tell tracks apart, in the answer's order.
TRACK_KEYS = ("rank", "pid", "thread_id", "lane")
#: The columns the timeline reads.
_COLUMNS = ("span_id", "name", "start_ns", "end_ns", "depth", "rank", "pid", "thread_id")
#: Rows read from a Parquet part at a time.
_BATCH_ROWS = 1 << 18
#: Widths a request may ask for (a 16k screen at most).
MAX_WIDTH = 16_384


@dataclass
class _Track:
    """What one track holds so far: its exact spans (as column chunks) and its summary
    rows (pixel, name code, count, time, least depth), reduced as they pile up."""

    exact: list[pa.Table] = field(default_factory=list)
    #: (pixel, name code) -> [count, time, least depth], kept as parallel arrays.
    keys: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    counts: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    times: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    depths: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: The track's spans short enough to summarise, kept as rows while there are few (so a
    #: track of at most ``width`` spans is listed exactly): None once there are more.
    few: list[pa.Table] | None = field(default_factory=list)
    few_rows: int = 0


class _Summary:
    """The kernel: ``add`` one batch of spans at a time, ``result`` at the end."""

    def __init__(self, start_ns: int, end_ns: int, width: int) -> None:
        self.start_ns, self.end_ns, self.width = start_ns, end_ns, width
        self.ns_per_pixel = (end_ns - start_ns) / width
        self.names: dict[str, int] = {}
        self.tracks: dict[tuple[int, int, int, int], _Track] = {}

    def _name_codes(self, names: pa.ChunkedArray | pa.Array) -> np.ndarray:
        encoded = pc.dictionary_encode(names)
        if isinstance(encoded, pa.ChunkedArray):
            encoded = encoded.combine_chunks() if encoded.num_chunks != 1 else encoded.chunk(0)
        mapping = np.array(
            [
                self.names.setdefault(str(n), len(self.names))
                for n in encoded.dictionary.to_pylist()
            ],
            dtype=np.int64,
        )
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        return mapping[indices] if len(mapping) else np.zeros(len(indices), np.int64)

    def add(self, batch: pa.Table) -> None:
        if batch.num_rows == 0:
            return
        start = batch["start_ns"].to_numpy()
        end = batch["end_ns"].to_numpy()
        inside = (start < self.end_ns) & ((end > self.start_ns) | (start >= self.start_ns))
        if not inside.all():
            batch = batch.filter(pa.array(inside))
            if batch.num_rows == 0:
                return
            start, end = start[inside], end[inside]
        lane = (
            batch["lane"].to_numpy(zero_copy_only=False).astype(np.int64)
            if "lane" in batch.column_names
            else np.zeros(batch.num_rows, np.int64)
        )
        keys = np.stack(
            [
                batch["rank"].to_numpy(zero_copy_only=False).astype(np.int64),
                batch["pid"].to_numpy(zero_copy_only=False).astype(np.int64),
                batch["thread_id"].to_numpy(zero_copy_only=False).astype(np.int64),
                lane,
            ],
            axis=1,
        )
        unique, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        wide = (end - start) >= self.ns_per_pixel
        clipped = np.maximum(start, self.start_ns)
        pixel = np.minimum(
            ((clipped - self.start_ns) / self.ns_per_pixel).astype(np.int64), self.width - 1
        )
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(unique) + 1))
        names = None
        for code, key in enumerate(map(tuple, unique.tolist())):
            rows = order[bounds[code] : bounds[code + 1]]
            track = self.tracks.setdefault(key, _Track())
            rows_wide = rows[wide[rows]]
            if len(rows_wide):
                track.exact.append(batch.take(pa.array(rows_wide)))
            rows_short = rows[~wide[rows]]
            if not len(rows_short):
                continue
            if track.few is not None:
                track.few.append(batch.take(pa.array(rows_short)))
                track.few_rows += len(rows_short)
                if track.few_rows + sum(t.num_rows for t in track.exact) <= self.width:
                    continue
                # More than a screen's worth: summarise what was kept, and from now on.
                kept = pa.concat_tables(track.few)
                track.few = None
                self._summarise(track, kept)
                continue
            if names is None:
                names = self._name_codes(batch["name"])
            self._fold(
                track,
                pixel[rows_short],
                names[rows_short],
                (np.minimum(end, self.end_ns) - clipped)[rows_short],
                batch["depth"].to_numpy(zero_copy_only=False)[rows_short].astype(np.int64),
            )

    def _summarise(self, track: _Track, table: pa.Table) -> None:
        start = table["start_ns"].to_numpy()
        end = table["end_ns"].to_numpy()
        clipped = np.maximum(start, self.start_ns)
        pixel = np.minimum(
            ((clipped - self.start_ns) / self.ns_per_pixel).astype(np.int64), self.width - 1
        )
        self._fold(
            track,
            pixel,
            self._name_codes(table["name"]),
            np.minimum(end, self.end_ns) - clipped,
            table["depth"].to_numpy(zero_copy_only=False).astype(np.int64),
        )

    def _fold(
        self,
        track: _Track,
        pixel: np.ndarray,
        name: np.ndarray,
        time: np.ndarray,
        depth: np.ndarray,
    ) -> None:
        """Add spans to the track's (pixel, name) sums, reduced at once: the sums stay at
        most one row per (pixel, name) whatever the spans."""
        keys = np.concatenate([track.keys, pixel * (1 << 32) + name])
        counts = np.concatenate([track.counts, np.ones(len(pixel), np.int64)])
        times = np.concatenate([track.times, time.astype(np.int64)])
        depths = np.concatenate([track.depths, depth])
        unique, inverse = np.unique(keys, return_inverse=True)
        track.keys = unique
        track.counts = np.bincount(inverse, weights=counts, minlength=len(unique)).astype(np.int64)
        track.times = np.bincount(inverse, weights=times, minlength=len(unique)).astype(np.int64)
        least = np.full(len(unique), np.iinfo(np.int64).max, np.int64)
        np.minimum.at(least, inverse, depths)
        track.depths = least

    def result(self) -> dict[str, Any]:
        names = np.array(list(self.names), dtype=object)
        tracks = []
        for key in sorted(self.tracks):
            track = self.tracks[key]
            exact = list(track.exact)
            if track.few is not None:
                exact += track.few
            entry: dict[str, Any] = dict(zip(TRACK_KEYS, key))
            spans = pa.concat_tables(exact) if exact else None
            entry["spans"] = _span_rows(spans) if spans is not None else []
            pixels = []
            if len(track.keys):
                pixel = track.keys >> 32
                name = track.keys & ((1 << 32) - 1)
                # per pixel: the count and least depth over its names, the busiest name
                bounds = np.flatnonzero(np.diff(pixel)) + 1
                starts = np.concatenate([[0], bounds])
                counts = np.add.reduceat(track.counts, starts)
                depths = np.minimum.reduceat(track.depths, starts)
                times = np.add.reduceat(track.times, starts)
                # the busiest name: the largest time in each pixel's run (ties: the first name)
                ends = np.concatenate([bounds, [len(pixel)]])
                for i, (lo, hi) in enumerate(zip(starts.tolist(), ends.tolist())):
                    busiest = lo + int(np.argmax(track.times[lo:hi]))
                    pixels.append(
                        {
                            "x": int(pixel[lo]),
                            "count": int(counts[i]),
                            "name": str(names[name[busiest]]),
                            "depth": int(depths[i]),
                            "time_ns": int(times[i]),
                        }
                    )
            entry["pixels"] = pixels
            tracks.append(entry)
        return {
            "start_ns": self.start_ns,
            "end_ns": self.end_ns,
            "width": self.width,
            "ns_per_pixel": self.ns_per_pixel,
            "tracks": tracks,
        }


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
) -> Iterator[pa.Table]:
    """The spans overlapping the window, in batches (the window and ranks pushed down to
    the Parquet reader where the spans are Parquet files)."""
    files = _parquet_files(spans)
    if files is None:
        table = spans if isinstance(spans, pa.Table) else _load(spans)
        if ranks is not None:
            table = table.filter(pc.is_in(table["rank"], pa.array(list(ranks), pa.int32())))
        for batch in table.to_batches(_BATCH_ROWS):
            yield pa.Table.from_batches([batch])
        return
    import pyarrow.dataset as ds

    condition = None
    if start_ns is not None and end_ns is not None:
        start, end = ds.field("start_ns"), ds.field("end_ns")
        condition = (start < end_ns) & ((end > start_ns) | (start >= start_ns))
    if ranks is not None:
        in_ranks = ds.field("rank").isin(list(ranks))
        condition = in_ranks if condition is None else condition & in_ranks
    for path in files:
        part = ds.dataset(path, format="parquet")
        columns = [c for c in (*_COLUMNS, "lane") if c in part.schema.names]
        for batch in part.to_batches(
            columns=columns, filter=condition, batch_size=_BATCH_ROWS, use_threads=False
        ):
            if batch.num_rows:
                yield pa.Table.from_batches([batch])


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
    if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= MAX_WIDTH:
        raise ValueError(f"width: {width!r} is not a number of pixels from 1 to {MAX_WIDTH}")
    if start_ns is None or end_ns is None:
        first, last = window_of(spans)
        start_ns = first if start_ns is None else start_ns
        end_ns = max(last, start_ns + 1) if end_ns is None else end_ns
    if end_ns <= start_ns:
        raise ValueError(f"the window is empty: end_ns {end_ns} is not after start_ns {start_ns}")
    summary = _Summary(int(start_ns), int(end_ns), width)
    for batch in _batches(spans, start_ns, end_ns, ranks):
        summary.add(batch)
    return summary.result()
