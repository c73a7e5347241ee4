"""Callback isolation: one thread a callback, a bounded queue, failures reported once.

The one implementation behind ``hotspan.subscribe`` and ``hotspan.on_event`` handlers, apart
from :mod:`hotspan.events` so that ``import hotspan`` (which loads the events) does not load
``typing``'s generics machinery: this module loads with the first handler or subscriber.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable, Generic, TypeVar

from ._quiet_threads import start_quiet

__all__ = ["CallbackRunner"]

T = TypeVar("T")


class CallbackRunner(Generic[T]):
    """Calls ``fn(item)`` for each item on a thread of its own.

    The one implementation of callback isolation (subscribers and event handlers): the
    producer never waits (``put`` only appends to a bounded deque, dropping the newest when
    full, counted in ``overflow``); an exception is reported once, through ``report(fn,
    error)`` (:func:`hotspan.events.report_failure`: ERROR on the ``hotspan`` logger and a
    ``CallbackFailed`` event), and the callback keeps being called with the next items.

    ``source``, when given, replaces the internal queue: a function ``source(timeout)`` that
    returns the next list of items (waiting at most ``timeout`` seconds) and ``[]`` when
    there is nothing; the runner stops once ``close()`` was called and ``source`` is empty.
    """

    def __init__(
        self,
        fn: Callable[[T], Any],
        *,
        name: str,
        report: Callable[[Callable[[T], Any], Exception], None],
        maxlen: int = 1024,
        source: Callable[[float], list[T]] | None = None,
    ):
        self.fn = fn
        self._report = report
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
                self._report(self.fn, exc)

    def close(self, timeout: float | None = None) -> None:
        """Deliver what is queued, then stop the thread (not from the callback itself)."""
        with self._cond:
            self._closing = True
            self._cond.notify()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
