"""The across-ranks analyses on Spark (issue 31 item 5: "in memory, streamed and on Spark
alike"): ``engine="spark"`` or a SparkSession gives the same rows, types and metadata as
the in-memory kernel and the streamed reader, on generated runs with injected stragglers
and clock offsets (and one with none). Spark in local mode; the JVM starts once."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import hotspan
from hotspan.analysis._rank_kernel import RankAnalysis, RankOptions
from hotspan.analysis._rank_reasons import second_pass
from hotspan.analysis.ranks import ranks_summary
from hotspan.testing import Straggler, many_ranks

pytestmark = pytest.mark.slow  # the JVM's start, and a few Spark jobs per question


LAYOUTS = {
    "none": dict(ranks=8, stragglers=[], seed=11),
    "one": dict(ranks=8, stragglers=[Straggler(3, "data.fetch", 20_000_000, 0.8)], seed=12),
    "two, hosts of two": dict(
        ranks=12,
        stragglers=[
            Straggler(5, "backward", 4_000_000, 0.5),
            Straggler(10, "optimizer", 15_000_000, list(range(0, 40, 3))),
        ],
        seed=13,
        ranks_per_host=2,
        clock_offset_ns=2_000_000,
    ),
    "layers": dict(
        ranks=6, stragglers=[Straggler(0, "forward", 10_000_000, 0.4)], seed=14, layers=3
    ),
}


@pytest.fixture(scope="module", params=list(LAYOUTS))
def generated(request, tmp_path_factory):
    layout = dict(LAYOUTS[request.param])
    ranks, stragglers = layout.pop("ranks"), layout.pop("stragglers")
    run = many_ranks(ranks, 40, stragglers, **layout)
    directory = run.write(tmp_path_factory.mktemp("ranks-spark") / "run")
    return run, directory


def same(a: pa.Table, b: pa.Table) -> None:
    assert a.schema == b.schema
    assert a.schema.metadata == b.schema.metadata
    assert a.to_pylist() == b.to_pylist()


@pytest.mark.parametrize("question", ["collectives", "stragglers", "critical_path"])
def test_spark_gives_the_in_memory_and_streamed_rows(spark, generated, question):
    run, directory = generated
    ask = getattr(hotspan, question)
    in_memory = ask(run.table())
    streamed = ask(directory, engine="duckdb")
    on_spark = ask(directory, engine=spark)
    same(on_spark, in_memory)
    same(on_spark, streamed)
    if question == "stragglers":
        # and the answers are the generator's: exactly the injected ranks
        named = set(on_spark.filter(on_spark.column("straggler")).column("rank").to_pylist())
        assert named == run.injected


def test_spark_summary_and_critical_shares_equal_in_memory(spark, generated):
    run, directory = generated
    assert ranks_summary(directory, engine="spark") == ranks_summary(run.table())
    same(
        hotspan.critical_path(directory, summary=True, engine=spark),
        hotspan.critical_path(run.table(), summary=True),
    )


def test_spark_window_sums_equal_the_kernels_own_pass(spark, generated):
    # the heavy group-by Spark does for the reasons (self time per window and name), for
    # every window, not only the stragglers' (which the answers above exercise)
    run, directory = generated
    found = {}
    for engine in ("memory", "duckdb", "spark"):
        with RankAnalysis(directory, RankOptions(), None, engine) as analysis:
            second_pass(analysis, np.ones(len(analysis.coll["rank"]), bool), kids=True)
            spans, names, sums = analysis.found["sums"]
            text = [analysis.strings.values[n] for n in names]
            found[engine] = sorted((int(s), t, float(v)) for s, t, v in zip(spans, text, sums) if v)
            kids = analysis.found["kids"]
            found[engine + " kids"] = {
                **{k: v.tolist() for k, v in kids.items()},
                "name": [analysis.strings.values[n] for n in kids["name"]],
            }
    assert found["spark"] == found["memory"] == found["duckdb"]
    assert len(found["spark"]) >= 2 * 40 * run.n_ranks  # windows of both collectives, every step
    # the steps' children the critical path walks
    assert found["spark kids"] == found["memory kids"] == found["duckdb kids"]
    assert len(found["spark kids"]["step"]) == 40 * run.n_ranks * 5  # 7 children, 2 collectives


def test_spark_applies_the_same_filter(spark, generated):
    run, directory = generated
    keep = {"ranks": list(range(0, run.n_ranks, 2))}
    same(
        hotspan.stragglers(directory, filter=keep, engine="spark"),
        hotspan.stragglers(run.table(), filter=keep),
    )
    same(
        hotspan.collectives(directory, filter=keep, engine="spark"),
        hotspan.collectives(run.table(), filter=keep),
    )


def test_spark_needs_paths_not_a_table(spark):
    run = many_ranks(2, 3)
    with pytest.raises(TypeError, match="engine spark: give the spans as paths"):
        hotspan.stragglers(run.table(), engine="spark")
    with pytest.raises(ValueError, match="engine: expected one of"):
        hotspan.collectives(run.table(), engine="sparkle")


def test_spark_matches_collectives_marked_with_their_process_group(spark, tmp_path):
    # The torch.distributed instrumentation's categories (comms:GROUP, issue 31 item 1):
    # Spark picks the same collectives as the kernel's rule (analysis/_comms.py).
    run = many_ranks(6, 30, [Straggler(2, "data.fetch", 10_000_000, 0.6)], seed=21)
    table = run.table()
    category = pa.array(
        [
            c.replace("comms", "comms:world") if c else c
            for c in table.column("category").to_pylist()
        ]
    )
    marked = table.set_column(table.schema.get_field_index("category"), "category", category)
    directory = tmp_path / "marked"
    directory.mkdir()
    import pyarrow.parquet as pq

    for rank in range(6):
        pq.write_table(
            marked.filter(pa.compute.equal(marked.column("rank"), rank)),
            directory / f"part-r{rank}.parquet",
        )
    on_spark = hotspan.stragglers(str(directory), engine=spark)
    same(on_spark, hotspan.stragglers(marked))
    assert set(on_spark.filter(on_spark.column("straggler")).column("rank").to_pylist()) == {2}
