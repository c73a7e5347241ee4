"""The test suite leaves nothing running: a green run's last line is pytest's (once it was
``hotspan: 35,669,448 spans dropped at the memory cap``, the drops of the tests that fill the
cap on purpose), and the guard in conftest.py catches a test that leaves a recording running."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import hotspan

from _util import left_running

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_a_green_run_of_the_tests_that_fill_the_cap_ends_with_pytests_own_line():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/core/test_drops_live.py",
            "tests/core/test_threads.py",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "spans dropped" not in proc.stderr, proc.stderr[-3000:]
    last = (proc.stdout + proc.stderr).strip().splitlines()[-1]
    assert " passed" in last and "hotspan" not in last, last


def test_the_guard_sees_a_recording_left_running(tmp_path, fresh):
    assert left_running() == []
    recording = hotspan.record(tmp_path / "run")
    recording.start()
    try:
        found = left_running()
        # record(dir) writes through the drain thread's raw log (no hub consumer)
        assert "a recording's raw log still open" in found, found
        assert "1 recording(s) still to be stopped at exit" in found, found
    finally:
        recording.stop()
    assert left_running() == []
    subscription = hotspan.subscribe(lambda batch: None)
    try:
        assert left_running()
    finally:
        subscription.close()
    assert left_running() == []
