"""What the commands share on the way in: the parser class, loading traces (one or several), --by and the
span filters (as a pyarrow mask and as SQL for the streaming path), whether to stream, and writing
files atomically."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Callable, NoReturn, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .errors import EXIT_BAD_INPUT, CliError


DEFAULT_BY = ("category", "name")


class CliParser(argparse.ArgumentParser):
    """argparse, with its errors as one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        print(f"{self.prog}: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(EXIT_BAD_INPUT)


def add_command(
    sub, name: str, help: str, description: str, example: str, func
) -> argparse.ArgumentParser:
    parser = sub.add_parser(
        name,
        help=help,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  " + example.replace("\n", "\n  "),
    )
    parser.set_defaults(func=func)
    return parser


# --------------------------------------------------------------------------- files


def write_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` beside ``path`` and rename it into place (the library's atomic writer)."""
    from ..formats.base import atomic_path

    if path.is_dir():
        raise CliError(f"{path}: is a directory, not a file to write")
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        write(tmp)


def export_trace(table: pa.Table, path: Path) -> None:
    from ..formats import export

    try:
        export(table, path)
    except ValueError as exc:
        raise CliError(f"{path}: {exc}") from None


def _load_one(path: str) -> pa.Table:
    import warnings

    from ..formats import load
    from ..formats.base import TraceFileWarning

    try:
        with warnings.catch_warnings(record=True) as said:
            warnings.simplefilter("always", TraceFileWarning)
            table = load(path)
        for warning in said:  # rows left out of a damaged file: one line each, no source line
            if issubclass(warning.category, TraceFileWarning):
                print(f"hotspan: warning: {warning.message}", file=sys.stderr)
            else:
                warnings.warn_explicit(
                    warning.message, warning.category, warning.filename, warning.lineno
                )
        return table
    except ValueError as exc:  # TraceFileError and unknown extensions name the file already
        message = str(exc)
        raise CliError(message if path in message else f"{path}: {message}") from None


def load_traces(paths: Sequence[str]) -> pa.Table:
    """One table from one or more traces (ranks written to separate files, say)."""
    tables = [_load_one(p) for p in paths]
    if len(tables) == 1:
        return tables[0]
    # The first file's metadata stands for the whole (concat_tables keeps it).
    return pa.concat_tables([t.cast(tables[0].schema) for t in tables]).unify_dictionaries()


def parse_by(text: str | None, default: Sequence[str] = DEFAULT_BY) -> tuple[str, ...]:
    from .._schema import SPAN_SCHEMA

    if text is None:
        return tuple(default)
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise CliError("--by: give one or more column names, comma-separated")
    known = (*SPAN_SCHEMA.names, "device")  # device: derived (analysis.statistics.device_labels)
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise CliError(
            f"--by: no column {', '.join(map(repr, unknown))}; columns: {', '.join(known)}"
        )
    if len(set(keys)) != len(keys):
        raise CliError(f"--by: a column is named twice in {text!r}")
    return keys


# --------------------------------------------------------------------------- filters


def _parse_filters(
    filters: Sequence[str], ranks: str | None
) -> tuple[list[tuple[str, str, str]], list[int] | None]:
    """--filter COLUMN~REGEX / COLUMN=VALUE as (column, op, value), checked; --rank as a list."""
    import re

    from .._schema import SPAN_SCHEMA

    parsed = []
    for text in filters:
        for op in ("~", "="):
            column, sep, value = text.partition(op)
            if sep:
                break
        else:
            raise CliError(f"--filter: expected COLUMN~REGEX or COLUMN=VALUE, not {text!r}")
        column = column.strip()
        if column not in SPAN_SCHEMA.names:
            raise CliError(
                f"--filter: no column {column!r}; columns: {', '.join(SPAN_SCHEMA.names)}"
            )
        if op == "~":
            try:
                re.compile(value)
            except re.error as exc:
                raise CliError(f"--filter: bad regular expression {value!r}: {exc}") from None
        parsed.append((column, op, value))
    wanted = None
    if ranks is not None:
        try:
            wanted = [int(r) for r in ranks.split(",") if r.strip()]
        except ValueError:
            raise CliError(
                f"--rank: expected rank numbers, comma-separated, not {ranks!r}"
            ) from None
    return parsed, wanted


def filter_spans(
    table: pa.Table, filters: Sequence[str], categories: Sequence[str], ranks: str | None
) -> pa.Table:
    """The spans that pass every --filter COLUMN~REGEX / COLUMN=VALUE, --category and --rank."""
    parsed, wanted = _parse_filters(filters, ranks)
    mask = None

    def both(m):
        return m if mask is None else pc.and_(mask, m)

    for column, op, value in parsed:
        values = table.column(column).cast(pa.string())
        if op == "~":
            mask = both(pc.match_substring_regex(values, value).fill_null(False))
        else:
            mask = both(pc.equal(values, value).fill_null(False))
    if categories:
        category = table.column("category").cast(pa.string())
        hit = None
        for c in categories:
            c = c.strip("/")
            # The category itself or any category below it (sync matches sync/compute).
            m = pc.or_(pc.equal(category, c), pc.starts_with(category, c + "/")).fill_null(False)
            hit = m if hit is None else pc.or_(hit, m)
        mask = both(hit)
    if wanted is not None:
        mask = both(pc.is_in(table.column("rank"), value_set=pa.array(wanted, pa.int32())))
    return table if mask is None else table.filter(mask)


def filter_sql(filters: Sequence[str], categories: Sequence[str], ranks: str | None) -> str | None:
    """The same filters as a SQL condition for the streaming path (DuckDB's regular
    expressions are RE2, as pyarrow's are)."""
    from ..analysis.streaming import sql_literal

    parsed, wanted = _parse_filters(filters, ranks)
    terms = []
    for column, op, value in parsed:
        text = f'CAST("{column}" AS VARCHAR)'
        terms.append(
            f"regexp_matches({text}, {sql_literal(value)})"
            if op == "~"
            else f"{text} = {sql_literal(value)}"
        )
    if categories:
        terms.append(
            "("
            + " OR ".join(
                f"category = {sql_literal(c.strip('/'))} OR starts_with(category, {sql_literal(c.strip('/') + '/')})"
                for c in categories
            )
            + ")"
        )
    if wanted is not None:
        terms.append(f"rank IN ({', '.join(str(r) for r in wanted) or 'NULL'})")
    return " AND ".join(f"coalesce({t}, FALSE)" for t in terms) or None


#: Parquet traces at least this large (all together) are streamed through DuckDB rather than
#: loaded; dataset directories always are.
STREAM_MIN_BYTES = 64 << 20


def streamable(paths: Sequence[str]) -> bool:
    """Whether to stream ``paths`` (``stats``/``compare``): all Parquet files, dataset
    directories or URIs, and a directory or URI among them or at least
    $HOTSPAN_STREAM_MIN_BYTES (default 64 MiB) of Parquet."""
    threshold = int(os.environ.get("HOTSPAN_STREAM_MIN_BYTES") or STREAM_MIN_BYTES)
    size = 0
    for text in paths:
        path = Path(text)
        if "://" in text:  # object storage (s3://, gs://, ...) through pyarrow.fs: a run, streamed
            size = max(size, threshold)
        elif path.is_dir():
            size = max(size, threshold)
        elif path.is_file() and path.name.lower().endswith(".parquet"):
            size += path.stat().st_size
        else:
            return False
    return size >= threshold


def span_source(paths: Sequence[str], where: str | None = None):
    from ..analysis.streaming import SpanSource

    try:
        return SpanSource(paths if len(paths) > 1 else paths[0], where=where)
    except ValueError as exc:  # TraceFileError names the file
        raise CliError(str(exc)) from None
