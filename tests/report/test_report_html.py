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


def timeline_of(page: str) -> dict:
    """The timeline the report embeds for serve's drawing (timeline.js)."""
    return json.loads(re.search(r"window\.hotspanTimelineData=(\{.*?\});</script>", page).group(1))


def test_report_is_self_contained_and_holds_every_span(trace, tmp_path, capsys):
    table, path = trace
    out = tmp_path / "deep" / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    page = out.read_text()
    assert "<link" not in page and not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"(src|href)=\"(https?:)?//", page) and "@import" not in page
    tracks = timeline_of(page)["tracks"]
    # listed exactly or counted in a pixel: every span counted once
    assert sum(len(t["spans"]) + sum(p["count"] for p in t["pixels"]) for t in tracks) == (
        table.num_rows
    )
    assert sorted(t["label"] for t in tracks) == ["r0 worker-0", "r0 worker-1"]
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
    # the error, marked for the drawing (outlined in red) and its tooltip
    assert [s["name"] for t in tracks for s in t["spans"] if s.get("error")] == ["flaky"]
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]


@pytest.mark.slow
def test_chromium_renders_the_timeline(trace, tmp_path):
    from PIL import Image

    table, path = trace
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    page = out.read_text()
    assert timeline_of(page)["tracks"]
    # serve's drawing, run offline from the embedded data: the canvas drawn, no request made
    dom = run_chromium(tmp_path, "--dump-dom", "--virtual-time-budget=5000", out.as_uri())
    assert dom.returncode == 0, dom.stderr
    assert re.search(r'id="timeline-view"[^>]*data-drawn="[1-9]', dom.stdout), dom.stdout[-2000:]
    assert re.search(r'<p class="tl-status note">2 tracks · ', dom.stdout), dom.stdout[-2000:]

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
