"""Many readers of one recorder: every consumer gets every span, once, whatever the others do.

The C core has one drain cursor (``_native._drain``). While nothing streams, ``drain()``
calls it directly, as it always did: no cost added. Once a streaming consumer exists (a
``record()``, a ``subscribe()``), this hub becomes the only caller of the native drain: each
pass turns what the core holds into an Arrow table and appends it to the queue of every
reader, the user's ``drain()`` included (its own cursor: a ``drain()`` while ``record()``
streams returns every span since that user's previous ``drain()``, and the destination
still gets them all). ``live()`` needs nothing from here: the native drain thread copies
its lines out as it moves records out of the rings, before any drain.

Tables are shared between readers (Arrow buffers are immutable and reference counted), so
the memory held is the longest backlog, not the sum. Each backlog is bounded by the memory
cap (``configure(memory_cap=...)``): past it a reader loses its oldest tables, counted per
reader and per thread and reported as :class:`hotspan.events.SpansDropped` when the reader
next takes its spans (a ``drain()`` cursor nobody reads never warns). ``hotspan.dropped()``
stays the core's exact count of spans that never reached any reader.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque

from .. import _api, _native
from ..events import SpansDropped, emit
from .._quiet_threads import start_quiet
from .. import _lifecycle as lifecycle

TYPE_CHECKING = False  # typing loads for the type checker only (import hotspan stays light)
if TYPE_CHECKING:
    from typing import Any

    import pyarrow as pa

__all__ = ["Reader", "attach", "detach", "drain_for_user", "pump", "streaming"]

#: Bounds of the pump thread's period (it follows the native drain thread's period, which
#: adapts between 2 and 20 ms): under 10 ms, building a table per pass costs more than a
#: subscriber gains from hearing sooner.
PUMP_MIN_S = 0.01
PUMP_MAX_S = 1.0


class Reader:
    """One consumer's cursor: the tables drained since it last took them."""

    def __init__(self, name: str):
        self.name = name
        self.dropped = 0  # spans this reader lost by falling behind by more than the memory cap
        self.received = 0  # spans appended to this reader's queue
        self._tables: deque[pa.Table] = deque()
        self._bytes = 0
        self._unreported: Counter[str] = Counter()
        #: Epoch ns: spans that ended before are not this reader's (set when it attaches while
        #: others stream: a record() nested in another, or in HOTSPAN_OUT's).
        self.since_ns: int | None = None
        # Re-entrant: a SIGTERM handler that flushes may interrupt this thread inside it.
        self._cond = threading.Condition(threading.RLock())

    @property
    def backlog_bytes(self) -> int:
        return self._bytes

    def under_pressure(self) -> bool:
        """True once the backlog passes half the memory cap (time to take it)."""
        cap: int = _native._pending()["memory_cap"]
        return self._bytes * 2 >= cap

    def _offer(self, table: pa.Table, nbytes: int, cap: int) -> None:
        if self.since_ns is not None:
            # Attached beside other readers: spans that ended before it started are theirs.
            import pyarrow.compute as pc

            kept = pc.greater_equal(table.column("end_ns"), self.since_ns)
            if pc.all(kept).as_py():
                self.since_ns = None  # caught up: from here on every span is this reader's
            else:
                table = table.filter(kept)
                nbytes = table.nbytes
        with self._cond:
            self._tables.append(table)
            self._bytes += nbytes
            self.received += table.num_rows
            # Drop the oldest, not the newest: every reader then holds a suffix of the same
            # stream, so the tables held by all readers together stay within one cap.
            while self._bytes > cap and len(self._tables) > 1:
                old = self._tables.popleft()
                self._bytes -= old.nbytes
                self.dropped += old.num_rows
                self._unreported.update(_threads_of(old))
            self._cond.notify_all()

    def _take_all(self) -> list[pa.Table]:
        with self._cond:
            tables = list(self._tables)
            self._tables.clear()
            self._bytes = 0
            unreported, self._unreported = self._unreported, Counter()
        try:
            for thread_name, count in sorted(unreported.items()):
                emit(SpansDropped(self.name, thread_name, count))
        except Exception:  # noqa: BLE001 - out of memory telling it: the spans still go out
            pass
        return tables

    def wait(self, timeout: float) -> bool:
        """Wait until something is queued (at most ``timeout`` seconds)."""
        with self._cond:
            if not self._tables and timeout > 0:
                self._cond.wait(timeout)
            return bool(self._tables)

    def take_queued(self) -> list[pa.Table]:
        """What the hub queued for this reader, without draining the core now."""
        return self._take_all()

    def take(self) -> pa.Table:
        """Everything since this reader last took: its queue plus a drain of the core now
        (fanned out to every other reader too), as one table with the latest metadata."""
        with _api.drain_lock:
            latest = _pump_locked()
            tables: list[pa.Table] = []
            try:
                tables = self._take_all()
                return _joined(tables, latest)
            except BaseException:
                # Out of memory joining them: taken from the queue and lost, so counted.
                self.dropped += sum(t.num_rows for t in tables)
                raise

    def __repr__(self) -> str:
        return f"<hotspan reader {self.name}: {len(self._tables)} tables queued, {self.dropped} dropped>"


def _threads_of(table: pa.Table) -> Counter[str]:
    import pyarrow.compute as pc

    out: Counter[str] = Counter()
    for chunk in table.column("thread_name").chunks:
        # Counted on the indices, named through the (small) dictionary: no string per row.
        names = chunk.dictionary.to_pylist()
        for v in pc.value_counts(chunk.indices).to_pylist():
            out[names[v["values"]]] += v["counts"]
    return out


def _joined(tables: list[pa.Table], latest: pa.Table) -> pa.Table:
    """One table from a reader's queue; the metadata of the latest drain (its dropped counts
    only grow)."""
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return latest.slice(0, 0)  # a detached reader was not offered ``latest``
    if len(tables) == 1:
        return tables[0].replace_schema_metadata(latest.schema.metadata)
    import pyarrow as pa

    meta = latest.schema.metadata
    # One dictionary per string column, as a single drain gives (group_by refuses differing).
    return pa.concat_tables([t.replace_schema_metadata(meta) for t in tables]).unify_dictionaries()


# --------------------------------------------------------------------------- the hub

_streaming: list[Reader] = []  # record()s and subscribers
_user: Reader | None = None  # drain()'s cursor while the hub is active
_pump_thread: threading.Thread | None = None
_pumped_by_thread = 0  # subscribers: they want spans every pass, not at the next flush
_wake = threading.Event()


def _pump_locked() -> pa.Table:
    table = _api.core_table()
    if table.num_rows:
        nbytes = table.nbytes
        cap = int(_native._pending()["memory_cap"])
        if _user is not None:
            _user._offer(table, nbytes, cap)
        for reader in _streaming:
            reader._offer(table, nbytes, cap)
    return table


def pump() -> pa.Table:
    """Drain the core now and hand the spans to every reader; returns that drain's table."""
    with _api.drain_lock:
        return _pump_locked()


def streaming() -> bool:
    """Whether any streaming consumer is attached (then the hub owns the native drain)."""
    return bool(_streaming)


def attach(name: str, *, pumped: bool = False) -> Reader:
    """A new reader that gets every span drained from now on (and, the first one, what the
    core holds now, undrained). ``pumped``: it wants spans
    every pump period (a subscriber), not only when it takes them (a recorder)."""
    global _user, _pumped_by_thread
    reader = Reader(name)
    with _api.drain_lock:
        if _user is None:
            _user = Reader("drain()")
        if _streaming or _native._raw_stats()["open"]:
            # Other readers stream already (or a record(dir) whose raw log the drain thread
            # writes: formats/_rawlog.py) (a record() nested in another, or in HOTSPAN_OUT's):
            # what the core holds now was recorded before this one started, and is theirs.
            # Filtered when offered, not drained here: a drain on the caller's thread would start
            # pyarrow's threads from a thread that takes signals (and import pyarrow there).
            reader.since_ns = time.time_ns()
        elif _raw_closed_ns is not None:
            # What a raw log took is that recording's, though the core may still hold it for
            # drain(): the spans that ended before the last one closed are not this reader's.
            reader.since_ns = _raw_closed_ns
        # Not drained here: what the core holds now goes to the new reader too (a recorder
        # started late still writes the spans nobody drained), and the caller's thread
        # never imports pyarrow for it (HOTSPAN_OUT starts a recorder inside import hotspan).
        _streaming.append(reader)
        _api.set_drain_hook(_HUB)
        if pumped:
            _pumped_by_thread += 1
            _start_pump_thread()
    return reader


_raw_closed_ns: int | None = None


def raw_log_closed() -> None:
    """A raw log (formats/_rawlog.py) closed now, with every span that ended before."""
    global _raw_closed_ns
    _raw_closed_ns = time.time_ns()


def detach(reader: Reader, *, pumped: bool = False) -> None:
    """Stop feeding ``reader`` (what it has queued stays for it to take)."""
    global _pumped_by_thread
    with _api.drain_lock:
        if reader in _streaming:
            _streaming.remove(reader)
            if pumped:
                _pumped_by_thread -= 1
        _maybe_deactivate()


def _maybe_deactivate() -> None:
    global _user
    # With no streaming reader and nothing queued for drain(), drain() calls the core
    # directly again.
    if not _streaming and (_user is None or not _user._tables):
        _user = None
        _api.set_drain_hook(None)


def drain_for_user() -> pa.Table:
    """``hotspan.drain()`` while the hub is active: the user's queue plus a drain now."""
    with _api.drain_lock:
        user = _user
        if user is None:
            return _api.core_table()
        table = user.take()
        _maybe_deactivate()
        return table


def _pump_period() -> float:
    period: float = _native._pending()["drain_period_us"] / 1e6
    return min(max(period, PUMP_MIN_S), PUMP_MAX_S)


def _start_pump_thread() -> None:
    global _pump_thread
    if _pump_thread is not None and _pump_thread.is_alive():
        return
    # A drain (pyarrow) imported on the pump thread during interpreter shutdown fails; the
    # caller's thread imports what it needs first.
    import pyarrow  # noqa: F401

    from .. import _table  # noqa: F401

    _pump_thread = threading.Thread(target=_pump_loop, name="hotspan-hub", daemon=True)
    start_quiet(_pump_thread)


def _pump_loop() -> None:
    while True:
        _wake.wait(_pump_period())
        _wake.clear()
        with _api.drain_lock:
            if _pumped_by_thread <= 0:
                global _pump_thread
                _pump_thread = None
                return
            try:
                # Nothing moved out of the rings since the last pass: building an empty
                # table (metadata and all, ~0.2 ms with the GIL held) is skipped. Without
                # the native drain thread, only a drain moves spans out of the rings.
                pending = _native._pending()
                if pending["spans"] or not pending["drain_thread"]:
                    _pump_locked()
            except Exception as exc:  # noqa: BLE001 - the pump must outlive one bad drain
                from ..events import FlushFailed

                emit(FlushFailed("subscribers", exc))
                time.sleep(PUMP_MIN_S)


class _Hub:
    """What ``drain()`` is routed to while the hub is active (``_api.set_drain_hook``)."""

    drain = staticmethod(drain_for_user)


_HUB = _Hub()


def _after_fork_child() -> None:
    """The child has no pump thread and none of the parent's consumers: the core's drain
    is the user's again until something attaches."""
    global _streaming, _user, _pump_thread, _pumped_by_thread, _wake
    _streaming = []
    _user = None
    _pump_thread = None
    _pumped_by_thread = 0
    _wake = threading.Event()


lifecycle.on_fork("hub", after_in_child=_after_fork_child)


def stats() -> dict[str, Any]:
    """Per reader: spans received and dropped, bytes queued (for tests and diagnostics)."""
    with _api.drain_lock:
        readers = ([_user] if _user is not None else []) + list(_streaming)
        return {
            r.name: {"received": r.received, "dropped": r.dropped, "queued_bytes": r.backlog_bytes}
            for r in readers
        }
