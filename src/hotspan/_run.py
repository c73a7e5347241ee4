"""The run id: one per run, shared by every process and rank of it. One job is one run.

Drawn by a run's first process and inherited by its children through the environment:
``HOTSPAN_RUN_ID`` when set (``hotspan run``, a ``HOTSPAN_OUT`` parent and a ``record()``
block set it for the processes they start), else the launcher's job id, which every rank of
the job has however far apart the ranks start (``TORCHELASTIC_RUN_ID`` under torchrun;
``SLURM_JOB_ID`` and ``SLURM_STEP_ID`` under Slurm; ``OMPI_MCA_ess_base_jobid`` under Open
MPI's mpirun; ``PMIX_NAMESPACE`` under a PMIx launcher such as prterun), else one drawn now
and put in ``HOTSPAN_RUN_ID`` so that this process's children (forked, spawned, or started
by a shell) inherit it: outside a job, each start of a program is a new run. Every drained
table carries it in its metadata (``hotspan.run``), so every part and file does; a
directory holding several runs reads its newest, with one line saying so, and
``hotspan.load(dir, run=...)`` takes another (``run="all"``: all; ``hotspan runs DIR``
lists them: ``formats/dataset.py``, ``parts_of_run``).
"""

from __future__ import annotations

import os
import time

ENV_RUN_ID = "HOTSPAN_RUN_ID"
#: Launchers' job ids, in order of preference, when HOTSPAN_RUN_ID is not set: torchrun,
#: Slurm (the job step after a dot: two ``srun`` of one allocation are two runs), Open MPI,
#: PMIx. Each names the job the same in every rank.
LAUNCHER_RUN_IDS = (
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "OMPI_MCA_ess_base_jobid",
    "PMIX_NAMESPACE",
)
#: Added to SLURM_JOB_ID when set.
SLURM_STEP = "SLURM_STEP_ID"


_drawn_here: set[str] = (
    set()
)  # ids this process drew (a launcher draws anew for each run it starts)


def run_id() -> str:
    """This run's id (drawn on first use when nothing in the environment names one)."""
    given = os.environ.get(ENV_RUN_ID, "").strip() or launcher_run_id()
    if given:
        return given
    drawn = new_run_id()
    _drawn_here.add(drawn)
    os.environ[ENV_RUN_ID] = drawn  # inherited by every process this one starts
    return drawn


def launcher_run_id() -> str | None:
    """The job id a launcher gives every rank of one job (``LAUNCHER_RUN_IDS``), if any."""
    for name in LAUNCHER_RUN_IDS:
        value = os.environ.get(name, "").strip()
        if value:
            if name == "SLURM_JOB_ID":
                step = os.environ.get(SLURM_STEP, "").strip()
                return f"{value}.{step}" if step else value
            return value
    return None


def new_run_id() -> str:
    """A fresh id: the start time (so ids sort by start) and 32 random bits."""
    # os.urandom, not secrets: secrets' import loads OpenSSL (import hotspan stays light)
    return time.strftime("%Y%m%d-%H%M%S", time.gmtime()) + "-" + os.urandom(4).hex()


def start_run(*, fresh: bool = False) -> str:
    """For a launcher (``hotspan run``, a ``HOTSPAN_OUT`` parent): the run's id, drawn now
    unless the environment names one already, and set for the processes it starts.
    ``fresh``: a new run even if this process drew an id before (``hotspan run`` called
    twice in one process); an id the environment gave stays."""
    current = os.environ.get(ENV_RUN_ID, "").strip()
    if fresh and (not current or current in _drawn_here):
        os.environ.pop(ENV_RUN_ID, None)
        if launcher_run_id() is None:
            return run_id()
    rid = run_id()
    os.environ[ENV_RUN_ID] = rid
    return rid
