"""hotspan.instrument("torch.distributed"): real ranks (gloo on loopback), real collectives,
each rank recording to a record() directory; the merged trace checked rank by rank."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip(
    "torch",
    reason="torch is not installed: pip install '.[dist-test]' (see pyproject.toml) to run the collective tests",
)
dist = pytest.importorskip("torch.distributed")
if not (dist.is_available() and dist.is_gloo_available()):
    pytest.skip("this torch build has no gloo backend", allow_module_level=True)

import hotspan  # noqa: E402

# Every rank runs this: known collectives with known sizes; it prints, as JSON, what it
# expects to find (name, bytes sent) in the order it issued them.
RANK_CODE = textwrap.dedent(
    """
    import json, os, sys, time, warnings
    warnings.simplefilter("ignore", FutureWarning)   # torch 2.13 deprecates *_tensor names
    import torch, torch.distributed as dist
    import hotspan

    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    originals = {n: getattr(dist, n) for n in ("all_reduce", "isend", "barrier")}
    hotspan.instrument("torch.distributed")
    hotspan.instrument("torch.distributed")          # a second call is a no-op
    assert dist.all_reduce.__wrapped__ is originals["all_reduce"]
    expected = []

    def expect(name, nbytes):
        expected.append([name, nbytes])

    with hotspan.record(out, flush_interval=0.2):
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)

        t = torch.ones(1000, dtype=torch.float32)                          # 4000 B
        dist.all_reduce(t)
        assert t[0].item() == world
        expect("all_reduce", 4000)

        gathered = [torch.empty(10, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(gathered, torch.full((10,), float(rank), dtype=torch.float64))   # 80 B
        assert [g[0].item() for g in gathered] == list(range(world))
        expect("all_gather", 80)

        flat = torch.empty(7 * world, dtype=torch.int32)
        dist.all_gather_into_tensor(flat, torch.full((7,), rank, dtype=torch.int32))     # 28 B
        expect("all_gather_into_tensor", 28)

        out_rs = torch.empty(5, dtype=torch.int64)
        dist.reduce_scatter(out_rs, [torch.ones(5, dtype=torch.int64) for _ in range(world)])  # 40 B each
        assert out_rs[0].item() == world
        expect("reduce_scatter", 40 * world)

        dist.reduce_scatter_tensor(torch.empty(3, dtype=torch.float32), torch.ones(3 * world, dtype=torch.float32))
        expect("reduce_scatter_tensor", 12 * world)

        b = torch.arange(16, dtype=torch.int32) if rank == 0 else torch.zeros(16, dtype=torch.int32)
        dist.broadcast(b, src=0)                                             # 64 B from rank 0
        assert b[5].item() == 5
        expect("broadcast", 64 if rank == 0 else 0)

        a2a_out = [torch.empty(2, dtype=torch.float32) for _ in range(world)]
        dist.all_to_all(a2a_out, [torch.full((2,), float(rank)) for _ in range(world)])
        expect("all_to_all", 8 * world)

        single = torch.empty(4 * world, dtype=torch.float64)
        dist.all_to_all_single(single, torch.ones(4 * world, dtype=torch.float64))
        expect("all_to_all_single", 32 * world)

        # a ring of blocking point-to-point: even ranks send first, odd ranks receive first
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        msg, got = torch.full((25,), rank, dtype=torch.int32), torch.empty(25, dtype=torch.int32)
        if rank % 2 == 0:
            dist.send(msg, dst=nxt); dist.recv(got, src=prv)
            expect("send", 100); expect("recv", 0)
        else:
            dist.recv(got, src=prv); dist.send(msg, dst=nxt)
            expect("recv", 0); expect("send", 100)
        assert got[0].item() == prv

        # async point-to-point, waited in issue order (not LIFO)
        r = dist.irecv(torch.empty(50, dtype=torch.int64), src=prv)
        s = dist.isend(torch.ones(50, dtype=torch.int64), dst=nxt)
        r.wait(); s.wait()
        expect("irecv", 0); expect("isend", 400)

        # async collective: the span ends at wait(), not when the call returns
        w = dist.all_reduce(torch.ones(64, dtype=torch.float64), async_op=True)
        time.sleep(0.15)
        w.wait()
        expect("all_reduce", 512)

        dist.barrier()
        expect("barrier", 0)
        dist.destroy_process_group()

    hotspan.uninstrument("torch.distributed")
    hotspan.uninstrument("torch.distributed")        # idempotent
    assert all(getattr(dist, n) is f for n, f in originals.items())
    print(json.dumps(expected))
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run_ranks(world: int, out) -> list[list]:
    port = _free_port()
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", HOTSPAN_OUT="")
    env.pop("RANK", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK_CODE, str(r), str(world), str(port), str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**env, "HOTSPAN_RANK": str(r)},
        )
        for r in range(world)
    ]
    expected = []
    for r, p in enumerate(procs):
        try:
            stdout, stderr = p.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        assert p.returncode == 0, f"rank {r} failed:\n{stderr[-3000:]}"
        expected.append(json.loads(stdout.strip().splitlines()[-1]))
    return expected


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_every_rank_records_each_collective_with_its_bytes(world, tmp_path):
    out = tmp_path / "run"
    expected = _run_ranks(world, out)
    table = hotspan.load(out)
    # the leaf of the category path: a handle issued while another is in flight opens its
    # span inside that one's (the core keeps the path of the moment a span opens)
    comms = [r for r in table.to_pylist() if r["category"].split("/")[-1].split(":")[0] == "comms"]
    for rank in range(world):
        mine = sorted((r for r in comms if r["rank"] == rank), key=lambda r: r["start_ns"])
        assert [[r["name"], r["arg"]] for r in mine] == expected[rank], f"rank {rank}"
        assert not any(r["error"] for r in mine)
        # the async all_reduce's span covers the 0.15 s before its wait()
        async_ar = [r for r in mine if r["name"] == "all_reduce" and r["arg"] == 512]
        assert async_ar[0]["duration_ns"] >= 150_000_000
        # collectives marked with their group; point-to-point calls, no collective, are not
        for r in mine:
            leaf = r["category"].split("/")[-1]
            p2p = r["name"] in ("send", "recv", "isend", "irecv")
            assert leaf == ("comms" if p2p else "comms:world"), r
        # spans of waited-out-of-order handles don't nest in each other
        by_name = {r["name"]: r for r in mine}
        assert by_name["isend"]["parent_id"] is None and by_name["irecv"]["parent_id"] is None
    # the merged trace: each collective on every rank
    names = {name for name, _ in expected[0]}
    for name in names:
        assert {r["rank"] for r in comms if r["name"] == name} == set(range(world)), name

    # bandwidth per collective
    st = hotspan.stats(table, by="name").to_pylist()
    ar = next(r for r in st if r["name"] == "all_reduce")
    assert ar["arg_sum"] == world * (4000 + 512) and ar["arg_per_s"] > 0


@pytest.fixture
def one_rank(fresh):
    """A one-rank gloo group in this process, instrumented."""
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1
    )
    hotspan.instrument("torch.distributed")
    yield
    hotspan.uninstrument("torch.distributed")
    dist.destroy_process_group()
    hotspan.drain()


def _comms(table):
    return [r for r in table.to_pylist() if r["category"].split("/")[-1].split(":")[0] == "comms"]


def test_handle_waited_on_another_thread_closes_at_the_next_call(one_rank):
    import threading

    w = dist.all_reduce(torch.ones(8), async_op=True)
    t = threading.Thread(target=w.wait)
    t.start()
    t.join()
    assert _comms(hotspan.drain()) == []  # still open: only its own thread can close it
    dist.barrier()  # the next instrumented call closes it first
    rs = _comms(hotspan.drain())
    assert [(r["name"], r["arg"], r["depth"]) for r in rs] == [
        ("all_reduce", 32, 0),
        ("barrier", 0, 0),
    ]


def test_handle_dropped_unwaited_does_not_stay_open(one_rank):
    w = dist.all_reduce(torch.ones(4, dtype=torch.float64), async_op=True)
    w.unwrap().wait()
    del w
    with hotspan.span("after"):
        pass
    rs = hotspan.drain().to_pylist()
    by = {r["name"]: r for r in rs}
    assert by["all_reduce"]["arg"] == 32 and by["after"]["parent_id"] is None


def test_is_completed_ends_the_span_and_torch_still_accepts_the_wrapped_ops(one_rank):
    w = dist.broadcast(torch.arange(3), src=0, async_op=True)
    while not w.is_completed():
        pass
    assert [(r["name"], r["arg"]) for r in _comms(hotspan.drain())] == [("broadcast", 24)]
    # torch validates op in [isend, irecv]: the recording stand-ins compare equal
    op = dist.P2POp(dist.isend, torch.ones(2), 0)
    assert op.op == dist.distributed_c10d.isend


def test_a_failing_collective_records_an_error_span(one_rank):
    with pytest.raises(Exception):
        dist.broadcast(torch.ones(2), src=5)  # no rank 5 in a one-rank group
    rs = _comms(hotspan.drain())
    assert [(r["name"], r["error"]) for r in rs] == [("broadcast", True)]


def test_bad_arguments_get_torchs_own_error_not_ours(one_rank):
    with pytest.raises(Exception) as info:
        dist.all_reduce("not a tensor")
    assert "hotspan" not in str(info.value) and "nbytes" not in str(info.value)
    rs = _comms(hotspan.drain())
    assert [(r["name"], r["arg"], r["error"]) for r in rs] == [("all_reduce", None, True)]


def test_each_collective_is_marked_with_its_process_group(one_rank):
    pair = dist.new_group([0])
    named = dist.new_group([0], group_desc="tp")
    dist.all_reduce(torch.ones(2))
    dist.all_reduce(torch.ones(2), group=pair)
    dist.barrier(named)
    dist.broadcast(torch.ones(1), src=0, group=dist.group.WORLD, async_op=True).wait()
    rows = [(r["name"], r["category"]) for r in _comms(hotspan.drain())]
    pair_name = dist.distributed_c10d._get_process_group_name(pair)
    named_name = dist.distributed_c10d._get_process_group_name(named)
    assert rows == [
        ("all_reduce", "comms:world"),
        ("all_reduce", f"comms:{pair_name}"),
        ("barrier", f"comms:tp.{named_name}"),
        ("broadcast", "comms:world"),
    ]
