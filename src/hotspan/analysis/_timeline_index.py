"""The timeline's index (see :mod:`hotspan.analysis.timeline`): a run summarised once, saved
beside it and memory-mapped back, with the span blocks that answer finer views."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._timeline_kernel import (
    BATCH_ROWS,
    NAMES,
    DENSE_CELLS,
    INDEX_BINS,
    TRACK_KEYS,
    NO_DEPTH,
    value_codes,
    Summary,
)
from ._timeline_fine import (
    FINE_BINS,
    FINE_NO_DEPTH,
    FineLevel,
    FineLevels,
    build_fine_levels,
    fine_names,
    fine_widths,
)
from ._timeline_blocks import BLOCK_SCHEMA, BlockWriter, Blocks
from ._timeline_source import window_batches, checked_window, window_of
from ._timeline_store import (
    from_ipc_bytes,
    ipc_bytes,
    mapped_npz,
    decoded_table,
    release_mapped,
    trim_heap,
    write_npz,
)

__all__ = ["LEVEL_BINS", "TimelineIndex", "run_version"]


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
    the parts' order, zstd-compressed Arrow IPC (8.5 bytes a span where LZ4 took 19), with each block's first and last start, last
    end and ranks: a window reads only the blocks it reaches, where a Parquet row group of a
    million spans would be decoded whole), the kernel's answer exactly as :func:`timeline`
    gives it; without blocks ``view`` returns None (ask :func:`timeline`).

    The bins are kept at ``bins`` and at each coarser level down to ``LEVEL_BINS`` (half as
    many bins a level, each the sum of two): a view reads the coarsest level whose bins are
    no longer than its pixels, so at most about twice ``width`` bins a track, whatever the
    window (a whole-run view of a large run read every bin of every track: 18 M name times).

    Memory: three integers a (track, bin) and level, the names' times (sorted by bin, so a
    window reads its own), the long spans, and the blocks' directory (five integers a block);
    read back from a saved index, all of it memory-mapped."""

    def __init__(
        self,
        spans: Any,
        bins: int = INDEX_BINS,
        *,
        blocks: str | os.PathLike[str] | None = None,
        fine_bins: int = FINE_BINS,
    ) -> None:
        self.window = window_of(spans)
        start, end = self.window
        self._summary = Summary(start, max(end, start + 1), bins)
        writer = BlockWriter(blocks, self._summary) if blocks is not None else None
        for batch in window_batches(spans, None, None, None):
            self._summary.add(batch)
            if writer is not None:
                writer.add(batch)
        self.bins = bins
        self.bin_ns = self._summary.ns_per_pixel
        self.blocks = writer.close() if writer is not None else None
        self.fine: FineLevels | None = None
        self._mapped: list[np.ndarray] = []
        self._summary._merge_names()
        _sort_names(self._summary)
        if self.blocks is not None:
            # the first pass's names (18 M name times of a 200 M-span run: 290 MB) are not
            # what the fine levels are built from: moved to a file and mapped back, so the
            # build's memory is the first pass's bins and one rank's fine levels
            self._mapped = _spilled_names(self._summary, self.blocks.path)
            trim_heap()
            self._build_fine(fine_bins)
            release_mapped(self._mapped)
        self.levels = _pyramid(self._summary)
        release_mapped(self._mapped)

    def _build_fine(self, fine_bins: int) -> None:
        """The fine levels (see :mod:`._timeline_fine`), in files beside the span blocks;
        none where the run is too sparse for them or the files cannot be written."""
        summary = self._summary
        assert self.blocks is not None
        binned = np.array([code not in summary.few for code in range(len(summary.tracks))], bool)
        widths = fine_widths(self.bins, summary.seen, binned, fine_bins)
        if not widths:
            return
        stem = os.path.splitext(self.blocks.path)[0]
        path, rows_path = stem + ".fine", stem + ".rows"
        try:
            ranges = build_fine_levels(summary, self.blocks, widths, path, rows_path, BLOCK_SCHEMA)
            self.fine = FineLevels(
                path,
                rows_path,
                summary.start_ns,
                summary.end_ns,
                widths,
                len(summary.tracks),
                ranges,
            )
        except (OSError, pa.ArrowException):  # a full disk, say: no fine levels
            for leftover in (path, rows_path):
                try:
                    os.unlink(leftover)
                except OSError:
                    pass

    #: The persisted form's version: an index file of another version is not read (2: the
    #: levels, the names' times sorted by bin; 3: the fine levels).
    FORMAT = 3

    def save(self, path: str | os.PathLike[str], version: str) -> None:
        """Write the index to ``path`` (a ``.npz`` file, written whole under another name
        and renamed, so a reader never sees half of one), with ``version``: the version of
        the run it summarises (see :func:`run_version`), which :meth:`load` checks."""
        import json
        import tempfile

        summary = self._summary
        wide = [decoded_table(t) for t in summary.wide]
        few = [
            decoded_table(t).append_column("track", pa.array(np.full(t.num_rows, code, np.int64)))
            for code, tables in summary.few.items()
            for t in tables
        ]
        head = {
            "format": self.FORMAT,
            "version": version,
            "window": list(self.window),
            "bins": self.bins,
            "levels": [level.width for level in self.levels],
            "names": list(summary.names),
            "few": sorted(summary.few),
        }
        arrays: dict[str, np.ndarray | list[np.ndarray]] = {
            "tracks": np.array(list(summary.tracks), np.int64).reshape(-1, len(TRACK_KEYS)),
            "seen": summary.seen,
            "wide": ipc_bytes(wide),
            "few_rows": ipc_bytes(few),
        }
        for i, level in enumerate(self.levels):
            merged = [level._merge_track(code) for code in range(len(summary.tracks))]
            arrays[f"level{i}_counts"] = level.counts
            arrays[f"level{i}_times"] = level.times
            arrays[f"level{i}_depths"] = level.depths
            # the tracks' pieces written one after the other: no concatenated copy
            arrays[f"level{i}_name_keys"] = [k for k, _t in merged] or [np.zeros(0, np.int64)]
            arrays[f"level{i}_name_times"] = [t for _k, t in merged] or [np.zeros(0, np.float64)]
            arrays[f"level{i}_name_offsets"] = np.cumsum([0] + [len(k) for k, _t in merged]).astype(
                np.int64
            )
        if self.blocks is not None:
            head["blocks"] = {
                "file": os.path.basename(self.blocks.path),
                "size": os.path.getsize(self.blocks.path),
            }
            arrays["blocks"] = self.blocks.directory
        if self.fine is not None:
            head["fine"] = {
                "widths": self.fine.widths,
                "file": os.path.basename(self.fine.path),
                "size": os.path.getsize(self.fine.path),
                "rows": os.path.basename(self.fine.rows_path),
                "rows_size": os.path.getsize(self.fine.rows_path),
            }
            arrays["fine_ranges"] = self.fine.ranges
        arrays["head"] = np.frombuffer(json.dumps(head).encode(), np.uint8)
        path = os.fspath(path)
        folder = os.path.dirname(path) or "."
        handle, temporary = tempfile.mkstemp(prefix=".hotspan-tmp-", suffix=".npz", dir=folder)
        try:
            with os.fdopen(handle, "wb") as out:
                write_npz(out, arrays)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise

    @classmethod
    def load(cls, path: str | os.PathLike[str], version: str) -> TimelineIndex | None:
        """The index saved at ``path`` if it is of this ``version`` of the run (and of this
        format), else None: an index of another version of the run is never used."""
        import json

        try:
            arrays = mapped_npz(os.fspath(path))
            head = json.loads(arrays.pop("head").tobytes())
            if head.get("format") != cls.FORMAT or head.get("version") != version:
                return None
        except (OSError, ValueError, KeyError, EOFError):  # none, half-gone, or not an index
            return None
        index = cls.__new__(cls)
        index._mapped = list(arrays.values())
        index.window = (int(head["window"][0]), int(head["window"][1]))
        index.bins = int(head["bins"])
        start, end = index.window
        summary = Summary(start, max(end, start + 1), index.bins)
        summary.names = {name: code for code, name in enumerate(head["names"])}
        summary.tracks = {
            (int(r), int(p), int(t), int(lane)): code
            for code, (r, p, t, lane) in enumerate(arrays["tracks"].tolist())
        }
        summary.seen = arrays["seen"]
        index.levels = []
        for i, bins in enumerate(head["levels"]):
            level = summary if i == 0 else Summary(start, max(end, start + 1), int(bins))
            level.names, level.tracks, level.seen = summary.names, summary.tracks, summary.seen
            level.counts, level.times, level.depths = (
                arrays[f"level{i}_counts"],
                arrays[f"level{i}_times"],
                arrays[f"level{i}_depths"],
            )
            offsets = arrays[f"level{i}_name_offsets"]
            keys, times = arrays[f"level{i}_name_keys"], arrays[f"level{i}_name_times"]
            for code in range(len(offsets) - 1):  # views of the arrays read, no copies
                low, high = int(offsets[code]), int(offsets[code + 1])
                level.name_parts[code] = [(keys[low:high], times[low:high])]
                level.name_pending[code] = level.name_merged[code] = high - low
            index.levels.append(level)
        wide = from_ipc_bytes(arrays["wide"])
        summary.wide = [wide] if wide is not None and wide.num_rows else []
        few = from_ipc_bytes(arrays["few_rows"])
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
                    index.blocks = Blocks(where, arrays["blocks"], summary)
            except (OSError, pa.ArrowInvalid):
                index.blocks = None
        index.fine = None
        saved_fine = head.get("fine")
        if saved_fine is not None and index.blocks is not None:
            folder = os.path.dirname(os.fspath(path))
            where = os.path.join(folder, saved_fine["file"])
            rows = os.path.join(folder, saved_fine["rows"])
            try:
                if (
                    os.path.getsize(where) == saved_fine["size"]
                    and os.path.getsize(rows) == saved_fine["rows_size"]
                ):
                    index.fine = FineLevels(
                        where,
                        rows,
                        start,
                        max(end, start + 1),
                        [int(w) for w in saved_fine["widths"]],
                        len(summary.tracks),
                        arrays["fine_ranges"],
                    )
            except (OSError, ValueError, KeyError, pa.ArrowInvalid):
                index.fine = None
        return index

    def view(
        self,
        start_ns: int | None = None,
        end_ns: int | None = None,
        width: int = 1200,
        *,
        ranks: Sequence[int] | None = None,
        encoded: bool = False,
    ) -> Any:
        """The timeline's answer for this window from the bins, or None when its pixels are
        shorter than a bin (then the spans must be read); ``encoded``: as JSON text (bytes),
        as :func:`~hotspan.analysis.timeline.timeline` gives it."""
        start_ns, end_ns = checked_window(None, start_ns, end_ns, width, self.window)
        index = self._summary
        out = Summary(start_ns, end_ns, width)
        fine = self.fine.levels if self.fine is not None else []
        if out.ns_per_pixel < (fine[-1].ns_per_pixel if fine else self.bin_ns):
            if self.blocks is None:
                return None
            for batch, track in self.blocks.batches(start_ns, end_ns, ranks):
                out.add(batch, (track, self.blocks.keys))
            return out.result(ranks, encoded=encoded)
        out.names = dict(index.names)  # the bins' name codes, kept
        # every track of the run, in its order; the tracks kept whole go through add()
        order = sorted(index.tracks.items(), key=lambda item: item[1])
        codes = np.array([out.tracks.setdefault(key, len(out.tracks)) for key, _c in order])
        out._grow(len(out.tracks))
        binned = np.array([code not in index.few for _key, code in order], bool)
        out.seen[codes[binned]] = width + 1  # summarised: never listed whole
        # the bins holding the window's first and last nanosecond, by the kernel's own rule
        # the coarsest level whose bins are no longer than a pixel: at most ~2 bins a pixel
        candidates: list[Summary | FineLevel] = [*reversed(self.levels), *fine]
        level = next((lv for lv in candidates if lv.ns_per_pixel <= out.ns_per_pixel), index)
        bin_ns, bins_of_level = level.ns_per_pixel, level.width
        lo = max(0, int(max(start_ns - index.start_ns, 0) / bin_ns))
        hi = min(bins_of_level, int(max(end_ns - 1 - index.start_ns, -1) / bin_ns) + 1)
        if end_ns <= index.start_ns:
            hi = 0
        if hi > lo and binned.any():
            # each bin's first nanosecond, as the kernel bins a span's start (float division):
            # a bin's pixel is then the one the kernel gives a span starting there
            bins = np.arange(lo, hi)
            offset = np.ceil(bins * bin_ns).astype(np.int64)
            offset -= ((offset - 1) / bin_ns).astype(np.int64) >= bins  # one too late
            offset += (offset / bin_ns).astype(np.int64) < bins  # one too early
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
                if isinstance(level, FineLevel):
                    values = level.read(name, np.flatnonzero(binned), lo, hi)
                    if name == "depths":
                        values[values == FINE_NO_DEPTH] = NO_DEPTH
                else:
                    values = np.asarray(getattr(level, name)[binned, lo:hi]).astype(np.int64)
                reduced = reduce.reduceat(values, first, axis=1)
                target = getattr(out, name)
                target[rows, cols] = reduce(target[rows, cols], reduced)
            if isinstance(level, FineLevel):
                fine_names(out, level, codes[binned], binned, lo, hi, pixel, first)
            kinds = max(len(index.names), 1)
            for code in np.flatnonzero(binned).tolist():
                if not isinstance(level, Summary):
                    break  # a fine level's names: its busiest, above
                keys, times = level._merge_track(code)
                # sorted by bin: the window's own pairs, found by bisection
                a, b = np.searchsorted(keys, [lo * NAMES, hi * NAMES])
                if a == b:
                    continue
                keys, times = keys[a:b], times[a:b]
                bin_ = keys // NAMES
                named = keys % NAMES
                moved = pixel[bin_ - lo]
                if width * kinds <= DENSE_CELLS:
                    # few names: a (pixel, name) array, one bincount, no hash of the keys
                    dense = moved * kinds + named
                    summed = np.bincount(dense, weights=times, minlength=width * kinds)
                    present = np.flatnonzero(np.bincount(dense, minlength=width * kinds))
                    unique, added = (present // kinds) * NAMES + present % kinds, summed[present]
                else:
                    unique, inverse = value_codes(moved * NAMES + named)
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
        if isinstance(level, FineLevel) and self.fine is not None and self.blocks is not None:
            # the spans a bin of this level long or more and shorter than the index's bin
            between = self.fine.rows_of(
                np.flatnonzero(binned).tolist(), start_ns, end_ns, level.ns_per_pixel, self.bin_ns
            )
            if between is not None:
                for batch in between.to_batches(BATCH_ROWS):
                    decoded, track = self.blocks._batch([batch])
                    out.add(decoded, (track, self.blocks.keys))
            del between
        for table in rows_of_index:
            for batch in table.to_batches(BATCH_ROWS):
                out.add(batch)
        answer = out.result(ranks, encoded=encoded)
        self._release()
        return answer

    def _release(self) -> None:
        """The pages of the saved index's files this view read given back (see
        :func:`release_mapped`): the server's memory stays that of one view."""
        release_mapped(self._mapped)
        if self.fine is not None:
            self.fine.release()


#: The fewest bins a level of a :class:`TimelineIndex` has (coarser: not worth a level).
LEVEL_BINS = 256


def _sort_names(summary: Summary) -> None:
    """Each track's (bin * 2**24 + name, time) pairs of ``summary``, merged, sorted by key."""
    for code in range(len(summary.tracks)):
        keys, times = summary._merge_track(code)
        order = np.argsort(keys, kind="stable")
        summary.name_parts[code] = [(keys[order], times[order])]


def _spilled_names(summary: Summary, beside: str) -> list[np.ndarray]:
    """Move ``summary``'s merged names (each track's keys and times) into a temporary file in
    ``beside``'s folder and map them back read-only, the arrays replaced by views of the map;
    the file is removed at once (the map keeps it until the arrays go). Returns the maps (for
    :func:`release_mapped`); none, the names left in memory, where it cannot be written."""
    import tempfile

    pairs = [summary._merge_track(code) for code in range(len(summary.tracks))]
    total = sum(len(keys) for keys, _t in pairs)
    if not total:
        return []
    try:
        handle, path = tempfile.mkstemp(
            prefix=".hotspan-tmp-", suffix=".names", dir=os.path.dirname(beside) or "."
        )
    except OSError:
        return []
    try:
        with os.fdopen(handle, "wb") as out:
            for keys, _t in pairs:
                out.write(np.ascontiguousarray(keys, np.int64).data)
            for _k, times in pairs:
                out.write(np.ascontiguousarray(times, np.float64).data)
        # plain arrays over the maps (as :func:`mapped_npz` gives): release_mapped finds them
        mapped_keys = np.asarray(np.memmap(path, np.int64, "r", 0, (total,)))
        mapped_times = np.asarray(np.memmap(path, np.float64, "r", 8 * total, (total,)))
    except (OSError, ValueError):  # a full disk, say: the names stay in memory
        return []
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    low = 0
    for code, (keys, _t) in enumerate(pairs):
        high = low + len(keys)
        summary.name_parts[code] = [(mapped_keys[low:high], mapped_times[low:high])]
        low = high
    return [mapped_keys, mapped_times]


def _pyramid(finest: Summary) -> list[Summary]:
    """``finest`` and its coarser levels: each half as many bins (the sums of two, the least
    depth of two), down to ``LEVEL_BINS``. A span's bin at a level is its bin at the level
    below halved, exactly as the kernel bins it at that width (a power of two scales the
    float division exactly), so a view of whole bins of any level is the spans' own."""
    levels = [finest]
    while levels[-1].width % 2 == 0 and levels[-1].width // 2 >= LEVEL_BINS:
        fine = levels[-1]
        bins = fine.width // 2
        level = Summary(fine.start_ns, fine.end_ns, bins)
        level.names, level.tracks, level.seen = fine.names, fine.tracks, fine.seen
        tracks = len(fine.counts)
        level.counts = fine.counts.reshape(tracks, bins, 2).sum(axis=2)
        level.times = fine.times.reshape(tracks, bins, 2).sum(axis=2)
        level.depths = fine.depths.reshape(tracks, bins, 2).min(axis=2)
        for code in range(len(fine.tracks)):
            keys, times = fine._merge_track(code)
            coarse = (keys // NAMES // 2) * NAMES + keys % NAMES
            if len(coarse):
                unique, inverse = value_codes(coarse)
                summed = np.bincount(inverse, weights=times, minlength=len(unique))
            else:
                unique, summed = coarse, times
            level.name_parts[code] = [(unique, summed)]
        _sort_names(level)
        levels.append(level)
    return levels


def run_version(files: Sequence[str | os.PathLike[str]]) -> str:
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
