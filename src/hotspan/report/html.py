"""A self-contained HTML report: summary, statistics, phases and a timeline per
rank/thread with details on hover. Everything (CSS, JS, data) is inline: the file opens
offline, from an e-mail or a CI artifact.

The timeline is ``hotspan serve``'s own drawing (``serve/static/timeline.js``, a canvas as
wide as its container, wheel to zoom, drag to pan), fed from the library's timeline of the
whole run embedded in the page instead of the server: per track, the spans at least a pixel
of ``REPORT_BINS`` long exactly and the shorter ones summarised per pixel, so a large trace
stays small.
"""

from __future__ import annotations

import datetime as _dt
import html
import json
import math
from typing import Any, Mapping

import numpy as np
import pyarrow as pa

from .._schema import (
    META_ARGV,
    META_DROPPED,
    META_ENV,
    META_HOST,
    META_PYTHON,
    META_START,
    META_VERSION,
)
from ..analysis.statistics import STAT_COLUMNS, phases, stats
from .._columns import column_codes, to_numpy
from .._units import human_bytes, human_count, human_ns, human_rate
from ._flame import asset, flame_html
from ._layout import Layout, category_order, layout

__all__ = [
    "MAX_STAT_ROWS",
    "PALETTE",
    "REPORT_BINS",
    "SECTIONS",
    "category_colours",
    "colours_by_time",
    "html_report",
    "rank_list",
    "timeline_data",
    "timeline_script",
]

MAX_STAT_ROWS = 300
PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#76b7b2",
    "#edc948",
    "#ff9da7",
    "#9c755f",
    "#86bcb6",
    "#8cd17d",
    "#d4a6c8",
    "#a0cbe8",
)


#: The parts of the report, in page order.
SECTIONS = ("summary", "timeline", "flame", "stats", "phases")


def html_report(
    table: pa.Table, *, title: str = "hotspan report", sections: tuple[str, ...] = SECTIONS
) -> str:
    """The report as one HTML document (a string). ``sections``: which parts of it
    (``hotspan serve`` shows the timeline alone inside its run page)."""
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise ValueError(
            f"unknown report section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}"
        )
    lay = layout(table)
    css = _CSS + (asset("flame.css") if "flame" in sections else "")
    parts = [_HEAD.replace("@TITLE@", html.escape(title)).replace("@CSS@", css)]
    spans_json = "[]"
    if "summary" in sections:
        parts.append(f"<h1>{html.escape(title)}</h1>")
        parts.append(_summary(table, lay))
    if "timeline" in sections:
        if table.num_rows:
            parts.append("<h2>Timeline</h2>")
            parts.append(_legend(lay))
            parts.append(_timeline(table, lay))
        else:
            parts.append("<p>The trace holds no spans.</p>")
    if "flame" in sections:
        parts.append("<h2>Flame graph</h2>")
        if table.num_rows:
            parts.append(flame_html(table, category_colours(lay), standalone=False))
        else:
            parts.append("<p>The trace holds no spans.</p>")
    if "stats" in sections:
        parts.append("<h2>Statistics</h2>")
        parts.append(_stats_table(table))
    if "phases" in sections:
        parts.append("<h2>Phases</h2>")
        parts.append(_phases_table(table))
    parts.append('<div id="tip" role="tooltip"></div>')
    parts.append("<script>const SPANS=" + spans_json + ";\n" + _JS + "</script>")
    if "flame" in sections and table.num_rows:
        parts.append("<script>" + asset("flame.js") + "</script>")
    parts.append("</body></html>\n")
    return "\n".join(parts)


# --------------------------------------------------------------------------- summary


def _meta(table: pa.Table, key: bytes) -> str | None:
    meta = table.schema.metadata or {}
    value = meta.get(key)
    return value.decode("utf-8", "replace") if value is not None else None


def _summary(table: pa.Table, lay: Layout) -> str:
    n = table.num_rows
    items: list[tuple[str, str]] = [("spans", f"{n:,}")]
    if n:
        ranks = sorted(set(to_numpy(table.column("rank"), np.int64).tolist()))
        items += [
            ("threads", f"{len(lay.lane_labels):,}"),
            # A count first, then the ids: "ranks 0" alone read as "no ranks".
            ("ranks", rank_list(ranks)),
            ("wall time", human_ns(lay.t1 - lay.t0)),
            ("errors", f"{int(lay.error.sum()):,}"),
        ]
    dropped = _meta(table, META_DROPPED)
    if dropped:
        try:
            items.append(("dropped", f"{int(json.loads(dropped).get('total', 0)):,}"))
        except (ValueError, AttributeError, TypeError):
            pass
    # The environment it was recorded in, in words (not its digest): host, Python, hotspan
    # and the recorder's configuration; the separate keys first, the env record for the rest.
    try:
        env = json.loads(_meta(table, META_ENV) or "{}")
    except ValueError:
        env = {}
    env = env if isinstance(env, dict) else {}
    for label, key in (("host", META_HOST), ("hotspan", META_VERSION), ("python", META_PYTHON)):
        value = _meta(table, key) or (str(env[label]) if env.get(label) else None)
        if value:
            items.append((label, value))
    config = env.get("config")
    if isinstance(config, dict) and config:
        words = []
        for name, value in config.items():
            if name == "memory_cap" and isinstance(value, int):
                value = human_bytes(value)
            elif isinstance(value, int) and not isinstance(value, bool):
                value = f"{value:,}"
            words.append(f"{name} {value}")
        items.append(("configuration", ", ".join(words)))
    start = _meta(table, META_START)
    if start and start.isdigit() and int(start) > 0:
        when = _dt.datetime.fromtimestamp(int(start) / 1e9, _dt.timezone.utc)
        items.append(("recorded", when.strftime("%Y-%m-%d %H:%M:%S UTC")))
    argv = _meta(table, META_ARGV)
    if argv:
        try:
            items.append(("command", " ".join(json.loads(argv))))
        except (ValueError, TypeError):
            pass
    cells = "".join(
        f'<div class="card"><div class="k">{html.escape(k)}</div><div class="v">{html.escape(v)}</div></div>'
        for k, v in items
    )
    return f'<section class="summary">{cells}</section>'


# --------------------------------------------------------------------------- timeline


def rank_list(ranks: list[int]) -> str:
    """How many ranks, then which: ``1 (rank 0)``, ``4 (ranks 0, 1, 2, 3)``, ``64 (ranks 0, 1, ... 63)``."""
    if not ranks:
        return "0"
    ids = (
        ", ".join(map(str, ranks))
        if len(ranks) <= 8
        else ", ".join(map(str, ranks[:7])) + f", ... {ranks[-1]}"
    )
    return f"{len(ranks)} ({'rank' if len(ranks) == 1 else 'ranks'} {ids})"


def _color(category: int) -> str:
    return PALETTE[category % len(PALETTE)]


def category_colours(lay: Layout) -> dict[str, str]:
    """Category path -> its colour in the timeline (and so in the flame view)."""
    return {name: _color(i) for i, name in enumerate(lay.categories)}


def colours_by_time(time_per_category: Mapping[str, int | float]) -> dict[str, str]:
    """Category path -> colour, from each category's summed span time, as the timeline
    takes them (:func:`~hotspan.report._layout.category_order`): for views that have the
    statistics and not the spans (serve's phases bars)."""
    return {name: _color(i) for i, name in enumerate(category_order(time_per_category))}


def _legend(lay: Layout) -> str:
    entries = "".join(
        f'<span class="lg"><i style="background:{_color(i)}"></i>{html.escape(name)}</span>'
        for i, name in enumerate(lay.categories[:40])
    )
    return f'<div class="legend">{entries}<span class="lg"><i class="e"></i>error</span></div>'


#: Pixels of the timeline embedded in the report, for its whole run: finer than a screen, so
#: the report zooms in a few times before its pixels show; a track with at most this many
#: spans is embedded exactly (every span, at any zoom).
REPORT_BINS = 4096


def timeline_script() -> str:
    """serve's timeline drawing (``serve/static/timeline.js``): the one drawing code of the
    timeline, which the report feeds from the data it embeds instead of the server."""
    from pathlib import Path

    return (Path(__file__).resolve().parent.parent / "serve" / "static" / "timeline.js").read_text(
        encoding="utf-8"
    )


def timeline_data(table: pa.Table, lay: Layout) -> dict[str, Any]:
    """The library's timeline of the whole run (:func:`hotspan.analysis.timeline.timeline`,
    the answer ``GET /v1/traces/{id}/timeline`` gives) at ``REPORT_BINS`` pixels, with what the
    report adds: each track's label (its thread's name), each span's category colour and
    error, each pixel's colour (its busiest name's category)."""
    from ..analysis.timeline import timeline

    view: dict[str, Any] = timeline(table, lay.t0, max(lay.t1, lay.t0) + 1, REPORT_BINS)
    ids = to_numpy(table.column("span_id"), np.uint64)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    name_code, name_values = column_codes(table.column("name"))
    names = ["" if v is None else str(v) for v in name_values.to_pylist()]
    _codes, first = np.unique(name_code, return_index=True)
    name_colour = {names[name_code[i]]: _color(int(lay.category[i])) for i in first.tolist()}
    pid = to_numpy(table.column("pid"), np.int64)
    tid = to_numpy(table.column("thread_id"), np.int64)
    thread_names = table.column("thread_name").to_pylist()
    thread_label: dict[tuple[int, int], str] = {}
    keys, where = np.unique(np.stack([pid, tid], 1), axis=0, return_index=True)
    for (p, t), i in zip(keys.tolist(), where.tolist()):
        thread_label[(p, t)] = str(thread_names[i] or t)
    for track in view["tracks"]:
        # as the layout labels lanes (the legend, the terminal Gantt): r<rank> <thread>
        thread = thread_label.get((track["pid"], track["thread_id"]), str(track["thread_id"]))
        label = f"r{track['rank']} {thread}"
        track["label"] = label + (f" tasks {track['lane']}" if track["lane"] else "")
        for span in track["spans"]:
            k = int(np.searchsorted(sorted_ids, np.uint64(span["span_id"])))
            row = int(order[min(k, len(order) - 1)])
            span["colour"] = _color(int(lay.category[row]))
            if lay.error[row]:
                span["error"] = True
        for pixel in track["pixels"]:
            pixel["colour"] = name_colour.get(pixel["name"], PALETTE[0])
    return view


def _timeline(table: pa.Table, lay: Layout) -> str:
    data = json.dumps(timeline_data(table, lay), separators=(",", ":")).replace("</", "<\\/")
    return (
        f'<div id="timeline-view" class="tlview" data-run="report" data-start="{lay.t0}" '
        f'data-end="{max(lay.t1, lay.t0) + 1}"><canvas aria-label="timeline"></canvas>'
        '<div class="tl-tip" hidden></div><p class="tl-status note"></p></div>\n'
        f"<script>window.hotspanTimelineData={data};</script>\n"
        f"<script>{timeline_script()}</script>"
    )


# --------------------------------------------------------------------------- tables


def _percent(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 100:.1f}%"


#: Header tooltips: what the less obvious columns mean.
_HEAD_TITLES = {
    "self": "total minus the time of direct children",
    "share": "self time over the summed self time of the trace: the column adds up to 100%",
    "busy": "total over the trace's wall time (nested spans count twice)",
}


def _stats_table(table: pa.Table) -> str:
    from ..analysis.statistics import split_instants

    result, instants = split_instants(stats(table))  # instants: counted apart, below the table
    head = (
        "category",
        "name",
        "count",
        "total",
        "self",
        "mean",
        "min",
        "p50",
        "p90",
        "p99",
        "max",
        "share",
        "busy",
        "errors",
        "arg sum",
        "arg/s",
    )
    rows = []
    for r in result.slice(0, MAX_STAT_ROWS).to_pylist():
        # A device row's group (stats' default key "device" with device rows): named with its device.
        name = r["name"] if r.get("device", "host") == "host" else f"{r['name']} [{r['device']}]"
        cells = [
            (r["category"] or "", None),
            (name, None),
            (f"{r['count']:,}", r["count"]),
            *(
                (human_ns(r[c]), r[c])
                for c in STAT_COLUMNS
                if c.endswith("_ns")  # stats()' durations, in its order
            ),
            (_percent(r["share"]), r["share"]),
            (_percent(r["busy"]), r["busy"]),
            (f"{r['errors']:,}", r["errors"]),
            (human_count(r["arg_sum"]), r["arg_sum"]),
            (human_rate(r["arg_per_s"]), r["arg_per_s"]),  # as the CLI writes it: 2.76 k/s
        ]
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(text))}</td>"
                if sort is None
                else f'<td class="n" data-v="{sort}">{html.escape(text)}</td>'
                for text, sort in cells
            )
            + "</tr>"
        )
    more = ""
    if result.num_rows > MAX_STAT_ROWS:
        more = f'<p class="note">The {MAX_STAT_ROWS} largest of {result.num_rows:,} groups.</p>'
    header = "".join(
        f'<th title="{html.escape(_HEAD_TITLES[h])}">{h}</th>'
        if h in _HEAD_TITLES
        else f"<th>{h}</th>"
        for h in head
    )
    if instants.num_rows:
        listed = ", ".join(
            f"{html.escape(str(r['name']))} ×{r['count']:,}" for r in instants.to_pylist()
        )
        more += f'<p class="note instants">Instants (no duration, counted apart): {listed}.</p>'
    return (
        f'<table class="stats sortable"><thead><tr>{header}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
        f"{more}"
    )


def _phases_table(table: pa.Table) -> str:
    result = phases(table).to_pylist()
    if not result:
        return '<p class="note">No categories: nothing to break down.</p>'
    rows = []
    for r in result:
        sub = r["phase"] != r["category"]
        rank = "mean" if r["rank"] is None else str(r["rank"])
        share = r["share"] if r["share"] is not None and not math.isnan(r["share"]) else 0.0
        bar = f'<span class="bar" style="width:{min(share, 1.0) * 100:.1f}%"></span>' if sub else ""
        rows.append(
            f'<tr class="{"sub" if sub else "top"}"><td>{rank}</td><td>{html.escape(r["phase"])}</td>'
            f'<td class="n">{human_ns(r["time_ns"])}</td><td class="n">{human_count(r["steps"])}</td>'
            f'<td class="n">{human_ns(r["per_step_ns"])}</td>'
            f'<td class="share">{bar}<span>{share * 100:.1f}%</span></td></tr>'
        )
    return (
        '<table class="phases"><thead><tr><th>rank</th><th>phase</th><th>time</th><th>steps</th>'
        f"<th>per step</th><th>share</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


# --------------------------------------------------------------------------- page

_HEAD = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>@CSS@</style>
</head><body>"""

_CSS = """
body{font:13px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:20px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 12px}h2{font-size:16px;margin:24px 0 8px}
.summary{display:flex;flex-wrap:wrap;gap:8px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px 10px;min-width:90px;max-width:600px}
.card .k{color:#777;font-size:11px;text-transform:uppercase}.card .v{font-weight:600;overflow-wrap:anywhere}
.legend{margin:4px 0 8px}.lg{margin-right:14px;white-space:nowrap}
.lg i{display:inline-block;width:11px;height:11px;margin-right:4px;vertical-align:-1px;border-radius:2px}
.lg i.e{background:#fff;border:2px solid #d62728;width:7px;height:7px}
.timeline{overflow-x:auto;background:#fff;border:1px solid #ddd;border-radius:6px;padding:6px}
.tlview{position:relative;background:#fff;border:1px solid #ddd;border-radius:6px;padding:4px;max-width:100%;box-sizing:border-box}
.tlview canvas{display:block;width:100%;height:60px;cursor:grab}
.tl-tip{position:absolute;background:#263238;color:#fff;font-size:11px;padding:3px 6px;border-radius:4px;pointer-events:none;max-width:260px;overflow-wrap:anywhere}
table.stats{display:block;overflow-x:auto;max-width:100%}
.lane{display:flex;align-items:flex-start;border-bottom:1px solid #eee}
.lane .label{flex:0 0 170px;font-size:12px;padding:1px 6px 0 0;overflow:hidden;white-space:nowrap;text-overflow:ellipsis}
.lane svg{flex:0 0 auto;display:block}
svg text{font-size:10px;fill:#222;pointer-events:none}
svg.axis text{fill:#666}svg.axis line,line.grid{stroke:#e4e4e4;stroke-width:1;vector-effect:non-scaling-stroke}
rect.s,rect.m{cursor:pointer}rect.s{stroke:#fff;stroke-width:.5;vector-effect:non-scaling-stroke}
rect.e{stroke:#d62728;stroke-width:2;vector-effect:non-scaling-stroke}
rect.sel,rect:hover{stroke:#000;stroke-width:2;vector-effect:non-scaling-stroke}
#tip{position:fixed;display:none;background:#222;color:#fff;padding:6px 9px;border-radius:4px;font-size:12px;
 pointer-events:none;max-width:420px;z-index:9;white-space:pre-line}
#tip.pinned{outline:2px solid #f28e2b}
table{border-collapse:collapse;background:#fff;font-size:12px}
th,td{border:1px solid #e2e2e2;padding:3px 7px;text-align:left}th{background:#f0f0f0;cursor:pointer;user-select:none}
td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.top td{font-weight:600;background:#f7f7f7}tr.sub td:nth-child(2){padding-left:22px}
td.share{position:relative;min-width:120px}td.share span{position:relative}
.bar{position:absolute;left:0;top:2px;bottom:2px;background:#cfe0f3}
.note{color:#777;font-size:11px}
"""

_JS = r"""
(function(){
  const tip=document.getElementById('tip');
  function ns(v){if(v==null)return '-';const a=Math.abs(v);
    if(a>=1e9)return (v/1e9).toFixed(2)+' s';if(a>=1e6)return (v/1e6).toFixed(2)+' ms';
    if(a>=1e3)return (v/1e3).toFixed(2)+' us';return v+' ns';}
  function text(i){const s=SPANS[i];if(!s)return '';
    const [name,cat,start,dur,arg,err,depth,count,lane]=s;
    let t=(count>1?count.toLocaleString()+' spans merged, longest: ':'')+name+'\n';
    t+='category: '+cat+'\nthread: '+lane+'   depth: '+depth+'\n';
    t+='start: +'+ns(start)+'\n'+(count>1?'total: ':'duration: ')+ns(dur);
    if(arg!=null)t+='\narg: '+arg.toLocaleString();
    if(err)t+='\nERROR: '+(count>1?'some ended':'ended')+' with an exception';
    return t;}
  let pinned=null;
  function show(r,x,y){tip.textContent=text(+r.dataset.i);tip.style.display='block';
    const w=tip.offsetWidth,h=tip.offsetHeight;
    tip.style.left=Math.max(4,Math.min(x+12,innerWidth-w-4))+'px';
    tip.style.top=(y+14+h>innerHeight?y-h-8:y+14)+'px';}
  function pin(r){if(pinned)pinned.classList.remove('sel');pinned=r;tip.classList.toggle('pinned',!!r);
    if(r){r.classList.add('sel');const b=r.getBoundingClientRect();show(r,b.left,b.bottom);}}
  document.addEventListener('mouseover',e=>{const r=e.target.closest('rect[data-i]');
    if(r&&!pinned)show(r,e.clientX,e.clientY);});
  document.addEventListener('mousemove',e=>{const r=e.target.closest('rect[data-i]');
    if(r&&!pinned)show(r,e.clientX,e.clientY);});
  document.addEventListener('mouseout',e=>{if(!pinned&&e.target.closest('rect[data-i]'))tip.style.display='none';});
  document.addEventListener('click',e=>{const r=e.target.closest('rect[data-i]');
    if(r){history.replaceState(null,'','#span-'+r.dataset.i);pin(r);}
    else if(pinned){pin(null);tip.style.display='none';history.replaceState(null,'',' ');}});
  function fromHash(){const m=/^#span-(\d+)$/.exec(location.hash);if(!m)return;
    const r=document.querySelector('rect[data-i="'+m[1]+'"]');if(r){r.scrollIntoView({block:'center'});pin(r);}}
  window.addEventListener('hashchange',fromHash);fromHash();
  document.querySelectorAll('table.sortable th').forEach((th,col)=>th.addEventListener('click',()=>{
    const body=th.closest('table').tBodies[0];const rows=[...body.rows];const down=th.dataset.dir!=='desc';
    th.dataset.dir=down?'desc':'asc';
    const key=r=>{const c=r.cells[col];return c.dataset.v!==undefined?(c.dataset.v===''||c.dataset.v==='None'?-Infinity:+c.dataset.v):c.textContent;};
    rows.sort((a,b)=>{const x=key(a),y=key(b);const o=x<y?-1:x>y?1:0;return down?-o:o;});
    rows.forEach(r=>body.appendChild(r));}));
})();
"""
