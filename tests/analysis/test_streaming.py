"""stats, phases and compare on a path (a dataset directory or a Parquet file), streamed through
DuckDB: the same results as the in-memory path on tables that fit."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hotspan
from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.analysis import statistics
from hotspan.analysis._process_phases import phases_of_parts
from hotspan.analysis._streaming import SpanSource, canonical_rows, group_durations
from hotspan.formats._base import TraceFileError
from hotspan.formats.dataset import write_part

duckdb = pytest.importorskip("duckdb")  # a runtime dependency: installed with hotspan


@pytest.fixture(autouse=True)
def _always_stream(monkeypatch):
    """Paths of any size streamed through DuckDB (the rule loads small ones: analysis/_engine.py)."""
    monkeypatch.setenv("HOTSPAN_STREAM_MIN_BYTES", "0")


def tree_table(
    seed: int, roots: int = 300, ranks: int = 3, pid_offset: int = 0, id_base: int | None = None
) -> pa.Table:
    """Nested spans on several ranks and threads: categories with sub-categories (and null
    ones), instants, errors, args (some null), repeated durations (ties), a parent on another
    thread, and spans whose parent is missing (drained later)."""
    rng = np.random.default_rng(seed)
    rows: list[dict] = []
    next_id = [(id_base if id_base is not None else int(rng.integers(1, 1 << 20)) << 30)]

    def add(parent, category, start, budget, depth, thread, rank):
        sid = next_id[0]
        next_id[0] += 1
        name = str(rng.choice(["fwd", "bwd", "io", "step"]))
        sub = str(rng.choice(["compute", "comms", "x/y"]))
        path = (
            category
            if rng.random() < 0.4
            else (f"{category}/{sub}" if category else str(rng.choice(["train", "data"])))
        )
        if rng.random() < 0.08:
            path = None
        duration = (
            0
            if rng.random() < 0.05
            else (
                int(rng.choice([100, 250, 1000]))
                if rng.random() < 0.2
                else int(rng.integers(1, budget + 1))
            )
        )
        t = start
        if depth < 3:
            for _ in range(int(rng.integers(0, 4))):
                room = start + duration - t
                if room <= 1:
                    break
                length = int(rng.integers(1, room + 1))
                add(sid, path, t, length, depth + 1, thread, rank)
                t += length
        orphan = (
            parent is not None and rng.random() < 0.02
        )  # its parent drained later: not in the table
        rows.append(
            dict(
                span_id=sid,
                parent_id=(parent + (1 << 50) if orphan else parent),
                name=name,
                category=path,
                start_ns=start,
                duration_ns=duration,
                depth=depth,
                thread_id=thread,
                thread_name=f"t{thread}",
                rank=rank,
                pid=1000 + rank + pid_offset,
                arg=int(rng.integers(0, 1 << 40)) if rng.random() < 0.3 else None,
                error=bool(rng.random() < 0.1),
            )
        )

    for i in range(roots):
        add(
            None,
            None,
            10_000_000 * i + int(rng.integers(0, 1000)),
            int(rng.integers(1, 9_000_000)),
            0,
            thread=int(rng.integers(1, 4)),
            rank=int(rng.integers(0, ranks)),
        )
    # One child whose parent runs on another thread (an executor under a copied context).
    rows[0]["thread_id"] = rows[0]["thread_id"] + 10
    for r in rows:
        r["end_ns"] = r["start_ns"] + r["duration_ns"]
    arrays = []
    for field in TRACE_SCHEMA:
        values = [r[field.name] for r in rows]
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(values, pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(values, field.type))
    return with_self_ns(pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA))


def as_dataset(table: pa.Table, directory, parts_per_rank: int = 2):
    """``table`` as a run directory (rank=R/part-*.parquet), each process (rank and pid) cut
    into parts, in table order."""
    pairs = sorted(set(zip(table.column("rank").to_pylist(), table.column("pid").to_pylist())))
    for rank, pid in pairs:
        mine = table.filter(
            pa.compute.and_(
                pa.compute.equal(table.column("rank"), rank),
                pa.compute.equal(table.column("pid"), pid),
            )
        )
        step = max(math.ceil(mine.num_rows / parts_per_rank), 1)
        for seq, start in enumerate(range(0, mine.num_rows, step)):
            write_part(
                mine.slice(start, step),
                directory,
                rank=rank,
                pid=pid,
                seq=seq,
                token="ab12",
            )
    return directory


def clean(rows: list[dict]) -> list[dict]:
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in rows
    ]


BYS = [
    ("category", "name"),
    ("name",),
    ("rank", "thread_name"),
    ("rank", "thread_id", "name"),
    ("error", "category"),
    ("pid",),
    ("depth", "name"),
    ("thread_name", "category", "name"),
]


#: The ways of the streaming stats, and the function only that way calls.
STATS_PATHS = {
    # the parts read with pyarrow, each group's durations held (the run fits in memory)
    "scan": ("hotspan.analysis._parquet_scan", "part_groups"),
    # the same reads, in bounded memory: duration buckets, two reads
    "scan-bounded": ("hotspan.analysis._parquet_scan", "part_buckets"),
    # DuckDB collecting each group's durations with list() (where the scan does not apply)
    "duckdb": ("hotspan.analysis._queries", "list_order_statistics"),
    # DuckDB, bounded: duration buckets, two scans
    "duckdb-bounded": ("hotspan.analysis._streaming", "_bucket_stats"),
}


@pytest.fixture(params=list(STATS_PATHS))
def stats_path(request, monkeypatch):
    """Each way of the streaming stats in turn; the test asserts the way was taken (``calls``)."""
    import importlib

    from hotspan.analysis import _parquet_scan as parquet_scan, _streaming as streaming

    if request.param == "scan-bounded":  # nothing fits: the bounded reads
        monkeypatch.setattr(parquet_scan, "scan_memory", lambda rows, narrow, largest: (1 << 62, 0))
    if request.param.startswith("duckdb"):
        monkeypatch.setattr(streaming, "_PARQUET_SCAN", False)
    if request.param == "duckdb-bounded":
        monkeypatch.setattr(streaming, "_BYTES_PER_VALUE", 1 << 40)  # nothing fits
    module_name, name = STATS_PATHS[request.param]
    module = importlib.import_module(module_name)
    original = getattr(module, name)
    calls = []

    def counted(*args, **kwargs):
        calls.append(name)
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out = {}
    for seed in range(3):
        table = tree_table(seed)
        base = tmp_path_factory.mktemp(f"run{seed}")
        as_dataset(table, base / "run")
        pq.write_table(table, base / "one.parquet")
        out[seed] = (table, base / "run", base / "one.parquet")
    return out


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("by", BYS)
def test_stats_of_a_dataset_equal_the_in_memory_stats(runs, seed, by, stats_path):
    table, run, one = runs[seed]
    in_memory = hotspan.stats(table, by=by)
    loaded = hotspan.stats(hotspan.load(run), by=by)
    for path in (run, str(one)):
        streamed = hotspan.stats(path, by=by)
        assert streamed.schema == in_memory.schema
        assert (
            canonical_rows(streamed, by)
            == canonical_rows(in_memory, by)
            == canonical_rows(loaded, by)
        )
        totals = streamed.column("total_ns").to_pylist()
        assert totals == sorted(totals, reverse=True)
    assert stats_path  # the way under test was taken
    # The table really holds what the test is about.
    assert pa.compute.sum(pa.compute.equal(table.column("duration_ns"), 0)).as_py() > 0  # instants
    assert table.column("arg").null_count and table.column("category").null_count
    assert any(r["self_ns"] < r["total_ns"] for r in in_memory.to_pylist())  # nesting


@pytest.mark.slow
def test_a_uri_is_read_through_pyarrow_fs(runs):
    """file:// here; s3://, gs://, hdfs:// go the same way (pyarrow.fs.FileSystem.from_uri)."""
    table, run, one = runs[1]
    by = ("rank", "category", "name")
    for uri in (run.as_uri(), one.as_uri()):
        streamed = hotspan.stats(uri, by=by)
        assert streamed.schema == hotspan.stats(table, by=by).schema
        assert canonical_rows(streamed, by) == canonical_rows(hotspan.stats(table, by=by), by)
        assert clean(hotspan.phases(uri).to_pylist()) == clean(hotspan.phases(table).to_pylist())
    result = cli("stats", run.as_uri(), "--by", "rank,category,name", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == json.loads(
        cli("stats", run, "--by", "rank,category,name", "--json").stdout
    )


@pytest.mark.parametrize("seed", range(3))
def test_phases_of_a_dataset_equal_the_in_memory_phases(runs, seed):
    table, run, one = runs[seed]
    expected = clean(hotspan.phases(table).to_pylist())
    assert len(expected) > 5 and any(r["rank"] is None for r in expected)
    assert clean(hotspan.phases(run).to_pylist()) == expected
    assert clean(hotspan.phases(one).to_pylist()) == expected


def test_repeated_span_ids_are_looked_up_within_their_thread(tmp_path):
    """Two processes' traces in one file with the same ids: as parent_rows does in memory."""
    first = tree_table(7, id_base=1 << 30)
    second = tree_table(8, id_base=1 << 30, pid_offset=7)
    both = pa.concat_tables([first, second]).unify_dictionaries()
    path = tmp_path / "both.parquet"
    pq.write_table(both, path)
    with SpanSource(path) as source:
        assert not source.unique_ids()
    for by in (("category", "name"), ("rank", "thread_id")):
        assert canonical_rows(hotspan.stats(path, by=by), by) == canonical_rows(
            hotspan.stats(both, by=by), by
        )
    assert clean(hotspan.phases(path).to_pylist()) == clean(hotspan.phases(both).to_pylist())


# ----------------------------------------------------------------- phases by process, no join


def process_phases(path, memory_bytes: int | None = None):
    """``process_phases.phases_of_parts`` of ``path`` (None: it hands the run to the join)."""
    with SpanSource(path) as source:
        return phases_of_parts(
            source.files, source.footers(), memory_bytes or source.memory_bytes(), source.unique_ids
        )


def replaced(table: pa.Table, name: str, values) -> pa.Table:
    """``table`` with column ``name`` replaced by ``values`` (its field, nullability kept)."""
    field = table.schema.field(name)
    i = table.schema.get_field_index(name)
    return table.set_column(i, field, pa.array(values, field.type))


def small_row_groups(directory, rows: int = 97):
    """Every part of ``directory`` rewritten with row groups of ``rows`` spans (metadata kept):
    parents then lie in later row groups of a part as well as in later parts."""
    for part in sorted(directory.rglob("part-*.parquet")):
        table = pq.read_table(part)
        pq.write_table(table, part, row_group_size=rows)


@pytest.mark.parametrize("seed", range(3))
def test_phases_by_process_equal_the_in_memory_phases(tmp_path, seed):
    """Several ranks, each cut into parts of small row groups; children are drained before
    their parents (tree_table), so most parents are in a later row group or part."""
    table = tree_table(seed, ranks=4)
    run = as_dataset(table, tmp_path / "run", parts_per_rank=3)
    small_row_groups(run)
    first = pq.read_table(sorted(run.rglob("part-*.parquet"))[0])
    later = set(table.column("span_id").to_pylist()) - set(first.column("span_id").to_pylist())
    assert set(first.column("parent_id").drop_null().to_pylist()) & later  # parents to come
    expected = clean(statistics.phases(table).to_pylist())
    assert clean(process_phases(run).to_pylist()) == expected
    assert clean(hotspan.phases(run).to_pylist()) == expected


def test_phases_by_process_with_ids_repeated_across_processes(tmp_path):
    """Two processes per rank drawing the same ids: parents are looked up within their rank,
    pid and thread, as parent_rows does in memory, so the deepest spans, moved to a thread of
    their own, lose their parents; with the ids made unique they have them again."""
    first = tree_table(7, id_base=1 << 30)
    deepest = first.column("depth").to_numpy() == 3
    assert deepest.sum() > 50
    thread = first.column("thread_id").to_numpy()
    first = replaced(first, "thread_id", np.where(deepest, thread + 20, thread))
    second = tree_table(8, id_base=1 << 30, pid_offset=7)
    both = pa.concat_tables([first, second]).unify_dictionaries()
    run = as_dataset(both, tmp_path / "run", parts_per_rank=3)
    small_row_groups(run)
    expected = clean(statistics.phases(both).to_pylist())
    assert clean(process_phases(run).to_pylist()) == expected
    assert clean(hotspan.phases(run).to_pylist()) == expected
    # the second process's ids shifted: unique over the run, parents are found by id alone
    shift = pa.scalar(1 << 40, pa.uint64())
    shifted = replaced(second, "span_id", pa.compute.add(second.column("span_id"), shift))
    shifted = replaced(shifted, "parent_id", pa.compute.add(second.column("parent_id"), shift))
    unique = pa.concat_tables([first, shifted]).unify_dictionaries()
    as_dataset(unique, tmp_path / "unique", parts_per_rank=2)
    unique_expected = clean(statistics.phases(unique).to_pylist())
    assert unique_expected != expected  # the deepest spans' parents count
    assert clean(process_phases(tmp_path / "unique").to_pylist()) == unique_expected


def test_phases_by_process_find_a_parent_in_another_process(tmp_path):
    """Ids unique over the run: a span whose parent another process wrote (a child process
    under its parent's span) has that parent, as in memory (looked up by id alone)."""
    table = tree_table(3)
    depth = table.column("depth").to_numpy()
    pid = np.where(depth == 2, table.column("pid").to_numpy() + 500, table.column("pid").to_numpy())
    moved = replaced(table, "pid", pid)
    run = as_dataset(moved, tmp_path / "run", parts_per_rank=2)
    expected = clean(statistics.phases(moved).to_pylist())
    assert clean(process_phases(run).to_pylist()) == expected
    assert clean(hotspan.phases(run).to_pylist()) == expected


def test_phases_by_process_of_ids_spread_at_random(tmp_path):
    """Ids drawn at random (another writer's: no dense range to index) are sorted instead."""
    table = tree_table(4)
    rng = np.random.default_rng(4)
    ids = table.column("span_id").to_numpy()
    new = rng.choice(1 << 62, size=len(ids), replace=False).astype(np.uint64)
    lookup = dict(zip(ids.tolist(), new.tolist()))
    parents = [
        lookup.get(p, p) if p is not None else None for p in table.column("parent_id").to_pylist()
    ]
    spread = replaced(replaced(table, "span_id", new), "parent_id", parents)
    run = as_dataset(spread, tmp_path / "run", parts_per_rank=2)
    assert clean(process_phases(run).to_pylist()) == clean(statistics.phases(spread).to_pylist())


def test_parts_the_stream_cannot_take_go_to_the_join(tmp_path):
    """A row group larger than the memory share, or parts without a rank column (the older
    ``rank=R`` layout), are answered by the join: the same phases."""
    table = tree_table(5)
    run = as_dataset(table, tmp_path / "run")
    assert process_phases(run, memory_bytes=1000) is None
    older = tmp_path / "older"
    for rank in sorted(set(table.column("rank").to_pylist())):
        mine = table.filter(pa.compute.equal(table.column("rank"), rank)).drop_columns(["rank"])
        (older / f"rank={rank}").mkdir(parents=True)
        pq.write_table(mine, older / f"rank={rank}" / f"part-{1000 + rank}-0.parquet")
    assert process_phases(older) is None
    expected = clean(statistics.phases(table).to_pylist())
    assert clean(hotspan.phases(older).to_pylist()) == expected


def test_a_damaged_part_is_named(tmp_path):
    """A part whose footer reads but whose pages do not: phases name it, as the join does."""
    run = as_dataset(tree_table(6), tmp_path / "run")
    part = sorted(run.rglob("part-*.parquet"))[1]
    data = bytearray(part.read_bytes())
    data[8:600] = bytes(592)  # the first pages zeroed; the footer intact
    part.write_bytes(bytes(data))
    with pytest.raises(TraceFileError) as raised:
        hotspan.phases(run)
    assert str(part) in str(raised.value)


def test_stats_table_of_a_streamed_run_shows_phases_on_request(tmp_path, capsys):
    """``hotspan stats DIR`` on a streamed run prints the statistics and a line naming
    --phases (the phases are a second pass over the run); with --phases, the phases."""
    from hotspan.cli import main

    run = as_dataset(tree_table(0), tmp_path / "run")
    assert main(["stats", str(run)]) == 0
    plain = capsys.readouterr().out
    assert "add --phases" in plain and "per step" not in plain
    assert main(["stats", str(run), "--phases"]) == 0
    shown = capsys.readouterr().out
    assert "per step" in shown and "train/compute" in shown and "add --phases" not in shown


def test_percentiles_to_the_last_bit_on_awkward_durations(tmp_path, stats_path):
    """Huge durations, many ties, powers of two and their neighbours, one-value groups."""
    rng = np.random.default_rng(3)
    edges = [(1 << k) + e for k in range(10, 58) for e in (-1, 0, 1)]  # sums still within int64
    groups = {
        "edges": edges * 3,
        "huge": list(rng.integers(1 << 54, 1 << 55, 200)),
        "ties": list(rng.choice([7, 7, 7, 8, 1 << 20], 3001)),
        "one": [12345],
        "two": [0, 1],
    }
    rows, sid, t = [], 1, 0
    for name, values in groups.items():
        for d in values:
            rows.append(dict(span_id=sid, name=name, start_ns=t, duration_ns=int(d)))
            sid += 1
    n = len(rows)
    table = pa.table(
        {
            "span_id": pa.array([r["span_id"] for r in rows], pa.uint64()),
            "parent_id": pa.nulls(n, pa.uint64()),
            "name": pa.array([r["name"] for r in rows]).dictionary_encode(),
            "category": pa.nulls(n, pa.string()),
            "start_ns": pa.array([0] * n, pa.int64()),
            "end_ns": pa.array([r["duration_ns"] for r in rows], pa.int64()),
            "duration_ns": pa.array([r["duration_ns"] for r in rows], pa.int64()),
            "depth": pa.array([0] * n, pa.int32()),
            "thread_id": pa.array([1] * n, pa.int64()),
            "thread_name": pa.array(["m"] * n).dictionary_encode(),
            "pid": pa.array([1] * n, pa.int64()),
            "rank": pa.array([0] * n, pa.int32()),
            "arg": pa.nulls(n, pa.int64()),
            "error": pa.array([False] * n),
        }
    )
    path = tmp_path / "awkward.parquet"
    pq.write_table(table, path)
    streamed = {r["name"]: r for r in hotspan.stats(path, by="name").to_pylist()}
    for name, values in groups.items():
        values = np.array(values, np.int64)
        for column, q in (("p50_ns", 50), ("p90_ns", 90), ("p99_ns", 99)):
            assert streamed[name][column] == np.percentile(values, q), (
                name,
                column,
            )  # numpy's own, exactly
        assert streamed[name]["min_ns"] == values.min() and streamed[name]["max_ns"] == values.max()
    assert stats_path  # the way under test was taken


def test_the_duration_buckets_are_monotone_and_the_exact_one_is_exact():
    """Percentiles rely on buckets that never put a larger duration before a smaller one."""
    from hotspan.analysis._streaming import _MACROS

    con = duckdb.connect()
    con.execute(_MACROS)
    values = sorted(
        {
            v
            for k in range(0, 63)
            for v in ((1 << k) - 2, (1 << k) - 1, 1 << k, (1 << k) + 1)
            if 0 <= v < (1 << 63)
        }
        | {(1 << 63) - 1}
    )
    rows = con.execute(
        "SELECT d, hs_bucket(d), hs_bucket_exact(d) FROM unnest(?::BIGINT[]) AS t(d) ORDER BY d",
        [values],
    ).fetchall()
    fast = [r[1] for r in rows]
    exact = [r[2] for r in rows]
    assert fast == sorted(fast) and exact == sorted(exact)
    for d, _, bucket in rows:  # below 2048 the value itself; above, its top 11 bits
        e = d.bit_length() - 1
        assert bucket == (d if d < 2048 else (e - 10) * 1024 + (d >> (e - 10)))


def durations_run(directory, groups: dict[str, np.ndarray]):
    rows, sid, t = [], 1, 0
    for name, values in groups.items():
        for d in values:
            rows.append((sid, name, t, int(d)))
            sid += 1
            t += int(d) + 5
    n = len(rows)
    table = pa.Table.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.uint64()),
            pa.nulls(n, pa.uint64()),
            pa.array([r[1] for r in rows]).dictionary_encode(),
            pa.array(["c"] * n).dictionary_encode(),
            pa.array([r[2] for r in rows], pa.int64()),
            pa.array([r[2] + r[3] for r in rows], pa.int64()),
            pa.array([r[3] for r in rows], pa.int64()),
            pa.array([0] * n, pa.int32()),
            pa.array([1] * n, pa.int64()),
            pa.array(["m"] * n).dictionary_encode(),
            pa.array([1] * n, pa.int64()),
            pa.array([0] * n, pa.int32()),
            pa.nulls(n, pa.int64()),
            pa.array([False] * n),
        ],
        schema=TRACE_SCHEMA,
    )
    table = with_self_ns(table)
    as_dataset(table, directory, parts_per_rank=3)
    return table


def test_compare_of_two_datasets_equals_the_in_memory_compare(tmp_path):
    rng = np.random.default_rng(5)
    base = durations_run(
        tmp_path / "base",
        {
            "same": rng.normal(1e6, 1e5, 3000),
            "slow": rng.normal(1e6, 1e5, 2000),
            "fast": rng.normal(2e6, 1e5, 1000),
            "few": [5, 6],
            "gone": rng.normal(1e5, 1e3, 100),
        },
    )
    new = durations_run(
        tmp_path / "new",
        {
            "same": rng.normal(1e6, 1e5, 2500),
            "slow": rng.normal(1.3e6, 1e5, 2100),
            "fast": rng.normal(1e6, 1e5, 900),
            "few": [5],
            "new": rng.normal(1e5, 1e3, 100),
        },
    )
    for options in ({}, {"min_count": 2, "by": ("name",)}):
        in_memory = hotspan.compare(base, new, **options).to_pylist()
        streamed = hotspan.compare(tmp_path / "base", str(tmp_path / "new"), **options).to_pylist()
        assert clean(streamed) == clean(in_memory)
    verdicts = {r["name"]: r["verdict"] for r in streamed}
    assert verdicts == {
        "same": "same",
        "slow": "slower",
        "fast": "faster",
        "few": "few",
        "gone": "gone",
        "new": "new",
    }


def test_a_group_larger_than_the_cap_is_thinned_evenly(tmp_path):
    values = np.random.default_rng(2).integers(0, 10**6, 10_001)
    durations_run(tmp_path / "run", {"big": values, "small": np.arange(10)})
    with SpanSource(tmp_path / "run") as source:
        keys = pa.table({"name": ["small", "big"]})
        got = dict(group_durations(source, ("name",), keys, [10, len(values)], max_values=1000))
    assert list(got[0]) == list(range(10))
    assert list(got[1]) == list(
        np.sort(values)[::11]
    )  # every 11th of the sorted values: its quantiles kept


def test_bad_paths_are_named(tmp_path):
    with pytest.raises(FileNotFoundError):
        hotspan.stats(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no span parts"):
        hotspan.stats(tmp_path / "empty")
    (tmp_path / "run" / "rank=0").mkdir(parents=True)
    (tmp_path / "run" / "rank=0" / "part-1-000001.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TraceFileError, match="run"):
        hotspan.stats(tmp_path / "run")
    pq.write_table(tree_table(1, roots=5), tmp_path / "ok.parquet")
    with pytest.raises(ValueError, match="no column 'nope'"):
        hotspan.stats(tmp_path / "ok.parquet", by="nope")


def test_other_formats_are_loaded_in_memory(tmp_path):
    table = tree_table(4, roots=20)
    hotspan.export(table, tmp_path / "t.json")
    loaded = hotspan.load(tmp_path / "t.json")
    by = ("category", "name")
    assert canonical_rows(hotspan.stats(tmp_path / "t.json"), by) == canonical_rows(
        hotspan.stats(loaded), by
    )


# --------------------------------------------------------------------------- the CLI


def cli(*args, env=None):
    return subprocess.run(
        [sys.executable, "-m", "hotspan", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


@pytest.mark.slow
def test_cli_stats_streams_a_directory_and_a_large_file_to_the_same_rows(runs, tmp_path):
    table, run, one = runs[0]
    options = (
        "--by",
        "rank,name",
        "--filter",
        "name~^(fwd|io)",
        "--category",
        "train",
        "--rank",
        "0,2",
        "--json",
    )
    in_memory = cli("stats", one, *options)  # a small file: loaded
    assert in_memory.returncode == 0, in_memory.stderr
    streamed_file = cli("stats", one, *options, env={"HOTSPAN_STREAM_MIN_BYTES": "1"})
    streamed_dir = cli("stats", run, *options)
    assert streamed_file.returncode == streamed_dir.returncode == 0, streamed_dir.stderr
    rows = json.loads(in_memory.stdout)
    assert rows and {r["rank"] for r in rows} == {0, 2}
    assert json.loads(streamed_file.stdout) == rows == json.loads(streamed_dir.stdout)
    shown = cli("stats", run, "--phases")
    assert shown.returncode == 0 and "phases" in shown.stdout and "train/compute" in shown.stdout


@pytest.mark.slow
def test_cli_compare_streams_two_directories(tmp_path):
    rng = np.random.default_rng(9)
    base = durations_run(
        tmp_path / "base", {"a": rng.normal(1e6, 1e4, 500), "b": rng.normal(1e6, 1e4, 500)}
    )
    new = durations_run(
        tmp_path / "new", {"a": rng.normal(1e6, 1e4, 500), "b": rng.normal(2e6, 1e4, 500)}
    )
    result = cli("compare", tmp_path / "base", tmp_path / "new", "--json")
    assert result.returncode == 1, result.stderr  # b is slower
    assert clean(json.loads(result.stdout)) == clean(
        json.loads(json.dumps(hotspan.compare(base, new).to_pylist()))
    )


def test_cli_names_a_damaged_part_in_one_line(tmp_path):
    bad = tmp_path / "run" / "rank=0"
    bad.mkdir(parents=True)
    (bad / "part-1-000001.parquet").write_bytes(b"PAR1 torn")
    result = cli("stats", tmp_path / "run")
    assert result.returncode == 2
    assert (
        result.stderr.count("\n") == 1
        and "run" in result.stderr
        and "Traceback" not in result.stderr
    )


@pytest.mark.slow
def test_import_hotspan_loads_no_duckdb():
    code = "import sys, hotspan; hotspan.stats; print('duckdb' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
        == "False"
    )


def test_stats_of_a_run_read_by_pyarrow_start_no_duckdb(runs):
    """The fast path reads the parts with pyarrow: no query engine to start (its import
    alone is a tenth of a second of a command's start-up)."""
    _table, run, _one = runs[0]
    code = (
        "import os, sys, hotspan\n"
        "os.environ['HOTSPAN_STREAM_MIN_BYTES'] = '0'\n"
        f"print(hotspan.stats({str(run)!r}).num_rows > 0, 'duckdb' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_a_damaged_page_is_named_by_its_part(runs, tmp_path):
    """A part whose footer reads but whose data pages do not: the error names that part."""
    import shutil

    _table, run, _one = runs[1]
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    part = sorted(copy.rglob("*.parquet"))[0]
    data = bytearray(part.read_bytes())
    footer = pq.ParquetFile(part).metadata
    column = footer.row_group(0).column(
        footer.schema.to_arrow_schema().get_field_index("duration_ns")
    )
    for i in range(
        column.data_page_offset + 20, column.data_page_offset + column.total_compressed_size - 5
    ):
        data[i] ^= 0x5A
    part.write_bytes(bytes(data))
    with pytest.raises(TraceFileError, match=part.name) as raised:
        hotspan.stats(copy)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("dense", [True, False])
def test_bounded_reads_of_parts_of_narrow_and_wide_durations(tmp_path, monkeypatch, dense):
    """Parts whose durations fit in 32 bits beside parts whose do not (kept in 4 and 8 bytes),
    each read in several batches, and the bounded reads' (group, bucket) codes counted
    densely or by sorting: the same statistics as in memory."""
    from hotspan.analysis import _parquet_scan as parquet_scan

    monkeypatch.setattr(parquet_scan, "_BATCH_ROWS", 64)  # parts read in several batches
    monkeypatch.setattr(parquet_scan, "_HISTOGRAM_ENTRIES", 1)  # bucket counts merged as read
    rng = np.random.default_rng(5)
    narrow = durations_run(tmp_path / "a", {"x": rng.integers(0, 1 << 20, 400), "y": [3] * 50})
    wide = durations_run(tmp_path / "b", {"x": rng.integers(1 << 40, 1 << 50, 300), "z": [0, 1]})
    run = tmp_path / "run"
    for seq, part in enumerate((narrow, wide)):
        write_part(part, run, rank=0, pid=1, seq=seq, token="cd34")
    table = pa.concat_tables([narrow, wide]).unify_dictionaries()
    expected = canonical_rows(hotspan.stats(table, by="name"), ("name",))
    assert canonical_rows(hotspan.stats(run, by="name"), ("name",)) == expected
    monkeypatch.setattr(parquet_scan, "scan_memory", lambda rows, narrow, largest: (1 << 62, 0))
    if not dense:
        monkeypatch.setattr(parquet_scan, "_DENSE_CODES", 0)
    assert canonical_rows(hotspan.stats(run, by="name"), ("name",)) == expected
