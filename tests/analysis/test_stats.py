"""hotspan.stats and hotspan.phases, checked against plain-Python / numpy references."""

from __future__ import annotations

import math
import threading
from collections import defaultdict

import numpy as np
import pyarrow as pa
import pytest

import hotspan
from hotspan._schema import SPAN_SCHEMA, TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.analysis.statistics import STAT_COLUMNS, parent_rows


def span_table(rows: list[dict]) -> pa.Table:
    """A span table (SPAN_SCHEMA, dictionary strings) from dicts; unspecified columns get defaults."""
    defaults = dict(
        parent_id=None,
        category=None,
        depth=0,
        thread_id=1,
        thread_name="main",
        pid=100,
        rank=0,
        arg=None,
        error=False,
    )
    full = []
    for r in rows:
        row = {**defaults, **r}
        row.setdefault("end_ns", row["start_ns"] + row["duration_ns"])
        full.append(row)
    columns = {name: [r[name] for r in full] for name in TRACE_SCHEMA.names}
    arrays = []
    for field in TRACE_SCHEMA:
        if pa.types.is_dictionary(field.type):
            arrays.append(pa.array(columns[field.name], pa.string()).dictionary_encode())
        else:
            arrays.append(pa.array(columns[field.name], field.type))
    return with_self_ns(pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA))


def random_tree_table(seed: int, n_roots: int = 40) -> pa.Table:
    """Nested spans on a few threads and ranks, with args, errors, instants and null categories."""
    rng = np.random.default_rng(seed)
    rows = []
    next_id = [1]

    def add(parent, category, start, budget, depth, thread, rank):
        sid = next_id[0]
        next_id[0] += 1
        name = str(rng.choice(["a", "b", "c"]))
        cat = category if rng.random() < 0.5 else str(rng.choice(["x", "y"]))
        path = cat if category is None else (category if cat == category else f"{category}/{cat}")
        if rng.random() < 0.1:
            path = None if category is None else category
        duration = int(rng.integers(0, budget + 1)) if rng.random() > 0.05 else 0
        t = start
        if depth < 3:
            for _ in range(int(rng.integers(0, 4))):
                room = start + duration - t
                if room <= 0:
                    break
                child_len = int(rng.integers(0, room + 1))
                add(sid, path, t, child_len, depth + 1, thread, rank)
                t += child_len
        rows.append(
            dict(
                span_id=sid,
                parent_id=parent,
                name=name,
                category=path,
                start_ns=start,
                duration_ns=duration,
                depth=depth,
                thread_id=thread,
                thread_name=f"t{thread}",
                rank=rank,
                pid=1000 + rank,
                arg=int(rng.integers(0, 10_000)) if rng.random() < 0.3 else None,
                error=bool(rng.random() < 0.1),
            )
        )

    for i in range(n_roots):
        add(
            None,
            None,
            10_000 * i + int(rng.integers(0, 100)),
            int(rng.integers(1, 9000)),
            0,
            thread=int(rng.integers(1, 4)),
            rank=int(rng.integers(0, 2)),
        )
    return span_table(rows)


def reference_stats(table: pa.Table, by) -> dict[tuple, dict]:
    rows = table.to_pylist()
    by_id = {r["span_id"]: r for r in rows}
    groups = defaultdict(list)
    for r in rows:
        groups[tuple(r[k] for k in by)].append(r)
    child_time = defaultdict(int)
    for r in rows:
        parent = by_id.get(r["parent_id"]) if r["parent_id"] is not None else None
        if parent is not None:
            child_time[tuple(parent[k] for k in by)] += r["duration_ns"]
    wall = max(r["end_ns"] for r in rows) - min(r["start_ns"] for r in rows)
    out = {}
    for key, members in groups.items():
        durations = np.array([m["duration_ns"] for m in members])
        with_arg = [m for m in members if m["arg"] is not None]
        total = int(durations.sum())
        arg_time = sum(m["duration_ns"] for m in with_arg)
        out[key] = {
            "count": len(members),
            "total_ns": total,
            "self_ns": total - child_time[key],
            "mean_ns": durations.mean(),
            "min_ns": int(durations.min()),
            "max_ns": int(durations.max()),
            "p50_ns": np.percentile(durations, 50),
            "p90_ns": np.percentile(durations, 90),
            "p99_ns": np.percentile(durations, 99),
            "busy": total / wall,
            "errors": sum(m["error"] for m in members),
            "arg_sum": sum(m["arg"] for m in with_arg) if with_arg else None,
            "arg_per_s": (sum(m["arg"] for m in with_arg) / (arg_time / 1e9))
            if with_arg and arg_time
            else None,
        }
    # share: self time over the summed self time of the rows with the same lane keys.
    lanes = [i for i, k in enumerate(by) if k in ("rank", "pid", "thread_id", "thread_name")]
    lane_self = defaultdict(int)
    for key, row in out.items():
        lane_self[tuple(key[i] for i in lanes)] += row["self_ns"]
    for key, row in out.items():
        row["share"] = row["self_ns"] / lane_self[tuple(key[i] for i in lanes)]
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(
    "by", [("category", "name"), ("name",), ("rank", "thread_name"), ("error", "category")]
)
def test_stats_match_a_plain_python_reference(seed, by):
    table = random_tree_table(seed)
    result = hotspan.stats(table, by=by)
    assert result.column_names == [*by, *STAT_COLUMNS]
    expected = reference_stats(table, by)
    got = {tuple(r[k] for k in by): r for r in result.to_pylist()}
    assert got.keys() == expected.keys()
    for key, want in expected.items():
        row = got[key]
        for column, value in want.items():
            if value is None:
                assert row[column] is None, (key, column)
            elif isinstance(value, float):
                # exact percentiles: numpy's own interpolation, to the last bit or nearly
                assert row[column] == pytest.approx(value, rel=1e-12, abs=1e-9), (key, column)
            else:
                assert row[column] == value, (key, column)
    totals = result.column("total_ns").to_pylist()
    assert totals == sorted(totals, reverse=True)


def test_stats_on_a_recorded_trace():
    hotspan.drain()
    outer = hotspan.span("outer", "sync")
    inner = hotspan.span("inner", "compute", arg=1000)

    def work():
        for _ in range(20):
            with outer:
                with inner:
                    sum(range(2000))
                with inner:
                    pass

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        with hotspan.span("boom", "sync"):
            raise RuntimeError
    except RuntimeError:
        pass
    table = hotspan.drain()
    table = table.filter(
        pa.compute.is_in(table.column("name"), pa.array(["outer", "inner", "boom"]))
    )
    result = {(r["category"], r["name"]): r for r in hotspan.stats(table).to_pylist()}
    assert result[("sync", "outer")]["count"] == 60
    assert result[("sync/compute", "inner")]["count"] == 120
    assert result[("sync/compute", "inner")]["arg_sum"] == 120_000
    assert result[("sync", "boom")]["errors"] == 1 and result[("sync", "outer")]["errors"] == 0
    outer_row, inner_row = result[("sync", "outer")], result[("sync/compute", "inner")]
    assert outer_row["self_ns"] == outer_row["total_ns"] - inner_row["total_ns"]
    durations = (
        table.filter(pa.compute.equal(table.column("name"), "inner"))
        .column("duration_ns")
        .to_numpy()
    )
    assert inner_row["p90_ns"] == pytest.approx(np.percentile(durations, 90), rel=1e-12)
    assert inner_row["arg_per_s"] == pytest.approx(120_000 / (durations.sum() / 1e9))


def test_stats_by_validation_and_empty_tables():
    table = random_tree_table(1)
    with pytest.raises(ValueError, match="no column 'nope'"):
        hotspan.stats(table, by=("nope",))
    with pytest.raises(TypeError):
        hotspan.stats(table.to_pandas(), by="name")
    assert hotspan.stats(table, by="name").column_names[0] == "name"
    empty = hotspan.stats(SPAN_SCHEMA.empty_table())
    assert empty.num_rows == 0 and empty.column_names == ["category", "name", *STAT_COLUMNS]
    assert empty.schema.field("category").type == pa.string()


def test_parent_lookup_survives_repeated_span_ids_across_processes():
    """Two processes' traces concatenated: the same span ids, told apart by thread."""
    first = random_tree_table(3)
    second = first.set_column(
        first.schema.get_field_index("pid"), "pid", pa.compute.add(first.column("pid"), 7)
    ).cast(first.schema)
    both = pa.concat_tables([first, second])
    parents = parent_rows(both)
    n = first.num_rows
    assert (parents[:n] < n).all() and ((parents[n:] == -1) | (parents[n:] >= n)).all()
    single = {(r["category"], r["name"]): r for r in hotspan.stats(first).to_pylist()}
    for r in hotspan.stats(both).to_pylist():
        assert r["self_ns"] == 2 * single[(r["category"], r["name"])]["self_ns"]


def test_percentiles_of_one_and_two_values():
    table = span_table(
        [
            dict(span_id=1, name="x", start_ns=0, duration_ns=10),
            dict(span_id=2, name="x", start_ns=20, duration_ns=30),
            dict(span_id=3, name="y", start_ns=0, duration_ns=7),
        ]
    )
    rows = {r["name"]: r for r in hotspan.stats(table, by="name").to_pylist()}
    assert rows["x"]["p50_ns"] == 20.0 and rows["x"]["p99_ns"] == pytest.approx(29.8)
    assert rows["y"]["p50_ns"] == rows["y"]["p99_ns"] == 7.0
    assert rows["x"]["busy"] == pytest.approx(40 / 50)
    assert rows["x"]["share"] == pytest.approx(40 / 47) and rows["y"]["share"] == pytest.approx(
        7 / 47
    )


def test_share_adds_up_to_one_per_rank_and_over_the_table():
    table = random_tree_table(3)
    overall = hotspan.stats(table)
    assert sum(overall.column("share").to_pylist()) == pytest.approx(1.0)
    per_rank = hotspan.stats(table, by=("rank", "name"))
    sums = defaultdict(float)
    for row in per_rank.to_pylist():
        sums[row["rank"]] += row["share"]
    assert len(sums) > 1 and all(v == pytest.approx(1.0) for v in sums.values())


def phase_trace() -> pa.Table:
    """Two ranks; each step (sync) holds compute and comms; compute nests more compute."""
    rows = []
    sid = iter(range(1, 10_000))
    for rank, (compute, comms, steps) in enumerate([(71, 24, 3), (50, 40, 2)]):
        t = 0
        for _ in range(steps):
            step = next(sid)
            rows.append(
                dict(
                    span_id=step,
                    name="step",
                    category="sync",
                    start_ns=t,
                    duration_ns=100,
                    rank=rank,
                )
            )
            c = next(sid)
            rows.append(
                dict(
                    span_id=c,
                    parent_id=step,
                    name="fwd",
                    category="sync/compute",
                    start_ns=t,
                    duration_ns=compute,
                    depth=1,
                    rank=rank,
                )
            )
            rows.append(
                dict(
                    span_id=next(sid),
                    parent_id=c,
                    name="mm",
                    category="sync/compute",
                    start_ns=t,
                    duration_ns=compute - 1,
                    depth=2,
                    rank=rank,
                )
            )
            rows.append(
                dict(
                    span_id=next(sid),
                    parent_id=step,
                    name="ar",
                    category="sync/comms",
                    start_ns=t + compute,
                    duration_ns=comms,
                    depth=1,
                    rank=rank,
                )
            )
            rows.append(
                dict(
                    span_id=next(sid),
                    parent_id=step,
                    name="mark",
                    category="sync/note",
                    start_ns=t + 99,
                    duration_ns=0,
                    depth=1,
                    rank=rank,
                )
            )  # an instant: no time
            t += 100
        rows.append(
            dict(
                span_id=next(sid), name="save", category="io", start_ns=t, duration_ns=5, rank=rank
            )
        )
    return span_table(rows)


def test_phases_per_rank_and_mean_over_ranks():
    result = hotspan.phases(phase_trace()).to_pylist()
    rank0 = [r for r in result if r["rank"] == 0]
    assert [(r["phase"], r["time_ns"], r["steps"]) for r in rank0] == [
        ("sync", 300.0, 3.0),
        ("sync/compute", 213.0, 3.0),
        ("sync/comms", 72.0, 3.0),
        ("io", 5.0, 1.0),
    ]
    assert rank0[1]["share"] == pytest.approx(0.71) and rank0[2]["share"] == pytest.approx(0.24)
    assert rank0[0]["per_step_ns"] == 100.0 and rank0[1]["per_step_ns"] == 71.0
    mean = {r["phase"]: r for r in result if r["rank"] is None}
    # integers (issue 20): the mean rows' time and steps rounded half up, per step from the exact means
    assert mean["sync"]["time_ns"] == 250 and mean["sync"]["steps"] == 3
    assert mean["sync/compute"]["time_ns"] == 157  # (213 + 100) / 2, rounded half up
    assert mean["sync/compute"]["share"] == pytest.approx(156.5 / 250)
    assert mean["sync/comms"]["share"] == pytest.approx(((72 + 80) / 2) / 250)


def test_phases_of_one_rank_have_no_mean_rows_and_empty_is_empty():
    table = phase_trace()
    one = table.filter(pa.compute.equal(table.column("rank"), 0))
    assert all(r["rank"] == 0 for r in hotspan.phases(one).to_pylist())
    assert hotspan.phases(SPAN_SCHEMA.empty_table()).num_rows == 0


def test_stats_and_phases_are_exported():
    assert "stats" in hotspan.__all__ and "phases" in hotspan.__all__
    assert not math.isnan(hotspan.stats(phase_trace()).column("share")[0].as_py())


def test_keys_of_every_dictionary_index_width_and_a_null_group():
    """Keys whose dictionaries are read as they lie (the codes are the indices, no copy):
    8-bit indices over a full dictionary and a null key among them group as plain strings."""
    table = random_tree_table(3)
    names = [f"n{i}" for i in range(128)]
    n = table.num_rows
    rng = np.random.default_rng(0)
    index = rng.integers(0, 128, n)
    index[index == 127] = 126
    index[:3] = 127  # the dictionary's last value used
    mask = np.zeros(n, bool)
    mask[3:6] = True  # and null keys: their own group, after the 128 values
    narrow = pa.DictionaryArray.from_arrays(pa.array(index.astype(np.int8), mask=mask), names)
    plain = narrow.cast(pa.string())
    by_narrow = hotspan.stats(
        table.set_column(table.schema.get_field_index("name"), "name", narrow), by="name"
    )
    by_plain = hotspan.stats(
        table.set_column(table.schema.get_field_index("name"), "name", plain), by="name"
    )
    assert by_narrow.to_pylist() == by_plain.to_pylist()
    assert (
        None in by_narrow.column("name").to_pylist()
        and "n127" in by_narrow.column("name").to_pylist()
    )
