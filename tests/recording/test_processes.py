"""Every process of a program recorded, none hangs: real multiprocessing pools (fork, spawn,
forkserver; close+join and terminate), DataLoader-like forked workers, `hotspan run` of a
program with children, recordings one after another, a SIGTERM inside a flush.

``HOTSPAN_TEST_REPEAT`` (default 3) sets how many times each scenario runs (the pools and
workers inside one program each time afresh; `hotspan run` as separate runs).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats.dataset import META_RANKS, META_UNFLUSHED, sweep_temporaries
from hotspan.schema import SPAN_SCHEMA

from _procs import DEADLINE_S, env, kill, read_line

pytestmark = pytest.mark.slow  # subprocess storms and big runs: the slow tier (pytest -m slow)

REPEAT = int(os.environ.get("HOTSPAN_TEST_REPEAT", "3"))
#: Per scenario: generous on a loaded 2-core machine (a spawn pool of 4 imports pyarrow 4 times).
TIMEOUT_S = 60 + 25 * REPEAT

POOL_PROGRAM = textwrap.dedent(
    """
    import multiprocessing as mp, sys
    import hotspan

    def job(i):
        for _ in range(60):
            with hotspan.span("job", "w", arg=i):
                pass
        return i

    if __name__ == "__main__":
        method, end, repeat = sys.argv[1], sys.argv[2], int(sys.argv[3])
        ctx = mp.get_context(method)
        for r in range(repeat):
            tasks = [100 * r + i for i in range(4)]
            if end == "terminate":  # the with-block's exit: terminate() sends the workers SIGTERM
                with ctx.Pool(4) as pool:
                    assert pool.map(job, tasks) == tasks
            else:
                pool = ctx.Pool(4)
                assert pool.map(job, tasks) == tasks
                pool.close()
                pool.join()
            print("round", r, flush=True)
    """
)


def _run(
    args: list[str], out: Path, timeout: float = TIMEOUT_S, **extra: str
) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(
            args,
            env=env(HOTSPAN_OUT=str(out) + "/", **extra),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"hung: {args[1:]} did not finish in {timeout:.0f} s; stderr: {exc.stderr}"
        ) from None


def _run_side_by_side(
    commands: list[list[str]], outs: list[Path], timeout: float, under_env: bool = True
) -> list[subprocess.CompletedProcess]:
    """``_run`` for several programs at once, each recording a run of its own (under
    ``HOTSPAN_OUT``, or by themselves: ``under_env=False``)."""
    procs = [
        subprocess.Popen(
            args,
            env=env(HOTSPAN_OUT=str(out) + "/") if under_env else env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for args, out in zip(commands, outs)
    ]
    deadline = time.monotonic() + timeout
    results = []
    try:
        for args, proc in zip(commands, procs):
            try:
                stdout, stderr = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"hung: {args[1:]} did not finish in {timeout:.0f} s"
                ) from None
            results.append(subprocess.CompletedProcess(args, proc.returncode, stdout, stderr))
    finally:
        kill(*procs)
    return results


def _spans_by_arg(table) -> dict[int, int]:
    args, counts = pc.value_counts(table.column("arg")).flatten()
    return dict(zip(args.to_pylist(), counts.to_pylist()))


@pytest.mark.parametrize("end", ["close_join", "terminate"])
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_pool_workers_are_all_recorded_and_none_hangs(tmp_path, method, end):
    out = tmp_path / "run"
    script = tmp_path / "pool_program.py"
    script.write_text(POOL_PROGRAM)
    result = _run([sys.executable, str(script), method, end, str(REPEAT)], out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("round") == REPEAT
    table = hotspan.load(out)
    # Every job's 60 spans, in every round: nothing a worker recorded is lost at its exit.
    assert _spans_by_arg(table) == {100 * r + i: 60 for r in range(REPEAT) for i in range(4)}
    pairs = table.select(["pid", "span_id"]).to_pylist()
    assert len({(p["pid"], p["span_id"]) for p in pairs}) == table.num_rows  # none written twice


DATALOADER_PROGRAM = textwrap.dedent(
    """
    import multiprocessing as mp, queue, sys
    import hotspan

    def worker_loop(index_queue, data_queue, worker_id):
        # As torch's DataLoader worker: take indices until None, record, put the batch;
        # then leave (the process ends through multiprocessing's os._exit).
        while True:
            index = index_queue.get()
            if index is None:
                break
            with hotspan.span("load", "data", arg=index):
                with hotspan.span("decode", "data", arg=index):
                    pass
            data_queue.put((worker_id, index))
        data_queue.cancel_join_thread()
        data_queue.close()

    if __name__ == "__main__":
        repeat, per_worker = int(sys.argv[1]), int(sys.argv[2])
        ctx = mp.get_context("fork")
        for r in range(repeat):
            data_queue = ctx.Queue()
            index_queues, workers = [], []
            for w in range(2):
                iq = ctx.Queue()
                p = ctx.Process(target=worker_loop, args=(iq, data_queue, w), daemon=True)
                p.start()
                index_queues.append(iq)
                workers.append(p)
            indices = [1000 * r + i for i in range(2 * per_worker)]
            for k, index in enumerate(indices):
                index_queues[k % 2].put(index)
            got = sorted(data_queue.get(timeout=60)[1] for _ in indices)
            assert got == indices
            for iq in index_queues:  # the iterator's shutdown: None to each worker, join, terminate
                iq.put(None)
            for p in workers:
                p.join(timeout=5)
                if p.is_alive():
                    p.terminate()
                    p.join()
            print("round", r, [p.exitcode for p in workers], flush=True)
    """
)


def test_dataloader_like_forked_workers_lose_nothing(tmp_path):
    out = tmp_path / "run"
    script = tmp_path / "loader_program.py"
    script.write_text(DATALOADER_PROGRAM)
    per_worker = 50
    result = _run([sys.executable, str(script), str(REPEAT), str(per_worker)], out)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("round") == REPEAT
    table = hotspan.load(out)
    expected = {
        1000 * r + i: 2 for r in range(REPEAT) for i in range(2 * per_worker)
    }  # load + decode
    assert _spans_by_arg(table) == expected
    # Both workers of every round are there (a whole worker's spans lost was the failure).
    assert len(set(table.column("pid").to_pylist())) == 2 * REPEAT


@pytest.mark.skipif(
    "torch" not in sys.modules and __import__("importlib").util.find_spec("torch") is None,
    reason="a real torch DataLoader: pip install torch (the torch-free test above covers the pattern)",
)
def test_a_real_torch_dataloader(tmp_path):
    script = tmp_path / "torch_program.py"
    script.write_text(
        textwrap.dedent(
            """
        import hotspan, torch
        from torch.utils.data import DataLoader, Dataset

        class Items(Dataset):
            def __len__(self):
                return 64
            def __getitem__(self, i):
                with hotspan.span("item", "data", arg=i):
                    return torch.tensor([i])

        if __name__ == "__main__":
            seen = sorted(int(x) for batch in DataLoader(Items(), batch_size=8, num_workers=2) for x in batch)
            assert seen == list(range(64))
        """
        )
    )
    out = tmp_path / "run"
    for _ in range(REPEAT):
        result = _run([sys.executable, str(script)], out)
        assert result.returncode == 0, result.stderr
    # each start of the program is a run of its own: all of them
    assert _spans_by_arg(hotspan.load(out, run="all")) == {i: REPEAT for i in range(64)}


RUN_PROGRAM = textwrap.dedent(
    """
    import multiprocessing as mp, subprocess, sys
    import hotspan

    def job(i):
        for _ in range(10):
            with hotspan.span("job", "w", arg=i):
                pass
        return i

    if __name__ == "__main__":
        with hotspan.span("main", arg=-1):
            with mp.get_context("fork").Pool(2) as pool:
                pool.map(job, [1, 2])
            p = mp.get_context("spawn").Process(target=job, args=(3,))
            p.start()
            p.join()
            subprocess.run([sys.executable, "-c", "import hotspan\\nwith hotspan.span('sub', arg=4): pass"], check=True)
        print("done", flush=True)
    """
)


def test_hotspan_run_records_the_whole_process_tree(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(RUN_PROGRAM)
    for r in range(REPEAT):
        target = tmp_path / f"trace{r}.parquet"
        try:
            result = subprocess.run(
                [sys.executable, "-m", "hotspan", "run", "-o", str(target), str(script)],
                env=env(),
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                cwd=tmp_path,
            )
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"hotspan run hung; stderr: {exc.stderr}") from None
        assert result.returncode == 0, result.stderr
        assert result.stdout == "done\n"
        table = hotspan.load(target)
        assert _spans_by_arg(table) == {-1: 1, 1: 10, 2: 10, 3: 10, 4: 1}
        assert (
            len(set(table.column("pid").to_pylist())) >= 3
        )  # the program, its workers, the subprocess
        assert "processes" in result.stderr and "32 spans" in result.stderr
        assert not [
            p for p in tmp_path.iterdir() if "hotspan-run" in p.name
        ]  # the parts directory went


def test_hotspan_run_keeps_the_users_hotspan_out_apart(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("import hotspan\nwith hotspan.span('x'): pass\n")
    result = _run(
        [sys.executable, "-m", "hotspan", "run", "-o", str(tmp_path / "t.parquet"), str(script)],
        tmp_path / "elsewhere",
    )
    assert result.returncode == 0, result.stderr
    assert hotspan.load(tmp_path / "t.parquet").column("name").to_pylist() == ["x"]


# --------------------------------------------------------------------------- in this process


def test_recordings_one_after_another_never_share_a_part_name(fresh, tmp_path):
    run = tmp_path / "run"
    span = hotspan.span("work")
    for n in (1, 2, 3):  # each block flushes its first part as seq 0: names must still differ
        with hotspan.record(run):
            for _ in range(n):
                with span:
                    pass
    parts = sorted(run.glob("part-*.parquet"))
    assert len({p.name for p in parts}) == len(parts) >= 3
    assert hotspan.load(run).num_rows == 6


def test_a_run_killed_before_its_first_flush_loads_empty_with_its_metadata(tmp_path):
    out = tmp_path / "run"
    code = "import hotspan, time\nwith hotspan.span('x'): pass\nprint('ready', flush=True)\ntime.sleep(60)\n"
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        env=env(HOTSPAN_OUT=str(out), HOTSPAN_FLUSH_INTERVAL="600"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read_line(proc, "ready")
        deadline = time.monotonic() + DEADLINE_S
        while not list(out.glob("part-r0-*.parquet")):  # the metadata part, written at start
            assert time.monotonic() < deadline, "no metadata part written at start"
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=DEADLINE_S)
    finally:
        kill(proc)
    table = hotspan.load(out)
    # and the span, once the drain thread's next pass (milliseconds after the raw log opened,
    # right after the metadata part) wrote it: a kill at once may come first
    # (formats/_rawlog.py; test_raw_log.py holds the raw log to its half second)
    assert table.num_rows in (0, 1) and table.schema.equals(SPAN_SCHEMA)
    (process,) = json.loads(table.schema.metadata[META_RANKS])["0"]
    assert process["pid"] == proc.pid and "anchor_real_ns" in process["clock"]


def test_temporaries_of_a_killed_writer_are_swept_at_the_next_start(fresh, tmp_path):
    run = tmp_path / "run"
    (run / "rank=0").mkdir(parents=True)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead_pid = int(dead.stdout)
    torn = run / "rank=0" / f".part-{dead_pid}-6b0d00001234abcd-000003.parquet.1a2b3c4d.part"
    torn.write_bytes(b"PAR1 torn")
    live = run / "rank=0" / f".part-{os.getpid()}-6b0d00001234abcd-000004.parquet.5e6f7a8b.part"
    live.write_bytes(b"PAR1 being written")  # a writer that runs (this one): left alone
    with hotspan.record(run):
        with hotspan.span("x"):
            pass
    assert not torn.exists() and live.exists()
    assert hotspan.load(run).num_rows == 1  # never counted
    os.utime(live, (time.time() - 3600, time.time() - 3600))
    assert sweep_temporaries(run) == 1 and not live.exists()  # stale: whoever wrote it


def test_sigterm_arriving_inside_a_flush_neither_hangs_nor_loses(tmp_path):
    # The handler runs on the main thread in the middle of that thread's own stop(): it must
    # not wait for the lock its own thread holds; the outer stop finishes, then dies of it.
    out = tmp_path / "run"
    code = textwrap.dedent(
        """
        import os, signal, hotspan
        from hotspan.recording import recorder
        for _ in range(100):
            with hotspan.span("x"):
                pass
        rec = recorder.active()
        write = rec._sink._write  # a part's write: a flush's, or stop()'s from the raw log
        def write_then_signal(table, **part_meta):
            os.kill(os.getpid(), signal.SIGTERM)  # delivered at the next bytecode: inside this flush
            for _ in range(1000):
                pass
            write(table, **part_meta)
        rec._sink._write = write_then_signal
        rec.stop()
        print("not reached: the SIGTERM must end the process once the flush is done", flush=True)
        """
    )
    result = _run(
        [sys.executable, "-c", code], out, timeout=DEADLINE_S, HOTSPAN_FLUSH_INTERVAL="600"
    )
    assert result.returncode == -signal.SIGTERM, result.stderr
    assert "not reached" not in result.stdout
    assert hotspan.load(out).num_rows == 100


#: Rounds of each pool scenario in the slow tier: issue 21's 50 of each (HOTSPAN_POOL_RUNS
#: sets fewer for a quick look). 50 took 19 min on a loaded 2-core machine for the nine
#: scenarios, two programs side by side; most of a spawn or forkserver round is its 4
#: workers each importing pyarrow to write their first part (start()), ~1 s of CPU each.
POOL_RUNS = int(os.environ.get("HOTSPAN_POOL_RUNS", "50"))
#: Programs sharing a scenario's rounds side by side, one a core (each its own pools and
#: run): on 2 cores two took 0.63 of the time of one after another, four 0.74.
POOL_PROGRAMS = int(os.environ.get("HOTSPAN_POOL_PROGRAMS", "0")) or min(os.cpu_count() or 1, 4)

COUNTED_POOL_PROGRAM = textwrap.dedent(
    """
    import json, multiprocessing as mp, os, sys, time
    import hotspan

    def init(counts_, rnd_, next_slot):
        # each worker takes a slot: it counts the spans it has recorded there (after each
        # span closed), so the parent knows what was recorded before its signal
        global counts, rnd, slot
        counts, rnd = counts_, rnd_
        with next_slot.get_lock():
            slot = next_slot.value
            next_slot.value += 1

    def job(n):
        for _ in range(n):
            with hotspan.span("job", "w", arg=rnd * 1000 + slot):
                pass
            counts[slot] += 1
        return n

    def forever(_):
        while True:
            with hotspan.span("job", "w", arg=rnd * 1000 + slot):
                time.sleep(0.0005)  # a few thousand spans a second: far from the memory cap
            counts[slot] += 1

    def rounds_of(first, rounds):
        # argv[5], if given: the rounds run inside record(argv[5]), not under HOTSPAN_OUT
        if len(sys.argv) > 5:
            with hotspan.record(sys.argv[5]):
                yield from range(first, first + rounds)
        else:
            yield from range(first, first + rounds)

    if __name__ == "__main__":
        method, end, workers = sys.argv[1], sys.argv[2], 4
        first, rounds = int(sys.argv[3]), int(sys.argv[4])
        ctx = mp.get_context(method)
        for rnd in rounds_of(first, rounds):
            counts = ctx.Array("q", 2 * workers, lock=False)  # room for replaced workers
            next_slot = ctx.Value("i", 0)
            pool = ctx.Pool(workers, initializer=init, initargs=(counts, rnd, next_slot))
            if end == "close_join":
                assert pool.map(job, [300] * 8, chunksize=1) == [300] * 8
                pool.close()
                pool.join()
                before = list(counts)
            elif end == "terminate":
                assert pool.map(job, [300] * 8, chunksize=1) == [300] * 8
                before = list(counts)
                pool.terminate()
                pool.join()
            else:  # terminate() in the middle of work
                for i in range(workers):
                    pool.apply_async(forever, (i,))
                deadline = time.monotonic() + 60
                while sorted(counts)[-workers] < 20 and time.monotonic() < deadline:
                    time.sleep(0.005)
                before = list(counts)
                pool.terminate()
                pool.join()
            print(json.dumps({"round": rnd, "before": before, "after": list(counts)}), flush=True)
    """
)


#: Rounds of each pool scenario inside record() rather than under HOTSPAN_OUT (issue 30):
#: the same mechanism, so fewer (HOTSPAN_RECORD_POOL_RUNS sets another count).
RECORD_POOL_RUNS = int(os.environ.get("HOTSPAN_RECORD_POOL_RUNS", "4"))


@pytest.mark.slow
@pytest.mark.parametrize("how", ["HOTSPAN_OUT", "record"])
@pytest.mark.parametrize("end", ["close_join", "terminate", "terminate_mid_work"])
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_every_pool_workers_spans_arrive_however_the_pool_ends(tmp_path, method, end, how):
    # Issue 21: a forkserver pool ended by terminate() lost whole workers (no part at all).
    # Every span a worker counted before the parent's signal must be in the run; none more
    # than it counted at the end; and nothing hangs. Issue 30: the same inside record(),
    # where the workers recorded nothing at all.
    script = tmp_path / "counted_pool.py"
    script.write_text(COUNTED_POOL_PROGRAM)
    runs = POOL_RUNS if how == "HOTSPAN_OUT" else RECORD_POOL_RUNS
    programs = max(1, min(POOL_PROGRAMS, runs))
    outs = [tmp_path / f"run{k}" for k in range(programs)]
    shares = [runs // programs + (k < runs % programs) for k in range(programs)]
    firsts = [sum(shares[:k]) for k in range(programs)]
    results = _run_side_by_side(
        [
            [sys.executable, str(script), method, end, str(first), str(share)]
            + ([str(out) + "/"] if how == "record" else [])
            for first, share, out in zip(firsts, shares, outs)
        ],
        outs,
        timeout=120 + 15 * runs,  # side by side on fewer cores: no faster than in turn
        under_env=how == "HOTSPAN_OUT",
    )
    rounds = []
    for result in results:
        assert result.returncode == 0, result.stderr
        rounds += [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    assert sorted(r["round"] for r in rounds) == list(range(runs))
    arrived = {arg: n for out in outs for arg, n in _spans_by_arg(hotspan.load(out)).items()}
    short, expected = [], 0
    for r in rounds:
        for slot, (before, after) in enumerate(zip(r["before"], r["after"])):
            got = arrived.get(r["round"] * 1000 + slot, 0)
            expected += before
            if not before <= got <= after:
                short.append(
                    f"round {r['round']} worker {slot}: counted {before}..{after}, arrived {got}"
                )
    total = sum(arrived.values())
    print(
        f"pool {method} {end} {how} x{runs} ({programs} side by side): "
        f"expected >= {expected}, arrived {total}"
    )
    assert not short, f"{len(short)} workers short: " + "; ".join(short[:10])


SIGNALLED_PROGRAM = textwrap.dedent(
    """
    import os, sys, threading, time
    import hotspan
    flushed, flushed_spans = threading.Event(), []
    def count(event):
        if isinstance(event, hotspan.events.Flushed):
            flushed_spans.append(event.spans)
            if sum(flushed_spans) >= 300:
                flushed.set()
    hotspan.on_event(count)
    for n in range(300):
        with hotspan.span("step", arg=n):
            pass
    if sys.argv[1] == "crash":
        # the crash comes once the steps were flushed (every second), whatever the load
        assert flushed.wait(120), "the steps were never flushed"
        os.abort()
    print("recorded 300", flush=True)
    while True:
        with hotspan.span("idle"):
            time.sleep(0.01)
    """
)


@pytest.mark.parametrize("ending", ["SIGTERM", "SIGINT", "crash"])
def test_hotspan_run_ended_by_a_signal_or_a_crash_still_writes_its_output(tmp_path, ending):
    # was: SIGTERM made `hotspan run` exit 143 with no output, the spans left in a hidden
    # `.out.parquet.hotspan-run-*` directory
    script, target = tmp_path / "prog.py", tmp_path / "out.parquet"
    script.write_text(SIGNALLED_PROGRAM)
    proc = subprocess.Popen(
        [sys.executable, "-m", "hotspan", "run", "-o", str(target), str(script), ending],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )
    try:
        if ending != "crash":
            read_line(proc, "recorded 300", timeout=TIMEOUT_S)
            proc.send_signal(getattr(signal, ending))
        _out, err = proc.communicate(timeout=TIMEOUT_S)
    finally:
        kill(proc)
    # the program's status: died of SIGTERM / SIGABRT as it did; SIGINT is Python's 130
    expected = {"SIGTERM": -signal.SIGTERM, "SIGINT": 130, "crash": -signal.SIGABRT}[ending]
    assert proc.returncode == expected, err
    steps = hotspan.load(target).filter(pc.equal(pc.field("name"), "step"))
    assert sorted(steps.column("arg").to_pylist()) == list(range(300))
    said = [line for line in err.splitlines() if line.startswith("hotspan run: the program")]
    assert len(said) == 1 and str(target) in said[0], err
    assert ("ended by " + ending if ending != "crash" else "died of SIGABRT") in said[0]
    assert not [
        p for p in tmp_path.iterdir() if "hotspan-run" in p.name
    ]  # the parts directory went


UNFLUSHED_PROGRAM = textwrap.dedent(
    """
    import os, sys, time
    if __name__ == "__mp_main__":  # a spawned worker, still importing the program
        time.sleep(60)
    import multiprocessing as mp
    import hotspan

    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        pool = ctx.Pool(2)
        pids = sorted(p.pid for p in pool._pool)
        time.sleep(0.5)
        pool.terminate()  # SIGTERM: the workers die of it before their first part
        pool.join()
        print("workers", *pids, flush=True)
    """
)


def test_the_parent_names_workers_killed_before_their_first_part(tmp_path):
    out = tmp_path / "run"
    script = tmp_path / "unflushed.py"
    script.write_text(UNFLUSHED_PROGRAM)
    result = _run([sys.executable, str(script)], out)
    assert result.returncode == 0, result.stderr
    pids = [int(x) for x in result.stdout.split()[1:]]
    table = hotspan.load(out)
    named = json.loads(table.schema.metadata[META_UNFLUSHED])
    assert sorted(child["pid"] for child in named) == pids
    parent = {
        p["pid"] for procs in json.loads(table.schema.metadata[META_RANKS]).values() for p in procs
    }
    assert all(
        child["exitcode"] == -signal.SIGTERM and child["parent_pid"] in parent for child in named
    )
