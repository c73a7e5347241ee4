"""The process's lifecycle around ``fork()``, in one place and one written order.

Each module that keeps per-process state hands its fork steps to ``on_fork`` under a
name from ``FORK_STEPS``; this module registers the only ``os.register_at_fork`` of
hotspan's Python and runs the steps in that order, whatever order the modules were imported
in (before a fork: the order reversed, as locks are released in the reverse of the order
they are taken; after it, in the parent and in the child: the order as written).

The order, and why:

1. ``core`` (``hotspan._api``): the C core's own fork handlers (``csrc/hs_fork.c``) have
   already run; the child's drain is the user's again.
2. ``hub`` (``hotspan.recording.hub``): the hub forgets the parent's pump thread and
   consumers, so that
3. ``recorder`` (``hotspan.recording.recorder``) may start a child's own ``HOTSPAN_OUT``
   recorder on a clean hub, then take a SIGTERM held over the fork (the step before a fork
   holds the flusher's lock and blocks SIGTERM; the parent's step gives both back).

(The parent's CUDA events are not the child's: the C core's device plug-in, ``csrc/hs_cuda.c``,
forgets them in its own step of ``csrc/hs_fork.c``.)

At exit, ``atexit`` runs a recorder's stop (registered when it starts, so before the
warning about dropped spans that ``hotspan._api`` registers at import): spans are written,
then counted. ``multiprocessing``'s children leave through ``os._exit`` after running its
finalizers, which the recorder registers (``recorder._stop_with_multiprocessing``);
SIGTERM, where the program has no handler of its own, flushes through the recorder's
SIGTERM thread, then kills the process as SIGTERM would have.
"""

from __future__ import annotations

import os
from collections.abc import Callable

__all__ = ["FORK_STEPS", "on_fork"]

#: The steps around fork, in the order their after-fork parts run (see the module's doc).
FORK_STEPS = ("core", "hub", "recorder")

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
        try:
            function()
        except Exception:  # noqa: BLE001 - one step failing must not skip the next ones
            import traceback

            traceback.print_exc()  # as os.register_at_fork reports an exception in a hook


def _before_fork() -> None:
    _run(_before, tuple(reversed(FORK_STEPS)))


def _after_fork_in_parent() -> None:
    _run(_parent, FORK_STEPS)


def _after_fork_in_child() -> None:
    _run(_child, FORK_STEPS)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
