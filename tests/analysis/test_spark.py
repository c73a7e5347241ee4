"""The same statistics on Spark (issue 23 items 2-3): ``hotspan.stats(path, engine=spark)`` and
``phases`` equal DuckDB's and the in-memory path's (columns, types, values, percentiles to the
last bit), from the same query description (analysis/_queries.py). Spark in local mode; the JVM
starts once (a session-scoped fixture)."""

from __future__ import annotations

import subprocess
import sys
import time

import pyarrow as pa
import pytest

import hotspan

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[2] / "benchmarks"))
    import bench_big

    directory = tmp_path_factory.mktemp("spark") / "run"
    bench_big.generate(directory, 200_000, 4, part_spans=1 << 15)  # 4 ranks, several parts each
    return directory


def clean(rows):
    import math

    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in r.items()}
        for r in rows
    ]


@pytest.mark.parametrize(
    "by", [None, ("category", "name"), ("rank", "thread_name", "name"), ("device", "name")]
)
def test_spark_stats_equal_duckdb_and_in_memory(spark, run, by):
    start = time.perf_counter()
    on_spark = hotspan.stats(run, by=by, engine=spark)
    print(f"spark stats by {by}: {time.perf_counter() - start:.1f} s")
    on_duckdb = hotspan.stats(run, by=by, engine="duckdb")
    in_memory = hotspan.stats(run, by=by, engine="memory")
    assert on_spark.schema == on_duckdb.schema == in_memory.schema
    assert (
        clean(on_spark.to_pylist()) == clean(on_duckdb.to_pylist()) == clean(in_memory.to_pylist())
    )


def test_spark_stats_of_millions_of_spans_over_ranks_equal_duckdb_and_in_memory(
    spark, tmp_path_factory
):
    # issue 23: the same columns, types and values, percentiles to the last bit, "on a run of
    # a few million spans over several ranks" (groups of hundreds of thousands of spans, where
    # an approximate or differently interpolated percentile would show)
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parents[2] / "benchmarks"))
    import bench_big

    directory = tmp_path_factory.mktemp("spark-big") / "run"
    written = bench_big.generate(directory, 3_000_000, 6, part_spans=1 << 19)
    assert written >= 2_900_000
    start = time.perf_counter()
    on_spark = hotspan.stats(directory, engine=spark)
    print(f"spark stats of {written:,} spans over 6 ranks: {time.perf_counter() - start:.1f} s")
    on_duckdb = hotspan.stats(directory, engine="duckdb")
    in_memory = hotspan.stats(directory, engine="memory")
    assert on_spark.schema == on_duckdb.schema == in_memory.schema
    assert sum(on_spark.column("count").to_pylist()) == written
    assert (
        clean(on_spark.to_pylist()) == clean(on_duckdb.to_pylist()) == clean(in_memory.to_pylist())
    )


def test_spark_filter_and_phases(spark, run):
    span_filter = hotspan.SpanFilter(categories=("train",), ranks=(0, 2), since=0.5, min_ns=10_000)
    on_spark = hotspan.stats(run, filter=span_filter, engine=spark)
    assert clean(on_spark.to_pylist()) == clean(
        hotspan.stats(run, filter=span_filter, engine="memory").to_pylist()
    )
    assert (
        hotspan.phases(run, engine=spark).to_pylist()
        == hotspan.phases(run, engine="memory").to_pylist()
    )


def test_spark_compare_equals_duckdb(spark, run):
    on_spark = hotspan.compare(run, run, engine=spark, min_count=5)
    on_duckdb = hotspan.compare(run, run, engine="duckdb", min_count=5)
    assert clean(on_spark.to_pylist()) == clean(on_duckdb.to_pylist())
    assert set(on_spark.column("verdict").to_pylist()) <= {"same"}


def test_nothing_of_spark_is_imported_unless_asked(run):
    code = (
        "import sys, hotspan; hotspan.stats(sys.argv[1]); hotspan.stats(sys.argv[1], engine='duckdb');"
        "assert not [m for m in sys.modules if m.startswith(('pyspark', 'py4j'))], 'spark imported'"
    )
    subprocess.run([sys.executable, "-c", code, str(run)], check=True, timeout=300)


def test_cli_engine_spark(run, spark):
    from hotspan.cli import main

    assert (
        main(["stats", str(run), "--engine", "spark", "--json"]) == 0
    )  # getOrCreate(): the session above
    assert isinstance(hotspan.stats(run, engine="spark"), pa.Table)


def test_spark_percentiles_exact_at_bucket_edges(spark, run, tmp_path):
    # issue 35 item 4: Spark takes a group's order statistics from counts per duration bucket
    # and the few buckets that hold them (a billion spans: no group's durations collected in
    # one place); durations on either side of the buckets' edges (2047/2048, powers of two),
    # ties, zeros and 62-bit ones give numpy's percentiles to the last bit
    import numpy as np
    import pyarrow.parquet as pq

    table = hotspan.load(run)
    rng = np.random.default_rng(5)
    edges = np.array([0, 1, 2047, 2048, 2049, 4095, 4096, 4097, (1 << 30) - 1, 1 << 30], np.int64)
    duration = np.where(
        rng.random(table.num_rows) < 0.5,
        edges[rng.integers(0, len(edges), table.num_rows)],
        rng.integers(0, 1 << 23, table.num_rows),
    )
    duration[:2] = (1 << 61) - 1, 1 << 61  # (sums stay within 64 bits)
    table = table.set_column(
        table.schema.get_field_index("duration_ns"), "duration_ns", pa.array(duration)
    )
    pq.write_table(table, tmp_path / "edges.parquet")
    by = ("category", "name")
    on_spark = hotspan.stats(tmp_path / "edges.parquet", by=by, engine=spark)
    in_memory = hotspan.stats(table, by=by)
    assert on_spark.schema == in_memory.schema
    assert clean(on_spark.to_pylist()) == clean(in_memory.to_pylist())
