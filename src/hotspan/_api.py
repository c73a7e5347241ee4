"""The Python side of the public API: policy around the C core in ``_native``."""

from __future__ import annotations

import _thread
import os

from . import _native
from . import _lifecycle as lifecycle
from ._version import __version__

# typing, inspect, functools and threading are imported only where needed (type
# checkers, the decorators, a thread's name): together they were most of what
# ``import hotspan`` cost (~30 ms on a loaded 2-core machine), paid by every rank that
# only records. _thread (built in) gives the lock.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, TypeVar, overload

    import pyarrow as pa

    F = TypeVar("F", bound=Callable[..., Any])

#: Environment variables read for the rank, in order (launchers set one of these).
RANK_ENV_VARS = ("HOTSPAN_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")

#: The largest rank: the schema's rank column is int32.
RANK_MAX = (1 << 31) - 1
#: The largest block: 2**24 records (512 MiB at 32 bytes a record). A block that cannot be
#: allocated would drop every span, so larger is refused, not attempted.
CAPACITY_MAX = 1 << 24

_configured_rank: int | None = None
#: The lock of every pass of the core's drain (drain(), recording/_hub.py). Re-entrant: a
#: SIGTERM handler that flushes (record()) may run while this thread drains.
drain_lock = _thread.RLock()
# While a streaming consumer (record(), subscribe()) exists, recording/_hub.py owns the
# native drain and drain() reads its own cursor there; None otherwise (one global lookup).
_hub: Any = None


def set_drain_hook(hub: Any) -> None:
    """Route ``drain()`` to ``hub.drain()`` (``None``: back to the core). recording/_hub.py
    sets it while it owns the core's drain."""
    global _hub
    _hub = hub


def drain_hook() -> Any:
    """What ``drain()`` is routed to now (``None``: the core)."""
    return _hub


#: The flight file's name when none is given (configure(flight=True), HOTSPAN_FLIGHT=1).
FLIGHT_DEFAULT_NAME = "hotspan-{pid}.flight"


def flight_dir() -> str:
    """Where a flight file given as a bare name goes: ``/dev/shm`` (memory, as the blocks
    were) where it exists, else the temporary directory."""
    if os.path.isdir("/dev/shm"):
        return "/dev/shm"
    return os.environ.get("TMPDIR") or "/tmp"


def flight_path(spec: str | None, pid: int | None = None) -> str:
    """The flight file's path for ``configure(flight=spec)``: ``{pid}`` replaced, a bare
    name under ``flight_dir()``."""
    name = spec or FLIGHT_DEFAULT_NAME
    name = name.replace("{pid}", str(os.getpid() if pid is None else pid))
    if os.sep not in name:
        name = os.path.join(flight_dir(), name)
    return name


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


#: ``rank()`` under a second name: inside ``configure()`` its parameter ``rank`` hides it.
_process_rank = rank


def configure(
    *,
    rank: int | None = None,
    capacity: int | None = None,
    memory_cap: int | None = None,
    drain_interval: float | None = None,
    drain_thread: bool | None = None,
    sync: Callable[[], Any] | None | object = ...,
    flight: str | os.PathLike[str] | bool | None = None,
    nvtx: bool | None = None,
    counters: float | None = None,
) -> None:
    """Set recording options; each left as ``None`` keeps its current value.

    rank: this process's rank in a multi-process run (default: from the environment, else 0).
    capacity: records per block (default 1024, 32 KiB). A thread writes into its current
        block and moves on to a fresh one when it is full; blocks taken from then on have
        this size.
    memory_cap: bytes of record blocks the recorder may hold, every block counted (the
        threads' current ones, those waiting for drain(), the pooled ones); when a thread
        needs a block and the cap is reached, its newest spans are dropped, counted
        (``dropped(detail=True)``), until drain() frees blocks (default 64 MiB).
    drain_interval: seconds between passes of the native drain thread (default: adaptive,
        2-20 ms, and woken early when a thread fills a block).
    sync: the function spans opened with ``sync=True`` call right before they end (e.g.
        ``hotspan.sync.mlx``); ``None`` unsets it (those spans then sync nothing). Left out:
        unchanged.
    flight: keep the blocks, each thread's open spans and the string table in a file
        mapped ``MAP_SHARED`` (the flight file), so that ``hotspan recover`` rebuilds them
        after a crash and ``hotspan top`` reads the open spans from outside. A ``{pid}`` in
        the path is replaced; a bare name goes under ``/dev/shm`` (where it exists, else
        the temporary directory); ``True``: ``hotspan-{pid}.flight`` there. Once a process;
        call it before the first span (threads that recorded before keep their stacks out
        of the file). Also ``HOTSPAN_FLIGHT=PATH`` in the environment.
    nvtx: ``True``: every span is also an NVTX push/pop range (domain ``hotspan``, message:
        the span's name, category: its category path, payload: its arg) and every instant
        an NVTX mark, so Nsight Systems (``nsys profile``) shows hotspan's spans beside the
        kernels; ``False`` stops it (spans open then still pop their ranges). Without a
        tool attached the NVTX calls do nothing but return. ``HOTSPAN_NVTX=1`` in the
        environment turns it on at import. Off (the default), a span pays one predictable
        branch for it.
    counters: seconds between samples of the process's resident set size (counter
        ``rss``, bytes) and, once device spans have run, each of their CUDA devices' memory
        in use (``cuda:<N> memory``), taken by the native drain thread and returned by
        :func:`hotspan.drain_counters` beside the values :func:`hotspan.counter` records;
        ``0`` turns sampling off (the default: a sample costs a read of ``/proc/self/statm``
        on the drain thread, nothing on recording threads).
    """
    global _configured_rank
    for label, value in (("rank", rank), ("capacity", capacity), ("memory_cap", memory_cap)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"configure(): {label} must be an int, not {type(value).__name__}")
    # Out of range is refused, naming the range: a rank past int32 would wrap in the rank
    # column, and a block too large to allocate would lose every span.
    ranks, capacities = f"0..{RANK_MAX}", f"2..{CAPACITY_MAX:,} records"
    if rank is not None and rank < 0:
        raise ValueError(f"configure(): rank must be >= 0 ({ranks}), not {rank}")
    if rank is not None and rank > RANK_MAX:
        raise ValueError(
            f"configure(): rank must be at most {RANK_MAX} ({ranks}: the rank column is int32), "
            f"not {rank}"
        )
    if capacity is not None and capacity < 2:
        raise ValueError(
            f"configure(): capacity must be at least 2 records ({capacities}), not {capacity}"
        )
    if capacity is not None and capacity > CAPACITY_MAX:
        raise ValueError(
            f"configure(): capacity must be at most {CAPACITY_MAX:,} records ({capacities}; 512 MiB "
            f"a block), not {capacity:,}"
        )
    if memory_cap is not None and memory_cap < 1:
        raise ValueError(
            f"configure(): memory_cap must be a positive number of bytes, not {memory_cap}"
        )
    interval_us = -1
    if drain_interval is not None:
        if isinstance(drain_interval, bool) or not isinstance(drain_interval, (int, float)):
            raise TypeError(
                f"configure(): drain_interval must be a number of seconds, not {type(drain_interval).__name__}"
            )
        if not 0 < drain_interval <= 60:
            raise ValueError(
                f"configure(): drain_interval must be in (0, 60] seconds, not {drain_interval}"
            )
        interval_us = max(1, int(drain_interval * 1e6))
    if sync is not ...:
        if sync is not None and not callable(sync):
            raise TypeError(
                f"configure(): sync must be a callable or None, not {type(sync).__name__}"
            )
    if rank is not None:
        _configured_rank = rank
    if drain_thread is not None and not isinstance(drain_thread, bool):
        raise TypeError(
            f"configure(): drain_thread must be a bool, not {type(drain_thread).__name__}"
        )
    if (
        flight is not None
        and flight is not False
        and flight is not True
        and not isinstance(flight, (str, os.PathLike))
    ):
        raise TypeError(f"configure(): flight must be a path or True, not {type(flight).__name__}")
    if nvtx is not None and not isinstance(nvtx, bool):
        raise TypeError(f"configure(): nvtx must be a bool, not {type(nvtx).__name__}")
    if counters is not None:
        if isinstance(counters, bool) or not isinstance(counters, (int, float)):
            raise TypeError(
                f"configure(): counters must be a number of seconds, not {type(counters).__name__}"
            )
        if not (counters == 0 or 0.001 <= counters <= 3600):
            raise ValueError(
                f"configure(): counters must be 0 (off) or in [0.001, 3600] seconds, not {counters}"
            )
    if sync is not ...:
        _native._set_default_sync(sync)
    if nvtx is not None:
        _native._set_nvtx(nvtx)
    _native._configure(
        capacity if capacity is not None else -1,
        memory_cap if memory_cap is not None else -1,
        interval_us,
        -1 if drain_thread is None else int(drain_thread),
    )
    if counters is not None:
        _native._counters_sampling(int(counters * 1e9), "rss")
    # After the sizes: the file holds memory_cap of blocks of `capacity` records.
    if flight is not None and flight is not False:
        _native._flight_open(
            flight_path(None if flight is True else os.fspath(flight)), _process_rank(), __version__
        )
    elif rank is not None:
        _native._flight_set_rank(rank)


def drain(*, wait_device: bool = False) -> "pa.Table":
    """Every span completed since the last ``drain()``, from all threads (exited ones too).

    ``record()`` and subscribers read cursors of their own: they never take spans from it.

    Device spans (``span(..., device="cuda")``) add a device row for each event pair that
    has completed on the GPU; the others wait for a later drain. ``wait_device=True``
    first waits (once per device) for the pairs already closed, so all of them are in.
    """
    if wait_device:
        wait_for_devices()
    hub = _hub
    if hub is not None:
        return hub.drain()
    with drain_lock:
        hub = _hub  # attached while this thread waited for the lock
        if hub is not None:
            return hub.drain()
        table = core_table()
    _say_raw_shed()
    return table


_raw_shed_said = 0


def _say_raw_shed() -> None:
    """Spans a raw log has (``record(dir)``: formats/_rawlog.py) that the core did not keep
    for ``drain()`` past a quarter of its memory cap (the oldest): said as this cursor's loss,
    as a hub reader's that fell behind (``SpansDropped``, consumer ``drain()``)."""
    global _raw_shed_said
    shed = int(_native._raw_stats()["shed_from_memory"])
    if shed > _raw_shed_said:
        from .events import SpansDropped, emit

        count, _raw_shed_said = shed - _raw_shed_said, shed
        emit(SpansDropped("drain()", "(every thread: in the raw log)", count))


def wait_for_devices() -> None:
    """Wait (once per device) for the device spans' event pairs already closed, so the next
    drain resolves them all: ``drain(wait_device=True)``, and a recorder's final flush."""
    if _native._cuda_used():  # a device span was entered (C's flag: no import before)
        _native._cuda_synchronize()


def core_table() -> "pa.Table":
    """One pass of the core's drain as a span table (the caller holds ``drain_lock``)."""
    from . import _machine

    machine = _machine.measure()  # before the first drain imports pyarrow: not the run's time
    from ._table import metadata, table_from_raw

    r = rank()
    raw = _native._drain(r)
    try:
        clock = _native._clock_info()
        meta = metadata(
            rank=r,
            pid=os.getpid(),
            clock=clock,
            all_threads=raw["all_threads"],
            version=__version__,
            id_base=raw["id_base"],
            tasks=_native._tasks_seen(),
            machine=machine,
        )
        table = table_from_raw(raw, meta=meta)
    except BaseException:
        # Out of memory (or interrupted) building the table: the spans left the rings, so
        # they are counted as dropped (hotspan.dropped()) rather than silently gone.
        _native._count_lost(raw["n"])
        raise
    if _native._cuda_used():  # a device span was entered: its completed pairs are rows
        from ._devices import cuda

        device_rows = cuda.resolve_table(meta, r)
        if device_rows is not None:
            import pyarrow as pa

            # One dictionary per string column, as a drain without device rows gives.
            table = pa.concat_tables([table, device_rows]).unify_dictionaries().combine_chunks()
    return table


def _wrap_async(span_obj: Any, func: Callable[..., Any]) -> Callable[..., Any]:
    """A coroutine function's span covers the awaited body, not the coroutine's creation."""
    import functools

    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        with span_obj:
            return await func(*args, **kwargs)

    return wrapper


def _wrap_generator(span_obj: Any, func: Callable[..., Any]) -> Callable[..., Any]:
    """A generator function's span covers each step of the iteration: every ``next``,
    ``send`` or ``throw`` that runs the generator's body is one span (so a generator that
    yields n items gives n + 1 spans, the last one the step that finishes it). Each step,
    not the whole consumption: the consumer's own work between two items is not counted as
    the generator's, and a generator handed to another thread records there."""

    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        gen = func(*args, **kwargs)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            with span_obj:
                try:
                    item = gen.send(sent) if thrown is None else gen.throw(thrown)
                except StopIteration as stop:
                    return stop.value
            sent, thrown = None, None
            try:
                sent = yield item
            except GeneratorExit:
                gen.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in by the consumer: pass it on
                thrown = exc

    return wrapper


def _wrap_async_generator(span_obj: Any, func: Callable[..., Any]) -> Callable[..., Any]:
    """An async generator function: one span per step (``__anext__``/``asend``/``athrow``),
    each covering the awaited body of that step, as for generators."""

    import functools

    @functools.wraps(func)
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        agen = func(*args, **kwargs)
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            with span_obj:
                try:
                    item = await (agen.asend(sent) if thrown is None else agen.athrow(thrown))
                except StopAsyncIteration:
                    return
            sent, thrown = None, None
            try:
                sent = yield item
            except GeneratorExit:
                await agen.aclose()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in by the consumer: pass it on
                thrown = exc

    return wrapper


if TYPE_CHECKING:

    @overload
    def traced(fn: F, /) -> F: ...
    @overload
    def traced(
        fn: str | None = None,
        /,
        category: str | None = None,
        *,
        name: str | None = None,
        arg: int | None = None,
        sync: Any = None,
    ) -> Callable[[F], F]: ...


def traced(
    fn: Any = None,
    /,
    category: str | None = None,
    *,
    name: str | None = None,
    arg: int | None = None,
    sync: Any = None,
) -> Any:
    """Record every call of a function as a span.

    ``@traced`` names the span after the function's ``__qualname__``; ``@traced("name")``,
    ``@traced("name", "category")`` or ``@traced(name=..., category=..., arg=...)`` choose.
    Works on functions, methods and coroutine functions (the span covers the awaited body),
    and on generator and async generator functions: one span per step of the iteration
    (each ``next``), not one for the whole consumption, nor only the generator's creation.
    ``sync=fn`` (or ``True``: ``configure(sync=)``'s) calls ``fn()`` right before each span
    ends, as ``span(..., sync=)`` does.
    """
    if fn is None or isinstance(fn, str):
        chosen = fn if isinstance(fn, str) else name

        def decorate(func: F) -> F:
            decorated: F = _decorate(func, chosen, category, arg, sync)
            return decorated

        return decorate
    if not callable(fn) and not isinstance(fn, classmethod):
        raise TypeError(f"traced(): expected a function or a name, not {type(fn).__name__}")
    return _decorate(fn, name, category, arg, sync)


def _unpickle_span(name: str, category: str | None, keywords: dict[str, Any]) -> Any:
    """A span pickled or copied (see ``span.__reduce__``): a new one, made as it was."""
    return _native.span(name, category, **keywords)


def _unpickle_traced(func: Any, name: str, category: str | None, arg: int | None) -> Any:
    """A traced function pickled by value (``traced(f)`` kept under another name than
    ``f``'s, or one of ``__main__``; see ``traced_function.__reduce_ex__``): ``f`` wrapped
    again, as ``traced`` did."""
    import functools

    wrapper: Any = _native._wrap(func, name, category, arg=arg)
    functools.update_wrapper(wrapper, func)
    if wrapper.__qualname__.endswith(_WRAPPED):  # see _reduce_named_traced
        wrapper.__qualname__ = wrapper.__qualname__[: -len(_WRAPPED)]
    return wrapper


_WRAPPED = ".__wrapped__"


def _reduce_named_traced(
    traced_fn: Any, func: Any, name: str, category: str | None, arg: int | None, protocol: int
) -> Any:
    """How a traced function that its module names is pickled (``traced_function``'s
    ``__reduce_ex__``): by that name, as a function is; but in ``__main__`` (a script, a
    notebook), as the function it wraps plus its span. cloudpickle (Spark, Dask, Ray) sends
    a function of ``__main__`` by value, since the processes that run it have no such
    ``__main__``: a name alone failed there ("Can't get attribute"). pickle itself still
    sends that function by name, found at ``<name>.__wrapped__`` (multiprocessing's workers
    run the same ``__main__``): its ``__qualname__`` says so from the first pickling on,
    the name it had being the wrapper's now. Protocols before 4 would pickle a dotted name
    as this very object again, inside itself: those keep the name."""
    import types

    qualname: str = traced_fn.__qualname__
    if protocol < 4 or getattr(traced_fn, "__module__", None) != "__main__":
        return qualname
    wrapped = getattr(traced_fn, "__wrapped__", None)
    if not isinstance(func, types.FunctionType) or id(wrapped) != id(func):  # found there
        return qualname
    if func.__qualname__ not in (qualname, qualname + _WRAPPED):
        return qualname
    func.__qualname__ = qualname + _WRAPPED
    return (_unpickle_traced, (func, name, category, arg))


def _wrap_sync(span_obj: Any, func: Callable[..., Any]) -> Callable[..., Any]:
    """A plain function with a sync span: the C traced wrapper has no sync call, so a
    ``with`` around the call (the sync itself costs far more than this frame)."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with span_obj:
            return func(*args, **kwargs)

    return wrapper


def _decorate(
    func: Any, name: str | None, category: str | None, arg: int | None, sync: Any = None
) -> Any:
    if isinstance(func, (staticmethod, classmethod)):
        # Above @staticmethod or @classmethod: the function under it traced, then put back
        # under the same descriptor, so that it binds as it did (a static method called on
        # an instance must not get the instance, a class method must get the class).
        return type(func)(_decorate(func.__func__, name, category, arg, sync))
    if not callable(func):
        raise TypeError(f"traced(): expected a callable, not {type(func).__name__}")
    if name is None:
        name = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    import functools
    import inspect

    if inspect.isasyncgenfunction(func):
        return _wrap_async_generator(_native.span(name, category, arg=arg, sync=sync), func)
    if inspect.isgeneratorfunction(func):
        return _wrap_generator(_native.span(name, category, arg=arg, sync=sync), func)
    if inspect.iscoroutinefunction(func):
        return _wrap_async(_native.span(name, category, arg=arg, sync=sync), func)
    if sync is not None and sync is not False:
        return _wrap_sync(_native.span(name, category, arg=arg, sync=sync), func)
    wrapper = _native._wrap(func, name, category, arg=arg)
    functools.update_wrapper(wrapper, func)
    return wrapper


def _decorate_with(span_obj: Any, func: Any) -> Any:
    """``@hotspan.span(...)`` on a function (called by the C type)."""
    if isinstance(func, (staticmethod, classmethod)):  # as in _decorate
        return type(func)(_decorate_with(span_obj, func.__func__))
    if getattr(span_obj, "device", None) is not None:
        return _decorate_device(span_obj, func)
    return _decorate(
        func, span_obj.name, span_obj.category, span_obj.arg, getattr(span_obj, "sync", None)
    )


def _decorate_device(span_obj: Any, func: Any) -> Any:
    """A function decorated with a device span: each call (each step of a generator, the
    awaited body of a coroutine) inside the span object itself, so it records its pair."""
    import inspect

    if inspect.isasyncgenfunction(func):
        return _wrap_async_generator(span_obj, func)
    if inspect.isgeneratorfunction(func):
        return _wrap_generator(span_obj, func)
    if inspect.iscoroutinefunction(func):
        return _wrap_async(span_obj, func)
    return _wrap_sync(span_obj, func)


#: HOTSPAN's words (any case): the C core turns recording off at import for the second set.
HOTSPAN_ON = ("1", "true", "on", "yes")
HOTSPAN_OFF = ("0", "false", "off", "no")


def _check_hotspan_env() -> None:
    """``HOTSPAN=bogus`` is said once on stderr (recording stays on, the default), not taken
    silently as "on"."""
    value = os.environ.get("HOTSPAN")
    if not value or value.lower() in HOTSPAN_ON + HOTSPAN_OFF:
        return
    import sys

    print(
        f"hotspan: HOTSPAN={value!r} is not understood (use {'/'.join(HOTSPAN_OFF)} to turn recording off, "
        f"{'/'.join(HOTSPAN_ON)} for on); recording is on",
        file=sys.stderr,
    )


def _thread_name() -> str:
    # Called by the core once per thread, for its first span; any program with threads
    # has imported threading already.
    import threading

    return threading.current_thread().name


#: Spans dropped on purpose (``hotspan.testing.expected_drops()``: a test of the memory cap),
#: left out of the exit line.
dropped_expected = 0


def _warn_dropped_at_exit() -> None:
    """At exit: one line on stderr when this process dropped spans, with what to change.
    Reads two counters from the C core: no pyarrow, nothing else loaded."""
    try:
        if _native.dropped() <= dropped_expected:
            return
        import sys

        detail = _native.dropped(detail=True)
        # the core says which cause held the cap and what helps against it
        lost = detail["total"] - dropped_expected
        print(f"hotspan: {lost:,} spans dropped {detail['advice']}", file=sys.stderr)
    except Exception:  # noqa: BLE001 - an exit hook must not add a traceback to a dying process
        pass


def _after_fork_child() -> None:
    global drain_lock, _hub
    _native._after_fork_child()
    # A thread of the parent may have held the lock at the fork; the child has none of the
    # parent's streaming consumers (recording/_hub.py resets its own state after this).
    drain_lock = _thread.RLock()
    _hub = None


def _flight_from_env() -> None:
    """``HOTSPAN_FLIGHT=PATH`` (``1``/``true``: the default name): the flight file from the
    start, before any thread records. A path that cannot be made is said once on stderr;
    recording goes on without it."""
    value = os.environ.get("HOTSPAN_FLIGHT", "").strip()
    if not value or value.lower() in HOTSPAN_OFF:
        return
    try:
        configure(flight=True if value.lower() in HOTSPAN_ON else value)
    except (OSError, ValueError) as exc:
        import sys

        print(f"hotspan: HOTSPAN_FLIGHT={value!r}: no flight file ({exc})", file=sys.stderr)


_native._set_hooks(_thread_name, _decorate_with)
_check_hotspan_env()
_flight_from_env()
# Run once at exit, after the recorders' final flushes (lifecycle's order), silent unless
# spans were dropped.
lifecycle.report_at_exit(_warn_dropped_at_exit)
lifecycle.on_fork("core", after_in_child=_after_fork_child)
