"""Small things a first user of ``hotspan serve`` met, one test each."""

from __future__ import annotations

from _util import wait_until

import re

import hotspan
from hotspan.report.html import html_report


def test_ranks_read_as_a_count_and_ids_not_as_zero(client, ids, runs_dir):
    """ "RANKS 0" read as "no ranks": the card says how many, then which."""
    page = client.get(f"/runs/{ids['base/trace.parquet']}").text
    assert re.search(r'<div class="k">ranks</div><div class="v">1 \(rank 0\)</div>', page)
    page = client.get(f"/runs/{ids['job']}").text
    assert re.search(r'<div class="k">ranks</div><div class="v">2 \(ranks 0, 1\)</div>', page)
    report = html_report(hotspan.load(runs_dir / "job"), sections=("summary",))
    assert '<div class="k">ranks</div><div class="v">2 (ranks 0, 1)</div>' in report


def test_phases_bars_take_the_timelines_colours_and_say_why_they_outlast_the_run(client, ids):
    rid = ids["job"]
    page = client.get(f"/runs/{rid}").text
    timeline = client.get(f"/runs/{rid}/timeline").text
    legend = {
        name: colour
        for colour, name in re.findall(
            r'<span class="lg"><i style="background:(#[0-9a-f]+)"></i>([^<]+)</span>', timeline
        )
    }
    segments = re.findall(
        r'<rect class="segment"[^>]*fill="(#[0-9a-f]+)"\s+data-phase="([^"]+)"', page
    )
    assert segments
    for colour, phase in segments:
        assert colour == legend[phase.removesuffix(" (other)")], phase
    assert "thread time</text>" in page
    assert "adds up the time of all the rank's threads" in page


def test_an_error_names_the_file_once(client, ids):
    detail = client.get(f"/v1/traces/{ids['broken/bad.pftrace']}/stats").json()["detail"]
    assert detail.startswith("broken/bad.pftrace: ") and detail.count("bad.pftrace") == 1, detail
    page = client.get(f"/runs/{ids['broken/bad.pftrace']}").text
    problem = re.search(r'<p class="problem" id="problem">([^<]*)</p>', page).group(1)
    assert problem.count("bad.pftrace") == 1, problem


def test_create_app_leaves_no_temporary_directory(runs_dir, tmp_path):
    import gc
    import os
    import subprocess
    import sys
    from pathlib import Path

    from hotspan.serve.app import create_app

    app = create_app(runs_dir)
    cache = Path(app.state.cache.name)
    assert cache.is_dir() and cache.name.startswith("hotspan-serve-")
    del app
    gc.collect()
    assert not cache.exists()
    # Nor at exit, for apps still alive then.
    code = f"from hotspan.serve.app import create_app\napps = [create_app({str(runs_dir)!r}) for _ in range(3)]\n"
    subprocess.run(
        [sys.executable, "-c", code], check=True, env={**os.environ, "TMPDIR": str(tmp_path)}
    )
    assert not list(tmp_path.glob("hotspan-serve-*"))


def test_the_statistics_of_a_run_are_computed_before_anyone_asks(tmp_path):
    """hotspan serve finds the runs as it starts and computes each one's statistics then
    (seconds, for a large run), so that the first page or /stats need not wait for them."""
    import time

    from fastapi.testclient import TestClient

    from hotspan.formats import export
    from hotspan.serve.app import create_app

    from ._serving import record_steps

    table = record_steps(5)
    export(table, tmp_path / "run.parquet")
    app = create_app(tmp_path, warm=True)
    deadline = time.monotonic() + 60
    while not app.state.warmer.warmed and time.monotonic() < deadline:
        time.sleep(0.01)  # the warmer's thread has no event to wait on
    assert [rid for rid, _signature in app.state.warmer.warmed] == [
        r.id for r in app.state.catalog.scan()
    ]
    with TestClient(app) as client:
        (entry,) = client.get("/v1/traces").json()["traces"]
        rows = client.get(f"/v1/traces/{entry['id']}/stats").json()["rows"]
    assert len(rows) == hotspan.stats(table).num_rows
    assert create_app(tmp_path).state.warmer is None  # the default: an application warms nothing


def test_the_timeline_index_is_built_ahead_and_answers_zoomed_out_views(tmp_path):
    """A warmed run's timeline index is built with its statistics; a zoomed-out view is then
    the index's answer (for whole bins a pixel, the spans' own)."""
    from fastapi.testclient import TestClient

    from hotspan.analysis.timeline import timeline
    from hotspan.formats import export
    from hotspan.serve import _queries as queries
    from hotspan.serve.app import create_app

    from ._serving import record_steps

    table = record_steps(8)
    export(table, tmp_path / "run.parquet")
    app = create_app(tmp_path, warm=True)
    (run,) = app.state.catalog.scan()
    wait_until(lambda: app.state.warmer.warmed, what="the warmer")
    index = queries.timeline_index(run, wait=False)
    assert index is not None  # built by the warmer, not by this call
    with TestClient(app) as client:
        view = client.get(f"/v1/traces/{run.id}/timeline", params={"width": 128}).json()
    assert view["tracks"] == index.view(width=128)["tracks"] == timeline(table, width=128)["tracks"]


def test_hotspan_serve_computes_the_statistics_before_it_imports_fastapi(tmp_path):
    """serve's first /stats of a large run, asked as soon as it listens, must not wait for
    FastAPI and uvicorn to be imported (about a second) before the statistics even start:
    warm_early starts them first, and nothing it needs imports them."""
    import json
    import os
    import subprocess
    import sys

    from hotspan.formats import export

    from ._serving import record_steps

    export(record_steps(5), tmp_path / "run.parquet")
    code = (
        "import json, sys, tempfile, time\n"
        "from hotspan.serve import serve  # the function, not yet the application\n"
        "from hotspan.serve._server import warm_early\n"
        f"warmer = warm_early({str(tmp_path)!r}, tempfile.mkdtemp())\n"
        "deadline = time.monotonic() + 60\n"
        "while not warmer.warmed and time.monotonic() < deadline:\n"
        "    time.sleep(0.01)  # the warmer's thread has no event to wait on\n"
        "print(json.dumps([len(warmer.warmed), 'fastapi' in sys.modules, 'uvicorn' in sys.modules]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ)
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [1, False, False]
