"""span(..., device="cuda"): event pairs recorded by the C core through the CUDA driver API,
resolved into device rows at drain, never waiting.

The CUDA driver is the one piece these machines lack: the ``gpu`` fixture (tests/conftest.py)
builds a stand-in libcuda.so (tests/devices/fake_libcuda.c, a device clock the test moves)
and points the plug-in at it with HOTSPAN_LIBCUDA. Spans, the C plug-in, drain, record()
and the id ranges are real. benchmarks/gpu_check.py runs the same checks against the real
driver and torch.profiler on a machine with a GPU.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pyarrow.compute as pc
import pytest

import hotspan
from hotspan import _native
from hotspan._devices import cuda
from hotspan.testing import set_fake_clock

from _util import rows

MS = 1_000_000


def split(table):
    all_rows = rows(table)
    return [r for r in all_rows if r["thread_id"] >= 0], [r for r in all_rows if r["thread_id"] < 0]


@pytest.fixture
def recalibrate_always():
    previous = cuda.set_recalibrate_ns(0)  # every span start may re-take it
    yield
    cuda.set_recalibrate_ns(previous)


def test_a_pair_is_resolved_only_once_its_end_event_completed(gpu):
    with hotspan.span("matmul", "gpu", device="cuda", stream=7):
        gpu.launch(3 * MS, stream=7)  # the kernel the span launched
    host, device = split(hotspan.drain())
    assert [r["name"] for r in host] == ["matmul"] and device == []  # still running: not waited for
    assert gpu.counter("event_syncs") == 0 and cuda.pending() == 1
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
    assert cuda.pending() == 0 and cuda.info()["loaded"] == str(gpu.path)


def test_pairs_wait_across_drains_in_stream_order(gpu):
    for n in (1, 2, 3):
        with hotspan.span(f"k{n}", "gpu", device="cuda"):
            gpu.launch(n * MS)
    hotspan.drain()
    gpu.advance(1 * MS)
    assert [r["name"] for r in split(hotspan.drain())[1]] == ["k1"]
    gpu.advance(2 * MS)
    assert [r["name"] for r in split(hotspan.drain())[1]] == ["k2"]
    gpu.advance(10 * MS)
    (k3,) = split(hotspan.drain())[1]
    assert (
        k3["name"] == "k3"
        and k3["duration_ns"] == 3 * MS
        and k3["thread_name"] == "cuda:0 stream 0"
    )


def test_pending_events_wait_for_a_later_drain_and_never_block_it(gpu):
    gpu.pending(True)  # the driver reports every event not ready
    for _ in range(3):
        with hotspan.span("k", "gpu", device="cuda"):
            gpu.launch(MS)
    gpu.advance(10 * MS)
    assert split(hotspan.drain())[1] == [] and cuda.pending() == 3
    gpu.pending(False)
    assert len(split(hotspan.drain())[1]) == 3 and cuda.pending() == 0


def test_drain_wait_device_waits_once_per_stream_then_has_every_row(gpu):
    for _ in range(5):
        with hotspan.span("k", "gpu", device="cuda"):
            gpu.launch(MS)
    gpu.set_device(1)  # cudaSetDevice(1): the current context is device 1's
    with hotspan.span("k", "gpu", device="cuda"):
        gpu.launch(MS, device=1)
    table = hotspan.drain(wait_device=True)
    host, device = split(table)
    assert len(host) == 6 and len(device) == 6
    assert gpu.counter("event_syncs") == 2  # the last pair of each stream, not every pair
    assert {r["thread_name"] for r in device} == {"cuda:0 stream 0", "cuda:1 stream 0"}
    assert hotspan.drain(wait_device=True).num_rows == 0 and gpu.counter("event_syncs") == 2


def test_device_rows_are_on_the_host_clock_through_the_calibration(gpu):
    set_fake_clock(1_800_000_000_000_000_000, 1000)
    gpu.advance(7 * MS)  # idle device time before the first span: must not shift anything
    with hotspan.span("outer", "train"):
        with hotspan.span("mm", "gpu", device="cuda"):
            gpu.launch(4 * MS)
    cal_event, cal_host = cuda.calibration(0)
    assert (
        gpu.counter("stream_syncs") == 1
    )  # the calibration event, on a stream of ours: one round trip
    assert gpu.event_time(cal_event) == gpu.now()  # recorded on an idle stream: completed at once
    host, device = split(hotspan.drain(wait_device=True))
    (d,) = device
    # The start event is reached at the calibration's device time (nothing queued before
    # it), the end event 4 ms later: the row is the calibration's host time plus those.
    assert (d["start_ns"], d["end_ns"]) == (cal_host, cal_host + 4 * MS)
    mm = next(r for r in host if r["name"] == "mm")
    # The calibration is read right after its event completes, before the start event is
    # recorded: the device work starts after the host span opened, on the host's clock.
    assert mm["start_ns"] <= cal_host <= d["start_ns"]
    assert d["category"] == "train/gpu" and d["depth"] == 2 and d["parent_id"] == mm["span_id"]


def test_calibration_is_retaken_after_the_period_but_not_inside_an_open_span(
    gpu, recalibrate_always
):
    with hotspan.span("outer", "gpu", device="cuda"):
        first = cuda.calibration(0)[0]
        with hotspan.span("inner", "gpu", device="cuda"):  # nested: the same calibration
            gpu.launch(MS)
        assert cuda.calibration(0)[0] == first
    gpu.advance(MS)
    with hotspan.span("next", "gpu", device="cuda"):
        gpu.launch(MS)
    assert cuda.calibration(0)[0] != first
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
                gpu.launch(1000)
        return hotspan.drain(wait_device=True)

    burst()
    warm = cuda.info()["events_created"]
    assert warm <= 101  # 100 for the first burst's pairs, at most one calibration
    for _ in range(3):
        assert len(split(burst())[1]) == 50
    assert cuda.info()["events_created"] == warm == gpu.counter("events_created")
    assert gpu.counter("events_destroyed") == 0


def test_thread_ids_are_negative_stable_and_per_stream(gpu):
    for device, stream in (
        (0, 0),
        (0, 7),
        (1, 0),
        (0, 0x7F3A_1234_5600),
    ):  # the last: an external stream
        gpu.set_device(device)
        with hotspan.span("k", device="cuda", stream=stream):
            gpu.launch(10, stream=stream, device=device)
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


class TorchLikeStream:
    """What torch.cuda.Stream exposes: the handle and torch's own stream id."""

    def __init__(self, handle: int, stream_id: int):
        self.cuda_stream, self.stream_id = handle, stream_id


class ProtocolStream:
    """CUDA's stream protocol (CuPy, numba, cuda.core): __cuda_stream__() -> (version, handle)."""

    def __init__(self, handle: int):
        self.handle = handle

    def __cuda_stream__(self):
        return (0, self.handle)


def test_stream_objects_of_torch_cupy_and_numba_are_taken(gpu):
    torch_like, protocol = TorchLikeStream(0x5000, 3), ProtocolStream(0x6000)
    with hotspan.span("t", device="cuda", stream=torch_like):
        gpu.launch(MS, stream=0x5000)
    with hotspan.span("p", device="cuda", stream=protocol) as s:
        gpu.launch(2 * MS, stream=0x6000)
    assert s.stream is protocol
    device = {r["name"]: r for r in split(hotspan.drain(wait_device=True))[1]}
    assert device["t"]["thread_name"] == "cuda:0 stream 3"  # torch's stream_id names it
    assert (
        device["t"]["duration_ns"] == MS
    )  # recorded on the handle's stream: its kernel in between
    assert (
        device["p"]["thread_name"] == f"cuda:0 stream {0x6000}"
        and device["p"]["duration_ns"] == 2 * MS
    )


def test_bad_stream_arguments_are_refused_at_creation(gpu):
    with pytest.raises(
        TypeError, match="stream must be an int handle or an object with cuda_stream"
    ):
        hotspan.span("k", device="cuda", stream="7")
    with pytest.raises(TypeError, match="stream= is for device spans"):
        hotspan.span("k", stream=7)


def test_parent_depth_arg_error_follow_the_host_span(gpu):
    with hotspan.span("step", "train"):
        with pytest.raises(ZeroDivisionError):
            with hotspan.span("fwd", device="cuda", arg=4096):
                gpu.launch(MS)
                raise ZeroDivisionError
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
            gpu.launch(MS)
    finally:
        hotspan.enable()
    assert gpu.counter("records") == 0 and hotspan.drain(wait_device=True).num_rows == 0


def test_device_span_as_decorator_and_reused_object(gpu):
    @hotspan.span("step", "gpu", device="cuda")
    def step():
        gpu.launch(MS)

    s = hotspan.span("again", "gpu", device="cuda")
    for _ in range(3):
        step()
        with s:
            with s:  # re-entrant, as every span object
                gpu.launch(MS)
    host, device = split(hotspan.drain(wait_device=True))
    assert (
        sorted(r["name"] for r in device)
        == sorted(r["name"] for r in host)
        == ["again"] * 6 + ["step"] * 3
    )
    by_id = {r["span_id"]: r for r in host}
    assert all(by_id[d["parent_id"]]["name"] == d["name"] for d in device)


def test_a_device_span_copies_with_its_device_and_stream(gpu):
    """copy.deepcopy (an EMA copy of a model that holds its spans) makes a new device span
    on the same device and stream, which records its pair as the first one does."""
    import copy

    s = hotspan.span("copied", "gpu", device="cuda", stream=7, arg=2)
    again = copy.deepcopy(s)
    assert again is not s and type(again) is type(s)
    assert (again.name, again.category, again.arg, again.device, again.stream) == (
        "copied",
        "gpu",
        2,
        "cuda",
        7,
    )
    with again:
        gpu.launch(MS)
    host, device = split(hotspan.drain(wait_device=True))
    assert [r["name"] for r in host] == [r["name"] for r in device] == ["copied"]


def test_device_spans_on_many_threads_each_get_their_row(gpu):
    def work():
        for _ in range(100):
            with hotspan.span("k", "gpu", device="cuda"):
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    host, device = split(hotspan.drain(wait_device=True))
    assert len(host) == len(device) == 400
    assert {d["parent_id"] for d in device} == {h["span_id"] for h in host}
    assert cuda.info()["open"] == 0


def test_record_writes_device_rows_and_waits_for_them_at_stop(gpu, tmp_path):
    out = tmp_path / "trace.parquet"
    with hotspan.record(out):
        for _ in range(3):
            with hotspan.span("k", "gpu", device="cuda"):
                gpu.launch(MS)
    table = hotspan.load(out)
    host, device = split(table)
    assert len(host) == 3 and len(device) == 3  # still running at stop: waited for, not lost
    assert {d["parent_id"] for d in device} == {h["span_id"] for h in host}


def _stats_table(gpu):
    for n in range(4):
        with hotspan.span("mm", "gpu", device="cuda"):
            gpu.launch((n + 1) * MS)
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


@pytest.mark.slow
def test_cli_stats_groups_device_rows_apart(gpu, tmp_path):
    import json

    path = tmp_path / "trace.parquet"
    hotspan.export(_stats_table(gpu), path)
    proc = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    found = {(r["name"], r["device"]): r["count"] for r in json.loads(proc.stdout)}
    assert found == {("mm", "host"): 4, ("mm", "cuda:0"): 4}
    proc = subprocess.run(
        [sys.executable, "-m", "hotspan", "stats", str(path), "--by", "device"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "160"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "cuda:0" in proc.stdout and "host" in proc.stdout


def test_a_failing_event_record_is_one_line_and_leaves_nothing_open(gpu, recalibrate_always):
    with hotspan.span("warm", device="cuda"):
        pass
    first = cuda.calibration(0)[0]
    gpu.fail_next("cuEventRecord", 700)
    with pytest.raises(RuntimeError) as err:
        with hotspan.span("k", device="cuda"):
            pass
    assert (
        str(err.value)
        == "device span: cuEventRecord failed: CUDA_ERROR_ILLEGAL_ADDRESS (CUresult 700)"
    )
    k, _warm_device, _warm_host = sorted(
        rows(hotspan.drain(wait_device=True)), key=lambda r: (r["name"], r["thread_id"])
    )
    assert (
        k["name"] == "k" and k["error"] and k["thread_id"] > 0
    )  # the host span, closed as an error
    assert cuda.pending() == 0 and cuda.info()["open"] == 0
    with hotspan.span("after", device="cuda"):  # no device span left open: it may recalibrate
        pass
    assert cuda.calibration(0)[0] != first


def test_a_driver_error_at_drain_names_the_call(gpu):
    with hotspan.span("k", device="cuda"):
        gpu.launch(MS)
    gpu.advance(MS)
    gpu.fail_next("cuEventQuery", 999)  # a CUresult the driver has no name for
    with pytest.raises(
        RuntimeError, match=r"^device span: cuEventQuery failed: CUDA error \(CUresult 999\)$"
    ):
        hotspan.drain()
    assert cuda.pending() == 0  # the failed pair is dropped, not retried for ever
    with hotspan.span("k2", device="cuda"):
        gpu.launch(MS)
    assert [r["name"] for r in split(hotspan.drain(wait_device=True))[1]] == ["k2"]


def test_no_cuda_refuses_at_creation_naming_it(fake_libcuda_path, fresh, tmp_path):
    from _fake_libcuda import FakeDriver

    driver = FakeDriver(fake_libcuda_path)
    driver.start(devices=0)
    try:
        with pytest.raises(
            RuntimeError,
            match=r"^span\(device='cuda'\): CUDA is not available: .* sees no CUDA device",
        ):
            hotspan.span("k", device="cuda")
        missing = tmp_path / "no-such-libcuda.so"
        os.environ["HOTSPAN_LIBCUDA"] = str(missing)
        _native._cuda_reset(False)
        with pytest.raises(
            RuntimeError, match=r"CUDA is not available: .*no-such-libcuda\.so could not be loaded"
        ):
            hotspan.span("k", device="cuda")
        driver.start()
        driver.fail_next("cuInit", 100)
        with pytest.raises(
            RuntimeError,
            match=r"cuInit/cuDeviceGetCount failed: CUDA_ERROR_NO_DEVICE \(CUresult 100\)",
        ):
            hotspan.span("k", device="cuda")
    finally:
        driver.stop()


def test_device_spans_need_no_torch(fake_libcuda_path):
    code = """
import sys
sys.modules["torch"] = None  # import torch would fail: nothing may need it
import hotspan
from hotspan._devices import cuda
for _ in range(3):
    with hotspan.span("k", "gpu", device="cuda"):
        pass
table = hotspan.drain(wait_device=True)
assert sum(1 for t in table.column("thread_id").to_pylist() if t < 0) == 3, table
assert cuda.info()["torch"] == "absent", cuda.info()
print("ok")
"""
    env = {**os.environ, "HOTSPAN_LIBCUDA": str(fake_libcuda_path)}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stdout + proc.stderr
