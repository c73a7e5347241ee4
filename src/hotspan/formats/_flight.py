"""Reading a flight file (``configure(flight=PATH)``, ``HOTSPAN_FLIGHT``): the spans a dead
process completed and never drained, and the stacks of open spans of a dead or running one.
A format of its own, read below the analysis (``hotspan hang``, ``hotspan top``,
``hotspan recover``); ``hotspan.recording.flight`` is its public face, with ``snapshot()``.

The file is written by the C core (csrc/hs_flight.h describes the layout; the header holds
the offsets of every field read here). It comes from another process and may be truncated,
damaged or not a flight file at all, so every count and offset is checked against the file
before it is used: a bad file is a ``FlightFileError`` naming it, never a crash, a hang or
memory out of proportion to the file.

    recover(path) -> pyarrow.Table     # after a crash: undrained spans + the open ones
    stacks(path) -> FlightProcess      # open spans now, read without stopping the writer
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ._base import TraceFileError, open_regular_file
from .dataset import pid_alive

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    import pyarrow as pa

MAGIC = b"HSFLIGHT"
FORMAT = 1
#: The table metadata key of the span ids that were still open when the process died
#: (JSON list); their end_ns is the last time the file saw the process.
META_OPEN_SPANS = b"open_spans"

# hs_flight_header, field by field (csrc/hs_flight.h): little-endian, no padding needed.
_HEADER = struct.Struct(
    "<8sII32sqiiQ"  # magic format header_bytes version pid rank clock_source file_bytes
    "QII"
    "QQ"
    "QII"  # slots_off nslots slot_bytes | strings_off strings_cap | pairs_off pairs_cap frames_cap
    "QIIQ"  # blocks_off nblocks block_records block_bytes
    "8I"
    "6I"
    "6I"
    "7I"
    "I"  # slot, tstate, frame, block offsets; pad
    "QQqdQIIQII"  # clock_gen clock_t0 clock_n0 clock_npt last_seen clean nstrings strings_used npairs lost
    "q"  # process_start_ns
)
_NAMES = (
    "magic format header_bytes version pid rank clock_source file_bytes "
    "slots_off nslots slot_bytes strings_off strings_cap pairs_off pairs_cap frames_cap "
    "blocks_off nblocks block_records block_bytes "
    "off_slot_state off_slot_tid off_slot_gen off_slot_name off_slot_name_len off_slot_frames_addr "
    "off_slot_tstate off_slot_frames "
    "off_t_depth off_t_stack off_t_seq off_t_own_stack off_t_own_depth off_t_stack_owner "
    "frame_bytes off_f_start off_f_seq off_f_arg off_f_pair off_f_flags "
    "off_b_head off_b_cap off_b_state off_b_tid off_b_base off_b_drained off_b_recs pad0 "
    "clock_gen clock_t0 clock_n0 clock_npt last_seen clean_exit nstrings strings_used npairs lost_strings "
    "process_start_ns"
).split()
assert len(_NAMES) == len(_HEADER.unpack(bytes(_HEADER.size)))
_CLOCK_AT = struct.calcsize(_HEADER.format[: _HEADER.format.index("QQqdQ")])  # clock_gen's offset

# Limits far above what the writer makes: a count past them is damage, not a big file.
_MAX_SLOTS = 1 << 16
_MAX_FRAMES = 1 << 16
_MAX_BLOCKS = 1 << 26
_MAX_RECORDS = 1 << 24
_RECORD = 32
_F_ERROR, _F_ARG, _F_EXT = 1, 2, 8
_F_COUNTER = 64  # HS_F_COUNTER: a counter's value, not a span (csrc/hs_ring.h)
_SEQLOCK_TRIES = 200


class FlightFileError(TraceFileError):
    """A file that is not a flight file this hotspan can read (the message names it)."""


@dataclass
class Frame:
    span_id: int
    parent_id: int | None
    depth: int
    name: str
    category: str | None
    start_ns: int
    arg: int | None


@dataclass
class FlightThread:
    thread_id: int
    thread_name: str
    stack: list[Frame] = field(default_factory=list)  # outermost first
    complete: bool = True  # False: deeper than the file holds, or never read consistently


@dataclass
class FlightProcess:
    path: str
    pid: int
    rank: int
    alive: bool
    clean_exit: bool
    last_seen_ns: int
    threads: list[FlightThread]


class _File:
    """A flight file mapped read-only, its header checked."""

    def __init__(self, path: str | os.PathLike[str]):
        self.path = os.fspath(path)
        try:
            with open_regular_file(self.path, FlightFileError) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < _HEADER.size:
                    raise FlightFileError(
                        self.path, f"truncated: {size} bytes, not a hotspan flight file"
                    )
                self.mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        except IsADirectoryError:
            raise FlightFileError(self.path, "is a directory, not a flight file") from None
        self.size = size
        h = dict(zip(_NAMES, _HEADER.unpack_from(self.mm, 0)))
        self.h = h
        if h["magic"] != MAGIC:
            raise FlightFileError(self.path, "not a hotspan flight file (no HSFLIGHT magic)")
        if h["format"] != FORMAT:
            raise FlightFileError(
                self.path, f"flight file format {h['format']}, this hotspan reads format {FORMAT}"
            )
        version = h["version"].split(b"\0", 1)[0].decode("utf-8", "replace")
        if version != __version__:
            raise FlightFileError(
                self.path,
                f"written by hotspan {version!r}, this is hotspan {__version__}: "
                f"read it with that version",
            )
        self._check_layout()

    def close(self) -> None:
        try:
            self.mm.close()
        except BufferError:  # a numpy view still alive (an exception's frames): the GC closes it
            pass

    def _bad(self, what: str) -> FlightFileError:
        return FlightFileError(self.path, f"damaged flight file: {what}")

    def _check_layout(self) -> None:
        h, size = self.h, self.size
        if h["header_bytes"] != _HEADER.size:
            raise self._bad(f"header of {h['header_bytes']} bytes, expected {_HEADER.size}")
        if h["file_bytes"] != size:
            raise FlightFileError(
                self.path, f"truncated: {size:,} bytes of the {h['file_bytes']:,} it was made with"
            )
        if not (
            0 < h["nslots"] <= _MAX_SLOTS
            and 0 < h["frames_cap"] <= _MAX_FRAMES
            and 0 < h["nblocks"] <= _MAX_BLOCKS
            and 2 <= h["block_records"] <= _MAX_RECORDS
        ):
            raise self._bad("counts out of range")
        fb = h["frame_bytes"]
        if (
            fb < 8
            or any(h[k] + 8 > fb for k in ("off_f_start", "off_f_seq", "off_f_arg"))
            or any(h[k] + 4 > fb for k in ("off_f_pair", "off_f_flags"))
        ):
            raise self._bad("frame layout")
        sb = h["slot_bytes"]
        if (
            h["off_slot_frames"] + h["frames_cap"] * fb > sb
            or h["off_slot_name"] + 1 > sb
            or any(
                h[k] + 8 > sb
                for k in (
                    "off_slot_state",
                    "off_slot_tid",
                    "off_slot_gen",
                    "off_slot_name_len",
                    "off_slot_frames_addr",
                )
            )
        ):
            raise self._bad("slot layout")
        tsize = h["off_slot_frames"] - h["off_slot_tstate"]
        if tsize <= 0 or any(
            h[k] + 8 > tsize
            for k in (
                "off_t_depth",
                "off_t_stack",
                "off_t_seq",
                "off_t_own_stack",
                "off_t_own_depth",
                "off_t_stack_owner",
            )
        ):
            raise self._bad("thread state layout")
        bb = h["block_bytes"]
        if h["off_b_recs"] + h["block_records"] * _RECORD > bb or any(
            h[k] + 8 > h["off_b_recs"]
            for k in (
                "off_b_head",
                "off_b_cap",
                "off_b_state",
                "off_b_tid",
                "off_b_base",
                "off_b_drained",
            )
        ):
            raise self._bad("block layout")
        regions = [
            (h["slots_off"], h["nslots"] * sb, "thread slots"),
            (h["strings_off"], h["strings_cap"], "strings"),
            (h["pairs_off"], h["pairs_cap"] * 8, "pairs"),
            (h["blocks_off"], h["nblocks"] * bb, "blocks"),
        ]
        for off, length, what in regions:
            if off < _HEADER.size or off + length > size:
                raise self._bad(f"the {what} lie outside the file")
        if h["strings_used"] > h["strings_cap"] or h["npairs"] > h["pairs_cap"]:
            raise self._bad("string table counts")

    # ---- strings --------------------------------------------------------------------------

    def strings(self) -> tuple[dict[int, str], list[tuple[int, int]]]:
        """(string id -> text, pair id -> (name id, path id))."""
        h, mm = self.h, self.mm
        out: dict[int, str] = {}
        at, end = h["strings_off"], h["strings_off"] + min(h["strings_used"], h["strings_cap"])
        while at + 8 <= end:
            sid, n = struct.unpack_from("<II", mm, at)
            if at + 8 + n > end:
                break  # damaged: the rest is unreadable
            out[sid] = mm[at + 8 : at + 8 + n].decode("utf-8", "replace")
            at += 8 + ((n + 7) & ~7)
        npairs = min(h["npairs"], h["pairs_cap"])
        raw = mm[h["pairs_off"] : h["pairs_off"] + 8 * npairs]
        flat = struct.unpack(f"<{2 * npairs}I", raw)
        pairs = list(zip(flat[0::2], flat[1::2]))
        return out, pairs

    # ---- clock ----------------------------------------------------------------------------

    def clock(self) -> tuple[int, int, float, int]:
        """(t0, n0, ns per tick, last seen ticks), read consistently (the clock's seqlock)."""
        for _ in range(_SEQLOCK_TRIES):
            gen1 = struct.unpack_from("<Q", self.mm, _CLOCK_AT)[0]
            t0, n0, npt, last = struct.unpack_from("<QqdQ", self.mm, _CLOCK_AT + 8)
            gen2 = struct.unpack_from("<Q", self.mm, _CLOCK_AT)[0]
            if gen1 == gen2 and not gen1 & 1:
                break
        # NaN, absurd rates or anchors: damage (and no conversion may leave int64)
        if not (npt == npt and 1e-6 < npt < 1e6) or not -(1 << 62) < n0 < (1 << 62):
            raise self._bad("clock calibration")
        return t0, n0, npt, last

    # ---- threads --------------------------------------------------------------------------

    def slot(self, i: int) -> int:
        at: int = self.h["slots_off"] + i * self.h["slot_bytes"]
        return at

    def read_thread(
        self,
        i: int,
        names: dict[int, str],
        pairs: list[tuple[int, int]],
        convert: Callable[[int], int],
        live: bool,
    ) -> FlightThread | None:
        """Slot i's thread and its open spans (None: no live thread there). A running
        writer is never stopped: the frames are copied between two reads of the thread's
        next span id (bumped before a frame is written) and of the slot's generation (odd
        while a slow path rearranges the stack); a copy during which either moved is
        taken again."""
        h, mm = self.h, self.mm
        at = self.slot(i)
        ts = at + h["off_slot_tstate"]
        state = struct.unpack_from("<I", mm, at + h["off_slot_state"])[0]
        if state != 1:
            return None
        frames_addr = struct.unpack_from("<Q", mm, at + h["off_slot_frames_addr"])[0]
        fb, cap = h["frame_bytes"], h["frames_cap"]
        for _ in range(_SEQLOCK_TRIES if live else 1):
            gen1 = struct.unpack_from("<Q", mm, at + h["off_slot_gen"])[0]
            seq1 = struct.unpack_from("<Q", mm, ts + h["off_t_seq"])[0]
            tid = struct.unpack_from("<q", mm, at + h["off_slot_tid"])[0]
            nlen = min(
                struct.unpack_from("<I", mm, at + h["off_slot_name_len"])[0],
                h["off_slot_tstate"] - h["off_slot_name"],
            )
            name = mm[at + h["off_slot_name"] : at + h["off_slot_name"] + nlen]
            depth = struct.unpack_from("<I", mm, ts + h["off_t_depth"])[0]
            stack = struct.unpack_from("<Q", mm, ts + h["off_t_stack"])[0]
            own = struct.unpack_from("<Q", mm, ts + h["off_t_own_stack"])[0]
            own_depth = struct.unpack_from("<I", mm, ts + h["off_t_own_depth"])[0]
            if stack != frames_addr and own == frames_addr:
                depth = own_depth  # an asyncio task's stack is current: the thread's own one
            complete = stack == frames_addr or own == frames_addr
            n = min(depth, cap) if complete else 0
            complete = complete and depth <= cap
            raw = mm[at + h["off_slot_frames"] : at + h["off_slot_frames"] + n * fb]
            seq2 = struct.unpack_from("<Q", mm, ts + h["off_t_seq"])[0]
            gen2 = struct.unpack_from("<Q", mm, at + h["off_slot_gen"])[0]
            if gen1 == gen2 and not gen1 & 1 and seq1 == seq2:
                break
            time.sleep(0)  # let the writer finish what it is doing
        else:
            if live:
                return FlightThread(tid, name.decode("utf-8", "replace"), [], complete=False)
        thread = FlightThread(tid, name.decode("utf-8", "replace"), [], complete=complete)
        parent = None
        for d in range(n):
            o = d * fb
            (start,) = struct.unpack_from("<Q", raw, o + h["off_f_start"])
            (seq,) = struct.unpack_from("<Q", raw, o + h["off_f_seq"])
            (arg,) = struct.unpack_from("<q", raw, o + h["off_f_arg"])
            (pair,) = struct.unpack_from("<I", raw, o + h["off_f_pair"])
            (flags,) = struct.unpack_from("<I", raw, o + h["off_f_flags"])
            nm, cat = _pair_strings(pair, names, pairs)
            thread.stack.append(
                Frame(seq, parent, d, nm, cat, convert(start), arg if flags & _F_ARG else None)
            )
            parent = seq
        return thread

    def threads(
        self,
        names: dict[int, str],
        pairs: list[tuple[int, int]],
        convert: Callable[[int], int],
        live: bool,
    ) -> list[FlightThread]:
        out = []
        for i in range(self.h["nslots"]):
            t = self.read_thread(i, names, pairs, convert, live)
            if t is not None:
                out.append(t)
        return out

    def thread_names(self) -> dict[int, str]:
        """Every slot's thread id -> name (exited threads too, while their slot is kept)."""
        h, mm = self.h, self.mm
        out = {}
        for i in range(h["nslots"]):
            at = self.slot(i)
            if struct.unpack_from("<I", mm, at + h["off_slot_state"])[0] == 0:
                continue
            tid = struct.unpack_from("<q", mm, at + h["off_slot_tid"])[0]
            nlen = min(
                struct.unpack_from("<I", mm, at + h["off_slot_name_len"])[0],
                h["off_slot_tstate"] - h["off_slot_name"],
            )
            out[tid] = mm[at + h["off_slot_name"] : at + h["off_slot_name"] + nlen].decode(
                "utf-8", "replace"
            )
        return out


def _pair_strings(
    pair: int, names: dict[int, str], pairs: list[tuple[int, int]]
) -> tuple[str, str | None]:
    if pair >= len(pairs):
        return f"<unknown span {pair}>", None
    name_id, path_id = pairs[pair]
    name = names.get(name_id, f"<unknown name {name_id}>")
    return name, (names.get(path_id, f"<unknown category {path_id}>") if path_id else None)


def _converter(t0: int, n0: int, npt: float) -> Callable[[int], int]:
    """ticks -> epoch ns with the file's newest clock segment (ticks are unsigned 64-bit)."""

    def convert(ticks: int) -> int:
        d = ticks - t0
        if d >= 1 << 63:
            d -= 1 << 64
        return _clamp(n0 + (d if npt == 1.0 else int(d * npt)))

    return convert


def _clamp(ns: int) -> int:
    """Into int64 (a damaged tick converts to an absurd time, never to an overflow)."""
    return min(max(ns, -(1 << 62)), 1 << 62)


def _maps_file(pid: int, path: str) -> bool:
    """Whether process pid maps path (a reused pid does not)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as fh:
            target = os.path.realpath(path).encode()
            return any(line.rstrip(b"\n").endswith(b" " + target) for line in fh)
    except OSError:
        return pid_alive(pid)


def stacks(path: str | os.PathLike[str]) -> FlightProcess:
    """The open spans of the process that writes (or wrote) the flight file at path, per
    thread, read without stopping it."""
    f = _File(path)
    try:
        h = f.h
        t0, n0, npt, last = f.clock()
        convert = _converter(t0, n0, npt)
        alive = not h["clean_exit"] and pid_alive(h["pid"]) and _maps_file(h["pid"], f.path)
        names, pairs = f.strings()
        threads = [] if h["clean_exit"] else f.threads(names, pairs, convert, live=alive)
        return FlightProcess(
            f.path, h["pid"], h["rank"], alive, bool(h["clean_exit"]), convert(last), threads
        )
    finally:
        f.close()


# --------------------------------------------------------------------------- recovery


class _Damaged(Exception):
    """A block (or a thread's stack) whose records break the writer's invariants: left out."""


#: Spans recovered end no later than this after the last time the file saw the process (the
#: drain thread's last pass; spans completed between it and the death are later than it).
_LATE_NS = 600 * 10**9
#: ... and start no earlier than this before it: a process's life, generously (a tick damaged
#: into an absurd time lands decades away). Only for a file without its process's start (the
#: tests' fake clock, whose ticks are whatever the test says); otherwise a span starts no
#: earlier than the process's start (the header's ``process_start_ns``).
_LIFE_NS = 366 * 86_400 * 10**9
#: How far ticks converted with the file's last clock segment may stray from the segments the
#: process used (the clock slews at most 5e-4, csrc/hs_clock.c): a margin of this share of
#: the process's life, and at least _START_SLACK_NS, before its start.
_SLEW = 1e-3
_START_SLACK_NS = 1_000_000
_CLOCK_FAKE = 3  # HS_CLOCK_FAKE (csrc/hs_clock.h)
# HS_F_ERROR, HS_F_ARG, HS_F_INSTANT, HS_F_EXT, HS_F_OVERLAP, HS_F_TASKROOT (csrc/hs_ring.h)
_KNOWN_FLAGS = 1 | 2 | 4 | 8 | 16 | 32
_BAD_IDS = (0, (1 << 64) - 1)  # 0 means "no parent"; the writer never hands out either


def _decode_block(
    f: _File,
    i: int,
    convert_arrays: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]],
    life: tuple[int, int],
    npairs: int,
) -> dict[str, Any] | None:
    """The records of block i not drained yet, as numpy columns (None: nothing there).
    Raises ``_Damaged`` naming what is wrong when the block's counts or records break the
    writer's invariants (checked on all its records, drained ones included): counts inside
    the block, span ids non-zero and distinct, a parent exactly when the depth is above 0,
    a parent in the block one level up, known flags and name pairs, times inside the
    process's life. Vectorised: a block of any size costs a few numpy passes."""
    import numpy as np

    h, mm = f.h, f.mm
    at = h["blocks_off"] + i * h["block_bytes"]
    state = struct.unpack_from("<I", mm, at + h["off_b_state"])[0]
    if state != 1:
        return None
    head = struct.unpack_from("<Q", mm, at + h["off_b_head"])[0]
    cap = struct.unpack_from("<Q", mm, at + h["off_b_cap"])[0]
    drained = struct.unpack_from("<Q", mm, at + h["off_b_drained"])[0]
    tid = struct.unpack_from("<q", mm, at + h["off_b_tid"])[0]
    base = struct.unpack_from("<Q", mm, at + h["off_b_base"])[0]
    if drained > head:
        raise _Damaged(f"{drained:,} records drained of {head:,} written")
    if head == 0:
        return None  # nothing was written there (a block never claimed holds no capacity either)
    if not 0 < cap <= h["block_records"]:
        raise _Damaged(
            f"capacity of {cap:,} records, the file's blocks hold {h['block_records']:,}"
        )
    if head > cap:
        raise _Damaged(f"{head:,} records written in {cap:,} slots")
    if drained == head:
        return None
    recs = np.frombuffer(mm, dtype=np.uint64, count=4 * head, offset=at + h["off_b_recs"]).reshape(
        head, 4
    )
    w0, w1 = recs[:, 2], recs[:, 3]
    flags = (w0 >> np.uint64(56)).astype(np.uint32)
    # Which slots are records: the slot after a record flagged EXT holds its extension (whose
    # own flag byte is the top of a duration: 0). A slot is an extension when an odd number
    # of EXT-flagged slots run up to the one before it.
    ext_flag = (flags & _F_EXT) != 0
    run = np.zeros(head, dtype=np.int64)  # length of the EXT-flagged run ending at each slot
    if ext_flag.any():
        idx = np.arange(head)
        starts = np.where(ext_flag, -1, idx)
        last_clear = np.maximum.accumulate(starts)
        run = np.where(ext_flag, idx - last_clear, 0)
    is_ext_data = np.zeros(head, dtype=bool)
    is_ext_data[1:] = (run[:-1] % 2) == 1
    ext_primary = ext_flag & ~is_ext_data
    if ext_primary[-1]:
        raise _Damaged("an extended record without its extension")
    prim = np.flatnonzero(~is_ext_data)
    # counter records (hotspan.counter) are not spans and take no span id: left out
    prim = prim[(flags[prim] & np.uint32(_F_COUNTER)) == 0]
    if not len(prim):
        return None
    fl = flags[prim]
    if (fl & ~np.uint32(_KNOWN_FLAGS)).any():
        raise _Damaged(
            f"unknown record flags 0x{int(fl[(fl & ~np.uint32(_KNOWN_FLAGS)) != 0][0]):x}"
        )
    low = (w1[prim] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    # span ids: each record's low 32 bits against the previous id (hs_seq_extend), the
    # block's base id before the first; an extension record carries the full id, and the
    # records after it extend from that one.
    prev_low = np.empty_like(low)
    prev_low[0] = np.uint32(base & 0xFFFFFFFF)
    prev_low[1:] = low[:-1]
    delta = (low - prev_low).astype(np.int32).astype(np.int64).astype(np.uint64)
    cum = np.cumsum(delta, dtype=np.uint64)
    ext_row = ext_primary[prim]
    ext_rows = np.flatnonzero(ext_row)
    seq = cum + np.uint64(base)
    if len(ext_rows):
        full = recs[prim[ext_rows] + 1, 0]
        # The last extension at or before each row: its full id plus the deltas since.
        last = np.maximum.accumulate(np.where(ext_row, np.arange(len(prim)), -1))
        anchored = last >= 0
        which = np.searchsorted(ext_rows, last[anchored])
        seq[anchored] = full[which] + (cum[anchored] - cum[last[anchored]])
    pdelta = (w1[prim] >> np.uint64(32)) & np.uint64(0xFFFFFF)
    depth = (w1[prim] >> np.uint64(56)).astype(np.int64)
    dur = w0[prim] & np.uint64((1 << 40) - 1)
    pair = ((w0[prim] >> np.uint64(40)) & np.uint64(0xFFFF)).astype(np.int64)
    parent = seq - pdelta
    has_parent = pdelta != 0
    if len(ext_rows):
        x = recs[prim[ext_rows] + 1]
        parent_p1 = x[:, 1]
        parent[ext_rows] = parent_p1 - np.uint64(1)
        has_parent[ext_rows] = parent_p1 != 0
        dur[ext_rows] = x[:, 2]
        depth[ext_rows] = (x[:, 3] & np.uint64(0xFFFFFFFF)).astype(np.int64)
        pair[ext_rows] = (x[:, 3] >> np.uint64(32)).astype(np.int64)
    _check_records(seq, parent, has_parent, depth, pair, npairs)
    start_ticks = recs[prim, 0]
    if (dur >= np.uint64(1 << 62)).any():
        raise _Damaged("a duration past 2^62 ticks")
    start_ns, end_ns = convert_arrays(start_ticks, dur)
    low_ns, high_ns = life
    outside = (start_ns < low_ns) | (end_ns > high_ns) | (end_ns < start_ns)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        raise _Damaged(
            f"span {int(seq[row])} at {int(start_ns[row])}..{int(end_ns[row])} ns, outside the "
            f"process's life ({low_ns}..{high_ns} ns)"
        )
    keep = prim >= drained
    arg = recs[prim, 1].view(np.int64)
    return {
        "span_id": seq[keep],
        "parent_id": parent[keep],
        "has_parent": has_parent[keep],
        "pair": pair[keep],
        "start_ns": start_ns[keep],
        "end_ns": end_ns[keep],
        "depth": depth[keep],
        "arg": arg[keep],
        "has_arg": (fl[keep] & _F_ARG) != 0,
        "error": (fl[keep] & _F_ERROR) != 0,
        "thread_id": np.full(int(keep.sum()), tid, dtype=np.int64),
        "rows": int(keep.sum()),
    }


def _check_records(
    seq: np.ndarray,
    parent: np.ndarray,
    has_parent: np.ndarray,
    depth: np.ndarray,
    pair: np.ndarray,
    npairs: int,
) -> None:
    """The invariants of one block's records (see ``_decode_block``); ``_Damaged`` if broken."""
    import numpy as np

    for bad in _BAD_IDS:
        if (seq == np.uint64(bad)).any():
            raise _Damaged(f"span id {bad}")
    order = np.argsort(seq, kind="stable")
    ordered = seq[order]
    repeats = ordered[1:] == ordered[:-1]
    if repeats.any():
        raise _Damaged(f"span id {int(ordered[1:][repeats][0])} twice")
    if (depth > 255 * 256).any() or (depth < 0).any():
        raise _Damaged(f"depth {int(depth.max())}")
    mismatch = has_parent != (depth > 0)  # hs_push: a parent exactly when below the top of a stack
    if mismatch.any():
        row = int(np.flatnonzero(mismatch)[0])
        raise _Damaged(
            f"span {int(seq[row])} at depth {int(depth[row])} "
            f"{'with' if has_parent[row] else 'without'} a parent"
        )
    if (has_parent & (parent >= seq)).any():  # ids are drawn in pre-order: a parent's comes first
        row = int(np.flatnonzero(has_parent & (parent >= seq))[0])
        raise _Damaged(f"span {int(seq[row])} has a later span {int(parent[row])} as its parent")
    if (pair >= npairs).any():
        raise _Damaged(f"name pair {int(pair.max())} of {npairs:,} known")
    # A parent in this block sits one level up.
    where = np.searchsorted(ordered, parent)
    found = has_parent & (where < len(ordered))
    found[found] = ordered[where[found]] == parent[found]
    if found.any():
        parent_depth = depth[order[where[found]]]
        wrong = parent_depth + 1 != depth[found]
        if wrong.any():
            row = int(np.flatnonzero(found)[np.flatnonzero(wrong)[0]])
            raise _Damaged(
                f"span {int(seq[row])} at depth {int(depth[row])} under span {int(parent[row])} "
                f"at depth {int(depth[order[where[row]]])}"
            )


def _life(f: _File, end_open: int) -> tuple[int, int]:
    """The times a recovered span may have, in epoch ns: from the process's start (the
    header's ``process_start_ns``, less the clock's slew) to the last time the file saw it
    (``end_open``) plus the spans completed after the drain's last pass (``_LATE_NS``), and
    never after now. A clock that puts the last update in the future, or before the start,
    is damage: no time the file gives can be trusted."""
    now = time.time_ns()
    if f.h["clock_source"] == _CLOCK_FAKE:
        return end_open - _LIFE_NS, min(end_open + _LATE_NS, now)
    start = f.h["process_start_ns"]
    if end_open > now + _START_SLACK_NS:
        raise f._bad(
            f"clock: its last update is {(end_open - now) / 1e9:,.3f} s in the future "
            "(a damaged clock, or a file from a machine whose clock runs ahead)"
        )
    if not end_open - _LIFE_NS <= start <= end_open + _START_SLACK_NS:
        raise f._bad(f"clock: the process started at {start} ns, its last update is {end_open} ns")
    slack = max(_START_SLACK_NS, int((end_open - start) * _SLEW))
    return start - slack, min(end_open + _LATE_NS, now)


def _stack_damage(thread: FlightThread, npairs: int, life: tuple[int, int]) -> str | None:
    """What is wrong with a thread's open frames, or None."""
    seen = set()
    for fr in thread.stack:
        if fr.span_id in _BAD_IDS or fr.span_id in seen:
            return f"open span id {fr.span_id}"
        if fr.parent_id is not None and fr.parent_id >= fr.span_id:
            return f"open span {fr.span_id} under the later span {fr.parent_id}"
        if not life[0] <= fr.start_ns <= life[1]:
            return f"open span {fr.span_id} started at {fr.start_ns} ns, outside the process's life"
        if fr.name.startswith("<unknown span "):
            return f"open span {fr.span_id}: name pair past the {npairs:,} known"
        seen.add(fr.span_id)
    return None


def recover(path: str | os.PathLike[str]) -> "pa.Table":
    """The spans a process that died left in its flight file: every span completed and not
    yet drained, and the spans still open at its death, whose ``end_ns`` is the last time
    the file saw the process and whose ids are listed (JSON) in the table's metadata under
    ``open_spans``. A file left by a clean exit gives an empty table.

    Every block's records are checked against the writer's invariants (see
    ``_decode_block``); a damaged block, or thread stack, is left out, and what was left out
    is counted in the table's metadata (``hotspan.skipped_on_load``) and said in a
    ``TraceFileWarning``. Raises ``FlightFileError`` for a file that is not a readable flight
    file of this version, and for one whose every block holding spans is damaged."""
    import numpy as np
    import pyarrow as pa

    from .._schema import META_PID, META_RANK, META_VERSION, SPAN_SCHEMA
    from .._selftime import with_self_ns
    from ._base import check_span_rules, note_skipped

    f = _File(path)
    try:
        h = f.h
        t0, n0, npt, last = f.clock()
        convert = _converter(t0, n0, npt)

        def convert_arrays(ticks: np.ndarray, dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            # in float64, clamped: damaged ticks give absurd times, never int64 overflow
            # (exact where it matters: ns offsets below 2^53 from the anchor)
            d = (ticks - np.uint64(t0)).view(np.int64)
            small = not len(d) or (
                float(np.abs(d.astype(np.float64)).max()) < 2.0**60 and int(dur.max()) < (1 << 60)
            )
            if npt == 1.0 and small:  # ticks are ns: exact integers
                start = d + np.int64(n0)
                return start, start + dur.view(np.int64)
            lim = float(1 << 61)
            off = np.clip(d.astype(np.float64) * npt, -lim, lim).astype(np.int64)
            span = np.clip(dur.astype(np.float64) * npt, 0, lim).astype(np.int64)
            start = np.clip(np.int64(n0) + off, -(1 << 62), 1 << 62)
            return start, np.clip(start + span, -(1 << 62), 1 << 62)

        names, pairs = f.strings()
        npairs = len(pairs)
        thread_names = f.thread_names()
        end_open = convert(last)
        life = _life(f, end_open)
        parts: list[dict[str, Any]] = []
        damaged: list[tuple[int, str, int]] = []  # (block, what, records left out)
        open_rows: list[tuple[Any, ...]] = []
        lost_stacks: list[str] = []
        if not h["clean_exit"]:
            for i in range(h["nblocks"]):
                try:
                    part = _decode_block(f, i, convert_arrays, life, npairs)
                except _Damaged as exc:
                    at = h["blocks_off"] + i * h["block_bytes"]
                    written = struct.unpack_from("<Q", f.mm, at + h["off_b_head"])[0]
                    done = struct.unpack_from("<Q", f.mm, at + h["off_b_drained"])[0]
                    damaged.append(
                        (i, str(exc), max(0, min(written, h["block_records"]) - min(done, written)))
                    )
                    continue
                if part is not None and part["rows"]:
                    part["block"] = i
                    parts.append(part)
            for t in f.threads(names, pairs, convert, live=False):
                problem = _stack_damage(t, npairs, life)
                if problem is not None:
                    lost_stacks.append(f"thread {t.thread_id}: {problem}")
                    continue
                for fr in t.stack:
                    open_rows.append((t, fr))
        parts = _consistent_across_blocks(parts, open_rows, damaged)
        if damaged and not parts and not open_rows:
            block, what, _n = damaged[0]
            raise f._bad(
                f"block {block}: {what}; no block holding spans is intact "
                f"({len(damaged):,} damaged), nothing to recover"
            )
        meta = {
            META_VERSION: __version__.encode(),
            META_PID: str(h["pid"]).encode(),
            META_RANK: str(h["rank"]).encode(),
            META_OPEN_SPANS: json.dumps([fr.span_id for _t, fr in open_rows]).encode(),
            b"hotspan.recovered_from": f.path.encode(),
        }
        keys = (
            "span_id",
            "parent_id",
            "has_parent",
            "pair",
            "start_ns",
            "end_ns",
            "depth",
            "arg",
            "has_arg",
            "error",
            "thread_id",
        )
        empty = {
            "span_id": np.uint64,
            "parent_id": np.uint64,
            "has_parent": bool,
            "pair": np.int64,
            "start_ns": np.int64,
            "end_ns": np.int64,
            "depth": np.int64,
            "arg": np.int64,
            "has_arg": bool,
            "error": bool,
            "thread_id": np.int64,
        }
        arrays = {
            k: (np.concatenate([p[k] for p in parts]) if parts else np.empty(0, empty[k]))
            for k in keys
        }
        # The open frames after the completed spans, as columns of their own.
        opened = {
            "span_id": np.array([fr.span_id for _t, fr in open_rows], np.uint64),
            "parent_id": np.array([fr.parent_id or 0 for _t, fr in open_rows], np.uint64),
            "has_parent": np.array([fr.parent_id is not None for _t, fr in open_rows], bool),
            "start_ns": np.array([fr.start_ns for _t, fr in open_rows], np.int64),
            "end_ns": np.array([max(end_open, fr.start_ns) for _t, fr in open_rows], np.int64),
            "depth": np.array([fr.depth for _t, fr in open_rows], np.int64),
            "arg": np.array([fr.arg or 0 for _t, fr in open_rows], np.int64),
            "has_arg": np.array([fr.arg is not None for _t, fr in open_rows], bool),
            "error": np.zeros(len(open_rows), bool),
            "thread_id": np.array([t.thread_id for t, _fr in open_rows], np.int64),
        }
        col = {k: np.concatenate([arrays[k], opened[k]]) for k in opened}
        n = len(col["span_id"])
        # Names and categories: per pair once (a dictionary), then indexed by each row's pair.
        pair_ids = arrays["pair"]
        uniq, inverse = (
            np.unique(pair_ids, return_inverse=True)
            if len(pair_ids)
            else (np.empty(0, np.int64), np.empty(0, np.int64))
        )
        pair_text = [_pair_strings(int(p), names, pairs) for p in uniq]
        name = pa.DictionaryArray.from_arrays(
            pa.array(
                np.concatenate(
                    [
                        inverse.astype(np.int32),
                        len(uniq) + np.arange(len(open_rows), dtype=np.int32),
                    ]
                )
            ),
            pa.array([nm for nm, _c in pair_text] + [fr.name for _t, fr in open_rows], pa.string()),
        )
        category = pa.array(
            [pair_text[k][1] for k in inverse.tolist()] + [fr.category for _t, fr in open_rows],
            pa.string(),
        ).dictionary_encode()
        tids = col["thread_id"]
        tid_values = np.unique(tids)
        tnames = pa.DictionaryArray.from_arrays(
            pa.array(np.searchsorted(tid_values, tids).astype(np.int32)),
            pa.array(
                [thread_names.get(int(t), f"Thread-{int(t)}") for t in tid_values], pa.string()
            ),
        )
        start, end = col["start_ns"], col["end_ns"]
        table = pa.table(
            {
                "span_id": pa.array(col["span_id"], pa.uint64()),
                "parent_id": pa.array(col["parent_id"], pa.uint64(), mask=~col["has_parent"]),
                "name": name,
                "category": category,
                "start_ns": pa.array(start, pa.int64()),
                "end_ns": pa.array(end, pa.int64()),
                "duration_ns": pa.array(end - start, pa.int64()),
                "depth": pa.array(col["depth"].astype(np.int32), pa.int32()),
                "thread_id": pa.array(tids, pa.int64()),
                "thread_name": tnames,
                "pid": pa.array(np.full(n, h["pid"], np.int64), pa.int64()),
                "rank": pa.array(np.full(n, h["rank"], np.int32), pa.int32()),
                "arg": pa.array(col["arg"], pa.int64(), mask=~col["has_arg"]),
                "error": pa.array(col["error"], pa.bool_()),
            }
        )
        table = with_self_ns(table).cast(SPAN_SCHEMA.with_metadata(meta))
        if n:
            import pyarrow.compute as pc

            table = table.take(
                pc.sort_indices(table, [("thread_id", "ascending"), ("start_ns", "ascending")])
            )
        try:  # the invariants checked above imply the span rules; a last guard, never made-up rows
            check_span_rules(table, f.path)
        except TraceFileError as exc:
            raise f._bad(exc.problem) from None
        reasons: dict[str, int] = {}
        if damaged:
            block, what, _n = damaged[0]
            left_out = sum(count for _b, _w, count in damaged)
            if left_out:
                reasons[
                    f"record(s) of {len(damaged):,} damaged block(s) (block {block}: {what})"
                ] = left_out
            else:
                reasons[f"damaged block(s) holding no undrained record (block {block}: {what})"] = (
                    len(damaged)
                )
        if lost_stacks:
            reasons[f"thread stack(s) with damaged open spans ({lost_stacks[0]})"] = len(
                lost_stacks
            )
        if reasons and table.num_rows:
            table = note_skipped(table, f.path, reasons)
        elif reasons:
            raise f._bad("; ".join(reasons) + "; nothing intact to recover")
        return table
    finally:
        f.close()


def _consistent_across_blocks(
    parts: list[dict[str, Any]],
    open_rows: list[tuple[Any, ...]],
    damaged: list[tuple[int, str, int]],
) -> list[dict[str, Any]]:
    """The blocks whose spans agree with every other block's and the open frames: a span id
    in two blocks, or a child whose parent (in another block, or open) is not one level up,
    leaves its block out (added to ``damaged``)."""
    import numpy as np

    if not parts:
        return parts
    ids = np.concatenate(
        [p["span_id"] for p in parts] + [np.array([fr.span_id for _t, fr in open_rows], np.uint64)]
    )
    depths = np.concatenate(
        [p["depth"] for p in parts] + [np.array([fr.depth for _t, fr in open_rows], np.int64)]
    )
    owner = np.concatenate(
        [np.full(p["rows"], k) for k, p in enumerate(parts)] + [np.full(len(open_rows), -1)]
    )
    order = np.argsort(ids, kind="stable")
    ordered = ids[order]
    bad: dict[int, str] = {}
    repeats = np.flatnonzero(ordered[1:] == ordered[:-1])
    for r in repeats[:1000]:  # a damaged file may repeat many: the first blocks named are enough
        for k in (owner[order[r]], owner[order[r + 1]]):
            if k >= 0:
                bad.setdefault(int(k), f"span id {int(ordered[r])} also in another block")
    offset = 0
    for k, p in enumerate(parts):
        rows = slice(offset, offset + p["rows"])
        offset += p["rows"]
        if k in bad:
            continue
        parent, has = p["parent_id"], p["has_parent"]
        where = np.searchsorted(ordered, parent)
        found = has & (where < len(ordered))
        found[found] = ordered[where[found]] == parent[found]
        if found.any():
            wrong = depths[order[where[found]]] + 1 != depths[rows][found]
            if wrong.any():
                row = int(np.flatnonzero(found)[np.flatnonzero(wrong)[0]])
                bad[k] = (
                    f"span {int(p['span_id'][row])} at depth {int(p['depth'][row])} under span "
                    f"{int(parent[row])} at depth {int(depths[order[where[row]]])}"
                )
    for k in sorted(bad):
        damaged.append((parts[k]["block"], bad[k], parts[k]["rows"]))
    return [p for k, p in enumerate(parts) if k not in bad]


# --------------------------------------------------------------------------- finding files


def is_flight_file(path: str) -> bool:
    try:
        with open_regular_file(path) as fh:  # a FIFO is no flight file: never waited on
            return fh.read(8) == MAGIC
    except (OSError, TraceFileError):
        return False


def mapped_flight_files(pid: int) -> list[str]:
    """The flight files process pid maps (wherever HOTSPAN_FLIGHT put them)."""
    try:
        with open(f"/proc/{pid}/maps", "rb") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    seen: list[str] = []
    for line in lines:
        parts = line.split(None, 5)
        if len(parts) < 6 or not parts[5].startswith(b"/") or b"rw-s" not in parts[1]:
            continue  # flight files are shared writable mappings
        path = os.fsdecode(parts[5])
        if path not in seen and is_flight_file(path):
            seen.append(path)
    return seen


def flight_processes() -> dict[int, list[str]]:
    """Every process of this user (whose maps it can read) with a flight file mapped."""
    out: dict[int, list[str]] = {}
    me = os.getpid()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return out
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        files = mapped_flight_files(int(entry))
        if files:
            out[int(entry)] = files
    return out


__all__ = [
    "META_OPEN_SPANS",
    "FlightFileError",
    "FlightProcess",
    "FlightThread",
    "Frame",
    "flight_processes",
    "is_flight_file",
    "mapped_flight_files",
    "pid_alive",
    "recover",
    "stacks",
]
