"""hotspan in Jupyter, run for real: a notebook executed by nbclient on an IPython kernel."""

from __future__ import annotations

import re

# The test extra installs nbformat, nbclient and ipykernel: a missing one fails here
# rather than skipping.
import nbclient
import nbformat
import pytest

import hotspan
from hotspan.notebook import HtmlView


def test_display_kinds():
    hotspan.drain()
    for _ in range(3):
        with hotspan.span("step", "train"), hotspan.span("inner", "compute"):
            pass
    table = hotspan.drain()
    stats_view = hotspan.display(hotspan.stats(table))
    assert isinstance(stats_view, HtmlView) and "inner" in stats_view._repr_html_()
    assert "hotspan stats: 2 groups" in stats_view._repr_html_()
    comparison = hotspan.display(hotspan.compare(table, table))
    assert "verdict" in comparison.html and "same" in comparison.html
    run = hotspan.display(table)
    assert (
        run.html.startswith("<iframe srcdoc=") and "hs-flame" in run.html and "Timeline" in run.html
    )
    with pytest.raises(TypeError, match="display\\(\\) shows a span table"):
        hotspan.display(42)


def html_outputs(cell) -> list[str]:
    return [
        o["data"]["text/html"] for o in cell.outputs if "data" in o and "text/html" in o["data"]
    ]


@pytest.mark.slow
def test_cell_magic_and_display_in_a_notebook():
    cells = [
        "%load_ext hotspan",
        (
            "%%hotspan run\n"
            "import hotspan, threading\n"
            "def work():\n"
            "    for _ in range(4):\n"
            "        with hotspan.span('step', 'train'):\n"
            "            with hotspan.span('forward', 'compute'):\n"
            "                sum(range(20_000))\n"
            "t = threading.Thread(target=work); t.start(); t.join()\n"
            "work()"
        ),
        "print(run.num_rows, sorted(set(run.column('name').to_pylist())))",
        "hotspan.display(hotspan.stats(run))",
        "hotspan.display(hotspan.compare(run, run))",
        "hotspan.stats(run)",  # no display(): the extension's formatter shows it
        "hotspan.compare(run, run)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    # "python3": jupyter_client's own kernel, run by this interpreter (hotspan importable).
    client = nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3")
    client.execute()
    magic = notebook.cells[1]
    shown = html_outputs(magic)
    assert len(shown) == 2, magic.outputs
    stats_html, run_html = shown
    # Both threads' spans, and the cell's own span around them.
    assert re.search(r"<td[^>]*>step</td><td[^>]*>8</td>", stats_html), stats_html
    assert ">cell</td>" in stats_html
    assert (
        run_html.startswith("<iframe srcdoc=") and "hs-flame" in run_html and "forward" in run_html
    )
    printed = "".join(o.get("text", "") for o in notebook.cells[2].outputs)
    assert printed.strip() == "17 ['cell', 'forward', 'step']"
    assert "hotspan stats: 3 groups" in html_outputs(notebook.cells[3])[0]
    assert "3 same" in html_outputs(notebook.cells[4])[0]
    assert "hotspan stats: 3 groups" in html_outputs(notebook.cells[5])[0]
    assert "3 same" in html_outputs(notebook.cells[6])[0]
