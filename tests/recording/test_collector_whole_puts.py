"""The collector writes only whole puts, and one client's repeated span ids never make the
other clients' spans unloadable: real client processes over loopback, one killed mid-put
(SIGKILL), one that sends the same span ids twice."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats.dataset import list_parts, location
from hotspan.recording._collector import CollectorServer

from _procs import env, kill, read_line

#: A client that puts ``ROWS`` real spans but sends only the first half of the chunks, says
#: so, and waits to be killed: the put is cut short by the client's death, not by a close.
_HALF_A_PUT = """
import json, os, sys, time
import pyarrow.flight as flight
import hotspan
port, rows = int(sys.argv[1]), int(sys.argv[2])
span = hotspan.span("half")
for _ in range(rows):
    with span:
        pass
table = hotspan.drain()
assert table.num_rows == rows, table.num_rows
command = json.dumps({"v": 1, "rank": 0, "pid": os.getpid(), "host": "h", "batch": "abc123",
                      "seq": 0, "rows": rows, "bytes": table.nbytes}).encode()
client = flight.connect(f"grpc://127.0.0.1:{port}")
writer, _ = client.do_put(flight.FlightDescriptor.for_command(command), table.schema)
for batch in table.slice(0, rows // 2).to_batches(max_chunksize=rows // 10):
    writer.write_batch(batch)
print("half sent", flush=True)
time.sleep(120)
"""

#: A real client (``CollectorClient``, as ``hotspan.record("grpc://...")`` uses) of rank
#: ``argv[2]`` that sends 1000 real spans, then per ``argv[3]``: nothing more ("whole"), half
#: of them again as a new batch ("again"), or a batch holding one span twice ("twice").
_CLIENT = """
import sys
import pyarrow as pa
import hotspan
from hotspan.recording._collector import CollectorClient
port, rank, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
hotspan.configure(rank=rank)
for _ in range(1000):
    with hotspan.span("step"):
        pass
table = hotspan.drain()
client = CollectorClient(f"grpc://127.0.0.1:{port}")
client.send(table)
if mode == "again":
    client.send(table.slice(500))
elif mode == "twice":
    with hotspan.span("late"):
        pass
    late = hotspan.drain()
    client.send(pa.concat_tables([late, late]))
client.close()
print("sent", client.sent_spans, "dropped", client.dropped, client.last_error, flush=True)
"""


def _client(code: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # one job: its clients share a run id, as ranks started by one launcher do
        env=env(HOTSPAN_RUN_ID="whole-puts"),
    )


def _wait(condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _run_client(port: int, rank: int, mode: str = "whole") -> str:
    proc = _client(_CLIENT, port, rank, mode)
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        kill(proc)
    assert proc.returncode == 0, err
    return out


@pytest.mark.slow
def test_a_client_killed_mid_put_leaves_nothing_half_written(tmp_path):
    out, log = tmp_path / "run", io.StringIO()
    server = CollectorServer(out, "grpc://127.0.0.1:0", log=log, compact_on_done=False)
    try:
        assert "sent 1000 dropped 0" in _run_client(server.port, 1)  # another client's, whole
        before = server.parts
        proc = _client(_HALF_A_PUT, server.port, 200_000)
        try:
            read_line(proc, r"half sent")
            proc.kill()  # SIGKILL: the stream ends without a word from the client
            proc.wait(timeout=30)
        finally:
            kill(proc)
        # The server hears of the client's death (its stream ends): the put is refused.
        assert _wait(lambda: server.refused or server.parts > before), log.getvalue()
        assert server.parts == before and server.refused == 1, log.getvalue()
        # (how much of it arrived depends on what the client's socket had sent when it died)
        assert re.search(r"batch 0 cut short: [\d,]+ of 200,000 rows arrived", log.getvalue())
    finally:
        server.close()
    table = hotspan.load(out)
    assert table.num_rows == 1000 and set(table.column("rank").to_pylist()) == {1}
    assert len(list_parts(location(out))) == 1


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["again", "twice"])
def test_a_client_repeating_span_ids_never_makes_the_others_unloadable(tmp_path, mode):
    out, log = tmp_path / "run", io.StringIO()
    server = CollectorServer(out, "grpc://127.0.0.1:0", log=log, compact_on_done=False)
    try:
        assert "sent 1000 dropped 0" in _run_client(server.port, 1)  # a good client
        said = _run_client(server.port, 2, mode)  # one that repeats ids
        assert "sent 1000 dropped 0" in _run_client(server.port, 3)  # another good one
    finally:
        server.close()
    # The put that repeats ids is refused, in one line naming the client and an id; the
    # client counts its spans as dropped (never silently) ...
    refused = [line for line in log.getvalue().splitlines() if "refused" in line]
    assert len(refused) == 1 and "rank 2" in refused[0] and "span id" in refused[0], refused
    assert server.refused == 1
    assert ("dropped 500" if mode == "again" else "dropped 2") in said, said
    # ... and the directory loads: every other span of every client, each once.
    table = hotspan.load(out)
    ranks, counts = pc.value_counts(table.column("rank")).flatten()
    assert dict(zip(ranks.to_pylist(), counts.to_pylist())) == {1: 1000, 2: 1000, 3: 1000}
    assert pc.count_distinct(table.column("span_id")).as_py() == table.num_rows
    assert pa  # (pyarrow for the clients' tables)
