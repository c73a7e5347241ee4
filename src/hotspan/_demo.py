"""The built-in workload behind ``hotspan demo``: a few threads running training-like
steps (nested compute blocks, a communication block with a byte count, data loading)."""

from __future__ import annotations

import threading
import time

import numpy as np

import hotspan

__all__ = ["run"]


def _worker(rank_in_node: int, steps: int, size: int, barrier: threading.Barrier) -> None:
    hotspan.set_thread_name(f"worker-{rank_in_node}")
    rng = np.random.default_rng(rank_in_node)
    weights = rng.standard_normal((size, size)).astype(np.float32)
    grad_bytes = weights.nbytes
    step_span = hotspan.span("step", "train")
    load = hotspan.span("load_batch", "data", arg=size * size * 4)
    forward = hotspan.span("forward", "compute")
    backward = hotspan.span("backward", "compute")
    matmul = hotspan.span("matmul")  # no category: inherits train/compute
    allreduce = hotspan.span("allreduce", "comms", arg=grad_bytes)
    barrier.wait()
    for step in range(steps):
        with step_span:
            with load:
                batch = rng.standard_normal((size, size)).astype(np.float32)
            with forward:
                for _ in range(4):
                    with matmul:
                        batch = np.tanh(batch @ weights)
            with backward:
                for _ in range(8):
                    with matmul:
                        grad = batch.T @ batch
            with allreduce:
                # stands in for a collective: move the gradient's bytes and wait a little
                reduced = grad.copy()
                time.sleep(0.0005)
            hotspan.instant("optimizer_step", arg=step)  # inherits the step's category
            weights -= 1e-6 * reduced


def run(threads: int = 4, steps: int = 50, size: int = 96) -> None:
    """Run the workload on `threads` threads; spans go to the recorder as usual."""
    barrier = threading.Barrier(threads)
    workers = [
        threading.Thread(target=_worker, args=(k, steps, size, barrier), name=f"worker-{k}")
        for k in range(threads)
    ]
    with hotspan.span("demo", "run"):
        for w in workers:
            w.start()
        for w in workers:
            w.join()
