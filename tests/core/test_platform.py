"""What differs between the platforms hotspan runs on (docs/platforms.md): the tick source,
the drain thread's wake (a futex on Linux, a condition variable elsewhere), the machine the
tests run on. .ci/arm64 runs this file on arm64 under emulation; .ci/cross runs it against a
build whose wake is the condition variable macOS uses."""

from __future__ import annotations

import json
import os
import platform
import time

import hotspan
from hotspan import _native

from _util import run_python


def test_the_tests_run_on_the_machine_the_stage_expects():
    # .ci/arm64 sets HOTSPAN_EXPECT_MACHINE=aarch64: a stage that silently ran the host's
    # x86-64 interpreter instead of the emulated one would otherwise pass unnoticed.
    expected = os.environ.get("HOTSPAN_EXPECT_MACHINE")
    if expected:
        assert platform.machine() == expected


def test_the_tests_run_the_build_the_stage_expects():
    # .ci/cross and .ci/arm64 put a build of their own ahead of the installed one
    # (HOTSPAN_EXPECT_NATIVE: its directory): the tests must exercise that build.
    expected = os.environ.get("HOTSPAN_EXPECT_NATIVE")
    if expected:
        assert os.path.realpath(_native.__file__).startswith(os.path.realpath(expected) + os.sep)


def test_clock_source_is_the_machines_counter():
    source = _native._clock_info()["source"]
    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        # the architected generic timer (cntvct_el0), read on the hot path
        assert source == "cntvct"
    elif machine in ("x86_64", "amd64"):
        assert source in ("tsc", "monotonic")  # tsc only where the CPU reports it invariant
    else:
        assert source == "monotonic"


def test_span_durations_agree_with_the_monotonic_clock(fresh):
    # The tick source's rate (cntvct's frequency, the calibrated TSC) turned into
    # nanoseconds at drain time: a span around a measured interval of >= 50 ms must last
    # that long, within what the calibration and the emulation's scheduling allow.
    with hotspan.span("measured"):
        t0 = time.monotonic_ns()
        while time.monotonic_ns() - t0 < 50_000_000:
            pass
        elapsed = time.monotonic_ns() - t0
    row = hotspan.drain().to_pylist()[0]
    assert row["name"] == "measured"
    assert elapsed <= row["duration_ns"] <= elapsed * 1.2 + 5_000_000
    # and the start is on the wall clock (epoch ns), as in every table
    assert abs(row["start_ns"] - time.time_ns()) < 60 * 10**9


def test_an_exiting_thread_wakes_the_drain_thread():
    # drain_interval=30: left to its period, the drain thread would sleep 30 s between
    # passes. A thread's exit wakes it (hs_wake_drainer: the futex on Linux, the condition
    # variable elsewhere), so its spans are walked within a fraction of that. Three rounds:
    # from the second on, only the exit's wake can explain a prompt pass.
    proc = run_python(
        """
        import json, threading, time
        import hotspan
        from hotspan import _native
        hotspan.configure(drain_interval=30)
        waits = []
        for round in range(3):
            before = _native._pending()["spans"]
            def work():
                for _ in range(100):
                    with hotspan.span("w"):
                        pass
            t = threading.Thread(target=work)
            t.start()
            t.join()
            t0 = time.monotonic()
            while _native._pending()["spans"] < before + 100 and time.monotonic() - t0 < 20:
                time.sleep(0.001)
            waits.append(time.monotonic() - t0)
        print(json.dumps({"waits": waits, "pending": _native._pending()["spans"]}))
        """
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["pending"] == 300
    assert max(out["waits"]) < 10, out  # the period is 30 s: only a wake is this fast


def test_a_table_round_trips_through_parquet(fresh, tmp_path):
    # pyarrow's own build for the platform (the aarch64 wheel under .ci/arm64) writes and
    # reads what the drain produced: every column, the dictionaries and the metadata.
    for i in range(50):
        with hotspan.span("outer", "io", arg=i):
            with hotspan.span("inner"):
                pass
    table = hotspan.drain()
    path = tmp_path / "run.parquet"
    hotspan.export(table, str(path))
    back = hotspan.load(str(path))
    assert back.num_rows == 100
    assert back.column_names == table.column_names
    assert back.to_pylist() == table.to_pylist()
    assert back.schema.metadata[b"hotspan.clock"] == table.schema.metadata[b"hotspan.clock"]
