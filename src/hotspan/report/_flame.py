"""The flame view (an icicle of self time by stack) as an HTML fragment: the report's
"flame" section, serve's run page (through that section, in a frame) and the notebook
display all draw it with the same assets (``assets/flame.js``, ``assets/flame.css``),
inlined so the page opens offline.

The tree is :func:`hotspan.analysis.flamegraph.flame_tree`: merged over ranks and threads,
and, for a trace of several ranks, per rank too (a toggle).
"""

from __future__ import annotations

import html
import json
from functools import cache
from importlib import resources
from typing import Any

import numpy as np
import pyarrow as pa

from .._flame import FlameTree, flame_tree
from .._columns import to_numpy

__all__ = ["MIN_SHARE", "NO_CATEGORY", "asset", "flame_html", "prune"]

#: Nodes thinner than this share of the whole are left out of the page: never drawn (under
#: half a pixel at any zoom short of 1/100 of the trace) and they would bloat the data.
MIN_SHARE = 1e-6
#: The colour of a frame without a category.
NO_CATEGORY = "#c7c7c7"


@cache
def asset(name: str) -> str:
    """A file of ``report/assets`` (the flame view's script and style)."""
    return (resources.files(__package__) / "assets" / name).read_text(encoding="utf-8")


def prune(tree: FlameTree, min_share: float = MIN_SHARE) -> dict[str, Any]:
    """``tree.to_json()`` without the nodes under ``min_share`` of the root's total (their
    time stays in their ancestors' totals)."""
    data = tree.to_json()
    keep = tree.total_ns >= tree.total_ns[0] * min_share
    keep[0] = True
    if keep.all():
        return data
    new_index = np.cumsum(keep) - 1
    rows = np.flatnonzero(keep).tolist()
    for key in ("label", "k", "c", "s", "t", "n"):
        data[key] = [data[key][i] for i in rows]
    data["p"] = [-1 if tree.parent[i] < 0 else int(new_index[tree.parent[i]]) for i in rows]
    return data


def flame_html(
    table: pa.Table, colours: dict[str, str], *, element_id: str = "flame", standalone: bool = True
) -> str:
    """The flame view of ``table``: a ``<div class="hs-flame">`` with its data, preceded by
    the style and followed by the script when ``standalone`` (a page that holds the view
    once; the report inlines them itself). ``colours``: category path -> CSS colour, as the
    timeline draws them."""
    ranks = np.unique(to_numpy(table.column("rank"), np.int64)) if table.num_rows else np.zeros(0)
    trees = {"merged": prune(flame_tree(table, "merged"))}
    if len(ranks) > 1:
        trees["rank"] = prune(flame_tree(table, "rank"))
    trees["thread"] = prune(flame_tree(table, "thread"))
    data = {"trees": trees, "initial": "merged", "colours": colours, "none": NO_CATEGORY}
    names = {"merged": "merged", "rank": "per rank", "thread": "per thread"}
    buttons = "".join(
        f'<button type="button" data-tree="{key}">{names[key]}</button>' for key in trees
    )
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    parts = []
    if standalone:
        parts.append(f"<style>{asset('flame.css')}</style>")
    parts.append(
        f'<div class="hs-flame" id="{html.escape(element_id)}">'
        f'<div class="fl-bar">{buttons}<span class="fl-crumbs"></span></div>'
        f'<div class="fl-view"></div><div class="fl-tip" role="tooltip"></div>'
        '<div class="fl-note">Width: time (self time of a frame and every frame below it); '
        "click a frame to zoom in, one above to zoom out; hover for totals and shares.</div>"
        f'<script type="application/json" class="fl-data">{payload}</script></div>'
    )
    if standalone:
        parts.append(f"<script>{asset('flame.js')}</script>")
    return "".join(parts)
