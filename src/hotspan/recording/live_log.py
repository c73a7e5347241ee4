"""The live log: one line per finished span, printed while recording.

The native drain thread picks the spans at or above the threshold (and every error) as it
moves records out of the rings; a writer thread here formats and writes them. The
recording threads never format or write anything, and a failing writer is reported once
and then ignored: recording goes on.
"""

from __future__ import annotations

import math
import sys
import threading
from typing import IO, Any

from .. import _native
from .._quiet_threads import start_quiet
from .._units import human_ns

__all__ = ["LiveLog", "format_line", "live"]

_QUEUE_ENTRIES = 1 << 16
_current: "LiveLog | None" = None
_current_lock = threading.Lock()


def format_line(row: tuple[Any, ...], start_ns: int, rank: int) -> str:
    """One live-log line: time since start, rank, thread, name, category, arg, duration."""
    start, duration, _tid, thread, name, category, arg, error, depth = row
    mark = "!!" if error else "  "
    indent = "  " * min(depth, 8)
    return (
        f"{mark} {(start - start_ns) / 1e9:11.6f}s r{rank} {thread[:16]:<16} {indent}{name} "
        # arg is whatever the caller counts (bytes, items, tokens): shown as the number it is.
        f"[{category or '-'}] {'' if arg is None else f'arg={arg}':>14} {human_ns(duration):>11}\n"
    )


class LiveLog:
    """A running live log; stop() it, or use it as a context manager."""

    def __init__(self, min_ns: int, file: IO[str]):
        self.min_ns = min_ns
        self.file = file
        self.lines = 0
        self.skipped = 0
        self.failed: BaseException | None = None
        self._running = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> "LiveLog":
        from .._api import rank

        clock = _native._clock_info()
        self._start_ns = int(clock["anchor_real_ns"])
        self._rank = rank()
        min_ticks = math.ceil(self.min_ns / clock["ns_per_tick"]) if self.min_ns > 0 else 0
        _native._live_start(min_ticks, _QUEUE_ENTRIES)
        self._running.set()
        self._thread = threading.Thread(target=self._write_loop, name="hotspan-live", daemon=True)
        start_quiet(self._thread)
        return self

    def close(self) -> None:
        """Write what was recorded so far, then stop (``stop()``, the old name, is the same)."""
        if not self._running.is_set():
            return
        _native._sweep()  # move what the rings hold now, so its lines are written too
        self._running.clear()
        _native._live_stop()
        if self._thread is not None:
            self._thread.join()
        global _current
        with _current_lock:
            if _current is self:
                _current = None

    stop = close  # the old name: every handle closes with close()

    def __enter__(self) -> "LiveLog":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _write_loop(self) -> None:
        while True:
            running = self._running.is_set()
            rows, skipped = _native._live_take(100 if running else 0)
            self.skipped += skipped
            if rows or skipped:
                self._write(rows, skipped)
            if not running and not rows:
                return

    def _write(self, rows: list[tuple[Any, ...]], skipped: int) -> None:
        if self.failed is not None:
            return
        text = "".join(format_line(row, self._start_ns, self._rank) for row in rows)
        if skipped:
            text += f"hotspan.live: {skipped} spans not shown (the writer fell behind)\n"
        try:
            self.file.write(text)
            self.file.flush()
            self.lines += len(rows)
        except BaseException as exc:  # noqa: BLE001 - a broken writer must not stop recording
            self.failed = exc
            try:
                print(
                    f"hotspan.live: writing the live log failed ({exc!r}); it stops, recording goes on",
                    file=sys.__stderr__,
                )
            except Exception:  # noqa: BLE001
                pass


def live(min_ns: int = 0, file: IO[str] | None = None) -> LiveLog:
    """Print one line per finished span of at least ``min_ns`` (errors always, marked ``!!``)
    to ``file`` (default: stderr) until the returned log is stopped.

        with hotspan.live(min_ns=1_000_000):
            train()
    """
    if isinstance(min_ns, bool) or not isinstance(min_ns, int):
        raise TypeError(f"live(): min_ns must be an int, not {type(min_ns).__name__}")
    if min_ns < 0:
        raise ValueError(f"live(): min_ns must be >= 0, not {min_ns}")
    if file is not None and not callable(getattr(file, "write", None)):
        raise TypeError(f"live(): file must have a write() method, not {type(file).__name__}")
    global _current
    with _current_lock:
        previous = _current
    if previous is not None:
        previous.stop()
    log = LiveLog(min_ns, file if file is not None else sys.stderr)
    with _current_lock:
        _current = log
    return log.start()
