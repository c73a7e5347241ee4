"""Coroutines interleaving on one thread: each task's spans nest in that task's own
stack, under the span that was open where the task was created."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

import hotspan
from _util import rows

pytestmark = pytest.mark.usefixtures("fresh")


def _check_tree(rs, concurrent=()):
    """Every child inside its parent, depth = parent's + 1, siblings never overlap (but
    the root spans of tasks running concurrently, named in `concurrent`)."""
    by_id = {r["span_id"]: r for r in rs}
    children: dict = {}
    for r in rs:
        p = r["parent_id"]
        if p is None:
            assert r["depth"] == 0, r
            continue
        parent = by_id[p]
        assert r["depth"] == parent["depth"] + 1, (r, parent)
        assert parent["start_ns"] <= r["start_ns"] <= r["end_ns"] <= parent["end_ns"], (r, parent)
        children.setdefault(p, []).append(r)
    for kids in children.values():
        kids = sorted((r for r in kids if r["name"] not in concurrent), key=lambda r: r["start_ns"])
        for a, b in zip(kids, kids[1:]):
            assert a["end_ns"] <= b["start_ns"], (a, b)
    return by_id


def test_gather_of_100_tasks_gives_one_correct_tree_per_task():
    async def worker(i):
        with hotspan.span("task", "work"):
            await asyncio.sleep(0.001 * (i % 3))
            with hotspan.span("a"):
                await asyncio.sleep(0)
                with hotspan.span("b"):
                    await asyncio.sleep(0.001 * (i % 2))
                await asyncio.sleep(0)

    async def main():
        with hotspan.span("batch", "main"):
            await asyncio.gather(*(worker(i) for i in range(100)))

    asyncio.run(main())
    rs = rows(hotspan.drain())
    assert len(rs) == 301
    by_id = _check_tree(rs, concurrent={"task"})
    (batch,) = [r for r in rs if r["name"] == "batch"]
    tasks = [r for r in rs if r["name"] == "task"]
    assert all(t["parent_id"] == batch["span_id"] and t["depth"] == 1 for t in tasks)
    for r in rs:
        if r["name"] == "a":
            assert by_id[r["parent_id"]]["name"] == "task" and r["depth"] == 2
        if r["name"] == "b":
            assert by_id[r["parent_id"]]["name"] == "a" and r["depth"] == 3
    # one task's chain: each "b" under a distinct "a" under a distinct "task"
    assert len({r["parent_id"] for r in rs if r["name"] == "b"}) == 100
    assert len({r["parent_id"] for r in rs if r["name"] == "a"}) == 100


def test_traced_async_functions_nest_by_task():
    @hotspan.traced("leaf")
    async def leaf(i):
        await asyncio.sleep(0.0005 * (i % 4))

    @hotspan.traced("job")
    async def job(i):
        await leaf(i)
        await leaf(i + 1)

    async def main():
        await asyncio.gather(*(job(i) for i in range(50)))

    asyncio.run(main())
    rs = rows(hotspan.drain())
    assert len(rs) == 150
    by_id = _check_tree(rs, concurrent={"job"})
    assert max(r["depth"] for r in rs) == 1
    assert all(by_id[r["parent_id"]]["name"] == "job" for r in rs if r["name"] == "leaf")


def test_stats_self_time_is_never_negative_under_gather():
    async def worker(i):
        with hotspan.span("outer"):
            await asyncio.sleep(0.001 * (i % 3))
            with hotspan.span("inner"):
                await asyncio.sleep(0.001)

    async def main():
        await asyncio.gather(*(worker(i) for i in range(40)))

    asyncio.run(main())
    table = hotspan.drain()
    st = hotspan.stats(table)
    for row in st.to_pylist() if hasattr(st, "to_pylist") else st.to_dict("records"):
        for key, value in row.items():
            if "self" in key and isinstance(value, (int, float)):
                assert value >= 0, row


def test_sync_nesting_around_asyncio_run_is_kept():
    async def main():
        with hotspan.span("in_task"):
            await asyncio.sleep(0)

    with hotspan.span("outer"):
        asyncio.run(main())
        with hotspan.span("after"):
            pass
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert set(rs) == {"outer", "in_task", "after"}
    assert rs["in_task"]["parent_id"] == rs["outer"]["span_id"]
    assert rs["after"]["parent_id"] == rs["outer"]["span_id"]
    _check_tree(list(rs.values()))


def test_context_run_nests_under_the_open_span():
    with hotspan.span("outer"):
        contextvars.copy_context().run(
            lambda: hotspan.span("inside").__enter__().__exit__(None, None, None)
        )
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert rs["inside"]["parent_id"] == rs["outer"]["span_id"] and rs["inside"]["depth"] == 1


def test_a_context_from_another_thread_starts_roots():
    ctx = []

    def grab():
        with hotspan.span("other_thread"):
            ctx.append(contextvars.copy_context())

    th = threading.Thread(target=grab)
    th.start()
    th.join()
    ctx[0].run(lambda: hotspan.span("here").__enter__().__exit__(None, None, None))
    rs = {r["name"]: r for r in rows(hotspan.drain())}
    assert rs["here"]["parent_id"] is None and rs["here"]["depth"] == 0


def test_begin_end_tokens_inside_tasks():
    async def worker(i):
        tok = hotspan.begin("explicit")
        await asyncio.sleep(0.0005 * (i % 3))
        with hotspan.span("child"):
            await asyncio.sleep(0)
        hotspan.end(tok)

    async def main():
        with hotspan.span("root"):
            await asyncio.gather(*(worker(i) for i in range(20)))

    asyncio.run(main())
    rs = rows(hotspan.drain())
    assert len(rs) == 41
    by_id = _check_tree(rs, concurrent={"explicit"})
    assert all(by_id[r["parent_id"]]["name"] == "explicit" for r in rs if r["name"] == "child")


def test_tasks_creating_tasks_nest_through_every_level():
    async def leaf(i):
        with hotspan.span("leaf"):
            await asyncio.sleep(0.0002 * (i % 3))

    async def mid(i):
        with hotspan.span("mid"):
            await asyncio.sleep(0)
            await asyncio.gather(*(leaf(j) for j in range(5)))

    async def main():
        with hotspan.span("top"):
            await asyncio.gather(*(mid(i) for i in range(10)))

    asyncio.run(main())
    rs = rows(hotspan.drain())
    assert len(rs) == 1 + 10 + 50
    by_id = _check_tree(rs, concurrent={"mid", "leaf"})
    for r in rs:
        if r["name"] == "leaf":
            assert by_id[r["parent_id"]]["name"] == "mid" and r["depth"] == 2
        if r["name"] == "mid":
            assert by_id[r["parent_id"]]["name"] == "top" and r["depth"] == 1


def test_an_event_loop_on_another_thread_nests_by_task_and_the_thread_exits_cleanly():
    async def worker(i):
        with hotspan.span("w"):
            await asyncio.sleep(0.0003 * (i % 4))
            with hotspan.span("x"):
                await asyncio.sleep(0)

    async def main():
        await asyncio.gather(*(worker(i) for i in range(30)))

    def run():
        with hotspan.span("thread_root"):
            asyncio.run(main())

    threads = [threading.Thread(target=run) for _ in range(3)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    rs = rows(hotspan.drain())
    assert len(rs) == 3 * 61
    by_id = _check_tree(rs, concurrent={"w"})
    for r in rs:
        if r["name"] == "w":
            parent = by_id[r["parent_id"]]
            assert parent["name"] == "thread_root" and parent["thread_id"] == r["thread_id"]


def test_stacks_of_finished_tasks_are_freed():
    import gc

    async def worker():
        with hotspan.span("w"):
            await asyncio.sleep(0)

    async def main():
        for _ in range(5):
            await asyncio.gather(*(worker() for _ in range(200)))

    def stacks():
        return sum(1 for o in gc.get_objects() if type(o).__name__ == "_TaskStack")

    gc.collect()
    before = stacks()
    asyncio.run(main())
    gc.collect()
    assert stacks() - before < 20
    assert hotspan.drain().num_rows == 1000


def test_set_arg_and_instants_follow_the_task():
    async def worker(i):
        with hotspan.span("w"):
            await asyncio.sleep(0.0002 * (i % 3))
            hotspan.instant("mark")
            hotspan._native._set_arg(i)

    async def main():
        await asyncio.gather(*(worker(i) for i in range(20)))

    asyncio.run(main())
    rs = rows(hotspan.drain())
    by_id = {r["span_id"]: r for r in rs}
    ws = [r for r in rs if r["name"] == "w"]
    assert sorted(r["arg"] for r in ws) == list(range(20))
    marks = [r for r in rs if r["name"] == "mark"]
    assert len(marks) == 20 and {m["parent_id"] for m in marks} == {w["span_id"] for w in ws}
    assert all(
        by_id[m["parent_id"]]["start_ns"] <= m["start_ns"] <= by_id[m["parent_id"]]["end_ns"]
        for m in marks
    )


def test_tasks_started_before_any_span_are_marked_as_overlapping(tmp_path):
    """A fresh interpreter whose first spans are two tasks' roots (no span ever opened in
    the context that created them): the tasks overlap on one thread, so the table says so
    (``hotspan.tasks``) and a Chrome JSON export lays them on lanes of their own, as Perfetto
    needs (slices on one track must nest), instead of one overlapping the other."""
    import json
    import subprocess
    import sys

    script = tmp_path / "two_tasks.py"
    script.write_text(
        "import asyncio, sys, hotspan\n"
        "from hotspan.formats import export\n"
        "async def job(i):\n"
        "    with hotspan.span(f'job{i}', 'io'):\n"
        "        await asyncio.sleep(0.01 * i)\n"
        "async def main():\n"
        "    await asyncio.gather(job(1), job(3))\n"
        "asyncio.run(main())\n"
        "table = hotspan.drain()\n"
        "assert b'hotspan.tasks' in table.schema.metadata, table.schema.metadata\n"
        "export(table, sys.argv[1])\n"
    )
    out = tmp_path / "trace.json"
    result = subprocess.run(
        [sys.executable, str(script), str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    document = json.loads(out.read_text())
    events = document["traceEvents"] if isinstance(document, dict) else document
    jobs = {e["name"]: e for e in events if e.get("name") in ("job1", "job3")}
    assert set(jobs) == {"job1", "job3"}
    first, second = sorted(jobs.values(), key=lambda e: e["ts"])
    assert first["ts"] + first["dur"] > second["ts"], "the tasks overlap in time"
    assert first["tid"] != second["tid"], jobs  # so each on a lane of its own
    # and the lanes load back as the one real thread
    assert len(set(hotspan.load(out)["thread_id"].to_pylist())) == 1
