"""What the commands share on the way out: a console as wide as the terminal, tables that fit it (key
columns shrink, value columns drop in priority order), the statistics table and the phases."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from .._units import human_count, human_ns, human_rate

if TYPE_CHECKING:
    from rich.console import Console
    from rich.table import Table

__all__ = [
    "STAT_DEFAULT",
    "STAT_HEADS",
    "distinct_cuts",
    "fitted_table",
    "middle_cut",
    "new_console",
    "phases_renderable",
    "print_recording_summary",
    "print_stats",
    "stat_column",
    "stat_head",
]


def new_console(stderr: bool = False) -> Console:
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
    # What each share divides, in its name: the JSON keeps ``share`` and ``busy``.
    "self %": ("share", _percent),  # self time over the threads' busy time (adds up to 100%)
    "total %": ("busy", _percent),  # total time over the wall time (nested spans count twice)
    "errors": ("errors", lambda v: f"{v:,}"),
    "arg sum": ("arg_sum", human_count),
    "arg/s": ("arg_per_s", human_rate),
}
#: Which columns come first when the width is short: the rest only while they fit.
_STAT_PRIORITY = (
    "count",
    "total",
    "self",  # before the percentiles: a long total with no self time of its own is a parent
    "p50",
    "p99",
    "wait",  # beside self where there is any (asyncio tasks' awaited time)
    "mean",
    "self %",
    "p90",
    "max",
    "total %",
    "min",
    "errors",
    "arg/s",
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
    "self %",
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


#: Where a key may be cut: beside a separator (``train/compute``, ``test_x.py::test_y[p]``,
#: ``optimizer_step``), so that what is kept reads as whole words.
_WORD_SEPARATORS = frozenset(" /.:()[],;=_-")


def _word_breaks(text: str) -> list[int]:
    return [
        i
        for i in range(1, len(text))
        if text[i - 1] in _WORD_SEPARATORS or text[i] in _WORD_SEPARATORS
    ]


def middle_cut(text: str, width: int) -> str:
    """``text`` in ``width`` characters, its middle left out. The start and the end are kept
    as whole words where they can be (as many as fit, the end, which tells ``train/compute``
    from ``eval/compute`` or ``test_matmul[a]`` from ``test_matmul[b]``, given at least a third
    of the room): ``training/…/compute``, ``tests/….py::test_matmul[param]``; where no whole
    start fits beside the end, the start is cut inside a word: ``tr…compute``, ``opti…_step``."""
    if len(text) <= width:
        return text
    indent = len(text) - len(text.lstrip(" "))
    if indent and width - indent > 1:  # an indented row (a sub-phase) keeps its indent
        return text[:indent] + middle_cut(text[indent:], width - indent)
    if width <= 1:
        return "…"[:width]
    room = width - 1  # the ellipsis takes one
    breaks = _word_breaks(text)
    tails = [len(text) - i for i in breaks]  # longest first
    least_tail = max(room // 3, 1)
    whole = [
        (head + tail, tail, head)
        for head in breaks
        for tail in tails
        if head + tail <= room and tail >= least_tail
    ]
    if whole:
        _, tail, head = max(whole)
        return text[:head] + "…" + text[len(text) - tail :]
    least_head = max(room // 3, 1)
    tail_or_none = next((n for n in tails if n <= room - least_head), None)
    if tail_or_none is None:  # the last word alone is long: whole, if any start fits beside it
        tail_or_none = next((n for n in reversed(tails) if n <= room - 1), None)
    if tail_or_none is None:  # no word fits: the middle of the last one goes
        head = room - room // 2
        return text[:head] + "…" + text[len(text) - (room - head) :]
    return text[: room - tail_or_none] + "…" + text[len(text) - tail_or_none :]


class _Lookup:
    """Which values a cut could stand for: those that start with its head and end with its
    tail (found by bisecting the values sorted forwards and backwards, so a column of many
    names is checked in about n log n)."""

    def __init__(self, values: Sequence[str]):
        self.forward = sorted(values)
        self.backward = sorted(v[::-1] for v in values)

    @staticmethod
    def _prefixed(ordered: list[str], prefix: str) -> tuple[int, int]:
        import bisect

        low = bisect.bisect_left(ordered, prefix)
        return low, bisect.bisect_left(ordered, prefix + "\U0010ffff", low)

    def stands_for_another(self, value: str, head: str, tail: str) -> bool:
        """Whether ``head…tail`` could also be a value other than ``value``."""
        low, high = self._prefixed(self.forward, head)
        back_low, back_high = self._prefixed(self.backward, tail[::-1])
        if high - low <= back_high - back_low:
            candidates = (v for v in self.forward[low:high] if v.endswith(tail))
        else:
            candidates = (
                v[::-1] for v in self.backward[back_low:back_high] if v.endswith(head[::-1])
            )
        least = len(head) + len(tail)
        return any(v != value and len(v) >= least for v in candidates)


def distinct_cuts(values: Sequence[str], width: int) -> dict[str, str] | None:
    """Each distinct value of a column shortened to ``width`` (:func:`middle_cut`) so that no cut
    could stand for two values (none starts with another's kept start and ends with its kept
    end): a value whose cut is ambiguous is cut elsewhere, the split moved until what sets it
    apart shows. None when ``width`` is too narrow for that."""
    distinct = list(dict.fromkeys(values))
    lookup = _Lookup(distinct)
    cuts = {}
    for value in distinct:
        cut = middle_cut(value, width)
        if cut != value:
            head, _, tail = cut.partition("…")
            if lookup.stands_for_another(value, head, tail):
                room = width - 1  # both a start and an end kept, or the cut says too little
                splits = sorted(range(1, room), key=lambda h: (abs(h - len(head)), h))
                for split in splits:
                    head, tail = value[:split], value[len(value) - (room - split) :]
                    if not lookup.stands_for_another(value, head, tail):
                        cut = head + "…" + tail
                        break
                else:
                    return None
        cuts[value] = cut
    return cuts


def _narrowest_distinct(values: Sequence[str], least: int) -> int:
    """The narrowest width from ``least`` up at which the values keep apart when cut."""
    natural = max((len(v) for v in values), default=0)
    width = min(least, natural)
    while width < natural and distinct_cuts(values, width) is None:
        width += 1
    return width


def fitted_table(
    keys: list[tuple[str, list[str]]],
    values: list[tuple[str, list[str]]],
    width: int,
    title: str | None = None,
    order: Sequence[str] | None = None,
) -> tuple[Table, list[str]]:
    """A table of text columns that fits ``width``: the key columns (left) shrink down to
    ``_KEY_MIN_WIDTH`` with an ellipsis in the middle; the value columns (right-aligned numbers, in
    priority order) are dropped from the last while they do not fit, and never cut; those
    kept are shown in ``order`` (their heads; default: as given). Returns the rich table and
    the value heads left out."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    gap = 2  # a padding space and the (blank) divider between two columns; no outer edge

    def need(column: tuple[str, list[str]]) -> int:
        head, cells = column
        return max([len(head), *(len(c) for c in cells)])

    key_need = [need(c) for c in keys]
    # Never narrower than the names can be cut without two of them reading alike.
    key_min = [
        max(min(w, _KEY_MIN_WIDTH), _narrowest_distinct(cells, _KEY_MIN_WIDTH))
        for w, (_, cells) in zip(key_need, keys)
    ]
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
        out.add_column(Text(middle_cut(head, w)), width=w, no_wrap=True, overflow="ellipsis")
    if order is not None:
        chosen.sort(key=lambda column: list(order).index(column[0]))
    for column in chosen:
        out.add_column(column[0], justify="right", width=need(column), no_wrap=True)
    shown = [
        distinct_cuts(cells, w) or distinct_cuts(cells, least) or {}
        for (_, cells), w, least in zip(keys, key_width, key_min)
    ]
    rows = len(keys[0][1]) if keys else (len(chosen[0][1]) if chosen else 0)
    for i in range(rows):
        # Text, not markup: a test id's ``[param]`` is not a style tag to swallow.
        out.add_row(
            *(Text(cuts.get(cells[i], cells[i])) for (_, cells), cuts in zip(keys, shown)),
            *(Text(cells[i]) for _, cells in chosen),
        )
    return out, left_out


def _stats_renderable(
    result: pa.Table,
    by: Sequence[str],
    width: int,
    heads: Sequence[str] = STAT_DEFAULT,
    title: str | None = None,
) -> tuple[Table, list[str]]:
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


def phases_renderable(result: pa.Table, width: int = 80) -> Table:
    """The phases fitted to ``width`` like the statistics: each top-level category (bold) and,
    indented under it, its sub-categories; ``% of phase`` is a row's time over its top-level
    category's (100% for the category itself)."""
    rows = result.to_pylist()
    tops = [row["phase"] == row["category"] for row in rows]

    def percent(share: float | None) -> str:
        return "-" if share is None or math.isnan(share) else f"{share * 100:.0f}%"

    keys = [
        ("rank", ["mean" if row["rank"] is None else str(row["rank"]) for row in rows]),
        ("phase", [row["phase"] if top else "  " + row["phase"] for row, top in zip(rows, tops)]),
    ]
    values = [
        ("time", [human_ns(row["time_ns"]) for row in rows]),
        ("per step", [human_ns(row["per_step_ns"]) for row in rows]),
        ("% of phase", [percent(row["share"]) for row in rows]),
        ("steps", [human_count(row["steps"]) for row in rows]),
    ]
    out, _ = fitted_table(
        keys, values, width, title="phases", order=["time", "steps", "per step", "% of phase"]
    )
    for i, top in enumerate(tops):
        if top:
            out.rows[i].style = "bold"
    return out


def print_stats(
    console: Console, result: pa.Table, by: Sequence[str], heads: Sequence[str] = STAT_DEFAULT
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
