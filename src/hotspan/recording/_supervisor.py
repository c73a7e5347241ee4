"""``hotspan run``: run a Python program (a script or ``-m module``) with recording on, and
write the spans of its whole process tree as one trace.

The program runs in a child process (``python -c _CHILD_CODE``, which runs it as
``python script.py`` would: ``__main__``, its argv, its directory first on
``sys.path``), recording as ``HOTSPAN_OUT`` does, into a temporary dataset directory beside
the output. ``HOTSPAN_OUT`` points there for the program's children too: forked ones record
there through the at-fork hook, spawned ones (``multiprocessing`` spawn and forkserver,
``subprocess`` of another Python program that imports hotspan) when they import hotspan.

This process only waits: however the program ends (its own exit, SIGTERM or SIGINT passed
on to it, which it flushes before dying of, or a crash that kills it outright) every part
is read back, written to the output as one trace, and the directory removed; the exit
status is the program's. Only a supervisor killed itself (SIGKILL) leaves the directory
(``hotspan.load()`` reads it).
"""

from __future__ import annotations

import importlib.util
import json
import os
import runpy
import shutil
import signal
import subprocess
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

__all__ = [
    "OutputError",
    "ProgramError",
    "RunResult",
    "exit_as_program",
    "resolve_program",
    "run_program",
]

#: The child's instructions (JSON: argv, path entry, module, live threshold); taken out of
#: its environment before the program runs, so the program's own children never see it.
ENV_RUN_SPEC = "HOTSPAN_RUN_SPEC"
#: Passed on to the program: it flushes and dies of them (SIGINT: as Python does).
FORWARDED_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGINT")


class ProgramError(ValueError):
    """The program to run cannot be found (a missing script, a module that does not import)."""


class OutputError(OSError):
    """The program ran, but its trace could not be written to the output (a full disk): the
    message names the directory its spans are kept in, and what to run to write them."""


@dataclass
class RunResult:
    """What ``run_program`` gives back: the program's exit status, its whole trace (every
    process), how long it ran, the spans dropped (all processes) and the processes seen."""

    status: int
    table: "pa.Table"
    elapsed: float
    dropped: int
    processes: int
    #: The signal that ended the program (it died of it), or None when it exited.
    signal: int | None = None
    #: One line saying how the program ended and that its spans were kept, when it did not
    #: simply exit (a signal, a crash); None otherwise.
    ending: str | None = None


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
    output: str | os.PathLike[str],
    *,
    module: str | None = None,
    live_min_ns: int | None = None,
    flush_interval: float = 1.0,
) -> RunResult:
    """Run the program in a child process with every process of it recorded; write the trace
    to ``output`` (any export format) and return a ``RunResult``. The program's own failure
    is printed as Python would and becomes its exit status; its spans are kept, whether it
    exits, is ended by a signal (SIGTERM, SIGINT, ... sent to this process are passed on)
    or crashes."""
    from ..formats import export
    from ..formats.dataset import META_RANKS, NoPartsError, load_dataset
    from .._schema import META_DROPPED, SPAN_SCHEMA, meta_json
    from . import recorder as recording

    as_directory = os.fspath(output).endswith(("/", os.sep)) or Path(output).is_dir()
    output = Path(output).absolute()  # the program may chdir
    run_argv, path_entry = resolve_program(program, module)
    output.parent.mkdir(parents=True, exist_ok=True)
    if as_directory:  # the run directory itself: its parts are the output
        output.mkdir(parents=True, exist_ok=True)
        parts = output
    else:
        # Beside the output: the same file system, and found there if this process is killed.
        parts = Path(tempfile.mkdtemp(prefix=f".{output.name}.hotspan-run-", dir=output.parent))
    recording.stop_env_recorder()  # a HOTSPAN_OUT given to `hotspan run` itself: the run is its output
    from .._run import start_run

    start_run(
        fresh=True
    )  # the program's processes and ranks share it (inherited); the next run gets its own
    spec = {
        "argv": run_argv,
        "path_entry": path_entry,
        "module": module,
        "live_min_ns": live_min_ns,
    }
    env = dict(
        os.environ,
        **{
            recording.ENV_OUT: str(parts) + os.sep,
            recording.ENV_INTERVAL: repr(flush_interval),
            ENV_RUN_SPEC: json.dumps(spec),
        },
    )
    start = time.perf_counter()
    # The handlers go in before the program starts, and stay until its trace is written: a
    # signal at any moment after the program started reaches the program once (and a signal
    # to this process once the program has ended leaves the writing of its trace alone).
    with _passing_signals_to() as passing:
        child = subprocess.Popen([sys.executable, "-c", _CHILD_CODE], env=env)
        passing.attach(child)
        returncode = child.wait()
        passing.detach()
        elapsed = time.perf_counter() - start
        try:
            table = load_dataset(parts)
        except NoPartsError:  # nothing was flushed at all (killed before its first part)
            table = SPAN_SCHEMA.empty_table()
        if not as_directory:
            try:
                export(table, output)
            except OSError as exc:  # a full disk, say: the spans are in `parts`, whole; say so
                raise OutputError(_unwritten(exc, table.num_rows, output, parts)) from None
            shutil.rmtree(parts, ignore_errors=True)
    meta = table.schema.metadata or {}
    dropped = meta_json(meta, META_DROPPED) or {}
    ranks = meta_json(meta, META_RANKS) or {}
    died_of = -returncode if returncode < 0 else None
    # Python ends on SIGINT through KeyboardInterrupt, with status 130 (_run), not dying of it
    ended_by = signal.SIGINT if returncode == 130 and signal.SIGINT in passing.received else died_of
    return RunResult(
        status=returncode if died_of is None else 128 + died_of,
        table=table,
        elapsed=elapsed,
        dropped=int(dropped.get("total", 0)),
        processes=sum(len(procs) for procs in ranks.values()),
        signal=died_of,
        ending=_ending(ended_by, table.num_rows, output, flush_interval),
    )


#: The child's first lines: the program's argv is in ``sys.argv`` before ``import hotspan``
#: starts recording (``python -m`` would show ``["-m"]`` there, and the first part, which
#: the run's metadata and ``hotspan runs`` take the command from, would say so).
_CHILD_CODE = (
    "import json, os, sys\n"
    f"sys.argv[:] = json.loads(os.environ[{ENV_RUN_SPEC!r}])['argv']\n"
    "from hotspan.recording._supervisor import _child_main\n"
    "sys.exit(_child_main())\n"
)


def _unwritten(exc: OSError, spans: int, output: Path, parts: Path) -> str:
    reason = exc.strerror or str(exc)
    return (
        f"{output}: could not write the trace: {reason}. The program's {spans:,} spans are kept, "
        f"whole, in {parts}{os.sep}: `hotspan export {parts}{os.sep} OUT` writes them where "
        "there is room (then remove that directory)"
    )


def _ending(died_of: int | None, spans: int, output: Path, flush_interval: float) -> str | None:
    if died_of is None:
        return None
    try:
        name = signal.Signals(died_of).name
    except ValueError:
        name = f"signal {died_of}"
    if name in FORWARDED_SIGNALS:
        return f"hotspan run: the program was ended by {name} (-{died_of}); its {spans:,} spans are in {output}"
    return (
        f"hotspan run: the program died of {name} (-{died_of}); the {spans:,} spans it had flushed "
        f"(all but at most its last {flush_interval:g} s) are in {output}"
    )


class _passing_signals_to:
    """While the program runs, the signals that end a program are passed on to it (it
    flushes, then dies of them), so this process lives on to write the trace. Passed on with
    a mark (``hs_signals.h``): where the whole process group was signalled, the program has
    the signal already, and drops this copy of it (a second SIGTERM would kill it before it
    flushed). A signal that comes before the program exists is passed on once it does; one
    that comes after it ended is noted only (the trace is being written). SIGINT from a
    terminal reaches the program directly (the whole foreground process group gets it): not
    passed on."""

    def __init__(self) -> None:
        self.child: subprocess.Popen[bytes] | None = None
        self.ended = False
        self.saved: dict[int, object] = {}
        self.received: set[int] = set()
        self.waiting: list[int] = []

    def _pass_on(self, signum: int, _frame: object) -> None:
        self.received.add(signum)
        if self.ended or (signum == signal.SIGINT and _terminal_sends_to_both()):
            return
        if self.child is None:
            self.waiting.append(signum)
            return
        _forward(self.child, signum)

    def attach(self, child: subprocess.Popen[bytes]) -> None:
        self.child = child
        waiting, self.waiting = self.waiting, []
        for signum in waiting:
            _forward(child, signum)

    def detach(self) -> None:
        self.ended = True

    def __enter__(self) -> "_passing_signals_to":
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers belong to the main thread: the program is left alone
        for name in FORWARDED_SIGNALS:
            signum = getattr(signal, name, None)
            if signum is not None:
                self.saved[signum] = signal.signal(signum, self._pass_on)
        return self

    def __exit__(self, *exc_info: object) -> None:
        for signum, handler in self.saved.items():
            signal.signal(signum, handler)  # type: ignore[arg-type]


def _forward(child: subprocess.Popen[bytes], signum: int) -> None:
    from .. import _native

    if child.returncode is not None:
        return  # it has ended (and been waited for): its pid may be another process's now
    try:
        _native._forward_signal(child.pid, signum)
    except OSError:
        pass  # it has just ended


def _terminal_sends_to_both() -> bool:
    """Whether a SIGINT here most likely came from the terminal (Ctrl-C), which sends it to
    the program too: this process's stdin is the terminal whose foreground group it is in."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def exit_as_program(result: RunResult) -> int:
    """The status to exit with: the program's; where it died of a signal, this process dies
    of the same one (after everything was written), as the program would have."""
    if result.signal is not None:
        sys.stdout.flush()
        sys.stderr.flush()
        try:
            signal.signal(result.signal, signal.SIG_DFL)
        except (OSError, ValueError):
            pass  # SIGKILL, SIGSTOP: no handler to reset, they kill as they are
        os.kill(os.getpid(), result.signal)
    return result.status


def _child_main() -> int:
    """In the child (``_CHILD_CODE``): HOTSPAN_OUT has started recording inside ``import
    hotspan``; run the program as ``python`` would."""
    spec = json.loads(os.environ.pop(ENV_RUN_SPEC))
    from .. import _native
    from .live_log import live

    # The launcher's copy of a SIGINT sent to the whole group is not a second Ctrl-C: a
    # second KeyboardInterrupt would break into the program's exit and its final flush.
    _native._sigint_filter_install()

    live_log = live(min_ns=spec["live_min_ns"]) if spec["live_min_ns"] is not None else None
    sys.argv[:] = spec["argv"]
    sys.path[0] = spec[
        "path_entry"
    ]  # -m put the working directory first; python script.py puts its directory
    try:
        status = _run(spec["module"], spec["argv"][0])
    finally:
        if live_log is not None:
            live_log.stop()
    # As the interpreter would at exit: the program's non-daemon threads finish first.
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    # The program has ended; what is left is its exit, and the final flush (atexit). A SIGINT
    # now (the group's, or a late copy from the launcher of one the program took) would break
    # into that flush as a KeyboardInterrupt, or, once the interpreter has given SIGINT its
    # default action back, end the process with it: ignored. SIGTERM still ends it (flushed).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return status


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


if __name__ == "__main__":
    sys.exit(_child_main())
