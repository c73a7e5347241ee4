"""Counters under serve's timeline (issue 33 item 4): GET /v1/traces/{id}/counters answers a
lane per counter with per-pixel min/max/last for the window asked (the library's
counter_lanes), and the run page draws a lane per counter under the span tracks. Through a
real server process and headless Chromium."""

from __future__ import annotations

import re

import pytest
from _util import run_chromium, run_python

import hotspan
from hotspan.counters import counter_lanes

from ._serving import Server

PROGRAM = """
import hotspan
step = hotspan.span("step")
with hotspan.record({out!r}):
    for i in range(10):
        with step:
            hotspan.counter("queue", i)
            hotspan.counter("memory", 1000 + 10 * i)
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("served")
    done = run_python(PROGRAM.format(out=str(root / "job")))
    assert done.returncode == 0, done.stderr
    server = Server(root)
    try:
        with server.client() as client:
            (entry,) = client.get("/v1/traces").json()["traces"]
            yield server, client, entry["id"], root / "job"
    finally:
        server.stop()


def test_the_api_answers_the_librarys_lanes(served):
    _server, client, rid, run = served
    counters = hotspan.load_counters(run)
    times = counters.column("time_ns").to_pylist()
    start, end = min(times), max(times) + 1
    got = client.get(
        f"/v1/traces/{rid}/counters", params={"start_ns": start, "end_ns": end, "width": 1}
    ).json()
    lanes = {lane["name"]: lane for lane in got["lanes"]}
    assert set(lanes) == {"queue", "memory"}
    assert lanes["queue"]["pixels"] == [{"x": 0, "min": 0.0, "max": 9.0, "last": 9.0}]
    assert lanes["memory"]["before"] is None and lanes["memory"]["max"] == 1090.0
    wide = client.get(
        f"/v1/traces/{rid}/counters", params={"start_ns": start, "end_ns": end, "width": 400}
    ).json()
    assert wide["lanes"] == counter_lanes(counters, start, end, 400)["lanes"]
    # a window after every value: no pixel, the last value in effect
    after = client.get(
        f"/v1/traces/{rid}/counters", params={"start_ns": end, "end_ns": end + 10, "width": 5}
    ).json()
    assert {lane["name"]: (lane["before"], lane["pixels"]) for lane in after["lanes"]} == {
        "queue": (9.0, []),
        "memory": (1090.0, []),
    }
    bad = client.get(
        f"/v1/traces/{rid}/counters", params={"start_ns": end, "end_ns": start, "width": 5}
    )
    assert bad.status_code == 422


@pytest.mark.slow
def test_the_run_page_draws_a_lane_per_counter(served, tmp_path):
    server, _client, rid, _run = served
    page = run_chromium(
        tmp_path,
        "--window-size=1280,1000",
        "--virtual-time-budget=8000",
        "--dump-dom",
        f"{server.url}runs/{rid}",
    )
    assert page.returncode == 0, page.stderr
    view = re.search(r'<div id="timeline-view"[^>]*>', page.stdout).group(0)
    attrs = dict(re.findall(r'data-([a-z-]+)="([^"]*)"', view))
    assert attrs.get("counter-lanes") == "2", view
