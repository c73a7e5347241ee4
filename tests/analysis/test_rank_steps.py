"""hotspan.rank_steps (issue 31 item 5): per rank and step, the step's time, the rank's
waits and the blame it earned there: the cells of serve's rank x step heatmap, against a
generated run whose answers are known (hotspan.testing.many_ranks)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import hotspan
from hotspan.testing import Straggler, many_ranks

SLOW_STEPS = [1, 4, 5, 9, 17, 18, 29]


@pytest.fixture(scope="module")
def run():
    return many_ranks(8, 30, [Straggler(3, "data.fetch", 20_000_000, SLOW_STEPS)], seed=11)


@pytest.fixture(scope="module")
def cells(run):
    return hotspan.rank_steps(run.table())


def test_a_row_per_rank_and_step_with_the_step_spans_times(run, cells):
    assert cells.column_names == [
        "rank",
        "step",
        "start_ns",
        "end_ns",
        "step_ns",
        "wait_ns",
        "blame_ns",
        "last",
    ]
    assert cells.num_rows == 8 * 30
    rows = cells.to_pylist()
    assert [(r["rank"], r["step"]) for r in rows] == [(r, s) for r in range(8) for s in range(30)]
    for row in rows:
        r, s = row["rank"], row["step"]
        assert row["start_ns"] == run.step_start_ns[s, r]
        assert row["end_ns"] == run.step_end_ns[s, r]
        assert row["step_ns"] == row["end_ns"] - row["start_ns"]
    assert json.loads(cells.schema.metadata[b"hotspan.ranks"])["steps"] == 30


def test_the_blame_cells_are_the_injected_straggler_steps(run, cells):
    blamed = {(r["rank"], r["step"]) for r in cells.to_pylist() if r["blame_ns"] > 20_000_000}
    assert blamed == {(3, s) for s in SLOW_STEPS}


def test_each_cell_holds_the_generators_waits_blame_and_last_arrivals(run, cells):
    bound = 2 * max(
        json.loads(cells.schema.metadata[b"hotspan.ranks"])["arrival_error_ns"].values()
    )
    n_coll = run.last_rank.shape[1]
    for row in cells.to_pylist():
        r, s = row["rank"], row["step"]
        mine = [c for c in range(n_coll) if run.last_rank[s, c] == r]
        assert row["last"] == len(mine)
        assert row["wait_ns"] == pytest.approx(run.wait_ns[s, :, r].sum(), abs=n_coll * bound + 1)
        blame = sum(int(run.wait_ns[s, c].sum()) for c in mine)
        assert row["blame_ns"] == pytest.approx(blame, abs=8 * n_coll * bound + 1)


def test_cells_add_up_to_the_stragglers_blame_and_wait(run, cells):
    per_rank = hotspan.stragglers(run.table()).to_pylist()
    rank = np.asarray(cells.column("rank"))
    for row in per_rank:
        mine = rank == row["rank"]
        assert int(np.asarray(cells.column("blame_ns"))[mine].sum()) == row["blame_ns"]
        assert int(np.asarray(cells.column("wait_ns"))[mine].sum()) == row["wait_ns"]


def test_a_run_directory_streamed_gives_the_same_cells(run, cells, tmp_path, monkeypatch):
    directory = run.write(tmp_path / "run")
    monkeypatch.setenv("HOTSPAN_STREAM_MIN_BYTES", "1")  # read a part at a time
    got = hotspan.rank_steps(str(directory))
    assert got.cast(cells.schema).equals(cells)


def test_a_run_without_collectives_has_its_steps_and_no_waits():
    run = many_ranks(2, 5, seed=1)
    table = run.table()
    no_comms = table.filter(
        np.array([c != "train/comms" for c in table.column("category").to_pylist()])
    )
    cells = hotspan.rank_steps(no_comms)
    assert cells.num_rows == 10
    assert set(cells.column("wait_ns").to_pylist()) == {0}
    assert set(cells.column("blame_ns").to_pylist()) == {0}
