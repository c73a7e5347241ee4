"""The terminal Gantt chart, on hand-built traces whose picture is known cell by cell."""

from __future__ import annotations

import pyarrow as pa
import pytest
from rich.console import Console

from hotspan._schema import SPAN_SCHEMA, TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.report import gantt, step_gantts
from hotspan.report._gantt import ERROR_GLYPH, GLYPHS


def table_of(rows):
    defaults = dict(
        parent_id=None,
        category=None,
        depth=0,
        thread_id=1,
        thread_name="main",
        pid=1,
        rank=0,
        arg=None,
        error=False,
    )
    rows = [{**defaults, **r, "end_ns": r["start_ns"] + r["duration_ns"]} for r in rows]
    arrays = []
    for field in TRACE_SCHEMA:
        values = [r[field.name] for r in rows]
        arrays.append(
            pa.array(values, pa.string()).dictionary_encode()
            if pa.types.is_dictionary(field.type)
            else pa.array(values, field.type)
        )
    return with_self_ns(pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA))


def render(renderable, width=200) -> list[str]:
    console = Console(width=width, color_system=None, record=True)
    console.print(renderable)
    return console.export_text().splitlines()


def cells(line: str) -> str:
    return line.split("│")[1]


def test_each_cell_shows_the_innermost_category_and_errors():
    # thread 1: outer [0, 100) "a"; inner [50, 100) "a/b" inside it; an error span ends at 30
    # thread 2: "c" on [0, 20) only
    table = table_of(
        [
            dict(span_id=1, name="outer", category="a", start_ns=0, duration_ns=100),
            dict(
                span_id=2,
                parent_id=1,
                name="inner",
                category="a/b",
                start_ns=50,
                duration_ns=50,
                depth=1,
            ),
            dict(
                span_id=3,
                parent_id=1,
                name="bad",
                category="a",
                start_ns=20,
                duration_ns=9,
                depth=1,
                error=True,
            ),
            dict(
                span_id=4,
                name="other",
                category="c",
                start_ns=0,
                duration_ns=20,
                thread_id=2,
                thread_name="two",
            ),
        ]
    )
    lines = render(gantt(table, width=10))
    main, two = (next(line for line in lines if line.startswith(p)) for p in ("r0 main", "r0 two"))
    a, b = GLYPHS[0], GLYPHS[1]  # "a" holds the most time (100 + 9), then "a/b" (50), then "c" (20)
    assert cells(main) == a * 2 + ERROR_GLYPH + a * 2 + b * 5
    assert cells(two) == GLYPHS[2] * 2 + " " * 8
    legend = lines[-1]
    assert f"{a} a " in legend and f"{b} a/b" in legend and f"{ERROR_GLYPH} error" in legend


def test_step_charts_take_the_nth_occurrence_on_every_lane_together():
    rows = []
    for thread, lengths in ((1, (10, 30)), (2, (20, 40))):
        t = 0
        for k, length in enumerate(lengths):
            rows.append(
                dict(
                    span_id=thread * 100 + k,
                    name="step",
                    category="s",
                    start_ns=t,
                    duration_ns=length,
                    thread_id=thread,
                    thread_name=f"t{thread}",
                )
            )
            t += length
    charts = step_gantts(table_of(rows), "step", width=20)
    assert len(charts) == 3  # two steps and the legend
    first = render(charts[0])
    assert first[0].startswith("step 1/2: 20 ns across 2 lanes (slowest 20 ns, fastest 10 ns)")
    t1 = next(line for line in first if line.startswith("r0 t1"))
    assert cells(t1) == GLYPHS[0] * 10 + GLYPHS[0] * 10  # t1's second step starts at 10: still "s"
    assert t1.endswith("10 ns")
    second = render(charts[1])
    assert second[0].startswith("step 2/2: ")
    with pytest.raises(ValueError, match="no span named 'nope'"):
        step_gantts(table_of(rows), "nope")


def test_empty_trace():
    assert "no spans" in "\n".join(render(gantt(SPAN_SCHEMA.empty_table())))
