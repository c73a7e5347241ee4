"""hotspan in Jupyter: results shown as HTML, and a cell magic that records a cell.

    hotspan.display(table)                   # a run: summary, small timeline, flame graph
    hotspan.display(hotspan.stats(table))    # the statistics as an HTML table
    hotspan.display(hotspan.compare(a, b))   # a comparison, verdicts coloured

    %load_ext hotspan                        # then a cell ending in hotspan.stats(t),
                                             # hotspan.phases(t) or hotspan.compare(a, b)
                                             # shows the table as HTML
    %%hotspan [NAME]                         # records the cell; shows its stats and flame graph,
                                             # and keeps the spans in NAME (a pyarrow.Table)

``display`` returns an :class:`HtmlView`, which Jupyter (and any front end that honours
``_repr_html_``) draws. The run summary is the HTML report's own sections inside an
``<iframe srcdoc>``, so the report's style and script never touch the notebook's page.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["HtmlView", "display", "load_ipython_extension", "unload_ipython_extension"]

#: Rows of a statistics table or comparison shown before "... more".
MAX_ROWS = 100
_SPAN_COLUMNS = {"span_id", "parent_id", "start_ns", "end_ns", "name"}
_STAT_COLUMNS = {"count", "total_ns", "self_ns", "p50_ns"}
_PHASE_COLUMNS = {"phase", "time_ns", "steps", "per_step_ns"}
_COMPARE_COLUMNS = {"verdict", "p50_ns_base", "p50_ns_new"}
#: Headers that say what a share divides, as ``hotspan stats`` prints them.
_STAT_HEADS = {"share": "self %", "busy": "total %"}
_PHASE_HEADS = {"share": "% of phase", "per_step_ns": "per step"}
_VERDICT_COLOURS = {"slower": "#f8d0d0", "faster": "#d3ecd3", "new": "#e3ecf8", "gone": "#eeeeee"}
_TABLE_STYLE = (
    "border-collapse:collapse;font:12px system-ui,sans-serif",
    "border:1px solid #ddd;padding:2px 7px",
)


class HtmlView:
    """Something drawn as HTML in a notebook (``_repr_html_``); ``html`` is the markup."""

    def __init__(self, markup: str, text: str) -> None:
        self.html = markup
        self._text = text

    def _repr_html_(self) -> str:
        return self.html

    def __repr__(self) -> str:
        return self._text


def display(result: Any, *, title: str = "hotspan") -> HtmlView:
    """``result`` as HTML for a notebook: a span table (a run summary with a small timeline
    and the flame graph), the table of ``hotspan.stats`` or ``hotspan.phases``, or the
    result of ``hotspan.compare`` (a list of rows or a table with a ``verdict`` column)."""
    import pyarrow as pa

    if isinstance(result, HtmlView):
        return result
    if isinstance(result, pa.RecordBatch):
        result = pa.Table.from_batches([result])
    if isinstance(result, pa.Table):
        columns = set(result.column_names)
        if _SPAN_COLUMNS <= columns:
            return _run_view(result, title)
        if _STAT_COLUMNS <= columns:
            return HtmlView(_stats_html(result), f"<hotspan stats: {result.num_rows} groups>")
        if _PHASE_COLUMNS <= columns:
            return HtmlView(_phases_html(result), f"<hotspan phases: {result.num_rows} rows>")
        if "verdict" in columns:
            return HtmlView(
                _compare_html(result.to_pylist()), f"<hotspan comparison: {result.num_rows} groups>"
            )
    elif isinstance(result, list) and (
        not result or (isinstance(result[0], dict) and "verdict" in result[0])
    ):
        return HtmlView(_compare_html(result), f"<hotspan comparison: {len(result)} groups>")
    raise TypeError(
        "display() shows a span table, the table of hotspan.stats() or hotspan.phases(), or "
        f"the result of hotspan.compare(), not {type(result).__name__}"
    )


# --------------------------------------------------------------------------- the views


def _run_view(table: pa.Table, title: str) -> HtmlView:
    from .report.html import html_report

    page = html_report(table, title=title, sections=("summary", "timeline", "flame"))
    # The page in a frame of its own (srcdoc: same origin, so it can be sized to its content).
    frame = (
        f'<iframe srcdoc="{html.escape(page, quote=True)}" style="width:100%;height:520px;border:0" '
        "onload=\"this.style.height=(this.contentDocument.documentElement.scrollHeight+16)+'px'\"></iframe>"
    )
    return HtmlView(frame, f"<hotspan run: {table.num_rows:,} spans>")


def _cell(value: Any, column: str) -> tuple[str, str]:
    """(text, CSS text-align) of one value as the CLI writes it."""
    from ._units import human_count, human_ns, human_rate

    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-", "right"
    if column.endswith("_change") or column in ("change_low", "change_high"):
        return f"{value * 100:+.1f}%", "right"
    if column in ("share", "busy"):
        return f"{value * 100:.1f}%", "right"
    if column.endswith("_ns"):
        return human_ns(value), "right"
    if column == "arg_per_s":
        return human_rate(value), "right"
    if column == "arg_sum":
        return human_count(value), "right"
    if column == "p_value":
        return f"{value:.3g}", "right"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value), "left"
    return f"{value:,}", "right"


def _html_table(
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    caption: str,
    row_colour: Any = None,
    heads: dict[str, str] | None = None,
) -> str:
    table_style, cell_style = _TABLE_STYLE
    heads = heads or {}
    head = "".join(
        f'<th style="{cell_style};background:#f0f0f0">'
        f"{html.escape(heads.get(c, c.removesuffix('_ns')))}</th>"
        for c in columns
    )
    body = []
    for row in rows[:MAX_ROWS]:
        background = f"background:{row_colour(row)};" if row_colour and row_colour(row) else ""
        cells = []
        for column in columns:
            text, align = _cell(row.get(column), column)
            cells.append(f'<td style="{cell_style};text-align:{align}">{html.escape(text)}</td>')
        body.append(f'<tr style="{background}">{"".join(cells)}</tr>')
    more = (
        f'<p style="color:#777">{len(rows) - MAX_ROWS:,} more rows</p>'
        if len(rows) > MAX_ROWS
        else ""
    )
    return (
        f'<table class="hotspan" style="{table_style}"><caption style="text-align:left;font-weight:600">'
        f"{html.escape(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"
        f"{more}"
    )


def _stats_html(result: pa.Table) -> str:
    shown = [c for c in result.column_names if c not in ("mean_ns", "min_ns", "busy", "arg_sum")]
    return _html_table(
        result.to_pylist(), shown, f"hotspan stats: {result.num_rows:,} groups", heads=_STAT_HEADS
    )


def _phases_html(result: pa.Table) -> str:
    shown = [c for c in result.column_names if c != "category"]
    rows = [
        {**row, "rank": "mean" if row.get("rank") is None else row["rank"]}
        for row in result.to_pylist()
    ]
    return _html_table(rows, shown, "hotspan phases", heads=_PHASE_HEADS)


def _table_html(table: pa.Table) -> str | None:
    """The HTML of a table ``stats``, ``phases`` or ``compare`` returned; None for any other
    table (IPython then shows its text, or asks the formatter that was there before)."""
    columns = set(table.column_names)
    if _STAT_COLUMNS <= columns:
        return _stats_html(table)
    if _PHASE_COLUMNS <= columns:
        return _phases_html(table)
    if _COMPARE_COLUMNS <= columns:
        return _compare_html(table.to_pylist())
    return None


def _compare_html(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "<p>hotspan compare: no span groups on either side.</p>"
    keys = [
        k
        for k in rows[0]
        if not k.endswith(("_base", "_new", "_change", "_low", "_high"))
        and k not in ("p_value", "verdict")
    ]
    columns = [
        *keys,
        "count_base",
        "count_new",
        "p50_ns_base",
        "p50_ns_new",
        "p50_ns_change",
        "change_low",
        "change_high",
        "p_value",
        "verdict",
    ]
    columns = [c for c in columns if c in rows[0]]
    verdicts: dict[str, int] = {}
    for row in rows:
        verdict = str(row.get("verdict"))
        verdicts[verdict] = verdicts.get(verdict, 0) + 1
    caption = "hotspan compare: " + ", ".join(f"{n} {v}" for v, n in sorted(verdicts.items()))
    return _html_table(rows, columns, caption, lambda row: _VERDICT_COLOURS.get(row.get("verdict")))


# --------------------------------------------------------------------------- the cell magic

#: The spans of the last ``%%hotspan`` cell.
last_table: pa.Table | None = None


def _record_cell(shell: Any, line: str, cell: str) -> None:
    """``%%hotspan [NAME]``: run the cell inside a span of its own ("cell", no category, so
    the cell's spans keep their own category paths) while a subscriber collects every span completed meanwhile (on every thread;
    another consumer's ``drain()`` loses nothing), then show their statistics and flame graph."""
    import pyarrow as pa
    from IPython.display import display as show

    from ._native import span
    from .analysis import stats
    from .recording.subscribers import subscribe
    from .schema import SPAN_SCHEMA

    global last_table
    name = line.strip()
    if name and not name.isidentifier():
        raise ValueError(f"%%hotspan NAME: {name!r} is not a Python name")
    batches: list[pa.RecordBatch] = []
    subscription = subscribe(batches.append)
    try:
        with span("cell"):
            # The user's own cell, in their namespace: what the magic is for.
            exec(compile(cell, "<%%hotspan cell>", "exec"), shell.user_ns)  # noqa: S102
    finally:
        subscription.close()
    table = (
        pa.Table.from_batches(batches, schema=SPAN_SCHEMA) if batches else SPAN_SCHEMA.empty_table()
    )
    last_table = table
    if name:
        shell.user_ns[name] = table
    show(display(stats(table)))
    show(display(table, title="%%hotspan cell"))


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext hotspan``: registers the ``%%hotspan`` cell magic, and an HTML formatter
    for the tables ``stats``, ``phases`` and ``compare`` return, so that a cell ending in one
    shows it as :func:`display` would. The formatter is registered by the type's name
    (``pyarrow.lib.Table``): it loads nothing until a table is shown, and pyarrow itself is
    left as it is (other tables show as before)."""
    shell.register_magic_function(
        lambda line, cell: _record_cell(shell, line, cell), magic_kind="cell", magic_name="hotspan"
    )
    formatter = shell.display_formatter.formatters["text/html"]
    unload_ipython_extension(shell)  # loaded twice: one formatter, not one calling the other
    try:
        before = formatter.lookup_by_type("pyarrow.lib.Table")
    except KeyError:
        before = None

    def table_html(table: pa.Table) -> str | None:
        markup = _table_html(table)
        return markup if markup is not None or before is None else before(table)

    table_html.hotspan = True  # type: ignore[attr-defined]
    table_html.before = before  # type: ignore[attr-defined]
    _register(formatter, table_html)


def _register(formatter: Any, function: Any) -> None:
    """By name while pyarrow is not loaded (nothing imported now); by the type once it is (a
    printer registered for the type itself would otherwise be found first)."""
    import sys

    pyarrow = sys.modules.get("pyarrow")
    if pyarrow is not None:
        formatter.for_type(pyarrow.Table, function)
    else:
        formatter.for_type_by_name("pyarrow.lib", "Table", function)


def unload_ipython_extension(shell: Any) -> None:
    """``%unload_ext hotspan``: the tables' HTML formatter goes, the one before it (if any)
    comes back. (IPython cannot take a magic back; ``%%hotspan`` stays.)"""
    formatter = shell.display_formatter.formatters["text/html"]
    try:
        current = formatter.lookup_by_type("pyarrow.lib.Table")
    except KeyError:
        return
    if getattr(current, "hotspan", False):
        formatter.pop("pyarrow.lib.Table", None)
        if current.before is not None:
            _register(formatter, current.before)
