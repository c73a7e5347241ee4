"""Subscribers: a callback handed the spans as they are recorded, on a thread of its own.

    def slow_steps(batch):                      # a pyarrow.RecordBatch
        for row in batch.to_pylist():
            alert(row["name"], row["duration_ns"])

    with hotspan.subscribe(slow_steps, min_ns=100_000_000, categories=["step"]):
        train()

Each subscriber reads its own cursor of the hub (recording/_hub.py): it sees every span
recorded while it is open, whatever ``drain()``, ``record()`` or other subscribers do. Its
callback runs on its own thread, never a recording thread: a slow callback delays only
itself (its queue is bounded by the memory cap; past it the oldest spans are dropped,
counted in ``dropped`` and reported as a ``SpansDropped`` event), and one that raises is
reported once and keeps being called.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable

from .. import _native
from .._callbacks import CallbackRunner
from ..events import callback_name, report_failure
from . import _hub as hub

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Subscription", "subscribe"]


def _str_set(label: str, values: Iterable[str] | str | None) -> frozenset[str] | None:
    if values is None:
        return None
    if isinstance(values, str):
        values = [values]
    out = frozenset(values)
    for v in out:
        if not isinstance(v, str):
            raise TypeError(f"subscribe(): {label} must be strings, not {type(v).__name__}")
    return out


class Subscription:
    """A running subscriber; ``close()`` it (or use it as a context manager)."""

    def __init__(
        self,
        callback: Callable[["pa.RecordBatch"], Any],
        min_ns: int,
        names: frozenset[str] | None,
        categories: frozenset[str] | None,
    ):
        self.callback = callback
        self.min_ns = min_ns
        self.names = names
        self.categories = categories
        self.delivered = 0  # spans handed to the callback
        self.batches = 0
        self._closed = False
        self._reader = hub.attach(f"subscribe({callback_name(callback)})", pumped=True)
        self._runner: CallbackRunner[pa.RecordBatch] = CallbackRunner(
            callback, name="subscriber", source=self._next_batches, report=report_failure
        )

    @property
    def dropped(self) -> int:
        """Spans lost because the callback fell behind by more than the memory cap."""
        return self._reader.dropped

    @property
    def received(self) -> int:
        """Spans that reached this subscriber's queue (before its filters)."""
        return self._reader.received

    @property
    def errors(self) -> int:
        """Calls of the callback that raised."""
        return self._runner.errors

    def _next_batches(self, timeout: float) -> list["pa.RecordBatch"]:
        if not self._reader.wait(timeout):
            return []
        tables = self._reader.take_queued()
        batch = self._select(tables)
        if batch is None:
            return []
        self.delivered += batch.num_rows
        self.batches += 1
        return [batch]

    def _select(self, tables: list["pa.Table"]) -> "pa.RecordBatch | None":
        """The matching spans of ``tables`` as one batch (None when none match)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        tables = [t for t in tables if t.num_rows]
        if not tables:
            return None
        table = (
            pa.concat_tables(tables).combine_chunks()
            if len(tables) > 1
            else tables[0].combine_chunks()
        )
        mask = None
        if self.min_ns > 0:
            mask = pc.greater_equal(table.column("duration_ns"), self.min_ns)
        for column, wanted, match in (
            ("name", self.names, _name_matches),
            ("category", self.categories, _category_matches),
        ):
            if wanted is None:
                continue
            # Matched on the (small) dictionary, then by index: no string per row.
            array = table.column(column).chunk(0) if table.column(column).num_chunks else None
            if array is None:
                return None
            keep = [i for i, v in enumerate(array.dictionary.to_pylist()) if match(v, wanted)]
            hit = pc.fill_null(pc.is_in(array.indices, pa.array(keep, pa.int32())), False)
            mask = hit if mask is None else pc.and_(mask, hit)
        if mask is not None:
            table = table.filter(mask)
        if table.num_rows == 0:
            return None
        return table.combine_chunks().to_batches()[0]  # one chunk: one batch

    def close(self, timeout: float | None = None) -> None:
        """Stop: the spans recorded until now are delivered first, then the thread ends."""
        if self._closed:
            return
        self._closed = True
        _native._sweep()  # move what the rings hold now into the core's buffer
        hub.pump()  # ... and from there to this subscriber's queue (and everyone else's)
        hub.detach(self._reader, pumped=True)
        self._runner.close(timeout)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"<hotspan.Subscription {callback_name(self.callback)} {state}, {self.delivered} spans delivered>"


def _name_matches(value: str | None, wanted: frozenset[str]) -> bool:
    return value in wanted


def _category_matches(value: str | None, wanted: frozenset[str]) -> bool:
    """A category path matches when it, or any of its components, is wanted: ``compute``
    matches ``compute`` and ``sync/compute`` (a span's category is its full path)."""
    if value is None:
        return False
    return value in wanted or any(part in wanted for part in value.split("/"))


def subscribe(
    callback: Callable[["pa.RecordBatch"], Any],
    *,
    min_ns: int = 0,
    names: Iterable[str] | str | None = None,
    categories: Iterable[str] | str | None = None,
) -> Subscription:
    """Call ``callback(batch)`` with the spans recorded from now on, about every drain
    interval, on a hotspan-owned thread: ``batch`` is a ``pyarrow.RecordBatch`` (the span
    schema) of the spans lasting at least ``min_ns`` whose name is in ``names`` and whose
    category (or a component of its path) is in ``categories`` (``None``: any).

    Returns a :class:`Subscription`; ``close()`` it (or use ``with``) to deliver what is
    left and stop.
    """
    if not callable(callback):
        raise TypeError(f"subscribe(): callback must be callable, not {type(callback).__name__}")
    if isinstance(min_ns, bool) or not isinstance(min_ns, int):
        raise TypeError(f"subscribe(): min_ns must be an int, not {type(min_ns).__name__}")
    if min_ns < 0:
        raise ValueError(f"subscribe(): min_ns must be >= 0, not {min_ns}")
    return Subscription(
        callback, min_ns, _str_set("names", names), _str_set("categories", categories)
    )
