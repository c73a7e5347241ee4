"""serve's "Open this window in Perfetto" (issue 33, item 2): GET
/v1/traces/{id}/download?format=pftrace&start_ns=&end_ns=&rank= answers the spans overlapping the
window on those ranks, and 413 naming the window's spans and the limit when it holds more than
open in Perfetto UI. Through a real uvicorn process."""

from __future__ import annotations

import pytest

import hotspan

from ._serving import Server


def _overlapping(table, low, high, ranks):
    """(rank, name, start_ns, end_ns) of the spans overlapping [low, high) on ranks, by hand."""
    rows = zip(
        table["rank"].to_pylist(),
        table["name"].to_pylist(),
        table["start_ns"].to_pylist(),
        table["end_ns"].to_pylist(),
    )
    return sorted(
        row for row in rows if row[0] in ranks and row[2] < high and (row[3] > low or row[2] >= low)
    )


def _rows(table):
    return sorted(
        zip(
            table["rank"].to_pylist(),
            table["name"].to_pylist(),
            table["start_ns"].to_pylist(),
            table["end_ns"].to_pylist(),
        )
    )


def _window(job):
    """A window starting inside the run's longest root span (so it begins before the window)."""
    roots = [
        (e - s, s, e)
        for s, e, d in zip(
            job["start_ns"].to_pylist(), job["end_ns"].to_pylist(), job["depth"].to_pylist()
        )
        if d == 0
    ]
    _length, start, end = max(roots)
    low = (start + end) // 2
    high = low + (max(job["end_ns"].to_pylist()) - min(job["start_ns"].to_pylist())) // 3
    return low, high


def test_a_window_downloads_exactly_its_spans(client, ids, runs_dir, tmp_path):
    import pyarrow as pa
    import pyarrow.compute as pc

    job = hotspan.load(runs_dir / "job")
    for ranks in ([0, 1], [1]):
        # inside a root span of these ranks: the ranks were recorded one after the other
        low, high = _window(job.filter(pc.is_in(job["rank"], pa.array(ranks, pa.int32()))))
        response = client.get(
            f"/v1/traces/{ids['job']}/download",
            params={
                "format": "pftrace",
                "start_ns": low,
                "end_ns": high,
                "rank": ",".join(map(str, ranks)),
            },
        )
        assert response.status_code == 200, response.text
        assert ".pftrace" in response.headers["content-disposition"]
        target = tmp_path / f"window-{len(ranks)}.pftrace"
        target.write_bytes(response.content)
        got = _rows(hotspan.load(target))
        want = _overlapping(job, low, high, ranks)
        assert got == want
        assert 0 < len(want) < job.num_rows
        # a span begun before the window (and still open in it) is there
        assert any(start < low for _r, _n, start, _e in got)
    # a file run, the window alone (no ranks): every rank's spans of it
    trace = hotspan.load(runs_dir / "new" / "trace.json")
    low, high = _window(trace)
    response = client.get(
        f"/v1/traces/{ids['new/trace.json']}/download",
        params={"format": "parquet", "start_ns": low, "end_ns": high},
    )
    assert response.status_code == 200
    (tmp_path / "w.parquet").write_bytes(response.content)
    ranks = set(trace["rank"].to_pylist())
    assert _rows(hotspan.load(tmp_path / "w.parquet")) == _overlapping(trace, low, high, ranks)


def test_a_bad_window_is_422_naming_its_parameter(client, ids):
    for params, parameter in (
        ({"start_ns": 10, "end_ns": 10}, "end_ns"),
        ({"rank": "one"}, "rank"),
        ({"start_ns": -1}, "start_ns"),
    ):
        response = client.get(f"/v1/traces/{ids['job']}/download", params=params)
        assert response.status_code == 422
        assert response.json()["detail"][0]["loc"][-1] == parameter


@pytest.mark.slow  # a server of its own
def test_a_window_over_the_limit_is_413_naming_its_spans(runs_dir):
    job = hotspan.load(runs_dir / "job")
    srv = Server(runs_dir, env={"HOTSPAN_SERVE_WINDOW_MAX_SPANS": "5"})
    try:
        with srv.client() as client:
            rid = {t["path"]: t["id"] for t in client.get("/v1/traces").json()["traces"]}["job"]
            first = min(job["start_ns"].to_pylist())
            last = max(job["end_ns"].to_pylist())
            response = client.get(
                f"/v1/traces/{rid}/download",
                params={"format": "pftrace", "start_ns": first, "end_ns": last + 1},
            )
            assert response.status_code == 413
            body = response.json()
            assert body["spans"] == job.num_rows and body["limit"] == 5
            assert f"{job.num_rows:,} spans" in body["detail"] and "at most 5" in body["detail"]
            # a window within the limit still downloads
            starts = sorted(job["start_ns"].to_pylist())
            small = client.get(
                f"/v1/traces/{rid}/download",
                params={"format": "parquet", "start_ns": starts[-1], "end_ns": last + 1},
            )
            assert small.status_code == 200, small.text
    finally:
        srv.stop()


@pytest.mark.slow  # a server of its own and a browser
def test_the_timeline_has_the_button_and_says_a_window_is_too_large(runs_dir, tmp_path):
    """The run page's timeline has "Open this window in Perfetto", whose trace is the download
    of the window shown (the whole run at first); over the limit, the page says how many spans
    the window holds and how many open, instead of opening Perfetto UI."""
    import html
    import re

    from _util import run_chromium

    job = hotspan.load(runs_dir / "job")
    srv = Server(
        runs_dir,
        "--perfetto-ui",
        "http://127.0.0.1:9/",  # never reached: the window is refused first
        env={"HOTSPAN_SERVE_WINDOW_MAX_SPANS": "5"},
    )
    try:
        with srv.client() as client:
            rid = {t["path"]: t["id"] for t in client.get("/v1/traces").json()["traces"]}["job"]
            result = run_chromium(
                tmp_path,
                "--disable-popup-blocking",
                "--virtual-time-budget=8000",
                "--dump-dom",
                f"{srv.url}runs/{rid}#perfetto-window",
            )
            assert result.returncode == 0, result.stderr
            button = re.search(r'<button id="perfetto-window"[^>]*>([^<]*)</button>', result.stdout)
            assert button and button.group(1) == "Open this window in Perfetto"
            trace = html.unescape(re.search(r'data-trace="([^"]*)"', button.group(0)).group(1))
            assert trace.startswith(f"/v1/traces/{rid}/download?format=pftrace&start_ns=")
            said = re.search(
                r'<span id="perfetto-window-status"[^>]*>([^<]*)</span>', result.stdout
            )
            assert said and said.group(1) == (
                f"this window holds {job.num_rows:,} spans: zoom in to at most 5"
            ), result.stdout[-3000:]
            refused = client.get(trace)
            assert refused.status_code == 413 and refused.json()["spans"] == job.num_rows
    finally:
        srv.stop()


def test_the_cache_keeps_the_newest_window_files_only(tmp_path):
    """Opening window after window must not fill the disk: past WINDOW_FILES_KEPT window
    files, the oldest are removed (the run's own download copies are not window files)."""
    import os

    from hotspan.serve import _queries as queries

    kept = queries.WINDOW_FILES_KEPT
    paths = []
    for i in range(kept + 5):
        path = tmp_path / f"run{i}-{i:016x}-window.pftrace"
        path.write_bytes(b"x")
        os.utime(path, (1_000_000 + i, 1_000_000 + i))
        paths.append(path)
    other = tmp_path / "run0-abc-download.pftrace"
    other.write_bytes(b"x")
    os.utime(other, (1, 1))
    queries._forget_windows(tmp_path, keep=paths[-1])
    assert sorted(tmp_path.glob("*-window.*")) == sorted(paths[-kept:])
    assert other.exists()
