"""Helpers of the serve tests: real recordings, and a real ``hotspan serve`` process."""

from __future__ import annotations

import os
import re
import selectors
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pyarrow as pa

import hotspan


def record_steps(
    steps: int, *, work: int = 20_000, threads: int = 2, fail_at: int | None = None
) -> pa.Table:
    """Spans of a training-like loop on ``threads`` threads: step > forward (compute),
    allreduce (comms, with bytes); one span failing at step ``fail_at`` of thread 1."""
    hotspan.drain()

    def worker(k: int) -> None:
        hotspan.set_thread_name(f"worker-{k}")
        for i in range(steps):
            with hotspan.span("step", "train"):
                with hotspan.span("forward", "compute"):
                    sum(range(work))
                with hotspan.span("allreduce", "comms", arg=4096):
                    sum(range(work // 2))
                if k == 1 and i == fail_at:
                    try:
                        with hotspan.span("flaky", "compute"):
                            raise RuntimeError
                    except RuntimeError:
                        pass

    pool = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return hotspan.drain()


def with_rank(table: pa.Table, rank: int) -> pa.Table:
    index = table.schema.get_field_index("rank")
    return table.set_column(
        index, table.schema.field(index), pa.array([rank] * table.num_rows, pa.int32())
    )


class Server:
    """``python -m hotspan serve DIR --port 0 ...`` in a process of its own."""

    def __init__(self, directory: Path, *args: str, env: dict | None = None):
        environment = {k: v for k, v in os.environ.items() if k != "HOTSPAN_TOKEN"}
        environment.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "hotspan", "serve", str(directory), "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environment,
        )
        line = self._first_line(60)
        match = re.search(r"(http://\S+/)", line)
        if not match:
            self.stop()
            raise AssertionError(f"no URL announced: {line!r}; stderr: {self.proc.stderr.read()}")
        self.url = match.group(1)
        self.announced = line

    def _first_line(self, timeout: float) -> str:
        selector = selectors.DefaultSelector()
        selector.register(self.proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if selector.select(timeout=0.5):
                return self.proc.stdout.readline()
            if self.proc.poll() is not None:
                break
        self.stop()
        raise AssertionError(f"hotspan serve did not start: {self.proc.stderr.read()}")

    def client(self, **kwargs) -> "httpx.Client":
        return httpx.Client(base_url=self.url, timeout=60, trust_env=False, **kwargs)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
