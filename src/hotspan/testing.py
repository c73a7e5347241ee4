"""What hotspan's own tests and benchmarks share, kept apart from the product's namespace:
the core's test hooks (a fake clock; ``NoopContext``, the benchmarks' floor) and workloads
whose numbers both report (a test asserts on them, a benchmark prints them).

Nothing here is imported by ``import hotspan``.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Iterator

from . import _native

if TYPE_CHECKING:
    from .analysis._rank_workload import RanksRun

__all__ = [
    "FLAT_OUT_THREADS",
    "NoopContext",
    "Straggler",
    "expected_drops",
    "many_ranks",
    "run_flat_out_threads",
    "set_fake_clock",
    "set_real_clock",
]

#: A C context manager whose __enter__/__exit__ do nothing: the cost of a ``with`` statement
#: on a C object, the floor the overhead benchmarks measure a span against.
NoopContext = _native.NoopContext


def many_ranks(ranks: int = 8, steps: int = 100, stragglers: Any = (), **options: Any) -> RanksRun:
    """A generated many-rank training run with injected stragglers and per-host clock
    offsets, and its known answers (:func:`hotspan.analysis._rank_workload.many_ranks`)."""
    from .analysis._rank_workload import many_ranks as implementation

    return implementation(ranks, steps, stragglers, **options)


def Straggler(rank: int, *args: Any, **options: Any) -> Any:
    """A rank made slow in one span (:class:`hotspan.analysis._rank_workload.Straggler`)."""
    from .analysis._rank_workload import Straggler as implementation

    return implementation(rank, *args, **options)


def set_fake_clock(start_ns: int, step_ns: int) -> None:
    """Every clock read from now on returns ``start_ns``, then ``step_ns`` more each time:
    exact durations for tests (``set_real_clock()`` goes back)."""
    _native._set_fake_clock(start_ns, step_ns)


def set_real_clock() -> None:
    """Back to the real clock (re-calibrated)."""
    _native._set_real_clock()


@contextmanager
def expected_drops() -> Iterator[None]:
    """Spans dropped inside are dropped on purpose (a test that fills the memory cap): the
    line a process prints at exit (``hotspan: N spans dropped at the memory cap ...``) leaves
    them out, and so does the ``SpansDropped`` warning the recorder logs while a program runs
    (once the block ends, its drops count as reported: a report still queued for them says
    nothing), so a test run that dropped only on purpose ends on its own last line.
    ``hotspan.dropped()`` still counts them (exactly, as ever), and the events emitted inside
    the block reach their handlers as ever."""
    from . import _api, _core_drops

    before = _native.dropped()
    try:
        yield
    finally:
        detail = _native.dropped(detail=True)
        _api.dropped_expected += detail["total"] - before
        for tid, row in detail["threads"].items():
            count = row["memory_cap"] + row["other"]
            _core_drops._reported[tid] = max(_core_drops._reported.get(tid, 0), count)
        _native._drops_reported(detail["total"])


#: A program for a fresh interpreter: ``python -c FLAT_OUT_THREADS N PER_THREAD EVERY_S``.
#: N threads each record PER_THREAD spans (a reused span, as fast as the interpreter goes)
#: while the main thread calls drain() every EVERY_S seconds (0: only once they are done);
#: prints one JSON object: rows drained, spans dropped (all causes), of which at the memory
#: cap, drain() calls, and seconds.
FLAT_OUT_THREADS = textwrap.dedent(
    """
    import json, sys, threading, time
    import hotspan
    n_threads, per_thread, every = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    start = threading.Barrier(n_threads + 1)
    def work(k):
        s = hotspan.span(f"t{k}")
        start.wait()
        for _ in range(per_thread):
            with s:
                pass
    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for th in threads:
        th.start()
    start.wait()
    t0 = time.perf_counter()
    rows = drains = 0
    while every > 0 and any(th.is_alive() for th in threads):
        rows += hotspan.drain().num_rows
        drains += 1
        time.sleep(every)
    for th in threads:
        th.join()
    rows += hotspan.drain().num_rows
    d = hotspan.dropped(detail=True)
    print(json.dumps({"rows": rows, "dropped": d["total"], "at_cap": d["memory_cap"], "drains": drains,
                      "seconds": time.perf_counter() - t0}))
    """
)


def run_flat_out_threads(
    n_threads: int,
    per_thread: int,
    every_s: float,
    timeout: float = 600,
    python: list[str] | None = None,
) -> dict[str, Any]:
    """FLAT_OUT_THREADS in a fresh interpreter at the default settings: its JSON object.
    ``python``: the command that starts that interpreter (default ``sys.executable``; the
    tests pass theirs, which under arm64 emulation goes through qemu)."""
    command = python or [sys.executable]
    proc = subprocess.run(
        [*command, "-c", FLAT_OUT_THREADS, str(n_threads), str(per_thread), str(every_s)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"the flat-out workload failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}"
        )
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result
