"""The HTML report: self-contained, and rendered by a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import threading

import numpy as np
import pytest

import hotspan
from hotspan.cli import main
from hotspan.formats import export
from hotspan.report.html import PALETTE

from _util import run_chromium


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    """Two threads of steps (compute, comms with bytes), one span failing."""
    hotspan.drain()

    def worker(k):
        hotspan.set_thread_name(f"worker-{k}")
        for i in range(4):
            with hotspan.span("step", "train"):
                with hotspan.span("forward", "compute"):
                    sum(range(40_000))
                with hotspan.span("allreduce", "comms", arg=4096):
                    sum(range(20_000))
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
    table = hotspan.drain()
    path = tmp_path_factory.mktemp("report") / "trace.parquet"
    export(table, path)
    return table, path


def spans_of(page: str) -> list:
    return json.loads(re.search(r"const SPANS=(\[.*?\]);\n", page, re.S).group(1))


def test_report_is_self_contained_and_holds_every_span(trace, tmp_path, capsys):
    table, path = trace
    out = tmp_path / "deep" / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    page = out.read_text()
    assert "<link" not in page and not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "@import" not in page
    marks = spans_of(page)
    assert (
        sum(m[7] for m in marks) == table.num_rows
    )  # drawn one by one or merged: every span counted
    assert len(re.findall(r"<rect [^>]*data-i=", page)) == len(marks)
    assert page.count('<div class="lane">') == 1 + 2  # the axis, then one lane per thread
    for text in (
        "worker-0",
        "worker-1",
        "Statistics",
        "Phases",
        "train/compute",
        "allreduce",
        "p99",
    ):
        assert text in page
    assert sum(m[5] for m in marks) >= 1  # the error, in the tooltip data
    assert 'class="s e"' in page or 'class="m e"' in page  # and drawn in red
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]


@pytest.mark.slow
def test_chromium_renders_the_timeline_and_the_hover_details(trace, tmp_path):
    from PIL import Image

    table, path = trace
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    marks = spans_of(out.read_text())
    step = next(i for i, m in enumerate(marks) if m[0] == "step" and m[7] == 1)

    # The page's script pins the details of the span named in the link, as a click would.
    dom = run_chromium(tmp_path, "--dump-dom", f"{out.as_uri()}#span-{step}")
    assert dom.returncode == 0, dom.stderr
    tip = re.search(r'<div id="tip"[^>]*class="pinned"[^>]*>(.*?)</div>', dom.stdout, re.S)
    assert tip, "the tooltip of the linked span is not shown"
    duration = marks[step][3]
    assert (
        "step" in tip.group(1)
        and "category: train" in tip.group(1)
        and "duration: " in tip.group(1)
    )
    assert re.search(rf'<rect class="s sel" data-i="{step}"', dom.stdout)
    assert duration > 0

    shot = tmp_path / "report.png"
    proc = run_chromium(tmp_path, f"--screenshot={shot}", "--window-size=1500,1000", out.as_uri())
    assert proc.returncode == 0 and shot.exists(), proc.stderr
    pixels = np.asarray(Image.open(shot).convert("RGB")).reshape(-1, 3).astype(np.int64)
    # The timeline's spans are painted in the category colours; each of the trace's
    # categories (train, train/compute, train/comms: the first three) covers real area.
    for colour in PALETTE[:3]:
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        painted = int((np.abs(pixels - rgb).sum(axis=1) < 12).sum())
        assert painted > 400, f"{colour}: only {painted} pixels"
    shutil.copy(shot, path.parent / "report.png")  # left beside the trace for a person to look at
