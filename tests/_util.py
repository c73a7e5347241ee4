"""Helpers shared by the recorder tests."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap


#: True in .ci/sanitize's TSan run (the runtime preloaded into the interpreter).
UNDER_TSAN = "libtsan" in os.environ.get("LD_PRELOAD", "")
#: Why a test that forks a process pool while the recording's threads run is left to the
#: other runs (the quick and slow tiers, ASan): a child forked from a multithreaded process
#: can inherit one of TSan's own locks held by another thread, and hang in TSan's runtime.
TSAN_FORKED_POOLS = (
    "under TSan a pool worker forked beside running threads can hang in TSan's runtime"
)


#: True where a fresh interpreter cannot be this one's own executable (.ci/arm64 runs an
#: arm64 CPython under qemu-user: see python_command), so a spawned pool worker, which
#: multiprocessing starts with ``sys.executable``, cannot start at all.
CANNOT_SPAWN = bool(os.environ.get("HOTSPAN_TEST_PYTHON"))
CANNOT_SPAWN_WHY = "multiprocessing spawns sys.executable, which this emulated run cannot exec"


def rows(table):
    """The table as a list of dicts with plain Python values (dictionaries decoded)."""
    return table.to_pylist()


def python_command() -> list[str]:
    """How a test starts a fresh interpreter: ``sys.executable``, or HOTSPAN_TEST_PYTHON's
    command line where that cannot be executed directly (.ci/arm64: an arm64 CPython under
    qemu-user, whose execve of an arm64 binary the host kernel refuses without binfmt_misc)."""
    wrapper = os.environ.get("HOTSPAN_TEST_PYTHON")
    return shlex.split(wrapper) if wrapper else [sys.executable]


def run_python(
    code: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (for environment variables read at import, fork...)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [*python_command(), "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )


#: Set by .ci/run (which installs Chromium): there a missing browser fails the run.
REQUIRE_BROWSER = "HOTSPAN_REQUIRE_BROWSER"


def chromium() -> str:
    """The headless browser: pip cannot install one, so a machine without it skips the
    rendering tests with one line naming the package, unless HOTSPAN_REQUIRE_BROWSER=1."""
    import shutil

    import pytest

    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    reason = "headless Chromium not on PATH: apt-get install chromium"
    if os.environ.get(REQUIRE_BROWSER) == "1":
        pytest.fail(f"{reason} ({REQUIRE_BROWSER}=1 requires it)")
    pytest.skip(reason)


def run_chromium(tmp_path, *args, timeout: float = 90) -> subprocess.CompletedProcess:
    """Headless Chromium with a profile of its own under ``tmp_path``."""
    return subprocess.run(
        [
            chromium(),
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_until(
    condition, timeout: float = 30.0, interval: float = 0.01, what: str = "the condition"
):
    """Poll ``condition()`` until it returns something true (returned), failing after
    ``timeout`` seconds: a test waits for the event it means, never a fixed sleep."""
    import time

    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(interval)


def left_running() -> list[str]:
    """What is still consuming spans in this process: recordings (their raw log), subscribers,
    a live log. Empty when nothing is (modules never imported: nothing of theirs can run)."""
    found = []
    hub = sys.modules.get("hotspan.recording._hub")
    if hub is not None and hub.streaming():
        readers = [name for name in hub.stats() if name != "drain()"]
        found.append(f"streaming consumers attached: {', '.join(readers) or '?'}")
    lifecycle = sys.modules.get("hotspan._lifecycle")
    if lifecycle is not None and lifecycle._stops:
        found.append(f"{len(lifecycle._stops)} recording(s) still to be stopped at exit")
    native = sys.modules.get("hotspan._native")
    if native is not None and native._raw_stats()["open"]:
        # record(dir) streams through the drain thread's raw log, not the hub
        found.append("a recording's raw log still open")
    live_log = sys.modules.get("hotspan.recording.live_log")
    if live_log is not None and live_log._current is not None:
        found.append("a live() log still running")
    return found
