"""The timeline index's fine levels (see :mod:`hotspan.analysis._timeline_index`): bins finer
than the index's own, so that a zoom whose pixels are shorter than the index's bins but hold
many spans a track is still answered from bins, not from every span of the window.

A fine level of ``width`` bins a track keeps, per (track, bin), the count, time and least
depth of the spans shorter than a bin that start in it, and the busiest name (the name with
the most time among them, ties to the lowest code): four integers a bin, where the index's own
levels keep every name's time (a time per bin and name present: 9 a bin on a 200 M-span run,
which at 2^17 bins a track would be 150 M of them). The spans a fine bin long or more and
shorter than the index's bin are kept as rows (span blocks' columns), per track sorted by
start, in an Arrow IPC file, so that a view takes those of its window by bisection.

Why the busiest name alone is enough: a view reads the coarsest level whose bins are no longer
than its pixels, and consecutive fine levels halve the bin, so a pixel holds fewer than two
bins of that level; where the view's pixels are whole bins (one bin each) the pixel's busiest
name is its bin's, exactly the spans' own. A pixel that straddles two bins (a view not aligned
to the bins, already exact only to a bin in its counts) takes the busiest name of its bin with
the most time.

The levels are built per rank from the index's span blocks, in a second pass after the first
(a rank's tracks at the finest fine width in memory: a few MB; the coarser fine levels from it
by halving, as the index's own levels), and written row by row into one file of fixed layout,
memory-mapped back: only the pages a view touches are read.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from ._timeline_kernel import NAMES, Summary, value_codes
from ._timeline_store import trim_heap

__all__ = [
    "FINE_BINS",
    "FINE_NO_DEPTH",
    "FineLevel",
    "FineLevels",
    "build_fine_levels",
    "fine_names",
    "fine_widths",
]

#: The most bins a track of a fine level has (the finest level's width at most): 3 x 2^17, not
#: a power of two, so that the levels (this, its half, quarter, ... down to the index's
#: 2^14) fall between the index's powers of two: on the 200 M-span run (855 s) the 1/16,
#: 1/64 and 1/256 zooms of a 1,065-pixel view have pixels just shorter than a bin of 2^16
#: and 2^18 bins, and the levels of 3 x 2^k bins still answer them.
FINE_BINS = 3 << 17
#: A fine level is kept only while its bins hold this many spans of the busiest track or more
#: on average (finer: a window of a screen's bins holds few spans, read from the blocks fast).
_SPANS_A_BIN = 4
#: The arrays of a fine level, in the file's order: (name, dtype).
_ARRAYS = (("counts", np.uint32), ("times", np.int64), ("depths", np.int32), ("names", np.int32))
#: One row start in this many of each track's rows is kept in memory (see :class:`FineLevels`).
_SAMPLE = 64
#: The least depth of a bin with no span, as stored.
FINE_NO_DEPTH = np.iinfo(np.int32).max


def fine_widths(
    bins: int, seen: np.ndarray, binned: np.ndarray, limit: int = FINE_BINS
) -> list[int]:
    """The widths of the fine levels worth keeping over an index of ``bins`` bins (coarsest
    first): ``limit``, its half, quarter, ... while more than ``bins`` (each level halves the
    next finer one), those whose bins hold ``_SPANS_A_BIN`` spans of the busiest summarised
    track or more on average."""
    most = int(seen[binned].max()) if binned.any() else 0
    widths = []
    width = limit
    while width > bins:
        if width * _SPANS_A_BIN <= most:
            widths.append(width)
        if width % 2:
            break
        width //= 2
    return widths[::-1]


class FineLevel:
    """One fine level: ``width`` bins a track, arrays indexed by (track code, bin), read from
    its file with plain reads (:meth:`read`): a page cache of large folios maps a MB around
    each page a memory map touches, 130 MB for the 4 KB a track of a view reads."""

    def __init__(
        self, start_ns: int, end_ns: int, width: int, fd: int, offsets: dict[str, int]
    ) -> None:
        self.start_ns, self.end_ns, self.width = start_ns, end_ns, width
        self.ns_per_pixel = (end_ns - start_ns) / width
        self.fd, self.offsets = fd, offsets

    def read(self, name: str, codes: np.ndarray, lo: int, hi: int) -> np.ndarray:
        """Bins ``lo:hi`` of the tracks ``codes`` of the array ``name``, as int64."""
        dtype = np.dtype(dict(_ARRAYS)[name])
        out = np.empty((len(codes), hi - lo), dtype)
        row = self.width * dtype.itemsize
        for i, code in enumerate(np.asarray(codes).tolist()):
            at = self.offsets[name] + code * row + lo * dtype.itemsize
            data = os.pread(self.fd, (hi - lo) * dtype.itemsize, at)
            if len(data) != (hi - lo) * dtype.itemsize:
                raise OSError(f"fine level: {len(data)} bytes read at {at}")
            out[i] = np.frombuffer(data, dtype)
        return out.astype(np.int64)


class FineLevels:
    """An index's fine levels (coarsest first) and the rows between its finest bin and the
    index's own bin, read from the file at ``path`` (the levels, plain reads) and the Arrow
    IPC file at ``rows_path`` (memory-mapped), as :func:`build_fine_levels` wrote them."""

    def __init__(
        self,
        path: str,
        rows_path: str,
        start_ns: int,
        end_ns: int,
        widths: Sequence[int],
        tracks: int,
        ranges: np.ndarray,
    ) -> None:
        import mmap

        self.path, self.rows_path = path, rows_path
        self.widths = list(widths)
        self.levels = []
        size = os.path.getsize(path)
        self.fd = os.open(path, os.O_RDONLY)
        with open(rows_path, "rb") as rows:
            self._map = mmap.mmap(rows.fileno(), 0, access=mmap.ACCESS_READ)
        offset = 0
        for width in self.widths:
            offsets = {}
            for name, dtype in _ARRAYS:
                offsets[name] = offset
                offset += tracks * width * np.dtype(dtype).itemsize
            self.levels.append(FineLevel(start_ns, end_ns, width, self.fd, offsets))
        if size != offset:
            os.close(self.fd)
            raise ValueError(f"{path}: {size} bytes, not {offset}")
        self.ranges = ranges
        self.rows = pa.ipc.open_file(pa.BufferReader(pa.py_buffer(self._map))).read_all()
        # every _SAMPLE-th row's start of each track, in memory: a window's rows are found
        # there, and only they are read from the map
        starts = self.rows.column("start_ns")
        self.samples = [
            starts.slice(int(at), int(count)).to_numpy()[::_SAMPLE].copy()
            for at, count in ranges.tolist()
        ]
        self.release()

    def __del__(self) -> None:
        try:
            os.close(self.fd)
        except (OSError, AttributeError):
            pass

    def release(self) -> None:
        """Give back the pages of the rows' file that views touched (they stay in the page
        cache, read again from there): without it, every page a zoom ever touched stays
        counted in the server's resident memory. Safe while other views read: a page given
        back is mapped again on its next read."""
        import mmap

        self._map.madvise(mmap.MADV_DONTNEED)

    def rows_of(
        self, codes: Sequence[int], start_ns: int, end_ns: int, shortest: float, reach: float
    ) -> pa.Table | None:
        """The rows of tracks ``codes`` at least ``shortest`` long that overlap the window
        (each row shorter than ``reach``: those starting from ``start_ns - reach`` on)."""
        pieces = []
        for code in codes:
            at, count = (int(v) for v in self.ranges[code])
            if not count:
                continue
            # the rows from the sample at or before the window's first to the one after its last
            i, j = np.searchsorted(self.samples[code], [start_ns - int(reach) - 1, end_ns])
            a, b = max(int(i) - 1, 0) * _SAMPLE, min(int(j) * _SAMPLE, count)
            if a >= b:
                continue
            rows = self.rows.slice(at + a, b - a)
            start = rows.column("start_ns").to_numpy()
            end = rows.column("end_ns").to_numpy()
            keep = ((end - start) >= shortest) & (start < end_ns) & (end > start_ns)
            if keep.any():
                pieces.append(rows.filter(pa.array(keep)))
        # one table of one chunk: the kernel's cost is paid once a batch, not once a track
        return pa.concat_tables(pieces).combine_chunks() if pieces else None


def _halved(fine: Summary, width: int, rows: list[pa.Table], keys: np.ndarray) -> Summary:
    """The level of ``width`` bins (half of ``fine``'s) over the same tracks: the sums of two
    bins, and the rows of ``rows`` (the finest level's long spans) that are a bin of
    ``fine`` long or more and shorter than a bin of this level, binned as the kernel bins them."""
    level = Summary(fine.start_ns, fine.end_ns, width)
    level.tracks = fine.tracks
    level._grow(len(fine.tracks))
    level.seen[:] = width + 1  # summarised: never listed whole
    tracks = len(fine.counts)
    level.counts += fine.counts.reshape(tracks, width, 2).sum(axis=2)
    level.times += fine.times.reshape(tracks, width, 2).sum(axis=2)
    level.depths = np.minimum(level.depths, fine.depths.reshape(tracks, width, 2).min(axis=2))
    level.names = fine.names
    for code in range(tracks):
        pairs, times = fine._merge_track(code)
        if not len(pairs):
            continue
        coarse = (pairs // NAMES // 2) * NAMES + pairs % NAMES
        unique, inverse = value_codes(coarse)
        level.add_names(code, unique, np.bincount(inverse, weights=times, minlength=len(unique)))
    for table in rows:
        start = table.column("start_ns").to_numpy()
        end = table.column("end_ns").to_numpy()
        length = end - start
        between = (length >= fine.ns_per_pixel) & (length < level.ns_per_pixel)
        if between.any():
            chosen = table.filter(pa.array(between))
            track = chosen.column("track").to_numpy()
            for batch in chosen.drop_columns(["track"]).combine_chunks().to_batches():
                level.add(batch, (track[: batch.num_rows], keys))
                track = track[batch.num_rows :]
    return level


def build_fine_levels(
    summary: Summary,
    blocks: Any,
    widths: Sequence[int],
    path: str,
    rows_path: str,
    block_schema: pa.Schema,
) -> np.ndarray:
    """Write the fine levels of ``widths`` (finest last) of an index whose first pass is
    ``summary`` (its tracks, the tracks it keeps whole) into ``path``, reading the spans rank
    by rank from ``blocks`` (the index's span blocks), and the rows a fine bin long or more
    and shorter than the index's bin into ``rows_path`` (``block_schema``'s columns), per track
    sorted by start. Returns each track's (first row, rows) in that file."""
    tracks = len(summary.tracks)
    keys = blocks.keys
    binned = np.array([code not in summary.few for code in range(tracks)], bool)
    start_ns, end_ns = summary.start_ns, summary.end_ns
    finest = widths[-1]
    layout: list[tuple[int, str, np.dtype[Any], int]] = []
    offset = 0
    for width in widths:
        for name, dtype in _ARRAYS:
            layout.append((width, name, np.dtype(dtype), offset))
            offset += tracks * width * np.dtype(dtype).itemsize
    ranges = np.zeros((tracks, 2), np.int64)
    written = 0
    with open(path, "wb") as out, pa.OSFile(rows_path, "wb") as sink:
        out.truncate(offset)
        fd = out.fileno()
        writer = pa.ipc.new_file(sink, block_schema)
        for rank in sorted({int(r) for r in keys[binned, 0].tolist()}):
            mine = np.flatnonzero(binned & (keys[:, 0] == rank))
            local = np.full(tracks, -1, np.int64)
            local[mine] = np.arange(len(mine))
            level = Summary(start_ns, end_ns, finest)
            level.names = dict(summary.names)  # the blocks' names are the index's: same codes
            level.tracks = {
                (int(r), int(p), int(t), int(k)): i
                for i, (r, p, t, k) in enumerate(keys[mine].tolist())
            }
            level._grow(len(mine))
            level.seen[:] = finest + 1
            for batch, track in blocks.batches(start_ns, end_ns, [rank]):
                keep = local[track] >= 0
                if not keep.all():
                    batch, track = batch.filter(pa.array(keep)), track[keep]
                level.add(batch, (track, keys))
            mine_keys = keys[mine]
            long_rows = list(level.wide)
            for width in reversed(widths):
                if level.width != width:
                    level = _halved(level, width, long_rows, mine_keys)
                level._merge_names()
                trim_heap()  # the batches' and the merges' scratch given back (see trim_heap)
                busiest = level._busiest()
                depths = np.where(level.depths > FINE_NO_DEPTH, FINE_NO_DEPTH, level.depths)
                values = {
                    "counts": level.counts,
                    "times": level.times,
                    "depths": depths,
                    "names": busiest,
                }
                for w, name, kind, at in layout:
                    if w != width:
                        continue
                    array = np.ascontiguousarray(values[name].astype(kind))
                    row = width * kind.itemsize
                    for i, code in enumerate(mine.tolist()):
                        os.pwrite(fd, array[i].tobytes(), at + code * row)
            # the long rows shorter than the index's bin (longer ones: the index's own rows)
            if long_rows:
                table = pa.concat_tables(long_rows, promote_options="permissive")
                length = pa.compute.subtract(table["end_ns"], table["start_ns"]).to_numpy()
                table = table.filter(pa.array(length < summary.ns_per_pixel))
                if table.num_rows:
                    local_track = table.column("track").to_numpy()
                    order = np.lexsort((table.column("start_ns").to_numpy(), local_track))
                    table = table.take(pa.array(order))
                    local_track = local_track[order]
                    columns = [
                        table.column("span_id").cast(pa.uint64()),
                        table.column("parent_id").cast(pa.uint64()),
                        _codes(table.column("name"), summary),
                        table.column("start_ns").cast(pa.int64()),
                        table.column("end_ns").cast(pa.int64()),
                        table.column("depth").cast(pa.int32()),
                        pa.array(mine[local_track].astype(np.int32)),
                    ]
                    writer.write_batch(
                        pa.RecordBatch.from_arrays(
                            [
                                c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c
                                for c in columns
                            ],
                            schema=block_schema,
                        )
                    )
                    counts = np.bincount(local_track, minlength=len(mine))
                    firsts = written + np.concatenate(([0], np.cumsum(counts)[:-1]))
                    ranges[mine, 0] = firsts
                    ranges[mine, 1] = counts
                    written += table.num_rows
            del level, long_rows
            trim_heap()  # this rank's arrays given back before the next rank's are made
        writer.close()
    return ranges


def _codes(names: Any, summary: Summary) -> pa.Array:
    """Names as the index's name codes (int32)."""
    array = names.combine_chunks() if isinstance(names, pa.ChunkedArray) else names
    if not pa.types.is_dictionary(array.type):
        array = pa.compute.dictionary_encode(array)
    mapping = np.array(
        [summary.names[str(n)] for n in array.dictionary.to_pylist()] or [0], np.int32
    )
    return pa.array(mapping[array.indices.to_numpy(zero_copy_only=False)])


def fine_names(
    out: Summary,
    level: FineLevel,
    out_codes: np.ndarray,
    binned: np.ndarray,
    lo: int,
    hi: int,
    pixel: np.ndarray,
    first: np.ndarray,
) -> None:
    """Each pixel's busiest name from a fine level's bins ``lo:hi`` (``pixel``: each bin's
    pixel; ``first``: where each pixel's bins begin): the busiest name of its bin with the
    most time (one bin a pixel where the view's pixels are whole bins: the spans' own)."""
    names = level.read("names", np.flatnonzero(binned), lo, hi)
    times = level.read("times", np.flatnonzero(binned), lo, hi)
    times[names < 0] = -1
    most = np.maximum.reduceat(times, first, axis=1)
    lengths = np.diff(np.append(first, hi - lo))
    segment = np.repeat(np.arange(len(first)), lengths)
    column = np.arange(hi - lo)
    chosen = np.where((times == most[:, segment]) & (names >= 0), column, hi - lo)
    pick = np.minimum.reduceat(chosen, first, axis=1)
    pixels = pixel[first]
    for row, code in enumerate(out_codes.tolist()):
        found = pick[row] < hi - lo
        if not found.any():
            continue
        at = pick[row][found]
        keys = pixels[found] * NAMES + names[row, at]
        out.add_names(int(code), keys, np.maximum(times[row, at], 0).astype(np.float64))
