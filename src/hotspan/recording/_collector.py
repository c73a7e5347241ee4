"""The collector: an Arrow Flight server that many ranks stream their spans to, and its client.

    hotspan collect --listen grpc://127.0.0.1:8815 --out run/     # the server (CLI)
    hotspan.record("grpc://127.0.0.1:8815")                        # each rank (the client)

Protocol (all on one Flight service):

* ``do_action("clock")``: the server's ``time.time_ns()`` as 8 little-endian bytes. A
  client makes a few round trips when it connects and keeps the one with the smallest round
  trip time: ``offset = server_time - (t_send + t_receive) / 2``, uncertainty = RTT / 2.
* ``do_put`` with a descriptor command (JSON: rank, pid, host, batch, seq, offset_ns,
  offset_uncertainty_ns, rtt_ns, sink_dropped) and one batch of spans (a drained table).
  ``batch`` is a token the client draws when it starts (hex); with ``seq`` it names the
  batch; ``rows`` and ``bytes`` announce the batch's size (its row count and Arrow bytes),
  so that a put past the server's limits is refused from its descriptor alone, before any
  data is read. The server checks each chunk as it arrives too (rows and bytes of the put,
  against the limits and against what was announced, and of all puts in flight: refused at
  once past a limit, so its memory stays bounded whatever clients send), shifts the times onto the collector's clock (when the offset is larger than its
  uncertainty), and writes the batch as ``part-r<R>-<pid>-<batch>-<seq>.parquet`` before
  the call returns: a completed put is on disk. Parts are never written over: a resent batch
  (same name, same content digest) is acknowledged without writing it twice; a different
  batch under a name already taken (a client without a token, a restarted one whose pid
  repeats) gets a new name from its digest.
* ``do_action("done")`` with JSON ``{"pid", "batch"}``: the client is closing. The server
  compacts the parts that writer sent (per rank, on a thread of its own: see
  ``recording/compaction.py``; readers see each span once throughout).
* ``do_action("stacks")`` with a JSON body: a rank's open stacks, read from its flight file,
  sent every few seconds by the sink's sender thread; ``do_action("open_stacks")``: every
  process's latest, for ``hotspan hang grpc://HOST:PORT`` (``recording/_open_stacks.py``).
* With a token, every call must carry ``authorization: Bearer <token>``; any other call is
  refused (``FlightUnauthenticatedError``) to that client only.

A client that cannot reach the collector keeps its batches (up to ``buffer_spans``; beyond
that the newest are dropped and counted) and retries with exponential backoff, on a fresh
connection each time.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import os
import socket
import struct
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Callable

import pyarrow as pa

from ..events import CollectorLost, CollectorRestored, emit
from ..formats._collector_client import bearer, fetch_open_stacks, parse_url

if TYPE_CHECKING:
    import numpy as np

__all__ = [
    "CollectorClient",
    "CollectorServer",
    "bearer",
    "fetch_open_stacks",
    "parse_url",
    "parse_urls",
]

DEFAULT_PORT = 8815
#: Largest put the server accepts (rows, and bytes of Arrow data); past either, the put is
#: refused as the chunk that crosses it arrives, nothing written.
MAX_PUT_ROWS = 1 << 24
MAX_PUT_BYTES = 256 << 20
#: All puts in flight together (bytes): past it a put is refused as "busy" (the client keeps
#: the batch and retries later), so many clients at once cannot take the memory either.
MAX_INFLIGHT_BYTES = 1 << 30
#: A temporary part untouched this long at a collector's start was left by a killed one
#: (a put of MAX_PUT_BYTES is written in seconds; younger ones may be another collector's).
SWEEP_STALE_S = 120.0
#: Span id ranges the collector remembers to refuse a put that repeats an id already written
#: (16 bytes each: 64 MiB); a recorder's put is a few ranges (its threads' id ranges).
MAX_ID_RANGES = 1 << 22
#: Digests of the latest puts kept (to know a put sent again from a put repeating ids).
MAX_DIGESTS = 1 << 16
#: Largest descriptor command (bytes).
MAX_COMMAND = 4096
#: Rows a client sends in one put at most: a larger drained table goes as several puts
#: (each its own part), so no put nears the server's limits (MAX_PUT_ROWS, MAX_PUT_BYTES:
#: at about 90 bytes a row, 1 Mi rows is some 90 MB) and one put's memory stays small.
CLIENT_PUT_ROWS = 1 << 20
_CLOCK_ROUNDS = 8
#: How long a put may take before the client gives it up (and sends it again, or to the next
#: collector). A collector down or unreachable fails a call at once (connection refused);
#: this bounds a busy one, which goes on writing a put its client gave up: a short deadline
#: had 64 ranks resend to an overloaded collector every 10 s, adding to its load each time.
PUT_TIMEOUT_S = 60.0
#: How often a client measures its clock offset to the collector again (seconds).
CLOCK_INTERVAL_S = 60.0


def parse_urls(urls: "str | list[str] | tuple[str, ...]") -> list[str]:
    """One collector URL, a comma-separated list (``grpc://a:1,grpc://b:2``) or a list of them
    -> ``["grpc://HOST:PORT", ...]`` (ValueError naming the bad one)."""
    items = urls.split(",") if isinstance(urls, str) else list(urls)
    out = []
    for item in items:
        if not isinstance(item, str) or not item.strip():
            raise ValueError(f"{urls!r}: an empty collector address in the list")
        host, port = parse_url(item)
        out.append(f"grpc://{host}:{port}")
    if not out:
        raise ValueError(f"{urls!r}: no collector address")
    return out


# --------------------------------------------------------------------------- server


def _server_classes() -> tuple[Any, type[Any]]:
    import pyarrow.flight as flight

    class TokenMiddlewareFactory(flight.ServerMiddlewareFactory):  # type: ignore[misc]  # pyarrow: no types
        def __init__(self, expected: bytes) -> None:
            super().__init__()
            self.expected = expected

        def start_call(self, info: Any, headers: dict[str, list[str | bytes]]) -> None:
            for value in headers.get("authorization", []):
                if isinstance(value, str):
                    value = value.encode()
                if hmac.compare_digest(value, self.expected):
                    return None
            raise flight.FlightUnauthenticatedError("hotspan collector: missing or wrong token")

    return flight, TokenMiddlewareFactory


class CollectorServer:
    """The Flight server writing every rank's puts into a dataset directory.

    Starts listening on construction; ``port`` is the one bound (useful with port 0).
    ``shutdown()`` waits for the puts in flight (each is written before its call returns).
    """

    def __init__(
        self,
        out: str | os.PathLike[str],
        listen: str = f"grpc://127.0.0.1:{DEFAULT_PORT}",
        token: str | None = None,
        log: IO[str] | None = None,
        *,
        max_put_rows: int = MAX_PUT_ROWS,
        max_put_bytes: int = MAX_PUT_BYTES,
        max_inflight_bytes: int = MAX_INFLIGHT_BYTES,
        compact_on_done: bool = True,
        sweep_stale_s: float = SWEEP_STALE_S,
        max_id_ranges: int = MAX_ID_RANGES,
    ) -> None:
        from ..formats.dataset import sweep_temporaries

        flight, TokenMiddlewareFactory = _server_classes()
        host, port = parse_url(listen)
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.log = log
        self.max_put_rows = max_put_rows
        self.max_put_bytes = max_put_bytes
        self.max_inflight_bytes = max(max_inflight_bytes, max_put_bytes)
        # Several collectors may write into one dataset (each rank's parts have names of their
        # own): a temporary part is another collector's write in flight unless it is older than
        # any write takes, and only then a killed collector's leftover.
        self.swept = sweep_temporaries(self.out, stale_s=sweep_stale_s, by_pid=False)
        self.lock = threading.Lock()
        self.inflight_bytes = 0
        self.spans = 0
        self.parts = 0
        self.duplicates = 0
        self.refused = 0
        self.ranks: set[int] = set()
        # Compaction when a writer says it is done (action "done"): which ranks each
        # (pid, batch) wrote, and the compactions running (shutdown waits for them).
        self.compact_on_done = compact_on_done
        self.writers: dict[tuple[int, str], set[int]] = {}
        self.compactions: list[threading.Thread] = []
        # The span ids written so far (by this collector, into this dataset): a put that
        # repeats one is refused, so one client's repeats never break the others' spans.
        self.ids = _SpanIds(max_id_ranges)
        # The content digests of the latest puts written: a put sent again (its client gave
        # up waiting) repeats its own ids, and is kept once rather than refused (an older one
        # is recognised by its part's digest, as a resent batch always was).
        self.digests: dict[str, None] = {}
        from ._open_stacks import LiveStacks

        self.stacks = LiveStacks()
        middleware = {"auth": TokenMiddlewareFactory(bearer(token))} if token else {}
        owner = self
        # a base class from the lazily imported module (pyarrow has no types: Any to mypy)
        service_base: Any = flight.FlightServerBase

        class _Service(service_base):  # type: ignore[misc]  # the Any base above
            def do_action(self, context: Any, action: Any) -> list[bytes]:
                return owner._do_action(action)

            def list_actions(self, context: Any) -> list[tuple[str, str]]:
                return [
                    ("clock", "the server's time.time_ns(), 8 bytes little-endian"),
                    ("done", "a client is done (JSON pid, batch): its parts are compacted"),
                    ("stacks", "a process's open stacks now (JSON; see recording/_open_stacks.py)"),
                    ("open_stacks", "every process's latest open stacks (JSON)"),
                ]

            def do_put(self, context: Any, descriptor: Any, reader: Any, writer: Any) -> None:
                owner._do_put(descriptor, reader, context)

        self._flight = flight
        self._service = _Service(f"grpc://{host}:{port}", middleware=middleware)
        self.host = host
        self.port = self._service.port

    @property
    def url(self) -> str:
        return f"grpc://{self.host}:{self.port}"

    def _say(self, message: str) -> None:
        if self.log is not None:
            try:
                print(message, file=self.log, flush=True)
            except (OSError, ValueError):
                pass

    def _do_action(self, action: Any) -> list[bytes]:
        if action.type == "clock":
            return [struct.pack("<q", time.time_ns())]
        if action.type == "done":
            return self._writer_done(action.body.to_pybytes())
        if action.type == "stacks":
            body = action.body.to_pybytes()
            try:
                self.stacks.update(body)
            except (ValueError, TypeError) as exc:
                raise self._refuse(f"bad open stacks: {exc}") from None
            return []
        if action.type == "open_stacks":
            return [self.stacks.answer()]
        raise self._flight.FlightServerError(f"unknown action {action.type!r}")

    def _refuse(self, message: str) -> Exception:
        with self.lock:
            self.refused += 1
        self._say(f"hotspan collect: refused a put: {message}")
        error: Exception = self._flight.FlightServerError(f"hotspan collector: {message}")
        return error

    def _do_put(self, descriptor: Any, reader: Any, context: Any = None) -> None:
        from ..formats._base import check_span_table

        command = descriptor.command or b""
        if len(command) > MAX_COMMAND:
            raise self._refuse("descriptor too long")
        try:
            info = json.loads(command)
            if not isinstance(info, dict):
                raise ValueError("not an object")
            rank, pid, seq = (
                _bounded_int(info, key, 0, limit)
                for key, limit in (("rank", 2**31 - 1), ("pid", 2**31 - 1), ("seq", 2**40))
            )
            offset = _bounded_int(info, "offset_ns", -(2**62), 2**62, default=0)
            uncertainty = _bounded_int(info, "offset_uncertainty_ns", 0, 2**62, default=0)
            rtt = _bounded_int(info, "rtt_ns", 0, 2**62, default=0)
            measured = _bounded_int(info, "clock_measured_ns", 0, 2**63 - 1, default=0)
            sink_dropped = _bounded_int(info, "sink_dropped", 0, 2**62, default=0)
            # The announced size (clients before it announce nothing): past a limit, the put is
            # refused before a single chunk is read, so its data never reaches this process.
            announced_rows = _bounded_int(info, "rows", 0, 2**62) if "rows" in info else -1
            announced_bytes = _bounded_int(info, "bytes", 0, 2**62) if "bytes" in info else -1
            client_host = str(info.get("host", ""))[:256]
            batch = info.get("batch")
            if batch is not None and not (isinstance(batch, str) and _is_token(batch)):
                raise ValueError("batch must be 1-32 lower-case hex digits")
        except (ValueError, TypeError) as exc:
            raise self._refuse(f"bad descriptor: {exc}") from None
        if announced_rows > self.max_put_rows:
            raise self._refuse(
                f"rank {rank} pid {pid}: {announced_rows:,} rows announced, more than "
                f"{self.max_put_rows:,} in one put"
            )
        if announced_bytes > self.max_put_bytes:
            raise self._refuse(
                f"rank {rank} pid {pid}: {announced_bytes:,} bytes announced, more than "
                f"{self.max_put_bytes:,} in one put"
            )
        digest = hashlib.blake2b(digest_size=16)
        batches, rows, size, reserved = [], 0, 0, 0
        try:
            try:
                for chunk in reader:
                    if chunk.data is None:
                        continue
                    # Each chunk is checked as it arrives, before the next is read: a put past
                    # a limit is refused at once, and at most one put's limit is held for it.
                    rows += chunk.data.num_rows
                    nbytes = chunk.data.nbytes
                    size += nbytes
                    if rows > self.max_put_rows:
                        raise self._refuse(
                            f"rank {rank} pid {pid}: more than {self.max_put_rows:,} rows in one put"
                        )
                    if size > self.max_put_bytes:
                        raise self._refuse(
                            f"rank {rank} pid {pid}: more than {self.max_put_bytes:,} bytes in one put"
                        )
                    if (
                        0 <= announced_rows < rows
                    ):  # a client that said less than it sends is stopped at once
                        raise self._refuse(
                            f"rank {rank} pid {pid}: more rows than the {announced_rows:,} announced"
                        )
                    with self.lock:
                        if self.inflight_bytes + nbytes > self.max_inflight_bytes:
                            busy = True
                        else:
                            busy = False
                            self.inflight_bytes += nbytes
                            reserved += nbytes
                    if busy:
                        self._say(
                            f"hotspan collect: busy ({self.max_inflight_bytes:,} bytes in flight): "
                            f"rank {rank} pid {pid} will retry"
                        )
                        raise self._flight.FlightUnavailableError(
                            "hotspan collector: busy, retry later"
                        )
                    _digest_batch(digest, chunk.data)
                    batches.append(chunk.data)
                # Only a whole put is written: a stream that ends before the rows it announced
                # (its client killed mid-put: gRPC ends the stream as if it were complete) or
                # that the client cancelled leaves nothing behind.
                if (0 <= announced_rows != rows) or (
                    context is not None and context.is_cancelled()
                ):
                    raise self._refuse(
                        f"rank {rank} pid {pid}: batch {seq} cut short: {rows:,} of "
                        f"{max(announced_rows, 0):,} rows arrived (the client stopped mid-put): "
                        "nothing written"
                    )
                table = pa.Table.from_batches(batches, schema=reader.schema)
                table = check_span_table(table)
            except self._flight.FlightError:
                raise
            except (pa.ArrowException, ValueError, TypeError) as exc:
                raise self._refuse(f"rank {rank} pid {pid}: not a span batch: {exc}") from None
            self._write(
                table,
                rank=rank,
                pid=pid,
                seq=seq,
                batch=batch,
                digest=digest.hexdigest(),
                offset=offset,
                uncertainty=uncertainty,
                rtt=rtt,
                sink_dropped=sink_dropped,
                client_host=client_host,
                measured=measured,
            )
        finally:
            batches.clear()
            if reserved:
                with self.lock:
                    self.inflight_bytes -= reserved

    def _write(
        self,
        table: pa.Table,
        *,
        rank: int,
        pid: int,
        seq: int,
        batch: str | None,
        digest: str,
        offset: int,
        uncertainty: int,
        rtt: int,
        sink_dropped: int,
        client_host: str,
        measured: int = 0,
    ) -> None:
        if table.num_rows:
            import pyarrow.compute as pc

            lo, hi = pc.min_max(table.column("rank")).values()
            if lo.as_py() != rank or hi.as_py() != rank:
                raise self._refuse(
                    f"rank {rank} pid {pid}: rows of rank {lo}..{hi} in a put for rank {rank}"
                )
        applied = offset if abs(offset) > uncertainty else 0
        if applied and table.num_rows:
            import pyarrow.compute as pc

            shift = pa.scalar(applied, pa.int64())
            for name in ("start_ns", "end_ns"):
                index = table.schema.get_field_index(name)
                table = table.set_column(
                    index, table.schema.field(index), pc.add(table.column(name), shift)
                )
        part_meta = {
            "sink_dropped": sink_dropped,
            "offset_ns": offset,
            "offset_uncertainty_ns": uncertainty,
            "offset_applied_ns": applied,
            "rtt_ns": rtt,
            "clock_measured_ns": measured,
            "client_host": client_host,
            "received_ns": time.time_ns(),
            "collector_host": socket.gethostname(),
            "digest": digest,
        }
        repeated, starts, ends = _SpanIds.ranges(table.column("span_id"))
        if repeated is not None:
            raise self._refuse(
                f"rank {rank} pid {pid}: batch {seq} holds span id {repeated} twice: not written"
            )
        assert starts is not None and ends is not None  # given both when no id repeats
        reserved = self._reserve_ids(rank, pid, seq, batch, digest, starts, ends)
        written = False
        try:
            written = self._write_named(
                table, rank=rank, pid=pid, seq=seq, batch=batch, digest=digest, part_meta=part_meta
            )
        finally:
            if reserved and not written:
                with self.lock:
                    self.ids.remove(starts, ends)
                    self.digests.pop(digest, None)

    def _reserve_ids(
        self,
        rank: int,
        pid: int,
        seq: int,
        batch: str | None,
        digest: str,
        starts: np.ndarray,
        ends: np.ndarray,
    ) -> bool:
        """Refuse a put whose span ids were written already (by an earlier put of any client);
        else hold them for it. False when nothing was held: the same put sent again (its
        ids are its own), or the index full."""
        with self.lock:
            if digest in self.digests:
                return False
            hit = self.ids.first_overlap(starts, ends)
            if hit is None:
                first_full = not self.ids.full
                held = self.ids.add(starts, ends)
                if held:
                    self.digests[digest] = None
                    while len(self.digests) > MAX_DIGESTS:
                        del self.digests[next(iter(self.digests))]  # the oldest
                    return True
        if hit is not None:
            from ..formats.dataset import part_path

            if any(  # an older put sent again: its part holds it already (kept once)
                self._same_batch(part_path(self.out, rank, pid, seq, token), digest)
                for token in ([batch] if batch else []) + [(batch or "") + digest[:16]]
            ):
                return False
            raise self._refuse(
                f"rank {rank} pid {pid}: batch {seq} repeats span id {hit}, written already by "
                "an earlier put: not written (the spans of the dataset stay loadable)"
            )
        if first_full:
            self._say(
                f"hotspan collect: more than {self.ids.max_ranges:,} span id ranges written: "
                "later puts are no longer checked for repeated ids"
            )
        return False

    def _write_named(
        self,
        table: pa.Table,
        *,
        rank: int,
        pid: int,
        seq: int,
        batch: str | None,
        digest: str,
        part_meta: dict[str, Any],
    ) -> bool:
        """Write the put under its name (True), or find it written already (the same batch
        sent again: False); a refusal when every name it could take holds another batch."""
        from ..formats.dataset import part_path, write_part

        # The client's name for the batch; failing that (an older client) or where that name
        # holds another batch already, one from the content.
        candidates = ([batch] if batch else []) + [(batch or "") + digest[:16]]
        for token in candidates:
            path = part_path(self.out, rank, pid, seq, token)
            try:
                if path.exists():
                    raise FileExistsError(path)
                # No lock: write_part takes the name with link(), which one of two puts of the
                # same batch at once wins; the other finds the part complete and compares.
                write_part(
                    table, self.out, rank=rank, pid=pid, seq=seq, token=token, part_meta=part_meta
                )
            except FileExistsError:
                if self._same_batch(path, digest):
                    with self.lock:
                        self.duplicates += 1
                    self._say(
                        f"hotspan collect: rank {rank} pid {pid} sent batch {seq} again: kept once"
                    )
                    return True  # its ids are in the dataset: they stay held
                continue
            except (OSError, ValueError, pa.ArrowException) as exc:
                self._say(f"hotspan collect: could not write a part of rank {rank}: {exc}")
                raise self._flight.FlightServerError(
                    f"hotspan collector: could not write: {exc}"
                ) from None
            with self.lock:
                self.spans += table.num_rows
                self.parts += 1
                self.ranks.add(rank)
                if batch and token == batch:
                    self.writers.setdefault((pid, batch), set()).add(rank)
            return True
        raise self._refuse(
            f"rank {rank} pid {pid}: batch {seq}: its names are taken by other batches"
        )

    @staticmethod
    def _same_batch(path: Path, digest: str) -> bool:
        from ..formats.dataset import part_metadata

        try:
            return part_metadata(path).get("digest") == digest
        except (OSError, ValueError, pa.ArrowException):
            return False  # unreadable: certainly not to be taken for this batch

    def _writer_done(self, body: bytes) -> list[bytes]:
        """A client closing (``{"pid", "batch"}``): compact the parts it sent, per rank, on a
        thread of their own (the client does not wait; readers see each span once throughout)."""
        try:
            info = json.loads(body[:MAX_COMMAND])
            pid, batch = _bounded_int(info, "pid", 0, 2**31 - 1), info.get("batch")
            if not (isinstance(batch, str) and _is_token(batch)):
                raise ValueError("batch must be 1-32 lower-case hex digits")
        except (ValueError, TypeError) as exc:
            raise self._refuse(f"bad done action: {exc}") from None
        with self.lock:
            ranks = sorted(self.writers.pop((pid, batch), ()))
        self.stacks.exited(pid, batch)
        if self.compact_on_done:
            for rank in ranks:
                thread = threading.Thread(
                    target=self._compact,
                    args=(rank, pid, batch),
                    daemon=True,
                    name=f"hotspan-compact-{rank}",
                )
                thread.start()
                with self.lock:
                    self.compactions = [t for t in self.compactions if t.is_alive()] + [thread]
        return []

    def _compact(self, rank: int, pid: int, batch: str) -> None:
        from .compaction import compact

        try:
            done = compact(self.out, rank=rank, pid=pid, token=batch)
            if done.written:
                self._say(
                    f"hotspan collect: rank {rank} pid {pid} done: {done.merged} parts merged into {done.written}"
                )
        except Exception as exc:  # noqa: BLE001 - the parts stay as they are, all readable
            self._say(
                f"hotspan collect: could not compact rank {rank} pid {pid}: {type(exc).__name__}: {exc}"
            )

    def close(self) -> None:
        """Stop accepting calls; return once the calls in flight have finished (and the
        compactions they started). ``shutdown()``, the old name, is the same."""
        self._service.shutdown()
        self._service.wait()
        for thread in list(self.compactions):
            thread.join(60)

    shutdown = close  # the old name: every handle closes with close()

    def __enter__(self) -> "CollectorServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _SpanIds:
    """The span ids this collector has written into its dataset, as sorted disjoint ranges of
    consecutive ids (a recorder draws its ids in ranges, so a put of a thread's spans is a few
    ranges, not one entry a span), so that a put repeating an id already written (or one id
    twice) is refused before it is written: ``hotspan.load`` refuses a directory holding an id
    twice, and one client's repeats must never make the other clients' spans unloadable.

    Past ``max_ranges`` ranges (random ids: a range a span) the index stops growing and later
    puts are no longer checked (said once by the server)."""

    def __init__(self, max_ranges: int) -> None:
        import numpy as np

        self.max_ranges = max_ranges
        self.starts = np.empty(0, np.uint64)
        self.ends = np.empty(0, np.uint64)  # inclusive
        self.full = False

    @staticmethod
    def ranges(ids: pa.ChunkedArray) -> tuple[int | None, np.ndarray | None, np.ndarray | None]:
        """(repeated id or None, starts, ends) of one put's ids."""
        import numpy as np

        values = np.sort(ids.to_numpy())
        if values.size == 0:
            return None, values, values
        step = np.diff(values)
        if (step == 0).any():
            return int(values[1:][step == 0][0]), None, None
        breaks = np.flatnonzero(step != 1)
        starts = np.concatenate((values[:1], values[breaks + 1]))
        ends = np.concatenate((values[breaks], values[-1:]))
        return None, starts, ends

    def first_overlap(self, starts: np.ndarray, ends: np.ndarray) -> int | None:
        """The smallest id of ``starts``/``ends`` already written, or None."""
        import numpy as np

        if self.starts.size == 0 or starts.size == 0:
            return None
        # each new range against the first written range that ends at or after its start
        at = np.searchsorted(self.ends, starts, side="left")
        inside = at < self.ends.size
        hit = np.zeros(starts.size, bool)
        hit[inside] = self.starts[at[inside]] <= ends[inside]
        if not hit.any():
            return None
        k = int(np.flatnonzero(hit)[0])
        return int(max(starts[k], self.starts[at[k]]))

    def add(self, starts: np.ndarray, ends: np.ndarray) -> bool:
        """Add one put's ranges (disjoint from those written: checked first); False once full."""
        import numpy as np

        if self.full:
            return False
        if self.starts.size + starts.size > self.max_ranges:
            self.full = True
            return False
        merged_starts = np.concatenate((self.starts, starts))
        order = np.argsort(merged_starts, kind="stable")
        self.starts = merged_starts[order]
        self.ends = np.concatenate((self.ends, ends))[order]
        return True

    def remove(self, starts: np.ndarray, ends: np.ndarray) -> None:
        """Take back the ranges of a put that could not be written after all."""
        import numpy as np

        if starts.size == 0 or self.full:
            return
        keep = ~np.isin(self.starts, starts)
        self.starts, self.ends = self.starts[keep], self.ends[keep]


def _is_token(text: str) -> bool:
    return re.fullmatch(r"[0-9a-f]{1,32}", text) is not None


def _digest_batch(digest: hashlib.blake2b, batch: pa.RecordBatch) -> None:
    """Feed a record batch's data to ``digest``: a resent batch arrives as the same buffers."""
    for column in batch.columns:
        arrays = [column]
        if pa.types.is_dictionary(column.type):
            arrays.append(column.dictionary)
        for array in arrays:
            for buffer in array.buffers():
                if buffer is not None:
                    digest.update(buffer)
        digest.update(b"|")


def _bounded_int(
    info: dict[str, Any], key: str, lo: int, hi: int, default: int | None = None
) -> int:
    value = info.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{key} must be an integer")
    if not lo <= value <= hi:
        raise ValueError(f"{key} out of range")
    return value


# --------------------------------------------------------------------------- client


class CollectorClient:
    """Sends span tables to a collector: buffered, retried with backoff, at-least-once with
    idempotent parts (a resent batch is kept once).

    Not thread-safe: one thread (the recorder's flusher) calls ``send``/``pump``/``close``.
    """

    def __init__(
        self,
        url: "str | list[str] | tuple[str, ...]",
        *,
        token: str | None = None,
        buffer_spans: int = 1 << 21,
        timeout: float = 10.0,
        backoff: tuple[float, float] = (0.05, 2.0),
        clock_interval: float = CLOCK_INTERVAL_S,
        put_timeout: float = PUT_TIMEOUT_S,
    ):
        self.urls = parse_urls(url)
        self.url = self.urls[0]  # the collector in use (chosen by rank at the first send)
        self._index: int | None = None
        self.token = token
        self.buffer_spans = buffer_spans
        self.timeout = timeout
        self.put_timeout = max(float(put_timeout), self.timeout)
        self.backoff_min, self.backoff_max = backoff
        self.clock_interval = float(clock_interval)
        self.queue: deque[tuple[int, pa.Table]] = deque()
        self.queued_spans = 0
        self.seq = 0
        # Names this client's batches, with seq: a resent batch is recognised by the collector,
        # and a restarted client whose pid repeats (a container) never reuses a name.
        from ..formats.dataset import new_token

        self.batch_token = new_token()
        self.sent_spans = 0
        self.sent_parts = 0
        self.put_rows = CLIENT_PUT_ROWS  # rows per put at most (a larger table goes as several)
        self.dropped = (
            0  # spans dropped here: over the buffer cap, refused, or undelivered at close
        )
        self.failures = 0
        self.failovers = 0  # moves to the next collector of the list after a failure
        self.clock_measurements = 0
        self.stacks_sent = 0  # open-stack snapshots delivered (send_stacks)
        self.refused = False  # the collector refused our token: no point retrying
        self.last_error: str | None = None
        self.offset_ns = 0
        self.uncertainty_ns = 0
        self.rtt_ns = 0
        self.clock_measured_ns = 0  # time.time_ns() of the measurement in use
        self._clock_at = 0.0  # its time.monotonic()
        self._client: Any = None  # a pyarrow.flight.FlightClient once connected
        self._backoff = self.backoff_min
        self._next_try = 0.0
        self._tried = 0  # collectors tried in a row without success (a full round: back off)
        self._lost_since: float | None = None  # monotonic time of the first failure in a row
        self.host = socket.gethostname()
        self._pid = os.getpid()

    def _pick(self, rank: int) -> None:
        """The first collector: rank % N, so that the ranks of a job spread over the list."""
        if self._index is None:
            self._index = rank % len(self.urls)
            self.url = self.urls[self._index]

    # -- connection

    def _options(self, timeout: float | None = None) -> Any:
        import pyarrow.flight as flight

        headers = [(b"authorization", bearer(self.token))] if self.token else []
        return flight.FlightCallOptions(
            timeout=self.timeout if timeout is None else timeout, headers=headers
        )

    def _connect(self) -> None:
        import pyarrow.flight as flight

        client = flight.FlightClient(self.url)
        try:
            self._measure_clock(client)
        except BaseException:
            client.close()
            raise
        self._client = client

    def _measure_clock(self, client: Any) -> None:
        """A few round trips; keep the one with the smallest round trip time. Done at connect
        and again every ``clock_interval`` seconds (clocks drift: an offset measured at the
        start of a long run is off by the end); each put carries the offset it was shifted by."""
        import pyarrow.flight as flight

        best: tuple[int, int, int] | None = None
        for _ in range(_CLOCK_ROUNDS):
            t0 = time.time_ns()
            results = list(client.do_action(flight.Action("clock", b""), options=self._options()))
            t1 = time.time_ns()
            (server_ns,) = struct.unpack("<q", results[0].body.to_pybytes()[:8])
            rtt = t1 - t0
            if best is None or rtt < best[0]:
                best = (rtt, server_ns - (t0 + t1) // 2, t1)
        assert best is not None  # _CLOCK_ROUNDS >= 1
        self.rtt_ns, self.offset_ns, self.clock_measured_ns = best
        self.uncertainty_ns = (self.rtt_ns + 1) // 2
        self._clock_at = time.monotonic()
        self.clock_measurements += 1

    def _disconnect(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: BLE001 - a broken connection closes as it can
                pass
            self._client = None

    # -- sending

    def send(self, table: pa.Table) -> None:
        """Queue one batch (a drained table of one rank) and try to deliver what is queued."""
        if table.num_rows == 0:
            return
        if self._index is None:
            self._pick(table.column("rank")[0].as_py())
        if self.refused or self.queued_spans + table.num_rows > self.buffer_spans:
            self.dropped += table.num_rows
        else:
            for start in range(
                0, table.num_rows, self.put_rows
            ):  # each put well within the server's limits
                piece = table.slice(start, self.put_rows)
                self.queue.append((self.seq, piece))
                self.seq += 1
                self.queued_spans += piece.num_rows
        self.pump()

    def pump(self, now: float | None = None) -> bool:
        """Deliver queued batches unless backing off; True when the queue is empty."""
        import pyarrow.flight as flight

        if not self.queue:
            return True
        now = time.monotonic() if now is None else now
        if now < self._next_try or self.refused:
            return False
        if self._index is None:
            self._pick(self.queue[0][1].column("rank")[0].as_py())
        try:
            if self._client is None:
                self._connect()
            elif time.monotonic() - self._clock_at >= self.clock_interval:
                self._measure_clock(self._client)
            while self.queue:
                seq, table = self.queue[0]
                self._put(seq, table)
                self.queue.popleft()
                self.queued_spans -= table.num_rows
                self.sent_spans += table.num_rows
                self.sent_parts += 1
            self._backoff = self.backoff_min
            self._tried = 0
            if self._lost_since is not None:
                emit(CollectorRestored(self.url, time.monotonic() - self._lost_since))
                self._lost_since = None
            return True
        except flight.FlightUnauthenticatedError as exc:
            self.refused = True
            self.last_error = f"the collector at {self.url} refused the token: {exc}"
            print(f"hotspan: {self.last_error}; spans will be dropped", file=sys.stderr)
            self._drop_queue()
        except (
            flight.FlightServerError
        ) as exc:  # the collector refused this batch: it won't take it later
            seq, table = self.queue.popleft()
            self.queued_spans -= table.num_rows
            self.dropped += table.num_rows
            self.last_error = f"the collector refused a batch: {exc}"
        except (flight.FlightError, pa.ArrowException, OSError) as exc:
            self.failures += 1
            self.last_error = f"{self.url}: {type(exc).__name__}: {exc}"
            if self._lost_since is None:  # once per outage, not once per retry
                self._lost_since = now
                emit(CollectorLost(self.url, exc))
            self._disconnect()
            self._tried += 1
            if len(self.urls) > 1:
                # Fail over: the next collector of the list, at once; a batch whose put may
                # have reached the one that failed keeps its name (token, seq), so where both
                # write the same dataset the second write is recognised and kept once.
                assert self._index is not None  # picked above, before the first connect
                self._index = (self._index + 1) % len(self.urls)
                self.url = self.urls[self._index]
                self.failovers += 1
            if self._tried >= len(self.urls):  # every collector failed in a row: back off
                self._tried = 0
                self._next_try = now + self._backoff
                self._backoff = min(self._backoff * 2, self.backoff_max)
        return not self.queue

    def _put(self, seq: int, table: pa.Table) -> None:
        import pyarrow.flight as flight

        rank = table.column("rank")[0].as_py() if table.num_rows else 0
        command = json.dumps(
            {
                "v": 1,
                "rank": rank,
                "pid": self._pid,
                "host": self.host[:256],
                "batch": self.batch_token,
                "seq": seq,
                "offset_ns": self.offset_ns,
                "offset_uncertainty_ns": self.uncertainty_ns,
                "rtt_ns": self.rtt_ns,
                "sink_dropped": self.dropped,
                "clock_measured_ns": self.clock_measured_ns,
                "rows": table.num_rows,
                "bytes": table.nbytes,
            }
        ).encode()
        descriptor = flight.FlightDescriptor.for_command(command)
        writer, _reader = self._client.do_put(
            descriptor, table.schema, options=self._options(self.put_timeout)
        )
        try:
            writer.write_table(table, max_chunksize=1 << 16)
            writer.done_writing()
        finally:
            writer.close()  # raises the server's error, if any: the put is on disk only when this returns

    def _drop_queue(self) -> None:
        self.dropped += self.queued_spans
        self.queue.clear()
        self.queued_spans = 0

    def wait_retry(self) -> float:
        """Seconds until the next retry is due (0 when it is)."""
        return max(0.0, self._next_try - time.monotonic())

    def close(self, timeout: float = 5.0) -> None:
        """Deliver what is queued, retrying for at most ``timeout`` seconds; count the rest as dropped."""
        deadline = time.monotonic() + timeout
        while self.queue and not self.refused:
            if self.pump():
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(max(self.wait_retry(), 0.01), remaining))
        if self.queue:
            self._drop_queue()
        self._say_done()
        self._disconnect()

    def send_stacks(self, body: bytes, rank: int) -> bool:
        """Send this process's open stacks (:func:`~hotspan.recording._open_stacks.encode`):
        best effort, once (the next interval sends newer ones); True when delivered."""
        import pyarrow.flight as flight

        if self.refused or time.monotonic() < self._next_try:
            return False
        self._pick(rank)
        try:
            if self._client is None:
                self._connect()
            list(self._client.do_action(flight.Action("stacks", body), options=self._options()))
        except (flight.FlightError, pa.ArrowException, OSError) as exc:
            self.last_error = f"{self.url}: open stacks: {type(exc).__name__}: {exc}"
            self._disconnect()
            return False
        self.stacks_sent += 1
        return True

    def _say_done(self) -> None:
        """Tell the collector this writer is done, so it compacts our parts (best effort)."""
        if self._client is None or not (self.sent_parts or self.stacks_sent):
            return
        import pyarrow.flight as flight

        body = json.dumps({"pid": self._pid, "batch": self.batch_token}).encode()
        try:
            list(self._client.do_action(flight.Action("done", body), options=self._options()))
        except (flight.FlightError, pa.ArrowException, OSError):
            pass  # an older collector, or gone: the parts stay as they are


def serve(
    out: str | os.PathLike[str],
    listen: str,
    token: str | None,
    *,
    ready: Callable[[CollectorServer], object] | None = None,
    stop: threading.Event,
    log: IO[str] | None = sys.stderr,
) -> CollectorServer:
    """Run a collector until ``stop`` is set; return it (shut down) for its counts."""
    server = CollectorServer(out, listen, token=token, log=log)
    if ready is not None:
        ready(server)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
    return server
