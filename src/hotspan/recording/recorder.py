"""Recording to a destination: a background thread drains the recorder every interval and
streams the spans to a file, a dataset directory or a collector.

    with hotspan.record("run/", flush_interval=1.0):     # part-r<R>-<pid>-<token>-<n>.parquet
        train()
    rec = hotspan.record("grpc://127.0.0.1:8815").start(); ...; rec.stop()
    hotspan.record("trace.parquet")                      # any export format, written at stop

``HOTSPAN_OUT=dest`` in the environment starts recording when hotspan is imported and
flushes at exit (normal exit, ``multiprocessing``'s exit of its children, and SIGTERM when
the program has no handler of its own), so a launcher (torchrun, mpirun, multiprocessing)
needs no code change. Children follow a directory: forked ones through the at-fork hook,
spawn and forkserver ones (which inherit ``HOTSPAN_OUT``) when they import hotspan. ``HOTSPAN_FLUSH_INTERVAL``
(seconds), ``HOTSPAN_TOKEN`` and ``HOTSPAN_CLOCK_INTERVAL`` (for a collector: its token, and
how often the clock offset to it is measured again, default 60 s) go with it.
``HOTSPAN_OUT=grpc://a:1,grpc://b:2`` names several collectors: rank R sends to R % N and
fails over to the next when that one is down.

Parts reach the disk (or the collector) every interval: a process killed with SIGKILL loses
at most its last interval. The recorder reads its own cursor of the hub (recording/_hub.py):
``drain()``, ``live()`` and subscribers still get every span while it records.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from .. import _api
from .. import _lifecycle as lifecycle  # the fork steps' order: lifecycle.FORK_STEPS
from . import _hub as hub
from .. import _native
from .._quiet_threads import signals_blocked, start_quiet
from ..events import FlushFailed, Flushed, RecordingStarted, emit
from ._children import forget_children, track_children
from ._sinks import DatasetSink, room_to_flush, sink_for
from ._sinks import warn as _warn

TYPE_CHECKING = False  # typing loads for the type checker only (import hotspan stays light)
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Any

    import pyarrow as pa

__all__ = ["Recorder", "record"]

ENV_OUT = "HOTSPAN_OUT"
ENV_INTERVAL = "HOTSPAN_FLUSH_INTERVAL"
ENV_TOKEN = "HOTSPAN_TOKEN"
#: Set by ``record()`` while it runs, for the processes started meanwhile (JSON: a list of
#: ``{"dest", "flush_interval", "token", "run"}``): a child that imports hotspan records to
#: each of them, as a ``HOTSPAN_OUT`` child does to that one (``follow``). Restored when the
#: last recording that set it stops. Not for users to set.
ENV_CHILDREN = "HOTSPAN_RECORD_CHILDREN"

#: How often the flusher looks at the recorder's memory between flushes: once the spans
#: waiting in the core pass half its memory cap (``configure(memory_cap=...)``), it flushes
#: early rather than let the cap drop the newest (a rank recording millions of spans a
#: second fills the default 64 MiB in well under the default interval).
PRESSURE_POLL_S = 0.05


#: Every recorder running in this process, oldest first: record() blocks nest and overlap
#: (each has its own cursor on the drained spans), and a program's own record(dest) runs
#: beside the one ``hotspan run`` or ``HOTSPAN_OUT`` started.
_running: "list[Recorder]" = []
_active_lock = threading.Lock()
_env_recorder: "Recorder | None" = None
#: The recorders this process started because its parent was recording (``follow``): stopped
#: with the ``HOTSPAN_OUT`` one, at exit, at multiprocessing's exit and on SIGTERM.
_followers: "list[Recorder]" = []
#: ENV_CHILDREN as it was before this process's recordings set it (restored after them).
_children_env_before: "str | None" = None
_children_env_set = False


class Recorder:
    """Streams drained spans to a destination every ``flush_interval`` seconds.

    A context manager; or ``start()`` / ``stop()``. Counts: ``spans`` (delivered or
    kept for the file), ``dropped`` (lost on the way: collector buffer over its cap, a write
    that failed, or still undelivered at ``stop``), and ``errors`` (failed flushes).
    """

    def __init__(
        self,
        dest: str | os.PathLike[str],
        flush_interval: float = 1.0,
        *,
        token: str | None = None,
        buffer_spans: int = 1 << 21,
        stop_timeout: float = 5.0,
    ):
        if isinstance(flush_interval, bool) or not isinstance(flush_interval, (int, float)):
            raise TypeError(
                f"record(): flush_interval must be a number of seconds, not {type(flush_interval).__name__}"
            )
        if not 0 < flush_interval <= 3600:
            raise ValueError(
                f"record(): flush_interval must be in (0, 3600] seconds, not {flush_interval}"
            )
        if isinstance(buffer_spans, bool) or not isinstance(buffer_spans, int) or buffer_spans < 0:
            raise ValueError(f"record(): buffer_spans must be an int >= 0, not {buffer_spans!r}")
        from ..formats._uri import local_path, redact_uri

        # "~/runs/a": the home folder's, as the shell would; a forked child records to it too
        dest = self._target = local_path(dest)
        self.dest = redact_uri(self._target)  # shown in messages and events: no credentials
        self.flush_interval = float(flush_interval)
        self.stop_timeout = float(stop_timeout)
        self._token = token if token is not None else (os.environ.get(ENV_TOKEN) or None)
        self._buffer_spans = buffer_spans
        self._sink = sink_for(dest, self._token, buffer_spans)
        self._lock = threading.Lock()
        # Who holds _lock, and which thread is inside stop(): a finalizer and atexit may both
        # stop the recorder on one thread (the nested call returns at once), and the SIGTERM
        # thread may stop it while another thread is (it waits for that stop to end).
        self._lock_owner: int | None = None
        self._stopping: int | None = None
        self._stop_guard = threading.Lock()
        self._stopped = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._last: pa.Table | None = None
        self._reader: hub.Reader | None = None  # this recorder's cursor, while it runs
        self.write_errors = 0
        self._write_dropped = 0
        self._core_dropped_at_start: int | None = None
        self._no_room = 0  # flushes put off: no room in memory for them
        self._undelivered = 0  # spans left in the core at stop: no room to take them
        self._counter_parts = 0  # counter parts written (their names' sequence numbers)
        self.flushes = 0
        #: Named to the processes started while it runs (``children_specs``); not
        #: ``HOTSPAN_OUT``'s, which their environment names already.
        self._for_children = True

    @property
    def kind(self) -> str:
        """``"file"``, ``"directory"`` or ``"collector"``."""
        return self._sink.kind

    @property
    def running(self) -> bool:
        return self._thread is not None and self._pid == os.getpid()

    @property
    def spans(self) -> int:
        # in the raw log while it runs; at stop, those left in it (no room to convert them)
        sink = self._sink
        if not isinstance(sink, DatasetSink):
            return sink.spans
        return sink.spans + (sink.raw_spans() if sink.raw else sink.raw_kept)

    @property
    def dropped(self) -> int:
        reader_dropped = self._reader.dropped if self._reader is not None else 0
        return self._sink.dropped + self._write_dropped + reader_dropped

    def start(self) -> "Recorder":
        with _active_lock:
            if self.running:
                return self
            # The flusher imports pyarrow; that import chain reaches concurrent.futures,
            # which registers a threading atexit hook and fails once the interpreter is
            # shutting down (a short program's exit can race the flusher's first import).
            # Importing that one module here (~1 ms, no pyarrow) takes the race away.
            with contextlib.suppress(Exception):  # out of memory, an import fails: go on
                import concurrent.futures.thread  # noqa: F401
                import mmap  # noqa: F401  (room_to_flush, which must not import out of memory)
                import resource  # noqa: F401
            _running.append(self)
            self._core_dropped_at_start = _native.dropped()
            self._reader = hub.attach(f"record({self.dest})")
            if hasattr(self._sink, "since_ns"):  # its start part says it (raw log readers)
                self._sink.since_ns = self._reader.since_ns
            self._pid = os.getpid()
            self._stop.clear()
            self._open_now()
            self._use_raw()
            self._thread = threading.Thread(target=self._loop, name="hotspan-record", daemon=True)
            try:
                start_quiet(self._thread)  # signals stay with the program's threads
            except RuntimeError as exc:  # "can't start new thread": out of memory
                _warmed.set()  # no flusher importing anything for fork() to wait for
                # Recording goes on without a flusher: stop() takes and writes every span.
                _say(
                    f"recording to {self.dest}: no flusher thread ({exc}): the spans are "
                    "written at stop, if memory allows"
                )
            _export_to_children()
        if getattr(self._sink, "remote", False):
            # pyarrow.fs registers its S3 finalizer with atexit when first imported, and atexit
            # runs the last registered first: imported on the flusher, after us, it would
            # finalize S3 before our final flush, which would then start S3 again and crash
            # the exit. So for an object-store destination (only) the program's thread pays
            # for pyarrow's import now, before our hook is registered.
            import pyarrow.fs  # noqa: F401
        lifecycle.stop_at_exit(self._atexit)
        emit(RecordingStarted(self.dest, self.kind))
        return self

    def children_spec(self) -> dict[str, Any]:
        """Where a process started while this recording runs records (``ENV_CHILDREN``): the
        same directory, store or collector; for a file, a hidden directory beside it whose
        parts the file takes in at ``stop()``."""
        from .._run import run_id

        dest = getattr(self._sink, "children_dest", None) or self._target
        return {
            "dest": dest,
            "flush_interval": self.flush_interval,
            "token": self._token,
            "run": run_id(),
        }

    def _open_now(self) -> None:
        """A local directory: its metadata part is written before start() returns, so a run
        killed at any moment after start() (a pool worker terminated at once, a SIGKILL)
        loads, as an empty table with its metadata, and a parent can tell a worker that
        started from one that never did. That costs the caller pyarrow's import (~0.2 s on an
        idle host; a forked child has it already); on the flusher, where it used to happen, a
        program whose threads hold the interpreter lock delayed it by seconds (issue 21)."""
        if self.kind != "directory" or getattr(self._sink, "remote", False):
            return  # a file is written at stop; a store or a collector: the flusher's network
        track_children()
        try:
            # pyarrow's thread pools start here, from the program's thread: with the signals
            # blocked, so that they inherit the mask and a SIGTERM stays with the program
            with signals_blocked():
                _warm_up(self.kind)
                # pyarrow aborts the process where an allocation fails half-way (see
                # room_to_flush): without room, the metadata part waits for the first flush
                with self._locked() as acquired:
                    # hasattr: always true here (a local directory), and says so to mypy
                    if acquired and hasattr(self._sink, "open") and room_to_flush():
                        self._sink.open()
        except Exception as exc:  # noqa: BLE001 - never break the program over its tracing
            self.write_errors += 1
            _say(f"recording to {self.dest}: {_problem(exc)} (recording goes on)")

    def _loop(self) -> None:
        # pyarrow loads here, on the flusher, not in the recording program's thread: a
        # program that only records (HOTSPAN_OUT at import) starts as fast as without it.
        # stop() joins this thread, so the imports are done before any flush at exit.
        try:
            _warm_up(self.kind)
            with self._locked() as acquired:
                if acquired and hasattr(self._sink, "open") and room_to_flush():
                    self._sink.open()
                    self._use_raw()
        except Exception as exc:  # noqa: BLE001 - the flusher must outlive a bad start
            self.write_errors += 1
            _say(f"recording to {self.dest}: {_problem(exc)} (recording goes on)")
        finally:
            _warmed.set()
        next_flush = time.monotonic() + self.flush_interval
        while True:
            wait = min(next_flush - time.monotonic(), PRESSURE_POLL_S)
            try:
                if self._stop.wait(max(wait, 0.0)):
                    return
            except Exception:  # noqa: BLE001 - out of memory: "can't allocate lock" (a wait's)
                # The flusher retries rather than dies: spans keep reaching the destination
                # once memory is back, and stop() still has a flusher to stop.
                time.sleep(max(wait, PRESSURE_POLL_S))
                if self._stop.is_set():
                    return
            try:
                reader = self._reader  # None once the drain thread writes the spans (raw log)
                if (
                    time.monotonic() >= next_flush
                    or _under_memory_pressure()
                    or (reader is not None and reader.under_pressure())
                ):
                    next_flush = time.monotonic() + self.flush_interval
                    if not room_to_flush():
                        self._no_room += 1
                        if self._no_room == 1:
                            _say(
                                f"recording to {self.dest}: out of memory, flushes wait for "
                                "room (spans past the memory cap are dropped, counted at stop)"
                            )
                        continue
                    with _prompt_handoffs():
                        self.flush()
            except Exception as exc:  # noqa: BLE001 - the flusher must outlive a bad flush
                self.write_errors += 1
                if self.write_errors == 1:
                    _say(
                        f"recording to {self.dest}: {_problem(exc)} (recording goes on; "
                        "the spans lost are counted at stop)"
                    )

    def _say_raw(self) -> None:
        """What the drain thread wrote to the raw log since the last flush, as the events a
        flush of a part gives: ``Flushed``, and ``FlushFailed`` for a write that failed."""
        stats = _native._raw_stats()
        said = getattr(self, "_raw_said", None) or {"spans": 0, "bytes": 0, "write_errors": 0}
        self._raw_said = {k: int(stats[k]) for k in said}
        if stats["write_errors"] > said["write_errors"]:
            emit(FlushFailed(self.dest, OSError(f"{self.dest}: could not append to the raw log")))
        if stats["spans"] > said["spans"]:
            emit(
                Flushed(
                    self.dest,
                    int(stats["spans"]) - said["spans"],
                    int(stats["bytes"]) - said["bytes"],
                    0.0,
                )
            )

    def _use_raw(self) -> None:
        """Once the sink's raw log is open (a local directory: formats/_rawlog.py), the
        native drain thread writes this recording's spans as it moves them out of the rings
        (no interpreter lock, a few ns a span): this recorder takes nothing from the hub any
        more, and its flushes only write the counters and follow the children. What the hub
        had queued for it already goes out as a part of its own."""
        if self._reader is None or not isinstance(self._sink, DatasetSink):
            return
        self._sink.start_raw()
        if not self._sink.raw:
            return
        reader, self._reader = self._reader, None
        hub.detach(reader)
        from ._sinks import metadata_table

        self._last = metadata_table()  # what stop() hands the sink (no drain to take it from)
        for table in reader.take_queued():
            if table.num_rows:
                self._sink.write(table)

    @contextlib.contextmanager
    def _locked(self, timeout: float = -1) -> Iterator[bool]:
        """``_lock``, noting its owner; yields False (not acquired) when this thread holds it
        already (a signal handler nested in a flush) or when ``timeout`` passed."""
        me = threading.get_ident()
        if self._lock_owner == me or not self._lock.acquire(timeout=timeout):
            yield False
            return
        self._lock_owner = me
        try:
            yield True
        finally:
            self._lock_owner = None
            self._lock.release()

    def flush(self, *, lock_timeout: float = -1) -> None:
        """Drain now and hand the spans to the destination (the flusher does this every interval)."""
        with self._locked(lock_timeout) as acquired:
            if not acquired:
                return
            if self._reader is None and getattr(self._sink, "raw", False):
                self.flushes += 1  # the spans: written by the drain thread (_use_raw)
                track_children()
                self._flush_counters()
                self._say_raw()
                return
            table = self._take()
            written = False
            try:
                # What stop() needs of it: the schema and its metadata (the dropped counts
                # only grow), not the rows: holding the whole batch until the next flush kept
                # its column buffers from going back to the drain's pool before the next
                # drain. Built from no batches: Schema.empty_table() makes arrays from Python
                # lists, which imports pandas (seconds of bytecode holding the GIL, on a
                # collector client too).
                import pyarrow as pa  # loaded already: the drain built the table

                self._last = pa.Table.from_batches([], schema=table.schema)
                self.flushes += 1
                if self.kind == "directory":
                    track_children()
                    self._flush_counters()
                if table.num_rows == 0:
                    if hasattr(self._sink, "idle"):
                        self._sink.idle()
                    return
                began = time.perf_counter()
                self._sink.write(table)
                written = True
                emit(Flushed(self.dest, table.num_rows, table.nbytes, time.perf_counter() - began))
            except Exception as exc:  # noqa: BLE001 - a failing destination must not stop the program
                if written:
                    return  # only the event failed (out of memory): the spans are out
                self.write_errors += 1
                self._write_dropped += table.num_rows
                with contextlib.suppress(Exception):
                    emit(FlushFailed(self.dest, exc))
                if self.write_errors == 1:
                    _say(
                        f"could not write spans to {self.dest}: {_problem(exc)} "
                        f"(recording goes on; {table.num_rows:,} spans dropped)"
                    )

    def _flush_counters(self) -> None:
        """The counters recorded since the last flush, into the local run directory's
        ``_counters/`` folder (hotspan.counters: a consumer of its own)."""
        if getattr(self._sink, "remote", False):
            return
        try:
            from .. import counters

            table = counters.take(self)
            if table.num_rows:
                self._counter_parts += 1
                counters.write_run_part(self._target, table, seq=self._counter_parts)
        except Exception as exc:  # noqa: BLE001 - a failing destination must not stop the program
            _say(f"could not write counters to {self.dest}: {_problem(exc)}")

    def _take(self) -> pa.Table:
        """The spans since this recorder last took them (its own cursor: a user's drain()
        takes nothing from it)."""
        if self._reader is None:  # flush() before start(): no cursor of its own yet
            from .._api import drain

            return drain()
        return self._reader.take()

    def stop(self, timeout: float | None = None) -> None:
        """Final drain and flush; then close the destination (write the file, deliver what a
        collector has not yet taken, for at most ``timeout`` seconds: default ``stop_timeout``).

        Safe to enter again while it runs: a nested call on the same thread (a finalizer and
        ``atexit`` both) returns at once, the outer one does the work; a call from another
        thread (the SIGTERM thread) waits for that stop to end, at most the time it may take."""
        timeout = self.stop_timeout if timeout is None else timeout
        me = threading.get_ident()
        with self._stop_guard:
            if not self.running:
                return
            stopping = self._stopping
            if stopping is None:
                self._stopping = me
                self._stopped.clear()
        if stopping is not None:
            if stopping != me:
                with contextlib.suppress(Exception):  # "can't allocate lock": no wait then
                    self._stopped.wait(timeout + 2.0)
            return
        try:
            self._stop_now(timeout)
        except Exception as exc:  # noqa: BLE001 - stop() never raises into the program
            # Out of memory (MemoryError, "can't allocate lock") past what _stop_now guards:
            # the recording ends here; what it could not deliver is said in one line.
            self._thread = None
            _say(
                f"{self._lost():,} spans could not be delivered to {self.dest} "
                f"(stopped: {_problem(exc)})"
            )
        finally:
            self._stopping = None
            self._stopped.set()
        inherited = _inherited()
        if self in inherited and not any(r.running for r in inherited):
            lifecycle.die_of_sigterm_received()

    def _stop_now(self, timeout: float) -> None:
        raw = self._reader is None and getattr(self._sink, "raw", False)
        self._stop.set()
        thread = self._thread
        if thread is not None and thread.is_alive() and thread is not threading.current_thread():
            thread.join(timeout=max(timeout, 1.0))
        try:
            # The last flush: device spans' pairs still running on the GPU would be lost.
            _api.wait_for_devices()
        except Exception as exc:  # noqa: BLE001 - a device error must not lose the host spans
            _warn(f"could not wait for device spans: {type(exc).__name__}: {exc}")
        room = False
        try:
            room = room_to_flush()
            if room:
                self.flush(lock_timeout=timeout)
        except Exception as exc:  # noqa: BLE001 - out of memory taking the last spans
            self.write_errors += 1
            _say(f"could not take the last spans for {self.dest}: {_problem(exc)}")
        try:
            with self._locked(timeout) as acquired:
                if acquired and (room or self._last is not None):
                    last = self._last if self._last is not None else self._take()
                    self._sink.close(last, timeout)
        except Exception as exc:  # noqa: BLE001
            _say(f"could not finish writing spans to {self.dest}: {_problem(exc)}")
        finally:
            self._thread = None
            if self._reader is not None:
                hub.detach(self._reader)
            if "hotspan.counters" in sys.modules:
                sys.modules["hotspan.counters"].detach(self)
            with _active_lock:
                if self in _running:
                    _running.remove(self)
                _export_to_children()
            lifecycle.forget_at_exit(self._atexit)
            if not room and not raw:
                # Left in the core, where a later drain() may still get them: not delivered
                # here (swept out of the rings first, so that the count is all of them).
                # (With a raw log they are in it, whatever the core still holds for drain().)
                with contextlib.suppress(Exception):
                    _native._sweep()
                    self._undelivered += int(_native._pending()["spans"])
        lost = self._lost()
        if lost:
            core = lost - self.dropped
            why = (
                f" ({core:,} never left hotspan's memory: out of memory, or its cap)"
                if core
                else ""
            )
            _say(f"{lost:,} spans could not be delivered to {self.dest}{why}")

    def _lost(self) -> int:
        """Spans recorded while this recorder ran that never reached its destination: its own
        losses on the way, and the core's drops since it started (out of memory, the cap)."""
        core = 0
        if self._core_dropped_at_start is not None:
            with contextlib.suppress(Exception):
                core = max(0, _native.dropped() - self._core_dropped_at_start)
        return self.dropped + core + self._undelivered

    def _atexit(self) -> None:
        if self.running:
            self.stop()

    def close(self, timeout: float | None = None) -> None:
        """The same as ``stop()``: every handle (recorders, live logs, subscriptions, event
        handles, collectors) closes with ``close()`` and is a context manager."""
        self.stop(timeout)

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "recording" if self.running else "stopped"
        return (
            f"<hotspan.Recorder {self.kind} {self.dest!r} every {self.flush_interval:g}s, {state}>"
        )


#: The interpreter's switch interval while the flusher flushes (seconds; CPython's default
#: is 0.005). A flush releases the interpreter lock a dozen times or more (the native drain,
#: pyarrow's Parquet write, fsync, the rename) and must take it back each time: while the
#: program's threads run Python flat out, each take waits a whole switch interval, so a
#: flush that needs 20 ms of work took seconds (issue 21: parts every ~2 s at
#: flush_interval=0.1). Shorter for the flush alone, the lock comes back within ~0.2 ms; the
#: program's threads are made to hand it over more often only while a flush runs.
FLUSH_SWITCH_INTERVAL_S = 0.0002


@contextlib.contextmanager
def _prompt_handoffs() -> Iterator[None]:
    previous = sys.getswitchinterval()
    if previous <= FLUSH_SWITCH_INTERVAL_S:  # the program's own choice is shorter: keep it
        yield
        return
    sys.setswitchinterval(FLUSH_SWITCH_INTERVAL_S)
    # Read back: the interpreter keeps microseconds, so it is not the float we gave
    # (0.00019999999999999998); compared with ours, the program's was never put back.
    ours = sys.getswitchinterval()
    try:
        yield
    finally:
        # The program may have set its own meanwhile (only ours is replaced).
        if sys.getswitchinterval() == ours:
            sys.setswitchinterval(previous)


def _touch_cxx_thread_state() -> None:
    """Have the C++ runtime allocate this thread's exception state now, while memory is free:
    glibc allocates a dlopen'ed library's thread-local data on first use, and when that first
    use is a C++ throw under ``ulimit -v`` (pyarrow's bad_alloc) the allocation fails and glibc
    ends the process ("cannot allocate memory for thread-local data: ABORT")."""
    try:
        import ctypes

        ctypes.CDLL("libstdc++.so.6").__cxa_get_globals()
    except Exception:  # noqa: BLE001 - no libstdc++ (macOS: libc++), nothing to prepare
        pass


def _problem(exc: BaseException) -> str:
    """An exception in words (a MemoryError has none of its own)."""
    if isinstance(exc, MemoryError) or "can't allocate" in str(exc):
        return "out of memory" + (f" ({exc})" if str(exc) else "")
    return f"{type(exc).__name__}: {exc}"


def _say(message: str) -> None:
    """One line on stderr (sinks.warn), never an exception: out of memory, it says nothing."""
    with contextlib.suppress(Exception):
        _warn(message)


def _under_memory_pressure() -> bool:

    pending = _native._pending()
    pressed: bool = pending["bytes"] * 2 >= pending["memory_cap"]
    return pressed


# Set once the flusher has imported what flushing needs. A fork while another thread is
# half-way through importing pyarrow would hand the child a partially initialised module,
# so fork waits for it (bounded: a wedged import must not hang the program).
_warmed = threading.Event()


_fork_held: "list[threading.Lock]" = []


def _before_fork() -> None:
    """Fork only between two flushes: a child forked while the flusher is half-way through
    an import or a Parquet write inherits that import's lock (or pyarrow's) held by a thread
    it does not have, and its own flusher waits on it forever (a forked worker then loses
    everything it recorded). Bounded: a wedged flush must not hang the program."""
    recorders = [r for r in _running if r.running]
    if not recorders:
        return
    if any(r.kind == "directory" for r in recorders):
        track_children()  # a fork-started child is added to the set after this fork
    if not _warmed.is_set():
        _warmed.wait(30)
    for recorder in recorders:
        if recorder._lock_owner != threading.get_ident() and recorder._lock.acquire(timeout=10):
            _fork_held.append(recorder._lock)


def _after_fork_parent() -> None:
    global _fork_held
    held, _fork_held = _fork_held, []
    for lock in held:
        lock.release()


def _warm_up(kind: str) -> None:
    """Import here, on the starting thread, what the flusher will need: a first import on the
    flusher thread during interpreter shutdown (a short program) fails ("can't register
    atexit after shutdown"). pyarrow imports pandas on its first ``pa.array(list)``."""
    import pyarrow as pa

    if kind == "collector":
        # Nothing on a collector client's path builds an array from Python objects or writes
        # Parquet: pandas and pyarrow.parquet stay unloaded (importing pandas is a second or
        # more of bytecode holding the GIL, taken from the program's threads as it records).
        import pyarrow.flight  # noqa: F401

        from .. import _table  # noqa: F401  (the drain's table builder, and numpy)

        _touch_cxx_thread_state()
        return
    pa.array([""], pa.string())
    import pyarrow.parquet  # noqa: F401

    _touch_cxx_thread_state()

    if kind == "directory":
        from ..formats import dataset  # noqa: F401  (and the Parquet exporter it writes with)
        from ..formats._registry import exporter_for

        exporter_for("x.parquet")


def record(
    dest: str | os.PathLike[str],
    flush_interval: float = 1.0,
    *,
    token: str | None = None,
    buffer_spans: int = 1 << 21,
    stop_timeout: float = 5.0,
) -> Recorder:
    """A recorder streaming drained spans to ``dest`` every ``flush_interval`` seconds.

    ``dest``: a file (``.parquet``, ``.arrow``, ``.json``, ... : written at ``stop()``), a
    directory (a Parquet dataset ``dest/part-r<R>-<pid>-<token>-<n>.parquet``, a part per
    flush; a path without a known trace extension counts as one), the same dataset in object
    storage or another file system (``s3://bucket/run``, ``gs://...``, ``hdfs://...``: any
    URI ``pyarrow.fs.FileSystem.from_uri`` accepts; credentials from the store's usual
    environment and config; each part put whole), or ``grpc://HOST:PORT``
    (a ``hotspan collect`` server; ``token`` or ``HOTSPAN_TOKEN`` if it wants one; up to
    ``buffer_spans`` spans wait for it while it is away). Several collectors,
    ``grpc://a:1,grpc://b:2``: the rank sends to collector ``rank % N`` and fails over to the
    next one of the list when that one is down.

    Use it as a context manager, or call ``start()`` / ``stop()``. Recorders nest and overlap,
    each with its own cursor: each gets every span recorded while it runs (a program's own
    ``record()`` under ``hotspan run`` or ``HOTSPAN_OUT`` too, beside the launcher's).
    """
    return Recorder(
        dest, flush_interval, token=token, buffer_spans=buffer_spans, stop_timeout=stop_timeout
    )


def active() -> Recorder | None:
    """The recorder running in this process (the latest started, when several run), if any."""
    running = [r for r in _running if r.running]
    return running[-1] if running else None


# --------------------------------------------------------------------------- HOTSPAN_OUT


def start_from_env() -> Recorder | None:
    """If ``HOTSPAN_OUT`` is set, start recording to it (called when hotspan is imported); and
    record to the destinations of the ``record()`` blocks running in the process that started
    this one (``ENV_CHILDREN``, see ``follow``).

    A bad destination is reported on stderr and the program runs on unrecorded. A SIGTERM
    handler (flush, then die of SIGTERM as before) is installed only where the program has
    none.
    """
    from ._children import in_forkserver

    started = None
    dest = os.environ.get(ENV_OUT, "").strip()
    if dest and _env_recorder is None:
        try:
            interval = float(os.environ.get(ENV_INTERVAL, "") or 1.0)
            started = start_env_recorder(dest, interval)
        except Exception as exc:  # noqa: BLE001 - never break the program over its tracing
            _warn(f"{ENV_OUT}={dest}: not recording: {type(exc).__name__}: {exc}")
    if not in_forkserver():  # its environment is the one it started with: out of date
        follow(children_specs_from_env())
    return started


def start_env_recorder(dest: str | os.PathLike[str], flush_interval: float = 1.0) -> Recorder:
    """Record this process to ``dest`` the way ``HOTSPAN_OUT`` does: until exit (``atexit``,
    SIGTERM where the program has no handler of its own, and ``multiprocessing``'s exit of
    its children, which skips ``atexit``), with every forked child recording to the same
    directory. ``hotspan run`` uses it for the process it runs the program in."""
    global _env_recorder
    from .._run import start_run

    start_run()  # this process is the run's first: its children inherit the id
    recorder = record(dest, flush_interval)
    recorder._for_children = False
    recorder.start()
    _env_recorder = recorder
    _stop_with_the_process(recorder)
    return recorder


def stop_env_recorder() -> None:
    """Stop recording started by ``HOTSPAN_OUT`` or inherited from a recording parent (the
    collector does, for itself)."""
    global _env_recorder
    for recorder in _inherited():
        recorder.stop()
    _env_recorder = None
    _followers.clear()
    lifecycle.stop_flushing_on_sigterm()


def _inherited() -> "list[Recorder]":
    """The recorders this process runs until it ends: ``HOTSPAN_OUT``'s, and those it
    follows its parent's recordings with."""
    return ([_env_recorder] if _env_recorder is not None else []) + list(_followers)


def _stop_inherited() -> None:
    """What SIGTERM runs: every recorder of ``_inherited``, the last started first."""
    for recorder in reversed(_inherited()):
        recorder.stop()


def _stop_with_the_process(recorder: Recorder) -> None:
    """``recorder`` (of ``_inherited``) runs until the process ends, however it ends."""
    lifecycle.flush_on_sigterm(_stop_inherited, recorder.stop_timeout)
    lifecycle.stop_with_multiprocessing(recorder)


# --------------------------------------------------------------------------- children


def children_specs() -> "list[dict[str, Any]]":
    """Where a process started now records: one entry per ``record()`` running here (not
    ``HOTSPAN_OUT``'s, which the child's environment names already), in order, without
    repeats."""
    specs: dict[str, dict[str, Any]] = {}
    for recorder in _running:
        if recorder.running and recorder._for_children:
            spec = recorder.children_spec()
            specs.setdefault(spec["dest"], spec)
    return list(specs.values())


def _same_destination(a: str, b: str) -> bool:
    if "://" in a or "://" in b:
        return a.rstrip("/") == b.rstrip("/")
    return os.path.abspath(a) == os.path.abspath(b)


def children_specs_from_env() -> "list[dict[str, Any]]":
    import json

    raw = os.environ.get(ENV_CHILDREN, "").strip()
    if not raw:
        return []
    try:
        specs = json.loads(raw)
        if not isinstance(specs, list) or not all(
            isinstance(spec, dict) and isinstance(spec.get("dest"), str) for spec in specs
        ):
            raise ValueError("expected a JSON list of destinations")
    except ValueError as exc:
        _warn(f"{ENV_CHILDREN}: not recording: {exc}")
        return []
    return specs


def _export_to_children() -> None:
    """Name this process's recordings in its environment (``ENV_CHILDREN``), for the
    processes it starts (spawned, started by ``subprocess``...), and to ``multiprocessing``
    (forkserver children, whose environment is the server's); called with ``_active_lock``
    held whenever a recorder starts or stops."""
    global _children_env_before, _children_env_set
    import json

    specs = children_specs()
    if specs:
        if not _children_env_set:
            _children_env_before = os.environ.get(ENV_CHILDREN)
            _children_env_set = True
        os.environ[ENV_CHILDREN] = json.dumps(specs)
        from ._children import offer_to_multiprocessing

        offer_to_multiprocessing()  # imports nothing: multiprocessing, if loaded, or as it loads
    elif _children_env_set:
        if _children_env_before is None:
            os.environ.pop(ENV_CHILDREN, None)
        else:
            os.environ[ENV_CHILDREN] = _children_env_before
        _children_env_set = False


def follow(specs: "list[dict[str, Any]]") -> None:
    """Record this process, until it ends, to each destination of a recording running in
    the process that started it (``children_specs`` there), into the same run; one already
    recorded to is not recorded to twice. Called in a child: when hotspan is imported (the
    environment), after a fork, and by ``multiprocessing`` as it unpickles the process."""
    from .._run import ENV_RUN_ID

    for spec in specs:
        dest = spec.get("dest")
        if not isinstance(dest, str) or any(
            r.running and _same_destination(r._target, dest) for r in _running
        ):
            continue  # recorded to already (HOTSPAN_OUT's, or named twice)
        run = spec.get("run")
        if isinstance(run, str) and run:
            os.environ[ENV_RUN_ID] = run  # the parent's run (a forkserver's environment is old)
        try:
            recorder = record(
                dest, float(spec.get("flush_interval") or 1.0), token=spec.get("token")
            ).start()
        except Exception as exc:  # noqa: BLE001 - never break the program over its tracing
            _warn(f"not recording process {os.getpid()} to {dest}: {type(exc).__name__}: {exc}")
            continue
        _followers.append(recorder)
        _stop_with_the_process(recorder)


def _after_fork_child() -> None:
    """A forked child has no flusher thread: forget the parent's recorders; record the
    child's own spans where the parent's recordings would have a child's (under its own part
    names: its pid, and a token of its own): ``HOTSPAN_OUT``'s directory and each
    ``record()``'s (see ``follow``), flushed on SIGTERM by a thread of its own (``lifecycle``
    starts it after the fork steps: the parent's is not in the child)."""
    global _running, _env_recorder, _active_lock
    global _fork_held, _followers
    _active_lock = threading.Lock()
    _fork_held = []  # the child's copies of the parent's recorders are replaced below
    forget_children()  # the parent's children are not this one's to name
    parents, _running = _running, []
    env = _env_recorder
    _env_recorder = None
    _followers = []
    for recorder in parents:  # none runs in the child: no flusher thread here
        recorder._thread = None
        recorder._lock = threading.Lock()
        recorder._lock_owner = recorder._stopping = None
        recorder._stop_guard = threading.Lock()
    specs: dict[str, dict[str, Any]] = {}
    for recorder in parents:
        if recorder._for_children:
            spec = recorder.children_spec()
            specs.setdefault(spec["dest"], spec)
    parent = env if env is not None and env in parents else None
    if parent is not None and parent.kind == "directory":
        # only HOTSPAN_OUT's directory follows; gRPC must not be used across fork
        try:
            child = record(parent._target, parent.flush_interval)
            child._for_children = False
            child.start()
        except Exception as exc:  # noqa: BLE001
            _warn(f"{ENV_OUT}: not recording in forked child {os.getpid()}: {exc}")
        else:
            _env_recorder = child
            _stop_with_the_process(child)
    follow(list(specs.values()))


lifecycle.on_fork(
    "recorder",
    before=_before_fork,
    after_in_parent=_after_fork_parent,
    after_in_child=_after_fork_child,
)
