"""The tests behind ``compare``'s verdicts, in numpy alone (no scipy): the Mann-Whitney U
rank test (normal approximation, tie corrected), Welch's t-test (for pytest-benchmark's
summaries), and the seeded bootstrap interval of a median's (or a quantile's) change."""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "mann_whitney_u",
    "median_ratio_interval",
    "welch_t_test",
]


def mann_whitney_u(x: np.ndarray, y: np.ndarray) -> float:
    """Two-sided p-value of the Mann-Whitney U test that ``x`` and ``y`` come from one
    distribution: the normal approximation with continuity and tie corrections (what
    ``scipy.stats.mannwhitneyu(method="asymptotic")`` computes). 1.0 when a side is empty or
    every value is the same."""
    x = np.asarray(x, np.float64)
    y = np.asarray(y, np.float64)
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        return 1.0
    both = np.concatenate((x, y))
    values, inverse, counts = np.unique(both, return_inverse=True, return_counts=True)
    # Average rank of each distinct value: the ranks it spans, 1-based, averaged (ties).
    first_rank = np.cumsum(counts) - counts + 1
    average_rank = first_rank + (counts - 1) / 2.0
    rank_sum_y = float(average_rank[inverse[n1:]].sum())
    u_y = rank_sum_y - n2 * (n2 + 1) / 2.0
    n = n1 + n2
    ties = float(((counts.astype(np.float64) ** 3) - counts).sum())
    variance = n1 * n2 / 12.0 * ((n + 1) - ties / (n * (n - 1))) if n > 1 else 0.0
    if variance <= 0:
        return 1.0
    mean = n1 * n2 / 2.0
    z = (abs(u_y - mean) - 0.5) / math.sqrt(variance)
    return min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2.0)))


def welch_t_test(
    base: tuple[float, float, int],
    new: tuple[float, float, int],
    *,
    confidence: float = 0.95,
) -> tuple[float, float, float]:
    """Welch's t-test on two summaries, each (mean, standard deviation, number of samples):
    the two-sided p-value that the means are equal, and the interval (at ``confidence``) of
    the means' relative change ``new / base - 1`` (on the log scale, by the delta method,
    with Welch-Satterthwaite degrees of freedom). What judges a benchmark whose file kept
    its summary but not its rounds. (1.0, change, change) when a side has under two samples
    or no spread."""
    (mb, sb, nb), (ma, sa, na) = base, new
    change = ma / mb - 1 if mb > 0 else (0.0 if ma == 0 else math.inf)
    if nb < 2 or na < 2 or mb <= 0 or ma <= 0:
        return 1.0, change, change
    vb, va = sb * sb / nb, sa * sa / na
    se = math.sqrt(vb + va)
    if se == 0:
        return (1.0 if ma == mb else 0.0), change, change
    p = _t_two_sided(abs(ma - mb) / se, _welch_df(vb, nb, va, na))
    # the interval of log(ma / mb): each mean's relative variance
    lb, la = vb / (mb * mb), va / (ma * ma)
    half = _t_quantile(confidence, _welch_df(lb, nb, la, na)) * math.sqrt(lb + la)
    ratio = math.log(ma / mb)
    return p, math.exp(ratio - half) - 1, math.exp(ratio + half) - 1


def _welch_df(v1: float, n1: int, v2: float, n2: int) -> float:
    denominator = v1 * v1 / (n1 - 1) + v2 * v2 / (n2 - 1)
    return (v1 + v2) ** 2 / denominator if denominator > 0 else float(n1 + n2 - 2)


def _t_two_sided(t: float, df: float) -> float:
    """P(|T| >= t) for Student's t with ``df`` degrees of freedom: I_{df/(df+t²)}(df/2, 1/2)."""
    if not math.isfinite(t):
        return 0.0
    return min(1.0, _betainc(df / 2.0, 0.5, df / (df + t * t)))


def _t_quantile(confidence: float, df: float) -> float:
    """The t with P(|T| >= t) = 1 - confidence (bisection: 200 halvings of [0, 1e6])."""
    low, high = 0.0, 1e6
    for _ in range(200):
        mid = (low + high) / 2
        if _t_two_sided(mid, df) > 1 - confidence:
            low = mid
        else:
            high = mid
    return (low + high) / 2


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b) (Numerical Recipes' continued
    fraction, by Lentz's method)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f / a


def median_ratio_interval(
    x: np.ndarray,
    y: np.ndarray,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    rng: np.random.Generator | None = None,
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``median(y) / median(x) - 1``.

    Resampling n values and taking their median costs O(n) per resample, too much at a
    million spans; but the median of a resample *is* an order statistic of the sorted sample,
    whose index has a known law. The k-th smallest of n uniform indices is
    ``floor(n * U_(k))`` with ``U_(k) ~ Beta(k, n + 1 - k)``, and the next one up is
    ``U_(k) + (1 - U_(k)) * Beta(1, n - k)`` (the least of the n - k draws above it). So each
    resampled median is drawn in O(1), exactly as the resampling would give it.
    """
    rng = rng if rng is not None else np.random.default_rng(0)
    xs = np.sort(np.asarray(x, np.float64))
    ys = np.sort(np.asarray(y, np.float64))
    mx = bootstrap_medians(xs, resamples, rng)
    my = bootstrap_medians(ys, resamples, rng)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(mx > 0, my / mx - 1.0, np.where(my > 0, np.inf, 0.0))
    tail = (1.0 - confidence) / 2.0 * 100
    low, high = np.percentile(ratio, [tail, 100 - tail])
    return float(low), float(high)


def bootstrap_medians(
    sorted_values: np.ndarray, resamples: int, rng: np.random.Generator
) -> np.ndarray:
    n = len(sorted_values)
    if n == 1:
        return np.full(resamples, sorted_values[0])
    k = (n + 1) // 2  # 1-based rank of the (lower) median
    lower_u = rng.beta(k, n + 1 - k, resamples)
    lower = sorted_values[np.minimum((lower_u * n).astype(np.int64), n - 1)]
    if n % 2:
        return lower
    upper_u = lower_u + (1.0 - lower_u) * rng.beta(1, n - k, resamples)
    upper = sorted_values[np.minimum((upper_u * n).astype(np.int64), n - 1)]
    return np.asarray((lower + upper) / 2.0)
