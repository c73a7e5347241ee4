"""Spans the recorder drops, said while the program runs.

The native drain thread notices, at its first pass after it (every few milliseconds), that
the core dropped spans (the memory cap reached: nothing drained them in time), and queues
one call of :func:`report` for the interpreter (``Py_AddPendingCall``: it never takes the
GIL itself). ``report`` emits a :class:`hotspan.events.SpansDropped` with consumer
``"core"``, the thread and the count since the last report of that thread, which
``hotspan.on_event`` handlers receive and the ``hotspan`` logger logs at WARNING, at most
once a second per thread however many spans drop. The line printed at exit stays.
"""
from __future__ import annotations

import math
import os
import time

from . import _native
from .events import SpansDropped, emit

#: At most one report a thread in this many seconds: a program dropping spans by the
#: million is told once a second, not once a span.
REPORT_INTERVAL_S = 1.0

_reported: dict[int, int] = {}  # thread id -> spans of it reported dropped so far
_last_report: dict[int, float] = {}  # thread id -> time.monotonic() of its last report
_pid = os.getpid()


def report() -> None:
    """Emit the drops not yet reported (called from the interpreter's main thread)."""
    global _pid
    if os.getpid() != _pid:  # a forked child counts its own drops from zero
        _pid = os.getpid()
        _reported.clear()
        _last_report.clear()
    detail = _native.dropped(detail=True)
    now = time.monotonic()
    waiting = 0  # dropped, not reported yet: the thread was reported less than a second ago
    for tid, row in detail["threads"].items():
        count = row["memory_cap"] + row["other"]
        done = _reported.get(tid, 0)
        if count <= done:
            continue
        if now - _last_report.get(tid, -math.inf) < REPORT_INTERVAL_S:
            waiting += count - done
            continue
        _reported[tid] = count
        _last_report[tid] = now
        emit(SpansDropped("core", row["name"], count - done, thread_id=int(tid)))
    # The drain thread signals again (every 200 ms) while the total is above this.
    _native._drops_reported(max(0, detail["total"] - waiting))
