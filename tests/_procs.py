"""Real processes for the multi-rank tests: ranks that record, a collector; bounded waits."""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.compute as pc

#: A rank: THREADS threads x STEPS steps of (step > fwd, comm) spans, then "done".
#: With LOOP=1 it goes on until killed, printing the spans recorded so far after each round.
RANK_CODE = textwrap.dedent(
    """
    import os, sys, threading, time
    import hotspan

    threads, steps = int(os.environ.get("T_THREADS", "2")), int(os.environ.get("T_STEPS", "50"))
    pause, loop = float(os.environ.get("T_PAUSE", "0")), os.environ.get("T_LOOP") == "1"
    step, fwd, comm = hotspan.span("step", "train"), hotspan.span("fwd", "compute"), hotspan.span("comm", "comms")

    def work():
        for i in range(steps):
            with step:
                with fwd:
                    pass
                with comm:
                    pass
            if pause:
                time.sleep(pause)

    rounds = 0
    while True:
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
        rounds += 1
        print("recorded", rounds * threads * steps * 3, flush=True)
        if not loop:
            break
    if os.environ.get("T_WAIT") == "1":
        time.sleep(60)
    """
)

DEADLINE_S = 30.0


def spans_per_rank(threads: int = 2, steps: int = 50) -> int:
    return threads * steps * 3


def env(**extra: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "HOTSPAN_OUT",
            "HOTSPAN_TOKEN",
            "HOTSPAN_RANK",
            "RANK",
            "HOTSPAN_FLUSH_INTERVAL",
            "HOTSPAN_RECORD_CHILDREN",  # a test's own record(): not for the processes it starts
            "HOTSPAN_RUN_ID",  # the test process's run: each program a test starts is its own
        )
    }
    base.update(extra)
    return base


#: The job the ranks a test starts belong to, as a launcher would name it (torchrun's
#: TORCHELASTIC_RUN_ID, Slurm's job id): started apart without one, each rank is a run of its
#: own, and reading the directory reads the newest (issue 30).
JOB_RUN_ID = f"test-job-{os.getpid()}"


def start_rank(rank: int, out: str, **extra: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", RANK_CODE],
        env=env(HOTSPAN_OUT=out, RANK=str(rank), **{"HOTSPAN_RUN_ID": JOB_RUN_ID, **extra}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_line(proc: subprocess.Popen, pattern: str, timeout: float = DEADLINE_S) -> re.Match:
    """The first stdout line of ``proc`` matching ``pattern``, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    try:
        seen = []
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = proc.stdout.readline()
            if not line:
                raise AssertionError(
                    f"process ended before printing {pattern!r}: {seen} {proc.stderr.read()}"
                )
            seen.append(line)
            match = re.search(pattern, line)
            if match:
                return match
        raise AssertionError(f"no line matching {pattern!r} within {timeout}s: {seen}")
    finally:
        sel.close()


def start_collector(
    out: Path, *, port: int = 0, token: str | None = None, nice: int | None = None
) -> tuple[subprocess.Popen, int]:
    args = [
        sys.executable,
        "-m",
        "hotspan",
        "collect",
        "--listen",
        f"grpc://127.0.0.1:{port}",
        "--out",
        str(out),
        "--duration",
        "120",
    ]
    if token is not None:
        args += ["--token", token]
    if nice is not None:
        args += ["--nice", str(nice)]
    proc = subprocess.Popen(
        args, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        match = read_line(proc, r"listening on grpc://127\.0\.0\.1:(\d+)")
    except BaseException:
        kill(proc)
        raise
    return proc, int(match.group(1))


def finish(proc: subprocess.Popen, timeout: float = DEADLINE_S) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out, err


def stop(
    proc: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = DEADLINE_S
) -> tuple[int, str, str]:
    proc.send_signal(sig)
    return finish(proc, timeout)


def kill(*procs: subprocess.Popen) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        try:
            proc.communicate(timeout=10)
        except (subprocess.TimeoutExpired, ValueError, OSError):
            pass


def check_tree(table) -> None:
    """Span ids unique across the merged trace; every parent exists, on the same process and
    thread, one level up."""
    ids = table.column("span_id")
    assert pc.count_distinct(ids).as_py() == table.num_rows, "span ids collide across processes"
    rows = table.select(["span_id", "parent_id", "pid", "thread_id", "depth"]).to_pylist()
    by_id = {r["span_id"]: r for r in rows}
    for r in rows:
        if r["parent_id"] is None:
            assert r["depth"] == 0
            continue
        parent = by_id.get(r["parent_id"])
        assert parent is not None, f"span {r['span_id']:#x}: parent {r['parent_id']:#x} is missing"
        assert (parent["pid"], parent["thread_id"], parent["depth"] + 1) == (
            r["pid"],
            r["thread_id"],
            r["depth"],
        )


def killed_at_random(
    script: Path, progress: Path, run_env: dict[str, str], within: tuple[float, float]
) -> tuple[int, list[tuple[int, int, int]]]:
    """Run ``script progress`` until it prints "ready", SIGKILL it at a random time within
    ``within`` seconds after, and give (the kill's monotonic ns, the (thread, count, ns)
    records the program wrote to ``progress`` as it went: 24 bytes each)."""
    import random
    import struct

    proc = subprocess.Popen(
        [sys.executable, str(script), str(progress)],
        env=run_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read_line(proc, "ready")
        time.sleep(random.uniform(*within))
        killed_at = time.monotonic_ns()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=DEADLINE_S)
    finally:
        kill(proc)
    data = progress.read_bytes()
    return killed_at, [struct.unpack_from("<qqq", data, k) for k in range(0, len(data) - 23, 24)]
