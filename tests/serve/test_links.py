"""``hotspan serve`` reads nothing outside its directory, and nothing but regular files: one
served directory holds every kind of link out of it (each a run that must be neither listed
nor served), links that stay inside it (served), and a FIFO named like a trace (which must
not hang a request)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from hotspan.formats import export
from hotspan.formats.dataset import write_part
from hotspan.serve._runs import run_id

from ._serving import Server, record_steps, with_rank

SECRET_STEPS = 3  # the outside runs' spans: 2 threads x 3 steps x 3 spans
SECRET_NAME = "secret-step"

#: relative path of the run -> what kind of link makes it (all lead out of the directory).
LINKS_OUT = {
    "link.parquet": "a top-level file link to a file outside",
    "link.json": "a top-level link to a trace in another format outside",
    "linkdir": "a directory link to a dataset outside",
    "rank_link": "a dataset whose rank=0 directory links to a rank directory outside",
    "part_link": "a dataset whose part file links to a part outside",
    "mixed": "a dataset with a part of its own and a rank=1 directory linked outside",
    "chain.parquet": "a link to a link inside that leads outside",
}


def _secret():
    table = record_steps(SECRET_STEPS)
    names = table.column("name").cast("string").to_pylist()
    import pyarrow as pa

    index = table.schema.get_field_index("name")
    return table.set_column(
        index, "name", pa.array([SECRET_NAME + n for n in names]).dictionary_encode()
    )


def _old_part(table, directory, *, rank: int, pid: int) -> None:
    """A part in the older layout (rank=R/ directories), whose links these tests are about."""
    (directory / f"rank={rank}").mkdir(parents=True, exist_ok=True)
    export(table, directory / f"rank={rank}" / f"part-{pid}-000000.parquet")


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    top = tmp_path_factory.mktemp("links")
    outside, root = top / "outside", top / "runs"
    outside.mkdir()
    root.mkdir()
    secret = _secret()
    export(secret, outside / "secret.parquet")
    export(secret, outside / "secret.json")
    _old_part(secret, outside / "dataset", rank=0, pid=7)
    _old_part(with_rank(secret, 1), outside / "dataset", rank=1, pid=8)
    outside_part = next((outside / "dataset" / "rank=0").glob("part-*.parquet"))

    (root / "link.parquet").symlink_to(outside / "secret.parquet")
    (root / "link.json").symlink_to(outside / "secret.json")
    (root / "linkdir").symlink_to(outside / "dataset", target_is_directory=True)
    (root / "rank_link").mkdir()
    (root / "rank_link" / "rank=0").symlink_to(
        outside / "dataset" / "rank=0", target_is_directory=True
    )
    (root / "part_link" / "rank=0").mkdir(parents=True)
    (root / "part_link" / "rank=0" / outside_part.name).symlink_to(outside_part)
    _old_part(record_steps(2), root / "mixed", rank=0, pid=9)
    (root / "mixed" / "rank=1").symlink_to(outside / "dataset" / "rank=1", target_is_directory=True)
    (root / "hop.parquet").symlink_to(
        outside / "secret.parquet"
    )  # itself a link out: not listed either
    (root / "chain.parquet").symlink_to(root / "hop.parquet")

    # Links that stay inside the directory are served.
    export(record_steps(2), root / "own.parquet")
    (root / "alias.parquet").symlink_to(root / "own.parquet")
    _old_part(record_steps(2), root / "inner" / "dataset", rank=0, pid=10)
    (root / "inner_rank").mkdir()
    (root / "inner_rank" / "rank=0").symlink_to(
        root / "inner" / "dataset" / "rank=0", target_is_directory=True
    )

    # Not regular files: a FIFO named like a trace (its open would block for a writer) and
    # a FIFO named like a dataset part.
    os.mkfifo(root / "x.json")
    os.mkfifo(root / "fifo.parquet")
    (root / "fifo_ds" / "rank=0").mkdir(parents=True)
    os.mkfifo(root / "fifo_ds" / "rank=0" / "part-11-0.parquet")

    srv = Server(root)
    yield srv, root, outside
    srv.stop()


def test_the_listing_holds_only_what_lies_inside(linked):
    srv, _root, _outside = linked
    with srv.client() as c:
        traces = {t["path"]: t for t in c.get("/v1/traces").json()["traces"]}
    for path in LINKS_OUT:
        assert path not in traces, LINKS_OUT[path]
    assert "hop.parquet" not in traces
    # What stays inside is served, links included.
    for path in ("own.parquet", "alias.parquet", "inner/dataset", "inner_rank"):
        assert traces[path]["error"] is None, traces[path]
        assert traces[path]["spans"] > 0
    # FIFOs: no file run for one named like a trace; a dataset holding one is an error entry.
    assert "x.json" not in traces and "fifo.parquet" not in traces
    assert "is a FIFO" in traces["fifo_ds"]["error"]
    assert str(_root) not in traces["fifo_ds"]["error"]  # paths relative to the directory
    assert not any(SECRET_NAME in str(t) for t in traces.values())


@pytest.mark.parametrize("path", sorted(LINKS_OUT))
def test_every_route_of_a_run_linked_out_is_404(linked, path):
    srv, _root, _outside = linked
    rid = run_id(path)
    with srv.client() as c:
        for route in (
            f"/v1/traces/{rid}",
            f"/v1/traces/{rid}/stats",
            f"/v1/traces/{rid}/spans",
            f"/v1/traces/{rid}/download?format=json",
            f"/v1/traces/{rid}/download?format=parquet",
            f"/runs/{rid}",
            f"/runs/{rid}/timeline",
        ):
            response = c.get(route)
            assert response.status_code == 404, (LINKS_OUT[path], route, response.text[:200])
            assert SECRET_NAME not in response.text
        response = c.get("/v1/compare", params={"base": run_id("own.parquet"), "new": rid})
        assert response.status_code == 404


def test_a_link_out_made_after_the_listing_is_404_at_once(linked, tmp_path):
    srv, root, outside = linked
    write_part(record_steps(2), root / "later", rank=0, pid=12, seq=0)
    rid = run_id("later")
    with srv.client() as c:
        assert c.get(f"/v1/traces/{rid}/stats").status_code == 200
        (root / "later" / "rank=1").symlink_to(
            outside / "dataset" / "rank=1", target_is_directory=True
        )
        try:
            assert c.get(f"/v1/traces/{rid}/spans", params={"limit": 10_000}).status_code == 404
            assert "later" not in {t["path"] for t in c.get("/v1/traces").json()["traces"]}
        finally:
            (root / "later" / "rank=1").unlink()
        assert c.get(f"/v1/traces/{rid}/stats").status_code == 200
    shutil.rmtree(root / "later")


def test_a_fifo_swapped_in_for_a_listed_file_is_refused_not_waited_on(linked):
    srv, root, _outside = linked
    export(record_steps(1), root / "swap.parquet")
    rid = run_id("swap.parquet")
    with srv.client() as c:
        assert c.get(f"/v1/traces/{rid}").status_code == 200
        (root / "swap.parquet").unlink()
        os.mkfifo(root / "swap.parquet")
        try:
            response = c.get(
                f"/v1/traces/{rid}/spans"
            )  # the client's timeout (60 s) would fail a hang
            assert response.status_code == 409
            assert "is a FIFO" in response.json()["detail"]
        finally:
            Path(root / "swap.parquet").unlink()
