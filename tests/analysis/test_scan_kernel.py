"""The statistics' per-batch kernels (hotspan.analysis._scan_kernel) against numpy's own
answers: group codes as _columns.combined_codes numbers them, exact sums that wrap as numpy's
do, durations ordered by group as a stable sort orders them, and order statistics as a full
sort gives them, on random, tied, extreme and mixed 32/64-bit values."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from hotspan._columns import combined_codes
from hotspan.analysis._kernels import group_codes, group_sums
from hotspan.analysis._scan_kernel import group_aggregates, select_ranks


def values(rng: np.random.Generator, kind: int, n: int) -> np.ndarray:
    if kind == 0:
        return rng.integers(-(2**62), 2**62, n)
    if kind == 1:
        return rng.integers(0, 5, n)  # ties everywhere
    if kind == 2:
        return np.exp(rng.normal(10, 3, n)).astype(np.int64)  # log-normal, long tail
    if kind == 3:
        return np.full(n, 7, np.int64)
    return np.concatenate([rng.integers(0, 100, n), [2**63 - 1, -(2**63)]])  # both extremes


@pytest.mark.parametrize("kind", range(5))
def test_select_ranks_is_a_full_sort_indexed(kind):
    rng = np.random.default_rng(kind)
    for _ in range(60):
        v = values(rng, kind, int(rng.integers(1, 4000)))
        pieces = np.split(v, np.sort(rng.integers(0, len(v), 3)))
        pieces = [  # some pieces in 4 bytes, as the scan keeps them where they fit
            p.astype(np.int32) if len(p) and p.min() >= -(2**31) and p.max() < 2**31 else p
            for p in pieces
        ]
        ranks = rng.integers(0, len(v), 6)
        assert (select_ranks(pieces, ranks) == np.sort(v)[ranks]).all()
    with pytest.raises(IndexError):
        select_ranks([np.arange(3)], np.array([3]))


def test_group_sums_and_order_match_numpy():
    rng = np.random.default_rng(7)
    n, groups = 50_000, 13
    group = rng.integers(0, groups, n)
    duration = np.where(rng.random(n) < 0.05, 0, rng.integers(0, 2**40, n))
    self_ns = rng.integers(-(2**62), 2**62, n)  # sums that wrap past 2**63
    arg = rng.integers(0, 2**50, n)
    arg_valid = rng.random(n) < 0.3
    error = rng.random(n) < 0.1
    table = pa.table(
        {
            "duration_ns": duration,
            "self_ns": pa.array(self_ns, mask=rng.random(n) < 0.01),
            "error": pa.array(error, mask=rng.random(n) < 0.01),
            "arg": pa.array(arg, mask=~arg_valid),
        }
    )
    sums = group_sums(table, group, groups, duration, ordered=True)

    def wrapped(values: np.ndarray, where: np.ndarray) -> np.ndarray:
        out = np.zeros(groups, np.int64)
        np.add.at(out, group[where], values[where])
        return out

    every = np.ones(n, np.bool_)
    self_kept = np.where(
        table.column("self_ns").is_valid().to_numpy(zero_copy_only=False), self_ns, 0
    )
    error_set = table.column("error").fill_null(False).to_numpy(zero_copy_only=False)
    assert (sums["n"] == np.bincount(group, minlength=groups)).all()
    assert (sums["total"] == wrapped(duration, every)).all()
    assert (sums["self_total"] == wrapped(self_kept, every)).all()
    assert (sums["wait_total"] == 0).all()
    assert (sums["errors"] == np.bincount(group[error_set], minlength=groups)).all()
    assert (sums["instants"] == np.bincount(group[duration == 0], minlength=groups)).all()
    assert (sums["args"] == np.bincount(group[arg_valid], minlength=groups)).all()
    assert (sums["arg_sum"] == wrapped(arg, arg_valid)).all()
    assert (sums["arg_time"] == wrapped(duration, arg_valid)).all()
    for g in range(groups):
        assert sums["lo"][g] == duration[group == g].min()
        assert sums["hi"][g] == duration[group == g].max()
    assert sums["ordered"].dtype == np.int64  # 2**40 does not fit in 4 bytes
    assert (sums["ordered"] == duration[np.argsort(group, kind="stable")]).all()
    narrow = group_aggregates(group.astype(np.int32), groups, duration % 1000, ordered=True)
    assert narrow["ordered"].dtype == np.int32
    assert (narrow["ordered"] == (duration % 1000)[np.argsort(group, kind="stable")]).all()


def test_group_codes_number_as_combined_codes():
    rng = np.random.default_rng(3)
    n = 20_000
    names = pa.array(rng.choice(["a", "b", "c", "d"], n)).dictionary_encode()
    categories = pa.array(rng.choice(["x", "y", None], n).tolist(), pa.string()).dictionary_encode()
    ranks = pa.array(rng.integers(0, 5, n).astype(np.int32))
    table = pa.table({"category": categories, "name": names, "rank": ranks})
    for by in (("category", "name"), ("rank", "name"), ("name",), ("category", "rank", "name")):
        code, representative = group_codes(table, by)
        expected, expected_rep = combined_codes(table, by)
        assert (code == expected).all(), by
        assert (code[representative] == np.arange(len(representative))).all(), by
        assert len(representative) == len(expected_rep), by


def test_select_ranks_with_the_extremes_given():
    rng = np.random.default_rng(11)
    v = np.exp(rng.normal(10, 3, 10_000)).astype(np.int64)
    pieces = np.split(v, [100, 5000])
    ranks = np.array([0, 17, 5000, 9999])
    got = select_ranks(pieces, ranks, int(v.min()), int(v.max()))
    assert (got == np.sort(v)[ranks]).all()
    with pytest.raises(ValueError, match="outside"):  # extremes that are not: refused, no write
        select_ranks(pieces, ranks, int(v.min()) + 1, int(v.max()))


def test_group_sums_take_a_column_of_nulls_only_as_no_args():
    table = pa.table(
        {
            "duration_ns": pa.array([5, 7], pa.int64()),
            "self_ns": pa.array([5, 7], pa.int64()),
            "error": pa.array([False, True]),
            "arg": pa.nulls(2),
        }
    )
    sums = group_sums(table, np.zeros(2, np.int64), 1, np.array([5, 7]))
    assert (sums["args"], sums["arg_sum"], sums["errors"], sums["total"]) == ([0], [0], [1], [12])
