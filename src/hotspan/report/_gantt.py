"""A timeline in the terminal: one row per rank/thread, one glyph per category.

Each cell shows the category holding most of the cell's time at the innermost level
(what the thread was doing, not the step around it); a dim glyph means the thread was
inside spans for less than half of the cell; ``!`` marks a cell where a span ended with
an error.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from rich.console import Group, RenderableType
from rich.text import Text

from .._units import human_ns
from ._layout import Layout, cell_coverage, error_cells, layout

__all__ = [
    "COLORS",
    "ERROR_GLYPH",
    "GLYPHS",
    "LABEL_WIDTH",
    "OTHER_GLYPH",
    "fit_label",
    "gantt",
    "legend",
    "step_gantts",
]

#: Glyphs for categories, most time first; "!" is kept for errors.
GLYPHS = "█▓▒░#=+*%@&o~^:"
COLORS = (
    "cyan",
    "magenta",
    "yellow",
    "green",
    "blue",
    "red",
    "bright_cyan",
    "bright_magenta",
    "bright_yellow",
    "bright_green",
    "bright_blue",
    "white",
    "cyan",
    "magenta",
    "yellow",
)
OTHER_GLYPH = "·"
ERROR_GLYPH = "!"
LABEL_WIDTH = 22


def gantt(table: pa.Table, *, width: int = 100) -> RenderableType:
    """The whole trace as one chart."""
    lay = layout(table)
    if not len(lay.start):
        return Text("(no spans)")
    return Group(_chart(lay, lay.t0, lay.t1, width), legend(lay))


def step_gantts(table: pa.Table, step: str, *, width: int = 100) -> list[RenderableType]:
    """One chart per occurrence of the span named ``step``: the n-th occurrence on each
    lane is drawn together (step n of every rank), each lane with its own duration.

    Raises ``ValueError`` when no span has that name.
    """
    lay = layout(table)
    is_step = np.asarray(pc.equal(table.column("name").cast(pa.string()), step).fill_null(False))
    rows = np.flatnonzero(is_step)
    if not len(rows):
        raise ValueError(f"no span named {step!r} in the trace")
    # The ordinal of each occurrence on its lane, by start time.
    rows = rows[np.lexsort((lay.start[rows], lay.lane[rows]))]
    lanes = lay.lane[rows]
    first_of_lane = np.searchsorted(lanes, lanes)
    ordinal = np.arange(len(rows)) - first_of_lane
    count = int(ordinal.max()) + 1
    charts: list[RenderableType] = []
    for k in range(count):
        mine = rows[ordinal == k]
        w0, w1 = int(lay.start[mine].min()), int(lay.end[mine].max())
        durations = {int(lay.lane[r]): int(lay.duration[r]) for r in mine}
        if len(mine) == 1:
            title = f"{step} {k + 1}/{count}: {human_ns(lay.duration[mine[0]])}"
        else:
            title = (
                f"{step} {k + 1}/{count}: {human_ns(w1 - w0)} across {len(mine)} lanes "
                f"(slowest {human_ns(max(durations.values()))}, fastest {human_ns(min(durations.values()))})"
            )
        charts.append(Group(Text(title, style="bold"), _chart(lay, w0, w1, width, durations)))
    charts.append(legend(lay))
    return charts


def legend(lay: Layout) -> Text:
    text = Text()
    for i, name in enumerate(lay.categories[: len(GLYPHS)]):
        text.append(GLYPHS[i], style=COLORS[i])
        text.append(f" {name}  ")
    if len(lay.categories) > len(GLYPHS):
        text.append(f"{OTHER_GLYPH} other  ")
    text.append(ERROR_GLYPH, style="bold red")
    text.append(" error")
    return text


#: Where a label may be cut: between words and path components first, then inside
#: snake_case and kebab-case names.
_WORD_BREAKS = (frozenset(" /.:()[],;="), frozenset(" /.:()[],;=_-"))


def fit_label(label: str, width: int) -> str:
    """``label`` in ``width`` characters: a long one loses its middle, not its end, where the
    pid or thread id that tells two lanes apart is written (and the leaf of a category path:
    ``train/compute`` and ``train/comms`` stay apart). It is cut between words: whole words
    kept at the end, as many as fit, then at the start (``…/compute``, ``r0 … (4242)``, never
    ``trai…mpute``); only a last word too long for the width alone is cut inside."""
    if len(label) <= width:
        return label
    if width <= 1:
        return label[:width]
    room = width - 1  # the ellipsis takes one
    for separators in _WORD_BREAKS:
        breaks = [
            i for i in range(1, len(label)) if label[i - 1] in separators or label[i] in separators
        ]
        tail_at = next((i for i in breaks if len(label) - i <= room), None)
        if tail_at is not None:
            tail = label[tail_at:]
            head_at = max((i for i in breaks if i <= min(room - len(tail), tail_at)), default=0)
            return label[:head_at] + "…" + tail
    head = room // 2  # the last word alone is too long: cut inside it
    return label[:head] + "…" + label[len(label) - (room - head) :]


def _chart(
    lay: Layout, w0: int, w1: int, width: int, durations: dict[int, int] | None = None
) -> Text:
    n_categories = min(len(lay.categories), len(GLYPHS) + 1)
    coverage = cell_coverage(lay, w0, w1, width, n_categories)
    covered = coverage.sum(axis=2)
    dominant = coverage.argmax(axis=2)
    errors = error_cells(lay, w0, w1, width)
    cell_ns = max(w1 - w0, 1) / width
    out = Text(no_wrap=True, overflow="crop")
    for lane, label in enumerate(lay.lane_labels):
        out.append(fit_label(label, LABEL_WIDTH).ljust(LABEL_WIDTH) + " │")
        for cell in range(width):
            if errors[lane, cell]:
                out.append(ERROR_GLYPH, style="bold red")
            elif covered[lane, cell] <= 0.01 * cell_ns:  # idle (or float residue)
                out.append(" ")
            else:
                c = int(dominant[lane, cell])
                glyph = GLYPHS[c] if c < len(GLYPHS) else OTHER_GLYPH
                style = COLORS[c] if c < len(COLORS) else "white"
                if covered[lane, cell] < 0.5 * cell_ns:
                    style += " dim"
                out.append(glyph, style=style)
        out.append("│")
        if durations is not None and lane in durations:
            out.append(" " + human_ns(durations[lane]))
        out.append("\n")
    left, right = "0", human_ns(w1 - w0)
    middle = human_ns((w1 - w0) / 2)
    axis = [" "] * width
    for position, text in (
        (0, left),
        (width // 2 - len(middle) // 2, middle),
        (width - len(right), right),
    ):
        for i, ch in enumerate(text):
            if 0 <= position + i < width:
                axis[position + i] = ch
    out.append(" " * LABEL_WIDTH + " └" + "".join(axis) + "┘", style="dim")
    return out
