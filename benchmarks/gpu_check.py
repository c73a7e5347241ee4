"""Device spans checked against the real CUDA driver and torch.profiler on a machine with a GPU.

    python benchmarks/gpu_check.py [--spans 1000] [--host-n 100000]

Device spans are recorded by hotspan's C plug-in through the CUDA driver API (libcuda.so.1,
loaded at run time); torch here only launches the work and profiles it. The same checks
run in tests/devices/test_cuda_spans.py over a stand-in driver.

1. Records --spans device spans (``hotspan.span(name, "gpu", device="cuda")``), each
   around one ``torch.mm`` of a known size (256 to 4096, round robin), under
   ``torch.profiler``; drains with ``hotspan.drain(wait_device=True)``.
2. Matches each device row (``thread_id < 0``, documented as never an OS id) with the
   kernels the profiler saw for the same matmul (in launch order: both lists are in
   stream order on one stream) and checks its duration against the kernels' span, from
   the first kernel's start to the last one's end: within 5% or 5 us.
3. Times the host cost of an empty device span against an empty host span and the floor
   (a C no-op context manager), best of several rounds (device spans drained with
   ``wait_device=True`` after each round, so the event pool stays warm).
4. Checks the stream: torch's current stream is read in C (the plug-in's ``torch`` state
   is ``"c"``), a span under ``torch.cuda.stream(s)`` and one given ``stream=s`` both land
   on ``s`` (their rows named by ``s.stream_id``).
5. Checks that ``drain()`` never waits for the GPU: with 20 device spans of 8192 x 8192
   matmuls queued, ``drain()`` returns long before the work is done, with the pairs not
   yet complete left for a later drain; then ``drain(wait_device=True)`` has them all.

Prints one JSON line. Where it cannot run (no torch, no CUDA, or a hotspan without device
spans) the line is ``{"ran": false, "reason": ...}`` and the exit status 0: it is never
run by pytest, only by hand or on a lent GPU machine.
"""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import time

SIZES = (256, 512, 1024, 2048, 4096)
REL_TOL, ABS_TOL_US = 0.05, 5.0


def _not_run(reason: str) -> int:
    print(json.dumps({"ran": False, "reason": reason}))
    return 0


def _api_missing(hotspan) -> str | None:
    try:
        hotspan.span("probe", "gpu", device="cuda")
    except TypeError as err:
        return f"this hotspan has no device spans: span(..., device='cuda') is not accepted ({err})"
    except RuntimeError as err:  # the documented error without a usable CUDA
        return f"device spans unavailable: {err}"
    try:
        params = inspect.signature(hotspan.drain).parameters
    except (TypeError, ValueError):
        params = {}
    if "wait_device" not in params:
        return "this hotspan's drain() has no wait_device parameter"
    return None


def _best_per_iter(fn, n: int, rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        fn(n)
        best = min(best, (time.perf_counter_ns() - t0) / n)
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spans", type=int, default=1000)
    parser.add_argument(
        "--host-n", type=int, default=100_000, help="spans per round of the host-cost timing"
    )
    parser.add_argument(
        "--device-n",
        type=int,
        default=10_000,
        help="device spans per round of the host-cost timing",
    )
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)

    try:
        import torch
    except ImportError as err:
        return _not_run(f"torch is not installed ({err})")
    if not torch.cuda.is_available():
        return _not_run("no CUDA device: torch.cuda.is_available() is False")
    import hotspan
    from hotspan.testing import NoopContext

    missing = _api_missing(hotspan)
    if missing:
        return _not_run(missing)

    dev = torch.device("cuda")
    mats = {
        n: (
            torch.randn(n, n, device=dev),
            torch.randn(n, n, device=dev),
            torch.empty(n, n, device=dev),
        )
        for n in SIZES
    }
    for n, (a, b, c) in mats.items():  # warm-up: cuBLAS handles, kernel selection, the event pool
        for _ in range(3):
            with hotspan.span(f"mm{n}", "gpu", device="cuda"):
                torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    hotspan.drain(wait_device=True)

    from torch.profiler import ProfilerActivity, profile

    order = [SIZES[i % len(SIZES)] for i in range(args.spans)]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for n in order:
            a, b, c = mats[n]
            with hotspan.span(f"mm{n}", "gpu", device="cuda"):
                torch.mm(a, b, out=c)
        torch.cuda.synchronize()
    table = hotspan.drain(wait_device=True)
    rows = table.to_pylist()
    device_rows = sorted((r for r in rows if r["thread_id"] < 0), key=lambda r: r["start_ns"])
    host_rows = [r for r in rows if r["thread_id"] >= 0 and r["name"].startswith("mm")]

    kernels = sorted(
        (
            e
            for e in prof.events()
            if e.device_type == torch.autograd.DeviceType.CUDA
            and not e.name.startswith(("Memcpy", "Memset"))
        ),
        key=lambda e: e.time_range.start,
    )
    result: dict = {
        "ran": True,
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "spans": args.spans,
        "device_rows": len(device_rows),
        "host_rows": len(host_rows),
        "kernels": len(kernels),
    }
    problems = []
    if len(device_rows) != args.spans:
        problems.append(f"{len(device_rows)} device rows for {args.spans} device spans")
    if [r["name"] for r in device_rows] != [f"mm{n}" for n in order]:
        problems.append("device rows' names are not the spans' names in launch order")
    per_span = len(kernels) // args.spans if args.spans else 0
    if per_span == 0 or len(kernels) % args.spans:
        problems.append(f"{len(kernels)} kernels for {args.spans} matmuls: can't pair them")
    else:
        rel_errors, abs_errors_us, worst = [], [], None
        within = 0
        for i, row in enumerate(device_rows[: args.spans]):
            group = kernels[i * per_span : (i + 1) * per_span]
            kernel_us = group[-1].time_range.end - group[0].time_range.start
            span_us = row["duration_ns"] / 1000
            diff = abs(span_us - kernel_us)
            rel = diff / kernel_us if kernel_us > 0 else float("inf")
            rel_errors.append(rel)
            abs_errors_us.append(diff)
            ok = rel <= REL_TOL or diff <= ABS_TOL_US
            within += ok
            if not ok and worst is None:
                worst = {
                    "span": row["name"],
                    "span_us": round(span_us, 2),
                    "kernel_us": round(kernel_us, 2),
                }
        rel_errors.sort()
        result.update(
            kernels_per_span=per_span,
            within_tolerance=within,
            median_rel_error=round(rel_errors[len(rel_errors) // 2], 4),
            max_abs_error_us=round(max(abs_errors_us), 2),
            first_outside=worst,
        )
        if within != args.spans:
            problems.append(
                f"{args.spans - within} device spans outside 5% / 5 us of the profiler's kernels"
            )

    # host cost: an empty device span against an empty host span and the floor (the
    # difference: what the device span costs the host, its two real event records included)
    noop, host, device = (
        NoopContext(),
        hotspan.span("h", "gpu"),
        hotspan.span("d", "gpu", device="cuda"),
    )

    def loop(cm):
        def run(n):
            for _ in range(n):
                with cm:
                    pass

        return run

    costs = {}
    for label, cm, n in (
        ("floor", noop, args.host_n),
        ("host_span", host, args.host_n),
        ("device_span", device, args.device_n),
    ):
        best = float("inf")
        for _ in range(args.rounds):
            best = min(best, _best_per_iter(loop(cm), n, 1))
            hotspan.drain(wait_device=True)  # the pairs back to the pool: a warm recorder
        costs[label] = best
    from hotspan._devices import cuda

    result.update(
        plugin=cuda.info(),
        host_span_ns=round(costs["host_span"], 1),
        device_span_ns=round(costs["device_span"], 1),
        device_over_host_ns=round(costs["device_span"] - costs["host_span"], 1),
    )

    # the stream: torch's current one (read in C), or the one given
    side = torch.cuda.Stream()
    a, b, c = mats[SIZES[0]]
    with torch.cuda.stream(side):
        with hotspan.span("current", "gpu", device="cuda"):
            torch.mm(a, b, out=c)
    with hotspan.span("given", "gpu", device="cuda", stream=side):
        with torch.cuda.stream(side):
            torch.mm(a, b, out=c)
    streams = {
        r["name"]: r["thread_name"]
        for r in hotspan.drain(wait_device=True).to_pylist()
        if r["thread_id"] < 0
    }
    expected = f"cuda:{torch.cuda.current_device()} stream {side.stream_id}"
    result.update(stream_rows=streams, torch_stream_read=cuda.info()["torch"])
    if streams != {"current": expected, "given": expected}:
        problems.append(f"stream rows {streams}, expected both on {expected!r}")
    if cuda.info()["torch"] != "c":
        problems.append(f"torch's current stream read through {cuda.info()['torch']!r}, not in C")

    # drain() never waits for the GPU
    big = torch.randn(8192, 8192, device=dev)
    out = torch.empty_like(big)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        with hotspan.span("big", "gpu", device="cuda"):
            torch.mm(big, big, out=out)
    launched = time.perf_counter()
    early = hotspan.drain()
    drained = time.perf_counter()
    early_device = sum(1 for t in early.column("thread_id").to_pylist() if t < 0)
    late = hotspan.drain(wait_device=True)
    done = time.perf_counter()
    late_device = sum(1 for t in late.column("thread_id").to_pylist() if t < 0)
    result.update(
        no_stall_drain_ms=round((drained - launched) * 1e3, 3),
        no_stall_work_ms=round((done - t0) * 1e3, 3),
        no_stall_rows_early=early_device,
        no_stall_rows_late=late_device,
    )
    if early_device + late_device != 20:
        problems.append(f"{early_device} + {late_device} device rows for 20 device spans")
    if early_device >= 20 or (drained - launched) > 0.25 * (done - t0):
        problems.append("drain() seems to have waited for the GPU")
    result["problems"] = problems
    result["ok"] = not problems
    print(json.dumps(result))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
