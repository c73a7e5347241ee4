"""A process that dropped spans says so once at exit, on stderr; one that did not, says nothing."""
from __future__ import annotations

from _util import run_python


def test_dropped_spans_are_said_once_at_exit():
    proc = run_python("""
        import sys, hotspan
        hotspan.configure(memory_cap=32 * 1000, drain_thread=False)  # room for 1000 records
        for i in range(5000):
            with hotspan.span("capped"):
                pass
        hotspan.drain()
        print("pyarrow" in sys.modules)
    """)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hotspan:")]
    assert lines == ["hotspan: 4,000 spans dropped (ring capacity 65,536 records a thread, memory cap 31.25 KiB); "
                     "see configure(capacity=, memory_cap=), or drain more often"]


def test_nothing_dropped_nothing_said_and_no_pyarrow_loaded():
    proc = run_python("""
        import sys, hotspan
        with hotspan.span("x"):
            pass
        assert "pyarrow" not in sys.modules and "numpy" not in sys.modules
    """)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
