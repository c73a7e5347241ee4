"""A run directory reads as it is in pandas, pyarrow, polars, DuckDB and Spark, each giving
the rows and per-rank counts hotspan.load() gives (the reader matrix of issue 20)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import hotspan
from hotspan.formats.dataset import new_token, write_part

RANKS = {0: 5, 1: 7, 12: 3}  # rank -> spans; 12 sorts before 2 as text


def _drained(rank: int, n: int) -> pa.Table:
    s = hotspan.span("step", "train")
    for _ in range(n):
        with s:
            pass
    table = hotspan.drain()
    return table.set_column(
        table.schema.get_field_index("rank"), "rank", pa.array([rank] * n, pa.int32())
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    hotspan.drain()
    directory = tmp_path_factory.mktemp("readers") / "run"
    token = new_token()
    for rank, n in RANKS.items():
        for seq in range(2):  # two parts a rank, as two flushes
            write_part(
                _drained(rank, n), directory, rank=rank, pid=1000 + rank, seq=seq, token=token
            )
    return directory


@pytest.fixture(scope="module")
def expected(run) -> tuple[list[int], dict[int, int]]:
    table = hotspan.load(run)
    return sorted(table.column("span_id").to_pylist()), dict(
        Counter(table.column("rank").to_pylist())
    )


def _check(expected, span_ids, ranks) -> None:
    ids, per_rank = expected
    assert sorted(int(i) for i in span_ids) == ids
    assert dict(Counter(int(r) for r in ranks)) == per_rank == {r: 2 * n for r, n in RANKS.items()}


def test_pandas(run, expected):
    import pandas as pd

    df = pd.read_parquet(run)
    _check(expected, df["span_id"], df["rank"])


def test_pyarrow_parquet_and_dataset(run, expected):
    import pyarrow.dataset as ds

    for table in (
        pq.read_table(run),
        ds.dataset(run).to_table(),
        ds.dataset(run, format="parquet").to_table(),
    ):
        _check(expected, table.column("span_id").to_pylist(), table.column("rank").to_pylist())
        assert table.schema.field("rank").type == pa.int32()
        assert "self_ns" in table.column_names


def test_polars_directory_and_glob(run, expected):
    pl = pytest.importorskip("polars")
    for source in (run, str(run / "*.parquet"), str(run / "**/*.parquet")):
        df = pl.scan_parquet(source).select("span_id", "rank").collect()
        _check(expected, df["span_id"].to_list(), df["rank"].to_list())


@pytest.mark.parametrize("hive", [None, "true", "false"])
def test_duckdb(run, expected, hive):
    duckdb = pytest.importorskip("duckdb")
    option = "" if hive is None else f", hive_partitioning={hive}"
    rows = duckdb.sql(
        f"SELECT span_id, rank FROM read_parquet('{run}/**/*.parquet'{option})"
    ).fetchall()
    _check(expected, [r[0] for r in rows], [r[1] for r in rows])
    # self time with a plain GROUP BY
    ((total,),) = duckdb.sql(
        f"SELECT sum(self_ns) FROM read_parquet('{run}/*.parquet'{option})"
    ).fetchall()
    assert total == pc.sum(hotspan.load(run).column("self_ns")).as_py()


@pytest.fixture(scope="session")
def spark():
    pytest.importorskip("pyspark")
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName("hotspan-readers")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.mark.slow
def test_spark(run, expected, spark):
    rows = spark.read.parquet(str(run)).select("span_id", "rank").collect()
    _check(expected, [r[0] for r in rows], [r[1] for r in rows])


@pytest.mark.slow
def test_spark_reads_the_parts_a_raw_log_became(tmp_path, monkeypatch, spark):
    # record(dir)'s raw log (the default) converted at stop() in several pieces, on two
    # writers, each decoded in chunks: Spark reads the folder's rows as load() gives them
    from hotspan.formats import _rawlog

    monkeypatch.setattr(_rawlog, "PART_ROWS", 5_000)
    monkeypatch.setattr(_rawlog, "SUB_ROWS", 1_000)
    run = tmp_path / "run"
    with hotspan.record(run, flush_interval=60):
        s = hotspan.span("step", "train")
        for _ in range(20_000):
            with s:
                hotspan.instant("mark")
    assert not (run / "_live").exists() and len(list(run.glob("*.parquet"))) >= 4
    loaded = hotspan.load(run)
    rows = spark.read.parquet(str(run)).select("span_id", "name").collect()
    assert sorted(int(r[0]) for r in rows) == sorted(loaded.column("span_id").to_pylist())
    assert sorted(r[1] for r in rows) == sorted(loaded.column("name").to_pylist())


def test_older_hive_layout_still_loads(tmp_path, run):
    old = tmp_path / "old"
    for rank, n in RANKS.items():
        (old / f"rank={rank}").mkdir(parents=True)
        pq.write_table(
            _drained(rank, n), old / f"rank={rank}" / f"part-{1000 + rank}-000000.parquet"
        )
    table = hotspan.load(old)
    assert dict(Counter(table.column("rank").to_pylist())) == RANKS
