"""hotspan.compare: the rank test and bootstrap interval against plain references, and the
verdicts on tables whose distributions are known."""
from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest

import hotspan
from hotspan._schema import TRACE_SCHEMA
from hotspan._selftime import with_self_ns
from hotspan.analysis.comparison import mann_whitney_u, median_ratio_interval


def durations_table(groups: dict[str, list[int]]) -> pa.Table:
    """Root spans, one after another, named after their group."""
    rows, t, sid = [], 0, 1
    for name, durations in groups.items():
        for d in durations:
            rows.append(dict(span_id=sid, parent_id=None, name=name, category="c", start_ns=t, end_ns=t + int(d),
                             duration_ns=int(d), depth=0, thread_id=1, thread_name="main", pid=1, rank=0, arg=None,
                             error=False))
            sid += 1
            t += int(d) + 10
    columns = {name: [r[name] for r in rows] for name in TRACE_SCHEMA.names}
    arrays = [pa.array(columns[f.name], pa.string()).dictionary_encode() if pa.types.is_dictionary(f.type)
              else pa.array(columns[f.name], f.type) for f in TRACE_SCHEMA]
    return with_self_ns(pa.Table.from_arrays(arrays, schema=TRACE_SCHEMA))


def reference_mwu(x, y) -> float:
    """U from every pair (ties count a half), variance with the tie correction, textbook style."""
    u = sum(1.0 if b > a else 0.5 if b == a else 0.0 for a in x for b in y)
    n1, n2 = len(x), len(y)
    n = n1 + n2
    ties = sum(t ** 3 - t for t in Counter(list(x) + list(y)).values())
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1))))
    z = (abs(u - n1 * n2 / 2) - 0.5) / sigma
    return min(1.0, math.erfc(max(z, 0) / math.sqrt(2)))


@pytest.mark.parametrize("seed", range(5))
def test_mann_whitney_u_matches_the_pairwise_definition(seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 15, rng.integers(3, 40))  # small integers: many ties
    y = rng.integers(2, 18, rng.integers(3, 40))
    assert mann_whitney_u(x, y) == pytest.approx(reference_mwu(x, y), rel=1e-12)


def test_mann_whitney_u_known_value_and_degenerate_cases():
    # Two fully separated samples of 6: U = 0, z = (18 - 0.5) / sqrt(39), p = erfc(z / sqrt 2)
    p = mann_whitney_u(np.arange(6), np.arange(10, 16))
    assert p == pytest.approx(math.erfc(17.5 / math.sqrt(39) / math.sqrt(2)))
    assert mann_whitney_u([5, 5, 5], [5, 5]) == 1.0  # all tied
    assert mann_whitney_u([], [1, 2]) == 1.0


@pytest.mark.parametrize("n", [7, 10])
def test_bootstrap_medians_follow_the_resampling_law(n):
    """The O(1) order-statistic draw gives the same distribution as resampling n values."""
    from hotspan.analysis.comparison import _bootstrap_medians

    rng = np.random.default_rng(1)
    values = np.sort(rng.normal(100, 10, n))
    resampled = np.median(rng.choice(values, (40_000, n)), axis=1)
    drawn = _bootstrap_medians(values, 40_000, np.random.default_rng(2))
    for q in (5, 25, 50, 75, 95):
        assert np.percentile(drawn, q) == pytest.approx(np.percentile(resampled, q), rel=0.01)


def test_median_ratio_interval_covers_the_shift_and_is_seeded():
    rng = np.random.default_rng(3)
    x = rng.normal(1000, 30, 400)
    y = rng.normal(1100, 30, 400)
    low, high = median_ratio_interval(x, y, rng=np.random.default_rng(0))
    assert low < 0.10 < high and high - low < 0.03
    assert median_ratio_interval(x, y, rng=np.random.default_rng(0)) == (low, high)


def test_an_outlier_moves_the_mean_not_the_verdict():
    rng = np.random.default_rng(4)
    base = rng.normal(1_000_000, 20_000, 200).astype(int)
    new = rng.normal(1_000_000, 20_000, 200).astype(int)
    new[0] = 40_000_000  # one stall: the mean moves by ~20%
    row, = hotspan.compare(durations_table({"x": base}), durations_table({"x": new})).to_pylist()
    assert row["mean_ns_change"] > 0.15
    assert row["verdict"] == "same" and abs(row["p50_ns_change"]) < 0.02


def test_a_shift_above_the_threshold_is_slower_below_it_same():
    rng = np.random.default_rng(5)
    base = rng.normal(1_000_000, 20_000, 100).astype(int)
    row, = hotspan.compare(durations_table({"x": base}), durations_table({"x": (base * 1.10).astype(int)})).to_pylist()
    assert row["verdict"] == "slower" and row["p_value"] < 0.01
    assert row["change_low"] > 0 and row["change_low"] < row["p50_ns_change"] < row["change_high"]
    row, = hotspan.compare(durations_table({"x": base}), durations_table({"x": (base * 0.9).astype(int)})).to_pylist()
    assert row["verdict"] == "faster"
    # Significant, but 2% is under the 5% threshold: not a regression.
    row, = hotspan.compare(durations_table({"x": base}), durations_table({"x": (base * 1.02).astype(int)})).to_pylist()
    assert row["p_value"] < 0.01 and row["verdict"] == "same"


def test_groups_on_one_side_and_too_few_spans():
    base = durations_table({"kept": [100, 110, 120], "went": [5]})
    new = durations_table({"kept": [100, 110], "came": [7]})
    rows = {r["name"]: r for r in hotspan.compare(base, new, min_count=3).to_pylist()}
    assert rows["went"]["verdict"] == "gone" and rows["came"]["verdict"] == "new"
    assert rows["kept"]["verdict"] == "few" and rows["kept"]["p_value"] is None


def test_bad_parameters():
    t = durations_table({"x": [1, 2, 3]})
    with pytest.raises(ValueError, match="alpha"):
        hotspan.compare(t, t, alpha=2)
    with pytest.raises(ValueError, match="resamples"):
        hotspan.compare(t, t, resamples=5)


def test_a_median_past_the_threshold_whose_interval_is_not_is_same():
    """Significant, the point estimate +6.4%, but the interval reaches down to +4.6%: not surely
    past the 5% threshold, so not called slower (a noisy run does not cry wolf)."""
    rng = np.random.default_rng(2)
    base = rng.normal(1_000_000, 60_000, 300).astype(int)
    new = (rng.normal(1_000_000, 60_000, 300) * 1.065).astype(int)
    row, = hotspan.compare(durations_table({"x": base}), durations_table({"x": new})).to_pylist()
    assert row["p_value"] < 1e-6 and row["p50_ns_change"] > 0.05 and row["change_low"] < 0.05
    assert row["verdict"] == "same"
    row, = hotspan.compare(durations_table({"x": base}), durations_table({"x": new}), threshold=0.03).to_pylist()
    assert row["verdict"] == "slower"
