"""A deterministic stand-in for the CUDA runtime, the one thing these machines lack.

It has the interface ``hotspan.devices.cuda`` uses (``TorchCuda``'s methods; events with
``torch.cuda.Event``'s ``record``/``query``/``elapsed_time``/``synchronize``), over a
device clock the test moves by hand: work queued on a stream runs in order, an event
completes when the device clock passes the point where its stream reached it, and
``elapsed_time`` refuses events not completed, as CUDA does. Everything else in the tests
(spans, drain, exports, Perfetto's trace processor, stats) is the real thing.
"""

from __future__ import annotations

import time


class FakeStream:
    def __init__(self, gpu: "FakeGpu", device: int, stream_id: int):
        self.gpu, self.device, self.stream_id = gpu, device, stream_id
        self.busy_until = 0  # device ns when the work queued so far is done

    def launch(self, ns: int) -> None:
        """Queue a kernel of ``ns`` device nanoseconds."""
        self.busy_until = max(self.busy_until, self.gpu.now[self.device]) + ns


class FakeEvent:
    def __init__(self, gpu: "FakeGpu"):
        self.gpu = gpu
        self.device: int | None = None
        self.time: int | None = None  # device ns at which the stream reaches it
        self.records = 0

    def record(self, stream: FakeStream | None = None) -> None:
        failure, self.gpu.fail_next_record = self.gpu.fail_next_record, None
        if failure is not None:
            raise failure
        stream = stream or self.gpu.current
        self.gpu.tick()
        if self.device is not None and self.device != stream.device:
            raise RuntimeError("an event records on the device it was first recorded on")
        self.device = stream.device
        self.time = max(stream.busy_until, self.gpu.now[stream.device])
        stream.busy_until = self.time
        self.records += 1

    def query(self) -> bool:
        self.gpu.tick()
        self.gpu.queries += 1
        return self.time is not None and self.gpu.now[self.device] >= self.time

    def synchronize(self) -> None:
        self.gpu.event_syncs += 1
        self.gpu.now[self.device] = max(self.gpu.now[self.device], self.time)

    def elapsed_time(self, end: "FakeEvent") -> float:
        if not (self.query() and end.query()):
            raise RuntimeError("CUDA error: device not ready")
        return (end.time - self.time) / 1e6  # milliseconds, as CUDA gives them


class FakeGpu:
    """Devices 0 and 1; device clocks start far from the host's (calibration must map them).

    ``follow_host``: the device clocks also advance as the host's monotonic clock does (a
    real GPU's clock runs while the host works: an event recorded on an idle stream gets a
    time after the host recorded it); otherwise they move only by ``advance``."""

    def __init__(self, follow_host: bool = False):
        self.follow_host = follow_host
        self._t0 = time.monotonic_ns()
        self._base = {0: 5_000_000_000, 1: 9_000_000_000}
        self.now = dict(self._base)
        self.streams: dict[tuple[int, int], FakeStream] = {}
        self.current = self.stream(0, 7)
        self.events: list[FakeEvent] = []
        self.device_syncs: list[int] = []
        self.event_syncs = 0
        self.queries = 0
        self.fail_next_record: BaseException | None = None  # raised by the next record()

    def stream(self, device: int, stream_id: int) -> FakeStream:
        key = (device, stream_id)
        if key not in self.streams:
            self.streams[key] = FakeStream(self, device, stream_id)
        return self.streams[key]

    def tick(self) -> None:
        if self.follow_host:
            elapsed = time.monotonic_ns() - self._t0
            for device, base in self._base.items():
                self.now[device] = max(self.now[device], base + elapsed)

    def advance(self, ns: int, device: int = 0) -> None:
        self.now[device] += ns

    # --- the runtime interface (hotspan.devices.cuda.TorchCuda's methods)

    def event(self) -> FakeEvent:
        e = FakeEvent(self)
        self.events.append(e)
        return e

    def current_stream(self):
        s = self.current
        return s.device, s.stream_id, s

    def calibration_stream(self, device: int) -> FakeStream:
        return self.stream(device, 1000 + device)

    def synchronize(self, device: int) -> None:
        self.device_syncs.append(device)
        self.now[device] = max(
            [self.now[device]] + [s.busy_until for s in self.streams.values() if s.device == device]
        )
