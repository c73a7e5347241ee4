"""speedscope's file format (``.speedscope.json``): one *evented* profile per thread, each
span an open and a close event of its frame, for https://www.speedscope.app (its "Time
Order", "Left Heavy" and "Sandwich" views) and speedscope's command line.

The format is specified by speedscope's published JSON schema
(https://www.speedscope.app/file-format-schema.json). Frames are shared by every profile:
one per (category, name), written ``name [category]`` as in folded stacks. Times are ns
from the trace's first span (epoch ns exceed a double's 53 exact bits). Events of one
profile must nest: asyncio tasks whose span trees overlap on their thread go to profiles of
their own ("lane 1", ...: the lanes of the trace formats, :mod:`hotspan.formats._lanes`).
Zero-length spans (instants) have no time to show and are left out.

Written, never loaded back: a speedscope file keeps no span ids, pids or args.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from .._schema import META_TASKS
from .._flame import frame_label
from .._columns import column_codes, combined_codes, to_numpy
from ._base import Exporter, TraceFileError
from ._lanes import LANE_BASE, assign_lanes

__all__ = ["SCHEMA_URL", "SpeedscopeExporter", "speedscope_document"]

SCHEMA_URL = "https://www.speedscope.app/file-format-schema.json"


def speedscope_document(table: pa.Table, *, name: str = "hotspan") -> dict[str, Any]:
    """The speedscope file of ``table`` as a JSON-able dict."""
    doc: dict[str, Any] = {
        "$schema": SCHEMA_URL,
        "shared": {"frames": []},
        "profiles": [],
        "name": name,
        "activeProfileIndex": 0,
        "exporter": "hotspan",
    }
    keep = to_numpy(table.column("duration_ns"), np.int64) > 0
    table = table.filter(pa.array(keep))
    if table.num_rows == 0:
        return doc
    # The overlap search always runs (the table's "no asyncio tasks" note is not trusted
    # here: a file's events that do not nest are refused by speedscope as a whole); its
    # sorts cost little next to the events written one by one below.
    metadata = dict(table.schema.metadata or {})
    table, lanes = assign_lanes(table.replace_schema_metadata({**metadata, META_TASKS: b"1"}))
    start = to_numpy(table.column("start_ns"), np.int64)
    end = to_numpy(table.column("end_ns"), np.int64)
    depth = to_numpy(table.column("depth"), np.int64)
    t0 = int(start.min())
    wall = int(end.max()) - t0

    frame, frame_rows = combined_codes(table, ("category", "name"))
    name_code, name_values = column_codes(table.column("name"))
    category_code, category_values = column_codes(table.column("category"))
    doc["shared"]["frames"] = [
        {
            "name": frame_label(
                name_values[int(name_code[r])].as_py(),
                category_values[int(category_code[r])].as_py(),
            )
        }
        for r in frame_rows.tolist()
    ]

    lane, lane_rows = combined_codes(table, ("rank", "pid", "thread_id"))
    ranks = to_numpy(table.column("rank"), np.int64)
    tids = to_numpy(table.column("thread_id"), np.int64)
    thread_names = table.column("thread_name").take(pa.array(lane_rows)).to_pylist()
    lane_number: dict[int, int] = {}
    for synthetic in sorted(lanes):
        lane_number[synthetic] = (
            sum(1 for other in lane_number if lanes[other] == lanes[synthetic]) + 1
        )
    profiles = []
    # Rows by lane, then in preorder: by start, the outer (later-ending, shallower) first.
    order = np.lexsort((depth, -end, start, lane))
    bounds = np.flatnonzero(np.diff(lane[order])) + 1
    for rows in np.split(order, bounds):
        representative = int(lane[rows[0]])
        r = int(lane_rows[representative])
        tid = int(tids[r])
        real = lanes.get(tid, tid)
        label = f"rank {int(ranks[r])} · {thread_names[representative] or real} ({real})"
        if tid in lanes:
            label += f" lane {lane_number[tid]}"
        profiles.append(
            (
                int(ranks[r]),
                real,
                tid >= LANE_BASE and tid in lanes,
                label,
                _events(start[rows] - t0, end[rows] - t0, frame[rows]),
            )
        )
    profiles.sort(key=lambda p: (p[0], p[1], p[2], p[3]))
    doc["profiles"] = [
        {
            "type": "evented",
            "name": label,
            "unit": "nanoseconds",
            "startValue": 0,
            "endValue": wall,
            "events": events,
        }
        for _rank, _tid, _lane, label, events in profiles
    ]
    return doc


def _events(start: np.ndarray, end: np.ndarray, frame: np.ndarray) -> list[dict[str, Any]]:
    """Open and close events of one lane's spans (given in preorder), properly nested: a
    span that would outlast the span it opened in (a damaged or foreign trace) is cut at
    its end, as speedscope would refuse the file otherwise."""
    events: list[dict[str, Any]] = []
    stack: list[tuple[int, int]] = []  # (end, frame) of the open spans
    for s, e, f in zip(start.tolist(), end.tolist(), frame.tolist()):
        while stack and stack[-1][0] <= s:
            closing_end, closing_frame = stack.pop()
            events.append({"type": "C", "frame": closing_frame, "at": closing_end})
        if stack and e > stack[-1][0]:
            e = stack[-1][0]
        events.append({"type": "O", "frame": f, "at": s})
        stack.append((e, f))
    while stack:
        closing_end, closing_frame = stack.pop()
        events.append({"type": "C", "frame": closing_frame, "at": closing_end})
    return events


class SpeedscopeExporter(Exporter):
    keeps_metadata = False
    readable = False

    def _write(self, table: pa.Table, path: Path) -> None:
        # ``path`` is the temporary ``.<target>.<hex>.part`` beside the target: named after the target.
        target = path.name[1:].rsplit(".", 2)[0] if path.name.endswith(".part") else path.name
        document = speedscope_document(table, name=target.removesuffix(".speedscope.json"))
        with open(path, "w", encoding="utf-8") as out:
            json.dump(document, out, separators=(",", ":"))

    def _read(self, path: Path) -> pa.Table:
        raise TraceFileError(
            path,
            "a speedscope file keeps no span ids, processes or args: it is written, "
            "never loaded; load the trace it came from",
        )
