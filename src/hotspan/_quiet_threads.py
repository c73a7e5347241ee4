"""hotspan's own Python threads start with the program's signals blocked.

The kernel hands a process-directed signal (kill, a pool's ``terminate()``, Ctrl-C) to any
thread that does not block it. Python runs the handler on the main thread only, and only
once that thread wakes: a pool worker whose SIGTERM was taken by a hotspan thread slept in
the pool's queue forever, its handler pending. Blocking from inside the new thread leaves a
window between its start and that call, so the thread is started with the signals blocked
(it inherits the mask) and the caller's mask is put back at once: a signal arriving
meanwhile stays pending and goes to the caller. The C core's threads do the same
(hs_thread_create_quiet).
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
else:
    # _signal, the C module under signal: the same functions and constants (as ints), without
    # the three IntEnum conversions ``import signal`` runs (``import hotspan`` loads this one).
    import _signal as signal

__all__ = ["ASYNC_SIGNALS", "lower_this_thread", "signals_blocked", "start_quiet"]

#: Signals a process receives from outside (kill, a pool's terminate(), a terminal).
ASYNC_SIGNALS = tuple(
    getattr(signal, name)
    for name in (
        "SIGTERM",
        "SIGINT",
        "SIGHUP",
        "SIGQUIT",
        "SIGUSR1",
        "SIGUSR2",
        "SIGALRM",
        "SIGCHLD",
        "SIGWINCH",
    )
    if hasattr(signal, name)
)


def start_quiet(thread: threading.Thread) -> threading.Thread:
    """``thread.start()``, the new thread blocking ASYNC_SIGNALS from its first instruction."""
    if not hasattr(signal, "pthread_sigmask"):
        thread.start()
        return thread
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
    return thread


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """ASYNC_SIGNALS blocked on the calling thread meanwhile: threads that a library starts in
    there (pyarrow's pools, first used from the program's thread) inherit the blocked mask and
    leave the signals to the program's threads. A signal arriving meanwhile stays pending and
    is taken when the mask is put back."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, ASYNC_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def lower_this_thread(nice: int) -> bool:
    """Raise the calling thread's nice value by ``nice`` (Linux: niceness is per thread, and
    the threads it starts later inherit it, gRPC's for one). Background work (a collector
    sink's sender) then yields its core to the program's threads when both want it, and
    takes what is idle. It cannot be raised back without privileges: only for threads whose
    work may wait. False where the platform cannot."""
    import os

    native_id = getattr(threading, "get_native_id", None)
    if (
        not nice
        or native_id is None
        or not hasattr(os, "setpriority")
        or not sys.platform.startswith("linux")
    ):
        return False
    try:
        tid = native_id()
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError:
        return False
    return True
