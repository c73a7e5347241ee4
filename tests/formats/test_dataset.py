"""A run as a directory: parts written atomically, read back whole with exactly the span schema."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan._schema import META_DROPPED, META_RANK, META_START, SPAN_SCHEMA
from hotspan.formats.dataset import META_PART, META_RANKS, load_dataset, part_path, write_part
from hotspan.formats import TraceFileError

from _util import wait_until


def _spans(
    n: int, rank: int, pid: int, start: int = 1_000, dropped: int = 0, first: int = 1
) -> pa.Table:
    """A span table of ``n`` roots as one process of ``rank`` would drain it."""
    ids = pa.array([(rank << 48) + (pid << 24) + i + first for i in range(n)], pa.uint64())
    starts = pa.array([start + 10 * i for i in range(n)], pa.int64())
    columns = {
        "span_id": ids,
        "parent_id": pa.nulls(n, pa.uint64()),
        "name": pa.array(["step"] * n).dictionary_encode(),
        "category": pa.array(["train"] * n).dictionary_encode(),
        "start_ns": starts,
        "end_ns": pc.add(starts, 5),
        "duration_ns": pa.array([5] * n, pa.int64()),
        "depth": pa.array([0] * n, pa.int32()),
        "thread_id": pa.array([pid] * n, pa.int64()),
        "thread_name": pa.array(["MainThread"] * n).dictionary_encode(),
        "pid": pa.array([pid] * n, pa.int64()),
        "rank": pa.array([rank] * n, pa.int32()),
        "arg": pa.nulls(n, pa.int64()),
        "error": pa.array([False] * n),
        "self_ns": pa.array([5] * n, pa.int64()),
        "wait_ns": pa.array([0] * n, pa.int64()),
    }
    meta = {
        b"hotspan.host": b"h",
        META_RANK: str(rank).encode(),
        b"hotspan.pid": str(pid).encode(),
        META_START: str(start).encode(),
        b"hotspan.clock": json.dumps({"anchor_real_ns": start}).encode(),
        META_DROPPED: json.dumps(
            {"total": dropped, "threads": {str(pid): dropped} if dropped else {}}
        ).encode(),
    }
    return pa.Table.from_arrays(list(columns.values()), schema=SPAN_SCHEMA.with_metadata(meta))


@pytest.fixture
def run(tmp_path):
    """Three ranks (one of them restarted: two processes), two parts each."""
    d = tmp_path / "run"
    for rank, pid, start in ((10, 300, 5_000), (2, 200, 3_000), (0, 100, 2_000), (2, 201, 9_000)):
        for seq in range(2):
            write_part(
                _spans(3, rank, pid, start + 100 * seq, dropped=seq, first=1 + 3 * seq),
                d,
                rank=rank,
                pid=pid,
                seq=seq,
                part_meta={"sink_dropped": seq},
            )
    return d


def test_load_directory_is_exactly_the_span_schema(run):
    table = hotspan.load(run)
    assert table.schema.equals(SPAN_SCHEMA)  # rank neither duplicated nor a dictionary / string
    assert table.num_rows == 4 * 2 * 3
    # Ordered by rank (numerically: 10 after 2), then process, then part.
    assert table.column("rank").to_pylist() == [0] * 6 + [2] * 12 + [10] * 6
    assert table.column("pid").to_pylist()[6:18] == [200] * 6 + [201] * 6
    assert pc.count_distinct(table.column("span_id")).as_py() == table.num_rows
    assert hotspan.load(str(run) + "/").num_rows == table.num_rows


def test_metadata_is_merged_per_rank(run):
    meta = hotspan.load(run).schema.metadata
    assert int(meta[META_START]) == 2_000
    assert meta[META_RANK] == b"0,2,10"
    dropped = json.loads(meta[META_DROPPED])
    assert dropped["total"] == 4  # each process's latest count (1), summed over 4 processes
    ranks = json.loads(meta[META_RANKS])
    assert sorted(ranks, key=int) == ["0", "2", "10"]
    assert [p["pid"] for p in ranks["2"]] == [200, 201]
    assert {p["parts"] for procs in ranks.values() for p in procs} == {2}
    assert ranks["10"][0]["start_ns"] == 5_000 and ranks["10"][0]["sink_dropped"] == 1
    assert META_PART not in meta


def test_part_names_and_their_own_metadata(run):
    path = part_path(run, 2, 201, 1)
    assert path.relative_to(run).as_posix() == "part-r2-201-000001.parquet"
    own = json.loads(hotspan.load(path).schema.metadata[META_PART])
    assert own == {"rank": 2, "pid": 201, "seq": 1, "sink_dropped": 1}


def test_torn_and_hidden_files_are_ignored(run):
    # What a writer killed mid-part leaves behind, and what other tools keep beside data.
    (run / ".part-r0-100-000002.parquet.1a2b3c4d.part").write_bytes(b"PAR1 torn")
    (run / "_SUCCESS").write_bytes(b"")
    (run / "_tmp.parquet").write_bytes(b"junk")
    (run / ".hidden").mkdir()
    (run / ".hidden" / "x.parquet").write_bytes(b"junk")
    assert hotspan.load(run).num_rows == 24


def test_a_corrupt_visible_part_is_an_error_naming_the_directory(run):
    (run / "part-r0-100-000009.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TraceFileError, match="run"):
        hotspan.load(run)


def test_empty_and_missing_directories(tmp_path):
    with pytest.raises(TraceFileError, match="no span parts"):
        load_dataset(tmp_path)
    with pytest.raises(FileNotFoundError):
        hotspan.load(f"{tmp_path}/missing/")


def test_parquet_files_without_partition_directories(tmp_path):
    # Per-rank exports dropped in one directory read as one trace too.
    hotspan.export(_spans(2, 0, 1), tmp_path / "rank0.parquet")
    hotspan.export(_spans(3, 1, 2), tmp_path / "rank1.parquet")
    table = hotspan.load(tmp_path)
    assert table.schema.equals(SPAN_SCHEMA)
    assert sorted(table.column("rank").to_pylist()) == [0, 0, 1, 1, 1]


def test_cli_commands_take_a_directory(run, tmp_path, capsys):
    from hotspan.cli import main

    assert main(["stats", str(run), "--by", "rank", "--json"]) == 0
    assert {r["rank"]: r["count"] for r in json.loads(capsys.readouterr().out)} == {
        0: 6,
        2: 12,
        10: 6,
    }
    target = tmp_path / "merged.parquet"
    assert main(["export", str(run), str(target)]) == 0
    assert hotspan.load(target).num_rows == 24
    assert main(["gantt", str(run), "--width", "40"]) == 0
    capsys.readouterr()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["stats", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no span parts" in err and "Traceback" not in err


def test_duckdb_reads_the_layout(run):
    import duckdb

    rows = duckdb.sql(
        f"SELECT rank, count(*) AS spans, sum(duration_ns) AS total FROM '{run}/**/*.parquet' "
        f"GROUP BY rank ORDER BY rank"
    ).fetchall()
    assert rows == [(0, 6, 30), (2, 12, 60), (10, 6, 30)]


# --------------------------------------------------------------------------- record(), in this process


def test_record_to_a_directory_and_a_file(fresh, tmp_path):
    span = hotspan.span("work", "c")

    def parts() -> list:
        return sorted((tmp_path / "run").glob("part-*.parquet"))

    with hotspan.record(tmp_path / "run", flush_interval=0.05) as rec:
        for batch in range(3):
            for _ in range(100):
                with span:
                    pass
            if batch < 2:  # written as it goes (the raw log): readable while recording
                wait_until(
                    lambda: hotspan.load(tmp_path / "run").num_rows == 100 * (batch + 1),  # noqa: B023 (waited on within the loop)
                    what=f"batch {batch + 1} on disk",
                )
    assert rec.kind == "directory" and not rec.running
    assert rec.spans == 300 and rec.dropped == 0
    assert len(parts()) >= 2  # the metadata part, and the spans' part stop() wrote
    assert hotspan.load(tmp_path / "run").num_rows == 300

    for ext in (".parquet", ".json"):
        target = tmp_path / f"trace{ext}"
        with hotspan.record(target, flush_interval=0.05) as rec:
            for _ in range(50):
                with span:
                    pass
            # Two flush intervals pass (the flusher's count moves), and still no file.
            wait_until(lambda: rec.flushes >= 2, what="two interval flushes")
            assert not target.exists()  # a file is written at the end
        assert rec.kind == "file"
        assert hotspan.load(target).num_rows == 50


@pytest.mark.parametrize("raw_log", ["1", "0"])
def test_record_flushes_early_when_the_core_nears_its_memory_cap(
    fresh, tmp_path, monkeypatch, raw_log
):
    # A long interval and a small cap: 1.2 M spans would overflow the 256 K-span
    # cap several times over between interval flushes; the flusher sees the core's memory pass
    # half the cap and flushes early, so nothing is dropped. With the raw log (the default)
    # the drain thread writes them as they leave the rings, no flush needed.
    from hotspan import _native

    monkeypatch.setenv("HOTSPAN_RAW_LOG", raw_log)
    cap = 256 * 1024 * 32
    hotspan.configure(memory_cap=cap)
    span = hotspan.span("work", "c")
    dropped_before = hotspan.dropped()
    with hotspan.record(tmp_path / "run", flush_interval=60) as rec:
        for _ in range(120):
            for _ in range(10_000):
                with span:
                    pass
            # Past half the cap, the program waits for the early flush this test is about
            # (the interval flush is a minute away): a burst more then fits under the cap.
            wait_until(lambda: _native._pending()["bytes"] * 2 < cap, what="an early flush")
    assert hotspan.dropped() == dropped_before
    assert rec.dropped == 0 and rec.spans == 1_200_000
    if raw_log == "0":
        assert rec.flushes >= 4  # early flushes, and the final one at stop
    assert hotspan.load(tmp_path / "run").num_rows == 1_200_000


def test_record_start_stop_and_another_beside_it(fresh, tmp_path):
    rec = hotspan.record(tmp_path / "a", flush_interval=10).start()
    try:
        assert rec.running and rec.start() is rec
        with hotspan.record(tmp_path / "b"):  # a second one runs beside it, its own cursor
            with hotspan.span("x"):
                pass
    finally:
        rec.stop()
    rec.stop()  # twice is fine
    assert hotspan.load(tmp_path / "a").num_rows == 1  # the final flush at stop
    assert hotspan.load(tmp_path / "b").num_rows == 1


def test_record_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="scheme"):
        hotspan.record("http://127.0.0.1:1")
    with pytest.raises(ValueError, match="flush_interval"):
        hotspan.record(tmp_path, flush_interval=0)
    with pytest.raises(TypeError, match="flush_interval"):
        hotspan.record(tmp_path, flush_interval="1")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        hotspan.record(tmp_path / "file")


def test_token_names_never_overwrite_and_read_beside_old_names(tmp_path):
    run = tmp_path / "run"
    write_part(_spans(3, 0, 100), run, rank=0, pid=100, seq=0)  # an older run's name
    path = write_part(
        _spans(2, 0, 100, first=10), run, rank=0, pid=100, seq=0, token="6b0d0000aaaa0001"
    )
    assert path.name == "part-r0-100-6b0d0000aaaa0001-000000.parquet"
    with pytest.raises(FileExistsError):  # never over an acknowledged part
        write_part(
            _spans(1, 0, 100, first=20), run, rank=0, pid=100, seq=0, token="6b0d0000aaaa0001"
        )
    assert not [p for p in run.iterdir() if p.name.startswith(".")]  # its temporary file went
    with pytest.raises(ValueError, match="hex"):
        part_path(run, 0, 100, 0, token="../x")
    table = hotspan.load(run)
    assert table.num_rows == 5
    assert json.loads(hotspan.load(path).schema.metadata[META_PART])["token"] == "6b0d0000aaaa0001"


def test_a_loaded_run_is_one_table_pyarrow_can_group(tmp_path):
    # Issue 11 item 7: parts with their own dictionaries loaded as one table whose string
    # columns have one dictionary each, so group_by/joins work ("Unifying differing
    # dictionaries" otherwise).
    for i in range(3):
        with hotspan.record(tmp_path / "run"):
            with hotspan.span("same", "x"):
                pass
            with hotspan.span(f"only{i}", f"cat{i}"):
                pass
    table = hotspan.load(tmp_path / "run")
    grouped = table.group_by(["name", "category"]).aggregate([("duration_ns", "count")])
    assert sorted(grouped.column("name").to_pylist()) == ["only0", "only1", "only2", "same"]
    assert (
        dict(
            zip(grouped.column("name").to_pylist(), grouped.column("duration_ns_count").to_pylist())
        )["same"]
        == 3
    )
