"""The report's timeline is serve's drawing (timeline.js) fed from the data the report
embeds, and it fits its container at any width (issue 33, item 3): at 1,280 and 1,920 px
the page does not scroll sideways and the end of the run is drawn inside the window, in the
report and in a notebook's HTML output, in a real headless Chromium."""

from __future__ import annotations

import json
import re
import threading

import pytest

import hotspan
from hotspan.report.html import REPORT_BINS, html_report, timeline_script

from _cdp import FIT_JS, Page


@pytest.fixture(scope="module")
def table():
    """Two threads of steps, one span failing; a long name to widen the labels."""
    hotspan.drain()

    def worker(k):
        hotspan.set_thread_name(f"a-rather-long-worker-thread-name-{k}")
        for i in range(6):
            with hotspan.span("step", "train"):
                with hotspan.span("forward", "compute"):
                    sum(range(30_000))
                if k == 1 and i == 2:
                    try:
                        with hotspan.span("flaky", "compute"):
                            raise RuntimeError
                    except RuntimeError:
                        pass

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return hotspan.drain()


def embedded(page: str) -> dict:
    return json.loads(re.search(r"window\.hotspanTimelineData=(\{.*?\});</script>", page).group(1))


def test_the_report_draws_with_serves_timeline_from_embedded_data(table):
    page = html_report(table)
    assert timeline_script() in page  # one drawing code for serve and the report
    assert "<svg" not in page.split('id="timeline-view"')[1].split("</script>")[0]
    data = embedded(page)
    assert data["width"] == REPORT_BINS
    tracks = data["tracks"]
    # every span once: listed exactly or counted in a pixel
    listed = sum(len(t["spans"]) + sum(p["count"] for p in t["pixels"]) for t in tracks)
    assert listed == table.num_rows
    labels = {t["label"] for t in tracks}
    assert labels == {f"r0 a-rather-long-worker-thread-name-{k}" for k in range(2)}
    errors = [s for t in tracks for s in t["spans"] if s.get("error")]
    assert [s["name"] for s in errors] == ["flaky"]
    assert all(s["colour"].startswith("#") for t in tracks for s in t["spans"])


def assert_fits(fit: dict, width: int) -> None:
    assert fit["scrollWidth"] <= fit["clientWidth"], fit  # no horizontal scroll of the page
    assert fit["innerScrollWidth"] <= fit["innerClientWidth"], fit
    assert 0 <= fit["canvasLeft"] and fit["canvasRight"] <= fit["viewport"] == width, fit
    # the run's last span ends at the plot's right edge: painted there, inside the window
    assert fit["painted"] >= fit["canvasWidth"] - 3, fit


@pytest.mark.slow  # a browser per width
@pytest.mark.parametrize("width", [1280, 1920])
def test_the_report_timeline_fits_the_window(table, tmp_path, width):
    out = tmp_path / "report.html"
    out.write_text(html_report(table), encoding="utf-8")
    with Page(tmp_path, width) as page:
        page.open(out.as_uri())
        fit = page.wait_for(FIT_JS % "document", what="the timeline drawn")
    assert_fits(fit, width)


@pytest.mark.slow  # a browser per width
@pytest.mark.parametrize("width", [1280, 1920])
def test_a_notebooks_timeline_fits_the_window(table, tmp_path, width):
    """The HTML a notebook shows (``_repr_html_``), in an output area as Jupyter lays it out
    (a prompt column beside the output)."""
    view = hotspan.display(table)
    out = tmp_path / "notebook.html"
    out.write_text(
        '<!DOCTYPE html><html><head><meta charset="utf-8"></head><body style="margin:0">'
        '<div style="display:flex;padding:5px 20px"><div style="flex:0 0 100px">Out[1]:</div>'
        f'<div style="flex:1 1 auto;min-width:0">{view._repr_html_()}</div></div></body></html>',
        encoding="utf-8",
    )
    with Page(tmp_path, width) as page:
        page.open(out.as_uri())
        fit = page.wait_for(
            FIT_JS % "document.querySelector('iframe').contentDocument", what="the timeline drawn"
        )
    assert_fits(fit, width)
