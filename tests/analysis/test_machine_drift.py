"""A busy machine is not a regression (issue 32 item 1): every run keeps how fast the machine
was, and ``compare`` judges each group against the machine's drift, for a suite of any size;
``inconclusive`` (exit status 3) when the drift may explain a slowdown."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import hotspan

#: The run's machine measure and compare's drift, in the tables' schema metadata.
META_MACHINE = b"hotspan.machine"
META_DRIFT = b"hotspan.drift"


def drift_of(result) -> dict | None:
    raw = (result.schema.metadata or {}).get(META_DRIFT)
    return json.loads(raw) if raw else None


pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="CPU pinning and schedstat: Linux"
)

#: A small suite: three span groups of fixed CPU work, "sort" long against the CPU's turns
#: (~10 ms: two hogs on its core stretch every one of them, as in the issue), "tokenize"
#: and "dedupe" shorter; FACTOR scales "sort"; the trace exported to the path given. 40
#: rounds: with 15, a 2x slowdown under hogs (sort's spans stretched 3x with a spread to
#: match) was past the drift by 1.3x and still inside the interval.
SUITE = textwrap.dedent(
    """
    import sys
    import hotspan

    factor = float(sys.argv[2])

    def work(n):
        total = 0
        for i in range(n):
            total += i * i
        return total

    for _ in range(40):
        with hotspan.span("sort", "suite"):
            work(int(150_000 * factor))
        with hotspan.span("tokenize", "suite"):
            work(20_000)
        with hotspan.span("dedupe", "suite"):
            work(2_000)
    hotspan.export(hotspan.drain(), sys.argv[1])
    """
)


def machine_of(table) -> dict:
    return json.loads(table.schema.metadata[META_MACHINE])


def test_every_drained_table_and_run_keeps_the_machines_speed(tmp_path):
    for _ in range(100):
        with hotspan.span("x"):
            pass
    measure = machine_of(hotspan.drain())
    assert measure["loop_ns"] > 0 and measure["samples"] >= 1
    assert measure["cpu_ns"] > 0 and measure["delay_ns"] >= 0  # Linux: schedstat
    assert measure["slowness"] == pytest.approx(measure["loop_ns"] * (1 + measure["contention"]))
    with hotspan.record(tmp_path / "run"):
        with hotspan.span("y"):
            pass
    # A run directory read back (its parts merged) keeps it, and so does every export.
    run = hotspan.load(tmp_path / "run")
    assert machine_of(run)["loop_ns"] > 0
    hotspan.export(run, tmp_path / "run.parquet")
    assert machine_of(hotspan.load(tmp_path / "run.parquet"))["loop_ns"] > 0


def _with_machine(table, **changes):
    """The table with its machine measure changed (the counters of a run on another machine)."""
    measure = {**machine_of(table), **changes}
    measure["slowness"] = measure["loop_ns"] * (1 + measure["contention"])
    meta = {**table.schema.metadata, META_MACHINE: json.dumps(measure).encode()}
    return table.replace_schema_metadata(meta)


def _one_group(work: int):
    hotspan.drain()  # what earlier tests left
    for _ in range(60):
        with hotspan.span("step", "train"):
            sum(range(work))
    return hotspan.drain()


def test_one_group_slower_by_what_the_machine_explains_is_inconclusive_not_slower(tmp_path):
    # Spans long against the process's turns on the CPU (turn_ns): contention stretches them all.
    base = _with_machine(_one_group(20_000), loop_ns=100_000.0, contention=0.0, turn_ns=1000.0)
    # The code 2x slower, on a machine measured 3x slower: the drift explains it.
    new = _with_machine(_one_group(40_000), loop_ns=100_000.0, contention=2.0, turn_ns=1000.0)
    result = hotspan.compare(base, new)
    assert result.column("verdict").to_pylist() == ["inconclusive"]
    drift = drift_of(result)
    assert drift["said"] and drift["factor"] == pytest.approx(3.0)
    # The same times on a steady machine: slower, as before.
    steady = _with_machine(new, contention=0.0)
    assert hotspan.compare(base, steady).column("verdict").to_pylist() == ["slower"]
    # --absolute (shift=False) judges raw times.
    assert hotspan.compare(base, new, shift=False).column("verdict").to_pylist() == ["slower"]
    # Past what the drift explains: slower still (8x the code on a machine 1.5x slower).
    slowest = _with_machine(_one_group(160_000), loop_ns=100_000.0, contention=0.5, turn_ns=1000.0)
    assert hotspan.compare(base, slowest).column("verdict").to_pylist() == ["slower"]
    # Short spans get no exception: the drift explains a 2x change of them too (a rule that
    # took their fastest durations for the code's called unchanged short groups slower
    # under hogs, on CI and here).
    short = [_with_machine(t, turn_ns=1e12) for t in (base, new)]
    assert hotspan.compare(*short).column("verdict").to_pylist() == ["inconclusive"]

    hotspan.export(base, tmp_path / "base.parquet")
    hotspan.export(new, tmp_path / "new.parquet")
    done = _cli("compare", tmp_path / "base.parquet", tmp_path / "new.parquet")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "the machine was 3.00x slower during" in " ".join(done.stdout.split())
    assert "inconclusive" in done.stdout


def test_the_loop_counts_past_its_own_wobble_and_either_way():
    """The calibration loop is one sample of a CPU whose speed for Python code wanders (on
    the project's 2-vCPU host, 0.1 ms of it reads ~95 or ~160 us from one moment to the
    next, quiet or not): within 20% it is that wobble, and past it only the excess counts,
    in either direction. A base run whose CPU was slower lowers the drift (its spans were
    slower too): the loop clamped at 1 called a run 3.05x the base's contention-only drift
    when its short spans, like its loop, said the base's CPU was 0.6x as fast, and a real
    2x slowdown under hogs was called inconclusive."""
    from hotspan import _machine

    def measure(loop_ns: float, contention: float) -> dict:
        return {
            "loop_ns": loop_ns,
            "loop_kind": "python",
            "contention": contention,
            "slowness": loop_ns * (1 + contention),
        }

    def factor(base: dict, new: dict) -> float:
        return _machine.drift(base, new)["factor"]

    quiet = measure(100_000.0, 0.0)
    assert factor(quiet, measure(110_000.0, 0.0)) == pytest.approx(1.0)  # wobble
    assert factor(quiet, measure(90_000.0, 0.0)) == pytest.approx(1.0)
    assert factor(quiet, measure(180_000.0, 0.0)) == pytest.approx(1.5)  # 1.8 past 1.2
    assert factor(quiet, measure(50_000.0, 0.0)) == pytest.approx(0.6)  # 0.5 x 1.2
    # the contention's stretch, times the loop's excess either way
    assert factor(quiet, measure(100_000.0, 2.0)) == pytest.approx(3.0)
    assert factor(measure(160_000.0, 0.0), measure(100_000.0, 2.0)) == pytest.approx(2.25)
    assert factor(quiet, measure(180_000.0, 2.0)) == pytest.approx(4.5)
    # the loop's ratio itself is still told as measured
    assert _machine.drift(quiet, measure(180_000.0, 2.0))["loop"] == pytest.approx(1.8)


def test_a_short_run_samples_the_loop_at_its_start_and_at_its_end():
    """One sample at the drain alone is one moment of a CPU whose speed wanders (the
    wobble above): a run whose spans ran fast, sampled at a slow moment at its end, read
    1.46x slower and hid a real 2x slowdown. ``import hotspan`` takes one at the start too,
    so even a run shorter than a second has the loop of two moments."""
    program = textwrap.dedent(
        """
        import json, hotspan
        with hotspan.span("x"):
            pass
        print(json.dumps(json.loads(hotspan.drain().schema.metadata[b"hotspan.machine"])))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    measure = json.loads(done.stdout)
    assert measure["samples"] == 2, measure
    assert measure["loop_ns"] > 0 and measure["loop_min_ns"] <= measure["loop_ns"]


def test_exit_status_3_is_in_the_help():
    done = _cli("compare", "--help")
    text = " ".join(done.stdout.split())
    assert done.returncode == 0
    assert "3 inconclusive" in text and "1 a group is slower" in text and "2 an error" in text


def test_a_run_without_a_measure_is_judged_raw_and_says_so(tmp_path):
    base = _one_group(20_000)
    meta = {k: v for k, v in base.schema.metadata.items() if k != META_MACHINE}
    hotspan.export(base.replace_schema_metadata(meta), tmp_path / "old.parquet")
    hotspan.export(_one_group(20_000), tmp_path / "new.parquet")
    done = _cli("compare", tmp_path / "old.parquet", tmp_path / "new.parquet")
    assert done.returncode in (0, 1), done.stderr
    assert "recorded no measure of the machine's speed" in " ".join(done.stdout.split())


def _cli(*args, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hotspan", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def _cpu() -> str:
    """One CPU this process may run on: the suite and the hogs share it."""
    return str(sorted(os.sched_getaffinity(0))[-1])


def _steal_ticks(cpu: str) -> int | None:
    """The time the hypervisor ran something else on ``cpu`` (its ``steal`` in /proc/stat,
    in clock ticks), or None where it is not told."""
    try:
        with open("/proc/stat") as stat:
            for line in stat:
                fields = line.split()
                if fields[0] == f"cpu{cpu}" and len(fields) > 8:
                    return int(fields[8])
    except OSError:
        pass
    return None


def _suite(path: Path, factor: float, hogs: int) -> dict:
    """Run the suite (and ``hogs`` busy loops) pinned to one CPU; returns what the
    hypervisor took of that CPU meanwhile (``steal_share``: a share of the wall time,
    None where not told), which no measure of the run sees: what CI saw, if a pair fails."""
    cpu = _cpu()
    pinned = [] if shutil.which("taskset") is None else ["taskset", "-c", cpu]
    steal_before, wall_before = _steal_ticks(cpu), time.monotonic()
    busy = [subprocess.Popen([*pinned, sys.executable, "-c", "while 1: pass"]) for _ in range(hogs)]
    try:
        subprocess.run(
            [*pinned, sys.executable, "-c", SUITE, str(path), str(factor)],
            check=True,
            timeout=300,
        )
    finally:
        for hog in busy:
            hog.kill()
            hog.wait()
    steal_after, wall = _steal_ticks(cpu), time.monotonic() - wall_before
    if steal_before is None or steal_after is None:
        return {"steal_share": None}
    ticks = os.sysconf("SC_CLK_TCK")
    return {"steal_share": round((steal_after - steal_before) / ticks / wall, 3), "wall_s": wall}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset pins the hogs")
def test_an_unchanged_suite_with_cpu_hogs_during_one_run_is_never_slower(tmp_path):
    told = 0
    for i in range(20):
        base, new = tmp_path / f"base{i}.parquet", tmp_path / f"new{i}.parquet"
        _quiet_base(base)
        host = _suite(new, 1.0, hogs=2)
        # hotspan.compare is what the CLI prints (one implementation); the CLI's exit status
        # is checked on the last pair
        result = hotspan.compare(base, new)
        verdicts = dict(
            zip(result.column("name").to_pylist(), result.column("verdict").to_pylist())
        )
        # the whole answer as text (pytest shortens a tuple's repr): what CI saw, if it fails
        said = {"pair": i, "drift": drift_of(result), "host": host, "rows": result.to_pylist()}
        assert "slower" not in verdicts.values(), json.dumps(said, default=str)
        told += bool(drift_of(result)["said"])
    done = _cli("compare", base, new)
    assert done.returncode in (0, 3), done.stdout + done.stderr
    assert told >= 15  # the hogs took the core: the machine's drift was measured and said


#: The run without hogs is the quiet one: when other programs on a shared host kept it
#: waiting for the CPU more than this many times as long as it ran, it is taken again (the
#: contention is the run's average, and a burst of load outside its spans is not in them).
QUIET_CONTENTION = 6.0


def _quiet_base(path: Path) -> None:
    for _ in range(5):
        _suite(path, 1.0, hogs=0)
        if machine_of(hotspan.load(path))["contention"] <= QUIET_CONTENTION:
            return
    pytest.skip("the host is too busy for a quiet run (CPU contention above 6 five times)")


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset pins the hogs")
def test_a_real_2x_slowdown_under_the_same_hogs_is_still_found(tmp_path):
    # Each pair is a sample of a noisy host (its CPU's speed for Python wanders by ~1.6x):
    # the slowdown is found in most of them.
    found, answers = 0, []
    for i in range(5):
        base, new = tmp_path / f"base{i}.parquet", tmp_path / f"new{i}.parquet"
        _quiet_base(base)
        host = _suite(new, 2.0, hogs=2)
        done = _cli("compare", base, new, "--json")
        rows = {r["name"]: r["verdict"] for r in json.loads(done.stdout)}
        found += done.returncode == 1 and rows["sort"] == "slower"
        # the whole answer (the drift it measured): what CI saw, if it fails
        answers.append(
            {"pair": i, "drift": drift_of(hotspan.compare(base, new)), "host": host, "rows": rows}
        )
        assert rows["tokenize"] != "slower" and rows["dedupe"] != "slower", rows
    assert found >= 3, json.dumps(answers, default=str)


def test_serve_answers_inconclusive_and_says_the_drift(tmp_path):
    from serve._serving import Server

    root = tmp_path / "runs"
    root.mkdir()
    base = _with_machine(_one_group(20_000), loop_ns=100_000.0, contention=0.0, turn_ns=1000.0)
    new = _with_machine(_one_group(40_000), loop_ns=100_000.0, contention=2.0, turn_ns=1000.0)
    hotspan.export(base, root / "base.parquet")
    hotspan.export(new, root / "new.parquet")
    server = Server(root)
    try:
        with server.client() as client:
            ids = {t["path"]: t["id"] for t in client.get("/v1/traces").json()["traces"]}
            answer = client.get(
                "/v1/compare", params={"base": ids["base.parquet"], "new": ids["new.parquet"]}
            )
            assert answer.status_code == 200, answer.text
            body = answer.json()
            assert [r["verdict"] for r in body["rows"]] == ["inconclusive"]
            assert "the machine was 3.00x slower during" in body["machine"]
    finally:
        server.stop()


def test_every_engine_judges_against_the_same_drift(tmp_path):
    for side in ("a", "b"):
        with hotspan.record(tmp_path / side):
            for _ in range(50):
                with hotspan.span("step", "train"):
                    sum(range(2_000))
    drifts = [
        drift_of(hotspan.compare(tmp_path / "a", tmp_path / "b", engine=engine))
        for engine in ("memory", "duckdb")
    ]
    assert drifts[0] is not None and drifts[0]["measured"] == [True, True]
    assert drifts[0] == drifts[1]
