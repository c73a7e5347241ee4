"""A recording's parts are written in the encoding cheapest for the flusher (LZ4, byte-stream-
split times, dictionaries on the strings only, one row group, statistics where readers take
ranges), read back exactly, and a compaction rewrites them in the full-file encoding (zstd)."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

import hotspan
from hotspan.formats.dataset import list_parts, location, write_part
from hotspan.recording.compaction import compact

STRING_COLUMNS = {"name", "category", "thread_name"}
# analysis/_streaming.py column_range (wait_ns: whether phases must sum self times)
RANGED_COLUMNS = {"start_ns", "end_ns", "duration_ns", "wait_ns"}


@pytest.fixture
def recorded(fresh):
    names = [f"step_{i}" for i in range(7)]
    for i in range(3000):
        with hotspan.span(names[i % 7], "train"):
            with hotspan.span("op", "compute" if i % 2 else None, arg=i if i % 3 else None):
                pass
    return hotspan.drain()


def _columns(path) -> dict:
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 1
    group = meta.row_group(0)
    return {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}


def _span_parts(run) -> list[str]:
    return [p for p, _size in list_parts(location(run)) if pq.ParquetFile(p).metadata.num_rows]


def test_a_recorders_parts_use_the_light_encoding_and_read_back_exactly(tmp_path, fresh):
    run = tmp_path / "run"
    with hotspan.record(run, flush_interval=600) as rec:
        for i in range(3000):
            with hotspan.span(f"step_{i % 7}", "train"):
                with hotspan.span("op", "compute" if i % 2 else None, arg=i if i % 3 else None):
                    pass
        rec.flush()
    # written at stop(): the raw log that the drain thread wrote while the run was live,
    # encoded once, as a part per flush was (formats/_rawlog.py)
    (part,) = _span_parts(run)
    columns = _columns(part)
    assert {c.compression for c in columns.values()} == {"LZ4"}  # LZ4_RAW in the file
    dictionary = {name for name, c in columns.items() if "RLE_DICTIONARY" in c.encodings}
    assert dictionary == STRING_COLUMNS
    for name in ("start_ns", "end_ns", "duration_ns", "self_ns", "wait_ns", "arg"):
        assert "BYTE_STREAM_SPLIT" in columns[name].encodings, name
    # Spark cannot read byte-stream-split unsigned 64-bit ids
    assert "BYTE_STREAM_SPLIT" not in columns["span_id"].encodings
    assert "BYTE_STREAM_SPLIT" not in columns["parent_id"].encodings
    with_statistics = {name for name, c in columns.items() if c.is_stats_set}
    assert with_statistics == RANGED_COLUMNS
    loaded = hotspan.load(run)
    assert loaded.num_rows == 6000
    assert sorted(loaded.column("name").to_pylist()) == sorted(
        [f"step_{i % 7}" for i in range(3000)] + ["op"] * 3000
    )


def test_write_part_keeps_every_value_in_either_encoding(tmp_path, recorded):
    for encoding in ("part", "file"):
        path = write_part(
            recorded, tmp_path / encoding, rank=0, pid=1, seq=0, token="ab", encoding=encoding
        )
        back = pq.read_table(path)
        for name in recorded.column_names:
            assert back.column(name).to_pylist() == recorded.column(name).to_pylist(), name
    with pytest.raises(ValueError, match="encoding must be 'part' or 'file'"):
        write_part(recorded, tmp_path / "x", rank=0, pid=1, seq=0, token="ab", encoding="lz4")


def test_compaction_rewrites_parts_in_the_full_file_encoding(tmp_path, recorded):
    run = tmp_path / "run"
    for seq in range(3):
        write_part(recorded.slice(seq * 2000, 2000), run, rank=0, pid=7, seq=seq, token="cd")
    assert {c.compression for c in _columns(_span_parts(run)[0]).values()} == {"LZ4"}
    result = compact(run, grace_s=0)
    assert result.merged == 3 and result.written == 1
    (merged,) = _span_parts(run)
    assert {c.compression for c in _columns(merged).values()} == {"ZSTD"}
    assert hotspan.load(run).column("span_id").to_pylist() == recorded.column("span_id").to_pylist()
