"""Recording to a destination: a background thread drains the recorder every interval and
streams the spans to a file, a dataset directory or a collector.

    with hotspan.record("run/", flush_interval=1.0):     # rank=R/part-<pid>-<token>-<n>.parquet
        train()
    rec = hotspan.record("grpc://127.0.0.1:8815").start(); ...; rec.stop()
    hotspan.record("trace.parquet")                      # any export format, written at stop

``HOTSPAN_OUT=dest`` in the environment starts recording when hotspan is imported and
flushes at exit (normal exit, ``multiprocessing``'s exit of its children, and SIGTERM when
the program has no handler of its own), so a launcher (torchrun, mpirun, multiprocessing)
needs no code change. Children follow a directory: forked ones through the at-fork hook,
spawn and forkserver ones (which inherit ``HOTSPAN_OUT``) when they import hotspan. ``HOTSPAN_FLUSH_INTERVAL``
(seconds) and ``HOTSPAN_TOKEN`` (for a collector) go with it.

Parts reach the disk (or the collector) every interval: a process killed with SIGKILL loses
at most its last interval. The recorder reads its own cursor of the hub (recording/hub.py):
``drain()``, ``live()`` and subscribers still get every span while it records.
"""
from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import _api
from . import hub  # before this module's fork hook: the hub resets first in a child
from ..quiet_threads import start_quiet
from ..events import FlushFailed, Flushed, RecordingStarted, emit

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["Recorder", "record"]

ENV_OUT = "HOTSPAN_OUT"
ENV_INTERVAL = "HOTSPAN_FLUSH_INTERVAL"
ENV_TOKEN = "HOTSPAN_TOKEN"

#: How often the flusher looks at the recorder's memory between flushes: once the spans
#: waiting in the core pass half its memory cap (``configure(memory_cap=...)``), it flushes
#: early rather than let the cap drop the newest (a rank recording millions of spans a
#: second fills the default 64 MiB in well under the default interval).
PRESSURE_POLL_S = 0.05

_active: "Recorder | None" = None
_active_lock = threading.Lock()
_env_recorder: "Recorder | None" = None


def _warn(message: str) -> None:
    try:
        print(f"hotspan: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


# --------------------------------------------------------------------------- sinks


class _FileSink:
    """Any export format: batches kept in memory, the file written (atomically) at close."""

    kind = "file"

    def __init__(self, path: Path):
        from ..formats.registry import known_format

        # Unknown extension: fail now, not at exit; without importing the codec (and
        # pyarrow with it) on the recording program's thread.
        known_format(path)
        if path.is_dir():
            raise IsADirectoryError(f"{path}: is a directory")
        self.path = path
        self.tables: list[pa.Table] = []
        self.dropped = 0
        self.spans = 0

    def write(self, table: pa.Table) -> None:
        self.tables.append(table)
        self.spans += table.num_rows

    def close(self, last: pa.Table, timeout: float) -> None:
        from ..formats import export

        tables = [t for t in self.tables if t.num_rows] or [last]
        meta = last.schema.metadata  # the latest: dropped counts only grow
        import pyarrow as pa

        table = pa.concat_tables([t.replace_schema_metadata(meta) for t in tables])
        self.path.parent.mkdir(parents=True, exist_ok=True)
        export(table, self.path)
        self.tables = []


class _DatasetSink:
    """A hive-partitioned Parquet dataset: one part per flush, written atomically, under a
    name drawn when the recording starts (``part-<pid>-<token>-<n>``) that no other
    recording uses, and never over an existing part."""

    kind = "directory"

    def __init__(self, directory: Path):
        if directory.exists() and not directory.is_dir():
            raise NotADirectoryError(f"{directory}: exists and is not a directory")
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.token: str | None = None
        self.seq = 0
        self.dropped = 0
        self.spans = 0
        self.parts = 0

    def open(self) -> None:
        """On the flusher, once pyarrow is loaded: sweep what killed writers left, draw this
        recording's token, and write its metadata part (no rows), so that a run killed
        before its first flush still loads, as an empty table with its metadata."""
        if self.token is not None:
            return
        from ..formats.dataset import new_token, sweep_temporaries

        sweep_temporaries(self.directory)
        self.token = new_token()
        self._write(_metadata_table(), kind="start")

    def write(self, table: pa.Table) -> None:
        self.open()
        self._write(table)
        self.spans += table.num_rows

    def _write(self, table: pa.Table, **part_meta: Any) -> None:
        from .._api import rank as current_rank
        from ..formats.dataset import write_part

        rank = table.column("rank")[0].as_py() if table.num_rows else current_rank()
        write_part(table, self.directory, rank=rank, pid=os.getpid(), seq=self.seq, token=self.token,
                   part_meta={"sink_dropped": self.dropped, **part_meta})
        self.seq += 1
        self.parts += 1

    def close(self, last: pa.Table, timeout: float) -> None:
        pass


def _metadata_table() -> pa.Table:
    """No spans, and this process's metadata as a drain would give it (without draining)."""
    from .. import _native
    from .._api import rank as current_rank
    from .._version import __version__
    from .._schema import SPAN_SCHEMA
    from .._table import metadata

    meta = metadata(rank=current_rank(), pid=os.getpid(), clock=_native._clock_info(), all_threads=[],
                    version=__version__)
    return SPAN_SCHEMA.empty_table().replace_schema_metadata(meta)


class _CollectorSink:
    kind = "collector"

    def __init__(self, url: str, token: str | None, buffer_spans: int):
        from .collector import CollectorClient

        self.client = CollectorClient(url, token=token, buffer_spans=buffer_spans)

    @property
    def dropped(self) -> int:
        return self.client.dropped

    @property
    def spans(self) -> int:
        return self.client.sent_spans

    def write(self, table: pa.Table) -> None:
        self.client.send(table)

    def idle(self) -> None:
        self.client.pump()

    def close(self, last: pa.Table, timeout: float) -> None:
        self.client.close(timeout)


def _sink_for(dest: str | os.PathLike, token: str | None, buffer_spans: int):
    text = os.fspath(dest)
    if isinstance(text, bytes):
        text = text.decode()
    if text.startswith(("grpc://", "grpc+tcp://")):
        return _CollectorSink(text, token, buffer_spans)
    if "://" in text:
        raise ValueError(f"{text}: unknown destination scheme (expected a file, a directory or grpc://HOST:PORT)")
    path = Path(text)
    from ..formats import format_of

    looks_like_file = format_of(path) is not None
    if path.is_dir() or text.endswith(("/", os.sep)) or not looks_like_file:
        return _DatasetSink(path)
    return _FileSink(path)


# --------------------------------------------------------------------------- recorder


class Recorder:
    """Streams drained spans to a destination every ``flush_interval`` seconds.

    A context manager; or ``start()`` / ``stop()``. Counts: ``spans`` (delivered or
    kept for the file), ``dropped`` (lost on the way: collector buffer over its cap, a write
    that failed, or still undelivered at ``stop``), and ``errors`` (failed flushes).
    """

    def __init__(self, dest: str | os.PathLike, flush_interval: float = 1.0, *, token: str | None = None,
                 buffer_spans: int = 1 << 21, stop_timeout: float = 5.0):
        if isinstance(flush_interval, bool) or not isinstance(flush_interval, (int, float)):
            raise TypeError(f"record(): flush_interval must be a number of seconds, not {type(flush_interval).__name__}")
        if not 0 < flush_interval <= 3600:
            raise ValueError(f"record(): flush_interval must be in (0, 3600] seconds, not {flush_interval}")
        if isinstance(buffer_spans, bool) or not isinstance(buffer_spans, int) or buffer_spans < 0:
            raise ValueError(f"record(): buffer_spans must be an int >= 0, not {buffer_spans!r}")
        self.dest = os.fspath(dest)
        self.flush_interval = float(flush_interval)
        self.stop_timeout = float(stop_timeout)
        self._token = token if token is not None else (os.environ.get(ENV_TOKEN) or None)
        self._buffer_spans = buffer_spans
        self._sink = _sink_for(dest, self._token, buffer_spans)
        self._lock = threading.Lock()
        # Who holds _lock, and which thread is inside stop(): a SIGTERM handler runs on the
        # main thread between two bytecodes, possibly in the middle of a flush or a stop of
        # that same thread. It must never wait for a lock its own thread holds (that waits
        # forever): it sees it is nested and leaves the work to the outer call.
        self._lock_owner: int | None = None
        self._stopping: int | None = None
        self._sigterm_deferred = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid: int | None = None
        self._last: pa.Table | None = None
        self._reader: hub.Reader | None = None  # this recorder's cursor, while it runs
        self.write_errors = 0
        self._write_dropped = 0
        self.flushes = 0

    @property
    def kind(self) -> str:
        """``"file"``, ``"directory"`` or ``"collector"``."""
        return self._sink.kind

    @property
    def running(self) -> bool:
        return self._thread is not None and self._pid == os.getpid()

    @property
    def spans(self) -> int:
        return self._sink.spans

    @property
    def dropped(self) -> int:
        reader_dropped = self._reader.dropped if self._reader is not None else 0
        return self._sink.dropped + self._write_dropped + reader_dropped

    def start(self) -> "Recorder":
        global _active
        with _active_lock:
            if self.running:
                return self
            if _active is not None and _active.running:
                raise RuntimeError(f"hotspan is already recording to {_active.dest}; stop() it first")
            # The flusher imports pyarrow; that import chain reaches concurrent.futures,
            # which registers a threading atexit hook and fails once the interpreter is
            # shutting down (a short program's exit can race the flusher's first import).
            # Importing that one module here (~1 ms, no pyarrow) takes the race away.
            import concurrent.futures.thread  # noqa: F401

            _active = self
            self._reader = hub.attach(f"record({self.dest})")
            self._pid = os.getpid()
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="hotspan-record", daemon=True)
            start_quiet(self._thread)  # signals stay with the program's threads
        atexit.register(self._atexit)
        emit(RecordingStarted(self.dest, self.kind))
        return self

    def _loop(self) -> None:
        # pyarrow loads here, on the flusher, not in the recording program's thread: a
        # program that only records (HOTSPAN_OUT at import) starts as fast as without it.
        # stop() joins this thread, so the imports are done before any flush at exit.
        try:
            _warm_up(self.kind)
            with self._locked() as acquired:
                if acquired and hasattr(self._sink, "open"):
                    self._sink.open()
        except Exception as exc:  # noqa: BLE001 - the flusher must outlive a bad start
            self.write_errors += 1
            _warn(f"recording to {self.dest}: {type(exc).__name__}: {exc} (recording goes on)")
        finally:
            _warmed.set()
        next_flush = time.monotonic() + self.flush_interval
        while True:
            wait = min(next_flush - time.monotonic(), PRESSURE_POLL_S)
            retry = getattr(self._sink, "client", None)
            if retry is not None and retry.queue and not retry.refused:
                wait = min(wait, max(retry.wait_retry(), 0.01))
            if self._stop.wait(max(wait, 0.0)):
                return
            try:
                if time.monotonic() >= next_flush or _under_memory_pressure() or self._reader.under_pressure():
                    next_flush = time.monotonic() + self.flush_interval
                    self.flush()
                elif retry is not None:
                    with self._locked() as acquired:
                        if acquired:
                            self._sink.idle()
            except Exception as exc:  # noqa: BLE001 - the flusher must outlive a bad flush
                self.write_errors += 1
                if self.write_errors == 1:
                    _warn(f"recording to {self.dest}: {type(exc).__name__}: {exc} (recording goes on)")

    @contextlib.contextmanager
    def _locked(self, timeout: float = -1):
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

    def _nested_here(self) -> bool:
        """Whether this thread is inside a flush or a stop of this recorder right now."""
        me = threading.get_ident()
        return self._lock_owner == me or self._stopping == me

    def flush(self, *, lock_timeout: float = -1) -> None:
        """Drain now and hand the spans to the destination (the flusher does this every interval)."""
        with self._locked(lock_timeout) as acquired:
            if not acquired:
                return
            table = self._take()
            self._last = table
            self.flushes += 1
            if table.num_rows == 0:
                if hasattr(self._sink, "idle"):
                    self._sink.idle()
            else:
                try:
                    began = time.perf_counter()
                    self._sink.write(table)
                    emit(Flushed(self.dest, table.num_rows, table.nbytes, time.perf_counter() - began))
                except Exception as exc:  # noqa: BLE001 - a failing destination must not stop the program
                    emit(FlushFailed(self.dest, exc))
                    self.write_errors += 1
                    self._write_dropped += table.num_rows
                    if self.write_errors == 1:
                        _warn(f"could not write spans to {self.dest}: {type(exc).__name__}: {exc} "
                              f"(recording goes on; {table.num_rows} spans dropped)")
        self._after_nested_signal()

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

        Safe to enter again while it runs (from a signal handler, or from a finalizer and
        ``atexit`` both): the nested call returns at once, the outer one does the work."""
        if not self.running or self._stopping is not None:
            return
        self._stopping = threading.get_ident()
        try:
            self._stop_now(self.stop_timeout if timeout is None else timeout)
        finally:
            self._stopping = None
        self._after_nested_signal()

    def _stop_now(self, timeout: float) -> None:
        global _active
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=max(timeout, 1.0))
        try:
            # The last flush: device spans' pairs still running on the GPU would be lost.
            _api.wait_for_devices()
        except Exception as exc:  # noqa: BLE001 - a device error must not lose the host spans
            _warn(f"could not wait for device spans: {type(exc).__name__}: {exc}")
        self.flush(lock_timeout=timeout)
        try:
            with self._locked(timeout) as acquired:
                if acquired:
                    last = self._last if self._last is not None else self._take()
                    self._sink.close(last, timeout)
        except Exception as exc:  # noqa: BLE001
            _warn(f"could not finish writing spans to {self.dest}: {type(exc).__name__}: {exc}")
        finally:
            self._thread = None
            if self._reader is not None:
                hub.detach(self._reader)
            with _active_lock:
                if _active is self:
                    _active = None
            try:
                atexit.unregister(self._atexit)
            except Exception:  # noqa: BLE001
                pass
        if self.dropped:
            _warn(f"{self.dropped:,} spans could not be delivered to {self.dest}")

    def _after_nested_signal(self) -> None:
        """A SIGTERM that arrived while this thread was flushing or stopping was left to us:
        once the outermost call is done, stop (flushing everything) and die of it."""
        if (not self._sigterm_deferred or self._nested_here()
                or threading.current_thread() is not threading.main_thread()):
            return
        self._sigterm_deferred = False
        self.stop()
        _die_of_sigterm()

    def _atexit(self) -> None:
        if self.running:
            self.stop()

    def __enter__(self) -> "Recorder":
        return self.start()

    def __exit__(self, *exc_info: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "recording" if self.running else "stopped"
        return f"<hotspan.Recorder {self.kind} {self.dest!r} every {self.flush_interval:g}s, {state}>"


def _under_memory_pressure() -> bool:
    from .. import _native

    pending = _native._pending()
    return pending["bytes"] * 2 >= pending["memory_cap"]


# Set once the flusher has imported what flushing needs. A fork while another thread is
# half-way through importing pyarrow would hand the child a partially initialised module,
# so fork waits for it (bounded: a wedged import must not hang the program).
_warmed = threading.Event()


_fork_held: "threading.Lock | None" = None
_fork_sigmask: "set | None" = None


def _hold_sigterm_over_fork() -> None:
    """Block SIGTERM in the forking thread while our handler is installed; the child inherits
    the mask. CPython forgets, in the child, a signal that arrives before it has reset its
    signal state after fork: a pool terminated while a worker was still starting sent a
    SIGTERM that vanished, and with a handler installed (no default action to kill it) the
    worker slept in the pool's queue forever. Blocked, the signal stays pending instead, and
    is delivered when the mask is restored (in the child, after that reset)."""
    global _fork_sigmask
    if hasattr(signal, "pthread_sigmask") and signal.getsignal(signal.SIGTERM) is _on_sigterm:
        _fork_sigmask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})


def _release_sigterm_after_fork() -> None:
    global _fork_sigmask
    mask, _fork_sigmask = _fork_sigmask, None
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def _before_fork() -> None:
    """Fork only between two flushes: a child forked while the flusher is half-way through
    an import or a Parquet write inherits that import's lock (or pyarrow's) held by a thread
    it does not have, and its own flusher waits on it forever (a forked worker then loses
    everything it recorded). Bounded: a wedged flush must not hang the program."""
    global _fork_held
    _hold_sigterm_over_fork()
    recorder = _active
    if recorder is None or not recorder.running:
        return
    if not _warmed.is_set():
        _warmed.wait(30)
    if recorder._lock_owner != threading.get_ident() and recorder._lock.acquire(timeout=10):
        _fork_held = recorder._lock


def _after_fork_parent() -> None:
    global _fork_held
    held, _fork_held = _fork_held, None
    if held is not None:
        held.release()
    _release_sigterm_after_fork()


def _warm_up(kind: str) -> None:
    """Import here, on the starting thread, what the flusher will need: a first import on the
    flusher thread during interpreter shutdown (a short program) fails ("can't register
    atexit after shutdown"). pyarrow imports pandas on its first ``pa.array(list)``."""
    import pyarrow as pa

    pa.array([""], pa.string())
    import pyarrow.parquet  # noqa: F401

    if kind == "collector":
        import pyarrow.flight  # noqa: F401
    if kind == "directory":
        from ..formats import dataset  # noqa: F401  (and the Parquet exporter it writes with)
        from ..formats.registry import exporter_for

        exporter_for("x.parquet")


def record(dest: str | os.PathLike, flush_interval: float = 1.0, *, token: str | None = None,
           buffer_spans: int = 1 << 21, stop_timeout: float = 5.0) -> Recorder:
    """A recorder streaming drained spans to ``dest`` every ``flush_interval`` seconds.

    ``dest``: a file (``.parquet``, ``.arrow``, ``.json``, ... : written at ``stop()``), a
    directory (a Parquet dataset ``dest/rank=R/part-<pid>-<token>-<n>.parquet``, a part per
    flush; a path without a known trace extension counts as one), or ``grpc://HOST:PORT``
    (a ``hotspan collect`` server; ``token`` or ``HOTSPAN_TOKEN`` if it wants one; up to
    ``buffer_spans`` spans wait for it while it is away).

    Use it as a context manager, or call ``start()`` / ``stop()``; one recorder at a time.
    """
    return Recorder(dest, flush_interval, token=token, buffer_spans=buffer_spans, stop_timeout=stop_timeout)


def active() -> Recorder | None:
    """The recorder running in this process, if any."""
    return _active if _active is not None and _active.running else None


# --------------------------------------------------------------------------- HOTSPAN_OUT


def _on_sigterm(signum, frame) -> None:  # noqa: ARG001
    """Flush, then die of SIGTERM as without hotspan. Runs on the main thread between two
    bytecodes: if that thread is itself inside a flush or a stop (a pool worker finishing
    when the pool's terminate() arrives), waiting for it here would wait forever; the outer
    call finishes the work and dies then."""
    recorder = _env_recorder
    if recorder is not None and recorder.running and recorder._nested_here():
        recorder._sigterm_deferred = True
        # The outer call dies once it is done. Should it never be done, or never reach that
        # point, the process must still die: a pool's terminate() sends one SIGTERM and then
        # waits for the worker forever. A second SIGTERM now kills at once, and a watchdog
        # kills after the time a stop may take.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        watchdog = threading.Timer(recorder.stop_timeout + 2.0, _die_of_sigterm)
        watchdog.daemon = True
        watchdog.start()
        return
    try:
        if recorder is not None and recorder.running:
            recorder.stop()
    finally:
        _die_of_sigterm()


def _die_of_sigterm() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def start_from_env() -> Recorder | None:
    """If ``HOTSPAN_OUT`` is set, start recording to it (called when hotspan is imported).

    A bad destination is reported on stderr and the program runs on unrecorded. A SIGTERM
    handler (flush, then die of SIGTERM as before) is installed only where the program has
    none.
    """
    dest = os.environ.get(ENV_OUT, "").strip()
    if not dest or active() is not None:
        return None
    try:
        interval = float(os.environ.get(ENV_INTERVAL, "") or 1.0)
        return start_env_recorder(dest, interval)
    except Exception as exc:  # noqa: BLE001 - never break the program over its tracing
        _warn(f"{ENV_OUT}={dest}: not recording: {type(exc).__name__}: {exc}")
        return None


def start_env_recorder(dest: str | os.PathLike, flush_interval: float = 1.0) -> Recorder:
    """Record this process to ``dest`` the way ``HOTSPAN_OUT`` does: until exit (``atexit``,
    SIGTERM where the program has no handler of its own, and ``multiprocessing``'s exit of
    its children, which skips ``atexit``), with every forked child recording to the same
    directory. ``hotspan run`` uses it for the process it runs the program in."""
    global _env_recorder
    recorder = record(dest, flush_interval).start()
    _env_recorder = recorder
    if threading.current_thread() is threading.main_thread():
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                signal.signal(signal.SIGTERM, _on_sigterm)
        except (ValueError, OSError):
            pass
    _stop_with_multiprocessing(recorder)
    return recorder


def stop_env_recorder() -> None:
    """Stop recording started by ``HOTSPAN_OUT`` (the collector does, for itself)."""
    global _env_recorder
    if _env_recorder is not None:
        _env_recorder.stop()
        _env_recorder = None
    if signal.getsignal(signal.SIGTERM) is _on_sigterm and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _after_fork_child() -> None:
    """A forked child has no flusher thread: forget the parent's recorder, and for
    ``HOTSPAN_OUT`` pointing at a directory, record the child's own spans there too (under
    its own part names: its pid, and a token of its own). Then take a SIGTERM held over the
    fork (the handler finds the child's recorder, flushes it and dies)."""
    try:
        _follow_into_child()
    finally:
        _release_sigterm_after_fork()


def _follow_into_child() -> None:
    global _active, _env_recorder, _active_lock
    global _fork_held
    _active_lock = threading.Lock()
    _fork_held = None  # the child's copy of the parent's recorder is replaced below
    parent, _active = _active, None
    was_env = parent is not None and parent is _env_recorder
    _env_recorder = None
    if parent is None:
        return
    parent._thread = None
    parent._lock = threading.Lock()
    parent._lock_owner = parent._stopping = None
    parent._sigterm_deferred = False
    if not was_env or parent.kind != "directory":
        return  # a file would be overwritten, and gRPC must not be used across fork
    try:
        child = record(parent.dest, parent.flush_interval).start()
    except Exception as exc:  # noqa: BLE001
        _warn(f"{ENV_OUT}: not recording in forked child {os.getpid()}: {exc}")
        return
    _env_recorder = child
    _stop_with_multiprocessing(child)


def _stop_with_multiprocessing(recorder: Recorder) -> None:
    """``multiprocessing``'s children (fork, spawn, forkserver; pool workers too) leave
    through ``os._exit`` (no ``atexit``) after running its finalizers. A child clears the
    finalizers it inherited, then runs the after-fork hooks: register the finalizer now (a
    process importing hotspan after that point) and again from the hook (a process that
    imported it before, or forked from one that did)."""
    mp = sys.modules.get("multiprocessing.util")
    if mp is None:
        return
    mp.register_after_fork(recorder, _finalize_with_multiprocessing)
    _finalize_with_multiprocessing(recorder)


def _finalize_with_multiprocessing(recorder: Recorder) -> None:
    import multiprocessing.util

    if recorder.running:
        multiprocessing.util.Finalize(recorder, recorder.stop, exitpriority=100)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_parent, after_in_child=_after_fork_child)
