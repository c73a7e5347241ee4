"""A process that dropped spans says so once at exit, on stderr; one that did not, says nothing."""

from __future__ import annotations

import pytest

from _util import run_python


@pytest.mark.slow
def test_dropped_spans_are_said_once_at_exit():
    proc = run_python("""
        import sys, hotspan
        hotspan.configure(memory_cap=64 * 1024, drain_thread=False)  # two blocks of records
        for i in range(10000):
            with hotspan.span("capped"):
                pass
        hotspan.drain()
        print(hotspan.dropped())
    """)
    assert proc.returncode == 0, proc.stderr
    dropped = int(proc.stdout.split()[-1])
    assert 0 < dropped < 10000
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hotspan:")]
    # one thread that never drains: the cap is held by spans waiting for drain()
    assert lines == [
        f"hotspan: {dropped:,} spans dropped at the memory cap (64.0 KiB), filled by spans "
        "not drained yet: drain more often (record(flush_interval=), drain()) or raise "
        "configure(memory_cap=)"
    ]


def test_nothing_dropped_nothing_said_and_no_pyarrow_loaded():
    proc = run_python("""
        import sys, hotspan
        with hotspan.span("x"):
            pass
        assert "pyarrow" not in sys.modules and "numpy" not in sys.modules
    """)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr


def test_drops_made_on_purpose_are_left_out_of_the_exit_line():
    """``hotspan.testing.expected_drops()``: a test that fills the memory cap on purpose does not
    end its run with the exit line; drops outside it still do, counted alone."""
    program = """
        import hotspan
        from hotspan.testing import expected_drops
        hotspan.configure(memory_cap=64 * 1024, drain_thread=False)

        def fill():
            for i in range(10000):
                with hotspan.span("capped"):
                    pass
            hotspan.drain()

        with expected_drops():
            fill()
        on_purpose = hotspan.dropped()
        assert on_purpose > 0
        print(on_purpose)
        if AGAIN:
            fill()
            print(hotspan.dropped() - on_purpose)
    """
    proc = run_python(program.replace("AGAIN", "False"))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    proc = run_python(program.replace("AGAIN", "True"))
    assert proc.returncode == 0, proc.stderr
    later = int(proc.stdout.split()[-1])
    lines = [line for line in proc.stderr.splitlines() if line.startswith("hotspan:")]
    assert len(lines) == 1 and lines[0].startswith(f"hotspan: {later:,} spans dropped "), lines
