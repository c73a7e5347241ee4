"""Typed lifecycle events: what the recorder itself does (started, flushed, dropped spans,
lost a collector...), for programs that want to act on it.

    def on(event):
        if isinstance(event, hotspan.events.SpansDropped):
            alert(event)
    handle = hotspan.on_event(on)      # handle.close() unregisters

Every event is also logged on the ``hotspan`` logger (failures at ERROR with the
traceback, drops at WARNING, the rest at INFO), so standard ``logging`` configuration
controls what is shown; handlers are for code.

Handlers run on a hotspan-owned thread each, never on the thread that emitted the event
(a recording thread, the flusher): a slow handler delays only itself (its own bounded
queue, overflow counted) and a handler that raises is reported once, as ERROR on the
``hotspan`` logger and as a :class:`CallbackFailed` event, and keeps being called.

Pure Python: importing this module loads neither pyarrow nor numpy.
"""
from __future__ import annotations

import logging
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Generic, TypeVar

from .quiet_threads import start_quiet

__all__ = [
    "CallbackFailed",
    "CollectorLost",
    "CollectorRestored",
    "Event",
    "EventHandle",
    "FlushFailed",
    "Flushed",
    "RecordingStarted",
    "SpansDropped",
    "emit",
    "on_event",
]

logger = logging.getLogger("hotspan")

#: Events waiting for one slow handler before the newest are dropped (counted).
HANDLER_QUEUE = 1024


class Event:
    """Base class of every lifecycle event."""

    __slots__ = ()


@dataclass(frozen=True)
class RecordingStarted(Event):
    """``record(dest)`` started streaming spans to ``dest`` (``kind``: file, directory, collector)."""

    dest: str
    kind: str


@dataclass(frozen=True)
class Flushed(Event):
    """One flush handed ``spans`` spans (``bytes`` of Arrow data) to ``dest`` in ``seconds``."""

    dest: str
    spans: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class SpansDropped(Event):
    """``consumer`` (``drain``, ``record(dest)``, ``subscribe(fn)``) lost ``count`` spans of
    thread ``thread_name`` because it fell behind by more than the memory cap; consumer
    ``core``: the recorder itself dropped them (its memory cap was reached before anything
    drained them), said at the next pass of its drain thread, at most once a second a
    thread (``thread_id``: the OS thread id, where known)."""

    consumer: str
    thread_name: str
    count: int
    thread_id: int | None = None


@dataclass(frozen=True)
class FlushFailed(Event):
    """Writing a flush to ``dest`` raised ``error`` (recording goes on)."""

    dest: str
    error: BaseException


@dataclass(frozen=True)
class CollectorLost(Event):
    """The collector at ``url`` stopped answering (``error``); spans wait in the buffer."""

    url: str
    error: BaseException


@dataclass(frozen=True)
class CollectorRestored(Event):
    """The collector at ``url`` answers again after ``seconds_lost`` seconds."""

    url: str
    seconds_lost: float


@dataclass(frozen=True)
class CallbackFailed(Event):
    """A subscriber's callback or an event handler raised ``error`` (reported once per
    callback; it keeps being called)."""

    callback: str
    error: BaseException


def _describe(event: Event) -> tuple[int, str, BaseException | None]:
    """The log level, message and exception (for the traceback) of one event."""
    if isinstance(event, RecordingStarted):
        return logging.INFO, f"recording to {event.dest} ({event.kind})", None
    if isinstance(event, Flushed):
        return (logging.INFO, f"flushed {event.spans:,} spans ({event.bytes:,} bytes) to {event.dest} "
                f"in {event.seconds * 1e3:.1f} ms", None)
    if isinstance(event, SpansDropped) and event.consumer == "core":
        return (logging.WARNING, f"{event.count:,} spans of thread {event.thread_name!r} dropped: the recorder's "
                "memory cap was reached before they were drained (configure(memory_cap=), or drain more often)", None)
    if isinstance(event, SpansDropped):
        return (logging.WARNING, f"{event.consumer} fell behind: {event.count:,} spans of thread "
                f"{event.thread_name!r} dropped", None)
    if isinstance(event, FlushFailed):
        return logging.ERROR, f"could not write spans to {event.dest}: {event.error!r} (recording goes on)", event.error
    if isinstance(event, CollectorLost):
        return logging.ERROR, f"lost the collector at {event.url}: {event.error!r} (spans wait in the buffer)", event.error
    if isinstance(event, CollectorRestored):
        return logging.INFO, f"the collector at {event.url} is back after {event.seconds_lost:.1f} s", None
    if isinstance(event, CallbackFailed):
        return (logging.ERROR, f"callback {event.callback} raised {event.error!r} (reported once; "
                "it keeps being called)", event.error)
    return logging.INFO, repr(event), None


def callback_name(fn: Any) -> str:
    """How a callback is named in reports: its qualified name, else its repr."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if qualname:
        return f"{module}.{qualname}" if module else qualname
    return repr(fn)


# --------------------------------------------------------------------------- isolation

T = TypeVar("T")


class CallbackRunner(Generic[T]):
    """Calls ``fn(item)`` for each item on a thread of its own.

    The one implementation of callback isolation (subscribers and event handlers): the
    producer never waits (``put`` only appends to a bounded deque, dropping the newest when
    full, counted in ``overflow``); an exception is reported once (ERROR on the ``hotspan``
    logger with the traceback, and a :class:`CallbackFailed` event) and the callback keeps
    being called with the next items.

    ``source``, when given, replaces the internal queue: a function ``source(timeout)`` that
    returns the next list of items (waiting at most ``timeout`` seconds) and ``[]`` when
    there is nothing; the runner stops once ``close()`` was called and ``source`` is empty.
    """

    def __init__(self, fn: Callable[[T], Any], *, name: str, maxlen: int = HANDLER_QUEUE,
                 source: Callable[[float], list[T]] | None = None):
        self.fn = fn
        self.name = name
        self.calls = 0
        self.errors = 0
        self.overflow = 0
        self._maxlen = maxlen
        self._items: deque[T] = deque()
        self._source = source
        self._cond = threading.Condition(threading.Lock())
        self._closing = False
        self._thread = threading.Thread(target=self._run, name=f"hotspan-{name}", daemon=True)
        start_quiet(self._thread)

    def put(self, item: T) -> None:
        with self._cond:
            if len(self._items) >= self._maxlen:
                self.overflow += 1
                return
            self._items.append(item)
            self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _next(self) -> tuple[list[T], bool]:
        """(items, finished)."""
        if self._source is not None:
            with self._cond:
                closing = self._closing
            items = self._source(0.0 if closing else 0.1)
            return items, closing and not items
        with self._cond:
            while not self._items and not self._closing:
                self._cond.wait()  # put() and close() notify: no idle wake-ups
            items = list(self._items)
            self._items.clear()
            return items, self._closing and not items

    def _run(self) -> None:
        while True:
            items, finished = self._next()
            for item in items:
                self._call(item)
            if finished:
                return

    def _call(self, item: T) -> None:
        try:
            self.fn(item)
            self.calls += 1
        except Exception as exc:  # noqa: BLE001 - one broken callback must not stop the others
            self.calls += 1
            self.errors += 1
            if self.errors == 1:
                emit(CallbackFailed(callback_name(self.fn), exc))

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued, then stop the thread (not from the callback itself)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)


# --------------------------------------------------------------------------- handlers

_handlers: list["EventHandle"] = []
_handlers_lock = threading.Lock()


class EventHandle:
    """A registered event handler; ``close()`` (or ``remove()``) unregisters it."""

    def __init__(self, fn: Callable[[Event], Any]):
        self.fn = fn
        self._runner: CallbackRunner[Event] = CallbackRunner(fn, name="events")

    @property
    def errors(self) -> int:
        return self._runner.errors

    @property
    def overflow(self) -> int:
        """Events dropped because this handler fell more than ``HANDLER_QUEUE`` behind."""
        return self._runner.overflow

    def close(self) -> None:
        """Unregister; events already emitted are still delivered first."""
        with _handlers_lock:
            if self in _handlers:
                _handlers.remove(self)
        self._runner.close()

    remove = close

    def __enter__(self) -> "EventHandle":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<hotspan.events.EventHandle {callback_name(self.fn)}>"


def on_event(fn: Callable[[Event], Any]) -> EventHandle:
    """Call ``fn(event)`` for each lifecycle event (see :mod:`hotspan.events`) from now on,
    on a thread of its own; returns a handle whose ``close()`` unregisters it."""
    if not callable(fn):
        raise TypeError(f"on_event(): expected a callable, not {type(fn).__name__}")
    handle = EventHandle(fn)
    with _handlers_lock:
        _handlers.append(handle)
    return handle


def emit(event: Event) -> None:
    """Log ``event`` on the ``hotspan`` logger and queue it for every handler. Never raises,
    never waits for a handler."""
    try:
        level, message, error = _describe(event)
        # A traceback for errors (a callback's bug, a failed write), not for warnings that
        # say all there is in one line (a collector lost, and retried): stderr stays readable.
        exc_info = (type(error), error, error.__traceback__) if error is not None and level >= logging.ERROR else None
        logger.log(level, message, exc_info=exc_info)
    except Exception:  # noqa: BLE001 - a broken logging setup must not break recording
        pass
    with _handlers_lock:
        handlers = list(_handlers)
    for handle in handlers:
        handle._runner.put(event)
