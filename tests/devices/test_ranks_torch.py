"""A real torch.distributed job (gloo, 4 CPU processes under torchrun, recorded with
HOTSPAN_OUT and hotspan.instrument("torch.distributed")) with one rank slow in its data
loading: hotspan.stragglers names that rank, with data.fetch as the reason (issue 31)."""

from __future__ import annotations

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
