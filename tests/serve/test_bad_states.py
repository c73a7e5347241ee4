"""Bad states degrade, never corrupt: an empty or partial dataset is listed as such (the page
of runs stays 200, every other run browsable), and a dataset being compacted answers from one
consistent set of parts (counts exact, pages exact, never a 409)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from hotspan.formats import export
from hotspan.formats.dataset import write_part
from hotspan.serve.app import create_app

from ._serving import record_steps, with_rank


@pytest.fixture
def tree(tmp_path):
    """A good file run, an empty dataset (rank=0/ and nothing in it) and a partial one (rank=0/
    empty, rank=1/ with a part)."""
    table = record_steps(3)
    (tmp_path / "good").mkdir()
    export(table, tmp_path / "good" / "trace.parquet")
    (tmp_path / "empty" / "rank=0").mkdir(parents=True)
    (tmp_path / "partial" / "rank=0").mkdir(parents=True)
    write_part(with_rank(table, 1), tmp_path / "partial" / "rank=1", rank=1, pid=7, seq=0)
    return tmp_path, table


def test_an_empty_rank_directory_never_breaks_the_list_of_runs(tree):
    root, table = tree
    with TestClient(create_app(root)) as client:
        assert client.get("/").status_code == 200  # (a 500 before: "{:,}".format(None))
        (root / "rank=0").mkdir()  # and one right in the served directory
        page = client.get("/")
        assert page.status_code == 200, page.text
        traces = {t["path"]: t for t in client.get("/v1/traces").json()["traces"]}
        # The served directory's own empty rank=0/ hides none of the runs below it.
        assert {"good/trace.parquet", "empty", "partial"} <= set(traces)
        # The empty dataset is listed as such: an entry that says so, no figures.
        empty = traces["empty"]
        assert empty["kind"] == "dataset" and "no span parts" in empty["error"]
        assert empty["spans"] is None
        assert re.search(r"empty</a>.*?no span parts", page.text, re.S)
        # The partial one (one rank of two written) lists and browses with what it has.
        partial = traces["partial"]
        assert partial["error"] is None and partial["spans"] == table.num_rows
        assert partial["ranks"] == [1]
        for path in ("good/trace.parquet", "partial"):
            rid = traces[path]["id"]
            assert client.get(f"/runs/{rid}").status_code == 200
            rows = client.get(f"/v1/traces/{rid}/spans", params={"limit": 10_000}).json()["spans"]
            assert len(rows) == table.num_rows
        # The empty one: a clear answer, not a 500.
        answer = client.get(f"/v1/traces/{empty['id']}")
        assert answer.status_code == 409 and "no span parts" in answer.json()["detail"]
        assert client.get(f"/runs/{empty['id']}").status_code == 409
        # Parts arriving later make it a run like the others.
        write_part(table, root / "empty" / "rank=0", rank=0, pid=8, seq=0)
        again = {t["path"]: t for t in client.get("/v1/traces").json()["traces"]}
        assert again["empty"]["error"] is None and again["empty"]["spans"] == table.num_rows
        assert client.get("/").status_code == 200


def _numbered_run(directory, spans: int, parts: int):
    """A dataset of ``spans`` real spans in ``parts`` parts of one writer (as a recorder's
    flushes leave them), and the table they hold."""
    import hotspan
    from hotspan.formats.dataset import new_token

    hotspan.drain()
    span = hotspan.span("step", "train")
    for _ in range(spans):
        with span:
            pass
    table = hotspan.drain()
    assert table.num_rows == spans
    token, size = new_token(), spans // parts
    for seq in range(parts):
        write_part(table.slice(seq * size, size), directory, rank=0, pid=4242, seq=seq, token=token)
    return table


@pytest.mark.slow
@pytest.mark.parametrize("grace", ["2", "0"])
def test_serve_answers_from_one_set_of_parts_while_hotspan_compact_runs(tmp_path, grace):
    """A real ``hotspan serve`` queried in a loop while a real ``hotspan compact`` merges the
    run it serves: every count exact, every page exact, never a 409 (before: 400,000 spans
    listed for 200,000, ``offset=199995&limit=10`` answered 10 rows, and some 409s). With
    ``--grace 0`` the inputs go as soon as the merged part is there: a request that listed them
    finds them gone as it reads them, and answers from the merged part."""
    import contextlib
    import os
    import signal
    import subprocess
    import sys

    from hotspan.formats.dataset import list_parts, location

    from ._serving import Server

    table = _numbered_run(tmp_path / "big", 200_000, 40)
    ids = table.column("span_id").to_pylist()
    server = Server(tmp_path)
    try:
        with server.client() as client:
            (entry,) = client.get("/v1/traces").json()["traces"]
            rid = entry["id"]
            compact = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hotspan",
                    "compact",
                    str(tmp_path / "big"),
                    "--grace",
                    grace,
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            rounds, answers = 0, []

            def one_round() -> None:
                listed = client.get("/v1/traces").json()["traces"][0]
                answers.append(listed["spans"])
                assert listed["error"] is None and listed["spans"] == 200_000, listed
                trace = client.get(f"/v1/traces/{rid}")
                assert trace.status_code == 200, trace.text
                assert trace.json()["spans"] == 200_000
                last = client.get(
                    f"/v1/traces/{rid}/spans", params={"offset": 199_995, "limit": 10}
                )
                assert last.status_code == 200, last.text
                assert [s["span_id"] for s in last.json()["spans"]] == ids[199_995:]
                assert last.json()["next_offset"] is None
                middle = client.get(
                    f"/v1/traces/{rid}/spans", params={"offset": 123_456, "limit": 100}
                )
                assert middle.status_code == 200, middle.text
                assert [s["span_id"] for s in middle.json()["spans"]] == ids[123_456:123_556]
                stats = client.get(f"/v1/traces/{rid}/stats")
                assert stats.status_code == 200, stats.text
                assert sum(row["count"] for row in stats.json()["rows"]) == 200_000

            seen = set()  # how many part files the directory held at each round
            while compact.poll() is None:
                # The compaction is held still for each round and let on for a short step
                # between rounds: on a machine of any speed the rounds interleave with its
                # progress (CI's compacted the 40 parts in 420 ms, before a second round).
                os.kill(compact.pid, signal.SIGSTOP)
                try:
                    seen.add(len(list_parts(location(tmp_path / "big"))))
                    one_round()
                    rounds += 1
                finally:
                    os.kill(compact.pid, signal.SIGCONT)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    compact.wait(timeout=0.02)
            out, err = compact.communicate()
            assert compact.returncode == 0, err
            one_round()
    finally:
        server.stop()
    assert rounds >= 2, f"the compaction ended before serve was asked twice ({out})"
    # Asked while the merged part and its 40 inputs were there together (the grace period).
    assert grace == "0" or 41 in seen, seen
    assert len(list_parts(location(tmp_path / "big"))) == 1  # merged, the inputs deleted
    assert set(answers) == {200_000}
