"""Many ranks, many collectors: a list of collectors picked by rank with failover, several
collectors writing one dataset, exact accounting, and the clock offset measured again."""

from __future__ import annotations

import os
import signal
import sys
import time

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats.dataset import part_metadata
from hotspan.recording._collector import CollectorClient, CollectorServer, parse_urls

from _procs import check_tree, finish, kill, spans_per_rank, start_collector, start_rank, stop


def _rank_counts(table: pa.Table) -> dict[int, int]:
    ranks, counts = pc.value_counts(table.column("rank")).flatten()
    return dict(zip(ranks.to_pylist(), counts.to_pylist()))


def _spans(rank: int, n: int) -> pa.Table:
    """n real spans of ``rank``, drained (ids unique across calls, as a recorder's are)."""
    hotspan.drain()
    hotspan.configure(rank=rank)
    s = hotspan.span("x", "c")
    for _ in range(n):
        with s:
            pass
    return hotspan.drain()


def test_parse_urls():
    assert parse_urls("grpc://a:1, grpc://b:2") == ["grpc://a:1", "grpc://b:2"]
    assert parse_urls(["grpc://a:1"]) == ["grpc://a:1"]
    for bad in ("grpc://a:1,", "grpc://a:1,,grpc://b:2", "grpc://a:1,http://b:2", ""):
        with pytest.raises(ValueError):
            parse_urls(bad)
    with pytest.raises(ValueError, match="unknown destination|expected grpc"):
        hotspan.record("grpc://a:1,b")


def test_a_client_picks_its_collector_by_rank_and_fails_over(tmp_path):
    a = CollectorServer(tmp_path, "grpc://127.0.0.1:0")
    b = CollectorServer(tmp_path, "grpc://127.0.0.1:0")
    try:
        client = CollectorClient([a.url, b.url], timeout=2, backoff=(0.01, 0.05))
        client.send(_spans(3, 100))  # rank 3 of 2 collectors: the second one
        assert client.pump() and client.url == b.url and (a.spans, b.spans) == (0, 100)
        b.shutdown()
        client.send(_spans(3, 50))  # b is down: the same call fails over to a
        for _ in range(100):
            if client.pump():
                break
            time.sleep(client.wait_retry() + 0.01)
        assert client.url == a.url and client.failovers == 1 and a.spans == 50
        client.close()
        assert (client.sent_spans, client.dropped) == (150, 0)
    finally:
        a.shutdown()
        b.shutdown()
    table = hotspan.load(tmp_path)
    assert table.num_rows == 150 and pc.count_distinct(table.column("span_id")).as_py() == 150


def test_the_clock_offset_is_measured_again_and_kept_per_part(tmp_path):
    # compact_on_done=False: the parts as each put wrote them (a client's close compacts them)
    with CollectorServer(tmp_path, "grpc://127.0.0.1:0", compact_on_done=False) as server:
        client = CollectorClient(server.url, clock_interval=0.2)
        for _ in range(4):
            client.send(_spans(0, 10))
            time.sleep(0.25)
        client.close()
    assert client.clock_measurements >= 4  # at connect, then before each later put
    parts = sorted(tmp_path.glob("part-r0-*.parquet"))
    metas = [part_metadata(p) for p in parts]
    assert len(metas) == 4
    measured = [m["clock_measured_ns"] for m in metas]
    assert len(set(measured)) == 4 and measured == sorted(measured)
    for m in metas:  # each part says which offset its times were shifted by, and its bounds
        assert {"offset_ns", "offset_uncertainty_ns", "offset_applied_ns", "rtt_ns"} <= m.keys()
        assert m["offset_applied_ns"] in (0, m["offset_ns"])


@pytest.mark.slow
def test_eight_ranks_into_two_collectors_of_one_dataset_exactly(tmp_path):
    """Every rank's spans recorded = spans in the dataset, each rank once, part names apart;
    the ranks spread over the collectors by rank."""
    out = tmp_path / "run"
    (ca, pa_), (cb, pb) = start_collector(out), start_collector(out)
    ranks = []
    try:
        dest = f"grpc://127.0.0.1:{pa_},grpc://127.0.0.1:{pb}"
        ranks = [
            start_rank(r, dest, HOTSPAN_FLUSH_INTERVAL="0.1", T_PAUSE="0.003", T_STEPS="1000")
            for r in range(8)
        ]
        for proc in ranks:
            code, _out, err = finish(proc, timeout=120)
            assert code == 0 and "Traceback" not in err and "dropped" not in err, err
        summaries = [stop(c, signal.SIGINT)[1] for c in (ca, cb)]
    finally:
        kill(ca, cb, *ranks)
    each = spans_per_rank(steps=1000)
    assert f"{4 * each:,} spans from 4 rank(s)" in summaries[0], summaries
    assert f"{4 * each:,} spans from 4 rank(s)" in summaries[1], summaries
    assert all("kept once" not in s for s in summaries)
    table = hotspan.load(out)
    assert _rank_counts(table) == {r: each for r in range(8)}
    check_tree(table)  # ids unique across the merged trace: no batch twice
    for r in range(8):
        names = [p.name for p in out.glob(f"part-r{r}-*.parquet")]
        assert len({n.split("-")[2] for n in names}) == 1  # one writer token per rank
        assert all(part_metadata(out / n)["rank"] == r for n in names)


@pytest.mark.slow
def test_a_killed_collectors_ranks_fail_over_nothing_lost_or_twice(tmp_path):
    out = tmp_path / "run"
    (ca, pa_), (cb, pb) = start_collector(out), start_collector(out)
    ranks = []
    try:
        dest = f"grpc://127.0.0.1:{pa_},grpc://127.0.0.1:{pb}"
        # Ranks 0 and 2 start on collector a, 1 on b; each records for a few seconds.
        ranks = [
            start_rank(r, dest, HOTSPAN_FLUSH_INTERVAL="0.05", T_PAUSE="0.01", T_STEPS="600")
            for r in range(3)
        ]
        deadline = time.monotonic() + 60

        def started() -> bool:  # both ranks of a have parts there: each is recording (6 s)
            return all(list(out.glob(f"part-r{r}-*.parquet")) for r in (0, 2))

        while not started() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started(), "ranks 0 and 2 never reached collector a"
        before = {r: _puts(out, r) for r in (0, 2)}
        ca.kill()  # mid-run, whatever it was doing
        ca.wait(timeout=30)
        errs = []
        for proc in ranks:
            code, _out, err = finish(proc, timeout=120)
            assert code == 0 and "dropped" not in err, err
            errs.append(err)
        code, summary, err = stop(cb, signal.SIGINT)
        assert code == 0, err
    finally:
        kill(ca, cb, *ranks)
    each = spans_per_rank(steps=600)
    table = hotspan.load(out)
    assert _rank_counts(table) == {r: each for r in range(3)}
    check_tree(table)
    # The ranks of a went on to b: b wrote parts of ranks 0 and 2 after a died.
    assert "from 3 rank(s)" in summary, summary
    # Each rank of a reported losing it (a CollectorLost event), and nothing else went wrong.
    assert f"lost the collector at grpc://127.0.0.1:{pa_}" in errs[0] and f":{pb}" not in errs[0]
    assert "lost the collector" not in errs[1]
    for r in (0, 2):
        assert _puts(out, r) > before[r]


def _puts(directory, rank: int) -> int:
    """The parts of ``rank`` written to ``directory`` by puts: a part compacted when its client
    closed counts its inputs."""
    return sum(
        len(part_metadata(p).get("inputs") or ()) or 1
        for p in directory.glob(f"part-r{rank}-*.parquet")
    )


CLIENT_ONLY = """
import sys, hotspan
s = hotspan.span("x", "c")
with hotspan.record(sys.argv[1], flush_interval=0.05) as rec:
    for _ in range(20):
        for _ in range(1000):
            with s:
                pass
        rec.flush()
print(rec.spans, "pandas" in sys.modules, "pyarrow.parquet" in sys.modules)
"""


@pytest.mark.slow
def test_a_streaming_client_stays_light(tmp_path):
    """A rank streaming to a collector never imports pandas or pyarrow.parquet: seconds of
    bytecode holding the GIL, taken from the program's threads while they record."""
    import subprocess

    from _procs import env

    with CollectorServer(tmp_path, "grpc://127.0.0.1:0") as server:
        out = subprocess.run(
            [sys.executable, "-c", CLIENT_ONLY, server.url],
            env=env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["20000", "False", "False"]


@pytest.mark.skipif(
    not hasattr(os, "setpriority") or not sys.platform.startswith("linux"),
    reason="per-thread nice values are Linux's",
)
def test_the_sender_runs_below_the_program_and_the_flusher_does_not(tmp_path):
    import threading

    from hotspan.recording._sinks import SENDER_NICE

    base = os.getpriority(os.PRIO_PROCESS, 0)
    s = hotspan.span("x", "c")
    with CollectorServer(tmp_path, "grpc://127.0.0.1:0") as server:
        with hotspan.record(server.url, flush_interval=0.05) as rec:
            for _ in range(1000):
                with s:
                    pass
            rec.flush()
            deadline = time.monotonic() + 30
            while rec.spans < 1000 and time.monotonic() < deadline:
                time.sleep(0.01)
            (sender,) = [t for t in threading.enumerate() if t.name == "hotspan-send"]
            assert os.getpriority(os.PRIO_PROCESS, sender.native_id) == min(19, base + SENDER_NICE)
            # The drain keeps the program's priority (it frees the core's memory on time).
            assert os.getpriority(os.PRIO_PROCESS, rec._thread.native_id) == base
            assert os.getpriority(os.PRIO_PROCESS, 0) == base  # the program's thread is untouched
    assert rec.spans == 1000 and rec.dropped == 0
