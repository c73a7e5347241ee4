"""The timeline's sources (see :mod:`hotspan.analysis.timeline`): a run's Parquet parts read
in batches with the window pushed down (row groups picked by their statistics), a window's
spans and their count, the run's window."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ._timeline_kernel import BATCH_ROWS, COLUMNS, MAX_WIDTH

__all__ = ["checked_window", "window_batches", "window_count", "window_of", "window_spans"]


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


def window_batches(
    spans: Any, start_ns: int | None, end_ns: int | None, ranks: Sequence[int] | None
) -> Iterator[pa.RecordBatch]:
    """The spans overlapping the window, in batches (the window and ranks pushed down to
    the Parquet reader where the spans are Parquet files)."""
    files = _parquet_files(spans)
    if files is None:
        table = spans if isinstance(spans, pa.Table) else _load(spans)
        if ranks is not None:
            table = table.filter(pc.is_in(table["rank"], pa.array(list(ranks), pa.int32())))
        yield from table.to_batches(BATCH_ROWS)
        return
    import pyarrow.parquet as pq

    # Why ParquetFile and not pyarrow.dataset: the row groups are picked here from their
    # start_ns/end_ns statistics (a part's footer), and pyarrow.dataset's import loads pandas.
    wanted = None if ranks is None else pa.array(list(ranks), pa.int32())
    for path in files:
        part = pq.ParquetFile(path)
        names = part.schema_arrow.names
        columns = [c for c in (*COLUMNS, "lane") if c in names]
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
            batch_size=BATCH_ROWS, row_groups=groups, columns=columns, use_threads=False
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
    overlaps: bool = bounds["start_ns"][0] < end_ns and (
        bounds["end_ns"][1] > start_ns or bounds["start_ns"][1] >= start_ns
    )
    return overlaps


# --------------------------------------------------------------------------- a window's spans


def _window_terms(
    start_ns: int | None, end_ns: int | None, ranks: Sequence[int] | None
) -> list[tuple[str, str, Any]]:
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

    from ..formats._base import conform_to_schema
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


def checked_window(
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
