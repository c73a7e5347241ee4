"""The flight file: real processes that die (SIGKILL, SIGSEGV, abort()) and what `recover`
rebuilds from their files; `hotspan top` on a process stuck in a span; snapshot(); bad
files refused; recover fuzzed with damaged files."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

import hotspan
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hotspan.cli import main
from hotspan.recording.flight import META_OPEN_SPANS, FlightFileError, recover, stacks

DEADLINE_S = 120

#: 3 threads record, the main thread drains once, the threads record more (a fourth
#: records and exits), then each thread opens stuck > deep and waits; the child writes to
#: its pipe the spans completed after the drain, then dies as DEATH says.
CHILD = textwrap.dedent(
    """
    import ctypes, os, resource, signal, sys, threading, time
    import hotspan

    flight, death, fd = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # no core file for SIGSEGV / abort
    # small blocks: many switches, blocks drained in part and whole
    hotspan.configure(flight=flight, capacity=64, memory_cap=4 << 20)
    before, after, stuck = threading.Barrier(4), threading.Barrier(4), threading.Barrier(4)
    late = {0: 57, 1: 130, 2: 9}

    def work(k):
        hotspan.set_thread_name(f"w{k}")
        for _ in range(100 + 31 * k):
            with hotspan.span("early", "c"):
                pass
        before.wait()      # the main thread drains
        after.wait()
        for i in range(late[k]):
            with hotspan.span("late", "c", arg=i):
                with hotspan.span("leaf"):
                    pass
        with hotspan.span("stuck", "io"):
            with hotspan.span("deep", "net"):
                stuck.wait()
                time.sleep(600)

    def exiter():
        for _ in range(7):
            with hotspan.span("exited", "x"):
                pass

    pool = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(3)]
    for t in pool:
        t.start()
    before.wait()
    drained = hotspan.drain().num_rows
    assert drained == sum(100 + 31 * k for k in range(3)), drained
    after.wait()
    t = threading.Thread(target=exiter, name="exiter")
    t.start()
    t.join()
    stuck.wait()
    os.write(fd, str(2 * sum(late.values()) + 7).encode())
    os.close(fd)
    if death == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif death == "sigsegv":
        ctypes.string_at(0)
    elif death == "abort":
        os.abort()
    """
)


def _run_child(tmp_path: Path, death: str) -> tuple[Path, int, int]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    r, w = os.pipe()
    flight = tmp_path / "run-{pid}.flight"
    # Under .ci/sanitize the child inherits the sanitizer, whose own SIGSEGV handler would
    # turn the death into a report and exit(1): let the signal kill it, as in production.
    env = dict(os.environ)
    for var in ("ASAN_OPTIONS", "TSAN_OPTIONS"):
        env[var] = env.get(var, "") + ":handle_segv=0"
    proc = subprocess.Popen(
        [sys.executable, str(script), str(flight), death, str(w)],
        pass_fds=(w,),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    os.close(w)
    with os.fdopen(r, "rb") as pipe:
        said = pipe.read()
    try:
        _out, err = proc.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    assert said, err.decode()
    path = tmp_path / f"run-{proc.pid}.flight"
    assert path.exists()
    return path, int(said), proc.returncode


@pytest.mark.slow
@pytest.mark.parametrize(
    "death, rc",
    [("sigkill", -signal.SIGKILL), ("sigsegv", -signal.SIGSEGV), ("abort", -signal.SIGABRT)],
)
def test_recover_gives_the_undrained_and_the_open_spans_of_a_dead_process(tmp_path, death, rc):
    path, completed_after_drain, returncode = _run_child(tmp_path, death)
    assert returncode == rc
    table = recover(path)
    open_ids = json.loads(table.schema.metadata[META_OPEN_SPANS])
    rows = table.to_pylist()
    assert len({r["span_id"] for r in rows}) == len(rows)
    closed = [r for r in rows if r["span_id"] not in set(open_ids)]
    opened = [r for r in rows if r["span_id"] in set(open_ids)]
    # exactly the spans completed after the drain: none drained before comes back
    assert len(closed) == completed_after_drain
    assert {r["name"] for r in closed} == {"late", "leaf", "exited"}
    by_id = {r["span_id"]: r for r in rows}
    for r in closed:
        if r["name"] == "leaf":
            parent = by_id[r["parent_id"]]
            assert (parent["name"], parent["depth"], r["depth"]) == ("late", 0, 1)
            assert parent["start_ns"] <= r["start_ns"] <= r["end_ns"] <= parent["end_ns"]
            assert r["category"] == "c" and r["thread_id"] == parent["thread_id"]
        else:
            assert r["depth"] == 0 and r["parent_id"] is None
    lates = sorted(r["arg"] for r in closed if r["name"] == "late")
    assert lates == sorted(list(range(57)) + list(range(130)) + list(range(9)))
    assert {r["thread_name"] for r in closed if r["name"] == "exited"} == {"exiter"}
    assert {r["thread_name"] for r in closed if r["name"] == "late"} == {"w0", "w1", "w2"}
    # the open spans: stuck > deep on each of the three threads, ending when last seen
    assert len(opened) == 6
    for name in ("w0", "w1", "w2"):
        mine = sorted((r for r in opened if r["thread_name"] == name), key=lambda r: r["depth"])
        assert [(r["name"], r["category"], r["depth"]) for r in mine] == [
            ("stuck", "io", 0),
            ("deep", "io/net", 1),
        ]
        assert mine[0]["parent_id"] is None and mine[1]["parent_id"] == mine[0]["span_id"]
        assert all(r["end_ns"] >= r["start_ns"] for r in mine)
        last_late = max(r["end_ns"] for r in closed if r["thread_name"] == name)
        assert mine[0]["start_ns"] >= last_late
    # and the CLI writes them in any export format
    out = tmp_path / "crash.json"
    assert main(["recover", str(path), "-o", str(out)]) == 0
    import hotspan

    assert hotspan.load(out).num_rows == len(rows)


def test_a_clean_exit_recovers_to_nothing(tmp_path):
    code = textwrap.dedent(
        """
        import sys, hotspan
        hotspan.configure(flight=sys.argv[1])
        for _ in range(50):
            with hotspan.span("s"):
                pass
        """
    )
    flight = tmp_path / "clean.flight"
    subprocess.run([sys.executable, "-c", code, str(flight)], check=True, timeout=DEADLINE_S)
    table = recover(flight)
    assert table.num_rows == 0
    assert json.loads(table.schema.metadata[META_OPEN_SPANS]) == []


@pytest.fixture(scope="module")
def dead_flight(tmp_path_factory) -> Path:
    """A flight file left by a process killed mid-run (small: 4 MiB of blocks)."""
    tmp = tmp_path_factory.mktemp("flight")
    path, _n, _rc = _run_child(tmp, "sigkill")
    return path


def _refused(path: Path, capsys, *needles: str) -> None:
    assert main(["recover", str(path), "-o", str(path.parent / "out.parquet")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(path) in err, err
    for needle in needles:
        assert needle in err, err


def test_recover_refuses_random_truncated_and_foreign_version_files(tmp_path, dead_flight, capsys):
    rand = tmp_path / "random.flight"
    rand.write_bytes(random.Random(1).randbytes(1 << 16))
    _refused(rand, capsys, "not a hotspan flight file")
    data = dead_flight.read_bytes()
    short = tmp_path / "short.flight"
    short.write_bytes(data[: len(data) // 2])
    _refused(short, capsys, "truncated")
    tiny = tmp_path / "tiny.flight"
    tiny.write_bytes(data[:100])
    _refused(tiny, capsys, "truncated")
    other = tmp_path / "other.flight"
    patched = bytearray(data)
    patched[16:48] = b"0.0.1-other".ljust(32, b"\0")
    other.write_bytes(bytes(patched))
    _refused(other, capsys, "0.0.1-other")
    _refused(tmp_path / "missing.flight", capsys)


# --------------------------------------------------------------------------- top


STUCK = textwrap.dedent(
    """
    import time, hotspan
    with hotspan.span("step"):
        with hotspan.span("allreduce", "comms"):
            print("ready", flush=True)
            time.sleep(120)
    """
)


def _top(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "hotspan", "top", *args],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )


@pytest.mark.slow
def test_top_shows_where_a_process_is_stuck_and_says_when_it_is_gone(tmp_path):
    env = dict(os.environ, HOTSPAN_FLIGHT=str(tmp_path / "elsewhere-{pid}"))
    proc = subprocess.Popen(
        [sys.executable, "-c", STUCK], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        ready = time.time_ns()
        time.sleep(0.3)
        asked = time.time_ns()
        done = _top("--once", "--json", str(proc.pid))
        assert done.returncode == 0, done.stderr
        (line,) = done.stdout.splitlines()
        obj = json.loads(line)
        assert obj["pid"] == proc.pid and obj["alive"] is True and obj["rank"] == 0
        (thread,) = obj["threads"]
        assert [(f["name"], f["category"]) for f in thread["stack"]] == [
            ("step", None),
            ("allreduce", "comms"),
        ]
        allreduce = thread["stack"][1]
        assert allreduce["elapsed_ns"] >= asked - ready
        assert allreduce["start_ns"] <= ready
        assert thread["stack"][0]["elapsed_ns"] >= allreduce["elapsed_ns"]
        # the text view, and the same process among every process of this user
        text = _top("--once", str(proc.pid))
        assert text.returncode == 0 and "step" in text.stdout and "allreduce" in text.stdout
        every = _top("--once", "--json")
        assert proc.pid in [json.loads(x)["pid"] for x in every.stdout.splitlines()]
        # a directory of files (one per rank) and the file itself
        by_dir = _top("--json", str(tmp_path))
        assert (
            json.loads(by_dir.stdout.splitlines()[0])["threads"][0]["stack"][1]["name"]
            == "allreduce"
        )
    finally:
        proc.kill()
        proc.wait()
    gone = _top("--once", "--json", str(proc.pid))
    assert gone.returncode == 1
    assert json.loads(gone.stdout) == {"pid": proc.pid, "rank": None, "alive": False, "threads": []}
    gone_text = _top("--once", str(tmp_path / f"elsewhere-{proc.pid}"))
    assert gone_text.returncode == 1 and "gone" in gone_text.stdout


def test_top_into_a_pipe_writes_a_snapshot_each_interval(tmp_path):
    # Before, output that was no terminal got nothing until Ctrl-C (a live view there shows
    # only its last frame): `hotspan top >> watch.log &` beside a job logged nothing.
    env = dict(os.environ, HOTSPAN_FLIGHT=str(tmp_path / "f-{pid}"))
    stuck = subprocess.Popen(
        [sys.executable, "-c", STUCK], env=env, stdout=subprocess.PIPE, text=True
    )
    top = None
    try:
        assert stuck.stdout.readline().strip() == "ready"
        top = subprocess.Popen(
            [sys.executable, "-m", "hotspan", "top", str(tmp_path), "--interval", "0.2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        snapshots: list[list[str]] = []
        deadline = threading.Timer(30, top.kill)  # no snapshot: fail, not hang
        deadline.start()
        for line in top.stdout:  # waits for the lines themselves
            if line.startswith("hotspan top "):
                if len(snapshots) == 3:
                    break  # three whole snapshots read
                snapshots.append([])
            elif snapshots:
                snapshots[-1].append(line)
        deadline.cancel()
        assert len(snapshots) == 3, "no snapshot before the deadline"
        for rows in snapshots:
            row = next(r for r in rows if str(stuck.pid) in r)
            assert "step" in row and "allreduce" in row, rows
        top.send_signal(signal.SIGINT)
        assert top.wait(timeout=DEADLINE_S) == 0, top.stderr.read()
    finally:
        for proc in (stuck, top):
            if proc is not None:
                proc.kill()
                proc.wait()


@pytest.mark.slow
def test_snapshot_lists_the_open_spans_of_this_process(tmp_path):
    code = textwrap.dedent(
        """
        import sys, threading, time, hotspan
        hotspan.configure(flight=sys.argv[1], rank=5)
        inside = threading.Event()
        release = threading.Event()
        def worker():
            hotspan.set_thread_name("loader")
            with hotspan.span("load", "io", arg=3):
                inside.set()
                release.wait()
        t = threading.Thread(target=worker)
        t.start()
        inside.wait()
        with hotspan.span("outer"):
            with hotspan.span("inner", "compute"):
                time.sleep(0.05)
                rows = hotspan.snapshot().to_pylist()
        release.set()
        t.join()
        after = hotspan.snapshot().num_rows
        import json
        print(json.dumps({"rows": rows, "after": after}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "s.flight")],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
        check=True,
    )
    got = json.loads(out.stdout)
    assert got["after"] == 0
    rows = sorted(got["rows"], key=lambda r: (r["thread_name"], r["depth"]))
    assert [(r["thread_name"], r["depth"], r["name"], r["category"]) for r in rows] == [
        ("MainThread", 0, "outer", None),
        ("MainThread", 1, "inner", "compute"),
        ("loader", 0, "load", "io"),
    ]
    assert all(r["rank"] == 5 and r["elapsed_ns"] >= 0 for r in rows)
    assert rows[1]["elapsed_ns"] >= 50_000_000


# --------------------------------------------------------------------------- fuzz


@pytest.fixture(scope="module")
def flight_bytes(dead_flight) -> bytes:
    return dead_flight.read_bytes()


def _regions(data: bytes) -> list[tuple[int, int]]:
    """Where damage matters: the header, the first slots, the strings and pairs in use,
    the first blocks."""
    from hotspan.recording import flight as fl

    h = dict(zip(fl._NAMES, fl._HEADER.unpack_from(data, 0)))
    return [
        (0, fl._HEADER.size),
        (h["slots_off"], 6 * h["slot_bytes"]),
        (h["strings_off"], max(8, h["strings_used"])),
        (h["pairs_off"], max(8, 8 * h["npairs"])),
        (h["blocks_off"], 8 * h["block_bytes"]),
    ]


_FUZZ_EXAMPLES = int(os.environ.get("HOTSPAN_FLIGHT_FUZZ", "120"))


@pytest.mark.slow
@settings(
    max_examples=_FUZZ_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(data=st.data())
def test_recover_is_total_on_damaged_flight_files(tmp_path, flight_bytes, data):
    """Any damage: recover() and stacks() return or raise FlightFileError; never another
    exception, a crash, a hang (each call is bounded by the file's size) or memory out of
    proportion (every count is checked against the file)."""
    buf = bytearray(flight_bytes)
    regions = _regions(flight_bytes)
    for _ in range(data.draw(st.integers(1, 8), label="edits")):
        start, length = regions[data.draw(st.integers(0, len(regions) - 1), label="region")]
        at = start + data.draw(st.integers(0, max(0, length - 1)), label="offset")
        value = data.draw(
            st.sampled_from(
                [
                    b"\xff" * 8,
                    b"\0" * 8,
                    b"\x7f\xff\xff\xff",
                    b"\x01",
                    (1 << 63).to_bytes(8, "little"),
                ]
            )
            | st.binary(min_size=1, max_size=16),
            label="bytes",
        )
        buf[at : at + len(value)] = value[: max(0, len(buf) - at)]
    if data.draw(st.booleans(), label="truncate"):
        del buf[data.draw(st.integers(0, len(buf)), label="length") :]
    path = tmp_path / "damaged.flight"
    path.write_bytes(bytes(buf))
    for read in (recover, stacks):
        started = time.monotonic()
        try:
            read(path)
        except FlightFileError:
            pass
        assert time.monotonic() - started < 30


def test_a_forked_child_writes_nothing_to_its_parents_file(tmp_path):
    code = textwrap.dedent(
        """
        import os, resource, signal, sys, hotspan
        hotspan.configure(flight=sys.argv[1])
        with hotspan.span("before"):
            pass
        with hotspan.span("open across fork"):
            pid = os.fork()
            if pid == 0:  # the child records (its thread state was in the parent's file)
                for _ in range(3000):
                    with hotspan.span("child"):
                        pass
                # the child's own spans, drained without pyarrow (slow to load in a fork)
                os._exit(0 if hotspan._native._drain(0)["n"] == 3000 else 3)
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, status
            for _ in range(5):
                with hotspan.span("parent after"):
                    pass
            print("killing", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    flight = tmp_path / "fork.flight"
    done = subprocess.run(
        [sys.executable, "-c", code, str(flight)],
        capture_output=True,
        text=True,
        timeout=3 * DEADLINE_S,
    )
    assert done.stdout.strip() == "killing", done.stderr
    rows = recover(flight).to_pylist()
    assert sorted(r["name"] for r in rows) == ["before", "open across fork"] + ["parent after"] * 5
    (opened,) = [r for r in rows if r["name"] == "open across fork"]
    assert all(r["parent_id"] == opened["span_id"] for r in rows if r["name"] == "parent after")


# --------------------------------------------------------------------------- damaged blocks


def _header(data: bytes) -> dict:
    from hotspan.recording import flight as fl

    return dict(zip(fl._NAMES, fl._HEADER.unpack_from(data, 0)))


def _block_at(h: dict, i: int) -> int:
    return h["blocks_off"] + i * h["block_bytes"]


def _used_blocks(data: bytes) -> list[int]:
    import struct

    h = _header(data)
    return [
        i
        for i in range(h["nblocks"])
        if struct.unpack_from("<I", data, _block_at(h, i) + h["off_b_state"])[0] == 1
        and struct.unpack_from("<Q", data, _block_at(h, i) + h["off_b_head"])[0] > 0
    ]


def _rows(table) -> dict[int, tuple]:
    cols = (
        "span_id",
        "parent_id",
        "name",
        "category",
        "start_ns",
        "end_ns",
        "depth",
        "thread_id",
        "arg",
        "error",
    )
    return {r["span_id"]: tuple(r[c] for c in cols) for r in table.select(list(cols)).to_pylist()}


def test_every_block_marked_in_use_leaves_out_the_damaged_ones_and_says_how_many(
    tmp_path, flight_bytes, capsys
):
    """The probe's file: every block marked in use and full (2,048 blocks of 1,024 records,
    mostly zeros). recover keeps the blocks that are intact, counts the records it left out
    in one line, and takes bounded time; every span it writes is one the intact file gives."""
    import struct

    original = tmp_path / "original.flight"
    original.write_bytes(flight_bytes)
    intact = _rows(recover(original))
    buf = bytearray(flight_bytes)
    h = _header(flight_bytes)
    for i in range(h["nblocks"]):
        struct.pack_into("<I", buf, _block_at(h, i) + h["off_b_state"], 1)
        struct.pack_into("<Q", buf, _block_at(h, i) + h["off_b_cap"], h["block_records"])
        struct.pack_into("<Q", buf, _block_at(h, i) + h["off_b_head"], h["block_records"])
    damaged = tmp_path / "all-in-use.flight"
    damaged.write_bytes(bytes(buf))
    out = tmp_path / "out.parquet"
    started = time.monotonic()
    assert main(["recover", str(damaged), "-o", str(out)]) == 0
    assert time.monotonic() - started < 20
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2, err
    assert err[1].startswith(f"hotspan recover: {damaged}: damaged, left out: ")
    assert "record(s) of" in err[1] and "damaged block(s)" in err[1]
    got = _rows(hotspan.load(out))
    assert got and all(intact.get(span_id) == row for span_id, row in got.items())
    assert 0 not in got


def test_a_file_with_no_intact_block_is_refused_in_one_line(tmp_path, flight_bytes, capsys):
    import struct

    buf = bytearray(flight_bytes)
    h = _header(flight_bytes)
    for i in _used_blocks(flight_bytes):  # every record zeroed: span id 0, repeated
        at = _block_at(h, i) + h["off_b_recs"]
        buf[at : at + h["block_records"] * 32] = bytes(h["block_records"] * 32)
    for i in range(h["nslots"]):  # and no thread: no open span to recover either
        struct.pack_into("<I", buf, h["slots_off"] + i * h["slot_bytes"] + h["off_slot_state"], 0)
    path = tmp_path / "zeroed.flight"
    path.write_bytes(bytes(buf))
    _refused(path, capsys, "damaged flight file: block", "nothing to recover")


_DAMAGE_EXAMPLES = int(os.environ.get("HOTSPAN_FLIGHT_FUZZ", "150"))


@pytest.mark.slow
@settings(
    max_examples=_DAMAGE_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(data=st.data())
def test_recover_never_makes_up_spans_from_damaged_blocks(tmp_path, flight_bytes, data):
    """Damage aimed at the blocks (their counts, ids, records, state): recover either refuses
    the file (FlightFileError) or returns spans that keep every rule a recorded span keeps:
    ids non-zero and distinct, a parent in the table one level up, times inside the
    process's life, no more rows than the file holds records; and loads back unchanged."""
    import struct
    import warnings

    import numpy as np

    from hotspan.formats._base import TraceFileWarning

    h = _header(flight_bytes)
    used = _used_blocks(flight_bytes)
    buf = bytearray(flight_bytes)
    fields = ("off_b_head", "off_b_cap", "off_b_state", "off_b_tid", "off_b_base", "off_b_drained")
    for _ in range(data.draw(st.integers(1, 6), label="edits")):
        i = data.draw(st.sampled_from(used) | st.integers(0, h["nblocks"] - 1), label="block")
        at = _block_at(h, i)
        if data.draw(st.booleans(), label="a count"):
            field = data.draw(st.sampled_from(fields), label="field")
            value = data.draw(
                st.sampled_from([0, 1, 2, h["block_records"], h["block_records"] + 1, 2**32, 2**63])
                | st.integers(0, 2**64 - 1),
                label="value",
            )
            struct.pack_into(
                "<Q" if field != "off_b_state" else "<I",
                buf,
                at + h[field],
                value if field != "off_b_state" else value & 0xFFFFFFFF,
            )
        else:
            rec = (
                at
                + h["off_b_recs"]
                + 32 * data.draw(st.integers(0, h["block_records"] - 1), label="record")
            )
            value = data.draw(
                st.sampled_from([b"\0" * 32, b"\xff" * 8, b"\x08", b"\x01\x00\x00\x00"])
                | st.binary(min_size=1, max_size=32),
                label="bytes",
            )
            rec += data.draw(st.integers(0, 31), label="byte")
            buf[rec : rec + len(value)] = value[: max(0, len(buf) - rec)]
    path = tmp_path / "damaged.flight"
    path.write_bytes(bytes(buf))
    started = time.monotonic()
    try:
        with warnings.catch_warnings():  # what was left out is said: a warning, not an error
            warnings.simplefilter("ignore", TraceFileWarning)
            table = recover(path)
    except FlightFileError:
        return
    finally:
        assert time.monotonic() - started < 30
    assert table.num_rows <= h["nblocks"] * h["block_records"] + h["nslots"] * h["frames_cap"]
    ids = table.column("span_id").to_numpy()
    assert (ids != 0).all() and len(np.unique(ids)) == len(ids)
    depth = dict(zip(ids.tolist(), table.column("depth").to_pylist()))
    for span_id, parent, d in zip(
        ids.tolist(), table.column("parent_id").to_pylist(), table.column("depth").to_pylist()
    ):
        assert (parent is not None) == (d > 0)
        if parent in depth:
            assert depth[parent] + 1 == d, (span_id, parent)
    last_seen = max(table.column("end_ns").to_pylist(), default=0)
    assert all(last_seen - 400 * 86_400 * 10**9 <= s for s in table.column("start_ns").to_pylist())
    out = tmp_path / "out.parquet"
    from hotspan.formats import export

    export(table, out)
    assert hotspan.load(out).num_rows == table.num_rows


class _Life:
    """A flight file's bytes and its process's life seen from outside (a short repr: hypothesis
    prints the arguments of a failing example)."""

    def __init__(self, flight: bytes, born: int, died: int):
        self.flight, self.born, self.died = flight, born, died

    def __repr__(self) -> str:
        return f"<flight file of {len(self.flight):,} bytes, life {self.born}..{self.died}>"


@pytest.fixture(scope="module")
def flight_with_life(tmp_path_factory) -> _Life:
    """A real flight file left by a killed process, with the bounds of that process's life
    seen from outside: before it was started, after it died."""
    tmp = tmp_path_factory.mktemp("life")
    born = time.time_ns()
    path, _n, _rc = _run_child(tmp, "sigkill")
    died = time.time_ns()
    return _Life(path.read_bytes(), born, died)


_FLIP_EXAMPLES = int(os.environ.get("HOTSPAN_FLIGHT_FUZZ", "200"))


@pytest.mark.slow
@settings(
    max_examples=_FLIP_EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(data=st.data())
def test_one_flipped_byte_never_gives_a_span_outside_the_process_life(
    tmp_path, flight_with_life, data
):
    """One byte flipped anywhere in a real flight file (mostly where it holds something:
    the header, the threads, the records in use): recover() refuses the file or gives spans
    that all lie inside the process's life (started after the process was, ended before
    it died), the rest left out and counted; never another exception."""
    import struct
    import warnings

    from hotspan.formats._base import TraceFileWarning

    flight, born, died = flight_with_life.flight, flight_with_life.born, flight_with_life.died
    h = _header(flight)
    used = _used_blocks(flight)
    where = data.draw(
        st.sampled_from(["records", "records", "records", "header", "slots", "anywhere"]),
        label="where",
    )
    if where == "records":  # a record written and not drained, or a block's counts
        i = data.draw(st.sampled_from(used), label="block")
        head = struct.unpack_from("<Q", flight, _block_at(h, i) + h["off_b_head"])[0]
        written = h["off_b_recs"] + 32 * min(head, h["block_records"])
        at = _block_at(h, i) + data.draw(st.integers(0, written - 1), label="offset")
    elif where == "header":
        at = data.draw(st.integers(0, h["header_bytes"] - 1), label="offset")
    elif where == "slots":
        at = h["slots_off"] + data.draw(st.integers(0, 6 * h["slot_bytes"] - 1), label="offset")
    else:
        at = data.draw(st.integers(0, len(flight) - 1), label="offset")
    buf = bytearray(flight)
    buf[at] ^= data.draw(st.integers(1, 255), label="mask")
    path = tmp_path / "flipped.flight"
    path.write_bytes(bytes(buf))
    try:
        with warnings.catch_warnings():  # what was left out is said: a warning, not an error
            warnings.simplefilter("ignore", TraceFileWarning)
            table = recover(path)
    except FlightFileError:
        return
    # The file cannot say when its process died (a span may end after the drain's last
    # pass): its spans end no later than now, and start no earlier than the process did.
    now = time.time_ns()
    start = table.column("start_ns").to_pylist()
    end = table.column("end_ns").to_pylist()
    outside = [(s, e) for s, e in zip(start, end) if not born <= s <= e <= now]
    assert not outside, (
        f"byte {at} ({where}): {len(outside)} span(s) outside the life {born}..{died} "
        f"(recovered at {now}), first {outside[0]}"
    )
