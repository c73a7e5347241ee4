"""Awaited time in the answers: stats, phases and the flame graph of an asyncio run agree on
every number, in memory and streamed from a file, and none counts a task's sleep as work."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.analysis.flamegraph import flame_tree

pytestmark = pytest.mark.usefixtures("fresh")


def _busy(seconds: float) -> None:
    end = time.perf_counter_ns() + int(seconds * 1e9)
    while time.perf_counter_ns() < end:
        pass


@pytest.fixture
def gathered() -> pa.Table:
    async def fetch(i: int) -> None:
        with hotspan.span("fetch", "io"):
            await asyncio.sleep(0.005)
            _busy(0.0002)

    async def main() -> None:
        with hotspan.span("batch", "main"):
            _busy(0.002)
            await asyncio.gather(*(fetch(i) for i in range(50)))

    asyncio.run(main())
    return hotspan.drain()


def _by_name(result: pa.Table) -> dict:
    return {r["name"]: r for r in result.to_pylist()}


def _column_sum(table: pa.Table, name: str, column: str) -> int:
    rows = table.filter(pc.equal(table.column("name"), name))
    return int(pc.sum(rows.column(column)).as_py())


def test_stats_say_wait_and_self_shares_what_ran(gathered):
    rows = _by_name(hotspan.stats(gathered))
    fetch, batch = rows["fetch"], rows["batch"]
    for name, row in rows.items():
        assert row["self_ns"] == _column_sum(gathered, name, "self_ns")
        assert row["wait_ns"] == _column_sum(gathered, name, "wait_ns")
    assert fetch["wait_ns"] >= 50 * 5_000_000  # each task slept 5 ms
    assert fetch["self_ns"] + fetch["wait_ns"] == fetch["total_ns"]
    wall = batch["total_ns"]
    # busy ("total %") is total over the wall: 50 tasks that overlap are 50 x that
    assert fetch["busy"] == pytest.approx(fetch["total_ns"] / wall)
    assert fetch["self_ns"] + batch["self_ns"] <= wall
    assert fetch["share"] + batch["share"] == pytest.approx(1)


def test_phases_and_the_flame_graph_agree_with_stats(gathered):
    stats = _by_name(hotspan.stats(gathered))
    phases = {r["phase"]: r for r in hotspan.phases(gathered).to_pylist()}
    # the time the tasks' code ran, never their summed durations (35x the wall before)
    assert phases["main/io"]["time_ns"] == stats["fetch"]["self_ns"]
    assert phases["main"]["time_ns"] == stats["fetch"]["self_ns"] + stats["batch"]["self_ns"]
    assert phases["main/io"]["share"] <= 1
    tree = flame_tree(gathered)
    node = {label: i for i, label in enumerate(tree.label) if tree.kind[i] == "frame"}
    assert int(tree.self_ns[node["fetch"]]) == stats["fetch"]["self_ns"]
    assert int(tree.total_ns[node["batch"]]) == phases["main"]["time_ns"]
    assert int(tree.total_ns[node["batch"]]) <= stats["batch"]["total_ns"]


def test_streamed_answers_are_the_same(gathered, tmp_path):
    path = tmp_path / "run.parquet"
    hotspan.export(gathered, path)
    for function in (hotspan.stats, hotspan.phases):
        in_memory, streamed = function(gathered), function(str(path))
        assert streamed.to_pylist() == in_memory.to_pylist(), function.__name__


def test_sync_phases_are_durations_as_before():
    with hotspan.span("step", "train"):
        with hotspan.span("forward", "compute"):
            _busy(0.001)
        time.sleep(0.001)
    table = hotspan.drain()
    phases = {r["phase"]: r for r in hotspan.phases(table).to_pylist()}
    durations = dict(zip(table.column("name").to_pylist(), table.column("duration_ns").to_pylist()))
    assert phases["train"]["time_ns"] == durations["step"]
    assert phases["train/compute"]["time_ns"] == durations["forward"]
    assert np.all(table.column("wait_ns").to_numpy() == 0)
