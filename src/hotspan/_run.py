"""The run id: one per run, shared by every process and rank of it.

Drawn by a run's first process and inherited by its children through the environment:
``HOTSPAN_RUN_ID`` when set (``hotspan run`` and a ``HOTSPAN_OUT`` parent set it for the
processes they start), else the launcher's job id (``TORCHELASTIC_RUN_ID`` under torchrun,
``SLURM_JOB_ID`` under Slurm: every rank of the job has the same), else one drawn now and
put in ``HOTSPAN_RUN_ID`` so that this process's children (forked, spawned, or started by
a shell) inherit it. Every drained table carries it in its metadata (``hotspan.run``), so
every part and file does; a directory holding two runs loads with a warning naming them,
and ``hotspan.load(dir, run=...)`` takes one (``hotspan runs DIR`` lists them).
"""
from __future__ import annotations

import os
import secrets
import time

ENV_RUN_ID = "HOTSPAN_RUN_ID"
#: Launchers' job ids, in order of preference, when HOTSPAN_RUN_ID is not set.
LAUNCHER_RUN_IDS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")


_drawn_here: set[str] = set()  # ids this process drew (a launcher draws anew for each run it starts)


def run_id() -> str:
    """This run's id (drawn on first use when nothing in the environment names one)."""
    for name in (ENV_RUN_ID, *LAUNCHER_RUN_IDS):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    drawn = new_run_id()
    _drawn_here.add(drawn)
    os.environ[ENV_RUN_ID] = drawn  # inherited by every process this one starts
    return drawn


def new_run_id() -> str:
    """A fresh id: the start time (so ids sort by start) and 32 random bits."""
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + secrets.token_hex(4)


def start_run(*, fresh: bool = False) -> str:
    """For a launcher (``hotspan run``, a ``HOTSPAN_OUT`` parent): the run's id, drawn now
    unless the environment names one already, and set for the processes it starts.
    ``fresh``: a new run even if this process drew an id before (``hotspan run`` called
    twice in one process); an id the environment gave stays."""
    current = os.environ.get(ENV_RUN_ID, "").strip()
    if fresh and (not current or current in _drawn_here):
        os.environ.pop(ENV_RUN_ID, None)
        if not any(os.environ.get(name, "").strip() for name in LAUNCHER_RUN_IDS):
            return run_id()
    rid = run_id()
    os.environ[ENV_RUN_ID] = rid
    return rid
