"""The pages of ``hotspan serve``: rendered on the server from the templates in
``templates/`` with the assets in ``static/`` (no build step, nothing from a CDN).

- ``/``: the runs (sortable columns, a filter by name), and a form to compare two;
- ``/runs/{id}``: the summary, phases per rank as a stacked bar each, the statistics, the
  timeline (``?rank=&step=``: on that step's window, that rank's tracks first; ``?critical=1``:
  the critical path drawn over it), the HTML report's timeline (``/runs/{id}/timeline``) and
  flame graph (``/runs/{id}/flame``), each in a frame, and "Open in Perfetto UI";
- ``/runs/{id}/ranks``: across ranks: the stragglers (as ``hotspan ranks``), a rank x step
  heatmap (blame, wait or step time; a cell links to the timeline at that rank and step)
  and the critical path's shares;
- ``/compare?base=&new=``: two runs span group by span group.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Literal, Optional

from fastapi import FastAPI, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from ..report.html import PALETTE, colours_by_time, rank_list
from .._units import human_bytes, human_count, human_ns, human_rate
from . import _queries as queries
from ._runs import Catalog, Run

__all__ = [
    "BAR_WIDTH",
    "HEATMAP_METRICS",
    "HERE",
    "MAX_STAT_ROWS",
    "STAT_COLUMNS",
    "add_pages",
    "category_colours",
    "phase_bars",
]

HERE = Path(__file__).resolve().parent

#: The stats columns the run page shows: heading -> (column, formatter).
STAT_COLUMNS = (
    ("count", "count", lambda v: f"{v:,}"),
    ("total", "total_ns", human_ns),
    ("self", "self_ns", human_ns),
    ("wait", "wait_ns", human_ns),
    ("mean", "mean_ns", human_ns),
    ("p50", "p50_ns", human_ns),
    ("p90", "p90_ns", human_ns),
    ("p99", "p99_ns", human_ns),
    ("max", "max_ns", human_ns),
    ("share", "share", lambda v: "-" if v is None else f"{v * 100:.1f}%"),
    ("errors", "errors", lambda v: f"{v:,}"),
    ("arg/s", "arg_per_s", human_rate),
)
MAX_STAT_ROWS = 300
#: The rank x step heatmap's metrics (columns of ``hotspan.rank_steps``): value -> label.
HEATMAP_METRICS = (("blame_ns", "blame"), ("wait_ns", "wait"), ("step_ns", "step time"))
BAR_WIDTH = 900  # the phases chart's bar area, in SVG units


def phase_bars(rows: list[dict[str, Any]], colours: dict[str, str]) -> dict[str, Any]:
    """The phases chart: per rank, a bar stacked from its phases (each top-level category's
    sub-categories, then the rest of the category's time as "<category> (other)"; a category
    without sub-categories is one segment), on one scale for all ranks. ``colours``:
    category path -> colour, as the timeline paints them (a "(other)" segment takes its
    category's). A bar sums the time of all the rank's threads: it may exceed the wall time."""
    ranks: dict[int, list[tuple[str, float]]] = {}
    tops: dict[tuple[int, str], float] = {}
    for r in rows:
        if r["rank"] is None or not r["time_ns"]:
            continue
        if r["phase"] == r["category"]:
            tops[(r["rank"], r["category"])] = r["time_ns"]
            ranks.setdefault(r["rank"], [])
    for r in rows:
        if r["rank"] is None or r["phase"] == r["category"] or not r["time_ns"]:
            continue
        ranks[r["rank"]].append((r["phase"], r["time_ns"]))
        tops[(r["rank"], r["category"])] -= r["time_ns"]
    for (rank, category), rest in tops.items():
        subs = [p for p, _ in ranks[rank] if p.split("/", 1)[0] == category]
        if rest > 0 or not subs:
            ranks[rank].append((f"{category} (other)" if subs else category, max(rest, 0.0)))
    phases = sorted({p for segs in ranks.values() for p, _ in segs})
    colour = {
        p: colours.get(p.removesuffix(" (other)"), PALETTE[i % len(PALETTE)])
        for i, p in enumerate(phases)
    }
    widest = max((sum(t for _, t in segs) for segs in ranks.values()), default=0.0) or 1.0
    bars = []
    for y, rank in enumerate(sorted(ranks)):
        x, segments = 0.0, []
        total = sum(t for _, t in ranks[rank])
        for phase, time in sorted(ranks[rank]):
            w = time / widest * BAR_WIDTH
            segments.append(
                {
                    "phase": phase,
                    "x": round(x, 2),
                    "w": round(w, 2),
                    "colour": colour[phase],
                    "label": f"rank {rank} · {phase}: {human_ns(time)} ({time / total * 100:.1f}%)"
                    if total
                    else phase,
                }
            )
            x += w
        bars.append(
            {
                "rank": rank,
                "y": y * 26,
                "segments": segments,
                "total": human_ns(total),
                "total_ns": total,
            }
        )
    return {
        "bars": bars,
        "legend": [(p, colour[p]) for p in phases],
        "width": BAR_WIDTH,
        "height": max(len(bars) * 26, 26),
    }


def category_colours(stats_rows: list[dict[str, Any]]) -> dict[str, str]:
    """The timeline's colour of each category, from the run's statistics (summed span time
    per category path, the rule the timeline's layout follows)."""
    time: dict[str, int] = {}
    for r in stats_rows:
        category = r["category"] if r["category"] is not None else "(none)"
        time[category] = time.get(category, 0) + int(r["total_ns"] or 0)
    return colours_by_time(time)


def add_pages(
    app: FastAPI,
    catalog: Catalog,
    run_or_404: Callable[[str], Run | JSONResponse],
    *,
    perfetto_ui: str,
) -> None:
    templates = Jinja2Templates(directory=str(HERE / "templates"))
    templates.env.filters.update(ns=human_ns, count=human_count, bytes=human_bytes, ranks=rank_list)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        return templates.TemplateResponse(request, name, context, status_code=status)

    def problem_page(request: Request, response: JSONResponse) -> HTMLResponse:
        import json

        detail = json.loads(bytes(response.body))["detail"]
        return page(request, "problem.html", status=response.status_code, detail=detail)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def runs_page(request: Request, q: str = Query("", max_length=200)) -> HTMLResponse:
        # Rows as objects: a template's ``r.path`` on a dict tries the attribute first, and
        # with thousands of rows that lookup was most of the page's time.
        runs = [SimpleNamespace(**r.entry()) for r in catalog.scan()]
        return page(request, "runs.html", runs=runs, q=q)

    @app.get("/runs/{id}", response_class=HTMLResponse, include_in_schema=False)
    def run_page(
        request: Request,
        id: str,
        rank: Optional[int] = Query(None, ge=-(2**31), le=2**31 - 1),
        step: Optional[int] = Query(None, ge=0, le=2**62),
        critical: bool = Query(False),
    ) -> HTMLResponse:
        run = run_or_404(id)
        if isinstance(run, JSONResponse):
            return problem_page(request, run)
        # ?rank=&step= (a cell of the ranks page): the timeline opens on that step's window,
        # that rank's tracks first and highlighted
        focus: dict[str, Any] | None = None
        if rank is not None:
            focus = {"rank": rank, "step": step, "window": None}
            if step is not None:
                focus["window"] = catalog.steady(
                    [run], lambda: queries.step_window(run, rank, step)
                )
        _keys, all_stats = catalog.steady([run], lambda: queries.stats_rows(run, None))
        # instants (no duration) counted apart, below the table
        stats = [r for r in all_stats if r.get("instants") != r["count"]]
        instants = [r for r in all_stats if r.get("instants") == r["count"]]
        phases = catalog.steady([run], lambda: queries.phases_rows(run))
        rows = [
            {
                "category": r["category"] or "",
                "name": r["name"],
                "cells": [
                    (fmt(r[col]) if r[col] is not None else "-", r[col])
                    for _h, col, fmt in STAT_COLUMNS
                ],
            }
            for r in stats[:MAX_STAT_ROWS]
        ]
        return page(
            request,
            "run.html",
            run=run.entry(),
            stats=rows,
            stat_heads=[h for h, _c, _f in STAT_COLUMNS],
            groups=len(stats),
            max_rows=MAX_STAT_ROWS,
            chart=phase_bars(phases, category_colours(stats)),
            phases=phases,
            instants=instants,
            timeline=(run.summary or {}).get("spans", 0) <= queries.TIMELINE_MAX_SPANS,
            timeline_max=queries.TIMELINE_MAX_SPANS,
            perfetto_ui=perfetto_ui,
            focus=focus,
            critical=critical,
        )

    @app.get("/runs/{id}/ranks", response_class=HTMLResponse, include_in_schema=False)
    def ranks_page(
        request: Request,
        id: str,
        metric: Literal["step_ns", "wait_ns", "blame_ns"] = Query("blame_ns"),
        collectives: str = Query("comms", min_length=1, max_length=200),
        step: str = Query("step", min_length=1, max_length=1000),
    ) -> HTMLResponse:
        run = run_or_404(id)
        if isinstance(run, JSONResponse):
            return problem_page(request, run)
        answer = catalog.steady([run], lambda: queries.ranks_answer(run, collectives, step))
        return page(
            request,
            "ranks.html",
            run=run.entry(),
            answer=answer,
            named=[r for r in answer["stragglers"] if r["straggler"]],
            metric=metric,
            metrics=HEATMAP_METRICS,
            collectives=collectives,
            step=step,
        )

    def inline_page(
        request: Request,
        id: str,
        render: Callable[[Run], str | None],
        what: str,
        instead: str,
    ) -> HTMLResponse:
        """A run's page drawn inline (timeline, flame graph), or 413 for a run too large."""
        run = run_or_404(id)
        if isinstance(run, JSONResponse):
            return problem_page(request, run)
        html = catalog.steady([run], lambda: render(run))
        if html is None:
            return page(
                request,
                "problem.html",
                status=413,
                detail=f"{run.path}: {(run.summary or {}).get('spans', 0):,} spans: too many for the inline {what} "
                f"(at most {queries.TIMELINE_MAX_SPANS:,}); {instead}",
            )
        return HTMLResponse(html)

    @app.get("/runs/{id}/timeline", response_class=HTMLResponse, include_in_schema=False)
    def timeline_page(request: Request, id: str) -> HTMLResponse:
        return inline_page(request, id, queries.timeline_html, "timeline", "open it in Perfetto UI")

    @app.get("/runs/{id}/flame", response_class=HTMLResponse, include_in_schema=False)
    def flame_page(request: Request, id: str) -> HTMLResponse:
        return inline_page(
            request,
            id,
            queries.flame_html,
            "flame graph",
            "download it as .speedscope.json or .folded",
        )

    @app.get("/compare/flame", response_class=HTMLResponse, include_in_schema=False)
    def compare_flame_page(
        request: Request,
        base: str = Query(..., max_length=64),
        new: str = Query(..., max_length=64),
        threshold: float = Query(0.05, ge=0, le=100),
    ) -> HTMLResponse:
        picked = []
        for rid in (base, new):
            run = run_or_404(rid)
            if isinstance(run, JSONResponse):
                return problem_page(request, run)
            picked.append(run)
        html = queries.diff_flame_page(picked[0], picked[1], threshold)
        if html is None:
            return page(
                request,
                "problem.html",
                status=413,
                detail=f"more than {queries.TIMELINE_MAX_SPANS:,} spans in a run: too many for "
                "the flame graph of the change; run hotspan compare BASE NEW --flame OUT.html",
            )
        return HTMLResponse(html)

    @app.get("/compare", response_class=HTMLResponse, include_in_schema=False)
    def compare_page(
        request: Request,
        base: str = Query("", max_length=64),
        new: str = Query("", max_length=64),
        threshold: float = Query(0.05, ge=0, le=100),
    ) -> HTMLResponse:
        runs = [r.entry() for r in catalog.scan() if r.error is None]
        context: dict[str, Any] = {
            "runs": runs,
            "base": base,
            "new": new,
            "threshold": threshold,
            "rows": None,
        }
        if base and new:
            picked = []
            for rid in (base, new):
                run = run_or_404(rid)
                if isinstance(run, JSONResponse):
                    return problem_page(request, run)
                picked.append(run)
            rows = catalog.steady(
                picked,
                lambda: queries.compare_rows(
                    picked[0], picked[1], threshold=threshold, min_count=1
                ),
            )
            context.update(rows=rows, base_run=picked[0].entry(), new_run=picked[1].entry())
        return page(request, "compare.html", **context)
