"""The across-ranks analysis reads a run once (issue 31 item 6, at scale): the first pass
also sums each window between a batch's own consecutive collectives and keeps the steps'
children (rank_reasons.EarlyWindows), checked against the whole run at the end. The answers
must be those of the second reading it replaces, whatever the batches hold: a rank's spans
in order, a rank split over several parts, or rows in no order at all (then the check
fails and the spans are read again)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import hotspan
from hotspan.analysis import _rank_reasons as rank_reasons, _rank_source as rank_source
from hotspan.analysis._rank_kernel import RankAnalysis
from hotspan.analysis._rank_reasons import critical_path_table, straggler_table
from hotspan.analysis.ranks import ranks_summary
from hotspan.testing import Straggler, many_ranks


@pytest.fixture(scope="module")
def run():
    return many_ranks(
        12,
        60,
        [Straggler(3, "data.fetch", 20_000_000, 0.8), Straggler(9, "optimizer", 15_000_000, 0.5)],
        seed=21,
        layers=2,
    )


def answers(spans) -> tuple:
    return (
        ranks_summary(spans),
        hotspan.stragglers(spans),
        hotspan.critical_path(spans),
        hotspan.collectives(spans),
    )


def read_once(spans) -> bool:
    """Whether the analysis of ``spans`` answered from its first reading."""
    with RankAnalysis(spans) as analysis:
        straggler_table(analysis)
        critical_path_table(analysis)
        return "early_sums" in analysis.found and analysis.found["early"].ok


def same(a: tuple, b: tuple) -> None:
    assert a[0] == b[0]
    for x, y in zip(a[1:], b[1:]):
        assert x.equals(y, check_metadata=True)


@pytest.fixture(scope="module")
def second_reading(run):
    """The answers of the two readings (the first pass's sums turned off)."""
    saved = rank_reasons.EarlyWindows.RAW_LIMIT
    rank_reasons.EarlyWindows.RAW_LIMIT = -1
    try:
        table = run.table()
        assert not read_once(table)
        return answers(table)
    finally:
        rank_reasons.EarlyWindows.RAW_LIMIT = saved


def test_a_table_is_read_once_with_the_second_readings_answers(run, second_reading):
    table = run.table()
    assert read_once(table)
    same(answers(table), second_reading)
    assert {r["rank"] for r in second_reading[0]["stragglers"] if r["straggler"]} == {3, 9}


def test_a_rank_split_over_parts_is_read_once_with_the_same_answers(
    run, second_reading, tmp_path, monkeypatch
):
    # each rank in three parts cut mid-step (windows across parts' edges)
    monkeypatch.setenv("HOTSPAN_STREAM_MIN_BYTES", "1")  # streamed, a part at a time
    table = run.table()
    for r in range(run.n_ranks):
        mine = table.filter(pa.compute.equal(table.column("rank"), r))
        cuts = [0, mine.num_rows // 3 + 5, 2 * mine.num_rows // 3 + 11, mine.num_rows]
        for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
            pq.write_table(
                mine.slice(a, b - a), tmp_path / f"part-r{r}-{100 + r}-ab{r:04x}-{i}.parquet"
            )
    assert read_once(str(tmp_path))
    same(answers(str(tmp_path)), second_reading)


def test_rows_in_no_order_are_read_again_with_the_same_answers(run, second_reading, monkeypatch):
    table = run.table()
    shuffled = table.take(pa.array(np.random.default_rng(3).permutation(table.num_rows)))
    monkeypatch.setattr(rank_source, "BATCH_ROWS", 2_000)  # batches of parts of many ranks
    assert not read_once(shuffled)
    same(answers(shuffled), second_reading)
