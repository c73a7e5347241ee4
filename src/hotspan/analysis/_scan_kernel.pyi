"""Type stub of the statistics' per-batch kernels (_scan_kernel.pyx, compiled by Cython):
group codes, and counts, sums and durations by group, each in one pass over a batch."""

import numpy as np
import numpy.typing as npt

DENSE_LIMIT: int

def dense_codes(
    codes: list[npt.NDArray[np.int32]], sizes: list[int]
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int64]]: ...
def group_aggregates(
    group: npt.NDArray[np.int32],
    groups: int,
    duration: npt.NDArray[np.int64],
    self_ns: npt.NDArray[np.int64] | None = None,
    self_valid: npt.NDArray[np.bool_] | npt.NDArray[np.uint8] | None = None,
    wait: npt.NDArray[np.int64] | None = None,
    wait_valid: npt.NDArray[np.bool_] | npt.NDArray[np.uint8] | None = None,
    error: npt.NDArray[np.bool_] | npt.NDArray[np.uint8] | None = None,
    arg: npt.NDArray[np.int64] | None = None,
    arg_valid: npt.NDArray[np.bool_] | npt.NDArray[np.uint8] | None = None,
    ordered: bool = False,
) -> dict[str, np.ndarray]: ...
def select_ranks(
    pieces: list[np.ndarray],
    ranks: npt.NDArray[np.int64],
    least_known: int | None = None,
    most_known: int | None = None,
) -> npt.NDArray[np.int64]: ...
