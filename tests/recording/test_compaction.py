"""Compaction: small parts merged per writer, and every reader, at every moment, sees every
span exactly once (a reader loads in a loop while compaction runs)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading

import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats.dataset import META_RANKS, location, list_parts, write_part
from hotspan.recording.compaction import compact

from _procs import env

WRITERS = ((0, 1001, "aa01"), (0, 1002, "aa02"), (1, 1003, "bb01"))
PARTS, ROWS = 24, 30


def _make_dataset(dest, fresh_table) -> list[int]:
    """Three writers (two on rank 0), PARTS parts of ROWS spans each, as flushes write them;
    returns every span id."""
    ids = []
    for rank, pid, token in WRITERS:
        table = fresh_table(rank, PARTS * ROWS)
        ids += table.column("span_id").to_pylist()
        for seq in range(PARTS):
            write_part(
                table.slice(seq * ROWS, ROWS),
                dest,
                rank=rank,
                pid=pid,
                seq=seq,
                token=token,
                part_meta={"sink_dropped": seq},
            )
    return sorted(ids)


@pytest.fixture
def fresh_table(fresh):
    def make(rank: int, n: int):
        hotspan.configure(rank=rank)
        try:
            for i in range(n):
                with hotspan.span("work", "compute", arg=i):
                    pass
            return hotspan.drain()
        finally:
            hotspan.configure(rank=0)

    return make


def _load_loop(dest, expected: list[int], stop: threading.Event, seen: list, errors: list) -> None:
    while not stop.is_set():
        try:
            ids = sorted(hotspan.load(dest).column("span_id").to_pylist())
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(repr(exc))
            return
        if ids != expected:
            errors.append(
                f"load {len(seen)} saw {len(ids)} spans ({len(set(ids))} distinct), expected {len(expected)}"
            )
            return
        seen.append(len(ids))


def _compact_while_loading(dest, expected, **kwargs):
    stop, seen, errors = threading.Event(), [], []
    reader = threading.Thread(target=_load_loop, args=(dest, expected, stop, seen, errors))
    reader.start()
    try:
        results = [compact(dest, **kw) for kw in kwargs["passes"]]
    finally:
        stop.set()
        reader.join(60)
    assert not errors, errors
    return results, seen


def test_compaction_merges_each_writer_and_readers_see_every_span_once(tmp_path, fresh_table):
    run = tmp_path / "run"
    expected = _make_dataset(run, fresh_table)
    loc = location(run)
    size = max(s for _p, s in list_parts(loc))
    before = hotspan.load(run)
    # Pass 1: groups of about 6 parts (several per writer), inputs deleted at once (the
    # hardest case for a reader: a listed part may vanish before it is read). Pass 2: the
    # compacted parts merged again, one per writer.
    results, seen = _compact_while_loading(
        run,
        expected,
        passes=[
            {"target_bytes": size * 6, "grace_s": 0.0},
            {"target_bytes": 1 << 30, "grace_s": 0.05},
        ],
    )
    first, second = results
    assert first.parts_before == len(WRITERS) * PARTS and first.written >= len(WRITERS) * 3
    assert second.parts_after == len(WRITERS) and second.ranks == {0, 1}
    assert len(seen) >= 3, "the reader hardly ran while compaction did"
    names = sorted(os.path.relpath(p, run) for p, _s in list_parts(loc))
    assert names == [f"part-r{r}-{p}-{t}-000000-{PARTS - 1:06d}.parquet" for r, p, t in WRITERS]
    after = hotspan.load(run)
    # Same spans, same order, same per-process metadata (the latest part's dropped counts).
    assert after.column("span_id").to_pylist() == before.column("span_id").to_pylist()
    ranks_before, ranks_after = (json.loads(t.schema.metadata[META_RANKS]) for t in (before, after))
    for rank, procs in ranks_before.items():
        for b, a in zip(procs, ranks_after[rank]):
            assert (a["pid"], a["spans"], a["sink_dropped"], a["start_ns"]) == (
                b["pid"],
                b["spans"],
                b["sink_dropped"],
                b["start_ns"],
            )


def test_only_the_named_writer_is_compacted_and_an_interrupted_one_is_finished(
    tmp_path, fresh_table
):
    run = tmp_path / "run"
    expected = _make_dataset(run, fresh_table)
    result = compact(run, rank=0, pid=1002, grace_s=0)
    assert result.written == 1 and result.merged == PARTS and result.ranks == {0}
    assert result.parts_after == len(WRITERS) * PARTS - PARTS + 1
    # An interrupted compaction (merged part published, inputs never deleted): readers see
    # each span once, and the next compaction deletes the leftovers.
    loc = location(run)
    rank1 = [p for p, _s in list_parts(loc) if "/part-r1-" in p]
    saved = {p: open(p, "rb").read() for p in rank1}
    compact(run, rank=1, grace_s=0)
    for path, data in saved.items():  # the inputs come back, as if never deleted
        with open(path, "wb") as f:
            f.write(data)
    assert sorted(hotspan.load(run).column("span_id").to_pylist()) == expected
    again = compact(run, rank=1, grace_s=0)
    assert again.written == 0 and again.deleted == PARTS
    assert sorted(hotspan.load(run).column("span_id").to_pylist()) == expected


@pytest.mark.slow
def test_cli_compact(tmp_path, fresh_table):
    run = tmp_path / "run"
    expected = _make_dataset(run, fresh_table)
    result = subprocess.run(
        [sys.executable, "-m", "hotspan", "compact", str(run), "--grace", "0"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert f"{len(WRITERS) * PARTS} parts -> {len(WRITERS)}" in result.stdout
    assert sorted(hotspan.load(run).column("span_id").to_pylist()) == expected
    missing = subprocess.run(
        [sys.executable, "-m", "hotspan", "compact", str(tmp_path / "nope")],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (
        missing.returncode == 2 and "nope" in missing.stderr and "Traceback" not in missing.stderr
    )
    bad = subprocess.run(
        [sys.executable, "-m", "hotspan", "compact", str(run), "--target-mb", "0"],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and "--target-mb" in bad.stderr


def test_span_ids_unique_in_fixture(tmp_path, fresh_table):
    # The exactly-once checks above rely on distinct ids across the writers.
    expected = _make_dataset(tmp_path / "run", fresh_table)
    assert len(set(expected)) == len(expected) == len(WRITERS) * PARTS * ROWS
    assert pc.count_distinct(hotspan.load(tmp_path / "run").column("rank")).as_py() == 2


def test_the_collector_compacts_a_writer_when_it_closes(tmp_path, fresh_table):
    from hotspan.recording._collector import CollectorClient, CollectorServer

    tables = [fresh_table(3, 40) for _ in range(6)]
    other = fresh_table(4, 40)
    server = CollectorServer(tmp_path, "grpc://127.0.0.1:0")
    try:
        staying = CollectorClient(server.url)  # another rank, still connected: left alone
        staying.send(other.slice(0, 20))
        staying.send(other.slice(20, 20))
        client = CollectorClient(server.url)
        for table in tables:
            client.send(table)
        assert len(list(tmp_path.glob("part-r3-*.parquet"))) == 6
        client.close()
    finally:
        server.shutdown()  # waits for the compaction the close started
    assert client.sent_spans == 240 and client.dropped == 0
    (merged,) = tmp_path.glob("part-r3-*.parquet")
    assert merged.name == f"part-r3-{os.getpid()}-{client.batch_token}-000000-000005.parquet"
    assert len(list(tmp_path.glob("part-r4-*.parquet"))) == 2
    loaded = hotspan.load(tmp_path)
    expected = sorted(sum((t.column("span_id").to_pylist() for t in tables + [other]), []))
    assert sorted(loaded.column("span_id").to_pylist()) == expected


# --------------------------------------------------------------------------- counters


def _counter_run(run) -> list[tuple]:
    """The three writers' counters, PARTS files each (a flush a file) in run/_counters;
    returns every (time_ns, value, pid), as load_counters gives them."""
    import pyarrow as pa

    from hotspan.counters import write_run_part
    from hotspan.schema import COUNTER_SCHEMA

    rows = []
    for rank, pid, _token in WRITERS:
        for seq in range(PARTS):
            times = [seq * 1000 + k * 10 + pid % 7 for k in range(ROWS)]
            values = [float(pid * 100_000 + seq * ROWS + k) for k in range(ROWS)]
            table = pa.table(
                {
                    "time_ns": pa.array(times, pa.int64()),
                    "name": pa.array(["queue"] * ROWS),
                    "value": pa.array(values, pa.float64()),
                    "rank": pa.array([rank] * ROWS, pa.int32()),
                    "pid": pa.array([pid] * ROWS, pa.int64()),
                },
                schema=COUNTER_SCHEMA,
            )
            write_run_part(run, table, seq=seq)
            rows += zip(times, values, [pid] * ROWS)
    return sorted(rows)


def _counter_rows(run) -> list[tuple]:
    table = hotspan.load_counters(run)
    return sorted(zip(*(table.column(c).to_pylist() for c in ("time_ns", "value", "pid"))))


def test_compaction_merges_each_process_counter_files_readers_seeing_each_value_once(tmp_path):
    from hotspan.counters import RUN_FOLDER

    run = tmp_path / "run"
    expected = _counter_run(run)
    assert len(list((run / RUN_FOLDER).iterdir())) == len(WRITERS) * PARTS
    stop, reading, seen, errors = threading.Event(), threading.Event(), [], []

    def read_in_a_loop():
        while not stop.is_set():
            try:
                rows = _counter_rows(run)
            except Exception as exc:  # noqa: BLE001 - reported by the test
                errors.append(repr(exc))
                break
            if rows != expected:
                errors.append(f"a load saw {len(rows)} values, {len(set(rows))} distinct")
                break
            seen.append(len(rows))
            reading.set()
        reading.set()

    reader = threading.Thread(target=read_in_a_loop)
    reader.start()
    try:
        assert reading.wait(60), "the reader never read"
        # inputs deleted at once (a listed file may vanish before it is read), then a pass
        # that finds nothing left to merge
        first = compact(run, grace_s=0.0)
        second = compact(run, grace_s=0.0)
    finally:
        stop.set()
        reader.join(60)
    assert not errors, errors
    assert seen, "the reader never ran"
    assert (first.counter_files_before, first.counter_files_after) == (len(WRITERS) * PARTS, 3)
    assert (second.counter_files_before, second.counter_files_after) == (3, 3)
    files = sorted(f.name for f in (run / RUN_FOLDER).iterdir())
    assert len(files) == 3 and all(f.endswith("-merged.counters") for f in files), files
    assert {f.split("-")[2] for f in files} == {str(pid) for _r, pid, _t in WRITERS}
    assert _counter_rows(run) == expected


def test_a_counter_merge_interrupted_before_its_deletes_counts_each_value_once(tmp_path):
    # The merged files written, the process gone before it deleted their inputs (the merge
    # step alone: compact deletes them after its grace): readers leave the inputs out (the
    # merged files name them), and the next compaction deletes them. Only rank 1's files
    # are merged the first time.
    from hotspan.counters import RUN_FOLDER, merge_run_counters

    run = tmp_path / "run"
    expected = _counter_run(run)
    before, after, to_delete = merge_run_counters(run, rank=1)
    assert (before, after, len(to_delete)) == (len(WRITERS) * PARTS, 2 * PARTS + 1, PARTS)
    assert len(list((run / RUN_FOLDER).iterdir())) == len(WRITERS) * PARTS + 1  # none gone
    assert _counter_rows(run) == expected
    done = compact(run, grace_s=0.0, rank=0)
    assert (done.counter_files_before, done.counter_files_after, done.deleted) == (
        2 * PARTS + 1,
        3,
        3 * PARTS,
    )
    assert len(list((run / RUN_FOLDER).iterdir())) == 3
    assert _counter_rows(run) == expected


def test_cli_compact_says_what_it_did_to_the_counters(tmp_path):
    run = tmp_path / "run"
    _counter_run(run)
    done = subprocess.run(
        [sys.executable, "-m", "hotspan", "compact", str(run), "--grace", "0"],
        capture_output=True,
        text=True,
        env=env(),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert f"counters: {len(WRITERS) * PARTS} files -> 3" in done.stdout
