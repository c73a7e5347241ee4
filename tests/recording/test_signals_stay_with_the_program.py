"""Every thread hotspan starts blocks the program's signals, so a process-directed signal
(a pool's terminate()) reaches a thread that runs the handler: one taken by a hotspan
thread left a pool worker asleep in the queue, its handler pending, forever."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import hotspan
from _util import run_python
from hotspan._quiet_threads import start_quiet


def test_start_quiet_thread_blocks_signals_from_its_first_instruction():
    seen = {}

    def body():
        seen["mask"] = signal.pthread_sigmask(signal.SIG_BLOCK, [])

    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    thread = start_quiet(threading.Thread(target=body))
    thread.join()
    assert signal.SIGTERM in seen["mask"] and signal.SIGINT in seen["mask"]
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before  # the caller's mask is back


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX threads only")
def test_no_thread_but_the_programs_takes_sigterm(tmp_path):
    # The main thread (and the program's own) may take SIGTERM; every other thread of the
    # process (hotspan's native drain thread, its flusher, hub, live log, event handler,
    # pyarrow's threads started from them) blocks it.
    proc = run_python(f"""
        import os, threading, time, hotspan
        rec = hotspan.record({str(tmp_path / "run")!r}, flush_interval=0.05).start()
        delivered, events = [], []
        sub = hotspan.subscribe(lambda batch: delivered.append(batch.num_rows))
        handle = hotspan.on_event(events.append)
        log = hotspan.live(min_ns=10**12)
        for _ in range(1000):
            with hotspan.span("x"):
                pass
        # Every thread has done its work (and started pyarrow's): the flusher wrote the
        # spans, the subscriber's thread had them, the event thread heard of the flush.
        deadline = time.monotonic() + 60
        while rec.spans < 1000 or sum(delivered) < 1000 or not events:
            assert time.monotonic() < deadline, (rec.spans, sum(delivered), events)
            time.sleep(0.01)
        main = threading.get_native_id()
        open_to_sigterm = []
        for tid in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{{tid}}/status") as f:
                fields = dict(line.split(":", 1) for line in f if ":" in line)
            blocked = int(fields["SigBlk"].strip(), 16)
            if int(tid) != main and not blocked & (1 << (15 - 1)):
                open_to_sigterm.append((tid, fields["Name"].strip()))
        print(len(os.listdir("/proc/self/task")), open_to_sigterm)
        log.stop(); handle.close(); sub.close(); rec.stop()
    """)
    assert proc.returncode == 0, proc.stderr
    threads, open_to_sigterm = proc.stdout.split(" ", 1)
    assert int(threads) >= 5
    assert open_to_sigterm.strip() == "[]"


SIGTERM_WHILE_BLOCKED_IN_C = """
import ctypes, os, sys, hotspan
for i in range(50):
    with hotspan.span("work", "w", arg=i):
        pass
# A main thread that never returns to Python until its lock is free, as a pool worker asleep
# in its queue's lock when the SIGTERM lands just before the futex wait: a relocked normal
# pthread mutex (glibc's initializer is all zero bytes) waits through every signal.
mutex = ctypes.create_string_buffer(64)
libc = ctypes.CDLL(None)
libc.pthread_mutex_lock(mutex)
print("blocked", flush=True)
libc.pthread_mutex_lock(mutex)
"""


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="POSIX signals only")
@pytest.mark.skipif(
    "libtsan" in os.environ.get("LD_PRELOAD", ""),
    reason="under TSan a signal's handler waits until the thread it interrupted leaves TSan's "
    "pthread_mutex_lock interceptor, which this program's main thread never does",
)
def test_sigterm_flushes_and_kills_a_process_whose_main_thread_never_returns_to_python(tmp_path):
    # With HOTSPAN_OUT, SIGTERM means: flush, then die of SIGTERM. A Python-level handler
    # runs only when the main thread next executes bytecode, which this one never does:
    # the process hung forever, as a pool worker did in about one terminate() in 20-40.
    import subprocess
    import sys
    import time

    from _procs import env

    out = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_WHILE_BLOCKED_IN_C],
        env=env(HOTSPAN_OUT=str(out) + "/"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "blocked"
        time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail("SIGTERM did not end a process whose main thread was blocked in C: hung")
    assert rc == -signal.SIGTERM, proc.stderr.read()
    table = hotspan.load(out)
    assert sorted(table.column("arg").to_pylist()) == list(range(50))  # flushed before dying
