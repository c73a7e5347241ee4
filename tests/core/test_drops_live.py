"""Spans dropped at the memory cap are said while the program runs: a SpansDropped event
with consumer "core" (thread and count) and a WARNING on the hotspan logger, within about
a second, at most once a second per thread; the exit line stays."""

from __future__ import annotations

import logging
import threading
import time

import pytest

import hotspan
from hotspan.events import SpansDropped


def _core(events: list) -> list[SpansDropped]:
    return [e for e in events if isinstance(e, SpansDropped) and e.consumer == "core"]


def _drop_some(n: int = 300_000) -> None:
    s = hotspan.span("x")
    for _ in range(n):
        with s:
            pass


def test_drops_at_the_cap_are_reported_while_the_program_runs(fresh, expected_drops, caplog):
    seen: list = []
    with caplog.at_level(logging.WARNING, logger="hotspan"), hotspan.on_event(seen.append):
        hotspan.configure(memory_cap=1 << 20)
        before = hotspan.dropped()
        started = time.monotonic()
        _drop_some()
        assert hotspan.dropped() > before  # nothing drained: the cap was reached
        deadline = time.monotonic() + 5
        while not _core(seen) and time.monotonic() < deadline:
            time.sleep(0.01)  # the program goes on running; the report comes from hotspan's threads
        reports = _core(seen)
        assert reports, "no SpansDropped from the core while the program ran"
        assert time.monotonic() - started < 5
        first = reports[0]
        assert (
            first.thread_id == threading.get_native_id()
            and first.thread_name == threading.current_thread().name
        )
        assert 0 < first.count <= hotspan.dropped()  # (drops of earlier tests may be in it)
        assert any(
            r.levelno == logging.WARNING and "memory cap was reached" in r.getMessage()
            for r in caplog.records
        )
    hotspan.drain()


def test_at_most_one_report_a_second_per_thread(fresh, expected_drops):
    seen: list = []
    with hotspan.on_event(seen.append):
        hotspan.configure(memory_cap=1 << 20)
        started = time.monotonic()
        while time.monotonic() - started < 2.5:  # dropping all along
            _drop_some(20_000)
        elapsed = time.monotonic() - started
        deadline = time.monotonic() + 3
        while len(_core(seen)) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    mine = [e for e in _core(seen) if e.thread_id == threading.get_native_id()]
    assert 2 <= len(mine) <= int(elapsed) + 2
    assert sum(e.count for e in mine) <= hotspan.dropped()
    hotspan.drain()


@pytest.mark.slow
def test_the_exit_line_stays(tmp_path):
    import subprocess
    import sys

    program = (
        "import hotspan\nhotspan.configure(memory_cap=1 << 20)\ns = hotspan.span('x')\n"
        "for _ in range(300_000):\n    with s:\n        pass\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0
    assert "spans dropped at the memory cap" in out.stderr
