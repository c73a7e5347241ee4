"""Host cost of a device span (``span(..., device="cuda")``) over a stand-in CUDA driver.

    python benchmarks/bench_device_span.py [--n 20000] [--rounds 41]

Builds the tests' stand-in libcuda.so (tests/devices/fake_libcuda.c: an event record there
is a few stores), points the CUDA plug-in at it (HOTSPAN_LIBCUDA) and times, in the same
loop shape, a reused host span and a reused device span on the default stream; the device
spans' pairs are drained (wait_device=True) between rounds so the event pool stays warm.
The difference is what the device span costs the host over its two event records (the
stand-in's own records are inside it: an upper bound). Each round runs the two cases back
to back; the result is the median over rounds of the difference (a shared machine's speed
wanders: adjacent runs see the same host). Target: <= 1 us.

On a machine with a GPU, benchmarks/gpu_check.py measures the same against the real driver.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=20_000, help="spans per case and round")
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(ROOT / "tests"))
    from _fake_libcuda import build  # noqa: E402 - the tests' stand-in driver

    with tempfile.TemporaryDirectory() as tmp:
        path = build(Path(tmp))
        os.environ["HOTSPAN_LIBCUDA"] = str(path)
        import hotspan

        host = hotspan.span("host", "bench")
        device = hotspan.span("device", "bench", device="cuda")
        n = args.n

        def host_loop() -> None:
            for _ in range(n):
                with host:
                    pass

        def device_loop() -> None:
            for _ in range(n):
                with device:
                    pass

        def timed(fn) -> float:
            t0 = time.perf_counter_ns()
            fn()
            return (time.perf_counter_ns() - t0) / n

        device_loop()  # warm: the driver loaded, the calibration taken, the pools filled
        hotspan.drain(wait_device=True)
        diffs, host_ns, device_ns = [], [], []
        gc.disable()
        try:
            for _ in range(args.rounds):
                h = timed(host_loop)
                d = timed(device_loop)
                h2 = timed(host_loop)
                host_ns.append((h + h2) / 2)
                device_ns.append(d)
                diffs.append(d - (h + h2) / 2)
                table = hotspan.drain(wait_device=True)
                assert sum(1 for t in table.column("thread_id").to_pylist() if t < 0) == n
        finally:
            gc.enable()
        from hotspan._devices import cuda

        result = {
            "host_span_ns": statistics.median(host_ns),
            "device_span_ns": statistics.median(device_ns),
            "device_over_host_ns": statistics.median(diffs),
            "events_created": cuda.info()["events_created"],
            "target_ns": 1000,
        }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"host span {result['host_span_ns']:.0f} ns, device span {result['device_span_ns']:.0f} ns "
            f"(median of {args.rounds} rounds of {n:,}): a device span costs the host "
            f"{result['device_over_host_ns']:.0f} ns over its host span and two stand-in event records "
            f"(target <= 1000 ns); {result['events_created']} events created in all (pooled)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
