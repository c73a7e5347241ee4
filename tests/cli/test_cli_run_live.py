"""`hotspan run --live-min-ms MS` asks for the live log: --live is implied."""

from __future__ import annotations

import pytest

import subprocess
import sys


@pytest.mark.slow
def test_live_min_ms_implies_live(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(
        "import time, hotspan\n"
        "with hotspan.span('slow_step', 'train', arg=7):\n"
        "    time.sleep(0.01)\n"
        "with hotspan.span('quick', 'train'):\n"
        "    pass\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hotspan",
            "run",
            "--live-min-ms",
            "5",
            "-o",
            str(tmp_path / "t.parquet"),
            str(script),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    live = [line for line in proc.stderr.splitlines() if "[train]" in line]
    assert len(live) == 1 and "slow_step" in live[0] and "arg=7" in live[0]
