"""Self time by stack: the tree a flame graph (or icicle) draws, from the span tree
(public as ``hotspan.analysis.flamegraph``; here, below the formats that draw it too).

    tree = flame_tree(table)                  # merged: one tree over every rank and thread
    tree = flame_tree(table, per="rank")      # one subtree per rank under the root
    lines = folded_stacks(table)              # ["step [train];forward [train/compute] 1234", ...]

A *frame* is a span's ``(category, name)``; a *stack* is the frames from a root span down to
a span, following ``parent_id``. Every span adds its self time (its duration minus the time
its children cover: :func:`span_self_ns`) to the node of its stack, so the self times of the
nodes of one frame add up to ``stats``' ``self_ns`` of that (category, name) group.

Everything is whole-column numpy: the only Python loops run over tree levels (the depth of
the deepest stack) and over the nodes of the result, never over spans.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import pyarrow as pa

from ._columns import column_codes, combined_codes, parent_rows, to_numpy

__all__ = ["PER", "FlameTree", "flame_tree", "folded_stacks", "frame_label", "span_self_ns"]

#: How the stacks are split at the top: ``merged`` (one tree), ``rank`` (a subtree per
#: rank), ``thread`` (a subtree per rank and thread).
PER = ("merged", "rank", "thread")
Per = Literal["merged", "rank", "thread"]


def span_self_ns(table: pa.Table) -> np.ndarray:
    """Per row, the span's self time in ns: its duration minus the time covered by the union
    of its children's intervals (a device row is not a host span's child in time: it runs
    beside it), never below zero.

    The ``self_ns`` column where the table has one (computed where spans become a table);
    otherwise computed by the same rule (:func:`hotspan._selftime.self_ns_column`). The one
    place the flame views, the folded and speedscope exports and the notebook display get
    self time from, so they agree with ``stats``.
    """
    if "self_ns" in table.column_names and table.column("self_ns").null_count == 0:
        return to_numpy(table.column("self_ns"), np.int64)
    from ._selftime import self_ns_column

    return np.asarray(self_ns_column(table).to_numpy(zero_copy_only=False), np.int64)


def _same_side_children(table: pa.Table, parent: np.ndarray) -> np.ndarray:
    """Rows whose parent is in the table and on the same side (host or device) as they are."""
    child = parent >= 0
    on_device = to_numpy(table.column("thread_id"), np.int64) < 0
    same_side: np.ndarray = child & (on_device == on_device[np.where(child, parent, 0)])
    return same_side


def frame_label(name: str | None, category: str | None) -> str:
    """How a frame is written in folded stacks and speedscope: ``name [category]``, or the
    name alone for a span without a category. ``;`` (the folded separator) and line breaks
    become spaces."""
    text = "" if name is None else str(name)
    if category:
        text = f"{text} [{category}]"
    return text.replace(";", ":").replace("\n", " ").replace("\r", " ")


@dataclass
class FlameTree:
    """The nodes of a flame graph, in creation order (a parent before its children).

    Node 0 is the root (everything); with ``per="rank"``/``"thread"`` its children are one
    node per rank/thread (``kind`` ``"lane"``), below them the frames (``kind`` ``"frame"``).
    """

    label: list[str]  # what the node shows: the span's name, or "rank 0" for a lane
    name: list[str | None]
    category: list[str | None]
    kind: list[str]  # "root", "lane" or "frame"
    parent: np.ndarray  # node index of the parent, -1 for the root
    self_ns: np.ndarray  # int64: summed self time of the spans with this stack
    total_ns: np.ndarray  # int64: self_ns of the node and every node below it
    count: np.ndarray  # int64: spans with this stack
    per: str

    def __len__(self) -> int:
        return len(self.label)

    def stacks(self) -> list[tuple[list[str], int]]:
        """Each node with self time, as (frame labels from the top down, self ns); the
        root is left out, lanes are written as their label."""
        out: list[tuple[list[str], int]] = []
        path: list[list[str]] = []
        parent = self.parent.tolist()
        self_ns = self.self_ns.tolist()
        for node in range(len(self.label)):
            if self.kind[node] == "root":
                path.append([])
                continue
            own = (
                self.label[node]
                if self.kind[node] == "lane"
                else frame_label(self.name[node], self.category[node])
            )
            path.append(path[parent[node]] + [own])
            if self_ns[node] > 0:
                out.append((path[node], int(self_ns[node])))
        return out

    def to_json(self) -> dict[str, Any]:
        """A compact JSON-able form for the browser views: parallel arrays, one entry a node
        (``p``: parent index, ``s``: self ns, ``t``: total ns, ``n``: span count; ``c``:
        index into ``categories``, -1 for none)."""
        categories = sorted({c for c in self.category if c is not None})
        index = {c: i for i, c in enumerate(categories)}
        return {
            "per": self.per,
            "label": self.label,
            "k": [{"root": 0, "lane": 1, "frame": 2}[k] for k in self.kind],
            "c": [-1 if c is None else index[c] for c in self.category],
            "p": self.parent.tolist(),
            "s": self.self_ns.tolist(),
            "t": self.total_ns.tolist(),
            "n": self.count.tolist(),
            "categories": categories,
        }


def flame_tree(table: pa.Table, per: Per = "merged") -> FlameTree:
    """The flame graph of ``table``: self time by stack of (category, name) frames.

    ``per``: ``"merged"`` (one tree), ``"rank"`` (a subtree per rank) or ``"thread"`` (per
    rank and thread). Device rows (``device="cuda"``) start stacks of their own: they run
    on the device, beside their host span. A span whose parent is not in the table (drained
    earlier, filtered out) starts a stack too.
    """
    if per not in PER:
        raise ValueError(f"per must be one of {', '.join(PER)}, not {per!r}")
    n = table.num_rows
    labels: list[str] = ["all"]
    names: list[str | None] = [None]
    categories: list[str | None] = [None]
    kinds: list[str] = ["root"]
    node_parent: list[np.ndarray] = [np.array([-1], np.int64)]
    node_level: list[np.ndarray] = [np.zeros(1, np.int64)]
    if n == 0:
        zero = np.zeros(1, np.int64)
        return FlameTree(
            labels, names, categories, kinds, node_parent[0], zero, zero.copy(), zero.copy(), per
        )

    parent = parent_rows(table)
    parent = np.where(_same_side_children(table, parent), parent, -1)
    self_ns = span_self_ns(table)
    frame, frame_rows = combined_codes(table, ("category", "name"))
    n_frames = len(frame_rows)
    name_code, name_values = column_codes(table.column("name"))
    category_code, category_values = column_codes(table.column("category"))
    frame_names = [name_values[int(name_code[r])].as_py() for r in frame_rows.tolist()]
    frame_categories = [category_values[int(category_code[r])].as_py() for r in frame_rows.tolist()]

    # The lanes: the nodes right under the root (or the root itself when merged).
    lane_node = np.zeros(n, np.int64)
    if per != "merged":
        columns = ("rank",) if per == "rank" else ("rank", "pid", "thread_id")
        lane, lane_rows = combined_codes(table, columns)
        ranks = to_numpy(table.column("rank"), np.int64)
        if per == "rank":
            lane_labels = [f"rank {ranks[r]}" for r in lane_rows.tolist()]
        else:
            thread_names = table.column("thread_name").take(pa.array(lane_rows)).to_pylist()
            tids = to_numpy(table.column("thread_id"), np.int64)[lane_rows]
            lane_labels = [
                f"r{ranks[r]} {tn or tid} ({tid})"
                for r, tn, tid in zip(lane_rows.tolist(), thread_names, tids.tolist())
            ]
        order = sorted(
            range(len(lane_labels)), key=lambda i: (int(ranks[lane_rows[i]]), lane_labels[i])
        )
        position = np.empty(len(order), np.int64)
        position[order] = 1 + np.arange(len(order))
        lane_node = position[lane]
        for i in order:
            labels.append(lane_labels[i])
            names.append(None)
            categories.append(None)
            kinds.append("lane")
        node_parent.append(np.zeros(len(order), np.int64))
        node_level.append(np.ones(len(order), np.int64))

    # Level by level from the roots: a row's node is (its parent's node, its frame).
    node = np.full(n, -1, np.int64)
    ready = parent < 0
    n_nodes = len(labels)
    while True:
        if not ready.any():
            pending = node < 0
            if not pending.any():
                break
            # A parent_id cycle (a damaged file): what is left starts stacks of its own.
            parent = np.where(pending & (node[np.maximum(parent, 0)] < 0), -1, parent)
            ready = pending & ((parent < 0) | (node[np.maximum(parent, 0)] >= 0))
            continue
        rows = np.flatnonzero(ready)
        above = np.where(parent[rows] < 0, lane_node[rows], node[np.maximum(parent[rows], 0)])
        key = above * n_frames + frame[rows]
        distinct, inverse = np.unique(key, return_inverse=True)
        node[rows] = n_nodes + inverse.reshape(-1)
        new_parent, new_frame = np.divmod(distinct, n_frames)
        node_parent.append(new_parent)
        node_level.append(np.concatenate(node_level)[new_parent] + 1)
        for f in new_frame.tolist():
            labels.append("" if frame_names[f] is None else str(frame_names[f]))
            names.append(frame_names[f])
            categories.append(frame_categories[f])
            kinds.append("frame")
        n_nodes += len(distinct)
        # The next level: rows whose parent just got its node.
        just = np.zeros(n, np.bool_)
        just[rows] = True
        ready = (parent >= 0) & just[np.maximum(parent, 0)] & (node < 0)

    parents = np.concatenate(node_parent)
    node_self = np.bincount(node, weights=self_ns, minlength=n_nodes).astype(np.int64)
    # Exact integer sums: bincount goes through float64, fine below 2**53 ns (104 days) a node.
    count = np.bincount(node, minlength=n_nodes).astype(np.int64)
    total = node_self.copy()
    # Deepest level first: each level's totals are complete before they fold into the next.
    level = np.concatenate(node_level)
    for depth in range(int(level.max()), 0, -1):
        at = np.flatnonzero(level == depth)
        np.add.at(total, parents[at], total[at])
    return FlameTree(labels, names, categories, kinds, parents, node_self, total, count, per)


def folded_stacks(table: pa.Table, per: Per = "merged") -> list[str]:
    """Collapsed stacks with self time in ns, one line a stack (``a;b;c 1234``), as
    ``flamegraph.pl`` and inferno read them (``.folded``)."""
    return [f"{';'.join(stack)} {value}" for stack, value in flame_tree(table, per).stacks()]
