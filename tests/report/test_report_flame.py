"""The flame view of the HTML report: the tree in the page, drawn by headless Chromium."""
from __future__ import annotations

import json
import re
import threading

import pytest
from _util import run_chromium

import hotspan
from hotspan.analysis.flamegraph import flame_tree
from hotspan.cli import main
from hotspan.formats import export


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    hotspan.enable()
    hotspan.drain()

    def worker(k: int) -> None:
        hotspan.set_thread_name(f"worker-{k}")
        for _ in range(3):
            with hotspan.span("step", "train"):
                with hotspan.span("forward", "compute"):
                    sum(range(40_000))
                    with hotspan.span("matmul"):
                        sum(range(20_000))
                with hotspan.span("allreduce", "comms"):
                    sum(range(10_000))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table = hotspan.drain()
    path = tmp_path_factory.mktemp("flame") / "trace.parquet"
    export(table, path)
    return table, path


def flame_data(page: str) -> dict:
    return json.loads(re.search(r'<script type="application/json" class="fl-data">(.*?)</script>', page, re.DOTALL).group(1))


def frames(dom: str) -> list[tuple[str, float, float]]:
    """(label, left px, width px) of every frame drawn."""
    found = re.findall(r'<div class="fr[^"]*" data-node="\d+" data-label="([^"]*)" style="left: ([\d.]+)px; '
                       r'width: ([\d.]+)px;', dom)
    return [(label, float(left), float(width)) for label, left, width in found]


def test_the_report_holds_the_flame_tree(trace, tmp_path):
    table, path = trace
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    page = out.read_text()
    assert "<h2>Flame graph</h2>" in page and not re.search(r"<script[^>]*\bsrc=", page)
    data = flame_data(page)
    merged = data["trees"]["merged"]
    assert merged == flame_tree(table).to_json()
    assert set(data["trees"]) == {"merged", "thread"}  # one rank: no per-rank tree
    # The frames take the timeline's colours.
    assert data["colours"]["train/compute"] in page.split("<h2>Flame graph</h2>")[0]


@pytest.mark.slow
def test_chromium_draws_the_frames_and_zooms(trace, tmp_path):
    table, path = trace
    out = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(out)]) == 0
    tree = flame_tree(table)
    dom = run_chromium(tmp_path, "--dump-dom", "--window-size=1400,1000", out.as_uri())
    assert dom.returncode == 0, dom.stderr
    drawn = frames(dom.stdout)
    assert {label for label, _l, _w in drawn} == {"all", "step", "forward", "matmul", "allreduce"}
    width = {label: w for label, _l, w in drawn}
    # Widths follow the total times (each frame's self time and everything below it).
    forward = tree.label.index("forward")
    step = tree.label.index("step")
    assert width["forward"] / width["step"] == pytest.approx(tree.total_ns[forward] / tree.total_ns[step], rel=0.01)

    # Zoomed into "forward" (as a click does; a link names the frame): it takes the whole
    # width, its ancestors stay above, "allreduce" (a sibling) is gone.
    dom = run_chromium(tmp_path, "--dump-dom", "--window-size=1400,1000", f"{out.as_uri()}#flame=merged:{forward}")
    assert dom.returncode == 0, dom.stderr
    drawn = frames(dom.stdout)
    labels = [label for label, _l, _w in drawn]
    assert "allreduce" not in labels and labels[:3] == ["all", "step", "forward"]
    width = {label: w for label, _l, w in drawn}
    assert width["forward"] == width["all"]
    matmul = tree.label.index("matmul")
    assert width["matmul"] / width["forward"] == pytest.approx(tree.total_ns[matmul] / tree.total_ns[forward], rel=0.01)
    crumbs = re.search(r'<span class="fl-crumbs">(.*?)</span></div>', dom.stdout, re.DOTALL).group(1)
    assert re.sub(r"<[^>]+>", "", crumbs) == "all › step › forward"
