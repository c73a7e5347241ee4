"""The collector: real rank processes streaming over loopback to a `hotspan collect` process,
and hostile or broken clients that must not harm it."""

from __future__ import annotations

import itertools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import pyarrow.flight as flight  # noqa: E402  (in every pyarrow wheel)

import hotspan  # noqa: E402
from hotspan.recording._collector import CollectorClient, CollectorServer, parse_url  # noqa: E402
from hotspan.formats.dataset import META_RANKS  # noqa: E402

from _procs import (  # noqa: E402
    DEADLINE_S,
    check_tree,
    env,
    finish,
    kill,
    read_line,
    spans_per_rank,
    start_collector,
    start_rank,
    stop,
)


def _rank_counts(table: pa.Table) -> dict[int, int]:
    ranks, counts = pc.value_counts(table.column("rank")).flatten()
    return dict(zip(ranks.to_pylist(), counts.to_pylist()))


_NEXT_ID = itertools.count(1)


def _span_table(rank: int, n: int = 10) -> pa.Table:
    """A small drained-like table of ``rank`` (built from real spans). Ids never repeat
    across tables, as the recorder's do: load() refuses a trace with an id twice."""
    from hotspan._schema import SPAN_SCHEMA

    first = next(_NEXT_ID)
    for _ in range(n - 1):
        next(_NEXT_ID)
    t = SPAN_SCHEMA.empty_table()
    starts = pa.array(range(1_000, 1_000 + n), pa.int64())
    cols = {
        "span_id": pa.array(range(first, first + n), pa.uint64()),
        "parent_id": pa.nulls(n, pa.uint64()),
        "name": pa.array(["x"] * n).dictionary_encode(),
        "category": pa.nulls(n, pa.string()).dictionary_encode(),
        "start_ns": starts,
        "end_ns": pc.add(starts, 7),
        "duration_ns": pa.array([7] * n, pa.int64()),
        "depth": pa.array([0] * n, pa.int32()),
        "thread_id": pa.array([1] * n, pa.int64()),
        "thread_name": pa.array(["t"] * n).dictionary_encode(),
        "pid": pa.array([os.getpid()] * n, pa.int64()),
        "rank": pa.array([rank] * n, pa.int32()),
        "arg": pa.nulls(n, pa.int64()),
        "error": pa.array([False] * n),
        "self_ns": pa.array([7] * n, pa.int64()),
        "wait_ns": pa.array([0] * n, pa.int64()),
    }
    return pa.Table.from_arrays([cols[f.name].cast(f.type) for f in t.schema], schema=t.schema)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_four_ranks_into_a_collector(tmp_path):
    out = tmp_path / "run"
    collector, port = start_collector(out)
    ranks = []
    try:
        ranks = [
            start_rank(r, f"grpc://127.0.0.1:{port}", HOTSPAN_FLUSH_INTERVAL="0.1", T_PAUSE="0.002")
            for r in range(4)
        ]
        for proc in ranks:
            code, _out, err = finish(proc)
            assert code == 0 and "Traceback" not in err and "dropped" not in err, err
        code, stdout, err = stop(collector, signal.SIGINT)
        assert code == 0, err
        assert f"{4 * spans_per_rank():,} spans from 4 rank(s)" in stdout
    finally:
        kill(collector, *ranks)
    import hotspan.schema

    table = hotspan.load(out)
    assert table.schema.equals(hotspan.schema.SPAN_SCHEMA)
    assert _rank_counts(table) == {r: spans_per_rank() for r in range(4)}
    check_tree(table)
    per_rank = json.loads(table.schema.metadata[META_RANKS])
    for procs in per_rank.values():
        (proc,) = procs
        # Loopback: the offset is within its (small) uncertainty, so it is measured but not applied.
        assert 0 < proc["offset_uncertainty_ns"] < 1_000_000_000
        assert abs(proc["offset_ns"]) <= proc["offset_uncertainty_ns"] + 5_000_000
        assert proc["offset_applied_ns"] in (0, proc["offset_ns"])


@pytest.mark.slow
def test_random_bytes_and_broken_clients_do_no_harm(tmp_path):
    out = tmp_path / "run"
    collector, port = start_collector(out)
    rank = None
    try:
        rank = start_rank(
            1,
            f"grpc://127.0.0.1:{port}",
            HOTSPAN_FLUSH_INTERVAL="0.05",
            T_PAUSE="0.005",
            T_STEPS="60",
        )
        rng = __import__("random").Random(5)
        for i in range(20):  # garbage, an HTTP/2 preface then garbage, half-open connections
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                if i % 3 == 1:
                    s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
                s.sendall(rng.randbytes(rng.randrange(1, 1 << 14)))
                if i % 3 == 2:
                    s.shutdown(socket.SHUT_WR)
        # Well-formed Flight calls carrying bad content: refused, nothing written.
        client = flight.FlightClient(f"grpc://127.0.0.1:{port}")
        bad = [
            (b"not json", _span_table(7)),
            (json.dumps({"rank": 7, "pid": 1, "seq": "../../x"}).encode(), _span_table(7)),
            (json.dumps({"rank": 7, "pid": 1, "seq": 0}).encode(), pa.table({"a": [1, 2]})),
            (
                json.dumps({"rank": 8, "pid": 1, "seq": 0}).encode(),
                _span_table(7),
            ),  # rows of another rank
        ]
        for command, table in bad:
            writer, _ = client.do_put(flight.FlightDescriptor.for_command(command), table.schema)
            with pytest.raises(flight.FlightError):
                writer.write_table(table)
                writer.close()
        with pytest.raises(flight.FlightError):
            list(client.do_action(flight.Action("nope", b"")))
        client.close()
        code, _out, err = finish(rank)
        assert code == 0, err
        code, stdout, err = stop(collector, signal.SIGTERM)
        assert code == 0, err
        assert "4 put(s) refused" in stdout
    finally:
        kill(collector, *([rank] if rank else []))
    table = hotspan.load(out)
    assert _rank_counts(table) == {1: spans_per_rank(steps=60)}
    assert not list(out.glob("part-r7-*")) and not list(out.glob("part-r8-*"))


@pytest.mark.slow
def test_a_collector_restarted_mid_run_loses_nothing(tmp_path):
    out = tmp_path / "run"
    port = _free_port()
    collector, _ = start_collector(out, port=port)
    rank = None
    try:
        rank = start_rank(
            2,
            f"grpc://127.0.0.1:{port}",
            HOTSPAN_FLUSH_INTERVAL="0.05",
            T_LOOP="1",
            T_STEPS="20",
            T_PAUSE="0.002",
        )
        deadline = time.monotonic() + DEADLINE_S
        while not list(out.glob("part-r2-*.parquet")):
            assert time.monotonic() < deadline and rank.poll() is None
            time.sleep(0.05)
        collector.kill()  # the hard way: mid-put, maybe
        collector.wait(timeout=DEADLINE_S)
        recorded = int(read_line(rank, r"recorded (\d+)").group(1))
        time.sleep(0.5)  # the rank goes on, buffering and retrying
        collector, _ = start_collector(out, port=port)
        deadline = time.monotonic() + DEADLINE_S
        last = recorded
        while last < recorded + 2 * spans_per_rank(steps=20):
            assert time.monotonic() < deadline
            last = int(read_line(rank, r"recorded (\d+)").group(1))
        # Flush at SIGTERM, then die of it: every span recorded before the signal arrives
        # (the program runs on meanwhile, unrecorded: what it prints after is not counted).
        rank.send_signal(signal.SIGTERM)
        code, _out, err = finish(rank)
        assert code == -signal.SIGTERM, err
        code, _stdout, err = stop(collector, signal.SIGINT)
        assert code == 0, err
    finally:
        kill(collector, *([rank] if rank else []))
    table = hotspan.load(out)
    # Every span the rank recorded arrived once: resent batches replace their own part.
    assert table.num_rows >= max(last, recorded)
    assert table.num_rows == pc.count_distinct(table.column("span_id")).as_py()
    check_tree(table)


@pytest.mark.slow
def test_a_wrong_token_is_refused(tmp_path):
    out = tmp_path / "run"
    collector, port = start_collector(out, token="s3cret")
    procs = []
    try:
        url = f"grpc://127.0.0.1:{port}"
        procs = [
            start_rank(0, url, HOTSPAN_TOKEN="wrong", HOTSPAN_FLUSH_INTERVAL="0.1"),
            start_rank(1, url, HOTSPAN_FLUSH_INTERVAL="0.1"),  # no token at all
            start_rank(2, url, HOTSPAN_TOKEN="s3cret", HOTSPAN_FLUSH_INTERVAL="0.1"),
        ]
        results = [finish(p) for p in procs]
        code, _out, err = stop(collector)
        assert code == 0, err
    finally:
        kill(collector, *procs)
    for code, _out, err in results[:2]:
        assert (
            code == 0 and "refused the token" in err and "300 spans could not be delivered" in err
        )
    assert results[2][0] == 0 and "refused" not in results[2][2]
    assert _rank_counts(hotspan.load(out)) == {2: spans_per_rank()}


# --------------------------------------------------------------------------- in this process


def test_clock_offset_is_applied_and_kept(tmp_path):
    server = CollectorServer(tmp_path, "grpc://127.0.0.1:0")
    try:
        client = flight.FlightClient(server.url)
        table = _span_table(5)
        command = json.dumps(
            {
                "rank": 5,
                "pid": 42,
                "seq": 3,
                "offset_ns": 5_000_000,
                "offset_uncertainty_ns": 20_000,
                "rtt_ns": 40_000,
            }
        ).encode()
        writer, _ = client.do_put(flight.FlightDescriptor.for_command(command), table.schema)
        writer.write_table(table)
        writer.close()
        client.close()
    finally:
        server.shutdown()
    loaded = hotspan.load(tmp_path)
    assert loaded.column("start_ns").to_pylist() == [
        s + 5_000_000 for s in table.column("start_ns").to_pylist()
    ]
    assert loaded.column("duration_ns").equals(table.column("duration_ns"))
    (proc,) = json.loads(loaded.schema.metadata[META_RANKS])["5"]
    assert (proc["offset_ns"], proc["offset_applied_ns"], proc["offset_uncertainty_ns"]) == (
        5_000_000,
        5_000_000,
        20_000,
    )
    # An older client (no batch token): the part is named from its content's digest.
    assert len(list(tmp_path.glob("part-r5-42-*-000003.parquet"))) == 1


def test_client_buffers_up_to_a_cap_then_drops_and_counts(tmp_path):
    port = _free_port()  # nobody listens here yet
    client = CollectorClient(
        f"grpc://127.0.0.1:{port}", buffer_spans=25, timeout=2, backoff=(0.01, 0.05)
    )
    for _ in range(4):
        client.send(_span_table(0, 10))
    assert client.queued_spans == 20 and client.dropped == 20 and client.failures >= 1
    server = CollectorServer(tmp_path, f"grpc://127.0.0.1:{port}")
    try:
        client.close(timeout=10)
    finally:
        server.shutdown()
    assert client.sent_spans == 20 and client.queued_spans == 0
    assert hotspan.load(tmp_path).num_rows == 20
    (proc,) = json.loads(hotspan.load(tmp_path).schema.metadata[META_RANKS])["0"]
    assert proc["sink_dropped"] == 20


def test_token_middleware_in_process(tmp_path):
    server = CollectorServer(tmp_path, "grpc://127.0.0.1:0", token="tok")
    try:
        for token, ok in (("tok", True), ("tok2", False), (None, False)):
            client = CollectorClient(server.url, token=token, timeout=5)
            client.send(_span_table(0, 3))
            assert (client.sent_spans == 3) is ok and client.refused is (not ok)
            client.close(timeout=0)
    finally:
        server.shutdown()


def test_parse_url():
    assert parse_url("grpc://127.0.0.1:8815") == ("127.0.0.1", 8815)
    assert parse_url(":9000") == ("127.0.0.1", 9000)
    assert parse_url("localhost:1") == ("localhost", 1)
    for bad in ("http://h:1", "grpc://h", "grpc://h:99999", "grpc://h:1/path"):
        with pytest.raises(ValueError):
            parse_url(bad)


def test_collect_cli_errors_and_help(tmp_path):
    from hotspan.cli import main

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "hotspan",
                "collect",
                "--listen",
                f"grpc://127.0.0.1:{busy.getsockname()[1]}",
                "--out",
                str(tmp_path / "o"),
            ],
            env=env(),
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().count("\n") == 0 and "cannot listen" in result.stderr
    assert main(["collect", "--listen", "http://x:1", "--out", str(tmp_path)]) == 2
    (tmp_path / "f").write_text("")
    assert main(["collect", "--out", str(tmp_path / "f")]) == 2
    assert main(["collect", "--help"]) == 0
    assert main(["collect", "--nice", "20", "--out", str(tmp_path / "o")]) == 2
    assert main(["collect", "--nice", "-1", "--out", str(tmp_path / "o")]) == 2


def _thread_nice_values(pid: int) -> set[int]:
    values = set()
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        text = stat.read_text()
        values.add(int(text[text.rindex(")") + 2 :].split()[16]))  # field 19 of proc(5): nice
    return values


@pytest.mark.slow
@pytest.mark.skipif(
    not Path("/proc/self/task").is_dir(), reason="reads thread priorities from /proc"
)
def test_collect_nice_lowers_every_thread_and_still_collects(tmp_path):
    # --nice on a host shared with ranks: the collector's threads (gRPC's and Arrow's
    # included, started after it) all run that much lower, and spans still arrive.
    base = os.getpriority(os.PRIO_PROCESS, 0)
    collector, port = start_collector(tmp_path / "run", nice=7)
    rank = start_rank(0, f"grpc://127.0.0.1:{port}")
    try:
        code, _out, err = finish(rank)
        assert code == 0, err
        assert _thread_nice_values(collector.pid) == {min(base + 7, 19)}
        code, _out, err = stop(collector)
        assert code == 0, err
    finally:
        kill(collector, rank)
    assert hotspan.load(tmp_path / "run").num_rows == spans_per_rank()


# --------------------------------------------------------------------------- never loses what it acknowledged


def _put(url: str, table: pa.Table, **info) -> None:
    client = flight.FlightClient(url)
    try:
        writer, _ = client.do_put(
            flight.FlightDescriptor.for_command(json.dumps(info).encode()), table.schema
        )
        writer.write_table(table)
        writer.close()
    finally:
        client.close()


def test_a_resent_batch_is_kept_once_and_another_never_replaces_it(tmp_path):
    server = CollectorServer(tmp_path, "grpc://127.0.0.1:0")
    try:
        hundred = _span_table(1, n=100)
        _put(server.url, hundred, rank=1, pid=7, batch="ab12", seq=0)
        _put(
            server.url, hundred, rank=1, pid=7, batch="ab12", seq=0
        )  # a retry: same name, same content
        _put(
            server.url, _span_table(1, n=3), rank=1, pid=7, batch="ab12", seq=0
        )  # another batch, same name
        older = _span_table(1, n=100)  # its own spans (load() refuses an id twice)
        _put(server.url, older, rank=1, pid=7, seq=0)  # an older client, no token
        _put(server.url, older, rank=1, pid=7, seq=0)  # ... resending
        spans, parts, duplicates = server.spans, server.parts, server.duplicates
    finally:
        server.shutdown()
    assert (spans, parts, duplicates) == (203, 3, 2)  # the summary counts what is on disk
    table = hotspan.load(tmp_path)
    assert table.num_rows == 203  # the 100 acknowledged rows are all there
    assert len(list(tmp_path.glob("part-r1-7-*-000000.parquet"))) == 3


def test_a_restarted_client_whose_pid_repeats_keeps_its_earlier_parts(tmp_path):
    server = CollectorServer(tmp_path, "grpc://127.0.0.1:0")
    try:
        for n in (4, 6):  # two lives of one rank, the same pid (a container), seq from 0 each time
            client = CollectorClient(server.url)
            client.send(_span_table(2, n=n))
            client.close()
            assert client.sent_spans == n and client.dropped == 0
    finally:
        server.shutdown()
    assert hotspan.load(tmp_path).num_rows == 10
    assert len(list(tmp_path.glob(f"part-r2-{os.getpid()}-*-000000.parquet"))) == 2


def test_a_collector_sweeps_what_a_killed_one_left(tmp_path):
    (tmp_path / "rank=0").mkdir()
    torn = tmp_path / "rank=0" / ".part-123-6b0d0000aaaa0000-000004.parquet.1a2b3c4d.part"
    torn.write_bytes(b"PAR1 torn")
    old = time.time() - 3600
    os.utime(torn, (old, old))
    # Another collector writing into the same dataset right now, for a rank whose pid means
    # nothing on this host: its temporary part stays.
    inflight = tmp_path / "rank=0" / ".part-123-6b0d0000bbbb0000-000001.parquet.0a0b0c0d.part"
    inflight.write_bytes(b"PAR1 being written")
    keep = tmp_path / "rank=0" / "notes.txt"
    keep.write_text("mine")
    server = CollectorServer(tmp_path, "grpc://127.0.0.1:0")
    server.shutdown()
    assert server.swept == 1 and not torn.exists() and keep.exists() and inflight.exists()


def _vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.mark.slow
@pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="reads the collector's peak memory in /proc"
)
def test_a_client_sending_too_much_is_refused_at_once_and_harms_no_one(tmp_path):
    out = tmp_path / "run"
    port = _free_port()
    collector = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hotspan",
            "collect",
            "--listen",
            f"grpc://127.0.0.1:{port}",
            "--out",
            str(out),
            "--max-put-mb",
            "16",
        ],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read_line(collector, "listening")
        url = f"grpc://127.0.0.1:{port}"
        _put(
            url, _span_table(0, n=10), rank=0, pid=1, batch="a", seq=0
        )  # warm: the baseline includes a put
        before = _vm_hwm_kb(collector.pid)
        # 64 K rows a chunk (about 5 MB of Arrow data), up to 2 GB in all: the collector must
        # stop it after about 16 MB, not buffer it.
        chunk = _span_table(3, n=1 << 16).combine_chunks().to_batches()[0]
        client = flight.FlightClient(url)
        writer, _ = client.do_put(
            flight.FlightDescriptor.for_command(
                json.dumps({"rank": 3, "pid": 9, "batch": "b", "seq": 0}).encode()
            ),
            chunk.schema,
        )
        sent = 0
        with pytest.raises(flight.FlightError, match="bytes in one put"):
            for _ in range(400):
                writer.write_batch(chunk)
                sent += chunk.nbytes
            writer.close()
        client.close()
        grown_mb = (_vm_hwm_kb(collector.pid) - before) / 1024
        assert sent < 400 * chunk.nbytes  # refused while sending, not at the end
        assert grown_mb < 150, f"the collector grew by {grown_mb:.0f} MB"
        _put(url, _span_table(1, n=50), rank=1, pid=2, batch="c", seq=0)  # another rank: unharmed
        code, stdout, err = stop(collector, signal.SIGINT)
        assert code == 0, err
        assert "1 put(s) refused" in stdout
    finally:
        kill(collector)
    assert _rank_counts(hotspan.load(out)) == {0: 10, 1: 50}


def _big_span_table(n: int) -> pa.Table:
    """``n`` spans of rank 0 built from numpy columns (16 M rows in a few seconds)."""
    import numpy as np

    from hotspan._schema import SPAN_SCHEMA

    zeros = np.zeros(n, np.int64)
    codes = pa.array(np.zeros(n, np.int32))
    cols = {
        "span_id": pa.array(np.arange(1, n + 1, dtype=np.uint64)),
        "parent_id": pa.nulls(n, pa.uint64()),
        "name": pa.DictionaryArray.from_arrays(codes, pa.array(["x"])),
        "category": pa.DictionaryArray.from_arrays(codes, pa.array(["c"])),
        "start_ns": pa.array(zeros),
        "end_ns": pa.array(zeros + 7),
        "duration_ns": pa.array(zeros + 7),
        "self_ns": pa.array(zeros + 7),
        "wait_ns": pa.array(zeros),
        "depth": pa.array(np.zeros(n, np.int32)),
        "thread_id": pa.array(zeros + 1),
        "thread_name": pa.DictionaryArray.from_arrays(codes, pa.array(["t"])),
        "pid": pa.array(zeros + 1),
        "rank": pa.array(np.zeros(n, np.int32)),
        "arg": pa.nulls(n, pa.int64()),
        "error": pa.array(np.zeros(n, bool)),
    }
    return pa.Table.from_arrays([cols[f.name] for f in SPAN_SCHEMA], schema=SPAN_SCHEMA)


@pytest.mark.slow
@pytest.mark.skipif(
    not Path("/proc/self/status").exists(), reason="reads the collector's peak memory in /proc"
)
def test_a_16m_row_put_is_refused_from_its_announcement_and_the_collector_stays_small(tmp_path):
    out = tmp_path / "run"
    port = _free_port()
    collector = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hotspan",
            "collect",
            "--listen",
            f"grpc://127.0.0.1:{port}",
            "--out",
            str(out),
        ],
        env=env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        read_line(collector, "listening")
        url = f"grpc://127.0.0.1:{port}"
        table = _big_span_table(1 << 24)  # about 1.4 GB of Arrow data, as one message
        client = flight.FlightClient(url)
        command = {
            "rank": 0,
            "pid": 9,
            "batch": "b",
            "seq": 0,
            "rows": table.num_rows,
            "bytes": table.nbytes,
        }
        writer, _ = client.do_put(
            flight.FlightDescriptor.for_command(json.dumps(command).encode()), table.schema
        )
        with pytest.raises(
            flight.FlightServerError, match=r"bytes announced, more than 268,435,456 in one put"
        ):
            writer.write_table(table, max_chunksize=table.num_rows)
            writer.close()
        client.close()
        peak_mb = _vm_hwm_kb(collector.pid) / 1024
        assert peak_mb < 1024, f"the collector peaked at {peak_mb:.0f} MB"
        code, stdout, err = stop(collector, signal.SIGINT)
        assert code == 0, err
        assert "1 put(s) refused" in stdout
    finally:
        kill(collector)


def test_a_client_that_sends_more_rows_than_it_announced_is_stopped_at_the_first_chunk(tmp_path):
    server = CollectorServer(tmp_path, "grpc://127.0.0.1:0")
    try:
        chunk = _span_table(3, n=1 << 10).combine_chunks().to_batches()[0]
        client = flight.FlightClient(server.url)
        command = {"rank": 3, "pid": 9, "batch": "b", "seq": 0, "rows": 10, "bytes": 100}
        writer, _ = client.do_put(
            flight.FlightDescriptor.for_command(json.dumps(command).encode()), chunk.schema
        )
        with pytest.raises(flight.FlightServerError, match="more rows than the 10 announced"):
            for _ in range(1000):
                writer.write_batch(chunk)
            writer.close()
        client.close()
        assert server.refused == 1
        for bad in ({"rows": -1}, {"rows": "many"}, {"bytes": 2**63}):
            with pytest.raises(flight.FlightServerError, match="bad descriptor"):
                _put(server.url, _span_table(3), rank=3, pid=9, batch="c", seq=1, **bad)
    finally:
        server.shutdown()
    assert not list(tmp_path.glob("part-r3-*.parquet"))


def test_a_client_sends_a_large_table_as_several_puts_each_announced(tmp_path):
    server = CollectorServer(tmp_path, "grpc://127.0.0.1:0", max_put_rows=4)
    try:
        client = CollectorClient(server.url)
        client.put_rows = 4
        client.send(_span_table(2, n=10))  # 4 + 4 + 2 rows: each within the server's limit of 4
        client.close()
        assert client.sent_spans == 10 and client.sent_parts == 3 and client.dropped == 0
    finally:
        server.shutdown()
    assert server.refused == 0
    assert _rank_counts(hotspan.load(tmp_path)) == {2: 10}
