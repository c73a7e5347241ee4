"""``hotspan hang`` (issue 31): real processes hung in a collective, one rank elsewhere,
read from their flight files while they hang and again after they are killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hotspan.analysis.hang import hang

RANK = textwrap.dedent(
    """
    import os, sys, time
    import hotspan
    rank, slow, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    with hotspan.span("step", "train"):
        with hotspan.span("forward", "train/compute"):
            pass
        if rank == slow:
            with hotspan.span("data.fetch", "train/data"):
                open(f"{ready}.{rank}", "w").close()
                time.sleep(600)
        else:
            with hotspan.span("all_reduce", "comms"):
                open(f"{ready}.{rank}", "w").close()
                time.sleep(600)
    """
)


class Job:
    """Four rank processes with flight files in one directory, hung on purpose (recording to
    a collector at ``out`` when given)."""

    def __init__(self, tmp_path, slow: int, out: str | None = None) -> None:
        self.dir = tmp_path / "flight"
        self.dir.mkdir()
        ready = tmp_path / "ready"
        self.procs = []
        for rank in range(4):
            env = {
                **os.environ,
                "HOTSPAN_FLIGHT": str(self.dir / "hotspan-{pid}"),
                "HOTSPAN_RANK": str(rank),
            }
            env.pop("HOTSPAN_OUT", None)
            if out is not None:
                env.update(HOTSPAN_OUT=out, HOTSPAN_STACKS_INTERVAL="0.2")
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-c", RANK, str(rank), str(slow), str(ready)], env=env
                )
            )
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready.{r}").exists() for r in range(4)):
            assert time.monotonic() < deadline, "the ranks did not reach their hang"
            assert all(p.poll() is None for p in self.procs), "a rank exited"
            time.sleep(0.05)

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait(timeout=30)


@pytest.fixture
def job(tmp_path):
    made = []

    def start(slow: int, out: str | None = None) -> Job:
        made.append(Job(tmp_path, slow, out))
        return made[-1]

    yield start
    for j in made:
        j.kill()


@pytest.fixture
def cli(capsys):
    from hotspan.cli import main

    def run(*args):
        capsys.readouterr()
        code = main([str(a) for a in args])
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.mark.slow
def test_hang_names_the_rank_outside_the_collective_while_hung_and_after_the_kill(job, cli):
    hung = job(slow=2)
    answer = hang([hung.dir])
    assert [r["rank"] for r in answer["ranks"]] == [0, 1, 2, 3]
    assert answer["groups"][0] == {"state": "in all_reduce", "ranks": [0, 1, 3], "count": 3}
    assert answer["groups"][1]["ranks"] == [2]
    assert answer["ranks"][2]["stack"] == ["step", "data.fetch"]
    assert not answer["agree"] and answer["alive"] == 4

    code, out, err = cli("hang", hung.dir)
    assert code == 1, err
    assert "3 ranks wait in all_reduce for up to" in out and "(ranks 0, 1, 3)" in out
    assert "rank 2 is not in all_reduce: open stack step > data.fetch (" in out

    hung.kill()
    code, out, err = cli("hang", hung.dir)
    assert code == 1, err
    assert "rank 2 is not in all_reduce: open stack step > data.fetch (" in out
    assert "not running now (read from their flight files): ranks 0, 1, 2, 3" in out
    code, out, _ = cli("hang", hung.dir, "--json")
    answer = json.loads(out)
    assert answer["alive"] == 0 and answer["groups"][1]["ranks"] == [2]


@pytest.mark.slow
def test_ranks_that_agree_exit_0(job, cli):
    hung = job(slow=-1)  # every rank waits in all_reduce
    code, out, err = cli("hang", hung.dir)
    assert code == 0, err
    assert out.startswith("4 ranks wait in all_reduce for up to")


def test_bad_input_is_one_line_and_exit_2(tmp_path, cli):
    code, _, err = cli("hang", tmp_path / "missing")
    assert code == 2 and "missing: no such flight file or directory" in err
    code, _, err = cli("hang", tmp_path)
    assert code == 2 and "no flight file in this directory" in err
    junk = tmp_path / "junk"
    junk.write_bytes(b"not a flight file at all")
    code, _, err = cli("hang", junk)
    assert code == 2 and str(junk) in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_hang_reads_the_open_stacks_of_ranks_recording_to_a_collector(job, cli, tmp_path):
    # no span has ended when the ranks hang: they send their stacks all the same
    from hotspan.recording._collector import CollectorServer

    with CollectorServer(tmp_path / "run", "grpc://127.0.0.1:0") as server:
        hung = job(slow=2, out=server.url)
        deadline = time.monotonic() + 60
        while len((answer := hang([server.url]))["ranks"]) < 4 or answer["ranks"][2]["stack"] != [
            "step",
            "data.fetch",
        ]:
            assert time.monotonic() < deadline, f"the collector never had every rank: {answer}"
            time.sleep(0.1)
        assert answer["groups"][0] == {"state": "in all_reduce", "ranks": [0, 1, 3], "count": 3}
        assert answer["alive"] == 4 and not answer["agree"]
        from_files = hang([hung.dir])
        for key in ("groups", "agree", "alive"):
            assert answer[key] == from_files[key]
        code, out, err = cli("hang", server.url)
        assert code == 1, err
        assert "3 ranks wait in all_reduce for up to" in out and "(ranks 0, 1, 3)" in out
        assert "rank 2 is not in all_reduce: open stack step > data.fetch (" in out
        # the open time grows while it hangs, on the collector's clock
        first = answer["ranks"][2]["open_ns"]
        while hang([server.url])["ranks"][2]["open_ns"] <= first:
            assert time.monotonic() < deadline
            time.sleep(0.1)

        hung.kill()
        deadline = time.monotonic() + 30
        while (answer := hang([server.url]))["alive"]:
            assert time.monotonic() < deadline, "the collector still takes the ranks as alive"
            time.sleep(0.2)
        code, out, err = cli("hang", server.url, "--json")
        assert code == 1
        assert json.loads(out)["groups"][1] == {"state": "outside", "ranks": [2], "count": 1}
        code, out, err = cli("hang", server.url)
        assert (
            "not running now (the collector has not heard from them since): ranks 0, 1, 2, 3" in out
        )


def test_a_collector_without_stacks_or_none_there_is_one_line_and_exit_2(tmp_path, cli):
    import socket

    from hotspan.recording._collector import CollectorServer

    with CollectorServer(tmp_path / "run", "grpc://127.0.0.1:0") as server:
        code, _, err = cli("hang", server.url)
        assert code == 2 and "the collector holds no open stacks" in err
        assert len(err.strip().splitlines()) == 1
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = cli("hang", f"grpc://127.0.0.1:{port}")
    assert code == 2 and f"grpc://127.0.0.1:{port}" in err
    assert len(err.strip().splitlines()) == 1
    code, _, err = cli("hang", "grpc://127.0.0.1:notaport")
    assert code == 2 and "port" in err


def test_a_collector_refuses_bad_open_stacks_and_keeps_serving(tmp_path):
    import pyarrow.flight as flight

    from hotspan.recording._collector import CollectorServer
    from hotspan.recording._collector import fetch_open_stacks

    good = {
        "v": 1,
        "rank": 1,
        "pid": 4242,
        "host": "h",
        "batch": "ab",
        "interval_s": 60,
        "threads": [{"thread_id": 7, "thread_name": "main", "stack": [[1, 0, "step", "train", 5]]}],
    }
    bad = [
        b"not json",
        b"[1, 2]",
        json.dumps({**good, "rank": -1}).encode(),
        json.dumps({**good, "threads": [{"stack": [[1, 0, "x"]]}]}).encode(),
        json.dumps({**good, "threads": [{"stack": [[1, 0, 5, None, 1]]}]}).encode(),
        json.dumps({**good, "interval_s": 0}).encode(),
        b"{" + b" " * (1 << 20) + b"}",
    ]
    with CollectorServer(tmp_path / "run", "grpc://127.0.0.1:0") as server:
        client = flight.FlightClient(server.url)
        try:
            for body in bad:
                with pytest.raises(flight.FlightServerError, match="bad open stacks"):
                    list(client.do_action(flight.Action("stacks", body)))
            list(client.do_action(flight.Action("stacks", json.dumps(good).encode())))
        finally:
            client.close()
        procs, _now = fetch_open_stacks(server.url)
    (proc,) = procs
    assert (proc.rank, proc.pid, proc.alive, proc.clean_exit) == (1, 4242, True, False)
    assert [(f.name, f.category, f.start_ns) for f in proc.threads[0].stack] == [
        ("step", "train", 5)
    ]


@pytest.mark.parametrize("value", ["abc", "0", "-1", "7200"])
def test_a_bad_stacks_interval_is_one_clear_error(monkeypatch, value):
    import hotspan

    monkeypatch.setenv("HOTSPAN_STACKS_INTERVAL", value)
    with pytest.raises(ValueError, match=f"HOTSPAN_STACKS_INTERVAL='{value}': expected seconds"):
        hotspan.record("grpc://127.0.0.1:1")


GROUPED = textwrap.dedent(
    """
    import sys, time
    import hotspan
    rank, ready = int(sys.argv[1]), sys.argv[2]
    # as torch.distributed's instrumentation records them: ranks 0, 1 wait in the world's
    # all_reduce, ranks 2, 3 in their own group's
    group = "comms:world" if rank < 2 else "comms:tp.1"
    with hotspan.span("step", "train"):
        with hotspan.span("all_reduce", group):
            open(f"{ready}.{rank}", "w").close()
            time.sleep(600)
    """
)


@pytest.mark.slow
def test_ranks_waiting_in_two_groups_collectives_are_in_two_places(tmp_path, cli):
    flight = tmp_path / "flight"
    flight.mkdir()
    ready = tmp_path / "ready"
    env = {**os.environ, "HOTSPAN_FLIGHT": str(flight / "hotspan-{pid}")}
    env.pop("HOTSPAN_OUT", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", GROUPED, str(rank), str(ready)],
            env={**env, "HOTSPAN_RANK": str(rank)},
        )
        for rank in range(4)
    ]
    try:
        deadline = time.monotonic() + 120
        while not all((tmp_path / f"ready.{r}").exists() for r in range(4)):
            assert time.monotonic() < deadline, "the ranks did not reach their hang"
            time.sleep(0.05)
        answer = hang([flight])
        states = {g["state"]: g["ranks"] for g in answer["groups"]}
        assert states == {"in all_reduce": [0, 1], "in all_reduce@tp.1": [2, 3]}
        code, out, err = cli("hang", flight)
        assert code == 1, err
        assert "2 ranks wait in all_reduce for up to" in out
        assert "2 ranks wait in all_reduce@tp.1 for up to" in out
    finally:
        for p in procs:
            p.kill()
            p.wait(timeout=30)
