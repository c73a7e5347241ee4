"""What the commands share on the way out: a console as wide as the terminal, tables that fit it (key
columns shrink, value columns drop in priority order), the statistics table and the phases."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from ..units import human_count, human_ns, human_rate

if TYPE_CHECKING:
    from rich.console import JustifyMethod


def new_console(stderr: bool = False):
    """A console as wide as the terminal; piped or captured, as wide as ``COLUMNS`` says
    (80 when unset), so that ``COLUMNS=200 hotspan stats t.parquet | less`` is wide."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False)


def _percent(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 100:.1f}%"


#: The columns of the stats table: header -> (stats column, formatter). Their order on screen.
STAT_HEADS: dict[str, tuple[str, Callable[[Any], str]]] = {
    "count": ("count", lambda v: f"{v:,}"),
    "total": ("total_ns", human_ns),
    "self": ("self_ns", human_ns),
    "wait": ("wait_ns", human_ns),
    "mean": ("mean_ns", human_ns),
    "min": ("min_ns", human_ns),
    "p50": ("p50_ns", human_ns),
    "p90": ("p90_ns", human_ns),
    "p99": ("p99_ns", human_ns),
    "max": ("max_ns", human_ns),
    "share": ("share", _percent),
    "busy": ("busy", _percent),
    "errors": ("errors", lambda v: f"{v:,}"),
    "arg sum": ("arg_sum", human_count),
    "arg/s": ("arg_per_s", human_rate),
}
#: Which columns come first when the width is short: the rest only while they fit.
_STAT_PRIORITY = (
    "count",
    "total",
    "mean",
    "p50",
    "p99",
    "share",
    "self",
    "wait",
    "p90",
    "max",
    "min",
    "errors",
    "arg/s",
    "busy",
    "arg sum",
)
#: Shown unless --all or --columns says otherwise (when the width allows).
STAT_DEFAULT = (
    "count",
    "total",
    "self",
    "mean",
    "p50",
    "p90",
    "p99",
    "max",
    "share",
    "errors",
    "arg/s",
)
_KEY_MIN_WIDTH = 10  # a name column is never squeezed below this (longer names end in "…")


def stat_column(head: str) -> str:
    """A stats column from what the user typed: a header (``p99``, ``arg/s``) or a column
    name (``p99_ns``, ``arg_per_s``)."""
    head = head.strip()
    if head in STAT_HEADS:
        return STAT_HEADS[head][0]
    for column, _ in STAT_HEADS.values():
        if head == column:
            return column
    raise KeyError(head)


def stat_head(column: str) -> str:
    return next(head for head, (col, _) in STAT_HEADS.items() if col == column)


def _ellipsize(text: str, width: int) -> str:
    """A key cut to ``width`` in its middle, between words: ``train/compute`` and
    ``train/comms`` stay apart (``…/compute``, ``…/comms``) where cutting the end would make
    both ``train/com…``."""
    from ..report.gantt import fit_label

    return fit_label(text, width)


def fitted_table(
    keys: list[tuple[str, list[str]]],
    values: list[tuple[str, list[str]]],
    width: int,
    title: str | None = None,
    order: Sequence[str] | None = None,
):
    """A table of text columns that fits ``width``: the key columns (left) shrink down to
    ``_KEY_MIN_WIDTH`` with an ellipsis in the middle; the value columns (right-aligned numbers, in
    priority order) are dropped from the last while they do not fit, and never cut; those
    kept are shown in ``order`` (their heads; default: as given). Returns the rich table and
    the value heads left out."""
    from rich import box
    from rich.table import Table

    gap = 2  # a padding space and the (blank) divider between two columns; no outer edge

    def need(column: tuple[str, list[str]]) -> int:
        head, cells = column
        return max([len(head), *(len(c) for c in cells)])

    key_need = [need(c) for c in keys]
    key_min = [min(w, _KEY_MIN_WIDTH) for w in key_need]
    chosen = list(values)
    while chosen:
        total = sum(key_min) + sum(need(c) for c in chosen) + gap * (len(keys) + len(chosen) - 1)
        if total <= width:
            break
        chosen.pop()
    left_out = [head for head, _ in values[len(chosen) :]]
    room = width - sum(need(c) for c in chosen) - gap * (len(keys) + len(chosen) - 1)
    # The key columns get their natural width when it fits, else the room shared out.
    key_width = list(key_min)
    spare = max(room - sum(key_min), 0)
    # Shared out a character at a time to the key column missing the most of its natural width
    # (not all to the first): at 80 columns a long category path must not starve the names.
    while spare > 0:
        missing = [natural - width for natural, width in zip(key_need, key_width)]
        widest_gap = max(range(len(missing)), key=lambda k: missing[k], default=None)
        if widest_gap is None or missing[widest_gap] <= 0:
            break
        key_width[widest_gap] += 1
        spare -= 1
    out = Table(
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
        header_style="bold",
        title=title,
        title_justify="left",
    )
    for (head, _), w in zip(keys, key_width):
        out.add_column(_ellipsize(head, w), width=w, no_wrap=True, overflow="ellipsis")
    if order is not None:
        chosen.sort(key=lambda column: list(order).index(column[0]))
    for column in chosen:
        out.add_column(column[0], justify="right", width=need(column), no_wrap=True)
    rows = len(keys[0][1]) if keys else (len(chosen[0][1]) if chosen else 0)
    for i in range(rows):
        out.add_row(
            *(_ellipsize(cells[i], w) for (_, cells), w in zip(keys, key_width)),
            *(cells[i] for _, cells in chosen),
        )
    return out, left_out


def _stats_renderable(
    result: pa.Table,
    by: Sequence[str],
    width: int,
    heads: Sequence[str] = STAT_DEFAULT,
    title: str | None = None,
):
    """The stats rows as a table that fits ``width``: ``heads`` in screen order, dropped from
    the least important (see ``_STAT_PRIORITY``) while they do not fit."""
    rows = result.to_pylist()
    keys = [(key, ["-" if r[key] is None else str(r[key]) for r in rows]) for key in by]
    ranked = sorted(
        heads, key=lambda h: _STAT_PRIORITY.index(h) if h in _STAT_PRIORITY else len(_STAT_PRIORITY)
    )
    values = [
        (head, [STAT_HEADS[head][1](r[STAT_HEADS[head][0]]) for r in rows]) for head in ranked
    ]
    return fitted_table(keys, values, width, title=title, order=heads)


def phases_renderable(result: pa.Table):
    from rich.table import Table

    out = Table(show_header=True, header_style="bold", title="phases", title_justify="left")
    columns: tuple[tuple[str, JustifyMethod], ...] = (
        ("rank", "left"),
        ("phase", "left"),
        ("time", "right"),
        ("steps", "right"),
        ("per step", "right"),
        ("share", "right"),
    )
    for head, justify in columns:
        out.add_column(head, justify=justify)
    for row in result.to_pylist():
        top = row["phase"] == row["category"]
        share = row["share"]
        out.add_row(
            "mean" if row["rank"] is None else str(row["rank"]),
            row["phase"] if top else "  " + row["phase"],
            human_ns(row["time_ns"]),
            human_count(row["steps"]),
            human_ns(row["per_step_ns"]),
            "-" if share is None or math.isnan(share) else f"{share * 100:.0f}%",
            style="bold" if top else None,
        )
    return out


def print_stats(
    console, result: pa.Table, by: Sequence[str], heads: Sequence[str] = STAT_DEFAULT
) -> None:
    """The stats table fitted to the console, then the instants (spans of no duration: counts,
    not times) in a table of their own."""
    from ..analysis.statistics import split_instants

    timed, instants = split_instants(result)
    if (
        heads is STAT_DEFAULT
        and "wait_ns" in timed.column_names
        and any(timed["wait_ns"].to_pylist())
    ):
        # spans awaited (asyncio tasks): their wait beside their self time
        at = heads.index("self") + 1
        heads = (*heads[:at], "wait", *heads[at:])
    if timed.num_rows or not instants.num_rows:
        rendered, left_out = _stats_renderable(timed, by, console.width, heads)
        console.print(rendered)
        if left_out:
            console.print(
                f"[dim]({', '.join(left_out)} left out to fit {console.width} columns: "
                f"--columns, --all, or a wider COLUMNS)[/dim]"
            )
    if instants.num_rows:
        rendered, _ = _stats_renderable(
            instants, by, console.width, ("count", "errors", "arg sum"), title="instants"
        )
        console.print(rendered)


def print_recording_summary(
    table: pa.Table,
    path: Path,
    elapsed: float,
    dropped: int,
    *,
    label: str,
    stderr: bool = False,
    top: int | None = None,
) -> None:
    from ..analysis import stats
    from ..analysis.statistics import default_by

    console = new_console(stderr=stderr)
    threads = len(pc.unique(table.column("thread_id"))) if table.num_rows else 0
    console.print(
        f"[bold]hotspan {label}[/bold]: {table.num_rows:,} spans on {threads} threads in {elapsed:.2f} s, "
        f"{dropped:,} dropped -> [cyan]{path}[/cyan]",
        soft_wrap=True,  # one line whatever the width: a terminal wraps it itself, a pipe keeps it whole
    )
    if table.num_rows:
        result = stats(table)
        if top is not None:
            result = result.slice(0, top)
        print_stats(console, result, default_by(table))
