"""A real torch.distributed job (gloo, 4 CPU processes under torchrun, recorded with
HOTSPAN_OUT and hotspan.instrument("torch.distributed")) with one rank slow in its data
loading: hotspan.stragglers names that rank, with data.fetch as the reason (issue 31)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip(
    "torch", reason="torch is not installed: pip install '.[dist-test]' to run the collective tests"
)
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("this torch build has no gloo backend", allow_module_level=True)

import hotspan  # noqa: E402

SLOW_RANK = 2
STEPS = 30

TRAIN = textwrap.dedent(
    f"""
    import os, time, warnings
    warnings.simplefilter("ignore", FutureWarning)
    import torch, torch.distributed as dist
    import hotspan

    hotspan.instrument("torch.distributed")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    weights = torch.ones(256)

    def fetch():
        # rank {SLOW_RANK}'s data loading is slow: 40 ms more a step
        time.sleep(0.005 + (0.040 if rank == {SLOW_RANK} else 0.0))
        return torch.rand(64, 64)

    for step in range({STEPS}):
        with hotspan.span("step", "train"):
            with hotspan.span("data.fetch", "data"):
                batch = fetch()
            with hotspan.span("forward", "compute"):
                grad = (batch @ batch).sum() * weights
            dist.all_reduce(grad)
            with hotspan.span("optimizer", "compute"):
                weights -= 1e-6 * grad
    dist.barrier()
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_a_torchrun_job_with_one_slow_data_loader_names_that_rank(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out = tmp_path / "run"
    env = {
        **os.environ,
        "HOTSPAN_OUT": str(out),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "4",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    rows = hotspan.collectives(out)
    assert set(rows.column("rank").to_pylist()) == {0, 1, 2, 3}
    assert set(rows.column("key").to_pylist()) == {"all_reduce", "barrier"}
    table = hotspan.stragglers(out)
    named = table.filter(table.column("straggler"))
    assert named.column("rank").to_pylist() == [SLOW_RANK]
    reason = named.column("reason")[0].as_py()
    assert reason.startswith(f"rank {SLOW_RANK}: data.fetch +"), reason
    assert f"of {STEPS} steps" in reason
    # its blame is most of the waiting; the others waited for it about 40 ms a step
    blame = dict(zip(table.column("rank").to_pylist(), table.column("blame_ns").to_pylist()))
    assert blame[SLOW_RANK] > 0.8 * sum(blame.values())
    assert blame[SLOW_RANK] > 3 * 0.030e9 * (STEPS - 2)


HUNG = textwrap.dedent(
    """
    import os, sys, time, warnings
    warnings.simplefilter("ignore", FutureWarning)
    import torch, torch.distributed as dist
    import hotspan

    hotspan.instrument("torch.distributed")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for step in range(5):
        with hotspan.span("step", "train"):
            with hotspan.span("data.fetch", "data"):
                if step == 4 and rank == 2:
                    time.sleep(600)          # never comes: the others hang in all_reduce
            dist.all_reduce(torch.ones(16))
    """
)


@pytest.mark.slow
def test_hotspan_hang_names_the_rank_a_hung_torchrun_job_waits_for(tmp_path):
    import signal
    import time

    from hotspan.analysis.hang import hang
    from hotspan.cli import main

    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    flight = tmp_path / "flight"
    flight.mkdir()
    env = {
        **os.environ,
        "HOTSPAN_FLIGHT": str(flight / "hotspan-{pid}"),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    env.pop("HOTSPAN_OUT", None)
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "4",
            str(script),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    ranks: list[int] = []  # the rank processes: torchrun starts each in a session of its own
    try:
        deadline = time.monotonic() + 240
        while True:  # until every rank is where the hang puts it
            answer = hang([flight]) if any(flight.iterdir()) else {"groups": [], "ranks": []}
            ranks = [r["pid"] for r in answer["ranks"]]
            states = {tuple(g["ranks"]): g["state"] for g in answer["groups"]}
            if states == {(0, 1, 3): "in all_reduce", (2,): "outside"}:
                break
            assert job.poll() is None, "the job ended instead of hanging"
            assert time.monotonic() < deadline, f"never hung as planned: {answer['groups']}"
            time.sleep(0.2)
        assert answer["ranks"][2]["stack"] == ["step", "data.fetch"]
        assert main(["hang", str(flight)]) == 1
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        if any(flight.iterdir()):  # every rank that has a flight file, however far it got
            ranks = sorted(set(ranks) | {r["pid"] for r in hang([flight])["ranks"]})
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        job.wait(timeout=60)
    deadline = time.monotonic() + 60
    while hang([flight])["alive"]:  # until the kernel has taken every rank away
        assert time.monotonic() < deadline, "the ranks outlived SIGKILL"
        time.sleep(0.1)
    # killed since: the same answer from the flight files
    answer = hang([flight])
    assert answer["alive"] == 0
    assert [g["ranks"] for g in answer["groups"]] == [[0, 1, 3], [2]]
    assert main(["hang", str(flight)]) == 1


GROUPS = textwrap.dedent(
    f"""
    import os, time, warnings
    warnings.simplefilter("ignore", FutureWarning)
    import torch, torch.distributed as dist
    import hotspan

    hotspan.instrument("torch.distributed")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # two groups made on every rank, in one order: ranks 0 and 2, ranks 1 and 3
    even = dist.new_group([0, 2], group_desc="even")
    odd = dist.new_group([1, 3], group_desc="odd")
    mine = even if rank % 2 == 0 else odd
    for step in range({STEPS}):
        with hotspan.span("step", "train"):
            with hotspan.span("data.fetch", "data"):
                # rank 3 loads slowly: rank 1 waits for it in their group; 0 and 2 never do
                time.sleep(0.002 + (0.030 if rank == 3 else 0.0))
            dist.all_reduce(torch.ones(64), group=mine)
            dist.barrier(group=mine)
        if step % 10 == 9:
            dist.all_reduce(torch.ones(8))          # the world, now and then
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_a_torchrun_job_with_two_process_groups_is_matched_per_group(tmp_path):
    script = tmp_path / "groups.py"
    script.write_text(GROUPS)
    out = tmp_path / "run"
    env = {
        **os.environ,
        "HOTSPAN_OUT": str(out),
        "OMP_NUM_THREADS": "1",
        "PYTHONWARNINGS": "ignore",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "4",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    rows = hotspan.collectives(out)
    meta = json.loads(rows.schema.metadata[b"hotspan.ranks"])
    assert meta["unmatched"] == 0 and meta["match_problems"] == []
    (even,) = [g for g in meta["groups"] if g.startswith("even.")]
    (odd,) = [g for g in meta["groups"] if g.startswith("odd.")]
    assert sorted(meta["groups"]) == sorted(["world", even, odd])
    by_key: dict[str, list[dict]] = {}
    for row in rows.to_pylist():
        by_key.setdefault(row["key"], []).append(row)
    assert set(by_key) == {
        f"all_reduce@{even}",
        f"barrier@{even}",
        f"all_reduce@{odd}",
        f"barrier@{odd}",
        "all_reduce@world",
    }
    for group, members in ((even, {0, 2}), (odd, {1, 3})):
        for name in ("all_reduce", "barrier"):
            found = by_key[f"{name}@{group}"]
            assert {r["rank"] for r in found} == members
            assert len(found) == 2 * STEPS  # one instance a step, two ranks each
        # the group's sequence: all_reduce #2k, barrier #2k+1
        assert sorted({r["index"] for r in by_key[f"all_reduce@{group}"]}) == list(
            range(0, 2 * STEPS, 2)
        )
    world = by_key["all_reduce@world"]
    assert {r["rank"] for r in world} == {0, 1, 2, 3} and len(world) == 4 * (STEPS // 10)
    # rank 3 is the last of its group's all_reduce in (nearly) every step; rank 1 waits
    odd_reduce = by_key[f"all_reduce@{odd}"]
    late = [r for r in odd_reduce if r["last"]]
    assert sum(r["rank"] == 3 for r in late) >= STEPS - 2
    # rank 0 and 2 never waited for rank 3: their group's waits are short
    even_wait = sum(r["wait_ns"] for r in by_key[f"all_reduce@{even}"])
    odd_wait = sum(r["wait_ns"] for r in odd_reduce)
    assert odd_wait > 0.020e9 * (STEPS - 2)
    assert even_wait < odd_wait / 5


@pytest.mark.slow
def test_hotspan_hang_reads_a_collectors_live_state_of_a_hung_job(tmp_path):
    """The hung job's ranks record only to a collector (their flight files, elsewhere, are
    only where each reads its own open stacks from): `hotspan hang grpc://...` names the
    rank that never entered the all_reduce, and its open span, while the job hangs; and the
    same from the last stacks the collector kept once the ranks are killed."""
    import contextlib
    import io
    import signal
    import time

    from hotspan.analysis.hang import hang
    from hotspan.cli import main
    from hotspan.recording._collector import CollectorServer

    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    flight = tmp_path / "private"  # never given to hang
    flight.mkdir()
    with CollectorServer(tmp_path / "run", "grpc://127.0.0.1:0") as server:
        env = {
            **os.environ,
            "HOTSPAN_OUT": server.url,
            "HOTSPAN_FLIGHT": str(flight / "hotspan-{pid}"),
            "HOTSPAN_STACKS_INTERVAL": "0.3",
            "OMP_NUM_THREADS": "1",
            "PYTHONWARNINGS": "ignore",
        }
        job = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                "--nproc-per-node",
                "4",
                str(script),
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        pids: list[int] = []
        try:
            deadline = time.monotonic() + 240
            while True:  # until the collector has every rank where the hang puts it
                answer = hang([server.url])
                pids = [r["pid"] for r in answer["ranks"]]
                states = {tuple(g["ranks"]): g["state"] for g in answer["groups"]}
                if states == {(0, 1, 3): "in all_reduce", (2,): "outside"}:
                    break
                assert job.poll() is None, "the job ended instead of hanging"
                assert time.monotonic() < deadline, f"never hung as planned: {answer['groups']}"
                time.sleep(0.2)
            assert answer["alive"] == 4
            assert answer["ranks"][2]["stack"] == ["step", "data.fetch"]
            assert answer["ranks"][0]["stack"] == ["step", "all_reduce"]
            assert all(r["path"].startswith(server.url) for r in answer["ranks"])
            # the same text, rows and exit status as from flight files
            assert answer == _same_but_times(hang([flight]), answer)
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert main(["hang", server.url]) == 1
            text = out.getvalue()
            assert "3 ranks wait in all_reduce" in text
            assert "rank 2 is not in all_reduce: open stack step > data.fetch" in text
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                assert main(["hang", "--json", server.url]) == 1
            assert [g["ranks"] for g in json.loads(out.getvalue())["groups"]] == [[0, 1, 3], [2]]
        finally:
            os.killpg(job.pid, signal.SIGKILL)
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            job.wait(timeout=60)
        # killed since: the collector keeps their last stacks, no longer alive
        deadline = time.monotonic() + 60
        while (answer := hang([server.url]))["alive"]:
            assert time.monotonic() < deadline, "the collector still takes the ranks as alive"
            time.sleep(0.2)
        assert [g["ranks"] for g in answer["groups"]] == [[0, 1, 3], [2]]
        assert "not running now" in answer["summary"][-1]
        assert main(["hang", server.url]) == 1


def _same_but_times(from_files: dict, from_collector: dict) -> dict:
    """The flight files' answer with the collector's paths and times: all else must agree."""
    out = json.loads(json.dumps(from_files))
    for mine, theirs in zip(out["ranks"], from_collector["ranks"]):
        for key in ("path", "open_ns", "collective_ns"):
            mine[key] = theirs[key]
    out["summary"] = from_collector["summary"]
    return out
