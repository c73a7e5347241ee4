"""Instants (spans of no duration) are never rows of ``compare``: not in the library (table in
memory or a streamed directory), not in ``hotspan compare``, not in serve's ``/v1/compare``
(issue 30, item 5). They have no time to judge; ``stats`` counts them."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import hotspan
from hotspan.formats import export
from hotspan.formats.dataset import write_part

INSTANT_ONLY = {"checkpoint", "tick"}


def _record(ticks: bool):
    hotspan.drain()
    for i in range(40):
        with hotspan.span("step", "train"):
            sum(range(2_000))
        if i % 10 == 0:
            hotspan.instant("checkpoint", "train")
        if ticks:  # on the new side only: an instant group that was "new"
            hotspan.instant("tick", "train")
    return hotspan.drain()


@pytest.fixture(scope="module")
def sides(tmp_path_factory):
    root = tmp_path_factory.mktemp("instants")
    base, new = _record(False), _record(True)
    for name, table in (("base", base), ("new", new)):
        (root / name).mkdir()
        export(table, root / name / "trace.parquet")
        write_part(table, root / f"{name}-run", rank=0, pid=100, seq=0)
    return root, base, new


def _names(rows) -> set[str]:
    return {r["name"] for r in rows}


def test_the_library_leaves_instants_out_on_every_path(sides):
    # was: rows with the verdict "instant" (and "new" for the instants of one side)
    root, base, new = sides
    assert _names(hotspan.stats(new).to_pylist()) >= INSTANT_ONLY  # counted by stats
    in_memory = hotspan.compare(base, new, by="name").to_pylist()
    streamed = hotspan.compare(
        root / "base-run", root / "new-run", by="name", engine="duckdb"
    ).to_pylist()
    for rows in (in_memory, streamed):
        assert _names(rows) == {"step"}, rows
        assert all(r["verdict"] != "instant" for r in rows)


def test_the_cli_leaves_instants_out(sides):
    root, _base, _new = sides
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "hotspan",
            "compare",
            str(root / "base" / "trace.parquet"),
            str(root / "new" / "trace.parquet"),
            "--by",
            "name",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stderr
    rows = json.loads(done.stdout)
    rows = rows["rows"] if isinstance(rows, dict) else rows
    assert _names(rows) == {"step"}, done.stdout


def test_serve_leaves_instants_out(sides):
    pytest.importorskip("fastapi", reason="hotspan serve needs the serve extra")
    pytest.importorskip("httpx")
    from serve._serving import Server

    root, _base, _new = sides
    server = Server(root)
    try:
        with server.client() as client:
            ids = {t["path"]: t["id"] for t in client.get("/v1/traces").json()["traces"]}
            base_id, new_id = ids["base/trace.parquet"], ids["new/trace.parquet"]
            response = client.get(
                "/v1/compare", params={"base": base_id, "new": new_id, "by": "name"}
            )
            assert response.status_code == 200, response.text
            assert _names(response.json()["rows"]) == {"step"}, response.text
    finally:
        server.stop()
