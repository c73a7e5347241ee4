"""The timeline fits its container at any width (issue 33, item 3): at 1,280 and 1,920 px
the run page does not scroll sideways and the end of the run is drawn inside the window,
in a real headless Chromium."""

from __future__ import annotations

import pytest

from _cdp import FIT_JS, Page


def assert_fits(fit: dict, width: int) -> None:
    assert fit["scrollWidth"] <= fit["clientWidth"], fit  # no horizontal scroll of the page
    assert fit["innerScrollWidth"] <= fit["innerClientWidth"], fit
    assert 0 <= fit["canvasLeft"] and fit["canvasRight"] <= fit["viewport"] == width, fit
    # the run's last span ends at the plot's right edge: painted there, inside the window
    assert fit["painted"] >= fit["canvasWidth"] - 3, fit


@pytest.mark.slow  # a browser per width
@pytest.mark.parametrize("width", [1024, 1280, 1920])
def test_the_run_page_timeline_fits_the_window(server, ids, tmp_path, width):
    with Page(tmp_path, width) as page:
        page.open(f"{server.url}runs/{ids['job']}")
        fit = page.wait_for(FIT_JS % "document", what="the timeline drawn")
    assert_fits(fit, width)
