"""self_ns: a span's duration minus the union of its children's intervals, computed once
where spans become a table (drain() in C; loaders by hotspan._selftime), never negative."""

from __future__ import annotations

import asyncio
import json
import threading

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan._selftime import self_ns_column


@pytest.fixture(autouse=True)
def _clean():
    hotspan.drain()
    yield
    hotspan.drain()


def _union_self(table: pa.Table) -> np.ndarray:
    """The rule, written out row by row from the table's own ns (the reference)."""
    rows = table.select(["span_id", "parent_id", "start_ns", "end_ns", "thread_id"]).to_pylist()
    by_id = {r["span_id"]: r for r in rows}
    children: dict[int, list[tuple[int, int]]] = {}
    for r in rows:
        p = by_id.get(r["parent_id"])
        if p is not None and p["thread_id"] == r["thread_id"]:
            s, e = max(r["start_ns"], p["start_ns"]), min(r["end_ns"], p["end_ns"])
            if e > s:
                children.setdefault(r["parent_id"], []).append((s, e))
    out = []
    for r in rows:
        covered, reach = 0, None
        for s, e in sorted(children.get(r["span_id"], [])):
            if reach is None or s >= reach:
                covered += e - s
                reach = e
            elif e > reach:
                covered += e - reach
                reach = e
        out.append(max(0, r["end_ns"] - r["start_ns"] - covered))
    return np.array(out, np.int64)


def _check(table: pa.Table) -> None:
    own = table.column("self_ns").to_numpy()
    assert (own >= 0).all()
    assert (own <= table.column("duration_ns").to_numpy()).all()
    np.testing.assert_array_equal(own, _union_self(table))
    # and the shared vectorised function (loaders) agrees with the C drain exactly
    np.testing.assert_array_equal(self_ns_column(table.drop_columns(["self_ns"])).to_numpy(), own)


def _row(table: pa.Table, name: str) -> dict:
    rows = table.filter(pc.equal(table.column("name"), name)).to_pylist()
    assert len(rows) == 1, (name, len(rows))
    return rows[0]


def test_hundred_tasks_under_gather_wait_rather_than_cover():
    # gather is a span of the main task: while that task awaits (the sleep, then the jobs)
    # the time is gather's wait, not its self, and the jobs (other tasks) cover none of it
    async def job(i: int) -> None:
        with hotspan.span("job"):
            await asyncio.sleep(0.0005 * (i % 7))

    async def main() -> None:
        with hotspan.span("gather"):
            await asyncio.sleep(0.002)  # time no task covers: gather's task waits
            await asyncio.gather(*(job(i) for i in range(100)))

    asyncio.run(main())
    table = hotspan.drain()
    gather = _row(table, "gather")
    jobs = table.filter(pc.equal(table.column("name"), "job"))
    assert jobs.num_rows == 100
    assert set(jobs.column("parent_id").to_pylist()) == {gather["span_id"]}
    assert gather["self_ns"] + gather["wait_ns"] == gather["duration_ns"]
    assert gather["wait_ns"] >= 2_000_000 + 6 * 500_000  # the sleep, then the longest job
    # per thread, self times add up to no more than the wall time inside spans
    assert pc.sum(table.column("self_ns")).as_py() <= gather["duration_ns"]
    # a sum of the children's durations would be far more than the span itself
    assert int(jobs.column("duration_ns").to_numpy().sum()) > gather["duration_ns"]
    own = table.column("self_ns").to_numpy() + table.column("wait_ns").to_numpy()
    np.testing.assert_array_equal(own, table.column("duration_ns").to_numpy())


def test_deep_sync_nesting_and_siblings():
    def nest(depth: int) -> None:
        with hotspan.span(f"d{depth}"):
            for _ in range(2):
                with hotspan.span("leaf"):
                    pass
            if depth < 40:
                nest(depth + 1)

    nest(0)
    table = hotspan.drain()
    assert table.num_rows == 41 * 3
    _check(table)
    # per thread, self times add up to the busy time (the roots' durations)
    roots = table.filter(pc.equal(table.column("depth"), 0))
    assert pc.sum(table.column("self_ns")).as_py() == pc.sum(roots.column("duration_ns")).as_py()


def test_threads_keep_their_own_children():
    barrier = threading.Barrier(4)

    def work(i: int) -> None:
        barrier.wait()
        with hotspan.span(f"outer{i}"):
            for _ in range(50):
                with hotspan.span("inner"):
                    pass

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table = hotspan.drain()
    _check(table)
    for i in range(4):
        outer = _row(table, f"outer{i}")
        inner = table.filter(
            pc.and_(
                pc.equal(table.column("name"), "inner"),
                pc.equal(table.column("parent_id"), pa.scalar(outer["span_id"], pa.uint64())),
            )
        )
        assert inner.num_rows == 50
        assert (
            outer["self_ns"] == outer["duration_ns"] - pc.sum(inner.column("duration_ns")).as_py()
        )


def test_child_left_open_across_a_drain():
    with hotspan.span("parent"):
        with hotspan.span("before"):
            pass
        with hotspan.span("open"):
            first = hotspan.drain()  # parent and "open" are still open
            with hotspan.span("inside"):
                pass
    second = hotspan.drain()
    assert first.column("name").to_pylist() == ["before"]
    both = pa.concat_tables([first, second]).unify_dictionaries()
    _check(both)
    parent, before, open_ = _row(both, "parent"), _row(both, "before"), _row(both, "open")
    assert parent["self_ns"] == parent["duration_ns"] - before["duration_ns"] - open_["duration_ns"]


def test_parent_drained_after_its_children_in_an_earlier_drain():
    with hotspan.span("parent"):
        for _ in range(3):
            with hotspan.span("child"):
                pass
        children = hotspan.drain()
    parent_table = hotspan.drain()
    assert children.num_rows == 3 and parent_table.num_rows == 1
    parent = parent_table.to_pylist()[0]
    assert (
        parent["self_ns"] == parent["duration_ns"] - pc.sum(children.column("duration_ns")).as_py()
    )
    _check(pa.concat_tables([children, parent_table]).unify_dictionaries())


def test_task_left_running_under_a_span_and_instants():
    async def background() -> None:
        with hotspan.span("bg"):
            await asyncio.sleep(0.003)

    async def main() -> None:
        with hotspan.span("outer"):
            task = asyncio.ensure_future(background())
            await asyncio.sleep(0)  # the task starts under outer
            with hotspan.span("sync_child"):
                hotspan.instant("mark")
                await asyncio.sleep(0.001)  # overlaps bg
        await task

    asyncio.run(main())
    table = hotspan.drain()
    assert (table.column("self_ns").to_numpy() >= 0).all()
    outer = _row(table, "outer")
    assert _row(table, "mark")["self_ns"] == 0
    assert 0 <= outer["self_ns"] <= outer["duration_ns"]


def test_formats_keep_the_column(tmp_path):
    with hotspan.span("p"):
        with hotspan.span("c"):
            pass
    table = hotspan.drain()
    for name in ("t.parquet", "t.arrow", "t.csv", "t.jsonl"):
        hotspan.export(table, tmp_path / name)
        back = hotspan.load(tmp_path / name)
        assert back.column("self_ns").to_pylist() == table.column("self_ns").to_pylist(), name
    # CSV and JSON lines carry it as a plain column: a reader without hotspan sees it
    assert "self_ns" in (tmp_path / "t.csv").read_text().splitlines()[0]
    assert '"self_ns":' in (tmp_path / "t.jsonl").read_text().splitlines()[0]


def test_a_table_without_the_column_gets_it_on_load(tmp_path):
    with hotspan.span("p"):
        with hotspan.span("c"):
            pass
    table = hotspan.drain()
    import pyarrow.parquet as pq

    pq.write_table(
        table.drop_columns(["self_ns"]), tmp_path / "old.parquet"
    )  # a file from before the column
    back = hotspan.load(tmp_path / "old.parquet")
    assert back.column("self_ns").to_pylist() == table.column("self_ns").to_pylist()


def test_foreign_chrome_json_gets_self_time(tmp_path):
    # Two overlapping async-style children under one parent on one thread, as complete events.
    events = [
        {"name": "parent", "ph": "X", "ts": 0, "dur": 100, "pid": 1, "tid": 1},
        {"name": "a", "ph": "X", "ts": 10, "dur": 30, "pid": 1, "tid": 1},
        {"name": "b", "ph": "X", "ts": 50, "dur": 20, "pid": 1, "tid": 1},
        {"name": "b1", "ph": "X", "ts": 55, "dur": 5, "pid": 1, "tid": 1},
        {"name": "other", "ph": "X", "ts": 0, "dur": 100, "pid": 1, "tid": 2},
    ]
    path = tmp_path / "foreign.json"
    path.write_text(json.dumps({"traceEvents": events}))
    table = hotspan.load(path)
    got = {r["name"]: r["self_ns"] for r in table.to_pylist()}
    assert got == {"parent": 50_000, "a": 30_000, "b": 15_000, "b1": 5_000, "other": 100_000}


def test_shared_function_merges_overlapping_children():
    # children of one parent overlapping (tasks), one reaching past the parent's end, a
    # device row (another thread id) that is not a child for self time
    rows = [
        (1, None, 0, 100, 7),
        (2, 1, 10, 40, 7),
        (3, 1, 20, 60, 7),
        (4, 1, 90, 130, 7),
        (5, 1, 0, 100, -1),
        (6, 3, 25, 30, 7),
    ]
    table = pa.table(
        {
            "span_id": pa.array([r[0] for r in rows], pa.uint64()),
            "parent_id": pa.array([r[1] for r in rows], pa.uint64()),
            "start_ns": pa.array([r[2] for r in rows], pa.int64()),
            "end_ns": pa.array([r[3] for r in rows], pa.int64()),
            "thread_id": pa.array([r[4] for r in rows], pa.int64()),
        }
    )
    # parent: 100 - |[10,60] u [90,100]| = 100 - 60 = 40
    assert self_ns_column(table).to_pylist() == [40, 30, 35, 40, 100, 5]


def _rule(rows: list[tuple]) -> list[int]:
    """The rule row by row (span_id, parent_id, start, end, thread, pid): children on the
    parent's thread and process, clipped to it, their union's length taken off."""
    row_of: dict = {}
    for i, r in enumerate(rows):
        row_of.setdefault(r[0], i)  # an id given twice: its first row is the parent
    children: dict[int, list[tuple[int, int]]] = {}
    for i, (_id, parent, start, end, thread, pid) in enumerate(rows):
        p = row_of.get(parent) if parent is not None else None
        if p is None or p == i or rows[p][4:] != (thread, pid):
            continue
        s, e = max(start, rows[p][2]), min(end, rows[p][3])
        if e > s:
            children.setdefault(p, []).append((s, e))
    out = []
    for i, (_id, _parent, start, end, _thread, _pid) in enumerate(rows):
        covered, reach = 0, None
        for s, e in sorted(children.get(i, [])):
            s = s if reach is None else max(s, reach)
            if e > s:
                covered += e - s
                reach = e
        out.append(max(0, max(end - start, 0) - covered))
    return out


@pytest.mark.parametrize("ids", ["dense", "spread", "strings"])
def test_shared_function_follows_the_rule_in_any_row_order(ids):
    # Random forests on two threads of two processes: overlapping siblings, children past
    # their parent, a parent on another thread or process, missing parents, a span its own
    # parent, an id twice; rows in random order (not by start: the kernel's second pass),
    # ids a dense range (array lookup), spread wide (hash lookup) or strings.
    rng = np.random.default_rng(35)
    for trial in range(200):
        n = int(rng.integers(1, 80))
        raw = rng.permutation(n) + 1
        raw[rng.random(n) < 0.05] = raw[0]  # an id twice
        parent = [int(raw[j]) if rng.random() > 0.15 else None for j in rng.integers(0, n, n)]
        parent = [p if rng.random() > 0.05 else n + 1000 for p in parent]  # not in the table
        start = rng.integers(0, 200, n)
        end = start + rng.integers(0, 80, n)
        thread, pid = rng.integers(0, 2, n), rng.integers(0, 2, n)
        rows = [
            (int(raw[i]), parent[i], int(start[i]), int(end[i]), int(thread[i]), int(pid[i]))
            for i in range(n)
        ]
        if ids == "spread":
            key = lambda v: None if v is None else v * (1 << 50) + 3  # noqa: E731
        elif ids == "strings":
            key = lambda v: None if v is None else f"s{v}"  # noqa: E731
        else:
            key = lambda v: None if v is None else v + (1 << 40)  # noqa: E731
        table = pa.table(
            {
                "span_id": [key(r[0]) for r in rows],
                "parent_id": pa.array(
                    [key(r[1]) for r in rows], pa.string() if ids == "strings" else pa.uint64()
                ),
                "start_ns": pa.array(start, pa.int64()),
                "end_ns": pa.array(end, pa.int64()),
                "thread_id": pa.array(thread, pa.int64()),
                "pid": pa.array(pid, pa.int64()),
            }
        )
        assert self_ns_column(table).to_pylist() == _rule(rows), (ids, trial)


def _forest_in_trace_order(rng: np.random.Generator, anywhere: bool) -> list[tuple]:
    """Rows (span_id, parent_id, start, end, thread, pid) as a loader gives them: a thread
    at a time, each parent before its children, siblings by start (overlapping, reaching
    past their parent or starting before it, instants). Some rows have a parent on another thread, none in the
    table, or themselves: only where a root may stand, or (``anywhere``) at any place."""
    rows: list[tuple] = []
    ids = iter(range(1, 1 << 20))

    def odd_parent(own: int, thread: int) -> int:
        kind = rng.integers(0, 3)
        others = [r[0] for r in rows if r[4] != thread]
        if kind == 0 and others:
            return others[int(rng.integers(0, len(others)))]  # on another thread
        return (1 << 30) if kind == 1 else own  # none in the table; itself

    def span(parent: int | None, start: int, level: int, thread: int, pid: int) -> None:
        own = next(ids)
        if (parent is None and rng.random() < 0.2) or (anywhere and rng.random() < 0.05):
            parent = odd_parent(own, thread)
        end = start + int(rng.integers(0, 100)) if rng.random() > 0.03 else start - 5
        rows.append((own, parent, start, end, thread, pid))
        at = start - 10 if rng.random() < 0.1 else start  # a first child may start before it
        for _ in range(int(rng.integers(0, 4)) if level < 4 else 0):
            at += int(rng.integers(0, 40))  # by start; may overlap the last, or pass the end
            span(own, at, level + 1, thread, pid)

    for thread in range(int(rng.integers(1, 4))):
        at = int(rng.integers(0, 50))
        for _ in range(int(rng.integers(1, 4))):
            span(None, at, 0, thread, thread % 2)
            at += int(rng.integers(0, 150))
    return rows


def _columns(rows: list[tuple]) -> tuple:
    return (
        np.array([r[2] for r in rows], np.int64),
        np.array([r[3] for r in rows], np.int64),
        np.array([r[0] for r in rows], np.uint64),
        np.array([r[1] or 0 for r in rows], np.uint64),
        np.array([r[1] is not None for r in rows], np.uint8),
        np.array([r[4] for r in rows], np.int64),
        np.array([r[5] for r in rows], np.int64),
    )


def test_the_stack_pass_follows_the_rule_for_a_loaders_rows():
    # A loader's rows (a thread at a time, by start, parents first) take the pass that keeps
    # only the open spans on a stack; it gives the rule's answer, the same as the general
    # pass (the rows visited through an order: parents looked up by id) gives.
    from hotspan._span_tree import self_times, stacked_self_times

    rng = np.random.default_rng(351)
    for trial in range(300):
        rows = _forest_in_trace_order(rng, anywhere=False)
        columns = _columns(rows)
        stacked = stacked_self_times(*columns)
        assert stacked is not None, trial
        assert stacked.tolist() == _rule(rows), trial
        general = self_times(*columns, order=np.arange(len(rows)))
        assert general is not None and general.tolist() == stacked.tolist(), trial


def test_the_stack_pass_gives_up_rather_than_answer_wrong():
    # Rows it cannot follow: a parent on its own thread closed before a child comes (a row
    # with a foreign or missing parent inside a tree, a thread's rows split in two runs),
    # children out of start order, an id given twice. The pass answers the rule or gives
    # up (None), and self_times answers the rule either way; each case gives up sometimes.
    from hotspan._span_tree import self_times, stacked_self_times

    rng = np.random.default_rng(352)
    gave_up: dict[str, int] = {}
    for trial in range(300):
        rows = _forest_in_trace_order(rng, anywhere=True)
        case = ["inside", "split", "unsorted", "twice"][trial % 4]
        if case == "split" and len(rows) > 2:
            cut = int(rng.integers(1, len(rows)))
            rows = rows[cut:] + rows[:cut]  # a thread's rows in two runs, parents maybe last
        elif case == "unsorted" and len(rows) > 2:
            i = int(rng.integers(0, len(rows) - 1))
            rows[i], rows[i + 1] = rows[i + 1], rows[i]
        elif case == "twice" and len(rows) > 2:
            i, j = sorted(rng.choice(len(rows), 2, replace=False).tolist())
            rows[j] = (rows[i][0],) + rows[j][1:]  # its children: row i's, by the rule
        columns = _columns(rows)
        stacked = stacked_self_times(*columns)
        if stacked is None:
            gave_up[case] = gave_up.get(case, 0) + 1
        else:
            assert stacked.tolist() == _rule(rows), (case, trial)
        values = self_times(*columns)
        if values is None:  # children out of start order: the caller's second call
            values = self_times(*columns, order=np.argsort(columns[0], kind="stable"))
        assert values.tolist() == _rule(rows), (case, trial)
    assert sorted(gave_up) == ["inside", "split", "twice", "unsorted"], gave_up


def test_shared_function_answers_a_million_rows_of_trees():
    # The loaders' self time (Chrome JSON, Perfetto) over a loader-sized table: 1 M rows of
    # 10-span trees, each root's self time its length less its nine children's. Its speed
    # (issue 35: codecs at 10 M spans a second) is benchmarks/bench_export.py's, not a test's.
    n = 1_000_000
    rows = np.arange(n)
    root = rows - rows % 10
    table = pa.table(
        {
            "span_id": pa.array(rows + 1, pa.uint64()),
            "parent_id": pa.array(root + 1, pa.uint64(), mask=rows % 10 == 0),
            "start_ns": pa.array(rows * 100, pa.int64()),
            "end_ns": pa.array(np.where(rows % 10 == 0, rows * 100 + 1000, rows * 100 + 50)),
            "thread_id": pa.array(np.zeros(n, np.int64)),
        }
    )
    values = self_ns_column(table).to_numpy()
    assert (values[rows % 10 == 0] == 1000 - 9 * 50).all()
    assert (values[rows % 10 != 0] == 50).all()


def test_a_table_with_null_times_is_refused_by_name(tmp_path):
    # Self time is computed before the schema check (nulls read as 0 there): the export
    # still refuses the table naming the column, rather than failing inside the kernel.
    table = pa.table(
        {
            "span_id": pa.array([1, 2], pa.uint64()),
            "parent_id": pa.array([None, 1], pa.uint64()),
            "name": ["a", "b"],
            "category": pa.array([None, None], pa.string()),
            "start_ns": pa.array([1, None], pa.int64()),
            "end_ns": [5, 4],
            "duration_ns": [4, 2],
            "depth": pa.array([0, 1], pa.int32()),
            "thread_id": [1, 1],
            "thread_name": ["m", "m"],
            "pid": [1, 1],
            "rank": pa.array([0, 0], pa.int32()),
            "arg": pa.array([None, None], pa.int64()),
            "error": [False, False],
        }
    )
    with pytest.raises(ValueError, match="column 'start_ns' has 1 null value"):
        hotspan.export(table, tmp_path / "t.parquet")


def test_the_kernel_refuses_an_order_that_names_no_row():
    from hotspan._span_tree import self_times

    one = np.zeros(2, np.int64)
    ids = np.array([1, 2], np.uint64)
    with pytest.raises(ValueError, match="is not a row"):
        self_times(one, one, ids, ids, np.zeros(2, np.uint8), one, None, np.array([0, 5]))
