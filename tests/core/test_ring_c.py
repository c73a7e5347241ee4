"""Build and run the plain C tests of the block chains and clock (no Python inside), plain and
under ThreadSanitizer and AddressSanitizer+UBSan."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
CC = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")

pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")

SANITIZERS = {
    "plain": ["-O2"],
    "tsan": ["-O1", "-g", "-fsanitize=thread"],
    "asan": ["-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined"],
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(SANITIZERS))
def test_ring_and_clock_in_c(variant, tmp_path):
    exe = tmp_path / f"test_ring_{variant}"
    cmd = [
        CC,
        "-std=gnu11",
        "-Wall",
        "-Wextra",
        "-pthread",
        *SANITIZERS[variant],
        f"-I{CSRC}",
        str(ROOT / "tests" / "core" / "csrc" / "test_ring.c"),
        str(CSRC / "hs_ring.c"),
        str(CSRC / "hs_clock.c"),
        "-o",
        str(exe),
    ]
    build = subprocess.run(cmd, capture_output=True, text=True)
    if build.returncode != 0 and variant != "plain" and "sanitize" in build.stderr:
        pytest.skip(f"{variant} runtime not available: {build.stderr.strip()[:200]}")
    assert build.returncode == 0, build.stderr
    env = dict(os.environ, TSAN_OPTIONS="halt_on_error=1", ASAN_OPTIONS="detect_leaks=1")
    env.pop("LD_PRELOAD", None)
    run = subprocess.run([str(exe)], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "0 failures" in run.stdout
    assert "WARNING: ThreadSanitizer" not in run.stderr
