"""hotspan.live: one line per finished span, from the drain side."""

from __future__ import annotations

import io
import threading
import time

import pytest

import hotspan
from hotspan._units import human_bytes, human_ns

from _util import run_python, wait_until

pytestmark = pytest.mark.usefixtures("fresh")


def test_live_lines_for_spans_over_the_threshold():
    out = io.StringIO()
    with hotspan.live(min_ns=1_000_000, file=out) as log:
        with hotspan.span("slow", "io", arg=4 * 1024 * 1024):
            time.sleep(0.003)
        for _ in range(100):
            with hotspan.span("fast"):
                pass
        try:
            with hotspan.span("broken", "compute"):
                raise RuntimeError
        except RuntimeError:
            pass
    text = out.getvalue()
    lines = text.splitlines()
    assert len(lines) == 2, text  # the slow span and the error (errors always show)
    slow = next(line for line in lines if "slow" in line)
    assert (
        "[io]" in slow
        and f"arg={4 * 1024 * 1024}" in slow
        and " ms" in slow
        and "MainThread" in slow
        and " r0 " in slow
    )
    assert not slow.startswith("!!")
    broken = next(line for line in lines if "broken" in line)
    assert broken.startswith("!!") and "[compute]" in broken
    assert log.lines == 2
    # live does not consume: drain still returns everything
    assert hotspan.drain().num_rows == 102


def test_live_lines_come_from_the_drain_side_not_the_recording_thread():
    writers = set()

    class Recorder(io.StringIO):
        def write(self, s):
            writers.add(threading.current_thread().name)
            return super().write(s)

    out = Recorder()
    with hotspan.live(file=out):
        with hotspan.span("x"):
            pass
    assert writers == {"hotspan-live"}
    assert "x" in out.getvalue()


def test_a_failing_writer_is_reported_once_and_recording_goes_on(capfd):
    class Broken:
        calls = 0

        def write(self, s):
            Broken.calls += 1
            raise OSError("disk full")

        def flush(self):
            pass

    log = hotspan.live(file=Broken())
    with hotspan.span("a", arg=0):
        pass
    wait_until(lambda: log.failed is not None, what="the first write to fail")
    for i in (1, 2):  # offered after the failure: stop() hands the writer all that is left
        with hotspan.span("a", arg=i):
            pass
    log.stop()
    assert Broken.calls == 1
    assert isinstance(log.failed, OSError)
    err = capfd.readouterr().err
    assert err.count("hotspan.live: writing the live log failed") == 1
    assert hotspan.drain().num_rows == 3


def test_live_from_several_threads_names_each():
    out = io.StringIO()
    with hotspan.live(file=out):

        def work(k):
            with hotspan.span(f"job{k}"):
                pass

        threads = [threading.Thread(target=work, args=(k,), name=f"w{k}") for k in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    text = out.getvalue()
    for k in range(3):
        assert f"w{k}" in text and f"job{k}" in text


def test_live_bad_arguments():
    with pytest.raises(ValueError, match="min_ns must be >= 0"):
        hotspan.live(min_ns=-1)
    with pytest.raises(TypeError, match="min_ns must be an int"):
        hotspan.live(min_ns=1.5)
    with pytest.raises(TypeError, match="write"):
        hotspan.live(file=3)


def test_human_readable_helpers():
    assert (
        human_bytes(None) == "" and human_bytes(512) == "512 B" and human_bytes(1536) == "1.50 KiB"
    )
    assert human_bytes(3 << 30) == "3.00 GiB"
    assert human_ns(999) == "999 ns" and human_ns(1_500_000) == "1.50 ms"


def test_a_drain_while_the_live_log_closes_keeps_exited_threads_lines():
    """close() stops the feed, then its writer takes and formats what was queued, while a
    drain() elsewhere may take the spans of threads that exited. That drain freed those
    threads' infos under the writer's lines: the writer read a freed name (a segfault).
    The steps of that interleaving, in order, in a process of its own."""
    result = run_python(
        """
        import threading, hotspan
        from hotspan import _native
        hotspan.configure(drain_thread=False)  # only the calls below move records
        hotspan.drain()
        _native._live_start(0, 1 << 16)        # live()

        def work(i):
            hotspan.set_thread_name(f"gone-{i}")
            with hotspan.span(f"s{i}"):
                pass

        threads = [threading.Thread(target=work, args=(i,)) for i in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()                            # exited: their records are all there is
        _native._sweep()                        # close(): the rings' records move, lines queued
        _native._live_stop()                    # close(): the feed stops
        assert hotspan.drain().num_rows == 20   # another thread's drain() takes the spans
        rows, skipped = _native._live_take(0)   # the writer takes the queued lines
        print(sorted(r[3] for r in rows), skipped)
        assert hotspan.drain().num_rows == 0    # the infos go at a later drain
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[0] == f"{sorted(f'gone-{i}' for i in range(20))} 0"


def test_live_close_while_another_thread_drains_stress():
    """The same race through the public API: live() logs, threads record and exit, another
    thread drain()s in a loop while the log closes; every line names its thread."""
    result = run_python(
        """
        import io, re, threading, hotspan
        stop = threading.Event()

        def drains():
            while not stop.is_set():
                hotspan.drain()

        drainer = threading.Thread(target=drains)
        drainer.start()
        try:
            for rnd in range(40):
                out = io.StringIO()
                log = hotspan.live(file=out)

                def work(i):
                    hotspan.set_thread_name(f"t{rnd}-{i}")
                    for k in range(20):
                        with hotspan.span(f"s{rnd}-{i}-{k}"):
                            pass

                threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
                log.close()
                for line in out.getvalue().splitlines():
                    m = re.search(r" (t\\d+-\\d+) +s(\\d+-\\d+)-\\d+ \\[", line)
                    assert m and m.group(1)[1:] == m.group(2), line
        finally:
            stop.set()
            drainer.join()
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "ok"


@pytest.mark.slow
def test_hotspan_run_live_prints_lines_on_stderr(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "prog.py"
    script.write_text(
        "import time, hotspan\n"
        "with hotspan.span('slow_step', 'train', arg=2048):\n"
        "    time.sleep(0.01)\n"
        "with hotspan.span('quick'):\n"
        "    pass\n"
        "print('program output')\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "hotspan",
            "run",
            "--live",
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
    assert "program output" in proc.stdout
    live_lines = [
        line for line in proc.stderr.splitlines() if "slow_step" in line and "[train]" in line
    ]
    assert len(live_lines) == 1 and "arg=2048" in live_lines[0]
    assert not any("quick" in line and "[-]" in line for line in proc.stderr.splitlines())
