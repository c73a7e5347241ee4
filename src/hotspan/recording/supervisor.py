"""``hotspan run``: run a Python program (a script or ``-m module``) with recording on, and
write the spans of its whole process tree as one trace.

The program runs in this process (as ``python script.py`` would: ``__main__``, its argv,
its directory first on ``sys.path``), recording as ``HOTSPAN_OUT`` does, into a temporary
dataset directory beside the output. ``HOTSPAN_OUT`` points there for the program's
children too: forked ones record there through the at-fork hook, spawned ones
(``multiprocessing`` spawn and forkserver, ``subprocess`` of another Python program that
imports hotspan) when they import hotspan. At the end every part is read back, written to
the output as one trace, and the directory removed; a supervisor killed before then leaves
the directory (``hotspan.load()`` reads it).
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import shutil
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["ProgramError", "RunResult", "resolve_program", "run_program"]


class ProgramError(ValueError):
    """The program to run cannot be found (a missing script, a module that does not import)."""


@dataclass
class RunResult:
    """What ``run_program`` gives back: the program's exit status, its whole trace (every
    process), how long it ran, the spans dropped (all processes) and the processes seen."""

    status: int
    table: "pa.Table"
    elapsed: float
    dropped: int
    processes: int


def resolve_program(program: Sequence[str], module: str | None = None) -> tuple[list[str], str]:
    """``(argv, path_entry)`` for a script (``program[0]``, its arguments after) or a module
    (``program`` its arguments), as ``python`` would set them; ``ProgramError`` if missing."""
    program = list(program)
    if module is not None:
        try:
            found = importlib.util.find_spec(module)
        except (ImportError, ValueError) as exc:
            raise ProgramError(f"{module}: cannot import: {exc}") from None
        if found is None:
            raise ProgramError(f"{module}: no module of that name")
        return [found.origin or module, *program], os.getcwd()
    if not program:
        raise ProgramError(
            "give a script to run (hotspan run script.py ...) or a module (hotspan run -m module ...)"
        )
    script = Path(program[0])
    if not script.is_file():
        raise ProgramError(
            f"{script}: no such script" if not script.exists() else f"{script}: not a file"
        )
    return [str(script), *program[1:]], str(script.resolve().parent)


def run_program(
    program: Sequence[str],
    output: str | os.PathLike,
    *,
    module: str | None = None,
    live_min_ns: int | None = None,
    flush_interval: float = 1.0,
) -> RunResult:
    """Run the program with every process of it recorded; write the trace to ``output``
    (any export format) and return a ``RunResult``. The program's own failure is printed as
    Python would and becomes its exit status; its spans are kept."""
    from .. import _api, _native
    from ..formats import export
    from ..formats.dataset import META_RANKS, NoPartsError, load_dataset
    from .._schema import META_DROPPED, SPAN_SCHEMA, meta_json
    from . import recorder as recording
    from .live_log import live

    output = Path(output).absolute()  # the program may chdir
    run_argv, path_entry = resolve_program(program, module)
    output.parent.mkdir(parents=True, exist_ok=True)
    # Beside the output: the same file system, and found there if this process is killed.
    parts = Path(tempfile.mkdtemp(prefix=f".{output.name}.hotspan-run-", dir=output.parent))
    recording.stop_env_recorder()  # a HOTSPAN_OUT given to `hotspan run` itself: the run is its output
    saved_env = os.environ.get(recording.ENV_OUT)
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    _native.enable()
    _api.drain()  # only the program's spans
    os.environ[recording.ENV_OUT] = str(parts) + os.sep
    recording.start_env_recorder(parts, flush_interval)
    live_log = live(min_ns=live_min_ns) if live_min_ns is not None else None
    status = 0
    start = time.perf_counter()
    sys.argv[:] = run_argv
    sys.path.insert(0, path_entry)
    try:
        status = _run(module, run_argv[0])
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        if live_log is not None:
            live_log.stop()
        # As the interpreter would at exit: let the program's non-daemon threads finish.
        for thread in threading.enumerate():
            if thread is not threading.current_thread() and not thread.daemon:
                thread.join()
        elapsed = time.perf_counter() - start
        recording.stop_env_recorder()
        if saved_env is None:
            os.environ.pop(recording.ENV_OUT, None)
        else:
            os.environ[recording.ENV_OUT] = saved_env
    try:
        table = load_dataset(parts)
    except NoPartsError:  # nothing was flushed at all (the flusher never started)
        table = SPAN_SCHEMA.empty_table()
    export(table, output)
    shutil.rmtree(parts, ignore_errors=True)
    meta = table.schema.metadata or {}
    dropped = meta_json(meta, META_DROPPED) or {}
    ranks = meta_json(meta, META_RANKS) or {}
    return RunResult(
        status=status,
        table=table,
        elapsed=elapsed,
        dropped=int(dropped.get("total", 0)),
        processes=sum(len(procs) for procs in ranks.values()),
    )


def _run(module: str | None, path: str) -> int:
    """Run the program as ``__main__``; its exit status (its failure printed as Python would)."""
    try:
        if module is not None:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:  # the program's own exit status passes through
        if exc.code is None:
            return 0
        if isinstance(exc.code, int):
            return exc.code
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException as exc:  # noqa: BLE001 -- the program failed: report it as Python would, keep its spans
        tb = exc.__traceback__
        while tb is not None and (
            tb.tb_frame.f_code.co_filename == __file__ or "runpy" in tb.tb_frame.f_code.co_filename
        ):
            tb = tb.tb_next  # hotspan's and runpy's own frames are noise to the program's author
        traceback.print_exception(type(exc), exc, tb)
        return 130 if isinstance(exc, KeyboardInterrupt) else 1
    return 0
