"""Open stacks at a collector: what ``hotspan hang grpc://HOST:PORT`` reads while a job whose
ranks record only to a collector hangs.

A rank recording to a collector (``record("grpc://...")``) with a flight file
(``HOTSPAN_FLIGHT=PATH``) sends its open stacks, read from that file, every
``HOTSPAN_STACKS_INTERVAL`` seconds (2 by default), on the sink's sender thread (never the
program's): Flight action ``stacks`` with a JSON body (:func:`encode`). The collector keeps
the latest per process, its times shifted onto the collector's clock as parts are, and
answers action ``open_stacks`` with all of them (:meth:`LiveStacks.answer`). A process the
collector has not heard from for three intervals (and two seconds) is taken as gone: its
last stacks are kept, as a flight file outlives a killed process; one that said ``done``
exited.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from ..formats._collector_client import is_gone

__all__ = ["ENV_STACKS_INTERVAL", "STACKS_INTERVAL_S", "LiveStacks", "encode", "is_gone"]

ENV_STACKS_INTERVAL = "HOTSPAN_STACKS_INTERVAL"
STACKS_INTERVAL_S = 2.0
#: Largest ``stacks`` body the collector takes (bytes); the client cuts deeper stacks and
#: more threads than these to stay well under it.
MAX_STACKS_BODY = 1 << 20
MAX_THREADS = 256
MAX_FRAMES = 64
MAX_NAME = 256
#: Processes a collector keeps the stacks of (the oldest heard from goes first past it).
MAX_PROCESSES = 1 << 16


def encode(
    proc: Any, *, batch: str, host: str, interval_s: float, offset_ns: int, uncertainty_ns: int
) -> bytes:
    """The ``stacks`` body for ``proc`` (a :class:`~hotspan.recording.flight.FlightProcess`
    read from this process's own flight file)."""
    threads = []
    for thread in proc.threads[:MAX_THREADS]:
        frames = thread.stack
        threads.append(
            {
                "thread_id": thread.thread_id,
                "thread_name": thread.thread_name[:MAX_NAME],
                "complete": thread.complete and len(frames) <= MAX_FRAMES,
                # the outermost frames: where a rank is starts there
                "stack": [
                    [
                        f.span_id,
                        f.depth,
                        f.name[:MAX_NAME],
                        None if f.category is None else f.category[:MAX_NAME],
                        f.start_ns,
                    ]
                    for f in frames[:MAX_FRAMES]
                ],
            }
        )
    body = {
        "v": 1,
        "rank": proc.rank,
        "pid": proc.pid,
        "host": host[:MAX_NAME],
        "batch": batch,
        "interval_s": interval_s,
        "offset_ns": offset_ns,
        "offset_uncertainty_ns": uncertainty_ns,
        "threads": threads,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def _int(value: Any, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise ValueError(f"expected an integer in [{lo}, {hi}], not {value!r}")
    return value


def _text(value: Any, optional: bool = False) -> str | None:
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise ValueError(f"expected a string, not {type(value).__name__}")
    return value[:MAX_NAME]


class LiveStacks:
    """The collector's side: the latest open stacks per process (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.procs: dict[tuple[str, int, str], dict[str, Any]] = {}

    def update(self, body: bytes) -> None:
        """Keep the stacks of one ``stacks`` action (ValueError: a body not as :func:`encode`
        writes it; nothing kept)."""
        if len(body) > MAX_STACKS_BODY:
            raise ValueError(f"{len(body):,} bytes, more than {MAX_STACKS_BODY:,}")
        info = json.loads(body)
        if not isinstance(info, dict):
            raise ValueError("not an object")
        rank = _int(info.get("rank"), 0, 2**31 - 1)
        pid = _int(info.get("pid"), 0, 2**31 - 1)
        host = _text(info.get("host", ""))
        batch = _text(info.get("batch", ""))
        interval = info.get("interval_s", STACKS_INTERVAL_S)
        if (
            isinstance(interval, bool)
            or not isinstance(interval, (int, float))
            or not 0 < interval <= 3600
        ):
            raise ValueError(f"interval_s: expected seconds in (0, 3600], not {interval!r}")
        offset = _int(info.get("offset_ns", 0), -(2**62), 2**62)
        uncertainty = _int(info.get("offset_uncertainty_ns", 0), 0, 2**62)
        shift = offset if abs(offset) > uncertainty else 0  # as the parts' times are
        threads = []
        raw_threads = info.get("threads")
        if not isinstance(raw_threads, list) or len(raw_threads) > MAX_THREADS:
            raise ValueError(f"threads: expected a list of at most {MAX_THREADS}")
        for t in raw_threads:
            if not isinstance(t, dict) or not isinstance(t.get("stack"), list):
                raise ValueError("a thread: expected an object with a stack")
            if len(t["stack"]) > MAX_FRAMES:
                raise ValueError(f"a stack deeper than {MAX_FRAMES}")
            stack = []
            for frame in t["stack"]:
                if not isinstance(frame, list) or len(frame) != 5:
                    raise ValueError("a frame: expected [span_id, depth, name, category, start_ns]")
                span_id, depth, name, category, start = frame
                stack.append(
                    [
                        _int(span_id, 0, 2**64 - 1),
                        _int(depth, 0, 2**31 - 1),
                        _text(name),
                        _text(category, optional=True),
                        _int(start, 0, 2**63 - 1) + shift,
                    ]
                )
            threads.append(
                {
                    "thread_id": _int(t.get("thread_id"), -(2**63), 2**63 - 1),
                    "thread_name": _text(t.get("thread_name", "")),
                    "complete": bool(t.get("complete", True)),
                    "stack": stack,
                }
            )
        entry = {
            "rank": rank,
            "pid": pid,
            "host": host,
            "batch": batch,
            "interval_s": float(interval),
            "received_ns": time.time_ns(),
            "exited": False,
            "threads": threads,
        }
        with self.lock:
            key = (str(host), pid, str(batch))
            self.procs.pop(key, None)
            self.procs[key] = entry  # newest last: the oldest heard from goes first
            while len(self.procs) > MAX_PROCESSES:
                self.procs.pop(next(iter(self.procs)))

    def exited(self, pid: int, batch: str) -> None:
        """A writer said ``done``: its process exited cleanly."""
        with self.lock:
            for (_host, p, b), entry in self.procs.items():
                if p == pid and b == batch:
                    entry["exited"] = True
                    entry["threads"] = []

    def answer(self) -> bytes:
        """The ``open_stacks`` answer: every process's latest stacks, and the time now."""
        with self.lock:
            procs = [dict(e) for e in self.procs.values()]
        return json.dumps({"v": 1, "now_ns": time.time_ns(), "processes": procs}).encode()
