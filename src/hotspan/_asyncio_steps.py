"""The moments an asyncio task resumes and suspends, for self and wait times.

A span of an asyncio task is its code's own time only while its task runs; while the task
is suspended (awaiting) that time is ``wait_ns`` (DESIGN.md "Self and wait"). The recorder
switches span stacks at span events only, so it cannot see a task suspend inside a span.
Every step of a task (and every other callback) runs through
:meth:`asyncio.events.Handle._run`: :func:`install` wraps it, once, with two calls into the
core (``_native._StepRunner``, csrc/hs_tasks.c) that note, per thread, the
task running and, at its end, the span it left suspended. The core installs it when a
thread records its first span or a task its first (if asyncio is loaded); sync code and
spans outside asyncio pay nothing. An event loop whose callbacks bypass ``Handle._run`` (uvloop) leaves the task
spans' self time by the rule for sync code and their wait at 0.
"""

from __future__ import annotations


def install() -> None:
    """Put the core's step runner in place of ``asyncio.events.Handle._run`` (idempotent)."""
    from asyncio import events

    from . import _native

    handle = events.Handle
    original = handle.__dict__["_run"]
    if isinstance(original, _native._StepRunner):
        return
    # a method descriptor in C: the loop's `handle._run()` calls it with the handle, and it
    # runs the original between the two notes (no Python frame of its own)
    handle._run = _native._StepRunner(original)  # type: ignore[method-assign,assignment]
    # Installed from inside a task's step, whose end the hook cannot see: a callback queued
    # now runs as soon as that step ends (the loop does not wait in its selector while one
    # is ready), and its begin is when the core notes that task suspended.
    try:
        events.get_running_loop().call_soon(_nothing)
    except RuntimeError:  # no loop running on this thread
        pass


def _nothing() -> None:
    """The callback that marks the end of the step the hook was installed in."""
