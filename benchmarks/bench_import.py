"""What ``import hotspan`` adds to a program's start: the median wall time (and the CPU
time, which a loaded machine does not stretch) over fresh interpreters of
``python -c "import hotspan"`` against ``python -c pass``, the ``-X importtime`` figure of
``hotspan`` and the heaviest modules it loads. An editable install is measured on a staged
copy (a wheel's layout, compiled as pip compiles it at install), without the editable
finder's rebuild check.

Target: at most 10 ms added (the recorder alone; pyarrow and numpy load on first use).

    python benchmarks/bench_import.py [--runs 20]
"""

from __future__ import annotations

import argparse
import compileall
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 10.0


def interpreter(stage: tuple[str, str] | None) -> tuple[list[str], dict]:
    """The command and environment of a fresh interpreter importing the package under test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOTSPAN_")}  # no HOTSPAN_OUT
    if stage is not None:
        # The editable finder runs a CMake rebuild check on import: a development
        # convenience, not what a user pays. SKBUILD_EDITABLE_SKIP=<its build dir> turns
        # it off, and the staged copy is imported instead, with site as usual.
        env["PYTHONPATH"], env["SKBUILD_EDITABLE_SKIP"] = stage
    return [sys.executable], env


def staged_copy() -> tuple[str, str] | None:
    """For an editable install, (a copy of the package beside its built module, as a wheel
    lays it out; the finder's build dir); None for a regular install, measured as it is."""
    import hotspan
    from hotspan import _native

    finder = next(
        (f for f in sys.meta_path if type(f).__name__ == "ScikitBuildRedirectingFinder"), None
    )
    if finder is None:
        return None
    stage = tempfile.mkdtemp(prefix="bench-import-")
    package = Path(hotspan.__file__).parent
    shutil.copytree(package, Path(stage) / "hotspan", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(_native.__file__, Path(stage) / "hotspan")
    # pip compiles a wheel's modules at install; without the .pyc files every run would
    # compile the package's source (about 10x its import, and what PYTHONDONTWRITEBYTECODE=1,
    # set on some machines, would leave each run paying).
    compileall.compile_dir(Path(stage) / "hotspan", quiet=1)
    return stage, str(finder.path)


def timed_ms(code: str, stage: tuple[str, str] | None) -> tuple[float, float]:
    """(wall, CPU user+sys) time of one fresh ``python -c code``, in ms. The CPU time is
    the child's own (os.wait4): other processes on a loaded machine stretch the wall
    time, not that."""
    command, env = interpreter(stage)
    start = time.perf_counter()
    child = subprocess.Popen([*command, "-c", code], env=env)
    _, status, usage = os.wait4(child.pid, 0)
    wall = (time.perf_counter() - start) * 1e3
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"python -c {code!r} failed ({child.returncode})")
    return wall, (usage.ru_utime + usage.ru_stime) * 1e3


def heaviest_imports(stage: tuple[str, str] | None, count: int = 8) -> list[tuple[float, str]]:
    """(cumulative ms, module) of the modules ``import hotspan`` loads, heaviest first."""
    command, env = interpreter(stage)
    result = subprocess.run(
        [*command, "-X", "importtime", "-c", "import hotspan"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    rows = []
    for line in result.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative_us, name = line[len("import time:") :].split("|")
        if name.strip() == "site":  # the interpreter's own start (site, .pth files) ends here
            rows.clear()
            continue
        rows.append((int(cumulative_us) / 1e3, name.strip()))
    return sorted(rows, reverse=True)[:count]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs", type=int, default=20, help="fresh interpreters per measurement (default 20)"
    )
    args = parser.parse_args()
    stage = staged_copy()
    try:
        where = "installed" if stage is None else "editable install: a staged copy"
        command, env = interpreter(stage)
        imported = subprocess.run(
            [*command, "-c", "import hotspan; print(hotspan.__file__)"],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if stage is not None and not imported.startswith(stage[0]):
            raise SystemExit(f"the staged copy is not the one imported ({imported})")
        timed_ms("import hotspan", stage)  # warm the file caches and write the .pyc files
        bare, hot = [], []
        for _ in range(args.runs):  # alternated, so a machine's load drifts over both alike
            bare.append(timed_ms("pass", stage))
            hot.append(timed_ms("import hotspan", stage))
        top = heaviest_imports(stage)
        own = statistics.median(
            dict((n, ms) for ms, n in heaviest_imports(stage, count=1000))["hotspan"]
            for _ in range(args.runs)
        )
    finally:
        if stage is not None:
            shutil.rmtree(stage[0], ignore_errors=True)
    bare_ms, hot_ms = (statistics.median(w for w, _ in runs) for runs in (bare, hot))
    bare_cpu, hot_cpu = (statistics.median(c for _, c in runs) for runs in (bare, hot))
    added = hot_ms - bare_ms
    print(f"hotspan: {imported} ({where})")
    print(f"                            wall (median of {args.runs})   CPU user+sys (median)")
    print(f"python -c pass:             {bare_ms:7.1f} ms             {bare_cpu:7.1f} ms")
    print(f"python -c 'import hotspan': {hot_ms:7.1f} ms             {hot_cpu:7.1f} ms")
    print(
        f"added by import hotspan:    {added:7.1f} ms             {hot_cpu - bare_cpu:7.1f} ms"
        f"   (target <= {TARGET_MS:.0f} ms wall: {'ok' if added <= TARGET_MS else 'OVER'})"
    )
    print(
        f"import hotspan, -X importtime cumulative: {own:5.1f} ms (median of {args.runs}; no process start noise)"
    )
    print("heaviest imports (-X importtime, cumulative, one run):")
    for ms, name in top:
        print(f"  {ms:7.2f} ms  {name}")
    return 0 if added <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
