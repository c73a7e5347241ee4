"""asyncio tasks in the report and serve's timeline: task trees that overlap on a thread are
drawn in lanes of their own, the ones the trace exports give them (formats/_lanes.py)."""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from rich.console import Console

import hotspan
from hotspan.formats._lanes import assign_lanes
from hotspan.report._gantt import gantt
from hotspan.report.html import html_report
from hotspan.report._layout import layout

pytestmark = pytest.mark.usefixtures("fresh")


@pytest.fixture
def tasks():
    async def fetch(i: int) -> None:
        with hotspan.span("fetch", "io"):
            await asyncio.sleep(0.001 * (1 + i % 3))

    async def main() -> None:
        with hotspan.span("batch", "main"):
            await asyncio.gather(*(fetch(i) for i in range(8)))

    asyncio.run(main())
    return hotspan.drain()


def test_tasks_get_the_lanes_of_the_exports(tasks, tmp_path):
    _, mapping = assign_lanes(tasks)
    assert len(mapping) >= 7  # 8 overlapping tasks: the thread's track and 7 more at least
    lay = layout(tasks)
    assert len(lay.lane_labels) == 1 + len(mapping)
    assert lay.lane_labels[0] == "r0 MainThread"
    assert lay.lane_labels[1:] == [f"r0 MainThread tasks {k}" for k in range(1, len(mapping) + 1)]
    # the Chrome JSON export draws the same number of tracks
    hotspan.export(tasks, tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())
    events = events["traceEvents"] if isinstance(events, dict) else events
    tids = {e["tid"] for e in events if e.get("ph") == "X"}
    assert len(tids) == len(lay.lane_labels)
    # the report (and serve's run page, which shows the report's timeline) draws them
    page = html_report(tasks, sections=("timeline",))
    data = re.search(r"window\.hotspanTimelineData=(\{.*?\});</script>", page).group(1)
    labels = [track["label"] for track in json.loads(data)["tracks"]]
    assert labels == lay.lane_labels


def test_the_terminal_gantt_draws_task_lanes(tasks):
    console = Console(width=120, record=True)
    console.print(gantt(tasks, width=120))
    text = console.export_text()
    assert "tasks 1" in text


def test_threads_without_tasks_keep_one_lane_each():
    with hotspan.span("a"):
        with hotspan.span("b"):
            pass
    lay = layout(hotspan.drain())
    assert lay.lane_labels == ["r0 MainThread"]
