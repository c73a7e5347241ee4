"""The ASGI application of ``hotspan serve``: the JSON API under ``/v1``, its OpenAPI
document at ``/openapi.json``, and the pages (run list, run, compare).

    from hotspan.serve import create_app
    app = create_app("runs/", token="s3cret")      # any ASGI server; `hotspan serve` runs uvicorn

Requests are checked before anything else runs: with a token, one without
``Authorization: Bearer <token>`` gets 401; a parameter (in the query or the path) holding
``..`` as a path segment or an absolute path gets 400. No parameter is ever used as a file
path (runs are named by id), and runs reached through a link out of the directory are not
listed, so no request reads a file outside it.
"""

from __future__ import annotations

import hmac
import json
import os
import re
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal, Optional
from urllib.parse import unquote

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from .. import __version__
from . import _queries as queries
from ._runs import Catalog, Run

__all__ = ["Served", "create_app"]

_UNKNOWN = "no run with this id under the served directory"


# --------------------------------------------------------------------------- response models


#: The across-ranks endpoints' options (ranks, rank_steps, critical_path), declared once.
CollectivesQuery = Annotated[
    str,
    Query(min_length=1, max_length=200, description="the last part of the collectives' category"),
]
StepQuery = Annotated[str, Query(min_length=1, max_length=1000, description="the step span's name")]


class Problem(BaseModel):
    detail: str


class WindowProblem(Problem):
    spans: int
    limit: int


class TraceEntry(BaseModel):
    id: str
    path: str
    name: str
    kind: Literal["file", "dataset"]
    format: str
    error: Optional[str] = None
    ranks: Optional[list[int]] = None
    spans: Optional[int] = None
    start: Optional[str] = None
    start_ns: Optional[int] = None
    duration_ns: Optional[int] = None
    host: Optional[str] = None
    command: Optional[str] = None
    modified: Optional[str] = None
    #: what the pages call the run: its path, or the served directory's own name for "."
    title: Optional[str] = None
    #: listed before being summarised (a directory of many runs): spans etc. come later
    pending: bool = False


class TraceList(BaseModel):
    traces: list[TraceEntry]


class PhaseRow(BaseModel):
    rank: Optional[int] = None
    category: str
    phase: str
    time_ns: Optional[int] = None
    steps: Optional[int] = None
    per_step_ns: Optional[float] = None
    share: Optional[float] = None


class TraceDetail(TraceEntry):
    phases: list[PhaseRow]


class StatsRow(BaseModel):
    model_config = ConfigDict(extra="allow")  # plus the `by` columns
    count: int
    total_ns: int
    self_ns: int
    wait_ns: int = 0
    mean_ns: Optional[float] = None
    min_ns: int
    p50_ns: Optional[float] = None
    p90_ns: Optional[float] = None
    p99_ns: Optional[float] = None
    max_ns: int
    share: Optional[float] = None
    busy: Optional[float] = None
    errors: int
    arg_sum: Optional[int] = None
    arg_per_s: Optional[float] = None
    instants: int = 0


class StatsResponse(BaseModel):
    id: str
    by: list[str]
    rows: list[StatsRow]


class Span(BaseModel):
    span_id: int
    parent_id: Optional[int] = None
    name: str
    category: Optional[str] = None
    start_ns: int
    end_ns: int
    duration_ns: int
    #: duration_ns less the union of the children's intervals (null in files older than the column)
    self_ns: Optional[int] = None
    #: the time its asyncio task was suspended (awaiting) while it was the task's innermost
    #: span: not part of self_ns (null in files older than the column)
    wait_ns: Optional[int] = None
    depth: int
    thread_id: int
    thread_name: Optional[str] = None
    pid: int
    rank: int
    arg: Optional[int] = None
    error: Optional[bool] = None


class SpansPage(BaseModel):
    id: str
    offset: int
    limit: int
    next_offset: Optional[int] = None
    spans: list[Span]


class TimelinePixel(BaseModel):
    """The spans shorter than a pixel that start under it (a span starting before the
    window: pixel 0), counted once."""

    x: int
    count: int
    #: the name with the most time among them
    name: str
    #: the outermost depth among them
    depth: int
    #: their time inside the window
    time_ns: int


class TimelineSpan(BaseModel):
    span_id: int
    name: str
    start_ns: int
    end_ns: int
    depth: int


class TimelineTrack(BaseModel):
    rank: int
    pid: int
    thread_id: int
    lane: int
    #: the spans at least a pixel long (every span of a track with at most `width` in the window)
    spans: list[TimelineSpan]
    pixels: list[TimelinePixel]


class TimelineResponse(BaseModel):
    id: str
    start_ns: int
    end_ns: int
    width: int
    ns_per_pixel: float
    tracks: list[TimelineTrack]


class CriticalSegment(BaseModel):
    step: int
    rank: int
    name: str
    #: on the rank's own clock, as its spans
    start_ns: int
    end_ns: int


class CriticalPathResponse(BaseModel):
    id: str
    segments: list[CriticalSegment]


class StragglerRow(BaseModel):
    rank: int
    blame_ns: int
    wait_ns: int
    steps_last: int
    straggler: bool
    reason: Optional[str] = None
    step_ns_if_median: Optional[float] = None
    #: its share of all blame
    share: float
    #: the straggler test's p (Bennett's bound)
    p: Optional[float] = None


class CriticalShare(BaseModel):
    name: str
    critical_ns: int
    share: float


class RanksResponse(BaseModel):
    """What `hotspan ranks --json` prints."""

    model_config = ConfigDict(extra="allow")
    id: str
    ranks: int
    steps: int
    step_ns: Optional[float] = None
    instances: int
    unmatched: int
    total_wait_ns: int
    test: dict[str, Any]
    clock_offset_ns: dict[str, int]
    arrival_error_ns: dict[str, int]
    #: every rank, most blamed first
    stragglers: list[StragglerRow]
    #: per span name, its time on the steps' critical paths
    critical_path: list[CriticalShare]


class RankStepsResponse(BaseModel):
    """`hotspan.rank_steps`: a list per column, a cell (rank, step) per index, rows by
    rank then step."""

    id: str
    rank: list[int]
    step: list[int]
    #: the step span, on the rank's own clock
    start_ns: list[int]
    end_ns: list[int]
    step_ns: list[int]
    #: the rank's waits in that step's collectives
    wait_ns: list[int]
    #: the others' waits in the collectives it arrived last at in that step
    blame_ns: list[int]
    #: how many collectives of that step it arrived last at
    last: list[int]


class CounterPixel(BaseModel):
    """A counter's values recorded under one pixel."""

    x: int
    min: Optional[float]
    max: Optional[float]
    last: Optional[float]


class CounterLane(BaseModel):
    name: str
    rank: int
    pid: int
    #: the value in effect at the window's start (null: none recorded yet)
    before: Optional[float]
    #: over the window's values and `before`: the lane's scale
    min: Optional[float]
    max: Optional[float]
    pixels: list[CounterPixel]


class CountersResponse(BaseModel):
    id: str
    start_ns: int
    end_ns: int
    width: int
    ns_per_pixel: float
    lanes: list[CounterLane]


class CompareRow(BaseModel):
    model_config = ConfigDict(extra="allow")  # plus the group's key columns
    count_base: int
    count_new: int
    p50_ns_base: Optional[float] = None
    p50_ns_new: Optional[float] = None
    p50_ns_change: Optional[float] = None
    change_low: Optional[float] = None
    change_high: Optional[float] = None
    p_value: Optional[float] = None
    judged_change: Optional[float] = None
    verdict: Literal["slower", "faster", "same", "inconclusive", "new", "gone", "few"]


class CompareResponse(BaseModel):
    base: str
    new: str
    threshold: float
    rows: list[CompareRow]
    #: the machine's drift between the runs in one line, as `hotspan compare` prints it
    machine: Optional[str] = None


_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {
        "model": Problem,
        "description": "a parameter names a path outside the directory (`..`, absolute)",
    },
    401: {
        "model": Problem,
        "description": "the server has a token and the request did not present it",
    },
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": Problem, "description": "no run with this id"},
    409: {
        "model": Problem,
        "description": "the run is not a readable trace (see its error in the list)",
    },
}


# --------------------------------------------------------------------------- guards

_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


def escapes(value: str) -> bool:
    """Whether ``value`` would name a path outside a directory: absolute, or with a ``..``
    segment (``/`` or ``\\`` separated)."""
    text = value.replace("\\", "/")
    return text.startswith("/") or bool(_DRIVE.match(value)) or ".." in text.split("/")


def _problem(status: int, detail: str, **headers: str) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers or None)


def _bad_value(parameter: str, message: str, where: str = "query") -> RequestValidationError:
    """A 422 in FastAPI's own shape (``detail[].loc`` names the parameter)."""
    return RequestValidationError(
        [{"loc": (where, parameter), "msg": message, "type": "value_error"}]
    )


# --------------------------------------------------------------------------- the application


PERFETTO_UI = "https://ui.perfetto.dev"


def run_problem(path: str, name: str, error: str) -> str:
    """A run's error, named once by its path: a loader's message already starts with the
    file's name (``bad.json: not valid JSON``), which must not be said twice."""
    for said in (f"{path}:", f"{name}:"):
        if error.startswith(said):
            error = error[len(said) :].lstrip()
            break
    return f"{path}: {error}"


class Served:
    """What the routes of one application share: the runs under the served directory (the
    catalog), the directory for converted copies, the token and the Perfetto UI. The routes
    are this object's methods; ``create_app`` registers them on a FastAPI application, so a
    route reads its state from ``self`` instead of from closures inside ``create_app``."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        cache: str | os.PathLike[str],
        *,
        token: str | None = None,
        perfetto_ui: str = PERFETTO_UI,
    ) -> None:
        if not re.match(r"^https?://[^/\s]+", perfetto_ui):
            raise ValueError(f"perfetto_ui: {perfetto_ui!r} is not an http(s) URL")
        self.catalog = Catalog(root, cache)
        self.cache_dir = Path(cache)
        self.perfetto_ui = perfetto_ui
        self._expected = f"Bearer {token}".encode() if token else None

    # ------------------------------------------------------------------ checks and lookups

    async def unreadable(self, request: Request, exc: Exception) -> JSONResponse:
        """A run that reads as a list entry can still fail a query (a part torn after the
        scan, a table breaking the span rules): its message, as for a run listed with an
        error, never a 500."""
        # Paths relative to the served directory.
        text = str(exc).replace(str(self.catalog.root) + os.sep, "")
        return _problem(409, f"not a readable trace: {text}")

    def refusal(self, request: Request) -> JSONResponse | None:
        """The 401 or 400 a request gets before anything else runs, or None."""
        if self._expected is not None:
            given = request.headers.get("authorization", "").encode("latin-1", "replace")
            # Constant time: how much of the token matched does not show in the timing.
            if not hmac.compare_digest(given, self._expected):
                return _problem(
                    401,
                    "missing or wrong token: send Authorization: Bearer <token>",
                    **{"WWW-Authenticate": "Bearer"},
                )
        raw = request.scope.get("raw_path") or request.url.path.encode()
        for segment in raw.decode("latin-1").split("/"):
            decoded = unquote(segment)
            if decoded and (decoded == ".." or escapes(decoded)):
                return _problem(
                    400, f"path segment {decoded!r}: paths outside the served directory are refused"
                )
        for key, value in request.query_params.multi_items():
            if escapes(value):
                return _problem(
                    400, f"parameter {key!r}: {value!r} names a path outside the served directory"
                )
        return None

    async def guard(
        self, request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        """The HTTP middleware: the refusal, if any, before the route runs."""
        refused = self.refusal(request)
        if refused is not None:
            return refused
        return await call_next(request)

    def run_or_404(self, rid: str) -> Run | JSONResponse:
        """The run with id ``rid``, or the 404 (no such run) or 409 (unreadable) to answer."""
        run = self.catalog.get(rid)
        if run is None:
            return _problem(404, f"{rid}: {_UNKNOWN}")
        if run.error is not None:
            return _problem(409, run_problem(run.path, run.name, run.error))
        return run

    # ------------------------------------------------------------------ the JSON API

    def list_traces(self) -> Any:
        """Every run under the directory (scanned on each request: new runs appear). A run
        that cannot be read is listed with its `error` and no figures."""
        return {"traces": [run.entry() for run in self.catalog.scan()]}

    def get_trace(self, id: str) -> Any:
        """The run's summary and its phases per rank (each top-level category's time per step
        and its sub-categories' shares; rank null: the mean over ranks)."""
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        phases = self.catalog.steady([run], lambda: queries.phases_rows(run))
        return {**run.entry(), "phases": phases}

    def get_stats(
        self,
        id: str,
        by: Optional[str] = Query(
            None,
            description="comma-separated span columns to group by (default: "
            "category,name, and device when the run has device rows)",
            max_length=200,
        ),
        name: Optional[str] = Query(None, max_length=1000, description="only spans of this name"),
        category: Optional[str] = Query(
            None, max_length=1000, description="only spans of this category or below it"
        ),
        rank: Optional[int] = Query(
            None, ge=-(2**31), le=2**31 - 1, description="only spans of this rank"
        ),
        thread: Optional[str] = Query(
            None, max_length=1000, description="only spans of this thread (name or id)"
        ),
        since: Optional[float] = Query(
            None,
            ge=0,
            description="only spans starting at or after this: seconds "
            "from the run's start, or epoch ns",
        ),
        until: Optional[float] = Query(
            None, ge=0, description="only spans starting before this (as since)"
        ),
        min_ns: Optional[int] = Query(
            None, ge=0, le=2**63 - 1, description="only spans at least this long"
        ),
    ) -> Any:
        """The `hotspan stats` columns per group of spans, largest total first: the library's
        `hotspan.stats`, with its defaults and its filter."""
        keys = by_columns(by) if by is not None else None
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        try:
            span_filter = queries.make_filter(
                name=name,
                category=category,
                rank=rank,
                thread=thread,
                since=since,
                until=until,
                min_ns=min_ns,
            )
            span_filter.window() if not span_filter.needs_origin else span_filter.with_origin(
                0
            ).window()
        except ValueError as exc:  # an infinite time, say
            raise _bad_value("since", str(exc)) from None
        used, rows = self.catalog.steady([run], lambda: queries.stats_rows(run, keys, span_filter))
        return {"id": run.id, "by": list(used), "rows": rows}

    def get_spans(
        self,
        id: str,
        offset: int = Query(0, ge=0, le=2**62, description="spans to skip (of those matching)"),
        limit: int = Query(100, ge=1, le=10_000, description="spans in this page (at most 10 000)"),
        name: Optional[str] = Query(None, max_length=1000, description="only spans of this name"),
        category: Optional[str] = Query(
            None,
            max_length=1000,
            description="only spans of this category or below it (train takes train/compute)",
        ),
        rank: Optional[int] = Query(
            None, ge=-(2**31), le=2**31 - 1, description="only spans of this rank"
        ),
        min_ns: Optional[int] = Query(
            None, ge=0, le=2**63 - 1, description="only spans at least this long"
        ),
    ) -> Any:
        """A page of spans in a stable order (the run's parts in order, rows in file order);
        `next_offset` is where the next page starts, null on the last."""
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        rows, more = self.catalog.steady(
            [run],
            lambda: queries.spans_page(
                run,
                offset=offset,
                limit=limit,
                name=name,
                category=category,
                rank=rank,
                min_ns=min_ns,
            ),
        )
        return {
            "id": run.id,
            "offset": offset,
            "limit": limit,
            "next_offset": offset + len(rows) if more else None,
            "spans": rows,
        }

    def get_timeline(
        self,
        id: str,
        start_ns: Optional[int] = Query(
            None,
            ge=0,
            le=2**63 - 1,
            description="the window's start, epoch ns (default: the run's start)",
        ),
        end_ns: Optional[int] = Query(
            None,
            ge=1,
            le=2**63 - 1,
            description="the window's end, epoch ns (default: the run's end)",
        ),
        width: int = Query(1200, ge=1, le=16_384, description="the view's width in pixels"),
        rank: Optional[str] = Query(
            None, max_length=2000, description="only these ranks' tracks (comma-separated)"
        ),
    ) -> Any:
        """What a `width`-pixel view of `[start_ns, end_ns)` shows, per track (rank, pid,
        thread, lane): the spans at least a pixel long exactly, the shorter ones summarised per
        pixel (count, busiest name, outermost depth), each span counted once, in the pixel where
        it starts. A track with at most `width` spans in the window lists them all. The answer's
        size depends on `width` and the tracks, not on the spans; computed from the run's
        Parquet parts with the window pushed down to the reader.

        Sent as the library writes it (JSON text from the answer's columns): the response
        model documents it, but a whole-run view of a large run is a hundred thousand pixels,
        which validating against the model took seconds to do."""
        ranks = _window(start_ns, end_ns, rank)
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        try:
            view = self.catalog.steady(
                [run], lambda: queries.timeline_view(run, start_ns, end_ns, width, ranks)
            )
        except ValueError as exc:  # a default window end before the given start, say
            raise _bad_value("start_ns", str(exc)) from None
        return Response(
            b'{"id":' + json.dumps(run.id).encode() + b"," + view[1:],
            media_type="application/json",
        )

    def get_ranks(
        self,
        id: str,
        collectives: CollectivesQuery = "comms",
        step: StepQuery = "step",
    ) -> Any:
        """Across ranks, as `hotspan ranks --json` prints it (`hotspan.analysis.ranks.ranks_summary`):
        the run's figures, every rank's straggler row (blame, wait, steps last, the straggler
        test's verdict and reason), most blamed first, and each span name's share of the
        critical path."""
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        answer = self.catalog.steady([run], lambda: queries.ranks_answer(run, collectives, step))
        return {"id": run.id, **answer}

    def get_rank_steps(
        self,
        id: str,
        collectives: CollectivesQuery = "comms",
        step: StepQuery = "step",
    ) -> Any:
        """Per rank and step (`hotspan.rank_steps`): the step's time, the rank's waits and the
        blame it earned there, a list per column: the cells of the rank x step heatmap
        (`/runs/{id}/ranks`)."""
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        cells = self.catalog.steady(
            [run], lambda: queries.rank_steps_columns(run, collectives, step)
        )
        return {"id": run.id, **cells}

    def get_critical_path(
        self,
        id: str,
        start_ns: Optional[int] = Query(
            None, ge=0, le=2**63 - 1, description="only segments ending after this, epoch ns"
        ),
        end_ns: Optional[int] = Query(
            None, ge=1, le=2**63 - 1, description="only segments starting before this, epoch ns"
        ),
        rank: Optional[str] = Query(
            None, max_length=2000, description="only these ranks' segments (comma-separated)"
        ),
        collectives: CollectivesQuery = "comms",
        step: StepQuery = "step",
    ) -> Any:
        """The segments of each step's critical path across ranks (`hotspan.critical_path`)
        that overlap the window: step, rank, span name, start and end (on that rank's clock),
        in path order. The timeline draws them over its tracks."""
        ranks = _window(start_ns, end_ns, rank)
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        segments = self.catalog.steady(
            [run],
            lambda: queries.critical_segments(run, start_ns, end_ns, ranks, collectives, step),
        )
        return {"id": run.id, "segments": segments}

    def get_counters(
        self,
        id: str,
        start_ns: int = Query(..., ge=0, le=2**63 - 1, description="the window's start, epoch ns"),
        end_ns: int = Query(..., ge=1, le=2**63 - 1, description="the window's end, epoch ns"),
        width: int = Query(1200, ge=1, le=16_384, description="the view's width in pixels"),
    ) -> Any:
        """The run's counters (``hotspan.counter``, sampled memory) as a `width`-pixel view of
        `[start_ns, end_ns)`: a lane per counter name, rank and pid, per pixel the min, max and
        last value recorded under it (hotspan.counters.counter_lanes). A run without counters
        has no lanes."""
        from ..counters import counter_lanes, empty, load_counters

        _window(start_ns, end_ns, None)
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        try:
            counters = load_counters(run.location)
        except (OSError, ValueError):  # a span file, a format that holds no counters
            counters = empty()
        return {"id": run.id, **counter_lanes(counters, start_ns, end_ns, width)}

    def download(
        self,
        id: str,
        format: Literal["pftrace", "json", "json.gz", "parquet", "speedscope", "folded"] = Query(
            "pftrace",
            description="pftrace (Perfetto), json / json.gz (Chrome JSON), parquet, speedscope "
            "(speedscope's evented format), folded (collapsed stacks with self time)",
        ),
        start_ns: Optional[int] = Query(
            None,
            ge=0,
            le=2**63 - 1,
            description="only the spans overlapping the window from here, epoch ns",
        ),
        end_ns: Optional[int] = Query(
            None, ge=1, le=2**63 - 1, description="... to here (exclusive), epoch ns"
        ),
        rank: Optional[str] = Query(
            None, max_length=2000, description="only these ranks' spans (comma-separated)"
        ),
    ) -> Any:
        """The run as one file in `format`, streamed from disk (converted once per version of
        the run). With `start_ns`/`end_ns`/`rank`: only the spans overlapping that window on
        those ranks (a span begun before the window and ending in it too), converted once
        per (version of the run, window, ranks); a window of more spans than open in Perfetto
        UI (5,000,000; `HOTSPAN_SERVE_WINDOW_MAX_SPANS`) is 413, naming its spans and the
        limit (`spans`, `limit`), counted from the parts' statistics."""
        ranks = _window(start_ns, end_ns, rank)
        run = self.run_or_404(id)
        if isinstance(run, JSONResponse):
            return run
        windowed = start_ns is not None or end_ns is not None or ranks is not None
        try:
            path = self.catalog.steady(
                [run],
                lambda: queries.download_path(run, format, self.cache_dir, start_ns, end_ns, ranks),
            )
        except queries.WindowTooLarge as exc:
            return JSONResponse(
                {"detail": str(exc), "spans": exc.spans, "limit": exc.limit}, status_code=413
            )
        extension, media = queries.DOWNLOAD_FORMATS[format]
        stem = run.name
        if run.kind == "file" and run.format:
            stem = stem[: -len(run.format)] if stem.lower().endswith(run.format) else stem
        stem = stem or run.id
        if windowed:
            stem += "-" + "-".join(
                part
                for part in (
                    f"{start_ns}" if start_ns is not None else "",
                    f"{end_ns}" if end_ns is not None else "",
                    "rank" + "_".join(map(str, ranks)) if ranks else "",
                )
                if part
            )
        return FileResponse(path, media_type=media, filename=stem + extension)

    def compare(
        self,
        base: str = Query(..., max_length=64, description="id of the run before"),
        new: str = Query(..., max_length=64, description="id of the run after"),
        threshold: float = Query(
            0.05, ge=0.0, le=100.0, description="slowdown that counts, as a fraction"
        ),
        min_count: int = Query(
            1, ge=1, le=2**31, description="groups with fewer spans on a side are not judged"
        ),
    ) -> Any:
        """Span group by span group, as `hotspan compare` does: medians, their change with a
        bootstrap interval, the Mann-Whitney U p-value and a verdict (`inconclusive`: slower,
        but the machine's drift between the runs may explain it; `machine` says that drift)."""
        runs = []
        for rid in (base, new):
            run = self.run_or_404(rid)
            if isinstance(run, JSONResponse):
                return run
            runs.append(run)
        rows, machine = self.catalog.steady(
            runs,
            lambda: queries.compare_result(
                runs[0], runs[1], threshold=threshold, min_count=min_count
            ),
        )
        return {"base": base, "new": new, "threshold": threshold, "rows": rows, "machine": machine}


def _window(start_ns: int | None, end_ns: int | None, rank: str | None) -> list[int] | None:
    """The ranks ``rank`` names (None: every rank), or FastAPI's 422 naming the parameter
    (a rank that is not a number, an empty window)."""
    ranks = None
    if rank is not None:
        try:
            ranks = [int(r) for r in rank.split(",") if r.strip()]
        except ValueError:
            raise _bad_value("rank", "give rank numbers, comma-separated") from None
    if start_ns is not None and end_ns is not None and end_ns <= start_ns:
        raise _bad_value("end_ns", "the window is empty: end_ns must be after start_ns")
    return ranks


def by_columns(text: str) -> tuple[str, ...]:
    """The span columns ``text`` (comma-separated) names, or FastAPI's 422 naming ``by``."""
    from .._schema import SPAN_SCHEMA

    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise _bad_value("by", "give one or more column names, comma-separated")
    # device: derived per span, as the library and the CLI take it.
    known = (*SPAN_SCHEMA.names, "device")
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise _bad_value(
            "by", f"no column {', '.join(map(repr, unknown))}; columns: {', '.join(known)}"
        )
    if len(set(keys)) != len(keys):
        raise _bad_value("by", "a column is named twice")
    return keys


_DOWNLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {
        "model": WindowProblem,
        "description": "the window holds more spans than open in Perfetto UI",
    },
    200: {
        "description": "the trace, streamed",
        "content": {
            m: {
                "schema": {"type": "object", "description": "a Chrome JSON trace"}
                if m == "application/json"
                else {"type": "string", "format": "binary"}
            }
            for _e, m in queries.DOWNLOAD_FORMATS.values()
        },
    },
}


def add_api(app: FastAPI, served: Served) -> None:
    """The JSON API's routes, each one of ``served``'s methods (in the OpenAPI document's
    order)."""
    found = {**_ERRORS, **_NOT_FOUND}
    app.get("/v1/traces", response_model=TraceList, responses=_ERRORS, tags=["traces"])(
        served.list_traces
    )
    app.get("/v1/traces/{id}", response_model=TraceDetail, responses=found, tags=["traces"])(
        served.get_trace
    )
    app.get(
        "/v1/traces/{id}/stats", response_model=StatsResponse, responses=found, tags=["traces"]
    )(served.get_stats)
    app.get("/v1/traces/{id}/spans", response_model=SpansPage, responses=found, tags=["traces"])(
        served.get_spans
    )
    app.get(
        "/v1/traces/{id}/timeline",
        response_model=TimelineResponse,
        responses=found,
        tags=["traces"],
    )(served.get_timeline)
    app.get("/v1/traces/{id}/ranks", response_model=RanksResponse, responses=found, tags=["ranks"])(
        served.get_ranks
    )
    app.get(
        "/v1/traces/{id}/rank_steps",
        response_model=RankStepsResponse,
        responses=found,
        tags=["ranks"],
    )(served.get_rank_steps)
    app.get(
        "/v1/traces/{id}/critical_path",
        response_model=CriticalPathResponse,
        responses=found,
        tags=["ranks"],
    )(served.get_critical_path)
    app.get(
        "/v1/traces/{id}/counters",
        response_model=CountersResponse,
        responses=found,
        tags=["traces"],
    )(served.get_counters)
    app.get(
        "/v1/traces/{id}/download",
        response_class=FileResponse,
        responses={**found, **_DOWNLOAD_RESPONSES},
        tags=["traces"],
    )(served.download)
    app.get("/v1/compare", response_model=CompareResponse, responses=found, tags=["compare"])(
        served.compare
    )


def _scan_quietly(catalog: Catalog) -> None:
    """``catalog.scan()``, its errors left to the requests (which scan again and report them)."""
    try:
        catalog.scan()
    except Exception:  # noqa: BLE001
        pass


def create_app(
    root: str | os.PathLike[str],
    *,
    token: str | None = None,
    cache: str | os.PathLike[str] | None = None,
    perfetto_ui: str = PERFETTO_UI,
    warm: bool = False,
) -> FastAPI:
    """The application serving the runs under ``root``. ``token``: required of every
    request as ``Authorization: Bearer <token>``. ``cache``: where Parquet copies of
    non-Parquet traces and download files go (default: a fresh temporary directory).
    ``perfetto_ui``: the Perfetto UI that "Open in Perfetto UI" opens (a self-hosted one
    where ui.perfetto.dev cannot be reached). ``warm``: find the runs as the application starts
    and compute each one's statistics then, ahead of the first request for them
    (``queries.Warmer``; ``hotspan serve`` does)."""
    import pyarrow as pa

    from ..formats._base import TraceFileError
    from ._pages import add_pages

    own_cache = None
    if cache is None:
        # Removed with the application (when it is collected, or at exit at the latest):
        # one left behind per app piled up in /tmp. The application holds it, not the Served
        # object: FastAPI caches facts about each endpoint in module-level lru_caches keyed on
        # the endpoint, which keep the Served object (its bound methods) alive past the app.
        own_cache = tempfile.TemporaryDirectory(prefix="hotspan-serve-", ignore_cleanup_errors=True)
        cache = own_cache.name
    served = Served(root, cache, token=token, perfetto_ui=perfetto_ui)
    warmer = None
    if warm:
        from ._queries import Warmer

        served.catalog.on_new_version = warmer = Warmer()
        # The runs found (and their statistics started) as the server starts, not at the
        # first request; a request's own scan finds them known.
        threading.Thread(
            target=_scan_quietly, args=(served.catalog,), name="hotspan-serve-scan", daemon=True
        ).start()
    app = FastAPI(
        title="hotspan serve",
        version=__version__,
        docs_url=None,
        redoc_url=None,  # their pages load from a CDN
        description="The runs (trace files and dataset directories) under one directory: list them, read "
        "their statistics, phases and spans, download them in any format, compare two.",
    )
    app.state.served = served
    app.state.catalog = served.catalog
    app.state.warmer = warmer
    app.state.cache = own_cache  # held by the app: the directory lives as long as it does
    for error in (TraceFileError, pa.ArrowException, OSError):
        app.add_exception_handler(error, served.unreadable)
    app.middleware("http")(served.guard)
    add_api(app, served)
    add_pages(app, served.catalog, served.run_or_404, perfetto_ui=served.perfetto_ui)
    return app
