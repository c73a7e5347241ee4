"""A flame graph of a change: the new run's flame graph, each frame coloured by how its
stack's time changed from the base run, under the same noise rule as ``compare``'s verdicts.

    tree = diff_flame_tree(base, new)        # per frame of the new run: its time before and after
    page = diff_flame_html(base, new)        # a standalone page (hotspan compare --flame OUT.html)
    doc = diff_speedscope(base, new)         # both runs as one speedscope file, a profile each

A frame is sized by the new run's time (its stack's total: self time of it and every frame
below it), and its title says the change of that total against the same stack in the base
run (``+52%``). Its colour follows the verdict ``hotspan.compare`` gives its span group
(category, name): red when the group is slower, blue when it is faster, the deeper the
larger the stack's change; grey when the group's change is within the noise (``same``, or
too few spans to judge), however large the stack's change; orange for a stack the base run
does not have. Stacks of the base run that are gone have no width in the new run: they are
listed under the graph.
"""

from __future__ import annotations

import html
import json
from typing import Any

import pyarrow as pa

from .._flame import flame_tree, frame_label
from ._flame import asset, prune

__all__ = ["diff_flame_html", "diff_flame_tree", "diff_speedscope"]

#: Colours: no change worth a word, a stack only in the new run.
SAME, NEW = "#c9c9c9", "#f0a040"


def _shade(change: float, slower: bool) -> str:
    """Red (slower) or blue (faster), deeper with the size of the change (full at 100%)."""
    strength = max(0.25, min(1.0, abs(change)))
    light = round(88 - 40 * strength)
    return f"hsl({0 if slower else 215},75%,{light}%)"


def diff_flame_tree(
    base: pa.Table, new: pa.Table, verdicts: dict[tuple[Any, Any], str] | None = None
) -> dict[str, Any]:
    """The new run's flame tree (merged over ranks and threads) with, per node, the base
    run's total for the same stack (``b``, 0 where it has none), the change in words (``d``)
    and the colour (``col``); plus the stacks that are gone (``gone``: label path and base
    total). ``verdicts``: ``{(category, name): verdict}`` as ``hotspan.compare`` gives them
    (computed when None)."""
    if verdicts is None:
        from ..analysis._api import compare

        rows = compare(base, new).to_pylist()
        verdicts = {(r["category"], r["name"]): r["verdict"] for r in rows}
    before, after = flame_tree(base, "merged"), flame_tree(new, "merged")
    base_total = dict(zip(_stacks(before.to_json()), before.total_ns.tolist()))
    data = prune(after)
    kept_paths = _stacks(data)
    totals_new = data["t"]
    b, d, col = [], [], []
    for node, path in enumerate(kept_paths):
        old = base_total.get(path)
        b.append(0 if old is None else int(old))
        if node == 0:
            change = (totals_new[0] - old) / old if old else None
            d.append("" if change is None else f"{change * 100:+.0f}%")
            col.append(SAME)
            continue
        if old is None or old == 0:
            d.append("new")
            col.append(NEW)
            continue
        change = (totals_new[node] - old) / old
        d.append(f"{change * 100:+.0f}%")
        category = data["categories"][data["c"][node]] if data["c"][node] >= 0 else None
        verdict = verdicts.get((category, data["label"][node]), "same")
        if verdict == "slower" and change > 0:
            col.append(_shade(change, True))
        elif verdict == "faster" and change < 0:
            col.append(_shade(change, False))
        else:
            col.append(SAME)
    data.update(b=b, d=d, col=col)
    present = set(kept_paths)
    data["gone"] = [
        {"stack": list(path), "base_ns": int(total)}
        for path, total in base_total.items()
        if path and path not in present and path[:-1] in present
    ]
    return data


def _stacks(data: dict[str, Any]) -> list[tuple[str, ...]]:
    """Each node's stack, as frame labels from the top down (the root: ()), of a tree's JSON
    form (``FlameTree.to_json``, pruned or not: parents come before their children)."""
    out: list[tuple[str, ...]] = []
    categories = data["categories"]
    for node, parent in enumerate(data["p"]):
        if parent < 0:
            out.append(())
            continue
        category = categories[data["c"][node]] if data["c"][node] >= 0 else None
        out.append(out[parent] + (frame_label(data["label"][node], category),))
    return out


def diff_flame_html(
    base: pa.Table,
    new: pa.Table,
    *,
    verdicts: dict[tuple[Any, Any], str] | None = None,
    title: str = "hotspan: what changed",
    element_id: str = "diff-flame",
) -> str:
    """A standalone HTML page: the differential flame graph of ``new`` against ``base``
    (the same flame view as the report's, coloured by change), offline."""
    tree = diff_flame_tree(base, new, verdicts)
    data = {"trees": {"merged": tree}, "initial": "merged", "colours": {}, "none": SAME}
    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    gone = "".join(
        f"<li>{html.escape(' › '.join(g['stack']))}: {g['base_ns'] / 1e6:,.2f} ms in the base run</li>"
        for g in sorted(tree["gone"], key=lambda g: -g["base_ns"])[:50]
    )
    legend = (
        '<div class="fl-note">Width: the new run\'s time. Colour: '
        f'<b style="color:{_shade(0.6, True)}">slower</b> and '
        f'<b style="color:{_shade(-0.6, False)}">faster</b> where the frame\'s span group is '
        "significantly so (the verdict of <code>hotspan compare</code>, deeper for a larger change), "
        f'<b style="color:#888">grey</b> within the noise, <b style="color:{NEW}">orange</b> new. '
        "Hover a frame for its change.</div>"
    )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{asset('flame.css')}"
        "body{font:13px system-ui,sans-serif;margin:16px}</style></head><body>"
        f"<h1 style='font-size:18px'>{html.escape(title)}</h1>"
        f'<div class="hs-flame" id="{html.escape(element_id)}">'
        '<div class="fl-bar"><span class="fl-crumbs"></span></div>'
        '<div class="fl-view"></div><div class="fl-tip" role="tooltip"></div>'
        f"{legend}"
        f'<script type="application/json" class="fl-data">{payload}</script></div>'
        + (
            f"<h2 style='font-size:14px'>Gone from the new run</h2><ul class='gone'>{gone}</ul>"
            if gone
            else ""
        )
        + f"<script>{asset('flame.js')}</script></body></html>"
    )


def diff_speedscope(base: pa.Table, new: pa.Table) -> dict[str, Any]:
    """Both runs as one speedscope file: a profile each (``base``, ``new``) over one table
    of frames, for people who compare in speedscope (its profile menu switches)."""
    from ..formats._speedscope import speedscope_document

    first = speedscope_document(base, name="base")
    second = speedscope_document(new, name="new")
    frames = list(first["shared"]["frames"])
    index = {json.dumps(f, sort_keys=True): i for i, f in enumerate(frames)}
    remap = []
    for frame in second["shared"]["frames"]:
        key = json.dumps(frame, sort_keys=True)
        if key not in index:
            index[key] = len(frames)
            frames.append(frame)
        remap.append(index[key])
    profiles = []
    for label, doc, mapping in (("base", first, None), ("new", second, remap)):
        for profile in doc["profiles"]:
            profile = dict(profile)
            profile["name"] = f"{label}: {profile.get('name', '')}".rstrip(": ")
            if mapping is not None:
                profile["events"] = [{**e, "frame": mapping[e["frame"]]} for e in profile["events"]]
            profiles.append(profile)
    return {
        **first,
        "shared": {"frames": frames},
        "profiles": profiles,
        "name": "hotspan: base and new",
    }
