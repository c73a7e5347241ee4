"""How fast the machine was while a run ran: kept in every run's metadata so that
``compare`` can tell a busy or slower machine from slower code.

Two measures, both off the hot path and nearly free:

- **A calibration loop**: a fixed piece of pure-Python work (``LOOP`` additions) timed in
  the CPU time of the thread that runs it (``time.thread_time_ns``), so neither other
  processes taking turns on the core nor the GIL count in it: it moves with the CPU's own
  speed (its clock, a hyperthread sibling busy, a hypervisor stealing cycles). The fastest
  of ``TRIES`` runs of about 0.1 ms; taken when a table's metadata is built (each drain,
  each flush of ``record()``), at most once a second, and once at ``import hotspan``.
  Interpreted work, as the spans of a Python program are: a loop of native code (tried in
  the drain thread) kept its pace where Python code in another process on the same core
  ran 1.4x slower.
- **Contention**: the time the process's threads were runnable but waiting for a CPU
  (Linux's ``/proc/self/task/*/schedstat``: CPU time and run-queue delay per thread, kept by
  the kernel), since ``import hotspan``, against their CPU time. ``(cpu + delay) / cpu``
  is how much longer CPU-bound work took in wall time than it would have on CPUs of its
  own: two busy processes on the one core give 2. Elsewhere (macOS) it is unknown (``None``) and the loop alone speaks.

``slowness = loop_ns × (cpu + delay) / cpu``: the wall time the loop's work costs here,
now. Its ratio between two runs is the machine's drift (:func:`drift`); ``compare`` judges
each group against it (analysis/comparison.py). Nothing here imports beyond the standard
library; ``import hotspan`` reads the counters once and takes the run's first calibration
sample (:func:`mark_import`, ~0.4 ms), so
that a run's contention is counted from there: the interpreter's start-up, and the first
drain's import of pyarrow (measured before it), wait on the disk more than on the CPU and
would dilute the contention the spans saw.
"""

from __future__ import annotations

import os
import threading
import time

TYPE_CHECKING = False  # typing loads for the type checker only (import hotspan stays light)
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "MACHINE_VERSION",
    "combine",
    "contention",
    "drift",
    "latest",
    "measure",
    "sample",
    "snapshot",
]

#: Iterations of the calibration loop (about 0.1 ms of CPU on a 2020s x86-64 core).
LOOP = 4000
#: Tries of the loop in one sample, the fastest kept.
TRIES = 3
#: At most one calibration sample in this many seconds (each drain asks).
SAMPLE_EVERY_S = 1.0
#: Samples kept (the oldest go first; their median is what a run reports).
KEEP = 64
MACHINE_VERSION = 1

_lock = threading.Lock()
_samples: list[int] = []
_taken = 0
_last_s = -1e18


def _loop_ns() -> int:
    """CPU ns of the fixed loop in this thread (the least of two tries: a tick of the
    scheduler's own bookkeeping landing in one is not the machine)."""
    best = None
    for _ in range(TRIES):
        start = time.thread_time_ns()
        total = 0
        for i in range(LOOP):
            total += i
        spent = time.thread_time_ns() - start
        best = spent if best is None or spent < best else best
    return int(best or 0)


def sample(force: bool = False) -> None:
    """Take a calibration sample now, unless one was taken in the last second."""
    global _last_s
    now = time.monotonic()
    if not force and now - _last_s < SAMPLE_EVERY_S:
        return
    _last_s = now
    _keep(_loop_ns())


def _keep(value: int) -> None:
    global _taken
    if value <= 0:  # a clock too coarse to time it: no sample rather than a wrong one
        return
    with _lock:
        _samples.append(value)
        _taken += 1
        del _samples[:-KEEP]


#: A drain pass (every 10 ms at most) reads the counters at most this often: a read costs
#: ~10 us a thread on a loaded 2-vCPU host (200 us for 18 threads), so 0.1% of a core at most.
CONTENTION_TTL_NS = 250_000_000
_contention_cache: tuple[int, tuple[int, int, int] | None] = (-(1 << 62), None)


def contention(fresh: bool = False) -> tuple[int, int, int] | None:
    """(CPU ns, run-queue delay ns, turns on a CPU) summed over the process's live threads
    since they started; None where the kernel does not say (not Linux, no schedstat). Read again
    after ``CONTENTION_TTL_NS`` (or ``fresh``): a thread's file costs some microseconds."""
    global _contention_cache
    now = time.monotonic_ns()
    if not fresh and now - _contention_cache[0] < CONTENTION_TTL_NS:
        return _contention_cache[1]
    value = _read_contention()
    if value is not None and _at_import is not None and value[0] > _at_import[0]:
        # threads that ended since are gone from both sums' later reads: never negative
        value = (
            value[0] - _at_import[0],
            max(0, value[1] - _at_import[1]),
            max(0, value[2] - _at_import[2]),
        )
    _contention_cache = (now, value)
    return value


#: The counters when hotspan was imported: a run's contention is counted from there (the
#: interpreter's start-up, its imports and their waits on the disk, is not the run).
_at_import: tuple[int, int, int] | None = None


def mark_import() -> None:
    """Keep the counters now, and take a calibration sample (``import hotspan`` calls it:
    ~0.4 ms). The sample is the run's start: with the one its first drain takes at its end
    (not held back by the once-a-second rule), even a run shorter than a second has the loop
    of two moments, not one (one sample at a slow moment of a CPU whose speed for Python
    wanders read a run 1.46x slower than its spans ran)."""
    global _at_import
    _at_import = _read_contention()
    _keep(_loop_ns())


def _read_contention() -> tuple[int, int, int] | None:
    cpu = delay = turns = 0
    seen = False
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/schedstat", "rb") as f:
                fields = f.read().split()
            cpu += int(fields[0])
            delay += int(fields[1])
            turns += int(fields[2])
            seen = True
        except (OSError, ValueError, IndexError):
            continue  # a thread that exited meanwhile
    return (cpu, delay, turns) if seen else None


def snapshot() -> dict[str, Any]:
    """The raw counters now (for a measure over an interval: :func:`measure` of two)."""
    sample()
    with _lock:
        latest, taken = _samples[-1:], _taken
    return {
        "latest": latest,
        "taken": taken,
        "contention": contention(fresh=True),
        "at_ns": time.monotonic_ns(),
    }


def _median(values: list[int]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return float(ordered[mid]) if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2.0


def measure(since: dict[str, Any] | None = None) -> dict[str, Any]:
    """The machine's speed as a run's metadata keeps it (``hotspan.machine``, JSON): ``loop_ns``
    (the median calibration sample), ``loop_min_ns``, ``samples``, ``cpu_ns`` and
    ``delay_ns`` (the threads' CPU time and run-queue wait; since ``since``, a
    :func:`snapshot`, else since they started), ``contention`` (``delay / cpu``),
    ``slowness`` (``loop_ns × (1 + contention)``), ``load`` (the 1-minute load average)."""
    sample()
    with _lock:
        samples = list(_samples)
        taken = _taken
    if since is not None:
        # the sample at the start and those taken since (the ring keeps the latest KEEP)
        fresh = samples[len(samples) - min(taken - since["taken"], len(samples)) :]
        samples = (since["latest"] + fresh) or samples[-1:]
    now = contention(fresh=since is not None)
    cpu = delay = turns = None
    if now is not None:
        cpu, delay, turns = now
        before = since.get("contention") if since else None
        if before is not None:
            cpu, delay, turns = cpu - before[0], delay - before[1], turns - before[2]
    loop = _median(samples)
    ratio = delay / cpu if cpu and delay is not None and cpu > 0 else None
    try:
        load = round(os.getloadavg()[0], 2)
    except OSError:
        load = None
    return {
        "version": MACHINE_VERSION,
        "loop_ns": loop,
        "loop_min_ns": float(min(samples)) if samples else None,
        "loop_kind": "python",
        "samples": taken if since is None else len(samples),
        "cpu_ns": cpu,
        "delay_ns": delay,
        "contention": ratio,
        "slowness": None if loop is None else loop * (1.0 + (ratio or 0.0)),
        # the threads' average turn on a CPU: a span much shorter than it mostly runs
        # uninterrupted, so contention stretches few of them (compare judges their fast part)
        "turn_ns": cpu / turns if cpu and turns else None,
        "load": load,
        "cpus": os.cpu_count(),
    }


#: The calibration loop's own wobble, as a ratio between two samples: 0.1 ms of Python on
#: this project's 2-vCPU host reads ~95 or ~160 us from one moment to the next (a native
#: loop beside it holds within 3%), so a single sample per run moves by that much alone.
LOOP_WOBBLE = 0.20


def _past_wobble(ratio: float) -> float:
    """The loop's ratio between two runs, less its wobble: 1 within it, else the part
    beyond it (1.8 -> 1.5, 0.5 -> 0.6)."""
    band = 1.0 + LOOP_WOBBLE
    if ratio > band:
        return ratio / band
    if ratio < 1.0 / band:
        return ratio * band
    return 1.0


def drift(base: Any, new: Any) -> dict[str, Any] | None:
    """How much slower the machine was for ``new`` than for ``base`` (two :func:`measure`
    results): ``{"factor": the ratio of their contentions' stretch (1 + contention) times
    the loop's ratio past its wobble, either way (the slowness ratio where contention is
    unknown),
    "loop": the loop's ratio (the CPU's own speed), "turn_ns": the shorter of the two runs' average turns on a CPU,
    "contention_base", "contention_new"}``; None when either side has no usable measure."""
    if not (isinstance(base, dict) and isinstance(new, dict)):
        return None
    values = [base.get("slowness"), new.get("slowness"), base.get("loop_ns"), new.get("loop_ns")]
    if not all(_positive(v) for v in values):
        return None
    sb, sn, lb, ln = (float(v) for v in values)  # type: ignore[arg-type]
    if base.get("loop_kind") != new.get("loop_kind"):
        lb = ln  # two different loops: their times say nothing of each other
    turns = [float(m["turn_ns"]) for m in (base, new) if _positive(m.get("turn_ns"))]
    cb, cn = base.get("contention"), new.get("contention")
    if isinstance(cb, (int, float)) and isinstance(cn, (int, float)) and cb >= 0 and cn >= 0:
        # The contention is the kernel's exact account; the loop, a few samples of a CPU
        # whose speed for Python code wanders from one moment to the next: only its
        # change past LOOP_WOBBLE counts, either way (a base whose CPU was slower had
        # slower spans too: its short spans said so as its loop did).
        factor = (1.0 + cn) / (1.0 + cb) * _past_wobble(ln / lb)
    else:
        factor = sn / sb
    return {
        "factor": factor,
        "loop": ln / lb,
        "turn_ns": min(turns) if len(turns) == 2 else None,
        "contention_base": base.get("contention"),
        "contention_new": new.get("contention"),
    }


def latest(a: Any, b: Any) -> Any:
    """Of two measures of one process (two parts' metadata), the later: its counters only
    grow."""
    if not isinstance(a, dict):
        return b if isinstance(b, dict) else None
    if not isinstance(b, dict):
        return a

    def key(m: dict[str, Any]) -> tuple[Any, Any]:
        return (m.get("cpu_ns") or 0, m.get("samples") or 0)

    return b if key(b) >= key(a) else a


def combine(measures: list[Any]) -> dict[str, Any] | None:
    """One measure for several processes (the ranks of a run): the median of their loops,
    their CPU and run-queue times summed."""
    valid = [m for m in measures if isinstance(m, dict) and _positive(m.get("loop_ns"))]
    if len(valid) <= 1:
        return valid[0] if valid else None
    loop = _median([m["loop_ns"] for m in valid])
    timed = [m for m in valid if _positive(m.get("cpu_ns")) and isinstance(m.get("delay_ns"), int)]
    cpu = sum(m["cpu_ns"] for m in timed) if timed else None
    delay = sum(m["delay_ns"] for m in timed) if timed else None
    ratio = delay / cpu if cpu and delay is not None else None
    turns = [m["cpu_ns"] / m["turn_ns"] for m in timed if _positive(m.get("turn_ns"))]
    return {
        **valid[0],
        "loop_ns": loop,
        "loop_min_ns": min(m.get("loop_min_ns") or m["loop_ns"] for m in valid),
        "samples": sum(int(m.get("samples") or 0) for m in valid),
        "cpu_ns": cpu,
        "delay_ns": delay,
        "contention": ratio,
        "slowness": None if loop is None else loop * (1.0 + (ratio or 0.0)),
        "turn_ns": cpu / sum(turns) if cpu and turns and sum(turns) > 0 else None,
        "processes": len(valid),
    }


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
