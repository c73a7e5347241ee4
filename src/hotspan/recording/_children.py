"""The children of a recording process.

**Into the run.** A process started while ``record()`` runs records to the same
destination (``recorder.follow``), whichever way it was started: forked (the at-fork hook),
spawned or started by ``subprocess`` with the environment inherited (``import hotspan``
reads ``HOTSPAN_RECORD_CHILDREN``), or by ``multiprocessing``'s forkserver, whose children
have the server's environment, not their parent's: for them (and spawned ones) the process
object carries the destinations, read as ``multiprocessing`` unpickles it in the child
(``offer_to_multiprocessing``).

**Named when lost.** The ``multiprocessing`` children a recording process starts, so that
its last part can name those that died of a signal before writing any part of their own
(killed before their metadata part, i.e. before ``import hotspan`` ended in them): nothing
they recorded could be kept, and the run says who they were (``hotspan.unflushed`` in the
loaded metadata)."""

from __future__ import annotations

import contextlib
import sys

TYPE_CHECKING = False  # typing loads for the type checker only (import hotspan stays light)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

__all__ = [
    "forget_children",
    "in_forkserver",
    "offer_to_multiprocessing",
    "track_children",
    "unflushed_children",
]

#: pid -> multiprocessing Process, for the children started while recording to a directory.
_started: dict[int, Any] = {}
MAX_TRACKED = 10_000


class _TrackedChildren(set[object]):
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


# --------------------------------------------------------------------------- into the run

#: The key of ``multiprocessing``'s process config (copied into every Process made here,
#: pickled with it for a spawn or forkserver child) under which the destinations travel.
MP_CONFIG_KEY = "hotspan.record"


def in_forkserver() -> bool:
    """Whether this is ``multiprocessing``'s fork server or a child it forked: their
    environment is the server's, from when it started (maybe before the recording, or
    during one that has ended), so only the process object tells them where to record."""
    return any(
        "multiprocessing.forkserver import main" in arg for arg in getattr(sys, "orig_argv", ())
    )


class _Destinations:
    """Pickled as the destinations of the recordings running in this process at the moment
    (``multiprocessing`` pickles the process object as it starts a child); unpickled in the
    child as ``recorder.follow``: it records there. Nothing when none runs."""

    def __reduce__(self) -> tuple[Any, ...]:
        recorder = sys.modules.get(__package__ + ".recorder")  # not loaded: nothing records
        specs = recorder.children_specs() if recorder is not None else []
        return (recorder.follow, (specs,)) if recorder is not None and specs else (bool, ())


_OFFER = _Destinations()


def offer_to_multiprocessing() -> None:
    """Make the processes ``multiprocessing`` makes from now on carry this process's
    recordings (their config is a copy of the current process's, taken when each is made),
    and its run id: at ``import hotspan`` (a Process made before a recording and started
    during it is recorded too), and at a recording's start. Where ``multiprocessing`` is
    not loaded yet, both happen as it loads (``_WhenMultiprocessingLoads``): hotspan never
    imports it itself (~7 ms, and memory a process near its limit may not have)."""
    process_module = sys.modules.get("multiprocessing.process")
    if process_module is None:
        if not any(isinstance(finder, _WhenMultiprocessingLoads) for finder in sys.meta_path):
            sys.meta_path.insert(0, _WhenMultiprocessingLoads())
        return
    _multiprocessing_loaded(process_module)


def _multiprocessing_loaded(process_module: Any) -> None:
    """A program that uses ``multiprocessing`` is one run with its children: the run id is
    drawn now (``_run.run_id``, into the environment), so that its children, forked,
    spawned or forked by the fork server, inherit it rather than each draw its own (ranks
    started by a Pool that each ``record()`` are one run, not one run each)."""
    from .._run import run_id

    run_id()
    process: Any = process_module.current_process()
    config = process._config  # private, stable since 3.4
    if config.get(MP_CONFIG_KEY) is not _OFFER:
        config[MP_CONFIG_KEY] = _OFFER


class _WhenMultiprocessingLoads:
    """A meta path finder for one module, ``multiprocessing.process``: it finds it as the
    other finders do, and calls ``_multiprocessing_loaded`` once the module has run. It
    leaves ``sys.meta_path`` on its first call."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname != "multiprocessing.process":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec(fullname)
        loader: Any = spec.loader if spec is not None else None
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run_module = loader.exec_module

        def exec_module(module: Any) -> None:  # this module's loader alone (one per spec)
            run_module(module)
            with contextlib.suppress(Exception):  # never break the program's import
                _multiprocessing_loaded(module)

        loader.exec_module = exec_module
        return spec
