"""DuckDB's handle on a span table in Parquet (:class:`SpanSource`): the files or parts
of a run, their footers and metadata, the filter as a view, the connection and its memory
limit. The streamed statistics (streaming.py) and the DuckDB engine (engine.py) query it.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from .._columns import plain_type
from .filters import sql_literal

__all__ = ["DEFAULT_MEMORY_LIMIT", "SpanSource", "parse_size"]

DEFAULT_MEMORY_LIMIT = "1GB"
NEEDED = ("span_id", "parent_id", "start_ns", "end_ns", "duration_ns", "error", "arg")


def quote_name(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def parse_size(text: str) -> int:
    """A size as DuckDB's memory_limit takes it (``1GB``, ``512MiB``, ``2 GB``, bytes) in bytes."""
    import re

    match = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?i?B?)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise ValueError(f"HOTSPAN_MEMORY_LIMIT: not a size: {text!r} (1GB, 512MiB, ...)")
    unit = (match.group(2) or "").upper().rstrip("B")
    base = 1024 if unit.endswith("I") else 1000
    power = " KMGT".index(unit[:1]) if unit[:1] in "KMGT" and unit else 0
    return int(float(match.group(1)) * base**power)


def same_keys(columns: Sequence[str], left: str, right: str) -> str:
    """Null-safe equality of ``columns`` between two relations (null keys form a group)."""
    if not columns:
        return "TRUE"
    return " AND ".join(
        f"{left}.{quote_name(c)} IS NOT DISTINCT FROM {right}.{quote_name(c)}" for c in columns
    )


# A duration's bucket: 1024 a power of two (floor(1024 log2(d + 1))), so a bucket holds
# distinct values only within 0.07% of each other. Locating an order statistic by cumulative
# counts needs the bucket to be monotone in the duration: log2 in floating point is (glibc's
# is within 0.502 ulp), and each run checks it (``_check_buckets``: per group, every
# bucket's largest value at most the next one's smallest), falling back to an exact integer
# version (the highest set bit, corrected by two comparisons, then the next 10 bits), three
# times slower, should it ever not be.
BUCKET_MACROS = """
CREATE OR REPLACE TEMP MACRO hs_bucket(d) AS
    CASE WHEN d < 0 THEN d ELSE floor(log2(d + 1.0) * 1024)::BIGINT END;
CREATE OR REPLACE TEMP MACRO hs_msb2(d, f) AS
    f - (d < (1::BIGINT << f))::INT + (f < 62 AND d >= (1::BIGINT << least(f + 1, 62)))::INT;
CREATE OR REPLACE TEMP MACRO hs_msb(d) AS hs_msb2(d, least(floor(log2(greatest(d, 1)::DOUBLE))::INT, 62));
CREATE OR REPLACE TEMP MACRO hs_bucket_exact2(d, e) AS
    CASE WHEN d < 2048 THEN d ELSE (e - 10)::BIGINT * 1024 + (d >> (e - 10)) END;
CREATE OR REPLACE TEMP MACRO hs_bucket_exact(d) AS hs_bucket_exact2(d, hs_msb(d));
"""


def _meta_of(part: tuple[str, int, dict[bytes, bytes]]) -> dict[bytes, bytes]:
    return part[2]


class SpanSource:
    """A span table in Parquet (one file, a dataset directory of parts, or several of those;
    local paths or URIs) as the DuckDB view ``spans``, optionally filtered by a SQL condition
    (``where``)."""

    def __init__(
        self,
        path: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        where: str | None = None,
        memory_limit: str | None = None,
        temp_directory: str | os.PathLike[str] | None = None,
        span_filter: Any = None,
    ):
        from ..formats._base import TraceFileError, require_regular_file
        from ..formats.dataset import NoPartsError, current_parts, parts_of_run
        from .filters import SpanFilter

        # the parts of one run only, when the filter names one (as load(dir, run=) selects them)
        wanted_run = SpanFilter.of(span_filter).run
        paths = [path] if isinstance(path, (str, os.PathLike)) else list(path)  # is_path
        self.path = Path(paths[0]) if len(paths) == 1 else Path(", ".join(map(str, paths)))
        #: Set for a URI (s3://, gs://, hdfs://, file://: any that pyarrow.fs reads): the files
        #: are then scanned through pyarrow.dataset on that filesystem, else by DuckDB itself.
        self.filesystem = None
        files: list[str] = []
        for one in paths:
            if isinstance(one, str) and "://" in one:
                files += self._remote_files(one, wanted_run)
                continue
            one = Path(one)
            if one.is_dir():
                # the parts a reader reads now: those a compacted part replaces left out
                found = [
                    path
                    for path, _size, _meta in parts_of_run(
                        current_parts(one)[1], _meta_of, wanted_run, str(one), stacklevel=4
                    )
                ]
                if not found:
                    raise NoPartsError(
                        one,
                        "no span parts in this directory (expected part-*.parquet)"
                        + (f" of run {wanted_run!r}" if wanted_run is not None else ""),
                    )
                files += found
            elif one.exists():
                require_regular_file(one)  # a FIFO or a device: refused, never waited on
                files.append(str(one))
            else:
                raise FileNotFoundError(2, "no such trace file or dataset directory", str(one))
        self.files = files
        self._own_temp = temp_directory is None and not os.environ.get("HOTSPAN_TEMP_DIR")
        temp = (
            temp_directory
            or os.environ.get("HOTSPAN_TEMP_DIR")
            or tempfile.mkdtemp(prefix="hotspan-duckdb-")
        )
        self.temp_directory = str(temp)
        limit = memory_limit or os.environ.get("HOTSPAN_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT
        self.memory_limit = limit
        self._footers: list[Any] | None = None
        #: DuckDB's connection, made on first use (``con``): the fast path of ``stats`` reads
        #: the parts with pyarrow and needs none (a command's start-up saved).
        self._con: Any = None
        try:
            import pyarrow.parquet as pq

            self.schema = pq.read_schema(files[0], filesystem=self.filesystem)
            # a part written without its rank column: from rank=R
            self._hive = "rank" not in self.schema.names
            # every part's columns (DuckDB reads them by name: union_by_name)
            self.columns = list(
                dict.fromkeys(
                    name
                    for footer in self.footers()
                    for name in footer.schema.to_arrow_schema().names
                )
            )
            if self._hive and "rank" not in self.columns:
                self.columns.append("rank")
            from .filters import SpanFilter, sql_condition
            from ._queries import DUCKDB, device_sql

            self.span_filter = SpanFilter.of(span_filter)
            if self.span_filter.needs_origin:
                self.span_filter = self.span_filter.with_origin(self.column_range("start_ns")[0])
            conditions = [c for c in (where, sql_condition(self.span_filter.terms(), DUCKDB)) if c]
            # ``device``: a key derived per row (statistics.device_labels), computed only by the
            # queries that group by it.
            device = "" if "device" in self.columns else f", {device_sql(DUCKDB)} AS device"
            self._spans_view = (
                f"CREATE TEMP VIEW spans AS SELECT *{device} FROM all_spans "
                f"WHERE {' AND '.join(conditions) or 'TRUE'}"
            )
            if device:
                self.columns.append("device")
            self.filtered = bool(conditions)
        except pa.ArrowException as exc:
            self.close()
            raise TraceFileError(files[0], f"not a readable Parquet file: {exc}") from exc
        except Exception as exc:
            self.close()
            if type(exc).__module__.startswith("duckdb"):  # (a query for the time origin)
                raise TraceFileError(self.path, f"not a readable span table: {exc}") from exc
            raise
        self._unique_ids: bool | None = None

    def footers(self) -> list[Any]:
        """The parts' Parquet footers (``pyarrow.parquet.FileMetaData``), read once."""
        if self._footers is None:
            import pyarrow.parquet as pq

            from ..formats._base import TraceFileError

            footers = []
            for f in self.files:
                try:
                    footers.append(pq.ParquetFile(f, filesystem=self.filesystem).metadata)
                except pa.ArrowException as exc:
                    raise TraceFileError(f, f"not a readable Parquet file: {exc}") from exc
            self._footers = footers
        return self._footers

    @property
    def con(self) -> Any:
        """The DuckDB connection with the views ``all_spans`` and ``spans`` (filtered), made
        on first use."""
        if self._con is None:
            import duckdb

            from ..formats._base import TraceFileError

            con = duckdb.connect(
                config={
                    "memory_limit": self.memory_limit,
                    "temp_directory": self.temp_directory,
                    # no order to keep: lets DuckDB stream and spill more freely
                    "preserve_insertion_order": False,
                }
            )
            try:
                con.execute("SET enable_progress_bar = false")  # not on the caller's stderr
                if self.filesystem is None:
                    listing = ", ".join(sql_literal(f) for f in self.files)
                    con.execute(
                        f"CREATE TEMP VIEW all_spans AS SELECT * FROM read_parquet([{listing}], "
                        f"hive_partitioning={'true' if self._hive else 'false'}, union_by_name=true)"
                    )
                else:
                    con.register("hs_dataset", self._dataset(self._hive))
                    con.execute("CREATE TEMP VIEW all_spans AS SELECT * FROM hs_dataset")
                con.execute(self._spans_view)
                # fetched: DuckDB 2 refuses other work (register, say) on a connection whose
                # last result is unfinished
                con.execute(BUCKET_MACROS).fetchall()
            except duckdb.Error as exc:
                con.close()
                raise TraceFileError(self.path, f"not a readable span table: {exc}") from exc
            self._con = con
        return self._con

    @property
    def rows(self) -> int:
        """The rows of every part (before any filter), from the footers."""
        return sum(f.num_rows for f in self.footers())

    def column_range(self, column: str, query: bool = True) -> tuple[int | None, int | None]:
        """The smallest and largest value of ``column`` over every part (before any filter):
        from the footers' row-group statistics when every row group has them, else a query
        (``query=False``: else None, None)."""
        low: int | None = None
        high: int | None = None
        try:
            for footer in self.footers():
                index = footer.schema.to_arrow_schema().get_field_index(column)
                for g in range(footer.num_row_groups):
                    group = footer.row_group(g)
                    if group.num_rows == 0:
                        continue
                    st = group.column(index).statistics if index >= 0 else None
                    if st is None or not st.has_min_max:
                        raise LookupError(column)
                    low = st.min if low is None else min(low, st.min)
                    high = st.max if high is None else max(high, st.max)
            return low, high
        except LookupError:
            if not query:
                return None, None
            if all(column in f.schema.to_arrow_schema().names for f in self.footers()):
                return self._read_range(column)
            row = self.sql(
                f"SELECT min({quote_name(column)}), max({quote_name(column)}) FROM all_spans"
            ).fetchall()[0]  # all: DuckDB 2 holds an unfinished result
            return row[0], row[1]

    def _read_range(self, column: str) -> tuple[int | None, int | None]:
        """``column_range`` of a column every part has, read with pyarrow (one column: no
        query engine started for it)."""
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        low: int | None = None
        high: int | None = None
        for f in self.files:
            try:
                values = pq.ParquetFile(f, filesystem=self.filesystem).read(columns=[column])
            except (pa.ArrowException, OSError) as exc:
                from ..formats._base import TraceFileError

                why = " ".join(str(exc).split())
                raise TraceFileError(f, f"not a readable Parquet file: {why}") from exc
            found = pc.min_max(values.column(0)).as_py()
            if found["min"] is not None:
                low = found["min"] if low is None else min(low, found["min"])
                high = found["max"] if high is None else max(high, found["max"])
        return low, high

    def memory_bytes(self) -> int:
        """DuckDB's memory limit in bytes (``HOTSPAN_MEMORY_LIMIT``: 1GB, 512MiB, ...)."""
        return parse_size(self.memory_limit)

    def _remote_files(self, uri: str, run: str | None = None) -> list[str]:
        """The Parquet parts under (or at) ``uri``, as ``current_parts`` finds them locally
        (of one run: ``parts_of_run``)."""
        import pyarrow.fs as pafs

        from ..formats.dataset import NoPartsError, current_parts, location, parts_of_run

        loc = location(uri)  # errors name the URI without its credentials (loc.shown)
        filesystem, root = loc.fs, loc.root
        if self.filesystem is not None and filesystem.type_name != self.filesystem.type_name:
            raise ValueError(
                f"{loc.shown}: traces on different filesystems cannot be streamed together"
            )
        self.filesystem = filesystem
        info = filesystem.get_file_info(root)
        if info.type == pafs.FileType.File:
            return [root]
        if info.type != pafs.FileType.Directory:
            raise FileNotFoundError(2, "no such trace file or dataset directory", loc.shown)
        found = [  # compacted inputs left out
            path
            for path, _size, _meta in parts_of_run(
                current_parts(loc)[1], _meta_of, run, loc.shown, stacklevel=5
            )
        ]
        if not found:
            raise NoPartsError(loc.shown, "no span parts under this URI (expected part-*.parquet)")
        return sorted(found)

    def _dataset(self, hive: bool) -> Any:
        """The files as one pyarrow dataset on ``self.filesystem`` (DuckDB scans it as it
        streams: batches, only the columns a query reads). Strings plain: parts may hold
        them as dictionaries or not."""
        import pyarrow.dataset as ds

        fields = [pa.field(f.name, plain_type(f.type)) for f in self.schema]
        if hive:
            fields.append(pa.field("rank", pa.int32()))
        return ds.dataset(
            self.files,
            schema=pa.schema(fields),
            format="parquet",
            filesystem=self.filesystem,
            partitioning=ds.partitioning(pa.schema([("rank", pa.int32())]), flavor="hive")
            if hive
            else None,
        )

    def __enter__(self) -> SpanSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        con = getattr(self, "_con", None)
        if con is not None:
            con.close()
            self._con = None
        if self._own_temp:
            shutil.rmtree(self.temp_directory, ignore_errors=True)

    def sql(self, query: str, *args: Any) -> Any:
        return self.con.execute(query, *args)

    def arrow(self, query: str) -> pa.Table:
        result = self.con.execute(query)
        # DuckDB 1.4 calls it fetch_arrow_table, 1.5 and later to_arrow_table.
        fetch = getattr(result, "to_arrow_table", None) or result.fetch_arrow_table
        with warnings.catch_warnings():  # "an extra copy of the rows": small results only come here
            warnings.simplefilter("ignore")
            return fetch()

    def batches(self, query: str, rows: int = 1 << 20) -> pa.RecordBatchReader:
        """The result of ``query`` as a stream of Arrow batches (nothing held whole)."""
        result = self.con.sql(query)
        reader = getattr(result, "to_arrow_reader", None) or result.fetch_arrow_reader
        return reader(rows)

    def metadata(self) -> dict[bytes, bytes]:
        """The schema metadata ``load()`` would give the whole (the parts' footers merged)."""
        from ..formats.dataset import merge_metadata

        # the footers read already (no second open of every part)
        schemas = [f.schema.to_arrow_schema() for f in self.footers()]
        if len(schemas) == 1 and self.files[0] == str(self.path):  # a file, not a directory of one
            return dict(schemas[0].metadata or {})
        return merge_metadata(
            [(dict(s.metadata or {}), f.num_rows) for s, f in zip(schemas, self.footers())]
        )

    def check_columns(self, by: Sequence[str], needed: Sequence[str]) -> None:
        missing = [name for name in (*by, *needed) if name not in self.columns]
        if missing:
            raise ValueError(
                f"no column {', '.join(repr(m) for m in dict.fromkeys(missing))} in the span table {self.path} "
                f"(columns: {', '.join(self.columns)})"
            )

    def unique_ids(self) -> bool:
        """Whether no span id repeats (then a parent is looked up by id alone, as in memory)."""
        if self._unique_ids is None:
            # A grouped aggregate (which spills), not count(DISTINCT ...).
            (repeated,) = self.sql(
                "SELECT count(*) FROM (SELECT span_id FROM spans GROUP BY span_id "
                "HAVING count(*) > 1)"
            ).fetchall()[0]  # all: DuckDB 2 holds an unfinished result
            self._unique_ids = repeated == 0
        return self._unique_ids

    def parent_join(self, child: str, parent: str) -> str:
        """``JOIN <parents> AS parent ON ...``: each span's parent, found as ``parent_rows``
        finds it: by id; where ids repeat, among the spans of the child's own rank, pid and
        thread (one of them, should an id repeat within a thread too)."""
        if self.unique_ids():
            return f"JOIN spans AS {parent} ON {parent}.span_id = {child}.parent_id"
        lane = ("rank", "pid", "thread_id")
        keys = ", ".join(quote_name(c) for c in (*lane, "span_id"))
        return (
            f"JOIN (SELECT * FROM spans QUALIFY row_number() OVER (PARTITION BY {keys}) = 1) AS {parent} "
            f"ON {parent}.span_id = {child}.parent_id AND {same_keys(lane, parent, child)}"
        )
