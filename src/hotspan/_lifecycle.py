"""The process's lifecycle (fork, exit, ``multiprocessing``'s exit of its children, SIGTERM)
in one place and one written order.

Every hook hotspan's Python has in the process's life is registered here and only here:
the one ``os.register_at_fork``, the ``atexit`` entries, ``multiprocessing``'s finalizers
and after-fork hooks, and the SIGTERM thread. Modules hand this one their parts (under a
step name, or through the functions below); the order in which those parts run is the one
written here, whatever order the modules were imported in.

**Fork.** Each module that keeps per-process state hands its fork steps to ``on_fork`` under
a name from ``FORK_STEPS``. Before a fork: SIGTERM is blocked (see ``_hold_sigterm``), then
the steps run in the order reversed (as locks are released in the reverse of the order they
are taken). After it, in the parent and in the child: the steps in the order as written,
then (in the child) SIGTERM's thread, then SIGTERM is unblocked. The steps, and why:

1. ``core`` (``hotspan._api``): the C core's own fork handlers (``csrc/hs_fork.c``) have
   already run; the child's drain is the user's again.
2. ``counters`` (``hotspan.counters``, once loaded): the child's counter queues start empty
   under a fresh lock (the parent's consumers are not the child's).
3. ``hub`` (``hotspan.recording._hub``): the hub forgets the parent's pump thread and
   consumers, so that
4. ``recorder`` (``hotspan.recording.recorder``) may start a child's own ``HOTSPAN_OUT``
   recorder on a clean hub (and hand it to ``flush_on_sigterm``; the parent's registration
   is forgotten in the child before the steps run). Before the fork this step holds the
   flusher's lock; the parent's step gives it back.

(The parent's CUDA events are not the child's: the C core's device plug-in, ``csrc/hs_cuda.c``,
forgets them in its own step of ``csrc/hs_fork.c``.)

**Exit.** ``atexit`` runs the last registered first. ``stop_at_exit`` registers the
recorders' stops when a recorder starts (again at each start, so they run before the
finalizers of libraries imported until then: pyarrow.fs's S3 finalizer must outlive a final
flush to S3); ``report_at_exit`` registers, at hotspan's import, what runs after every hook
registered later (the warning about dropped spans): spans are written, then counted.

**multiprocessing.** Its children leave through ``os._exit`` (no ``atexit``) after running
its finalizers: ``stop_with_multiprocessing`` registers a recorder's stop as one, now and
again after each fork (a child clears the finalizers it inherited).

**SIGTERM**, where the program has no handler of its own (``flush_on_sigterm``): a C handler
wakes a hotspan thread, which runs the registered stop, then kills the process as SIGTERM
would have.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading

from . import _native
from ._quiet_threads import start_quiet

# Why typing loads only for the type checker: ``import hotspan`` loads this module, and a
# fresh interpreter has not loaded typing yet (docs/performance.md: import time).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
else:
    # _signal, the C module under signal: the same functions and constants (as ints), without
    # the three IntEnum conversions ``import signal`` runs (a sixth of ``import hotspan``).
    import _signal as signal
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    class Stoppable(Protocol):
        @property
        def running(self) -> bool: ...

        def stop(self, timeout: float | None = None) -> None: ...


__all__ = [
    "FORK_STEPS",
    "die_of_sigterm_received",
    "flush_on_sigterm",
    "forget_at_exit",
    "on_fork",
    "report_at_exit",
    "stop_at_exit",
    "stop_flushing_on_sigterm",
    "stop_with_multiprocessing",
]

#: The steps around fork, in the order their after-fork parts run (see the module's doc).
FORK_STEPS = ("core", "counters", "hub", "recorder")

_before: dict[str, Callable[[], None]] = {}
_parent: dict[str, Callable[[], None]] = {}
_child: dict[str, Callable[[], None]] = {}


def on_fork(
    step: str,
    *,
    before: Callable[[], None] | None = None,
    after_in_parent: Callable[[], None] | None = None,
    after_in_child: Callable[[], None] | None = None,
) -> None:
    """Run these around every fork as step ``step`` of ``FORK_STEPS`` (a step named again
    replaces its functions: a module reloaded does not run twice)."""
    if step not in FORK_STEPS:
        raise ValueError(f"no fork step {step!r}; the steps: {', '.join(FORK_STEPS)}")
    for table, function in (
        (_before, before),
        (_parent, after_in_parent),
        (_child, after_in_child),
    ):
        if function is None:
            table.pop(step, None)
        else:
            table[step] = function


def _run(table: dict[str, Callable[[], None]], order: tuple[str, ...]) -> None:
    for step in order:
        function = table.get(step)
        if function is None:
            continue
        _call(function)


def _call(function: Callable[[], None]) -> None:
    try:
        function()
    except Exception:  # noqa: BLE001 - one step failing must not skip the next ones
        import traceback

        traceback.print_exc()  # as os.register_at_fork reports an exception in a hook


def _before_fork() -> None:
    _hold_sigterm()
    _run(_before, tuple(reversed(FORK_STEPS)))


def _after_fork_in_parent() -> None:
    try:
        _run(_parent, FORK_STEPS)
    finally:
        _release_sigterm()


def _after_fork_in_child() -> None:
    global _sigterm_stop, _in_child_fork_steps
    _sigterm_stop = None  # the parent's recorder; the recorder step registers the child's own
    _in_child_fork_steps = True
    try:
        _run(_child, FORK_STEPS)
        _call(_sigterm_in_child)
    finally:
        _in_child_fork_steps = False
        _release_sigterm()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )


# --------------------------------------------------------------------------- exit

_stops: list[Callable[[], None]] = []
_reports: list[Callable[[], None]] = []


def _run_stops() -> None:
    for stop in reversed(list(_stops)):  # the last started first, as atexit would
        _call(stop)


def _run_reports() -> None:
    for report in list(_reports):
        _call(report)


def stop_at_exit(stop: Callable[[], None]) -> None:
    """Run ``stop`` at exit, before the ``report_at_exit`` functions and before the ``atexit``
    hooks registered until now (see the module's doc)."""
    if stop not in _stops:
        _stops.append(stop)
    # Registered again: atexit runs the last registered first.
    atexit.unregister(_run_stops)
    atexit.register(_run_stops)


def forget_at_exit(stop: Callable[[], None]) -> None:
    """``stop`` no longer runs at exit (it ran already)."""
    try:
        _stops.remove(stop)
    except ValueError:
        pass


def report_at_exit(report: Callable[[], None]) -> None:
    """Run ``report`` at exit, after the stops and every ``atexit`` hook registered after
    hotspan was imported."""
    if report not in _reports:
        _reports.append(report)


atexit.register(_run_reports)


# --------------------------------------------------------------------------- multiprocessing


def stop_with_multiprocessing(owner: Stoppable) -> None:
    """Stop ``owner`` when a ``multiprocessing`` child (fork, spawn, forkserver; pool workers
    too) leaves through ``os._exit`` after running its finalizers. A child clears the
    finalizers it inherited, then runs the after-fork hooks: register the finalizer now (a
    process importing hotspan after that point) and again from the hook (a process that
    imported it before, or forked from one that did)."""
    mp = sys.modules.get("multiprocessing.util")
    if mp is None:
        return
    mp.register_after_fork(owner, _finalize_with_multiprocessing)
    _finalize_with_multiprocessing(owner)


def _finalize_with_multiprocessing(owner: Stoppable) -> None:
    import multiprocessing.util

    if owner.running:
        multiprocessing.util.Finalize(owner, owner.stop, exitpriority=100)


# --------------------------------------------------------------------------- SIGTERM

#: What SIGTERM runs before the process dies (the ``HOTSPAN_OUT`` recorder's stop), and how
#: long it may take before the process dies anyway.
_sigterm_stop: "tuple[Callable[[], None], float] | None" = None
_fork_sigmask: "set[int] | None" = None
#: A forked child is running its fork steps: SIGTERM's handler and thread wait for
#: ``_sigterm_in_child``, which sets them up once.
_in_child_fork_steps = False


def flush_on_sigterm(stop: Callable[[], None], timeout_s: float) -> None:
    """On SIGTERM, where the program has no handler of its own: run ``stop``, then die of
    SIGTERM as without hotspan (after ``timeout_s`` + 2 s at most). The handler is C and only
    wakes a hotspan thread, which runs ``stop`` and kills the process, whatever the main
    thread is blocked in: a Python handler may never run in a pool worker asleep in its
    queue's lock (hs_signals.h says why), and the pool's terminate() then waits for that
    worker forever. Called again (a child's recorder), it replaces ``stop``."""
    global _sigterm_stop
    _sigterm_stop = (stop, timeout_s)
    if _in_child_fork_steps:
        # Not now: ``_sigterm_in_child`` gives the child its own handler's pipe after the
        # steps, and a SIGTERM written to a pipe installed here in between was lost (a pool
        # terminated as its worker started: the worker slept in its queue forever).
        return
    if _native._sigterm_installed():
        return  # the thread is running (or, in a forked child, starts after the fork steps)
    if not _native._sigterm_install():
        _sigterm_stop = None
        return  # the program has a handler of its own
    _start_sigterm_thread()


def stop_flushing_on_sigterm() -> None:
    """SIGTERM has its default action again (recording stopped)."""
    global _sigterm_stop
    _sigterm_stop = None
    _native._sigterm_uninstall()


def die_of_sigterm_received() -> None:
    """Called by a thread that has just stopped the recorder ``flush_on_sigterm`` runs: a
    SIGTERM that arrived meanwhile (the SIGTERM thread waits for the stop) kills the process
    now, before this thread can go on and end the program normally."""
    if _native._sigterm_received():
        _native._sigterm_die()


def _start_sigterm_thread() -> None:
    start_quiet(threading.Thread(target=_sigterm_thread, name="hotspan-sigterm", daemon=True))


def _sigterm_thread() -> None:
    if not _native._sigterm_wait():
        return  # uninstalled: recording stopped
    registered = _sigterm_stop
    # Should the stop never end (a wedged destination), the process must still die: a
    # pool's terminate() sends one SIGTERM, then waits. A second SIGTERM kills at once (C).
    watchdog = threading.Timer(
        (registered[1] if registered is not None else 0.0) + 2.0, _native._sigterm_die
    )
    watchdog.daemon = True
    watchdog.start()
    # Nothing new starts once the process is told to end: the spans open now finish (their
    # children not begun are left out) and the final flush finds whole trees, not spans whose
    # parents close after it. The main thread runs on meanwhile, as it did not under a Python
    # handler (which held it): what it starts after the signal is not recorded.
    _native.disable()
    try:
        if registered is not None:
            registered[0]()
    finally:
        _native._sigterm_die()


def _sigterm_in_child() -> None:
    """The child inherits the C handler (with the parent's pipe) but not the thread that acts
    on it: where the child records (the recorder step registered its stop), give it a pipe of
    its own, or the handler where the parent had none, and start the thread, once; where it
    does not, give SIGTERM back its default action (nothing would act on it: the child could
    never be terminated). A SIGTERM before this is blocked (the parent's handler: see
    ``_hold_sigterm``) or takes its default action (none yet)."""
    global _sigterm_stop
    if _native._sigterm_installed():
        _native._sigterm_after_fork_child()
        if _sigterm_stop is None:
            _native._sigterm_uninstall()
            return
    elif _sigterm_stop is None:
        return
    elif not _native._sigterm_install():
        _sigterm_stop = None
        return  # the program has a handler of its own
    _start_sigterm_thread()


def _hold_sigterm() -> None:
    """Block SIGTERM in the forking thread while our handler is installed; the child inherits
    the mask. CPython forgets, in the child, a signal that arrives before it has reset its
    signal state after fork: a pool terminated while a worker was still starting sent a
    SIGTERM that vanished, and with a handler installed (no default action to kill it) the
    worker slept in the pool's queue forever. Blocked, the signal stays pending instead, and
    is delivered when the mask is restored (in the child, after that reset)."""
    global _fork_sigmask
    if hasattr(signal, "pthread_sigmask") and _native._sigterm_installed():
        _fork_sigmask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _release_sigterm() -> None:
    global _fork_sigmask
    mask, _fork_sigmask = _fork_sigmask, None
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
