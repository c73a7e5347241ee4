"""Where a recorder's spans go: a file (written at stop), a dataset directory or object
store prefix (a Parquet part per flush), or collectors over Arrow Flight (a sender thread
of lower priority). ``sink_for(dest)`` picks one from the destination's form; the
``Recorder`` (recording/recorder.py) drains into it every interval."""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections import deque

from .._quiet_threads import lower_this_thread, start_quiet

TYPE_CHECKING = False  # typing loads for the type checker only (import hotspan stays light)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

    import pyarrow as pa

    from ..formats.dataset import Location

__all__ = ["CollectorSink", "DatasetSink", "FileSink", "room_to_flush", "sink_for"]

#: ``0``: a recording to a local directory writes a Parquet part per flush from the flusher
#: thread, as before the raw log (for comparisons; the raw log is the default).
ENV_RAW_LOG = "HOTSPAN_RAW_LOG"

#: Seconds between two measurements of a collector client's clock offset (default 60).
ENV_CLOCK_INTERVAL = "HOTSPAN_CLOCK_INTERVAL"

#: How much lower than the program a collector sink's sender thread runs (its nice value
#: added; Linux). Encoding and sending a batch is work the program does not wait for: on a host
#: whose cores the program's threads keep busy, it takes what they leave, so the recording
#: threads keep their speed while a rank streams (issue 16). The flusher itself (the drain,
#: which frees the core's memory) keeps the program's priority: niced, a loaded host starved
#: it and the core dropped spans at its memory cap.
SENDER_NICE = 10


def warn(message: str) -> None:
    try:
        print(f"hotspan: {message}", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


class FileSink:
    """Any export format: batches kept in memory, the file written (atomically) at close."""

    kind = "file"

    def __init__(self, path: Path):
        from ..formats._registry import known_format

        # Unknown extension: fail now, not at exit; without importing the codec (and
        # pyarrow with it) on the recording program's thread.
        known_format(path)
        if path.is_dir():
            raise IsADirectoryError(f"{path}: is a directory")
        self.path = path
        self.tables: list[pa.Table] = []
        self.dropped = 0
        self.spans = 0
        #: Where the processes started while recording record (``Recorder.children_spec``):
        #: a hidden dataset directory beside the file, made by the first child that writes
        #: there, taken into the file at close and removed.
        self.children_dir = path.absolute().parent / (
            f".{path.name}.hotspan-children-{os.getpid()}-{os.urandom(4).hex()}"
        )
        self.children_dest = str(self.children_dir) + os.sep

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
        if self.children_dir.is_dir():
            table = self._with_children(table)
        export(table, self.path)
        self.tables = []
        if self.children_dir.is_dir():
            import shutil

            shutil.rmtree(self.children_dir, ignore_errors=True)

    def _with_children(self, table: pa.Table) -> pa.Table:
        """This process's spans and those of its children (their parts in ``children_dir``)
        as one run, read as ``hotspan run`` reads its directory: this process's spans are a
        part there too."""
        from ..formats.dataset import load_dataset, location, new_token, write_part

        write_part(
            table,
            location(self.children_dir),
            rank=table.column("rank")[0].as_py() if table.num_rows else _current_rank(),
            pid=os.getpid(),
            seq=0,
            token=new_token(),
        )
        return load_dataset(self.children_dir, run="all")


class DatasetSink:
    """A hive-partitioned Parquet dataset: one part per flush, written atomically, under a
    name drawn when the recording starts (``part-<pid>-<token>-<n>``) that no other
    recording uses, and never over an existing part. A local directory, or any file system
    URI (``s3://bucket/run``: each part put whole, see ``formats/dataset.py``)."""

    kind = "directory"

    def __init__(self, directory: Path | str):
        from ..formats._uri import is_uri, redact_uri

        self.remote = is_uri(directory)
        if self.remote:
            self.target = str(directory)  # opened on the flusher, where pyarrow loads
            self.shown = redact_uri(directory)
        else:
            from pathlib import Path  # at a recording's start, not at import hotspan

            directory = Path(directory)
            if directory.exists() and not directory.is_dir():
                raise NotADirectoryError(f"{directory}: exists and is not a directory")
            directory.mkdir(parents=True, exist_ok=True)
            self.target = self.shown = str(directory)
        self.directory = directory
        self.location: Location | None = None  # set by open()
        self.token: str | None = None
        self.seq = 0
        self.dropped = 0
        self.spans = 0
        self.parts = 0
        self._parts_lock = threading.Lock()  # stop()'s parts are written on several threads
        #: The raw log the drain thread writes while the recording runs (a local directory:
        #: ``formats/_rawlog.py``), its process; None: a part per flush instead.
        self.raw_path: str | None = None
        self._raw_pid: int | None = None
        #: Epoch ns: spans that ended before are another recording's (this one started while
        #: others streamed: ``hub.Reader.since_ns``); kept in the start part for readers of
        #: the raw log.
        self.since_ns: int | None = None
        #: Spans left in the raw log at stop() (no room to convert them): on disk, not lost.
        self.raw_kept = 0

    def open(self) -> None:
        """On the flusher, once pyarrow is loaded: sweep what killed writers left, draw this
        recording's token, and write its metadata part (no rows), so that a run killed
        before its first flush still loads, as an empty table with its metadata."""
        if self.token is not None:
            return
        from ..formats.dataset import location, new_token, sweep_temporaries

        self.location = opened = location(self.target)
        if opened.local:
            sweep_temporaries(opened.root)
        self.token = new_token()
        self._write(metadata_table(), kind="start", **self._since())

    def _since(self) -> dict[str, int]:
        return {"since_ns": self.since_ns} if self.since_ns is not None else {}

    def start_raw(self) -> None:
        """A running recorder's, once open: the raw log, when this process has none open
        already (one a process: a second recording to a directory writes a Parquet part per
        flush, as before) and ``HOTSPAN_RAW_LOG`` is not ``0``."""
        if (
            self.raw
            or self.location is None
            or not self.location.local
            or os.environ.get(ENV_RAW_LOG, "1") == "0"
        ):
            return
        root = self.location.root
        from .. import _native
        from .._api import rank as current_rank
        from .._version import __version__
        from ..formats._rawlog import raw_name

        assert self.token is not None
        path = os.path.join(root, raw_name(current_rank(), os.getpid(), self.token))
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            _native._raw_open(path, current_rank(), __version__)
        except OSError:
            return  # another recording of this process has it, or no room: parts per flush
        self.raw_path = path
        self._raw_pid = os.getpid()

    @property
    def raw(self) -> bool:
        """Whether the drain thread writes this recording's spans (no flush takes them)."""
        return self.raw_path is not None and self._raw_pid == os.getpid()

    def raw_spans(self) -> int:
        from .. import _native

        return int(_native._raw_stats()["spans"]) if self.raw else 0

    def _close_raw(self) -> None:
        """stop(): every span recorded so far into the raw log, then the log into Parquet
        parts (``PART_ROWS`` spans at most each, each naming the log it replaces, so a reader
        never counts a span twice), then the log removed."""
        from .. import _native
        from ..formats._rawlog import LIVE_DIR
        from ._rawlog import convert

        assert self.raw_path is not None
        stats = _native._raw_close()
        from . import _hub as hub

        hub.raw_log_closed()
        self.dropped += int(stats["lost_spans"])
        path, self.raw_path = self.raw_path, None
        name = f"{LIVE_DIR}/{os.path.basename(path)}"
        meta = dict(metadata_table().schema.metadata or {})
        meta.update(_dropped_meta())

        def write(table: pa.Table, piece: int, pieces: int) -> None:
            # convert() writes pieces on several threads
            if not table.num_rows:
                return
            with self._parts_lock:
                seq = self.seq
                self.seq += 1
            self._write(
                table, seq=seq, kind="raw", replaces_live=[name], piece=piece, pieces=pieces
            )
            with self._parts_lock:
                self.spans += table.num_rows

        kept = (
            f"its spans stay in {path}, which hotspan.load reads and `hotspan compact` "
            "turns into Parquet parts"
        )
        if not room_to_flush():  # under ulimit -v: no room for pyarrow (see room_to_flush)
            self.raw_kept = int(stats["spans"])
            warn(f"recording to {self.shown}: out of memory to write Parquet at stop; {kept}")
            return
        written = self.spans
        try:
            convert(path, write, meta, since_ns=self.since_ns)
        except Exception as exc:
            if os.path.exists(path):  # nothing lost: the log stays, whole (its end written)
                self.raw_kept = int(stats["spans"]) - (self.spans - written)
                warn(f"recording to {self.shown}: {type(exc).__name__}: {exc}; {kept}")
                return
            # the log is gone (the directory with it): the spans not converted are lost
            from ..events import FlushFailed, emit

            self.dropped += max(0, int(stats["spans"]) - (self.spans - written))
            emit(FlushFailed(self.shown, exc))
            raise
        os.unlink(path)
        with contextlib.suppress(OSError):  # others' raw logs may still be there
            os.rmdir(os.path.dirname(path))

    def write(self, table: pa.Table) -> None:
        self.open()
        self._write(table)
        self.spans += table.num_rows

    def _write(self, table: pa.Table, seq: int | None = None, **part_meta: Any) -> None:
        """One part; ``seq``: taken already by the caller (several threads write stop()'s
        parts), else the next."""
        from .._api import rank as current_rank
        from ..formats.dataset import write_part

        rank = table.column("rank")[0].as_py() if table.num_rows else current_rank()
        assert self.location is not None  # open() ran first
        write_part(
            table,
            self.location,
            rank=rank,
            pid=os.getpid(),
            seq=self.seq if seq is None else seq,
            token=self.token,
            part_meta={"sink_dropped": self.dropped, **part_meta},
        )
        with self._parts_lock:
            if seq is None:
                self.seq += 1
            self.parts += 1

    def close(self, last: pa.Table, timeout: float) -> None:
        if self.location is None or not self.location.local:
            return
        if self.raw:
            self._close_raw()
        from ._children import unflushed_children

        from pathlib import Path

        unflushed = unflushed_children(Path(self.location.root))
        if (
            unflushed
        ):  # a part of its own (no spans): the last flush may have had none to carry them
            self._write(metadata_table(), kind="stop", unflushed_children=unflushed)


def _dropped_meta() -> dict[bytes, bytes]:
    """The dropped counts as a drain's metadata gives them (``hotspan.dropped``), for the
    parts a raw log becomes (no drain made them)."""
    import json

    from .. import _native
    from .._schema import META_DROPPED

    d = _native.dropped(detail=True)
    threads = d.get("threads") or {}
    counts = {str(t): int(v["memory_cap"]) + int(v["other"]) for t, v in threads.items()}
    return {
        META_DROPPED: json.dumps(
            {
                "total": int(d["total"]),
                "threads": {t: c for t, c in counts.items() if c},
                "names": {str(t): str(v["name"]) for t, v in threads.items()},
                "memory_cap": int(d["memory_cap"]),
            }
        ).encode()
    }


def _current_rank() -> int:
    from .._api import rank

    return rank()


def metadata_table() -> pa.Table:
    """No spans, and this process's metadata as a drain would give it (without draining)."""
    from .. import _native
    from .._api import rank as current_rank
    from .._schema import SPAN_SCHEMA
    from .._table import metadata
    from .._version import __version__

    meta = metadata(
        rank=current_rank(),
        pid=os.getpid(),
        clock=_native._clock_info(),
        all_threads=[],
        version=__version__,
    )
    return SPAN_SCHEMA.empty_table().replace_schema_metadata(meta)


class CollectorSink:
    """Batches handed to a sender thread of lower priority (nice +``SENDER_NICE``), which
    encodes and puts them: the flusher only drains (the core's memory is freed on time, never
    waiting on a put), and the gRPC work yields its core to the program's threads. Batches
    waiting for the sender count against ``buffer_spans`` with the client's queue: past it the
    newest are dropped, and counted."""

    kind = "collector"

    def __init__(self, url: str, token: str | None, buffer_spans: int):
        from ._collector import CLOCK_INTERVAL_S, CollectorClient

        clock_interval = float(os.environ.get(ENV_CLOCK_INTERVAL, "") or CLOCK_INTERVAL_S)
        if not clock_interval > 0:
            raise ValueError(f"{ENV_CLOCK_INTERVAL}={clock_interval:g}: expected seconds above 0")
        self.client = CollectorClient(
            url, token=token, buffer_spans=buffer_spans, clock_interval=clock_interval
        )
        self.buffer_spans = buffer_spans
        self._cond = threading.Condition()
        self._pending: deque[pa.Table] = deque()
        self._pending_spans = 0
        self._dropped = 0  # over the cap before reaching the client, or never sent at close
        self._closing = False
        self._thread: threading.Thread | None = None
        # open stacks for `hotspan hang grpc://...` (recording/_open_stacks.py): sent every
        # interval by the sender thread, when this process has a flight file to read them from
        from ._open_stacks import ENV_STACKS_INTERVAL, STACKS_INTERVAL_S

        text = os.environ.get(ENV_STACKS_INTERVAL, "")
        try:
            stacks_interval = float(text or STACKS_INTERVAL_S)
        except ValueError:
            stacks_interval = float("nan")
        if not 0 < stacks_interval <= 3600:
            raise ValueError(f"{ENV_STACKS_INTERVAL}={text!r}: expected seconds in (0, 3600]")
        self.stacks_interval = stacks_interval
        self._next_stacks = 0.0

    @property
    def dropped(self) -> int:
        return self.client.dropped + self._dropped

    @property
    def spans(self) -> int:
        return self.client.sent_spans

    def write(self, table: pa.Table) -> None:
        with self._cond:
            if self._pending_spans + self.client.queued_spans + table.num_rows > self.buffer_spans:
                self._dropped += table.num_rows
                return
            self._pending.append(table)
            self._pending_spans += table.num_rows
            self._cond.notify()
            self._start_locked()

    def _start_locked(self) -> None:
        if self._thread is None or not self._thread.is_alive():  # the first batch, or a restart
            self._closing = False
            self._thread = threading.Thread(
                target=self._send_loop, name="hotspan-send", daemon=True
            )
            start_quiet(self._thread)

    def idle(self) -> None:
        # the sender retries by itself; it must run for the open stacks even when no span
        # ends (a job hung before its first flush of spans)
        if self._thread is None and _flight_path() is not None:
            with self._cond:
                if not self._closing:
                    self._start_locked()

    def _send_stacks(self) -> None:
        """This process's open stacks to the collector, when due (best effort)."""
        now = time.monotonic()
        if now < self._next_stacks:
            return
        self._next_stacks = now + self.stacks_interval
        path = _flight_path()
        if path is None:
            return
        from .flight import stacks
        from ._open_stacks import encode

        client = self.client
        try:
            proc = stacks(path)
            body = encode(
                proc,
                batch=client.batch_token,
                host=client.host,
                interval_s=self.stacks_interval,
                offset_ns=client.offset_ns,
                uncertainty_ns=client.uncertainty_ns,
            )
        except (OSError, ValueError):
            return  # the flight file unreadable now: the next interval tries again
        client.send_stacks(body, proc.rank)

    def _stacks_wait(self) -> float | None:
        if _flight_path() is None:
            return None
        return max(self._next_stacks - time.monotonic(), 0.0)

    def _send_loop(self) -> None:
        lower_this_thread(SENDER_NICE)
        client = self.client
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    # Queued in the client (the collector away): wake for the next retry;
                    # and for the next open stacks.
                    waits = [
                        max(client.wait_retry(), 0.01)
                        if client.queue and not client.refused
                        else None,
                        self._stacks_wait(),
                    ]
                    due = [w for w in waits if w is not None]
                    if due and min(due) <= 0:
                        break
                    self._cond.wait(min(due) if due else None)
                    if client.queue and client.wait_retry() <= 0:
                        break
                    stacks_wait = self._stacks_wait()
                    if stacks_wait is not None and stacks_wait <= 0:
                        break
                tables = list(self._pending)
                self._pending.clear()
                self._pending_spans = 0
                closing = self._closing
            try:
                for table in tables:
                    client.send(table)
                if not tables:
                    client.pump()
            except Exception as exc:  # noqa: BLE001 - the sender must outlive one bad batch
                self._dropped += sum(t.num_rows for t in tables)
                warn(f"sending spans to {client.url}: {type(exc).__name__}: {exc}")
            if not closing:
                try:
                    self._send_stacks()
                except Exception as exc:  # noqa: BLE001 - nor one failed snapshot
                    warn(f"sending open stacks to {client.url}: {type(exc).__name__}: {exc}")
            if closing:
                return

    def close(self, last: pa.Table, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self._cond:
            self._closing = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():  # a put outlasting the stop's time: what waits is lost
                with self._cond:
                    self._dropped += self._pending_spans + self.client.queued_spans
                    self._pending.clear()
                    self._pending_spans = 0
                return
        self.client.close(max(deadline - time.monotonic(), 0.0))


def _flight_path() -> str | None:
    from .. import _native

    return _native._flight_path()


def sink_for(
    dest: str | os.PathLike[str], token: str | None, buffer_spans: int
) -> FileSink | DatasetSink | CollectorSink:
    text = os.fspath(dest)
    if isinstance(text, bytes):
        text = text.decode()
    if text.startswith(("grpc://", "grpc+tcp://")):
        return CollectorSink(text, token, buffer_spans)
    if "://" in text:
        from ..formats._uri import FS_SCHEMES, redact_uri, scheme_of

        if scheme_of(text) not in FS_SCHEMES:
            raise ValueError(
                f"{redact_uri(text)}: unknown destination scheme (expected a file, a directory, "
                f"grpc://HOST:PORT or a file system URI: {', '.join(sorted(FS_SCHEMES))})"
            )
        return DatasetSink(text)  # s3://bucket/run: a dataset there, a part per flush
    from pathlib import Path  # at a recording's start, not at import hotspan

    from ..formats import format_of

    path = Path(text)

    looks_like_file = format_of(path) is not None
    if path.is_dir() or text.endswith(("/", os.sep)) or not looks_like_file:
        return DatasetSink(path)
    return FileSink(path)


# --------------------------------------------------------------------------- recorder


#: Address space a flush must find free before it starts, beyond this many bytes per byte of
#: records waiting in the core (a drained span is ~3x its record as a table, and the write
#: holds the table and its encoding at once). See room_to_flush.
FLUSH_HEADROOM_BYTES = 64 << 20
FLUSH_HEADROOM_PER_RECORD_BYTE = 8


def room_to_flush() -> bool:
    """Whether the process can map what a flush will allocate, tried first with an anonymous
    mapping never touched (no page is faulted in: a few microseconds). Why: pyarrow's C++ code
    aborts the process (std::terminate on a bad_alloc thrown where it cannot be caught) when an
    allocation fails half-way through building or writing a table, so under ``ulimit -v`` (the
    only limit probed: without one the answer is yes at once) a flush starts only with room for
    it; else the spans wait in the core (dropped and counted
    at its memory cap) and the flusher tries again at the next poll."""
    try:
        import mmap  # imported at start(): out of memory, a first import may fail
        import resource

        if resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY:
            return True  # no address-space limit: nothing to probe (the usual case)
        need = FLUSH_HEADROOM_BYTES
        from .. import _native

        need += FLUSH_HEADROOM_PER_RECORD_BYTE * int(_native._pending()["bytes"])
        mmap.mmap(-1, need).close()
    except Exception:  # noqa: BLE001 - no room (or no way to tell): the flush waits
        return False
    return True
