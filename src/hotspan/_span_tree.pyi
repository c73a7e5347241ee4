"""Type stub of the span-tree kernels (_span_tree.pyx, compiled by Cython): self time and
the schema's rules, each in one pass over a table's parent links."""

import numpy as np
import numpy.typing as npt

DENSE_SPREAD: int

class SpanIndex:
    rows: int
    repeat: int
    def __init__(self, span_id: npt.NDArray[np.uint64]) -> None: ...

def self_times(
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    span_id: npt.NDArray[np.uint64],
    parent_id: npt.NDArray[np.uint64],
    has_parent: npt.NDArray[np.uint8],
    thread: npt.NDArray[np.int64],
    pid: npt.NDArray[np.int64] | None = None,
    order: npt.NDArray[np.intp] | None = None,
    index: SpanIndex | None = None,
) -> npt.NDArray[np.int64] | None: ...
def stacked_self_times(
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    span_id: npt.NDArray[np.uint64],
    parent_id: npt.NDArray[np.uint64],
    has_parent: npt.NDArray[np.uint8],
    thread: npt.NDArray[np.int64],
    pid: npt.NDArray[np.int64] | None = None,
    index: SpanIndex | None = None,
) -> npt.NDArray[np.int64] | None: ...
def span_rules(
    span_id: npt.NDArray[np.uint64],
    parent_id: npt.NDArray[np.uint64],
    has_parent: npt.NDArray[np.uint8],
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    duration: npt.NDArray[np.int64],
    depth: npt.NDArray[np.int32],
    index: SpanIndex | None = None,
) -> tuple[int, int, int, int, int, int, int]: ...
