"""The interface every exporter shares, and what they all need around it.

An exporter turns a span table (see ``hotspan._schema``) into one file format and back.
The base class owns what must behave the same in every format:

* writes are atomic: the format writes a temporary file beside the target, which is
  fsynced and renamed into place, so an interrupted export never leaves a half file under
  the final name (and never clobbers an existing one);
* reads fail with a :class:`TraceFileError` (a ``ValueError``) or an ``OSError`` whose
  message names the file and what is wrong, never a bare ``KeyError``/``IndexError``;
* what a format reads back is conformed to ``SPAN_SCHEMA`` and, unless the caller trusts
  the file (``check=False``), checked against the schema's own rules (:func:`check_span_rules`);
* rows a loader leaves out of a damaged file are never dropped silently: a
  :class:`TraceFileWarning` and the counts in the table's metadata (:func:`note_skipped`).
"""

from __future__ import annotations

import abc
import contextlib
import errno
import io
import json
import os
import stat
import struct
import sys
import threading
import time
import warnings
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    import rich.progress

from .._schema import META_SKIPPED_ON_LOAD, SPAN_SCHEMA, with_pandas_dtypes
from .._selftime import SpanTree, with_self_ns

__all__ = [
    "BATCH_ROWS",
    "DERIVED_COLUMNS",
    "Exporter",
    "MISSING_PARENTS",
    "Progress",
    "TraceFileError",
    "TraceFileWarning",
    "atomic_path",
    "check_span_rules",
    "check_span_table",
    "conform_to_schema",
    "dictionary_batches",
    "longest_line",
    "missing_parents",
    "note_skipped",
    "open_regular_file",
    "read_line_blocks",
    "require_regular_file",
    "wait_for_released",
]

#: Columns a table may lack: computed from the others when it does (see _selftime.py).
DERIVED_COLUMNS = ("self_ns", "wait_ns")

#: Rows per batch when a format streams the table to a file: memory held by an export
#: is proportional to this, not to the table or the document.
BATCH_ROWS = 1 << 16


class TraceFileError(ValueError):
    """A file that cannot be read as the expected format; the message names the file."""

    def __init__(self, path: str | os.PathLike[str], problem: str):
        self.path = os.fspath(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class TraceFileWarning(UserWarning):
    """A file was read, but some of its rows were left out (the message says how many and why)."""


# --------------------------------------------------------------------------- regular files only

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
)


def _not_regular(mode: int) -> str | None:
    """What a file of this mode is when it is not a regular file, else None."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def require_regular_file(
    path: str | os.PathLike[str], error: type[TraceFileError] | None = None
) -> None:
    """Refuse (``TraceFileError``, or ``error``, naming the file) anything but a regular
    file, links followed: every loader calls this before it opens a trace, so that a FIFO,
    a socket or a device is refused at once instead of blocking the reader forever (a FIFO's
    open waits for a writer; its read, for data that may never come). ``stat`` opens
    nothing; a missing file is the caller's ``FileNotFoundError``."""
    kind = _not_regular(os.stat(path).st_mode)
    if kind is not None:
        raise (error or TraceFileError)(
            path, f"is {kind}, not a trace file: only regular files are read"
        )


def open_regular_file(
    path: str | os.PathLike[str], error: type[TraceFileError] | None = None
) -> io.BufferedReader:
    """``open(path, "rb")`` for a regular file only (see :func:`require_regular_file`).

    Checked twice: ``stat`` before opening (a device is never even opened), and ``fstat``
    of what was opened, with ``O_NONBLOCK`` so that a FIFO swapped in between cannot block
    the ``open`` itself; the file is made blocking again before it is returned."""
    require_regular_file(path, error)
    fd = os.open(
        path,
        os.O_RDONLY
        | getattr(os, "O_NONBLOCK", 0)
        | getattr(os, "O_NOCTTY", 0)
        | getattr(os, "O_CLOEXEC", 0),
    )
    try:
        kind = _not_regular(os.fstat(fd).st_mode)
        if kind is not None:
            raise (error or TraceFileError)(
                path, f"is {kind}, not a trace file: only regular files are read"
            )
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class Exporter(abc.ABC):
    """One file format: ``write(table, path)`` and ``read(path, *, check=True)``.

    Subclasses implement ``_write`` (to a temporary path, from a table already checked
    against the span schema) and ``_read`` (any table with the span columns; the base
    class conforms it).
    """

    #: Short name, accepted as ``export(..., format=name)``.
    name: str = ""
    #: File name endings, lower case, with the dot; the first is the canonical one.
    extensions: tuple[str, ...] = ()
    #: Whether the format stores the schema metadata (host, clock, dropped counts, ...).
    keeps_metadata: bool = True
    #: Whether a read gives back the rows in the order they were written.
    keeps_row_order: bool = True
    #: Whether the format can be loaded back as spans (``False``: an export-only view of
    #: them, such as folded stacks; its ``read`` says so).
    readable: bool = True

    #: Whether the format holds counters (``write(..., counters=)``; ``_write`` takes them).
    writes_counters = False

    def write(
        self,
        table: pa.Table,
        path: str | os.PathLike[str],
        *,
        replace: bool = True,
        counters: pa.Table | None = None,
    ) -> None:
        """Write ``table`` to ``path`` atomically (``replace=False``: never over an existing
        file, ``FileExistsError`` instead); ``counters``: a counter table, for the formats
        that hold counters (``ValueError`` for another)."""
        table = check_span_table(table)
        if counters is not None and not self.writes_counters:
            raise ValueError(
                f"{os.fspath(path)}: the {self.name} format holds no counters "
                "(export them to .json, .json.gz or .pftrace)"
            )
        with atomic_path(path, replace=replace) as tmp_path:
            if counters is None:
                self._write(table, tmp_path)
            else:
                self._write(table, tmp_path, counters=counters)  # type: ignore[call-arg]

    def read(self, path: str | os.PathLike[str], *, check: bool = True) -> pa.Table:
        """Read ``path`` back as a table with ``SPAN_SCHEMA``.

        ``check``: refuse a table that breaks the schema's rules (:func:`check_span_rules`);
        ``False`` for a file the caller chooses to trust."""
        path = Path(path)
        if path.is_dir():
            raise IsADirectoryError(errno.EISDIR, "is a directory, not a trace file", str(path))
        if not path.exists():
            raise FileNotFoundError(errno.ENOENT, "no such trace file", str(path))
        require_regular_file(path)
        tree = None
        try:
            raw = self._read(path)
            # the parent links worked out once, for self time and the rules' check alike
            tree = SpanTree(raw)
            table = conform_to_schema(raw, path, tree=tree)
            tree = tree.rebased(table)  # and the decoded table let go
            del raw
        except (TraceFileError, FileNotFoundError, PermissionError, IsADirectoryError, MemoryError):
            raise
        except RecursionError as exc:
            raise TraceFileError(path, f"not a valid {self.name} file: nested too deeply") from exc
        except (
            pa.ArrowException,
            ValueError,
            OSError,
            EOFError,
            zlib.error,
            struct.error,
            # A safety net: whatever a malformed file provokes deep in a parser must
            # reach the caller as "this file is bad", with the file's name.
            KeyError,
            IndexError,
            TypeError,
            AttributeError,
            OverflowError,
        ) as exc:
            raise TraceFileError(
                path, f"not a valid {self.name} file: {type(exc).__name__}: {exc}"
            ) from exc
        if check:
            check_span_rules(table, path, tree)
        return table

    @abc.abstractmethod
    def _write(self, table: pa.Table, path: Path) -> None: ...

    @abc.abstractmethod
    def _read(self, path: Path) -> pa.Table: ...

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} {'/'.join(self.extensions)}>"


# --------------------------------------------------------------------------- atomic write


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str], *, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success only.

    ``replace=False``: never over an existing file (``FileExistsError``, the temporary file
    removed): the name is taken with ``link()``, which fails where the name exists, as
    ``O_EXCL`` does for ``open()`` (``rename()`` would replace it silently).

    The temporary file is created with ``0o666`` so the umask applies as it would to a
    plain ``open(path, "w")`` (``mkstemp`` would leave the export readable by its owner only).

    The file replaced is held open across the rename and closed on a short-lived thread
    (:func:`_hold_replaced`): freeing its pages costs the export nothing. What is atomic and
    what is on disk when this returns are as without it.
    """
    path = Path(path)
    directory = path.parent
    if not directory.is_dir():
        raise FileNotFoundError(
            errno.ENOENT, "directory to export into does not exist", str(directory)
        )
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "cannot export over a directory", str(path))
    tmp_path = directory / f".{path.name}.{os.urandom(4).hex()}.part"
    ours = True
    try:
        # Inside the try: an exception raised by a signal handler (the CLI's, on SIGTERM)
        # right after the file is made still removes it.
        try:
            fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            ours = False  # another writer's temporary file of the same name: left alone
            raise
        os.close(fd)
        yield tmp_path
        # Data first, then the name: a crash after the rename must not expose a file
        # whose blocks never reached the disk.
        with open(tmp_path, "rb+") as f:
            os.fsync(f.fileno())
        if replace:
            held = _hold_replaced(path)
            try:
                os.replace(tmp_path, path)
            finally:
                _release_later(held)
        else:
            os.link(tmp_path, path)
            os.unlink(tmp_path)
    except BaseException:
        if ours:
            with contextlib.suppress(OSError):
                os.unlink(tmp_path)
        raise


#: The descriptors of replaced files still to be closed (by :func:`_release_later`'s thread).
_HELD: set[int] = set()
#: Set while no replaced file is left to close (:func:`wait_for_released`).
_RELEASED = threading.Event()
_RELEASED.set()
_HELD_LOCK = threading.Lock()


def _hold_replaced(path: Path) -> int | None:
    """A read-only descriptor of the regular file ``path`` names (a link is not followed),
    or None (none there, not ours to read, not Linux).

    Held across the ``rename`` that replaces it, it keeps the old file's inode alive, so
    the rename only takes the name away and the file's pages are freed at the last close,
    on :func:`_release_later`'s thread rather than in the export: on Linux (ext4, xfs,
    tmpfs) freeing them took ~20 ms in the rename for a 69 MB file. Elsewhere (macOS) the
    rename is left as it was."""
    if not sys.platform.startswith("linux"):
        return None
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
    try:
        # a device is never opened (its driver's open and close may act); fstat below
        # catches a file swapped in between
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return None
        fd = os.open(path, flags)
    except OSError:
        return None  # missing, a link, unreadable: the rename does as it always did
    try:
        regular = stat.S_ISREG(os.fstat(fd).st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        return None
    with _HELD_LOCK:
        _HELD.add(fd)
        _RELEASED.clear()
    return fd


def _release_later(fd: int | None) -> None:
    """Close ``fd`` (from :func:`_hold_replaced`) on a short-lived thread: the replaced
    file's pages are freed there, off the export's critical path. Without a thread (the
    interpreter shutting down), at once."""
    if fd is None:
        return
    try:
        threading.Thread(
            target=_close_held, args=(fd,), name="hotspan-release", daemon=True
        ).start()
    except RuntimeError:
        _close_held(fd)


def _close_held(fd: int) -> None:
    # Out of the set before the close: a fork in between leaves the child a copy it never
    # closes (it has O_CLOEXEC), never one whose number a later open reused.
    with _HELD_LOCK:
        _HELD.discard(fd)
    try:
        os.close(fd)
    finally:
        with _HELD_LOCK:
            if not _HELD:
                _RELEASED.set()


def wait_for_released(timeout: float | None = None) -> bool:
    """Wait until every file an export replaced is closed (its pages freed); False if that
    takes longer than ``timeout`` seconds. For tests and benchmarks: an export returns
    without waiting for it."""
    return _RELEASED.wait(timeout)


def _close_held_in_child() -> None:
    """A forked child closes its copies of the descriptors still held (no thread of the
    parent's runs in it to close them; the lock may have been held by one at the fork)."""
    global _HELD_LOCK, _RELEASED
    _HELD_LOCK = threading.Lock()
    _RELEASED = threading.Event()
    _RELEASED.set()
    for fd in list(_HELD):
        with contextlib.suppress(OSError):
            os.close(fd)
    _HELD.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_held_in_child)


# --------------------------------------------------------------------------- schema checks

_STRING_COLUMNS = ("name", "category", "thread_name")


def _is_string_like(type_: pa.DataType) -> bool:
    if pa.types.is_dictionary(type_):
        type_ = type_.value_type
    return bool(
        pa.types.is_string(type_)
        or pa.types.is_large_string(type_)
        or pa.types.is_string_view(type_)
    )


def check_span_table(table: pa.Table | pa.RecordBatch) -> pa.Table:
    """The table with the span columns in schema order and numeric types as in the schema.

    String columns stay as they are (plain or dictionary-encoded, both allowed by the
    contract); the schema metadata is kept.
    """
    if isinstance(table, pa.RecordBatch):
        table = pa.Table.from_batches([table])
    if not isinstance(table, pa.Table):
        raise TypeError(f"export needs a pyarrow.Table of spans, not {type(table).__name__}")
    missing = [
        name
        for name in SPAN_SCHEMA.names
        if name not in table.column_names and name not in DERIVED_COLUMNS
    ]
    if missing:
        raise ValueError(f"not a span table: missing column(s) {', '.join(missing)}")
    table = with_self_ns(table)
    columns = []
    fields = []
    for field in SPAN_SCHEMA:
        column = table.column(field.name)
        if field.name in _STRING_COLUMNS:
            if not _is_string_like(column.type):
                raise ValueError(f"column {field.name!r} must hold strings, not {column.type}")
            if pa.types.is_string_view(column.type) or pa.types.is_large_string(column.type):
                column = column.cast(pa.string())
            elif pa.types.is_dictionary(column.type) and column.type.value_type != pa.string():
                column = column.cast(pa.dictionary(column.type.index_type, pa.string()))
        elif column.type != field.type:
            try:
                column = column.cast(field.type)
            except pa.ArrowInvalid as exc:
                raise ValueError(
                    f"column {field.name!r}: cannot convert {column.type} to {field.type}: {exc}"
                ) from exc
        if not field.nullable and column.null_count:
            raise ValueError(
                f"column {field.name!r} has {column.null_count} null value(s); the span schema does not allow any"
            )
        columns.append(column)
        fields.append(pa.field(field.name, column.type, nullable=field.nullable))
    return pa.Table.from_arrays(columns, schema=pa.schema(fields, metadata=table.schema.metadata))


def conform_to_schema(
    table: pa.Table,
    path: str | os.PathLike[str],
    metadata: dict[bytes, bytes] | None = None,
    *,
    tree: SpanTree | None = None,
) -> pa.Table:
    """``table`` cast to ``SPAN_SCHEMA`` exactly (dictionary-encoded strings, one dictionary
    per column across chunks), metadata kept.

    ``metadata`` (bytes -> bytes) replaces the table's own schema metadata when given;
    ``tree``: ``table``'s :class:`~hotspan._selftime.SpanTree`, to share with a later
    :func:`check_span_rules`.
    """
    missing = [
        name
        for name in SPAN_SCHEMA.names
        if name not in table.column_names and name not in DERIVED_COLUMNS
    ]
    if missing:
        raise TraceFileError(path, f"not a span table: missing column(s) {', '.join(missing)}")
    # hotspan's own files keep self_ns and wait_ns; any other table (a foreign trace, a file
    # from before the columns) gets them here, by the one rule (_selftime.py)
    table = with_self_ns(table, tree)
    columns = []
    for field in SPAN_SCHEMA:
        column = table.column(field.name)
        if column.type != field.type:
            if pa.types.is_dictionary(field.type):
                if pa.types.is_dictionary(column.type):
                    column = column.cast(pa.dictionary(pa.int32(), pa.string()))
                else:
                    column = pc.dictionary_encode(column.cast(pa.string()))
            else:
                try:
                    column = column.cast(field.type)
                except pa.ArrowInvalid as exc:
                    raise TraceFileError(path, f"column {field.name!r}: {exc}") from exc
        if not field.nullable and column.null_count:
            raise TraceFileError(
                path, f"column {field.name!r} has {column.null_count} missing value(s)"
            )
        columns.append(column)
    if metadata is None:
        metadata = table.schema.metadata
    schema = SPAN_SCHEMA.with_metadata(with_pandas_dtypes(metadata))
    # One dictionary per string column across its chunks (row groups, record batches):
    # pyarrow's group_by, joins and compute kernels refuse differing ones ("Unifying
    # differing dictionaries"). The dictionaries are small: this costs little.
    return pa.Table.from_arrays(columns, schema=schema).unify_dictionaries()


def dictionary_batches(reader: Iterator[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """The record batches of a streaming reader (CSV, JSON lines) as one table whose string
    columns are dictionary-encoded batch by batch: the plain strings of one batch are held
    at a time, never those of the whole file."""
    strings = [i for i, field in enumerate(schema) if pa.types.is_string(field.type)]
    batches = []
    for batch in reader:
        columns = list(batch.columns)
        for i in strings:
            columns[i] = pc.dictionary_encode(columns[i])
        batches.append(pa.RecordBatch.from_arrays(columns, names=batch.schema.names))
    if not batches:
        return schema.empty_table()
    return pa.Table.from_batches(batches).unify_dictionaries()


#: The largest block pyarrow's CSV and JSON readers take (their ``block_size`` is an int32).
_MAX_BLOCK_BYTES = (1 << 31) - 1


def read_line_blocks(
    open_reader: Callable[[int | None], Any], data: pa.Buffer, schema: pa.Schema
) -> pa.Table:
    """:func:`dictionary_batches` of a reader that parses ``data`` (CSV, JSON lines) a block
    at a time. ``open_reader(block_size)`` opens one (``None``: pyarrow's default, 1 MiB).

    pyarrow refuses a line longer than a block ("straddling object"): a row with a 3 MB span
    name, which our own writers write. So a read that meets one is done again with blocks
    sized from the longest line (doubled, up to the whole file, for a CSV row whose quoted
    values hold newlines); files without such rows cost nothing more."""
    try:
        with open_reader(None) as reader:
            return dictionary_batches(reader, schema)
    except pa.ArrowInvalid as exc:
        if "straddling" not in str(exc):
            raise
    whole = min(data.size + 1, _MAX_BLOCK_BYTES)
    block = min(max(2 * longest_line(data) + 1, 2 << 20), whole)
    while True:
        try:
            with open_reader(block) as reader:
                return dictionary_batches(reader, schema)
        except pa.ArrowInvalid as exc:
            if "straddling" not in str(exc) or block >= whole:
                raise
        block = min(2 * block, whole)


def longest_line(data: pa.Buffer) -> int:
    """The length of the longest line of ``data`` (newline included), scanned 64 MiB at a
    time so that a large file costs no copy of itself."""
    import numpy as np

    longest, line_start, chunk = 0, 0, 64 << 20
    for offset in range(0, data.size, chunk):
        view = np.frombuffer(data, np.uint8, min(chunk, data.size - offset), offset)
        ends = np.flatnonzero(view == 10)
        if len(ends):
            ends += offset
            longest = max(longest, int(ends[0]) + 1 - line_start)
            if len(ends) > 1:
                longest = max(longest, int(np.diff(ends).max()))
            line_start = int(ends[-1]) + 1
    size: int = data.size
    return max(longest, size - line_start)


def check_span_rules(
    table: pa.Table, path: str | os.PathLike[str], tree: SpanTree | None = None
) -> None:
    """Refuse (``TraceFileError``, the first offending row named) a table that breaks the
    schema's own rules: ``duration_ns < 0``, ``end_ns != start_ns + duration_ns``,
    ``depth < 0``, a ``span_id`` twice, a ``depth`` that is not its parent's + 1 (where the
    parent is in the table).

    One pass over the columns and the parent links (``hotspan._span_tree.span_rules``),
    ~10 ms a million rows; each rule's first offending row comes out of the same pass.
    ``tree``: the :class:`~hotspan._selftime.SpanTree` of this table, or of the one it was
    conformed from (used where its ids are this table's: ``SpanTree.rebased``).
    """
    if table.num_rows == 0:
        return
    from .._span_tree import span_rules

    tree = SpanTree(table) if tree is None else tree.rebased(table)
    negative, unequal, shallow, repeat, earlier, deep, deep_parent = span_rules(
        *tree.columns,
        _values(table, "start_ns", pa.int64()),
        _values(table, "end_ns", pa.int64()),
        _values(table, "duration_ns", pa.int64()),
        _values(table, "depth", pa.int32()),
        index=tree.index,
    )
    rules = (
        ("duration_ns is negative", negative),
        # Wrapping add: a sum that overflows int64 cannot equal a valid end either.
        ("end_ns != start_ns + duration_ns", unequal),
        ("depth is negative", shallow),
    )
    for rule, row in rules:
        if row >= 0:
            values = {
                name: table.column(name)[row].as_py()
                for name in ("span_id", "start_ns", "end_ns", "duration_ns", "depth")
            }
            raise TraceFileError(
                path,
                f"row {row}: {rule} ({_describe(values)}); "
                "load(path, check=False) reads a trusted file anyway",
            )
    if repeat >= 0:
        # the first row whose id an earlier row has
        raise TraceFileError(
            path,
            f"row {repeat}: span_id {table.column('span_id')[repeat].as_py()} already used by "
            f"row {earlier}; load(path, check=False) reads a trusted file anyway",
        )
    if deep >= 0:
        depth = table.column("depth")
        raise TraceFileError(
            path,
            f"row {deep}: depth {depth[deep].as_py()} under a parent at depth "
            f"{depth[deep_parent].as_py()} (row {deep_parent}), not one level up; "
            "load(path, check=False) reads a trusted file anyway",
        )


def _values(table: pa.Table, name: str, type_: pa.DataType) -> Any:
    """A column as one contiguous numpy array of ``type_`` (no copy when it is one chunk of
    that type without nulls)."""
    import numpy as np

    column = table.column(name)
    if column.type != type_:
        column = column.cast(type_)
    return np.ascontiguousarray(column.to_numpy())


#: What a loader that cannot count its rows (CSV, JSON lines) says of those it finds missing.
MISSING_PARENTS = (
    "span(s) named as a parent but not in the file (cut out, or still open when drained)"
)


def missing_parents(table: pa.Table) -> int:
    """How many distinct spans the rows name as their parent but the table lacks: rows lost
    from a file that cannot say its own row count (CSV, JSON lines), seen through the spans
    that point at them."""
    import numpy as np

    parents = table.column("parent_id").drop_null()
    if len(parents) == 0:
        return 0
    wanted = np.unique(parents.to_numpy())
    ids = np.sort(table.column("span_id").to_numpy())
    where = np.minimum(np.searchsorted(ids, wanted), max(len(ids) - 1, 0))
    return int(len(wanted) - (ids[where] == wanted).sum()) if len(ids) else len(wanted)


def _describe(values: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in values.items())


def note_skipped(
    table: pa.Table, path: str | os.PathLike[str], reasons: dict[str, int]
) -> pa.Table:
    """``table`` with the rows a loader left out of ``path`` counted, by reason, in its
    metadata (``hotspan.skipped_on_load``) and said in a :class:`TraceFileWarning`; a
    ``TraceFileError`` when nothing valid is left. Reasons with no rows are ignored."""
    reasons = {why: count for why, count in reasons.items() if count}
    if not reasons:
        return table
    total = sum(reasons.values())
    said = "; ".join(f"{count:,} {why}" for why, count in reasons.items())
    if table.num_rows == 0:
        raise TraceFileError(path, f"no valid span left: {said}")
    warnings.warn(
        f"{os.fspath(path)}: {total:,} row(s) left out: {said}; {table.num_rows:,} loaded",
        TraceFileWarning,
        stacklevel=3,
    )
    metadata = dict(table.schema.metadata or {})
    metadata[META_SKIPPED_ON_LOAD] = json.dumps({"total": total, "reasons": reasons}).encode()
    return table.replace_schema_metadata(metadata)


# --------------------------------------------------------------------------- progress


class Progress:
    """A progress bar on stderr for work that turns out to take over a second.

    Nothing is shown when stderr is not a terminal, nor for work that ends within the
    first second: the bar appears lazily, on the first ``advance`` after that.
    """

    DELAY_S = 1.0

    def __init__(self, total: int, description: str):
        self.total = max(int(total), 1)
        self.description = description
        self.done = 0
        self._started = time.monotonic()
        self._rich: rich.progress.Progress | None = None
        self._task: rich.progress.TaskID | None = None
        self._enabled = _stderr_is_terminal()

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def advance(self, amount: int) -> None:
        self.done += amount
        if self._rich is None:
            if not self._enabled or time.monotonic() - self._started < self.DELAY_S:
                return
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                Progress as RichProgress,
                TaskProgressColumn,
                TextColumn,
                TimeRemainingColumn,
            )

            self._rich = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                TaskProgressColumn(),
                TimeRemainingColumn(),
                console=Console(file=sys.stderr),
                transient=True,
            )
            self._rich.start()
            self._task = self._rich.add_task(
                self.description, total=self.total, completed=self.done
            )
        else:
            assert self._task is not None  # set together with self._rich
            self._rich.update(self._task, completed=self.done)

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False
