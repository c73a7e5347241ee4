"""span(..., device="cuda"): event pairs resolved into device rows at drain, never waiting.

The CUDA runtime is the one piece these machines lack: ``_fake_cuda.FakeGpu`` stands in for
it (torch.cuda.Event's interface over a device clock the test moves). Spans, the C core,
drain, record() and the id ranges are real. benchmarks/gpu_check.py runs the same code
against torch and a real GPU.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

import hotspan
from hotspan import _native
from hotspan.devices import cuda

from _fake_cuda import FakeGpu
from _util import rows

pytestmark = pytest.mark.usefixtures("fresh")

MS = 1_000_000


@pytest.fixture
def gpu():
    fake = FakeGpu()
    rec = cuda.install(fake)
    fake.recorder = rec
    yield fake
    cuda.uninstall()


def split(table):
    all_rows = rows(table)
    return [r for r in all_rows if r["thread_id"] >= 0], [r for r in all_rows if r["thread_id"] < 0]


def test_a_pair_is_resolved_only_once_its_end_event_completed(gpu):
    with hotspan.span("matmul", "gpu", device="cuda"):
        gpu.current.launch(3 * MS)  # the kernel the span launched
    host, device = split(hotspan.drain())
    assert [r["name"] for r in host] == ["matmul"] and device == []  # still running: not waited for
    assert gpu.device_syncs == [] and gpu.recorder.pending() == 1
    gpu.advance(2 * MS)
    assert split(hotspan.drain()) == ([], [])  # not yet either
    gpu.advance(1 * MS)
    host2, device = split(hotspan.drain())
    assert host2 == [] and len(device) == 1
    (d,) = device
    assert d["duration_ns"] == 3 * MS  # the kernel's time on the device, not the launch
    assert d["name"] == "matmul" and d["category"] == "gpu"
    assert d["parent_id"] == host[0]["span_id"] and d["depth"] == host[0]["depth"] + 1
    assert d["thread_name"] == "cuda:0 stream 7" and d["thread_id"] == -8
    assert (
        d["pid"] == host[0]["pid"]
        and d["rank"] == host[0]["rank"]
        and d["span_id"] != host[0]["span_id"]
    )
    assert gpu.recorder.pending() == 0


def test_pairs_wait_across_drains_in_stream_order(gpu):
    for n in (1, 2, 3):
        with hotspan.span(f"k{n}", "gpu", device="cuda"):
            gpu.current.launch(n * MS)
    hotspan.drain()
    gpu.advance(1 * MS)
    assert [r["name"] for r in split(hotspan.drain())[1]] == ["k1"]
    gpu.advance(2 * MS)
    assert [r["name"] for r in split(hotspan.drain())[1]] == ["k2"]
    gpu.advance(10 * MS)
    (k3,) = split(hotspan.drain())[1]
    assert k3["name"] == "k3" and k3["duration_ns"] == 3 * MS


def test_drain_wait_device_synchronizes_once_then_has_every_row(gpu):
    other = gpu.stream(1, 0)
    for _ in range(5):
        with hotspan.span("k", "gpu", device="cuda"):
            gpu.current.launch(MS)
    gpu.current = other
    with hotspan.span("k", "gpu", device="cuda"):
        other.launch(MS)
    table = hotspan.drain(wait_device=True)
    host, device = split(table)
    assert len(host) == 6 and len(device) == 6
    assert sorted(gpu.device_syncs) == [0, 1]  # once per device with pairs, not per pair
    assert {r["thread_name"] for r in device} == {"cuda:0 stream 7", "cuda:1 stream 0"}
    assert hotspan.drain(wait_device=True).num_rows == 0 and sorted(gpu.device_syncs) == [0, 1]


def test_device_rows_are_on_the_host_clock_through_the_calibration(gpu):
    _native._set_fake_clock(1_800_000_000_000_000_000, 1000)
    gpu.advance(7 * MS)  # idle device time before the first span: must not shift anything
    with hotspan.span("outer", "train"):
        with hotspan.span("mm", "gpu", device="cuda"):
            gpu.current.launch(4 * MS)
    cal_event, cal_host = gpu.recorder.calibration(0)
    assert gpu.event_syncs == 1  # the calibration event, on its own stream: one round trip
    host, device = split(hotspan.drain(wait_device=True))
    (d,) = device
    start_event, end_event = [e for e in gpu.events if e is not cal_event][:2]
    assert d["start_ns"] == cal_host + (start_event.time - cal_event.time)
    assert d["end_ns"] == cal_host + (end_event.time - cal_event.time)
    mm = next(r for r in host if r["name"] == "mm")
    # The calibration is read right after its event completes, before the start event is
    # recorded: the device work starts after the host span opened, on the host's clock.
    assert mm["start_ns"] <= cal_host <= d["start_ns"]
    assert d["category"] == "train/gpu" and d["depth"] == 2 and d["parent_id"] == mm["span_id"]


def test_calibration_is_retaken_after_the_period_but_not_inside_an_open_span(gpu, monkeypatch):
    monkeypatch.setattr(cuda, "RECALIBRATE_NS", 0)  # every span start may re-take it
    with hotspan.span("outer", "gpu", device="cuda"):
        first = gpu.recorder.calibration(0)[0]
        with hotspan.span("inner", "gpu", device="cuda"):  # nested: the same calibration
            gpu.current.launch(MS)
        assert gpu.recorder.calibration(0)[0] is first
    with hotspan.span("next", "gpu", device="cuda"):
        gpu.current.launch(MS)
    assert gpu.recorder.calibration(0)[0] is not first
    device = {r["name"]: r for r in split(hotspan.drain(wait_device=True))[1]}
    outer, inner, nxt = device["outer"], device["inner"], device["next"]
    assert (
        outer["start_ns"] <= inner["start_ns"] <= inner["end_ns"] <= outer["end_ns"]
    )  # nested exactly
    assert nxt["start_ns"] >= outer["end_ns"]  # never partly over the previous row of its stream


def test_events_are_pooled_no_new_event_once_warm(gpu):
    def burst():
        for _ in range(50):
            with hotspan.span("k", "gpu", device="cuda"):
                gpu.current.launch(1000)
        return hotspan.drain(wait_device=True)

    burst()
    warm = gpu.recorder.events_created
    assert warm <= 101  # 100 for the first burst's pairs, at most one calibration
    for _ in range(3):
        assert len(split(burst())[1]) == 50
    assert gpu.recorder.events_created == warm == len(gpu.events)


def test_thread_ids_are_negative_stable_and_per_stream(gpu):
    for device, stream in (
        (0, 0),
        (0, 7),
        (1, 0),
        (0, 0x7F3A_1234_5600),
    ):  # the last: an external stream
        gpu.current = gpu.stream(device, stream)
        with hotspan.span("k", device="cuda"):
            gpu.current.launch(10)
    device = split(hotspan.drain(wait_device=True))[1]
    ids = {r["thread_name"]: r["thread_id"] for r in device}
    external = ids.pop(f"cuda:0 stream {0x7F3A_1234_5600}")
    assert ids == {"cuda:0 stream 0": -1, "cuda:0 stream 7": -8, "cuda:1 stream 0": -1 - (1 << 20)}
    assert -(1 << 20) <= external < -1 - (1 << 19)  # hashed into the upper half of device 0's ids
    assert all(
        cuda.device_thread_id(d, s) == -1 - (d * (1 << 20) + s)
        for d, s in ((0, 0), (3, 5), (1023, 1000))
    )
    assert cuda.device_thread_id(1023, 1 << 40) >= -(
        1 << 31
    )  # every id fits in int32 (Perfetto's tid)
    assert cuda.device_thread_id(0, 1 << 40) == cuda.device_thread_id(0, 1 << 40)  # stable


def test_parent_depth_arg_error_follow_the_host_span(gpu):
    with hotspan.span("step", "train"):
        with pytest.raises(ZeroDivisionError):
            with hotspan.span("fwd", device="cuda", arg=4096):
                gpu.current.launch(MS)
                1 / 0
    host, device = split(hotspan.drain(wait_device=True))
    (d,) = device
    fwd = next(r for r in host if r["name"] == "fwd")
    assert (d["parent_id"], d["depth"], d["category"], d["arg"], d["error"]) == (
        fwd["span_id"],
        fwd["depth"] + 1,
        "train",
        4096,
        True,
    )
    assert fwd["error"] and fwd["category"] == "train"


def test_a_disabled_device_span_records_no_events(gpu):
    s = hotspan.span("k", "gpu", device="cuda")
    hotspan.disable()
    try:
        with s:
            gpu.current.launch(MS)
    finally:
        hotspan.enable()
    assert gpu.events == [] and hotspan.drain(wait_device=True).num_rows == 0


def test_device_span_as_decorator_and_reused_object(gpu):
    @hotspan.span("step", "gpu", device="cuda")
    def step():
        gpu.current.launch(MS)

    s = hotspan.span("again", "gpu", device="cuda")
    for _ in range(3):
        step()
        with s:
            with s:  # re-entrant, as every span object
                gpu.current.launch(MS)
    host, device = split(hotspan.drain(wait_device=True))
    assert (
        sorted(r["name"] for r in device)
        == sorted(r["name"] for r in host)
        == ["again"] * 6 + ["step"] * 3
    )
    by_id = {r["span_id"]: r for r in host}
    assert all(by_id[d["parent_id"]]["name"] == d["name"] for d in device)


def test_record_writes_device_rows_and_waits_for_them_at_stop(gpu, tmp_path):
    out = tmp_path / "trace.parquet"
    with hotspan.record(out):
        for _ in range(3):
            with hotspan.span("k", "gpu", device="cuda"):
                gpu.current.launch(MS)
    table = hotspan.load(out)
    host, device = split(table)
    assert len(host) == 3 and len(device) == 3  # still running at stop: waited for, not lost
    assert {d["parent_id"] for d in device} == {h["span_id"] for h in host}


def _stats_table(gpu):
    for n in range(4):
        with hotspan.span("mm", "gpu", device="cuda"):
            gpu.current.launch((n + 1) * MS)
    return hotspan.drain(wait_device=True)


def test_stats_keep_device_time_apart_from_host_time(gpu):
    table = _stats_table(gpu)
    result = {
        (r["name"], r["device"]): r for r in hotspan.stats(table).to_pylist()
    }  # device: a default key
    assert set(result) == {("mm", "host"), ("mm", "cuda:0")}
    host, device = result[("mm", "host")], result[("mm", "cuda:0")]
    assert device["count"] == 4 and device["total_ns"] == 10 * MS and device["self_ns"] == 10 * MS
    # The device rows are the host spans' children, but their time is not taken from the
    # host spans' self time, and each side's shares add up to 1 on their own.
    assert host["self_ns"] == host["total_ns"] < MS
    assert host["share"] == device["share"] == 1.0
    mixed = hotspan.stats(table, by=("name",)).to_pylist()  # asked for: one group, self time intact
    assert mixed[0]["count"] == 8 and mixed[0]["self_ns"] == mixed[0]["total_ns"]
    host_only = table.filter(pc.greater_equal(table.column("thread_id"), 0))
    assert (
        "device" not in hotspan.stats(host_only).column_names
    )  # no device rows: the default as ever


def test_cli_stats_groups_device_rows_apart(gpu, tmp_path):
    import json
    import os
    import subprocess
    import sys

    path = tmp_path / "trace.parquet"
    hotspan.export(_stats_table(gpu), path)
    proc = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    rows = {(r["name"], r["device"]): r["count"] for r in json.loads(proc.stdout)}
    assert rows == {("mm", "host"): 4, ("mm", "cuda:0"): 4}
    proc = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", str(path), "--by", "device"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "cuda:0" in proc.stdout and "host" in proc.stdout


def test_a_failing_event_record_fails_the_span_and_leaves_nothing_open(gpu, monkeypatch):
    with hotspan.span("warm", device="cuda"):
        pass
    first = gpu.recorder.calibration(0)[0]
    gpu.fail_next_record = RuntimeError("CUDA error: an illegal memory access was encountered")
    with pytest.raises(RuntimeError, match="illegal memory access"):
        with hotspan.span("k", device="cuda"):
            pass
    k, _warm_device, _warm_host = sorted(
        rows(hotspan.drain(wait_device=True)), key=lambda r: (r["name"], r["thread_id"])
    )
    assert (
        k["name"] == "k" and k["error"] and k["thread_id"] > 0
    )  # the host span, closed as an error
    assert gpu.recorder.pending() == 0
    monkeypatch.setattr(cuda, "RECALIBRATE_NS", 0)
    with hotspan.span("after", device="cuda"):  # no device span left open: it may recalibrate
        pass
    assert gpu.recorder.calibration(0)[0] is not first
