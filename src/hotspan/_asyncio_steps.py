"""The moments an asyncio task resumes and suspends, for self and wait times.

A span of an asyncio task is its code's own time only while its task runs; while the task
is suspended (awaiting) that time is ``wait_ns`` (DESIGN.md "Self and wait"). The recorder
switches span stacks at span events only, so it cannot see a task suspend inside a span.
Every step of a task (and every other callback) runs through
:meth:`asyncio.events.Handle._run`: :func:`install` wraps it, once, with two calls into the
core (``_step_begin(context)``, ``_step_end()``, csrc/hs_tasks.c) that note, per thread, the
task running and, at its end, the span it left suspended. The core installs it when a
task's first span is seen (if asyncio is loaded); sync code and spans outside asyncio pay
nothing. An event loop whose callbacks bypass ``Handle._run`` (uvloop) leaves the task
spans' self time by the rule for sync code and their wait at 0.
"""

from __future__ import annotations

from typing import Any


def install() -> None:
    """Wrap ``asyncio.events.Handle._run`` (idempotent)."""
    from asyncio import events

    from . import _native

    handle = events.Handle
    original = handle._run
    if getattr(original, "__hotspan_steps__", False):
        return
    begin, end = _native._step_begin, _native._step_end

    def _run(self: Any) -> None:
        begin(self._context)
        try:
            original(self)
        finally:
            end()

    _run.__hotspan_steps__ = True  # type: ignore[attr-defined]
    _run.__wrapped__ = original  # type: ignore[attr-defined]
    _run.__doc__ = original.__doc__
    handle._run = _run  # type: ignore[method-assign]
    # Installed from inside a task's step, whose end the hook cannot see: a callback queued
    # now runs as soon as that step ends (the loop does not wait in its selector while one
    # is ready), and its begin is when the core notes that task suspended.
    try:
        events.get_running_loop().call_soon(_nothing)
    except RuntimeError:  # no loop running on this thread
        pass


def _nothing() -> None:
    """The callback that marks the end of the step the hook was installed in."""
