"""configure(counters=) samples each device's memory in use (issue 33 item 4): through the
CUDA plug-in's driver boundary (cuMemGetInfo under the device's context, on the drain
thread), as the counter ``cuda:<N> memory``; against the stand-in driver, whose memory in
use the test sets."""

from __future__ import annotations

import hotspan
from _util import wait_until


def _memory(name: str) -> list[float]:
    table = hotspan.drain_counters()
    return [
        v
        for n, v in zip(table.column("name").to_pylist(), table.column("value").to_pylist())
        if n == name
    ]


def test_device_memory_in_use_is_sampled_once_a_device_span_ran(gpu):
    hotspan.drain_counters()
    gpu.set_memory_used(0, 3 << 30)
    with hotspan.span("matmul", "gpu", device="cuda"):
        gpu.launch(1000)
    gpu.advance(1000)
    hotspan.drain()
    hotspan.configure(counters=0.01)
    try:
        first = wait_until(lambda: _memory("cuda:0 memory"), what="a device memory sample")
        assert set(first) == {float(3 << 30)}
        gpu.set_memory_used(0, 5 << 30)
        wait_until(lambda: float(5 << 30) in _memory("cuda:0 memory"), what="the new value")
    finally:
        hotspan.configure(counters=0)
    hotspan.drain_counters()
    gpu.set_memory_used(0, 0)


def test_no_device_no_device_counter(fresh):
    """Without a device span the driver is not asked (only rss is sampled)."""
    hotspan.configure(counters=0.01)
    try:
        names = wait_until(
            lambda: set(hotspan.drain_counters().column("name").to_pylist()), what="a sample"
        )
    finally:
        hotspan.configure(counters=0)
    assert names == {"rss"}
