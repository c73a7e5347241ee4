"""The process lifecycle's written order (hotspan/_lifecycle.py), whatever the import order."""

from __future__ import annotations

import pytest
from _util import run_python


def test_exit_runs_the_stops_then_the_reports_whatever_was_registered_first():
    proc = run_python(
        """
        import atexit
        from hotspan import _lifecycle as lifecycle

        lifecycle.report_at_exit(lambda: print("report", flush=True))
        atexit.register(lambda: print("a library's finalizer", flush=True))
        lifecycle.stop_at_exit(lambda: print("stop", flush=True))
        """
    )
    assert proc.returncode == 0, proc.stderr
    # The stop before the finalizer registered before it (pyarrow.fs's S3 one must outlive a
    # final flush), the report after everything registered after hotspan's import.
    assert proc.stdout.splitlines()[:3] == ["stop", "a library's finalizer", "report"]


def test_a_stop_forgotten_does_not_run_at_exit():
    proc = run_python(
        """
        from hotspan import _lifecycle as lifecycle

        def stop():
            print("stop")

        lifecycle.stop_at_exit(stop)
        lifecycle.forget_at_exit(stop)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == ""


def test_an_unknown_fork_step_is_refused():
    from hotspan import _lifecycle as lifecycle

    with pytest.raises(ValueError, match="no fork step 'later'"):
        lifecycle.on_fork("later", before=lambda: None)


def test_a_recorders_final_flush_runs_before_the_dropped_spans_report(tmp_path):
    proc = run_python(
        f"""
        import hotspan
        from hotspan import _lifecycle as lifecycle

        lifecycle.report_at_exit(lambda: print("spans on disk:", hotspan.load({str(tmp_path / "run")!r}).num_rows))
        hotspan.record({str(tmp_path / "run")!r}, flush_interval=60).start()
        with hotspan.span("x"):
            pass
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "spans on disk: 1"
