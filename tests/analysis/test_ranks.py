"""Across ranks (issue 31): collectives matched between ranks, stragglers named with the
reason, the critical path of each step, all against a generated run whose answers are known
(hotspan.testing.many_ranks: injected stragglers, per-host clock offsets)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.testing import Straggler, many_ranks


def info(table: pa.Table) -> dict:
    return json.loads(table.schema.metadata[b"hotspan.ranks"])


def named(table: pa.Table) -> set[int]:
    return set(table.filter(table.column("straggler")).column("rank").to_pylist())


def steps_last_of(run) -> np.ndarray:
    """Per rank, the steps in which the generator made it the last arriver of a collective."""
    return np.array([int((run.last_rank == r).any(axis=1).sum()) for r in range(run.n_ranks)])


@pytest.mark.parametrize(
    ("ranks", "injected"),
    [
        (8, [Straggler(3, "data.fetch", 20_000_000, 0.8)]),
        (
            16,
            [Straggler(5, "backward", 4_000_000, 0.5), Straggler(12, "optimizer", 6_000_000, 0.3)],
        ),
        (64, [Straggler(17, "data.fetch", 2_000_000, 0.3)]),
    ],
)
def test_the_analysis_names_exactly_the_injected_ranks_and_why(ranks, injected):
    run = many_ranks(ranks, 200, injected, seed=1)
    assert np.ptp(run.clock_offset_ns) > 100_000  # hosts' clocks do disagree
    table = hotspan.stragglers(run.table())
    assert table.column_names == [
        "rank",
        "blame_ns",
        "wait_ns",
        "steps_last",
        "straggler",
        "reason",
        "step_ns_if_median",
    ]
    assert named(table) == run.injected
    rows = {row["rank"]: row for row in table.to_pylist()}
    for straggler in injected:
        row = rows[straggler.rank]
        late = int(steps_last_of(run)[straggler.rank])
        assert row["steps_last"] == late
        assert row["reason"].startswith(f"rank {straggler.rank}: {straggler.span} +")
        assert row["reason"].endswith(f"a step over the median rank, {late:,} of 200 steps")
        # the excess, averaged over the steps it was late, is about the injected time
        per_step = float(row["reason"].split("+")[1].split(" ms")[0]) * 1e6
        share = len(run.slow_steps[straggler.rank]) / late
        assert per_step == pytest.approx(straggler.extra_ns * share, rel=0.3)
    for rank, row in rows.items():
        assert (row["reason"] is None) == (rank not in run.injected)


def test_blame_and_wait_each_sum_to_the_generators_total_wait():
    run = many_ranks(16, 100, [Straggler(9, "forward", 5_000_000, 0.6)], seed=2)
    table = hotspan.stragglers(run.table())
    blame = sum(table.column("blame_ns").to_pylist())
    wait = sum(table.column("wait_ns").to_pylist())
    assert blame == wait  # every wait is some last arriver's blame, no more
    rows = hotspan.collectives(run.table())
    bound = pc.sum(rows.column("arrival_error_ns")).as_py() * 2  # own and the last's clock
    assert abs(wait - run.total_wait_ns) <= bound
    assert abs(wait - run.total_wait_ns) < 1e-4 * run.total_wait_ns
    # per rank too: what the generator says each one waited
    mine = run.wait_ns.sum(axis=(0, 1))
    assert np.allclose(table.column("wait_ns").to_numpy(), mine, rtol=1e-3)


def test_collectives_match_the_kth_occurrence_on_each_rank_and_name_the_last():
    run = many_ranks(4, 20, [Straggler(2, "data.fetch", 10_000_000, 1.0)], seed=3)
    rows = hotspan.collectives(run.table())
    assert rows.column_names == [
        "key",
        "index",
        "rank",
        "arrival_ns",
        "arrival_error_ns",
        "wait_ns",
        "last",
    ]
    assert rows.num_rows == 20 * 2 * 4
    df = rows.to_pylist()
    for step in range(20):
        for c, key in enumerate(("all_reduce", "all_gather")):
            inst = [r for r in df if r["key"] == key and r["index"] == step]
            assert sorted(r["rank"] for r in inst) == [0, 1, 2, 3]
            (last,) = [r["rank"] for r in inst if r["last"]]
            assert last == run.last_rank[step, c]
            for r in inst:
                assert r["wait_ns"] == pytest.approx(
                    run.wait_ns[step, c, r["rank"]], abs=r["arrival_error_ns"] * 2 + 1
                )
    # the estimated clock offsets are the hosts' (up to a common shift)
    offset = info(rows)["clock_offset_ns"]
    found = np.array([offset[str(r)] for r in range(4)])
    assert np.allclose(found - found[0], run.clock_offset_ns - run.clock_offset_ns[0], atol=1_000)


def test_without_alignment_the_clock_offsets_blame_the_wrong_host():
    run = many_ranks(8, 100, [], seed=4, clock_offset_ns=3_000_000)
    late_host = int(np.argmax(run.clock_offset_ns))
    aligned = hotspan.stragglers(run.table())
    raw = hotspan.stragglers(run.table(), align=False)
    assert named(aligned) == set()
    # uncorrected, the host whose clock runs ahead always seems to arrive last
    assert late_host in named(raw) or any(
        run.clock_offset_ns[r] == run.clock_offset_ns[late_host] for r in named(raw)
    )
    assert named(raw)


def test_the_critical_path_is_the_generators():
    run = many_ranks(8, 50, [Straggler(6, "backward", 3_000_000, 0.5)], seed=5)
    path = hotspan.critical_path(run.table())
    assert path.column_names == ["step", "rank", "name", "start_ns", "end_ns"]
    got = list(zip(*(path.column(c).to_pylist() for c in path.column_names)))
    want = run.critical_path()
    assert len(got) == len(want)
    # The rank whose step ends last may differ from the generator's where two ranks end
    # within the clocks' error bound of each other (ends a few hundred ns apart): only there.
    bound = 2 * max(info(path)["arrival_error_ns"].values())
    true_end = run.step_end_ns - run.clock_offset_ns[None, :]
    differ = {w[0] for g, w in zip(got, want) if g != w}
    for step in differ:
        ours = [g for g in got if g[0] == step]
        theirs = [w for w in want if w[0] == step]
        assert ours[:-1] == theirs[:-1]  # all but the tail
        a, b = ours[-1][1], theirs[-1][1]
        assert abs(true_end[step, a] - true_end[step, b]) <= bound
    assert len(differ) <= 0.05 * run.n_steps
    summary = hotspan.critical_path(run.table(), summary=True)
    assert summary.column_names == ["name", "critical_ns", "share"]
    assert pc.sum(summary.column("share")).as_py() == pytest.approx(1.0)
    by_name = dict(
        zip(summary.column("name").to_pylist(), summary.column("critical_ns").to_pylist())
    )
    assert by_name["backward"] == sum(
        e - s for _, _, n, s, e in run.critical_path() if n == "backward"
    )


def test_step_time_if_the_straggler_kept_up_is_the_clean_runs():
    slow = many_ranks(8, 200, [Straggler(3, "data.fetch", 20_000_000, 0.8)], seed=6)
    clean = many_ranks(8, 200, [], seed=6)
    table = hotspan.stragglers(slow.table())
    step_ns = info(table)["step_ns"]
    clean_step_ns = info(hotspan.stragglers(clean.table()))["step_ns"]
    assert step_ns > 1.5 * clean_step_ns
    if_median = table.column("step_ns_if_median").to_pylist()
    assert if_median[3] == pytest.approx(clean_step_ns, rel=0.02)
    # the others gain little by keeping up: they were rarely last
    assert min(v for r, v in enumerate(if_median) if r != 3) > 0.98 * step_ns


@pytest.mark.parametrize("seeds", [range(10), pytest.param(range(100), marks=pytest.mark.slow)])
def test_a_run_without_stragglers_names_none(seeds):
    for seed in seeds:
        run = many_ranks(8, 100, [], seed=seed)
        table = hotspan.stragglers(run.table())
        assert named(table) == set(), seed
        assert table.column("reason").null_count == 8


def test_many_ranks_without_stragglers_names_none():
    run = many_ranks(512, 20, [], seed=7)
    assert named(hotspan.stragglers(run.table())) == set()


def test_steps_fall_back_to_the_most_frequent_top_level_span():
    run = many_ranks(4, 30, [Straggler(1, "optimizer", 5_000_000, 1.0)], seed=8)
    table = run.table()
    names = table.column("name").cast(pa.string())
    renamed = table.set_column(
        table.column_names.index("name"),
        "name",
        pc.if_else(pc.equal(names, "step"), "iteration", names),
    )
    a, b = hotspan.stragglers(table), hotspan.stragglers(renamed)
    assert a.equals(b)
    assert info(b)["steps"] == 30
    assert "30 of 30 steps" in b.column("reason")[1].as_py()


def test_a_run_directory_and_a_streamed_run_give_the_tables_answers(tmp_path, monkeypatch):
    run = many_ranks(8, 40, [Straggler(2, "data.fetch", 8_000_000, 0.7)], seed=9)
    directory = run.write(tmp_path / "run")
    expected = [
        f(run.table()) for f in (hotspan.collectives, hotspan.stragglers, hotspan.critical_path)
    ]
    loaded = [
        f(directory) for f in (hotspan.collectives, hotspan.stragglers, hotspan.critical_path)
    ]
    monkeypatch.setenv("HOTSPAN_STREAM_MIN_BYTES", "1")  # read a part at a time
    streamed = [
        f(str(directory)) for f in (hotspan.collectives, hotspan.stragglers, hotspan.critical_path)
    ]
    for want, *others in zip(expected, loaded, streamed):
        want = want.cast(want.schema.remove_metadata())
        for got in others:
            got = got.cast(want.schema)
            assert got.sort_by([(c, "ascending") for c in got.column_names[:3]]).equals(
                want.sort_by([(c, "ascending") for c in want.column_names[:3]])
            )


def test_collectives_are_chosen_by_the_last_part_of_their_category():
    run = many_ranks(4, 10, [], seed=10)
    table = run.table()
    assert hotspan.collectives(table, category="data").column("key").unique().to_pylist() == [
        "data.fetch"
    ]
    assert hotspan.collectives(table, category="ms").num_rows == 0  # not a suffix of "comms"


def test_spans_without_collectives_or_steps_give_empty_answers():
    with hotspan.span("alone", "compute"):
        pass
    table = hotspan.drain()
    assert hotspan.collectives(table).num_rows == 0
    result = hotspan.stragglers(table)
    assert result.column("straggler").to_pylist() == [False]
    assert result.column("blame_ns").to_pylist() == [0]
    assert hotspan.critical_path(table).num_rows == 0


def test_bad_input_is_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="not a span table"):
        hotspan.stragglers(pa.table({"x": [1]}))
    with pytest.raises(TypeError, match="pyarrow.Table or a path"):
        hotspan.collectives(42)
    with pytest.raises(FileNotFoundError):
        hotspan.critical_path(tmp_path / "nothing-here")
    with pytest.raises(ValueError, match="alpha"):
        hotspan.stragglers(many_ranks(2, 2).table(), alpha=2)


def test_a_collectors_offset_uncertainty_widens_that_ranks_error_bound(tmp_path):
    from hotspan.formats.dataset import write_part

    run = many_ranks(4, 20, [], seed=12)
    for rank in range(4):  # as a collector writes them: its measured uncertainty per part
        uncertainty = 250_000 if rank == 2 else 0
        write_part(
            run.table([rank]),
            tmp_path / "run",
            rank=rank,
            pid=40_000 + rank,
            seq=0,
            token=f"ab{rank}",
            part_meta={"offset_ns": 0, "offset_uncertainty_ns": uncertainty},
        )
    from_table = hotspan.collectives(run.table())
    from_dir = hotspan.collectives(tmp_path / "run")
    error = dict(
        zip(from_dir.column("rank").to_pylist(), from_dir.column("arrival_error_ns").to_pylist())
    )
    before = dict(
        zip(
            from_table.column("rank").to_pylist(), from_table.column("arrival_error_ns").to_pylist()
        )
    )
    assert error[2] == before[2] + 250_000
    assert all(error[r] == before[r] for r in (0, 1, 3))
    fixed = hotspan.collectives(tmp_path / "run", clock_error_ns=1_000)
    assert set(fixed.column("arrival_error_ns").to_pylist()) <= {v + 1_000 for v in before.values()}


def test_a_filter_keeps_the_same_spans_in_memory_and_streamed(tmp_path, monkeypatch):
    run = many_ranks(8, 60, [Straggler(4, "data.fetch", 10_000_000, 0.9)], seed=13)
    directory = run.write(tmp_path / "run")
    # the first 30 steps only, as a window relative to the run's start
    half = int(run.step_end_ns[29].min() - run.step_start_ns[0].min())
    window = {"until": half / 1e9}  # seconds from the run's start
    in_memory = hotspan.stragglers(run.table(), filter=window)
    monkeypatch.setenv("HOTSPAN_STREAM_MIN_BYTES", "1")
    streamed = hotspan.stragglers(str(directory), filter=window)
    assert info(in_memory)["steps"] == info(streamed)["steps"] < 60
    assert in_memory.column("blame_ns").to_pylist() == streamed.column("blame_ns").to_pylist()
    assert named(streamed) == {4}
    only = hotspan.collectives(run.table(), filter={"ranks": [0, 1, 2]})
    assert set(only.column("rank").to_pylist()) == {0, 1, 2}


def test_a_collective_of_some_ranks_is_matched_within_its_group_and_extras_are_counted():
    run = many_ranks(4, 20, [Straggler(1, "data.fetch", 10_000_000, 1.0)], seed=14)
    table = run.table()
    name, rank = table.column("name").cast(pa.string()), table.column("rank")
    # all_gather on ranks 0 and 1 only; rank 3's last all_reduce lost
    gone = pc.or_(
        pc.and_(pc.equal(name, "all_gather"), pc.greater_equal(rank, 2)),
        pc.and_(
            pc.and_(pc.equal(name, "all_reduce"), pc.equal(rank, 3)),
            pc.greater_equal(table.column("start_ns"), int(run.start_ns[19, 3, 3])),
        ),
    )
    rows = hotspan.collectives(table.filter(pc.invert(gone)))
    gather = rows.filter(pc.equal(rows.column("key"), "all_gather"))
    assert set(gather.column("rank").to_pylist()) == {0, 1}
    assert gather.num_rows == 2 * 20
    for step in range(20):
        inst = [r for r in gather.to_pylist() if r["index"] == step]
        (last,) = [r["rank"] for r in inst if r["last"]]
        assert last == max((0, 1), key=lambda r: run.start_ns[step, r, 5] - run.clock_offset_ns[r])
    reduce = rows.filter(pc.equal(rows.column("key"), "all_reduce"))
    assert reduce.num_rows == 4 * 19  # the 20th instance lacks rank 3: left out
    assert info(rows)["unmatched"] == 3
    assert set(reduce.filter(reduce.column("last")).column("rank").to_pylist()) == {1}


def _in_groups(table: pa.Table, group_of) -> pa.Table:
    """``table`` with each collective's category ``train/comms:GROUP``, as the torch.distributed
    instrumentation marks them; ``group_of(name, rank)`` gives GROUP."""
    rows = table.to_pylist()
    for row in rows:
        if row["category"] == "train/comms":
            row["category"] = f"train/comms:{group_of(row['name'], row['rank'])}"
    return pa.Table.from_pylist(rows, schema=table.schema)


def test_collectives_marked_with_a_group_are_matched_within_it_never_across_groups():
    run = many_ranks(4, 20, [Straggler(1, "data.fetch", 10_000_000, 1.0)], seed=21)
    # all_reduce on the world; all_gather on two groups of two ranks each, same name
    table = _in_groups(
        run.table(), lambda name, rank: "world" if name == "all_reduce" else "ab"[rank // 2]
    )
    rows = hotspan.collectives(table)
    assert sorted(info(rows)["groups"]) == ["a", "b", "world"]
    assert info(rows)["unmatched"] == 0 and info(rows)["match_problems"] == []
    by_key: dict[str, list[dict]] = {}
    for row in rows.to_pylist():
        by_key.setdefault(row["key"], []).append(row)
    assert set(by_key) == {"all_reduce@world", "all_gather@a", "all_gather@b"}
    assert {r["rank"] for r in by_key["all_gather@a"]} == {0, 1}
    assert {r["rank"] for r in by_key["all_gather@b"]} == {2, 3}
    assert len(by_key["all_reduce@world"]) == 4 * 20
    for key, members in (("all_gather@a", (0, 1)), ("all_gather@b", (2, 3))):
        for step in range(20):
            inst = [r for r in by_key[key] if r["index"] == step]
            assert sorted(r["rank"] for r in inst) == list(members)
            # the last arriver within its own group, not of all four ranks
            (last,) = [r["rank"] for r in inst if r["last"]]
            expected = max(members, key=lambda r: run.start_ns[step, r, 5] - run.clock_offset_ns[r])
            assert last == expected
            # rank 1 (slow) never makes the other group wait
            if key == "all_gather@b":
                assert all(r["wait_ns"] < 5_000_000 for r in inst)
    # the straggler is still found through its own groups
    assert named(hotspan.stragglers(table)) == {1}


def test_a_rank_that_skipped_a_collective_of_its_group_is_said_not_mismatched():
    run = many_ranks(4, 20, [], seed=22)
    table = _in_groups(run.table(), lambda name, rank: "world")  # both collectives, one group
    name, rank = table.column("name").cast(pa.string()), table.column("rank")
    # rank 2 skips step 7's all_reduce: its later collectives are one behind the others'
    skipped = pc.and_(
        pc.and_(pc.equal(name, "all_reduce"), pc.equal(rank, 2)),
        pc.equal(table.column("start_ns"), int(run.start_ns[7, 2, 3])),
    )
    assert pc.sum(skipped.cast(pa.int64())).as_py() == 1
    rows = hotspan.collectives(table.filter(pc.invert(skipped)))
    meta = info(rows)
    # matched up to the collective they disagree on (#14: step 7's all_reduce), none after
    assert sorted(set(rows.column("index").to_pylist())) == list(range(14))
    assert rows.num_rows == 4 * 14
    (problem,) = meta["match_problems"]
    assert problem["group"] == "world" and problem["seq"] == 14
    assert problem["ranks_by_name"] == {"all_gather": [2], "all_reduce": [0, 1, 3]}
    assert "rank 2 in all_gather" in problem["text"] and "#14" in problem["text"]
    assert meta["unmatched"] == 4 * 40 - 1 - 4 * 14
    # every matched instance holds one collective: no all_reduce matched with an all_gather
    for index in range(14):
        assert len({r["key"] for r in rows.to_pylist() if r["index"] == index}) == 1


def test_the_instrumentations_world_group_keeps_the_plain_keys():
    run = many_ranks(4, 10, [], seed=23)
    plain = hotspan.collectives(run.table())
    marked = hotspan.collectives(_in_groups(run.table(), lambda name, rank: "world"))
    assert set(marked.column("key").to_pylist()) == {"all_reduce", "all_gather"}
    # the same instances: by group sequence, the k-th all_reduce is #2k, its all_gather #2k+1
    a = sorted(
        zip(*(plain.column(c).to_pylist() for c in ("key", "rank", "arrival_ns", "wait_ns")))
    )
    b = sorted(
        zip(*(marked.column(c).to_pylist() for c in ("key", "rank", "arrival_ns", "wait_ns")))
    )
    assert a == b
