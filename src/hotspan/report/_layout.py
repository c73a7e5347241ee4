"""What the terminal Gantt and the HTML timeline share: lanes (one per rank/thread, and one
per set of asyncio task trees that overlap on a thread, as the trace exports lay them out:
``formats.lanes``), categories in a stable order, and the time each category holds in each
cell of a lane."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa

from .._columns import column_codes, combined_codes, to_numpy, parent_rows

__all__ = ["Layout", "category_order", "cell_coverage", "error_cells", "layout"]


@dataclass
class Layout:
    """The columns of a span table as numpy arrays, plus lanes and category codes."""

    start: np.ndarray  # int64 ns
    end: np.ndarray
    duration: np.ndarray
    depth: np.ndarray
    error: np.ndarray  # bool
    lane: np.ndarray  # per row: 0 .. len(lane_labels) - 1, ordered by rank then first span
    lane_labels: list[str]
    category: np.ndarray  # per row: 0 .. len(categories) - 1, largest total time first
    categories: list[str]  # a null category shows as "(none)"
    parent: np.ndarray  # row of the parent span, -1 for none

    @property
    def t0(self) -> int:
        return int(self.start.min()) if len(self.start) else 0

    @property
    def t1(self) -> int:
        return int(self.end.max()) if len(self.end) else 0


def category_order(time_per_category: Mapping[str, int | float]) -> list[str]:
    """Categories (paths; ``(none)`` for spans without one) in the order their colours are
    taken from the palette: most time first, then by name. One rule for the timeline, the
    flame graph and serve's phases bars, so a category has one colour on every view."""
    return sorted(time_per_category, key=lambda c: (-time_per_category[c], c))


def layout(table: pa.Table) -> Layout:
    from ..formats._lanes import assign_lanes

    start = to_numpy(table.column("start_ns"), np.int64)
    end = to_numpy(table.column("end_ns"), np.int64)
    duration = end - start
    # Task trees that overlap on a thread (asyncio) go to lanes of their own, as the trace
    # exports place them: {synthetic thread id: real one}; rows keep their order.
    laned, task_lanes = assign_lanes(table)
    lane, representative = combined_codes(laned, ("rank", "pid", "thread_id"))
    n_lanes = len(representative)
    tids = laned.column("thread_id").take(pa.array(representative)).to_pylist()
    real_tids = [task_lanes.get(t, t) for t in tids]
    # a task lane's number on its thread (0: the thread's own), in the exports' order
    per_thread: dict[int, list[int]] = {}
    for synthetic in sorted(task_lanes):
        per_thread.setdefault(task_lanes[synthetic], []).append(synthetic)
    number = {t: k + 1 for lanes in per_thread.values() for k, t in enumerate(lanes)}
    sub = np.array([number.get(t, 0) for t in tids], np.int64)
    thread_lane = np.empty(n_lanes, np.int64)  # each lane's own thread's lane code
    own = {
        (r, p, t): i
        for i, (r, p, t) in enumerate(
            zip(
                to_numpy(laned.column("rank"), np.int64)[representative].tolist(),
                laned.column("pid").take(pa.array(representative)).to_pylist(),
                tids,
            )
        )
        if t not in task_lanes
    }
    first_start = np.full(n_lanes, np.iinfo(np.int64).max)
    np.minimum.at(first_start, lane, start)
    ranks = to_numpy(table.column("rank"), np.int64)[representative]
    pids = table.column("pid").take(pa.array(representative)).to_pylist()
    for i in range(n_lanes):
        thread_lane[i] = own.get((int(ranks[i]), pids[i], real_tids[i]), i)
    # lanes by rank, then by when their thread started; a thread's task lanes right below it
    order = np.lexsort((sub, first_start[thread_lane], ranks))
    position = np.empty(n_lanes, np.int64)
    position[order] = np.arange(n_lanes)
    names = table.column("thread_name").take(pa.array(representative)).to_pylist()
    one_pid_per_rank = len(set(zip(ranks.tolist(), pids))) == len(set(ranks.tolist()))
    labels: list[str] = []
    for i in order:
        label = f"r{ranks[i]} {names[i] or real_tids[i]}"
        if not one_pid_per_rank:
            label += f" pid {pids[i]}"
        labels.append(label)
    if len(set(zip(labels, sub[order].tolist()))) != len(labels):
        # two threads of one name: tell them apart by id
        labels = [f"{label} ({real_tids[i]})" for label, i in zip(labels, order)]
    labels = [f"{label} tasks {sub[i]}" if sub[i] else label for label, i in zip(labels, order)]

    code, values = column_codes(table.column("category"))
    time_per_value = np.zeros(len(values), np.int64)
    np.add.at(time_per_value, code, duration)
    value_list = values.to_pylist()
    labels_of_values = ["(none)" if v is None else v for v in value_list]
    position_of = {label: i for i, label in enumerate(labels_of_values)}
    category_names = category_order(dict(zip(labels_of_values, time_per_value.tolist())))
    value_order = np.array([position_of[label] for label in category_names], np.int64)
    rename = np.empty(len(values), np.int64)
    rename[value_order] = np.arange(len(values))
    categories = [labels_of_values[i] for i in value_order]
    return Layout(
        start=start,
        end=end,
        duration=duration,
        depth=to_numpy(table.column("depth"), np.int64),
        error=to_numpy(table.column("error").fill_null(False), np.bool_),
        lane=position[lane],
        lane_labels=labels,
        category=rename[code] if len(code) else code,
        categories=categories,
        parent=parent_rows(table),
    )


def cell_coverage(lay: Layout, w0: int, w1: int, width: int, n_categories: int) -> np.ndarray:
    """Self time (ns) of each category in each cell: an array (lanes, width, categories).

    A cell's time goes to the innermost span running in it: every span adds its overlap
    with the cell to its own category and takes its overlap back from its parent's, so
    the sum over categories is the time the lane was inside any span. Categories from
    ``n_categories - 1`` on are folded into the last one.
    """
    n_lanes = len(lay.lane_labels)
    out = np.zeros(n_lanes * width * n_categories, np.float64)
    span = max(w1 - w0, 1)
    keep = (lay.duration > 0) & (lay.end > w0) & (lay.start < w1)
    rows = np.flatnonzero(keep)
    if not len(rows):
        return out.reshape(n_lanes, width, n_categories)
    cell_ns = span / width
    s = (np.clip(lay.start[rows], w0, w1) - w0).astype(np.float64)
    e = (np.clip(lay.end[rows], w0, w1) - w0).astype(np.float64)
    first = np.clip(np.floor(s / cell_ns), 0, width - 1).astype(np.int64)
    last = np.clip(np.ceil(e / cell_ns) - 1, first, width - 1).astype(np.int64)
    cells = last - first + 1
    which = np.repeat(np.arange(len(rows)), cells)
    cell = first[which] + np.arange(cells.sum()) - np.repeat(np.cumsum(cells) - cells, cells)
    overlap = np.minimum(e[which], (cell + 1) * cell_ns) - np.maximum(s[which], cell * cell_ns)
    overlap = np.maximum(overlap, 0.0)
    own = np.minimum(lay.category[rows], n_categories - 1)[which]
    base = lay.lane[rows][which] * width + cell
    np.add.at(out, base * n_categories + own, overlap)
    parent = lay.parent[rows][which]
    nested = parent >= 0
    parent_category = np.minimum(lay.category[parent[nested]], n_categories - 1)
    np.add.at(out, base[nested] * n_categories + parent_category, -overlap[nested])
    return out.reshape(n_lanes, width, n_categories)


def error_cells(lay: Layout, w0: int, w1: int, width: int) -> np.ndarray:
    """(lanes, width) bool: a span ended with an error in that cell."""
    marks = np.zeros((len(lay.lane_labels), width), np.bool_)
    hit = lay.error & (lay.end >= w0) & (lay.end <= w1)
    if hit.any():
        cell = np.clip(((lay.end[hit] - w0) * width) // max(w1 - w0, 1), 0, width - 1)
        marks[lay.lane[hit], cell] = True
    return marks
