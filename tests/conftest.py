"""Shared fixtures: every recorder test starts from an empty, enabled recorder."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import hotspan
from hotspan import _native

DEFAULT_CAPACITY = 1 << 16
DEFAULT_MEMORY_CAP = 64 << 20


@pytest.fixture
def fresh():
    """Drain what earlier tests left, restore defaults, and drain again afterwards."""
    hotspan.enable()
    _native._set_real_clock()
    hotspan.drain()
    yield
    hotspan.enable()
    _native._set_real_clock()
    hotspan.configure(capacity=DEFAULT_CAPACITY, memory_cap=DEFAULT_MEMORY_CAP, drain_thread=True)
    hotspan.drain()


def rows(table):
    """The table as a list of dicts with plain Python values (dictionaries decoded)."""
    return table.to_pylist()


def run_python(code: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run code in a fresh interpreter (for environment variables read at import, fork...)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
    )
