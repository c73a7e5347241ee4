"""The Python side of the public API: policy around the C core in ``_native``."""
from __future__ import annotations

import functools
import inspect
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, TypeVar, overload

from . import _native

if TYPE_CHECKING:
    import pyarrow as pa

F = TypeVar("F", bound=Callable[..., Any])

#: Environment variables read for the rank, in order (launchers set one of these).
RANK_ENV_VARS = ("HOTSPAN_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")

_configured_rank: int | None = None
#: The lock of every pass of the core's drain (drain(), recording/hub.py). Re-entrant: a
#: SIGTERM handler that flushes (record()) may run while this thread drains.
drain_lock = threading.RLock()
# While a streaming consumer (record(), subscribe()) exists, recording/hub.py owns the
# native drain and drain() reads its own cursor there; None otherwise (one global lookup).
_hub: Any = None


def set_drain_hook(hub: Any) -> None:
    """Route ``drain()`` to ``hub.drain()`` (``None``: back to the core). recording/hub.py
    sets it while it owns the core's drain."""
    global _hub
    _hub = hub


def drain_hook() -> Any:
    """What ``drain()`` is routed to now (``None``: the core)."""
    return _hub


def _version() -> str:
    from . import __version__

    return __version__


def rank() -> int:
    """This process's rank: ``configure(rank=...)``, else the launcher's environment, else 0."""
    if _configured_rank is not None:
        return _configured_rank
    for var in RANK_ENV_VARS:
        value = os.environ.get(var, "").strip()
        if value:
            try:
                return int(value)
            except ValueError:
                continue
    return 0


def configure(
    *,
    rank: int | None = None,
    capacity: int | None = None,
    memory_cap: int | None = None,
    drain_interval: float | None = None,
    drain_thread: bool | None = None,
) -> None:
    """Set recording options; each left as ``None`` keeps its current value.

    rank: this process's rank in a multi-process run (default: from the environment, else 0).
    capacity: records each thread's ring holds before the newest are dropped (default 65536);
        every thread switches to a ring of this size at its next span.
    memory_cap: bytes of drained-but-not-collected spans kept before the newest are dropped
        (default 64 MiB).
    drain_interval: seconds between passes of the native drain thread (default: adaptive,
        2-20 ms, and woken early by any ring past half full).
    """
    global _configured_rank
    for label, value in (("rank", rank), ("capacity", capacity), ("memory_cap", memory_cap)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"configure(): {label} must be an int, not {type(value).__name__}")
    if rank is not None and rank < 0:
        raise ValueError(f"configure(): rank must be >= 0, not {rank}")
    if capacity is not None and capacity < 2:
        raise ValueError(f"configure(): capacity must be at least 2 records, not {capacity}")
    if memory_cap is not None and memory_cap < 1:
        raise ValueError(f"configure(): memory_cap must be a positive number of bytes, not {memory_cap}")
    interval_us = -1
    if drain_interval is not None:
        if isinstance(drain_interval, bool) or not isinstance(drain_interval, (int, float)):
            raise TypeError(f"configure(): drain_interval must be a number of seconds, not {type(drain_interval).__name__}")
        if not 0 < drain_interval <= 60:
            raise ValueError(f"configure(): drain_interval must be in (0, 60] seconds, not {drain_interval}")
        interval_us = max(1, int(drain_interval * 1e6))
    if rank is not None:
        _configured_rank = rank
    if drain_thread is not None and not isinstance(drain_thread, bool):
        raise TypeError(f"configure(): drain_thread must be a bool, not {type(drain_thread).__name__}")
    _native._configure(
        capacity if capacity is not None else -1,
        memory_cap if memory_cap is not None else -1,
        interval_us,
        -1 if drain_thread is None else int(drain_thread),
    )


def drain() -> "pa.Table":
    """Every span completed since the last ``drain()``, from all threads (exited ones too).

    ``record()`` and subscribers read cursors of their own: they never take spans from it.
    """
    # pyarrow and numpy load here, on the first drain: a program that only records never
    # pays for them (import hotspan loads the recorder alone).
    hub = _hub
    if hub is not None:
        return hub.drain()
    with drain_lock:
        hub = _hub  # attached while this thread waited for the lock
        if hub is not None:
            return hub.drain()
        return core_table()


def core_table() -> "pa.Table":
    """One pass of the core's drain as a span table (the caller holds ``drain_lock``)."""
    from ._table import metadata, table_from_raw

    r = rank()
    raw = _native._drain(r)
    clock = _native._clock_info()
    meta = metadata(rank=r, pid=os.getpid(), clock=clock, all_threads=raw["all_threads"], version=_version())
    return table_from_raw(raw, meta=meta)


def _wrap_async(span_obj: Any, func: Callable[..., Any]) -> Callable[..., Any]:
    """A coroutine function's span covers the awaited body, not the coroutine's creation."""

    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with span_obj:
            return await func(*args, **kwargs)

    return wrapper


@overload
def traced(fn: F, /) -> F: ...
@overload
def traced(
    fn: str | None = None, /, category: str | None = None, *, name: str | None = None, arg: int | None = None
) -> Callable[[F], F]: ...


def traced(fn: Any = None, /, category: str | None = None, *, name: str | None = None, arg: int | None = None) -> Any:
    """Record every call of a function as a span.

    ``@traced`` names the span after the function's ``__qualname__``; ``@traced("name")``,
    ``@traced("name", "category")`` or ``@traced(name=..., category=..., arg=...)`` choose.
    Works on functions, methods and coroutine functions (the span covers the awaited body).
    """
    if fn is None or isinstance(fn, str):
        chosen = fn if isinstance(fn, str) else name

        def decorate(func: F) -> F:
            return _decorate(func, chosen, category, arg)

        return decorate
    if not callable(fn):
        raise TypeError(f"traced(): expected a function or a name, not {type(fn).__name__}")
    return _decorate(fn, name, category, arg)


def _decorate(func: Any, name: str | None, category: str | None, arg: int | None) -> Any:
    if not callable(func):
        raise TypeError(f"traced(): expected a callable, not {type(func).__name__}")
    if name is None:
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    if inspect.iscoroutinefunction(func):
        return _wrap_async(_native.span(name, category, arg=arg), func)
    wrapper = _native._wrap(func, name, category, arg=arg)
    functools.update_wrapper(wrapper, func)
    return wrapper


def _decorate_with(span_obj: Any, func: Any) -> Any:
    """``@hotspan.span(...)`` on a function (called by the C type)."""
    return _decorate(func, span_obj.name, span_obj.category, span_obj.arg)


def _thread_name() -> str:
    return threading.current_thread().name


def _after_fork_child() -> None:
    global drain_lock, _hub
    _native._after_fork_child()
    # A thread of the parent may have held the lock at the fork; the child has none of the
    # parent's streaming consumers (recording/hub.py resets its own state after this).
    drain_lock = threading.RLock()
    _hub = None


_native._set_hooks(_thread_name, _decorate_with)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_child)
