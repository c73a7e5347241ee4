"""The pages of ``hotspan serve``, served by a real uvicorn process and rendered by a real
headless Chromium (skipped with one line without a browser, failed with
HOTSPAN_REQUIRE_BROWSER=1, as the report's rendering test)."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

import hotspan
from hotspan.report.html import PALETTE

from _util import run_chromium


def dom(tmp_path, url: str) -> str:
    result = run_chromium(tmp_path, "--virtual-time-budget=5000", "--dump-dom", url)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_run_list_page(server, tmp_path, ids):
    page = dom(tmp_path, server.url)
    rows = re.findall(r'<tr data-name="([^"]*)"([^>]*)>', page)
    assert sorted(name for name, _ in rows) == sorted(ids)
    assert 'class="broken"' in dict(rows)["broken/bad.pftrace"]
    assert "not a Perfetto trace" in page or "bad.pftrace" in page
    for rid in ids.values():
        assert f'href="/runs/{rid}"' in page
    # Filtered by name: the other rows are hidden.
    filtered = dom(tmp_path, server.url + "?q=JOB")
    shown = [
        name
        for name, attrs in re.findall(r'<tr data-name="([^"]*)"([^>]*)>', filtered)
        if "hidden" not in attrs
    ]
    assert shown == ["job"]
    assert 'src="http' not in page and 'href="http' not in page.replace(
        'href="http://127.0.0.1', ""
    )


@pytest.mark.slow
def test_run_page_has_phases_stats_timeline_and_perfetto_button(
    server, tmp_path, ids, runs_dir, client
):
    from PIL import Image

    rid = ids["job"]
    url = f"{server.url}runs/{rid}"
    page = dom(tmp_path, url)
    # The phases chart: one stacked bar per rank, its segments the phases.
    bars = re.findall(r'<g class="bar" data-rank="(\d+)"', page)
    assert bars == ["0", "1"]
    phases = set(re.findall(r'data-phase="([^"]+)"', page))
    assert {"train/compute", "train/comms"} <= phases
    # The stats table: a row per group, as the library counts them.
    expected = hotspan.stats(hotspan.load(runs_dir / "job")).to_pylist()
    table = re.search(r'<table id="stats".*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    assert table.count("<tr>") == len(expected)
    assert f">{expected[0]['count']:,}<" in table
    # The timeline is the report's, in a frame of its own.
    assert f'<iframe id="timeline" class="timeline" src="/runs/{rid}/timeline"' in page
    timeline = dom(tmp_path, f"{server.url}runs/{rid}/timeline")
    # drawn by serve's own timeline.js, fed from the data embedded in the page
    assert 'id="timeline-view"' in timeline and "hotspanTimelineData" in timeline
    assert "r0 worker-0" in timeline and re.search(r'data-drawn="[1-9]', timeline)
    # Open in Perfetto UI: the trace it posts is this server's, and Perfetto's format.
    button = re.search(r'<button id="perfetto"[^>]*data-trace="([^"]+)"', page)
    assert button
    trace = client.get(button.group(1).replace("&amp;", "&"))
    assert trace.status_code == 200
    out = tmp_path / "posted.pftrace"
    out.write_bytes(trace.content)
    assert hotspan.load(out).num_rows == sum(r["count"] for r in expected)

    shot = tmp_path / "run.png"
    result = run_chromium(
        tmp_path,
        f"--screenshot={shot}",
        "--window-size=1400,1400",
        "--virtual-time-budget=5000",
        url,
    )
    assert result.returncode == 0 and shot.exists(), result.stderr
    pixels = np.asarray(Image.open(shot).convert("RGB")).astype(np.int64)
    # The stats table's header row (#f0f0f0) is drawn: a band as wide as the table.
    header = (np.abs(pixels - np.array([0xF0, 0xF0, 0xF0])).sum(axis=2) < 4).sum(axis=1) > 600
    assert header.any()
    above_table = pixels[
        : int(np.argmax(header))
    ]  # the summary and the chart; the timeline is below
    # The chart's bars, in their phase colours (each segment wider than a few pixels is a real area).
    segments = re.findall(
        r'<rect class="segment"[^>]*width="([0-9.]+)"[^>]*fill="(#[0-9a-f]{6})"', page
    )
    colours = {colour for width, colour in segments if float(width) > 5}
    assert len(colours) >= 2
    for colour in colours:
        rgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)])
        assert colour in PALETTE
        painted = int((np.abs(above_table - rgb).sum(axis=2) < 12).sum())
        assert painted > 100, f"{colour}: only {painted} pixels"
    shot.replace(runs_dir.parent / "serve-run-page.png")  # left for a person to look at


def test_compare_page(server, tmp_path, ids):
    page = dom(
        tmp_path,
        f"{server.url}compare?base={ids['base/trace.parquet']}&new={ids['new/trace.json']}",
    )
    rows = re.findall(r'<tr class="v-(\w+)"><td>([^<]*)</td><td>([^<]*)</td>', page)
    verdicts = {(category, name): verdict for verdict, category, name in rows}
    assert verdicts[("train/compute", "forward")] == "slower"
    assert verdicts[("train/compute", "flaky")] == "gone"
    assert re.search(r'<option value="%s" selected(="")?>' % ids["base/trace.parquet"], page)


def test_a_corrupt_run_has_a_page_saying_so(client, ids):
    response = client.get(f"/runs/{ids['broken/bad.pftrace']}")
    assert response.status_code == 409 and "bad.pftrace" in response.text
    assert client.get("/runs/0000000000000000").status_code == 404


@pytest.mark.parametrize("asset", ["/static/serve.css", "/static/serve.js"])
def test_assets_are_served_by_hotspan(client, asset):
    response = client.get(asset)
    assert response.status_code == 200 and len(response.content) > 500
    assert "http://" not in response.text.replace("https://ui.perfetto.dev", "")


FAKE_PERFETTO = b"""<!DOCTYPE html><html><body><p id="state">waiting</p><script>
// What ui.perfetto.dev does for a page that opened it: PONG to a PING once listening, then
// open the trace posted as {perfetto: {buffer, title}}. Here the trace goes back to the test.
window.addEventListener('message', function (e) {
  if (e.source !== window.opener) return;
  if (e.data === 'PING') { e.source.postMessage('PONG', '*'); return; }
  if (e.data && e.data.perfetto) {
    document.getElementById('state').textContent = 'received';
    fetch('/received?title=' + encodeURIComponent(e.data.perfetto.title),
          {method: 'POST', body: e.data.perfetto.buffer});
  }
});
</script></body></html>"""


@pytest.mark.slow
def test_open_in_perfetto_ui_posts_the_trace_after_the_handshake(runs_dir, tmp_path, ids, client):
    """The button's protocol end to end, in Chromium: the run page opens a Perfetto UI (a
    stand-in on another origin that answers as ui.perfetto.dev does), PINGs until it answers
    PONG, and posts it the trace fetched from the server."""
    import http.server
    import threading

    from ._serving import Server

    received: list[tuple[str, bytes]] = []

    class FakeUI(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(FAKE_PERFETTO)

        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append((self.path, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    ui = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeUI)
    threading.Thread(target=ui.serve_forever, daemon=True).start()
    srv = Server(runs_dir, "--perfetto-ui", f"http://127.0.0.1:{ui.server_address[1]}/")
    try:
        rid = ids["job"]
        result = run_chromium(
            tmp_path,
            "--disable-popup-blocking",
            "--virtual-time-budget=10000",
            "--dump-dom",
            f"{srv.url}runs/{rid}#perfetto",
        )
        assert result.returncode == 0, result.stderr
        deadline = time.monotonic() + 20
        while not received and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        srv.stop()
        ui.shutdown()
    assert len(received) == 1, result.stdout[-2000:]
    path, body = received[0]
    assert path == "/received?title=job"
    assert body == client.get(f"/v1/traces/{rid}/download", params={"format": "pftrace"}).content
    out = tmp_path / "posted.pftrace"
    out.write_bytes(body)
    assert hotspan.load(out).num_rows == hotspan.load(runs_dir / "job").num_rows


@pytest.mark.slow
@pytest.mark.parametrize("window_width", [1280, 1920])
def test_the_run_page_timeline_draws_what_the_server_answers_and_fits(
    server, tmp_path, ids, client, window_width
):
    """The run page's timeline asks /v1/traces/{id}/timeline for as many pixels as its canvas
    is wide, and draws every track of the answer; the canvas fits the window (no horizontal
    scrolling), at 1,280 and 1,920 px."""
    rid = ids["job"]
    page = run_chromium(
        tmp_path,
        f"--window-size={window_width},1000",
        "--virtual-time-budget=8000",
        "--dump-dom",
        f"{server.url}runs/{rid}",
    )
    assert page.returncode == 0, page.stderr
    view = re.search(r'<div id="timeline-view"[^>]*>', page.stdout).group(0)
    attrs = dict(re.findall(r'data-([a-z]+)="([^"]*)"', view))
    assert int(attrs["drawn"]) >= 1
    canvas = re.search(r'<canvas[^>]*width="(\d+)"', page.stdout)
    assert canvas and int(canvas.group(1)) <= window_width  # device pixel ratio 1 headless
    # what the page drew is the answer for the canvas's plot width (the label column apart)
    answer = client.get(f"/v1/traces/{rid}/timeline", params={"width": 50}).json()
    assert int(attrs["tracks"]) == len(answer["tracks"]) >= 2  # every thread of both ranks
    drawn = int(attrs["spans"]) + int(attrs["pixels"])
    assert drawn > 0
