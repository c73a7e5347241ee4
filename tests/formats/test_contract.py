"""The contract every export format keeps: one parametrized suite over the registry.

Round trip (ids, names, categories, times, args, errors; metadata where the format
keeps it), atomic writes, the unknown extension, and bad files that must fail with an
error naming the file.
"""

from __future__ import annotations

import gzip
import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from conftest import assert_same_spans, build_spans, plain

from hotspan._schema import SPAN_SCHEMA
from hotspan.formats._registry import READABLE_EXTENSIONS
from hotspan.formats import FORMATS, TraceFileError, export, exporter_for, load
from hotspan.formats import _base as _base

# The formats that load back as spans (.folded and .speedscope.json are views, written only:
# tests/formats/test_flame_exports.py holds them).
EXTENSIONS = sorted(READABLE_EXTENSIONS)


@pytest.fixture(params=EXTENSIONS, ids=lambda ext: ext.lstrip("."))
def extension(request) -> str:
    return request.param


def test_round_trip(extension, spans, tmp_path):
    path = tmp_path / f"trace{extension}"
    assert export(spans, path) == path
    back = load(path)
    exporter = FORMATS[extension]
    assert_same_spans(spans, back, keep_order=exporter.keeps_row_order)
    if exporter.keeps_metadata:
        assert back.schema.metadata == spans.schema.metadata
    assert back.schema.remove_metadata() == SPAN_SCHEMA.remove_metadata()


def test_round_trip_of_plain_strings(extension, plain_spans, spans, tmp_path):
    path = tmp_path / f"trace{extension}"
    export(plain_spans, path)
    assert_same_spans(spans, load(path), keep_order=FORMATS[extension].keeps_row_order)


def test_round_trip_in_small_batches(extension, spans, tmp_path, monkeypatch):
    """Batch boundaries (spans still open across them, names first seen late) change nothing."""
    monkeypatch.setattr(_base, "BATCH_ROWS", 997)
    path = tmp_path / f"trace{extension}"
    export(spans, path)
    assert_same_spans(spans, load(path), keep_order=FORMATS[extension].keeps_row_order)


def test_round_trip_of_an_empty_table(extension, tmp_path):
    path = tmp_path / f"empty{extension}"
    export(SPAN_SCHEMA.empty_table(), path)
    back = load(path)
    assert back.num_rows == 0
    assert back.schema.remove_metadata() == SPAN_SCHEMA.remove_metadata()


def test_round_trip_of_multiple_chunks_with_their_own_dictionaries(extension, tmp_path):
    """drain() may hand over chunks whose dictionaries differ."""
    first, second = build_spans(seed=1, roots_per_thread=1), build_spans(seed=2, roots_per_thread=1)
    # Distinct ids: the second trace's ids moved past the first's (its one huge leaf id,
    # which would wrap, moved just below the first's).
    offset = pa.scalar(1 << 32, pa.uint64())
    ids = second.column("span_id")
    huge = pa.compute.greater(ids, pa.scalar(1 << 63, pa.uint64()))
    ids = pa.compute.if_else(
        huge, pa.compute.subtract(ids, pa.scalar(1, pa.uint64())), pa.compute.add(ids, offset)
    )
    second = second.set_column(0, "span_id", ids)
    second = second.set_column(1, "parent_id", pa.compute.add(second.column("parent_id"), offset))
    # Shift the second trace later in time so spans of one thread do not overlap.
    shift = pa.scalar(10**9, pa.int64())
    for name in ("start_ns", "end_ns"):
        second = second.set_column(
            second.schema.get_field_index(name), name, pa.compute.add(second.column(name), shift)
        )
    both = pa.concat_tables([first, second.cast(first.schema)])
    assert both.column("name").num_chunks == 2
    path = tmp_path / f"chunks{extension}"
    export(both, path)
    assert_same_spans(both, load(path), keep_order=FORMATS[extension].keeps_row_order)


# --------------------------------------------------------------------------- atomic writes


def test_an_interrupted_export_leaves_no_file(extension, spans, tmp_path, monkeypatch):
    exporter = FORMATS[extension]
    original = type(exporter)._write

    def write_then_fail(self, table, path):
        original(self, table.slice(0, 10), path)  # a partial file exists at this point
        raise KeyboardInterrupt

    monkeypatch.setattr(type(exporter), "_write", write_then_fail)
    path = tmp_path / f"trace{extension}"
    with pytest.raises(KeyboardInterrupt):
        export(spans, path)
    assert os.listdir(tmp_path) == []


def test_an_interrupted_export_keeps_the_previous_file(extension, spans, tmp_path, monkeypatch):
    path = tmp_path / f"trace{extension}"
    export(spans, path)
    before = path.read_bytes()
    exporter = FORMATS[extension]

    def fail(self, table, tmp):
        tmp.write_bytes(b"half a file")
        raise OSError("disk full")

    monkeypatch.setattr(type(exporter), "_write", fail)
    with pytest.raises(OSError, match="disk full"):
        export(spans, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]


def test_export_honours_the_umask(spans, tmp_path):
    path = tmp_path / "trace.parquet"
    old = os.umask(0o022)
    try:
        export(spans, path)
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == 0o644


def test_export_into_a_missing_directory_names_it(spans, tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        export(spans, tmp_path / "nowhere" / "trace.parquet")


# --------------------------------------------------------------------------- formats


@pytest.mark.parametrize("name", ["trace.txt", "trace", "trace.json.bz2", "trace.parquet.tmp"])
def test_unknown_extension_lists_the_supported_ones(spans, tmp_path, name):
    with pytest.raises(ValueError) as error:
        export(spans, tmp_path / name)
    for extension in FORMATS:
        assert extension in str(error.value)
    with pytest.raises(ValueError, match=".parquet"):
        load(tmp_path / name)


def test_format_argument_overrides_the_extension(spans, tmp_path):
    path = tmp_path / "trace.bin"
    export(spans, path, format="parquet")
    assert_same_spans(spans, load(path, format=".parquet"))
    assert exporter_for("x", "json.gz") is FORMATS[".json.gz"]
    assert exporter_for("X.JSON.GZ") is FORMATS[".json.gz"]
    with pytest.raises(ValueError, match="unknown export format"):
        exporter_for("x", "yaml")


def test_not_a_span_table_is_refused(tmp_path):
    with pytest.raises(ValueError, match="missing column"):
        export(pa.table({"span_id": [1]}), tmp_path / "t.parquet")
    with pytest.raises(TypeError, match="pyarrow.Table"):
        export([{"span_id": 1}], tmp_path / "t.parquet")  # type: ignore[arg-type]


def test_negative_durations_are_refused_by_the_trace_formats(spans, tmp_path):
    bad = spans.set_column(6, "duration_ns", pa.compute.negate(spans.column("duration_ns")))
    for extension in (".json", ".pftrace"):
        with pytest.raises(ValueError, match="negative duration"):
            export(bad, tmp_path / f"bad{extension}")
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- bad files


def _check_bad_file(path, *fragments):
    with pytest.raises((ValueError, OSError)) as error:
        load(path)
    assert not isinstance(error.value, (KeyError, IndexError, TypeError)), repr(error.value)
    message = str(error.value)
    assert str(path) in message, message
    for fragment in fragments:
        assert fragment in message.lower(), message
    return error.value


def test_missing_file(extension, tmp_path):
    error = _check_bad_file(tmp_path / f"missing{extension}")
    assert isinstance(error, FileNotFoundError)


def test_directory_instead_of_a_file(extension, tmp_path):
    path = tmp_path / f"dir{extension}"
    path.mkdir()
    assert isinstance(_check_bad_file(path), IsADirectoryError)


def test_empty_file(extension, tmp_path):
    path = tmp_path / f"empty{extension}"
    path.write_bytes(b"")
    if (
        extension == ".jsonl"
    ):  # zero lines are zero spans (as jq reads it): what an empty table writes
        assert load(path).num_rows == 0
        return
    assert isinstance(_check_bad_file(path), TraceFileError)


@pytest.mark.parametrize("keep", [0.5, 0.97])
def test_truncated_file(extension, spans, tmp_path, keep):
    path = tmp_path / f"truncated{extension}"
    export(spans, path)
    data = path.read_bytes()
    if extension == ".json.gz":  # truncate the text inside, then compress what is left
        text = gzip.decompress(data)
        path.write_bytes(gzip.compress(text[: int(len(text) * keep)]))
    else:
        path.write_bytes(data[: int(len(data) * keep)])
    if extension == ".csv":
        # CSV has no end marker: a cut inside a line leaves that row out, said in a
        # warning, never a garbled row; the parents of rows kept that were cut away are
        # counted too (a cut at a line break is a shorter file, said only through them).
        from hotspan.formats._base import TraceFileWarning

        with pytest.warns(
            TraceFileWarning, match=f"^{path}: [\\d,]+ row.s. left out: 1 incomplete last row"
        ):
            table = load(path)
        assert 0 < table.num_rows < spans.num_rows
        return
    _check_bad_file(path)


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\x01garbage\xff" * 50,
        b"PAR1 not really",
        "naïve text\n".encode() * 20,
        b'{"traceEvents": 12}',
        b"[1, 2, 3]",
    ],
)
def test_not_this_format(extension, tmp_path, content):
    path = tmp_path / f"bad{extension}"
    path.write_bytes(content)
    _check_bad_file(path)


def test_a_parquet_file_that_is_not_a_span_table(tmp_path):
    path = tmp_path / "other.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"x": [1, 2]}), path)
    _check_bad_file(path, "missing column")


def test_a_span_table_with_a_wrong_column_type(spans, tmp_path):
    path = tmp_path / "wrong.arrow"
    bad = plain(spans).set_column(4, "start_ns", pa.array(["x"] * spans.num_rows))
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, bad.schema) as writer:
        writer.write_table(bad)
    _check_bad_file(path, "start_ns")


def test_parquet_row_groups_written_in_parallel_join_into_one_valid_file(
    spans, tmp_path, monkeypatch
):
    """Large tables are written as row groups on several threads, each into memory, then
    joined under one footer with moved offsets: the file must read back exactly, in order,
    with its metadata, through pyarrow and DuckDB alike."""
    import duckdb
    import pyarrow.parquet as pq

    from hotspan.formats import _parquet as parquet

    monkeypatch.setattr(parquet, "PARALLEL_MIN_ROWS", 1000)
    monkeypatch.setattr(parquet, "PARALLEL_ROWS", 997)  # many row groups, over several rounds
    path = tmp_path / "joined.parquet"
    export(spans, path)
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == -(-spans.num_rows // 997)
    assert meta.num_rows == spans.num_rows
    back = pq.read_table(path)
    assert back.equals(spans.cast(back.schema)) and back.schema.metadata == spans.schema.metadata
    assert load(path).num_rows == spans.num_rows
    (total,) = duckdb.sql(
        f"SELECT count(*), sum(duration_ns), max(span_id) FROM '{path}'"
    ).fetchall()
    assert total == (
        spans.num_rows,
        pc.sum(spans.column("duration_ns")).as_py(),
        pc.max(spans.column("span_id")).as_py(),
    )
    # row-group statistics moved with their row groups: pruning by time still finds the rows
    latest = pc.max(spans.column("start_ns")).as_py()
    pruned = pq.read_table(path, filters=[("start_ns", ">=", latest)])
    assert pruned.num_rows == pc.sum(pc.equal(spans.column("start_ns"), latest)).as_py()
