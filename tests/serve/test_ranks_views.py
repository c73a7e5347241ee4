"""serve's views across ranks (issue 31, item 5): the page /runs/{id}/ranks (the stragglers
as `hotspan ranks` gives them, a rank x step heatmap whose cells link to the timeline at
that rank and step), the JSON endpoints it asks (/v1/traces/{id}/ranks, /rank_steps,
/critical_path), and the critical path drawn over the run page's timeline. Against a
generated run whose answers are known (hotspan.testing.many_ranks), through a real uvicorn
process; the drawing in headless Chromium at 1,280 px."""

from __future__ import annotations

import html
import json
import re

import numpy as np
import pytest

import hotspan
from hotspan.analysis.ranks import ranks_summary
from hotspan.testing import Straggler, many_ranks

from ._serving import Server

SLOW_STRAGGLER = 2
SLOW_STEPS = [1, 3, 4, 7, 8, 11, 15, 19]
RANKS, STEPS = 8, 24


@pytest.fixture(scope="module")
def generated():
    return many_ranks(
        RANKS, STEPS, [Straggler(SLOW_STRAGGLER, "data.fetch", 20_000_000, SLOW_STEPS)], seed=3
    )


@pytest.fixture(scope="module")
def ranks_dir(tmp_path_factory, generated):
    root = tmp_path_factory.mktemp("ranks-runs")
    generated.write(root / "job")
    # a run without collectives: its page says so, its export has no flows
    table = generated.table([0])
    keep = np.array([c != "train/comms" for c in table.column("category").to_pylist()])
    hotspan.export(table.filter(keep), root / "solo.parquet")
    return root


@pytest.fixture(scope="module")
def ranks_server(ranks_dir):
    srv = Server(ranks_dir)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def rclient(ranks_server):
    with ranks_server.client() as c:
        yield c


@pytest.fixture(scope="module")
def rid(rclient):
    return {t["path"]: t["id"] for t in rclient.get("/v1/traces").json()["traces"]}


# --------------------------------------------------------------------------- the JSON API


def test_rank_steps_endpoint_is_the_librarys_and_its_blame_cells_are_the_injected_steps(
    rclient, rid, ranks_dir
):
    body = rclient.get(f"/v1/traces/{rid['job']}/rank_steps").json()
    want = hotspan.rank_steps(ranks_dir / "job")
    for column in want.column_names:
        assert body[column] == want.column(column).to_pylist(), column
    assert len(body["rank"]) == RANKS * STEPS
    blamed = {
        (r, s)
        for r, s, b in zip(body["rank"], body["step"], body["blame_ns"])
        if b > 20_000_000  # (ranks - 1) x 20 ms where injected; jitter: a few ms
    }
    assert blamed == {(SLOW_STRAGGLER, s) for s in SLOW_STEPS}


def test_ranks_endpoint_answers_what_hotspan_ranks_prints(rclient, rid, ranks_dir):
    body = rclient.get(f"/v1/traces/{rid['job']}/ranks").json()
    cli = json.loads(json.dumps(ranks_summary(ranks_dir / "job")))  # as `hotspan ranks --json`
    assert body.pop("id") == rid["job"]
    assert body == cli
    assert [r["rank"] for r in body["stragglers"] if r["straggler"]] == [SLOW_STRAGGLER]


def test_critical_path_endpoint_gives_the_segments_in_the_window(
    rclient, rid, ranks_dir, generated
):
    path = hotspan.critical_path(ranks_dir / "job").to_pylist()
    everything = rclient.get(f"/v1/traces/{rid['job']}/critical_path").json()["segments"]
    assert everything == path
    low, high = int(generated.step_start_ns[3, 0]), int(generated.step_end_ns[5, 0])
    got = rclient.get(
        f"/v1/traces/{rid['job']}/critical_path",
        params={"start_ns": low, "end_ns": high, "rank": "1,2"},
    ).json()["segments"]
    assert got == [
        s for s in path if s["end_ns"] > low and s["start_ns"] < high and s["rank"] in (1, 2)
    ]
    assert {s["step"] for s in got} >= {3, 4, 5}
    bad = rclient.get(f"/v1/traces/{rid['job']}/critical_path", params={"rank": "x"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"][-1] == "rank"


def test_the_endpoints_are_in_the_openapi_document_and_unknown_runs_are_404(rclient):
    doc = rclient.get("/openapi.json").json()
    for path in ("ranks", "rank_steps", "critical_path"):
        assert f"/v1/traces/{{id}}/{path}" in doc["paths"]
        assert rclient.get(f"/v1/traces/nope/{path}").status_code == 404


# --------------------------------------------------------------------------- the pages


def test_the_run_page_links_to_the_ranks_page_which_lists_the_stragglers(rclient, rid, ranks_dir):
    page = rclient.get(f"/runs/{rid['job']}").text
    assert f'href="/runs/{rid["job"]}/ranks"' in page
    ranks = rclient.get(f"/runs/{rid['job']}/ranks")
    assert ranks.status_code == 200
    text = ranks.text
    # the same rows as `hotspan ranks`, most blamed first
    answer = ranks_summary(ranks_dir / "job")
    rows = re.findall(r'<tr data-rank="(\d+)"( class="straggler")?>', text)
    assert [int(r) for r, _ in rows] == [r["rank"] for r in answer["stragglers"]]
    assert [int(r) for r, flag in rows if flag] == [SLOW_STRAGGLER]
    (reason,) = [r["reason"] for r in answer["stragglers"] if r["straggler"]]
    assert html.escape(reason, quote=False) in text
    assert 'id="heatmap"' in text and 'data-metric="blame_ns"' in text
    # a run without collectives says so instead of a table
    solo = rclient.get(f"/runs/{rid['solo.parquet']}/ranks").text
    assert 'id="no-collectives"' in solo and 'id="stragglers"' not in solo
    assert rclient.get("/runs/nope/ranks").status_code == 404
    assert rclient.get(f"/runs/{rid['job']}/ranks", params={"metric": "x"}).status_code == 422


def test_the_run_page_resolves_rank_and_step_to_the_steps_window(rclient, rid, generated):
    page = rclient.get(f"/runs/{rid['job']}", params={"rank": 1, "step": 5}).text
    view = re.search(r'<div id="timeline-view"[^>]*>', page).group(0)
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', view))
    assert attrs["focus-rank"] == "1"
    assert int(attrs["focus-start"]) == generated.step_start_ns[5, 1]
    assert int(attrs["focus-end"]) == generated.step_end_ns[5, 1]
    missing = rclient.get(f"/runs/{rid['job']}", params={"rank": 1, "step": 999}).text
    assert "Rank 1 has no step 999" in missing and "focus-start" not in missing


# --------------------------------------------------------------------------- in Chromium


def _dom(tmp_path, url: str, *args: str) -> str:
    from _util import run_chromium

    result = run_chromium(
        tmp_path, "--window-size=1280,1000", "--virtual-time-budget=10000", *args, "--dump-dom", url
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _attrs(dom: str, element_id: str) -> dict[str, str]:
    tag = re.search(rf'<[a-z]+ id="{element_id}"[^>]*>', dom).group(0)
    return dict(re.findall(r'data-([a-z-]+)="([^"]*)"', tag))


@pytest.mark.slow  # a browser
def test_the_heatmap_draws_every_cell_and_links_the_blamed_steps(
    ranks_server, rid, tmp_path, generated
):
    dom = _dom(tmp_path, f"{ranks_server.url}runs/{rid['job']}/ranks")
    attrs = _attrs(dom, "heatmap")
    assert int(attrs["drawn"]) >= 1, dom[-3000:]
    assert (int(attrs["ranks"]), int(attrs["steps"]), int(attrs["cells"])) == (
        RANKS,
        STEPS,
        RANKS * STEPS,
    )
    assert attrs["metric"] == "blame_ns"
    canvas = re.search(r'<div id="heatmap".*?<canvas[^>]*width="(\d+)"', dom, re.S)
    assert canvas and int(canvas.group(1)) <= 1280  # fits the window (device pixel ratio 1)
    top = re.search(r'<ol id="heatmap-top"[^>]*>(.*?)</ol>', dom, re.S).group(1)
    links = re.findall(r'<a href="([^"]*)" data-rank="(\d+)" data-step="(\d+)"', top)
    # the highest blame cells are the injected straggler's slow steps, each a link to them
    first = {(int(r), int(s)) for _h, r, s in links[: len(SLOW_STEPS)]}
    assert first == {(SLOW_STRAGGLER, s) for s in SLOW_STEPS}
    href, rank, step = links[0]
    assert html.unescape(href) == f"/runs/{rid['job']}?rank={rank}&step={step}#timeline-view"
    # another metric, chosen in the URL
    waits = _attrs(
        _dom(tmp_path, f"{ranks_server.url}runs/{rid['job']}/ranks?metric=wait_ns"), "heatmap"
    )
    assert waits["metric"] == "wait_ns" and int(waits["cells"]) == RANKS * STEPS


@pytest.mark.slow  # a browser
def test_a_cells_link_opens_the_timeline_on_that_step_with_that_ranks_tracks_first(
    ranks_server, rid, tmp_path, generated
):
    rank, step = SLOW_STRAGGLER, SLOW_STEPS[1]
    dom = _dom(tmp_path, f"{ranks_server.url}runs/{rid['job']}?rank={rank}&step={step}")
    attrs = _attrs(dom, "timeline-view")
    assert int(attrs["drawn"]) >= 1, dom[-3000:]
    low, high = map(int, attrs["window"].split(","))
    start, end = int(generated.step_start_ns[step, rank]), int(generated.step_end_ns[step, rank])
    assert low <= start and high >= end  # the whole step is shown
    assert (high - low) <= 1.05 * (end - start)  # and little more
    assert attrs["first-rank"] == str(rank) and int(attrs["focus-tracks"]) >= 1


def _red_pixels(png: bytes) -> int:
    """Pixels of exactly the overlay's colour (#d50000): no span is drawn in it."""
    import io

    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(png)).convert("RGB")).reshape(-1, 3)
    return int((np.abs(image.astype(int) - [213, 0, 0]).sum(axis=1) <= 6).sum())


@pytest.mark.slow  # a browser
def test_the_critical_path_overlay_draws_the_known_path_of_the_step(
    ranks_server, rid, tmp_path, ranks_dir, generated
):
    from _util import run_chromium

    step = SLOW_STEPS[0]
    url = f"{ranks_server.url}runs/{rid['job']}?rank=0&step={step}"
    dom = _dom(tmp_path, url + "&critical=1")
    attrs = _attrs(dom, "timeline-view")
    assert "critical" in attrs, dom[-3000:]
    low, high = map(int, attrs["window"].split(","))
    path = hotspan.critical_path(ranks_dir / "job").to_pylist()
    in_window = [s for s in path if s["end_ns"] > low and s["start_ns"] < high]
    assert int(attrs["critical"]) == len(in_window) > 0
    # the step's path is the generator's: through the straggler, late in its data.fetch
    known = [row for row in generated.critical_path() if row[0] == step]
    drawn = {(s["step"], s["rank"], s["name"], s["start_ns"], s["end_ns"]) for s in in_window}
    assert set(known[:-1]) <= drawn  # all but the tail (the rank ending last: see test_ranks)
    assert (step, SLOW_STRAGGLER, "data.fetch") in {k[:3] for k in known}
    # the overlay is on the canvas, and only when asked for
    shots = {}
    for critical in ("1", "0"):
        target = tmp_path / f"shot-{critical}.png"
        result = run_chromium(
            tmp_path,
            "--window-size=1280,3000",
            "--virtual-time-budget=10000",
            f"--screenshot={target}",
            f"{url}&critical={critical}",
        )
        assert result.returncode == 0, result.stderr
        shots[critical] = _red_pixels(target.read_bytes())
    assert shots["0"] == 0 and shots["1"] > 100, shots
    # a run without collectives: each step's path is its own spans, one rank's
    solo = _attrs(
        _dom(tmp_path, f"{ranks_server.url}runs/{rid['solo.parquet']}?critical=1"),
        "timeline-view",
    )
    want = hotspan.critical_path(ranks_dir / "solo.parquet")
    assert int(solo["drawn"]) >= 1 and "critical-error" not in solo
    assert int(solo["critical"]) == want.num_rows == STEPS * 5  # data.fetch ... log
    assert set(want.column("rank").to_pylist()) == {0}
