"""Device rows (span(..., device="cuda")) in the exports: lossless round trips, their own
track in Perfetto's trace processor, and a flow from each host span to its device row.

The table is recorded for real (spans, the C plug-in, drain) over the stand-in CUDA driver
of tests/_fake_libcuda.py, the one piece these machines lack.
"""

from __future__ import annotations

import pyarrow.compute as pc
import pytest

import hotspan
from hotspan.formats._codec_inputs import device_flows

from _fake_libcuda import FakeDriver  # tests/: the CUDA driver, which these machines lack

MS = 1_000_000


@pytest.fixture(scope="module")
def recorded(fake_libcuda_path):
    """Host spans, with device rows on cuda:0 stream 7 (nested ones too) and cuda:1 stream 0."""
    hotspan.drain()
    gpu = FakeDriver(fake_libcuda_path)
    gpu.start()
    gpu.follow_host()  # device work after its launch, as on a real GPU
    try:
        hotspan.set_thread_name("MainThread")
        with hotspan.span("step", "train"):
            for n in range(3):
                with hotspan.span("forward", "gpu", device="cuda", stream=7):
                    with hotspan.span("matmul", device="cuda", arg=n, stream=7):
                        gpu.launch((n + 1) * MS, stream=7)
                    gpu.launch(MS // 2, stream=7)
            hotspan.instant("checkpoint")
            gpu.set_device(1)
            with hotspan.span("allreduce", "comms", device="cuda"):
                gpu.launch(2 * MS, device=1)
        table = hotspan.drain(wait_device=True)
    finally:
        gpu.stop()
    return table


def _device(table):
    return table.filter(pc.less(table.column("thread_id"), 0))


def test_the_recorded_table_has_its_device_rows(recorded):
    device = _device(recorded)
    assert device.num_rows == 7
    assert set(device.column("thread_name").to_pylist()) == {"cuda:0 stream 7", "cuda:1 stream 0"}
    flow_out, flow_in = device_flows(recorded)
    assert (flow_in != 0).sum() == 7 and (flow_out != 0).sum() == 7


@pytest.mark.parametrize(
    "extension", [".parquet", ".arrow", ".json", ".json.gz", ".pftrace", ".csv"]
)
def test_exports_keep_device_rows_and_add_none(recorded, extension, tmp_path):
    path = tmp_path / f"trace{extension}"
    hotspan.export(recorded, path)
    back = hotspan.load(path)

    def key(table):
        return sorted(
            table.select(
                [
                    "span_id",
                    "parent_id",
                    "name",
                    "category",
                    "start_ns",
                    "end_ns",
                    "duration_ns",
                    "depth",
                    "thread_id",
                    "thread_name",
                    "pid",
                    "rank",
                    "arg",
                    "error",
                ]
            ).to_pylist(),
            key=lambda r: r["span_id"],
        )

    assert key(back) == key(recorded)  # the flows add no row; device rows come back whole


@pytest.mark.slow
@pytest.mark.parametrize("extension", [".pftrace", ".json"])
def test_trace_processor_shows_device_tracks_and_flows(
    recorded, extension, tmp_path, perfetto_check
):
    import trace_processor

    path = tmp_path / f"trace{extension}"
    hotspan.export(recorded, path)
    device = _device(recorded)
    report = perfetto_check(
        path,
        slices=recorded.num_rows,
        sum_dur=pc.sum(recorded.column("duration_ns")).as_py(),
        threads=3,
    )
    per_thread = {row["name"]: row["slices"] for row in report["threads"]}
    assert per_thread["cuda:0 stream 7"] == 6 and per_thread["cuda:1 stream 0"] == 1
    with trace_processor.open_trace(path) as tp:
        flows = (
            tp.query(
                "select so.name as out_name, si.name as in_name, tout.name as out_thread, tin.name as in_thread, "
                "si.ts as in_ts, si.dur as in_dur "
                "from flow f join slice so on f.slice_out = so.id join slice si on f.slice_in = si.id "
                "join thread_track tto on so.track_id = tto.id join thread tout on tto.utid = tout.utid "
                "join thread_track tti on si.track_id = tti.id join thread tin on tti.utid = tin.utid"
            )
            .as_pandas_dataframe()
            .to_dict("records")
        )
    # One arrow per device row: from its host span (same name, on MainThread) to it.
    assert len(flows) == device.num_rows
    assert all(f["out_name"] == f["in_name"] and f["out_thread"] == "MainThread" for f in flows)
    assert sorted(f["in_thread"] for f in flows) == sorted(device.column("thread_name").to_pylist())
    expected = sorted(
        zip(device.column("name").to_pylist(), device.column("duration_ns").to_pylist())
    )
    assert sorted((f["in_name"], int(f["in_dur"])) for f in flows) == expected
