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

import threading


# Why no dataclasses, logging or typing at import: ``import hotspan`` loads this module, and
# those three (with inspect, ast and tokenize behind dataclasses) were half of its import
# time. The events are small frozen classes written out; logging loads at the first emit.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import logging
    from typing import Any, Callable

    from ._callbacks import CallbackRunner

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

#: Log levels of the ``logging`` module (the same numbers), so describing an event needs no import.
_INFO, _WARNING, _ERROR = 20, 30, 40


def _logger() -> logging.Logger:
    import logging

    return logging.getLogger("hotspan")


#: Events waiting for one slow handler before the newest are dropped (counted).
HANDLER_QUEUE = 1024


class Event:
    """Base class of every lifecycle event: immutable, compared and hashed by its fields."""

    __slots__ = ()
    #: The fields, in order (what a dataclass's ``fields()`` would name).
    _fields: tuple[str, ...] = ()

    def _init(self, *values: object) -> None:
        for field, value in zip(self._fields, values):
            object.__setattr__(self, field, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"cannot assign to field {name!r}: {type(self).__name__} is frozen")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"cannot delete field {name!r}: {type(self).__name__} is frozen")

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, field) for field in self._fields)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._values()))

    def __repr__(self) -> str:
        fields = ", ".join(f"{field}={getattr(self, field)!r}" for field in self._fields)
        return f"{type(self).__name__}({fields})"


class RecordingStarted(Event):
    """``record(dest)`` started streaming spans to ``dest`` (``kind``: file, directory, collector)."""

    __slots__ = ("dest", "kind")
    _fields = ("dest", "kind")
    dest: str
    kind: str

    def __init__(self, dest: str, kind: str) -> None:
        self._init(dest, kind)


class Flushed(Event):
    """One flush handed ``spans`` spans (``bytes`` of Arrow data) to ``dest`` in ``seconds``."""

    __slots__ = ("dest", "spans", "bytes", "seconds")
    _fields = ("dest", "spans", "bytes", "seconds")
    dest: str
    spans: int
    bytes: int
    seconds: float

    def __init__(self, dest: str, spans: int, bytes: int, seconds: float) -> None:
        self._init(dest, spans, bytes, seconds)


class SpansDropped(Event):
    """``consumer`` (``drain``, ``record(dest)``, ``subscribe(fn)``) lost ``count`` spans of
    thread ``thread_name`` because it fell behind by more than the memory cap; consumer
    ``core``: the recorder itself dropped them (its memory cap was reached before anything
    drained them), said at the next pass of its drain thread, at most once a second a
    thread (``thread_id``: the OS thread id, where known)."""

    __slots__ = ("consumer", "thread_name", "count", "thread_id")
    _fields = ("consumer", "thread_name", "count", "thread_id")
    consumer: str
    thread_name: str
    count: int
    thread_id: int | None

    def __init__(
        self, consumer: str, thread_name: str, count: int, thread_id: int | None = None
    ) -> None:
        self._init(consumer, thread_name, count, thread_id)


class FlushFailed(Event):
    """Writing a flush to ``dest`` raised ``error`` (recording goes on)."""

    __slots__ = ("dest", "error")
    _fields = ("dest", "error")
    dest: str
    error: BaseException

    def __init__(self, dest: str, error: BaseException) -> None:
        self._init(dest, error)


class CollectorLost(Event):
    """The collector at ``url`` stopped answering (``error``); spans wait in the buffer."""

    __slots__ = ("url", "error")
    _fields = ("url", "error")
    url: str
    error: BaseException

    def __init__(self, url: str, error: BaseException) -> None:
        self._init(url, error)


class CollectorRestored(Event):
    """The collector at ``url`` answers again after ``seconds_lost`` seconds."""

    __slots__ = ("url", "seconds_lost")
    _fields = ("url", "seconds_lost")
    url: str
    seconds_lost: float

    def __init__(self, url: str, seconds_lost: float) -> None:
        self._init(url, seconds_lost)


class CallbackFailed(Event):
    """A subscriber's callback or an event handler raised ``error`` (reported once per
    callback; it keeps being called)."""

    __slots__ = ("callback", "error")
    _fields = ("callback", "error")
    callback: str
    error: BaseException

    def __init__(self, callback: str, error: BaseException) -> None:
        self._init(callback, error)


def _describe(event: Event) -> tuple[int, str, BaseException | None]:
    """The log level, message and exception (for the traceback) of one event."""
    if isinstance(event, RecordingStarted):
        return _INFO, f"recording to {event.dest} ({event.kind})", None
    if isinstance(event, Flushed):
        return (
            _INFO,
            f"flushed {event.spans:,} spans ({event.bytes:,} bytes) to {event.dest} "
            f"in {event.seconds * 1e3:.1f} ms",
            None,
        )
    if isinstance(event, SpansDropped) and event.consumer == "core":
        return (
            _WARNING,
            f"{event.count:,} spans of thread {event.thread_name!r} dropped: the recorder's "
            "memory cap was reached before they were drained (configure(memory_cap=), or drain more often)",
            None,
        )
    if isinstance(event, SpansDropped):
        return (
            _WARNING,
            f"{event.consumer} fell behind: {event.count:,} spans of thread "
            f"{event.thread_name!r} dropped",
            None,
        )
    if isinstance(event, FlushFailed):
        return (
            _ERROR,
            f"could not write spans to {event.dest}: {event.error!r} (recording goes on)",
            event.error,
        )
    if isinstance(event, CollectorLost):
        return (
            _ERROR,
            f"lost the collector at {event.url}: {event.error!r} (spans wait in the buffer)",
            event.error,
        )
    if isinstance(event, CollectorRestored):
        return (
            _INFO,
            f"the collector at {event.url} is back after {event.seconds_lost:.1f} s",
            None,
        )
    if isinstance(event, CallbackFailed):
        return (
            _ERROR,
            f"callback {event.callback} raised {event.error!r} (reported once; "
            "it keeps being called)",
            event.error,
        )
    return _INFO, repr(event), None


def callback_name(fn: Any) -> str:
    """How a callback is named in reports: its qualified name, else its repr."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if qualname:
        return f"{module}.{qualname}" if module else qualname
    return repr(fn)


def report_failure(fn: Any, error: Exception) -> None:
    """Report a callback's first failure: ERROR on the ``hotspan`` logger (with the
    traceback) and a :class:`CallbackFailed` event (what a callback runner calls)."""
    emit(CallbackFailed(callback_name(fn), error))


# --------------------------------------------------------------------------- handlers

_handlers: list[EventHandle] = []
_handlers_lock = threading.Lock()


class EventHandle:
    """A registered event handler; ``close()`` (or ``remove()``) unregisters it."""

    def __init__(self, fn: Callable[[Event], Any]):
        from ._callbacks import CallbackRunner

        self.fn = fn
        self._runner: CallbackRunner[Event] = CallbackRunner(
            fn, name="events", report=report_failure, maxlen=HANDLER_QUEUE
        )

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
        exc_info = (
            (type(error), error, error.__traceback__)
            if error is not None and level >= _ERROR
            else None
        )
        _logger().log(level, message, exc_info=exc_info)
    except Exception:  # noqa: BLE001 - a broken logging setup must not break recording
        pass
    with _handlers_lock:
        handlers = list(_handlers)
    for handle in handlers:
        handle._runner.put(event)
