"""A recording under ``ulimit -v``: allocation failures degrade, never crash or raise.

Real processes whose address space is limited (``RLIMIT_AS``, set in the child once it
records) at several sizes, from none to spare to plenty: each exits normally (no SIGSEGV,
no abort), ``stop()`` raises nothing into the program, the parts that reached the disk
load, and every span is accounted for: recorded = written + lost, the lost ones said in one
line on stderr. Before: the flusher thread died ("can't allocate lock"), nothing more
reached the disk, ``stop()`` raised ``MemoryError`` and spans lost in a failed drain were
counted nowhere."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap

import pytest

import hotspan

SPANS = 300_000

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time
    import hotspan

    out, when, extra_mb, spans = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

    def limit_memory():
        with open("/proc/self/status") as status:
            vm = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmSize:"))
        limit = vm + (extra_mb << 20)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    # what a flush needs, loaded before any limit: pyarrow's writer, and hotspan's (an
    # import under the limit may fail: hashlib's, for one, logs a traceback per algorithm)
    import pyarrow.parquet
    import hotspan.formats.dataset
    # the program's own names, made while memory is free (two spans recorded: the core
    # records from import on): out of memory, making a new one
    # fails in the program (as any allocation of its own would), not in hotspan
    with hotspan.span("warm"):
        pass
    with hotspan.span("step", "compute", arg=0):
        pass
    if when == "before start":  # no room for the flusher's thread (its stack) itself
        limit_memory()
    rec = hotspan.record(out, flush_interval=0.05).start()
    with hotspan.span("warm"):
        pass
    if when == "after a flush":
        rec.flush()  # a first part written while memory is free
        limit_memory()
    for i in range(spans):
        with hotspan.span("step", "compute", arg=i):
            pass
        if i % 20_000 == 0:
            time.sleep(0.005)  # the flusher's turn
    try:
        rec.stop()
        raised = None
    except BaseException as exc:  # what the test refuses: stop() raising into the program
        raised = repr(exc)
    print(json.dumps({"recorded": spans + 3, "raised": raised}), flush=True)
    """
)

LOST = re.compile(r"^hotspan: ([\d,]+) spans could not be delivered to ")


@pytest.mark.slow
@pytest.mark.parametrize(
    "when, extra_mb",
    [("after a flush", mb) for mb in (0, 2, 5, 8, 12, 24, 256)]
    + [("before start", mb) for mb in (1, 4)],
)
def test_a_recording_under_ulimit_v_degrades_and_counts_what_it_lost(tmp_path, when, extra_mb):
    out = tmp_path / "run"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    done = subprocess.run(
        [sys.executable, str(script), str(out), when, str(extra_mb), str(SPANS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    said = done.stderr.strip().splitlines()
    assert done.returncode == 0, (done.returncode, said[-5:])  # no SIGSEGV, no abort
    assert "Traceback" not in done.stderr, done.stderr
    result = json.loads(done.stdout)
    assert result["raised"] is None, result
    lost_lines = [m for m in map(LOST.match, said) if m]
    assert len(lost_lines) <= 1, said
    lost = int(lost_lines[0].group(1).replace(",", "")) if lost_lines else 0
    written = hotspan.load(out).num_rows if any(out.glob("part-*.parquet")) else 0
    assert written + lost == result["recorded"], (written, lost, said)
    if extra_mb >= 256:
        assert lost == 0, said  # room enough: nothing lost, nothing said
        assert not said, said
