"""Type stub of the self-time kernel (_selftime_kernel.pyx, compiled by Cython)."""

import numpy as np
import numpy.typing as npt

DENSE_SPREAD: int

def self_times(
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
    span_id: npt.NDArray[np.uint64],
    parent_id: npt.NDArray[np.uint64],
    has_parent: npt.NDArray[np.uint8],
    thread: npt.NDArray[np.int64],
    pid: npt.NDArray[np.int64] | None = None,
    order: npt.NDArray[np.intp] | None = None,
) -> npt.NDArray[np.int64] | None: ...
