"""A raw log (``formats/_rawlog.py`` reads one) turned into Parquet parts: by ``stop()``
(:func:`convert`, the recording's own sink writing each piece) and by ``hotspan compact`` for
the logs of processes killed before their ``stop()`` (:func:`convert_left`)."""

from __future__ import annotations

import os

from ..formats._rawlog import LIVE_DIR, RAW_RE, RawFile, tables

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    import pyarrow as pa

__all__ = ["convert", "convert_left"]


#: Threads writing a stop()'s Parquet parts while the caller's decodes the next piece: a
#: part's write (~55-80 ns a span) is slower than the decoding (~30-50), and at stop() the
#: recording threads leave the cores to it.
WRITERS = 2


def convert(
    path: str | os.PathLike[str],
    write: "Any",
    metadata: dict[bytes, bytes] | None = None,
    *,
    since_ns: int | None = None,
) -> int:
    """Hand the raw log's spans to ``write(table, piece, pieces)`` a piece at a time (a
    Parquet part each: the caller's, which names the log, the piece and the number of pieces
    in the part's metadata: see :func:`live_tables`); returns the spans. ``write`` is called
    from up to :data:`WRITERS` threads at once. The caller removes the file once every piece
    is written."""
    import queue
    import threading

    from .._quiet_threads import start_quiet

    raw = RawFile(path)
    pieces = sum(1 for _ in raw.chunks()) or 1
    if pieces == 1:
        spans = 0
        for table in tables(path, metadata, raw=raw, since_ns=since_ns):
            write(table, 0, 1)
            spans += table.num_rows
        return spans
    # Several pieces: each written (Parquet, without the interpreter lock) on a thread of
    # WRITERS while this one decodes the next. Memory: WRITERS + 1 pieces at most (those being
    # written and the one being decoded), as the slots say.
    writers = max(1, min(WRITERS, os.cpu_count() or 1, pieces))
    slots = threading.Semaphore(writers + 1)
    handoff: "queue.Queue[tuple[pa.Table, int, int] | None]" = queue.Queue()
    failed: list[BaseException] = []

    def writer() -> None:
        while (item := handoff.get()) is not None:
            try:
                if not failed:
                    write(*item)
            except BaseException as exc:  # noqa: BLE001 - raised on the caller's thread
                failed.append(exc)
            finally:
                del item
                slots.release()

    threads = [
        start_quiet(threading.Thread(target=writer, name="hotspan-convert", daemon=True))
        for _ in range(writers)
    ]
    spans = 0
    decoded = iter(tables(path, metadata, raw=raw, since_ns=since_ns))
    try:
        for piece in range(pieces):
            slots.acquire()
            table = None if failed else next(decoded, None)
            if table is None:
                slots.release()
                break
            spans += table.num_rows
            handoff.put((table, piece, pieces))
            del table
    finally:
        for _ in threads:
            handoff.put(None)
        for thread in threads:
            thread.join()
        if hasattr(decoded, "close"):
            decoded.close()
    if failed:
        raise failed[0]
    return spans


def convert_left(root: str | os.PathLike[str], log: "Any" = None) -> int:
    """``hotspan compact``: the raw logs whose process is gone (killed before its stop())
    into Parquet parts of their recording (after its last part), then removed. A log whose
    start part is missing, or whose process still runs, is left alone. Returns the logs
    converted."""
    import contextlib

    from ..formats.dataset import pid_alive

    root = os.fspath(root)
    live_dir = os.path.join(root, LIVE_DIR)
    try:
        names = sorted(os.listdir(live_dir))
    except (FileNotFoundError, NotADirectoryError):
        return 0
    done = 0
    for name in names:
        match = RAW_RE.match(name)
        if match is None:
            continue
        rank, pid, token = int(match.group(1)), int(match.group(2)), match.group(3)
        if pid_alive(pid) and pid != os.getpid():
            continue  # still recording (or a pid reused here: left for a later compact)
        spans = _convert_one(root, name, rank, pid, token)
        if spans is None:
            continue  # no start part: not a recording's log this reader can name
        done += 1
        if log is not None:
            log(f"rank {rank}: the raw log of process {pid} ({spans:,} spans) into Parquet")
    with contextlib.suppress(OSError):
        os.rmdir(live_dir)
    return done


def _convert_one(root: str, name: str, rank: int, pid: int, token: str) -> int | None:
    """One raw log of a process that is gone into its recording's parts, then removed:
    the spans, or None without a start part to take the metadata from."""
    import glob
    import json
    import threading

    import pyarrow.parquet as pq

    from ..formats.dataset import part_key, write_part

    own = []
    for p in glob.glob(os.path.join(root, f"part-r{rank}-{pid}-{token}-*.parquet")):
        k = part_key(p)
        if k is not None:
            own.append((int(k["seq"]), int(k["last"] if k["last"] is not None else k["seq"]), p))
    if not own:
        return None
    meta = dict(pq.read_schema(min(own)[2]).metadata or {})
    try:
        since = json.loads(meta.pop(b"hotspan.part", b"{}")).get("since_ns")
    except (ValueError, AttributeError):
        since = None
    key = f"{LIVE_DIR}/{name}"
    next_seq = max(last for _seq, last, _p in own)

    lock = threading.Lock()  # convert() writes on several threads

    def write(table: "pa.Table", piece: int, pieces: int) -> None:
        nonlocal next_seq
        if not table.num_rows:
            return
        with lock:
            next_seq += 1
            seq = next_seq
        write_part(
            table,
            root,
            rank=rank,
            pid=pid,
            seq=seq,
            token=token,
            part_meta={"kind": "raw", "replaces_live": [key], "piece": piece, "pieces": pieces},
        )

    path = os.path.join(root, key)
    spans = convert(path, write, meta, since_ns=since if isinstance(since, int) else None)
    os.unlink(path)
    return spans
