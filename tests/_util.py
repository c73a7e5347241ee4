"""Helpers shared by the recorder tests."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap


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
