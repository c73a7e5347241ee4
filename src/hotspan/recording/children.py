"""The ``multiprocessing`` children a recording process starts, so that its last part can
name those that died of a signal before writing any part of their own (killed before their
metadata part, i.e. before ``import hotspan`` ended in them): nothing they recorded could be
kept, and the run says who they were (``hotspan.unflushed`` in the loaded metadata)."""

from __future__ import annotations

import sys
from pathlib import Path

TYPE_CHECKING = False  # typing loads for the type checker only (import hotspan stays light)
if TYPE_CHECKING:
    from typing import Any

__all__ = ["forget_children", "track_children", "unflushed_children"]

#: pid -> multiprocessing Process, for the children started while recording to a directory.
_started: dict[int, Any] = {}
MAX_TRACKED = 10_000


class _TrackedChildren(set):
    """``multiprocessing.process._children`` (the set every ``Process.start()`` adds to), noting
    each child as it is added: multiprocessing offers no hook of its own for it."""

    def add(self, process: Any) -> None:
        super().add(process)
        pid = getattr(process, "pid", None)
        if pid is not None and len(_started) < MAX_TRACKED:
            _started[pid] = process


def track_children() -> None:
    """Note multiprocessing's children from now on (once multiprocessing is loaded: called at
    a recording's start, at each flush and before each fork)."""
    mp_process: Any = sys.modules.get("multiprocessing.process")  # its _children is private
    if mp_process is not None and not isinstance(
        getattr(mp_process, "_children", None), _TrackedChildren
    ):
        mp_process._children = _TrackedChildren(getattr(mp_process, "_children", ()))


def forget_children() -> None:
    """In a forked child: its parent's children are not its own to name."""
    _started.clear()


def unflushed_children(root: Path) -> list[dict[str, Any]]:
    """The children that died of a signal without a part in the dataset ``root``."""
    unflushed = []
    for pid, process in sorted(_started.items()):
        try:
            code = process.exitcode
        except ValueError:  # closed: its status is gone with it
            continue
        if code is None or code >= 0:
            continue  # alive (it may still write), or it exited by itself: it recorded nothing
        if next(root.glob(f"rank=*/part-{pid}-*.parquet"), None) is None:
            unflushed.append({"pid": pid, "name": getattr(process, "name", ""), "exitcode": code})
    return unflushed
